"""The service's Kubernetes adapters (KubeApi, ApiClaimSource, ApiStatusSink, the kubelet helper with the network driver) against the
test API server, through the real kubernetes client."""

from __future__ import annotations

import time

import pytest

from dracni.claims.api_source import ApiClaimSource
from dracni.claims.driver import network_plugin
from dracni.claims.prepare import Resolver
from dracni.kube.api import ApiError, KubeApi, load_api_client
from dracni.kube.status_sink import ApiStatusSink
from dracni.kubelet.driver import ClaimRef
from dracni.state import facts
from dracni.state.store import StateDir
from dracni.status.sink import SinkError
from tests.fakes.apiserver import FakeApiServer
from tests.kubeclient import serving

DRIVER = "dracni.io"
NODE = "node-a"
PARAMS = {
    "apiVersion": "dracni.io/v1alpha1",
    "kind": "NetworkAttachment",
    "config": {"cniVersion": "1.0.0", "name": "mv", "plugins": [{"type": "macvlan", "master": "eth1"}]},
}


@pytest.fixture
def fake(tmp_path):
    with serving(tmp_path, NODE) as server:
        yield server


@pytest.fixture
def api(api_client) -> KubeApi:
    return KubeApi(api_client)


def make_claim(fake: FakeApiServer, name: str, *, pool: str = NODE, allocate: bool = True) -> dict:
    opaque = {"driver": DRIVER, "parameters": PARAMS}
    fake.create_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "devices": {
                    "requests": [{"name": "net", "exactly": {"deviceClassName": DRIVER}}],
                    "config": [{"requests": ["net"], "opaque": opaque}],
                }
            },
        }
    )
    if allocate:
        fake.set_claim_allocation(
            "default",
            name,
            {
                "devices": {
                    "results": [{"request": "net", "driver": DRIVER, "pool": pool, "device": "eth1"}],
                    "config": [{"source": "FromClass", "requests": ["net"], "opaque": opaque}],
                }
            },
            [{"resource": "pods", "name": "demo", "uid": "pod-uid-1"}],
        )
    return fake.get_claim("default", name)


def entry(driver: str = DRIVER, ip: str = "10.0.0.5/24") -> dict:
    return {
        "driver": driver,
        "pool": NODE,
        "device": "eth1",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "NetworkInterfaceReady",
                "message": "net1 configured",
                "lastTransitionTime": "2026-11-21T05:00:00Z",
            }
        ],
        "networkData": {"interfaceName": "net1", "ips": [ip]},
    }


def ref(claim: dict) -> ClaimRef:
    return ClaimRef(claim["metadata"]["namespace"], claim["metadata"]["uid"], claim["metadata"]["name"])


def test_get_and_missing_claims(fake, api):
    claim = make_claim(fake, "a")
    assert api.get_claim("default", "a")["metadata"]["uid"] == claim["metadata"]["uid"]
    assert api.get_claim("default", "nope") is None


def test_server_down_is_a_retryable_error(fake, api):
    fake.stop()
    with pytest.raises(ApiError) as info:
        api.get_claim("default", "a")
    assert info.value.status == 0 and info.value.retryable


def test_watch_delivers_events_and_410_after_compaction(fake, api):
    from dracni.inventory.nics import Nic
    from dracni.inventory.slices import build_slices

    selector = f"spec.nodeName={NODE},spec.driver={DRIVER}"
    _, rv = api.list_slices(selector)
    (body,) = build_slices(driver=DRIVER, node_name=NODE, node_uid=None, nics=[Nic("eth1", 2)], generation=1)
    api.create_slice(body)
    events = []
    for kind, obj in api.watch_slices(selector, rv, timeout_seconds=1):
        events.append((kind, obj["metadata"]["name"]))
        break
    assert events == [("ADDED", body["metadata"]["name"])]
    fake.compact()
    with pytest.raises(ApiError) as info:
        list(api.watch_slices(selector, rv, timeout_seconds=1))
    assert info.value.status == 410


def test_claims_are_read_when_kubelet_names_them(fake, api):
    """No list, no watch: each read is a GET of that claim, so it is never stale."""
    source = ApiClaimSource(api)
    claim = make_claim(fake, "c1")
    fake.reset_requests()
    assert source.get("default", "c1")["metadata"]["uid"] == claim["metadata"]["uid"]
    assert source.get("default", "gone") is None
    assert [(r.method, r.watch) for r in fake.requests] == [("GET", False), ("GET", False)]
    assert all("/namespaces/default/resourceclaims/" in r.path for r in fake.requests)


def test_status_sink_applies_only_our_entries(fake, api):
    claim = make_claim(fake, "s")
    fake.set_claim_allocation(
        "default",
        "s",
        {
            **claim["status"]["allocation"],
            "devices": {
                **claim["status"]["allocation"]["devices"],
                "results": claim["status"]["allocation"]["devices"]["results"]
                + [{"request": "net", "driver": "other.example.com", "pool": NODE, "device": "eth1"}],
            },
        },
        claim["status"]["reservedFor"],
    )
    other = KubeApi(load_api_client(fake.other_kubeconfig_path))
    other.apply_claim_status("default", "s", [entry("other.example.com")], field_manager="other.example.com")
    sink = ApiStatusSink(api)
    ref_ = {"uid": claim["metadata"]["uid"], "namespace": "default", "name": "s"}

    sink.apply(ref_, DRIVER, [entry()])
    drivers = sorted(d["driver"] for d in fake.get_claim("default", "s")["status"]["devices"])
    assert drivers == [DRIVER, "other.example.com"]
    sink.apply(ref_, DRIVER, [])
    assert [d["driver"] for d in fake.get_claim("default", "s")["status"]["devices"]] == ["other.example.com"]


def test_status_sink_errors_say_whether_to_retry(fake, api):
    claim = make_claim(fake, "e")
    sink = ApiStatusSink(api)
    ref_ = {"uid": claim["metadata"]["uid"], "namespace": "default", "name": "e"}
    with pytest.raises(SinkError) as info:
        sink.apply(ref_, DRIVER, [entry(ip="10.0.0.5")])  # not CIDR: 422
    assert not info.value.retryable and "networkData.ips[0]" in str(info.value)
    with pytest.raises(SinkError) as info:
        sink.apply({**ref_, "name": "deleted"}, DRIVER, [entry()])
    assert not info.value.retryable and "no longer exists" in str(info.value)
    fake.stop()
    with pytest.raises(SinkError) as info:
        sink.apply(ref_, DRIVER, [entry()])
    assert info.value.retryable


def test_preparer_checks_uid_pool_and_allocation(fake, api, tmp_path):
    state = StateDir(str(tmp_path / "state"))
    preparer, _ = network_plugin(Resolver(state=state, driver=DRIVER, node=NODE), claims=ApiClaimSource(api))
    good = make_claim(fake, "good")
    elsewhere = make_claim(fake, "elsewhere", pool="node-b")
    pending = make_claim(fake, "pending", allocate=False)
    stale = ClaimRef("default", "0000-old-uid", "good")

    outcomes = preparer.prepare(
        [ref(good), ref(elsewhere), ref(pending), stale, ClaimRef("default", "u-missing", "missing")]
    )

    assert outcomes[good["metadata"]["uid"]].error is None
    assert outcomes[good["metadata"]["uid"]].devices == [
        {"request": "net", "pool": NODE, "device": "eth1", "shareID": None}
    ]
    assert "not from this node node-a" in outcomes[elsewhere["metadata"]["uid"]].error
    assert "not allocated" in outcomes[pending["metadata"]["uid"]].error
    assert "deleted and re-created" in outcomes["0000-old-uid"].error
    assert "not found" in outcomes["u-missing"].error
    assert [c["uid"] for c in state.list_claims()] == [good["metadata"]["uid"]]
    assert preparer.unprepare([ref(good), stale]) == {good["metadata"]["uid"]: None, "0000-old-uid": None}
    assert state.list_claims() == []


def test_a_claim_re_reserved_for_a_new_pod_is_prepared_for_that_pod(fake, api, tmp_path):
    """The scheduler re-reserved the claim: the fresh GET names the new pod, so the CNI plugin
    finds the new pod's claims."""
    state = StateDir(str(tmp_path / "state"))
    claim = make_claim(fake, "reused")  # reserved for pod-uid-1
    fake.set_claim_allocation(
        "default", "reused", claim["status"]["allocation"], [{"resource": "pods", "name": "next", "uid": "pod-uid-2"}]
    )
    preparer, _ = network_plugin(Resolver(state=state, driver=DRIVER, node=NODE), claims=ApiClaimSource(api))

    assert preparer.prepare([ref(claim)])[claim["metadata"]["uid"]].error is None
    assert state.pod_claim_uids("pod-uid-2", None, None) == [claim["metadata"]["uid"]]
    assert state.pod_claim_uids("pod-uid-1", None, None) == []


def test_a_recreated_claim_never_gets_the_old_claims_status(fake, api):
    """The apply carries metadata.uid: the server refuses (409) to give another claim of the
    same name the status, and the drain drops it for good."""

    old = make_claim(fake, "re")
    old_ref = {"uid": old["metadata"]["uid"], "namespace": "default", "name": "re"}
    fake.delete_claim("default", "re")
    new = make_claim(fake, "re")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    with pytest.raises(SinkError) as info:
        ApiStatusSink(api).apply(old_ref, DRIVER, [entry()])
    assert not info.value.retryable and "was re-created" in str(info.value)
    assert not (fake.get_claim("default", "re").get("status") or {}).get("devices")


def test_an_authorization_refusal_is_retried_never_dropped(fake, api, tmp_path):
    """RBAC missing (403): the outbox record stays pending, reported as forbidden, and goes out
    once the grant is there."""
    from dracni.status.drain import drain_outbox

    claim = make_claim(fake, "auth")
    state = StateDir(str(tmp_path / "state"))
    outbox_claim = {"uid": claim["metadata"]["uid"], "namespace": "default", "name": "auth", "driver": DRIVER}
    fact = {
        "request": "net", "pool": NODE, "device": "eth1", "shareID": None, "ifName": "net1", "ready": True,
        "result": {"cniVersion": "1.0.0", "interfaces": [{"name": "net1", "sandbox": "/x"}],
                   "ips": [{"address": "10.0.0.5/24", "interface": 0}]},
        "error": None, "containerID": "c1", "podUID": "p1", "updatedAt": "2026-11-21T05:00:00Z",
    }  # fmt: skip
    facts.update_outbox(state, outbox_claim, lambda facts: [fact])
    fake.authorizer = lambda attrs: not (attrs.resource == "resourceclaims" and attrs.subresource == "status")

    report = drain_outbox(state, ApiStatusSink(api), driver=DRIVER)
    assert report.forbidden == {claim["metadata"]["uid"]} and not report.dropped
    assert "resourceclaims/status" in report.failed[claim["metadata"]["uid"]]
    assert state.pending_outbox()

    fake.authorizer = None
    report = drain_outbox(state, ApiStatusSink(api), driver=DRIVER)
    assert report.published == 1 and not state.pending_outbox()
    assert fake.get_claim("default", "auth")["status"]["devices"][0]["networkData"]["ips"] == ["10.0.0.5/24"]


def test_a_forbidden_422_is_an_authorization_refusal() -> None:
    """1.36's per-device status authorization answers 422 with a field.Forbidden cause."""

    class Refusing:  # the KubeApi port, answering as the 1.36 server does
        def apply_claim_status(self, *args, **kwargs):
            raise ApiError(
                422, 'ResourceClaim.resource.k8s.io "c" is invalid: status.devices[0]: Forbidden: not authorized'
            )

    with pytest.raises(SinkError) as info:
        ApiStatusSink(Refusing()).apply({"uid": "u", "namespace": "n", "name": "c"}, DRIVER, [entry()])
    assert info.value.forbidden and info.value.retryable


def test_requests_say_they_are_dracni(fake):
    from dracni import __version__

    api = KubeApi(load_api_client(fake.kubeconfig_path, node=NODE))
    api.list_slices(f"spec.nodeName={NODE}")
    (request,) = fake.requests_to("GET", "/resourceslices")
    assert request.user_agent == f"dracni/{__version__} ({NODE})"


def _gate_claim_gets(fake: FakeApiServer, gate) -> None:
    """Run ``gate(name)`` inside the API server while it serves the GET of a claim (its
    authorizer hook runs in the request's own thread, before the answer)."""

    def authorizer(attrs) -> bool:
        if attrs.resource == "resourceclaims" and attrs.verb == "get" and not attrs.subresource:
            gate(attrs.name)
        return True

    fake.authorizer = authorizer


def test_the_claims_of_a_batch_are_read_at_the_same_time(fake, api, tmp_path):
    """Each read is an API round trip: a batch reads its claims concurrently.  The API server
    holds every GET until all three are in flight; read one after another, they would break
    the barrier (and fail to prepare)."""
    import threading

    claims = [make_claim(fake, name) for name in ("a", "b", "c")]
    barrier = threading.Barrier(3, timeout=10)
    _gate_claim_gets(fake, lambda _name: barrier.wait())
    resolver = Resolver(state=StateDir(str(tmp_path / "state")), driver=DRIVER, node=NODE)
    preparer, _ = network_plugin(resolver, claims=ApiClaimSource(api))
    try:
        outcomes = preparer.prepare([ref(c) for c in claims])
    finally:
        preparer.close()

    assert {uid: o.error for uid, o in outcomes.items()} == dict.fromkeys((c["metadata"]["uid"] for c in claims), None)
    assert not barrier.broken


def test_a_slow_claim_holds_up_no_other_claim(fake, api, tmp_path):
    """Kubelet prepares pods in parallel: a call stuck on one claim's read does not hold the
    state lock or the claims of other calls."""
    import threading

    slow, quick = make_claim(fake, "slow"), make_claim(fake, "quick")
    release, stuck = threading.Event(), threading.Event()

    def gate(name: str) -> None:
        if name == "slow":
            stuck.set()
            release.wait(10)

    _gate_claim_gets(fake, gate)
    state = StateDir(str(tmp_path / "state"))
    preparer, _ = network_plugin(Resolver(state=state, driver=DRIVER, node=NODE), claims=ApiClaimSource(api))
    slow_outcome: dict = {}
    worker = threading.Thread(target=lambda: slow_outcome.update(preparer.prepare([ref(slow)])))
    worker.start()
    try:
        assert stuck.wait(10)
        assert preparer.prepare([ref(quick)])[quick["metadata"]["uid"]].error is None
        assert [c["name"] for c in state.list_claims()] == ["quick"]
        assert preparer.unprepare([ref(quick)]) == {quick["metadata"]["uid"]: None}
    finally:
        release.set()
        worker.join(10)
    assert slow_outcome[slow["metadata"]["uid"]].error is None
    assert [c["name"] for c in state.list_claims()] == ["slow"]


def test_a_watch_left_unread_gives_its_connection_back(fake):
    """The pool blocks at its size (no extra connections): a watch abandoned after its first
    event must free its connection, or the next request would wait REQUEST_TIMEOUT for one."""
    from dracni.inventory.nics import Nic
    from dracni.inventory.slices import build_slices
    from dracni.kube.api import KubeClient

    configuration = load_api_client(fake.kubeconfig_path).configuration
    configuration.connection_pool_maxsize = 1
    one = KubeApi(KubeClient(configuration))
    selector = f"spec.nodeName={NODE},spec.driver={DRIVER}"
    _, rv = one.list_slices(selector)
    (body,) = build_slices(driver=DRIVER, node_name=NODE, node_uid=None, nics=[Nic("eth1", 2)], generation=1)
    one.create_slice(body)
    for _ in range(3):
        stream = one.watch_slices(selector, rv, timeout_seconds=30)
        assert next(stream)[0] == "ADDED"
        stream.close()  # abandoned with the server still sending
        started = time.monotonic()
        assert one.list_slices(selector)[0]
        assert time.monotonic() - started < 5
    one.api_client.close()
