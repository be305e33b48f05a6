"""The fake API server (tests/fakes/apiserver/), driven only by the real kubernetes client 37.x.

These tests pin two things: that the fake behaves like kube-apiserver for what dracni uses, and
how the kubernetes Python client surfaces it (exception classes, watch 410s, content types),
so that dracni's own tests can rely on both.
"""

from __future__ import annotations

import http.client
import json
import threading
import time

import pydantic
import pytest
import urllib3
import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import (
    ApiException,
    ConflictException,
    ForbiddenException,
    NotFoundException,
    UnauthorizedException,
    UnprocessableEntityException,
)

from tests.fakes.apiserver import APPLY_PATCH, MERGE_PATCH, FakeApiServer
from tests.kubeclient import client_for, serving

NODE = "node-a"
DRIVER_A = "a.dracni.io"
DRIVER_B = "b.example.com"
NS = "team-1"
READY = [
    {
        "type": "Ready",
        "status": "True",
        "reason": "NetworkInterfaceReady",
        "message": "net1 configured",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }
]


# -- fixtures and helpers ----------------------------------------------------------------------------
@pytest.fixture
def fake(tmp_path):
    with serving(tmp_path) as server:
        yield server


@pytest.fixture
def core(api_client) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


def claim(name: str, namespace: str = NS, labels: dict | None = None) -> dict:
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "net", "exactly": {"deviceClassName": "dracni.io"}}]}},
    }
    if labels:
        obj["metadata"]["labels"] = labels
    return obj


def allocation(*devices: tuple[str, str]) -> dict:
    """``status.allocation`` with (driver, device) results in pool NODE."""
    return {"devices": {"results": [{"request": "net", "driver": d, "pool": NODE, "device": n} for d, n in devices]}}


def allocated_claim(fake: FakeApiServer, name: str = "c1", *devices: tuple[str, str]) -> dict:
    devices = devices or ((DRIVER_A, "eth1"), (DRIVER_A, "eth3"), (DRIVER_B, "eth2"))
    fake.create_claim(claim(name))
    return fake.set_claim_allocation(
        NS,
        name,
        allocation(*devices),
        [{"resource": "pods", "name": "pod-1", "uid": "0b6c7bd8-0000-4000-8000-000000000001"}],
    )


def entry(driver: str, device: str, *, ips: list[str] | None = None, **extra) -> dict:
    item = {
        "driver": driver,
        "pool": NODE,
        "device": device,
        "conditions": READY,
        "networkData": {"interfaceName": "net1", "ips": ips if ips is not None else ["10.0.0.5/24"]},
    }
    item.update(extra)
    return item


def status_body(name: str, devices: list[dict], namespace: str = NS) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "status": {"devices": devices},
    }


def apply(rapi, manager: str, devices: list[dict], name: str = "c1", force: bool | None = True):
    return rapi.patch_namespaced_resource_claim_status(
        name, NS, status_body(name, devices), field_manager=manager, force=force, _content_type=APPLY_PATCH
    )


def device_ids(claim_obj) -> list[tuple[str, str]]:
    if isinstance(claim_obj, dict):
        return [(d["driver"], d["device"]) for d in (claim_obj.get("status") or {}).get("devices") or []]
    return [(d.driver, d.device) for d in (claim_obj.status.devices or [])]


def body_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


def slice_obj(
    name: str,
    node: str | None = NODE,
    driver: str = DRIVER_A,
    devices: list[dict] | None = None,
    labels: dict | None = None,
    **spec_extra,
) -> dict:
    spec = {
        "driver": driver,
        "pool": {"name": node or "pool", "generation": 1, "resourceSliceCount": 1},
        "devices": devices
        if devices is not None
        else [{"name": "eth1", "attributes": {"dracni.io/ifName": {"string": "eth1"}, "mtu": {"int": 1500}}}],
    }
    if node:
        spec["nodeName"] = node
    spec.update(spec_extra)
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}
    if labels:
        obj["metadata"]["labels"] = labels
    return obj


def raw_call(
    api_client: client.ApiClient,
    method: str,
    path: str,
    body,
    response_type: str,
    content_type: str = "application/json",
    query: list | None = None,
):
    """A request the typed API methods would not send, with the client's auth and error handling."""
    params = api_client.param_serialize(
        method=method,
        resource_path=path,
        query_params=query or [],
        header_params={"Content-Type": content_type, "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    resp = api_client.call_api(*params)
    resp.read()
    return api_client.response_deserialize(resp, {"200": response_type, "201": response_type}).data


def collect(stream, limit: int | None = None) -> list[dict]:
    events = []
    for event in stream:
        events.append(event)
        if limit is not None and len(events) >= limit:
            break
    return events


# -- reading claims ------------------------------------------------------------------------------------
def test_get_returns_a_typed_claim_with_server_metadata(fake, rapi):
    stored = allocated_claim(fake)
    got = rapi.read_namespaced_resource_claim("c1", NS)
    assert isinstance(got, client.ResourceV1ResourceClaim)
    assert got.kind == "ResourceClaim" and got.api_version == "resource.k8s.io/v1"
    assert got.metadata.uid == stored["metadata"]["uid"]
    assert got.metadata.resource_version == stored["metadata"]["resourceVersion"] == fake.resource_version
    assert got.metadata.generation == 1 and got.metadata.creation_timestamp is not None
    assert got.status.allocation.devices.results[0].device == "eth1"
    assert got.status.reserved_for[0].name == "pod-1"
    assert {m.manager for m in got.metadata.managed_fields} >= {"kube-scheduler"}
    assert rapi.read_namespaced_resource_claim_status("c1", NS).metadata.uid == stored["metadata"]["uid"]


def test_missing_claim_is_404_with_a_status_body(fake, rapi):
    with pytest.raises(NotFoundException) as info:
        rapi.read_namespaced_resource_claim("nope", NS)
    assert info.value.status == 404
    assert body_of(info.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'resourceclaims.resource.k8s.io "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "group": "resource.k8s.io", "kind": "resourceclaims"},
        "code": 404,
    }
    with pytest.raises(NotFoundException):
        rapi.read_namespaced_resource_claim("c1", "no-such-namespace")


def test_list_in_a_namespace_and_across_namespaces(fake, rapi):
    fake.create_claim(claim("a", "ns-1"))
    fake.create_claim(claim("b", "ns-2"))
    fake.create_claim(claim("c", "ns-2"))
    everywhere = rapi.list_resource_claim_for_all_namespaces()
    assert [(c.metadata.namespace, c.metadata.name) for c in everywhere.items] == [
        ("ns-1", "a"),
        ("ns-2", "b"),
        ("ns-2", "c"),
    ]
    assert everywhere.metadata.resource_version == fake.resource_version
    assert everywhere.kind == "ResourceClaimList"
    assert everywhere.items[0].kind is None  # like kube-apiserver: list items carry no kind
    assert [c.metadata.name for c in rapi.list_namespaced_resource_claim("ns-2").items] == ["b", "c"]
    assert rapi.list_namespaced_resource_claim("empty").items == []


def test_list_label_and_field_selectors(fake, rapi):
    fake.create_claim(claim("a", "ns-1", labels={"app": "web", "tier": "1"}))
    fake.create_claim(claim("b", "ns-1", labels={"app": "db"}))
    fake.create_claim(claim("c", "ns-2", labels={"app": "web"}))

    def names(**kw):
        return [c.metadata.name for c in rapi.list_resource_claim_for_all_namespaces(**kw).items]

    assert names(label_selector="app=web") == ["a", "c"]
    assert names(label_selector="app in (db,web),tier") == ["a"]
    assert names(label_selector="app!=web") == ["b"]
    assert names(label_selector="!tier,app notin (db)") == ["c"]
    assert names(field_selector="metadata.namespace=ns-1") == ["a", "b"]
    assert names(field_selector="metadata.name=c") == ["c"]
    assert names(field_selector="metadata.namespace=ns-1,metadata.name!=a") == ["b"]
    with pytest.raises(ApiException) as info:
        names(field_selector="spec.nodeName=x")
    assert info.value.status == 400 and "field label not supported: spec.nodeName" in body_of(info.value)["message"]


# -- writing claims ------------------------------------------------------------------------------------
def test_create_claim_over_http(fake, rapi):
    fake.add_namespace(NS)
    body = claim("made")
    body["status"] = {"allocation": allocation((DRIVER_A, "eth1"))}
    created = rapi.create_namespaced_resource_claim(NS, body)
    assert created.metadata.uid and created.metadata.generation == 1
    assert created.status is None  # PrepareForCreate drops the status
    assert fake.requests[-1].status == 201

    with pytest.raises(ConflictException) as info:
        rapi.create_namespaced_resource_claim(NS, claim("made"))
    assert body_of(info.value)["reason"] == "AlreadyExists"
    assert body_of(info.value)["message"] == 'resourceclaims.resource.k8s.io "made" already exists'

    with pytest.raises(NotFoundException) as info:
        rapi.create_namespaced_resource_claim("ghost", claim("x", "ghost"))
    assert body_of(info.value)["message"] == 'namespaces "ghost" not found'


def test_update_with_a_stale_resource_version_is_409(fake, rapi):
    allocated_claim(fake)
    current = rapi.read_namespaced_resource_claim("c1", NS)
    current.metadata.labels = {"x": "1"}
    updated = rapi.replace_namespaced_resource_claim("c1", NS, current)
    assert int(updated.metadata.resource_version) > int(current.metadata.resource_version)
    assert updated.metadata.labels == {"x": "1"} and updated.metadata.generation == 1
    assert updated.status.allocation is not None  # PUT on the main resource keeps the status

    current.metadata.labels = {"x": "2"}  # still the old resourceVersion
    with pytest.raises(ConflictException) as info:
        rapi.replace_namespaced_resource_claim("c1", NS, current)
    assert body_of(info.value)["reason"] == "Conflict"
    assert body_of(info.value)["message"] == (
        'Operation cannot be fulfilled on resourceclaims.resource.k8s.io "c1": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )


def test_claim_spec_is_immutable(fake, rapi):
    allocated_claim(fake)
    current = rapi.read_namespaced_resource_claim("c1", NS)
    current.spec.devices.requests[0].name = "other"
    with pytest.raises(UnprocessableEntityException) as info:
        rapi.replace_namespaced_resource_claim("c1", NS, current)
    body = body_of(info.value)
    assert body["details"]["causes"][0]["field"] == "spec"
    assert "field is immutable" in body["message"]


def test_delete_claim_returns_it_and_honours_finalizers(fake, rapi):
    allocated_claim(fake)
    deleted = rapi.delete_namespaced_resource_claim("c1", NS)
    assert deleted.metadata.name == "c1"
    with pytest.raises(NotFoundException):
        rapi.read_namespaced_resource_claim("c1", NS)
    with pytest.raises(NotFoundException):
        rapi.delete_namespaced_resource_claim("c1", NS)

    body = claim("kept")
    body["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    fake.create_claim(body)
    marked = rapi.delete_namespaced_resource_claim("kept", NS)
    assert marked.metadata.deletion_timestamp is not None
    assert fake.get_claim(NS, "kept") is not None
    marked.metadata.finalizers = []
    rapi.replace_namespaced_resource_claim("kept", NS, marked)
    assert fake.get_claim(NS, "kept") is None


# -- watch -------------------------------------------------------------------------------------------
def test_watch_replays_added_modified_deleted_after_a_resource_version(fake, rapi):
    fake.add_namespace(NS)
    start = fake.resource_version
    fake.create_claim(claim("c1"))
    fake.set_claim_allocation(NS, "c1", allocation((DRIVER_A, "eth1")), None)
    fake.delete_claim(NS, "c1")
    w = watch.Watch(return_type=client.ResourceV1ResourceClaim)
    events = collect(w.stream(rapi.list_namespaced_resource_claim, NS, resource_version=start, timeout_seconds=1))
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert all(isinstance(e["object"], client.ResourceV1ResourceClaim) for e in events)
    assert events[1]["object"].status.allocation.devices.results[0].device == "eth1"
    assert [e["raw_object"]["metadata"]["resourceVersion"] for e in events] == [
        str(int(start) + 1),
        str(int(start) + 2),
        str(int(start) + 3),
    ]
    assert w.resource_version == fake.resource_version


def test_watch_without_resource_version_starts_with_the_current_objects(fake, rapi):
    fake.create_claim(claim("a"))
    fake.create_claim(claim("b", "elsewhere"))
    w = watch.Watch(return_type=client.ResourceV1ResourceClaim)
    events = collect(w.stream(rapi.list_resource_claim_for_all_namespaces, timeout_seconds=1))
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "b"), ("ADDED", "a")]


def test_watch_delivers_live_events_and_stops(fake, rapi):
    listed = rapi.list_resource_claim_for_all_namespaces()
    seen: list[tuple[str, str]] = []
    w = watch.Watch(return_type=client.ResourceV1ResourceClaim)

    def run():
        for event in w.stream(
            rapi.list_resource_claim_for_all_namespaces,
            resource_version=listed.metadata.resource_version,
            timeout_seconds=10,
        ):
            seen.append((event["type"], event["object"].metadata.name))
            if event["type"] == "DELETED":
                w.stop()

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.2)
    allocated_claim(fake, "live")
    rapi.delete_namespaced_resource_claim("live", NS)
    thread.join(5)
    assert not thread.is_alive()
    assert seen == [("ADDED", "live"), ("MODIFIED", "live"), ("DELETED", "live")]


def test_watch_needs_an_explicit_return_type_for_claims(fake, rapi):
    """Client quirk: list_* returns V1ResourceClaimList but the item model is ResourceV1ResourceClaim,
    so Watch's 'strip List' guess names a model that does not exist."""
    with pytest.raises(AttributeError, match="V1ResourceClaim"):
        next(watch.Watch().stream(rapi.list_resource_claim_for_all_namespaces, timeout_seconds=1))
    # return_type="object" makes the client hand out plain dicts (no pydantic models at all).
    fake.create_claim(claim("c1"))
    events = collect(
        watch.Watch(return_type="object").stream(rapi.list_resource_claim_for_all_namespaces, timeout_seconds=1)
    )
    assert [(e["type"], type(e["object"]), e["object"]["metadata"]["name"]) for e in events] == [("ADDED", dict, "c1")]
    # Slices and nodes are fine without it.
    assert collect(watch.Watch().stream(rapi.list_resource_slice, timeout_seconds=1)) == []


def test_watch_from_a_compacted_resource_version_raises_410(fake, rapi):
    old = fake.resource_version
    fake.create_claim(claim("c1"))
    fake.compact()
    w = watch.Watch(return_type=client.ResourceV1ResourceClaim)
    with pytest.raises(ApiException) as info:
        collect(w.stream(rapi.list_namespaced_resource_claim, NS, resource_version=old, timeout_seconds=5))
    # With timeout_seconds the client does not retry: the ERROR event becomes ApiException(410).
    assert info.value.status == 410
    assert info.value.reason.startswith("Expired: too old resource version: ")
    assert info.value.body is None  # built from the event, not from an HTTP response
    assert len(fake.requests_to("GET", "/resourceclaims")) == 1


def test_watch_410_without_timeout_is_retried_once_then_raised(fake, rapi):
    old = fake.resource_version
    fake.create_claim(claim("c1"))
    fake.compact()
    with pytest.raises(ApiException) as info:
        collect(
            watch.Watch(return_type=client.ResourceV1ResourceClaim).stream(
                rapi.list_namespaced_resource_claim, NS, resource_version=old
            )
        )
    assert info.value.status == 410
    watches = [r for r in fake.requests_to("GET", "/resourceclaims") if r.watch]
    assert [r.query["resourceVersion"] for r in watches] == [old, old]


def test_the_410_arrives_as_an_error_event_on_a_200_stream(fake, rapi):
    old = fake.resource_version
    fake.create_claim(claim("c1"))
    fake.compact()
    resp = rapi.list_namespaced_resource_claim(NS, watch=True, resource_version=old, _preload_content=False)
    assert resp.status == 200
    lines = [json.loads(line) for line in resp.data.splitlines() if line.strip()]
    assert lines == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"too old resource version: {old} ({int(fake.resource_version) + 1})",
                "reason": "Expired",
                "code": 410,
            },
        }
    ]


def test_bounded_history_expires_old_resource_versions(tmp_path):
    with FakeApiServer(tmp_path / "small", history_limit=3) as small:
        rapi = client.ResourceV1Api(client_for(small.kubeconfig_path))
        start = small.resource_version
        for i in range(3):
            small.create_claim(claim(f"c{i}"))
        recent = small.resource_version
        small.create_claim(claim("c3"))
        w = watch.Watch(return_type=client.ResourceV1ResourceClaim)
        with pytest.raises(ApiException) as info:
            collect(w.stream(rapi.list_namespaced_resource_claim, NS, resource_version=start, timeout_seconds=1))
        assert info.value.status == 410
        events = collect(w.stream(rapi.list_namespaced_resource_claim, NS, resource_version=recent, timeout_seconds=1))
        assert [e["object"].metadata.name for e in events] == ["c3"]


def test_watch_bookmarks_carry_the_resource_version(fake, rapi):
    start = fake.resource_version
    fake.create_claim(claim("c1"))
    w = watch.Watch(return_type=client.ResourceV1ResourceClaim)
    events = collect(
        w.stream(
            rapi.list_namespaced_resource_claim,
            NS,
            resource_version=start,
            timeout_seconds=1,
            allow_watch_bookmarks=True,
        )
    )
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert events[-1]["object"] == {
        "kind": "ResourceClaim",
        "apiVersion": "resource.k8s.io/v1",
        "metadata": {"resourceVersion": fake.resource_version},
    }
    assert w.resource_version == fake.resource_version


def test_slice_watch_with_a_field_selector(fake, rapi):
    start = fake.resource_version
    fake.create_slice(slice_obj("on-a"))
    fake.create_slice(slice_obj("on-b", node="node-b"))
    fake.delete_all_slices(node=NODE)  # kubelet start-up
    events = collect(
        watch.Watch().stream(
            rapi.list_resource_slice, field_selector=f"spec.nodeName={NODE}", resource_version=start, timeout_seconds=1
        )
    )
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "on-a"), ("DELETED", "on-a")]
    assert isinstance(events[0]["object"], client.V1ResourceSlice)
    assert [s["metadata"]["name"] for s in fake.list_slices()] == ["on-b"]


def test_stop_ends_running_watches(fake, rapi):
    outcome: list[BaseException | None] = []

    def run():
        try:
            collect(
                watch.Watch(return_type=client.ResourceV1ResourceClaim).stream(
                    rapi.list_resource_claim_for_all_namespaces, resource_version=fake.resource_version
                )
            )
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.3)
    fake.stop()
    thread.join(10)
    assert not thread.is_alive()
    assert outcome and outcome[0] is not None  # a cut stream or a refused reconnect


# -- status: server-side apply ------------------------------------------------------------------
def test_apply_by_two_managers_keeps_both_drivers_entries(fake, rapi):
    allocated_claim(fake)
    apply(rapi, DRIVER_A, [entry(DRIVER_A, "eth1")])
    result = apply(rapi, DRIVER_B, [entry(DRIVER_B, "eth2", ips=["fd00::5/64"])])
    assert device_ids(result) == [(DRIVER_A, "eth1"), (DRIVER_B, "eth2")]
    assert result.status.devices[1].network_data.ips == ["fd00::5/64"]
    appliers = {
        (m.manager, m.operation, m.subresource) for m in result.metadata.managed_fields if m.operation == "Apply"
    }
    assert appliers == {(DRIVER_A, "Apply", "status"), (DRIVER_B, "Apply", "status")}
    a_fields = next(m.fields_v1 for m in result.metadata.managed_fields if m.manager == DRIVER_A)
    assert list(a_fields["f:status"]["f:devices"]) == ['k:{"device":"eth1","driver":"a.dracni.io","pool":"node-a"}']
    record = fake.requests[-1]
    assert (record.method, record.content_type, record.field_manager, record.query["force"]) == (
        "PATCH",
        APPLY_PATCH,
        DRIVER_B,
        "true",
    )
    assert record.path == f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/c1/status"


def test_reapply_with_fewer_entries_removes_only_the_managers_own(fake, rapi):
    allocated_claim(fake)
    apply(rapi, DRIVER_A, [entry(DRIVER_A, "eth1"), entry(DRIVER_A, "eth3")])
    apply(rapi, DRIVER_B, [entry(DRIVER_B, "eth2")])
    result = apply(rapi, DRIVER_A, [entry(DRIVER_A, "eth1")])
    assert device_ids(result) == [(DRIVER_A, "eth1"), (DRIVER_B, "eth2")]
    result = apply(rapi, DRIVER_A, [])
    assert device_ids(result) == [(DRIVER_B, "eth2")]
    assert DRIVER_A not in {m.manager for m in result.metadata.managed_fields}


def test_reapplying_the_same_thing_is_a_no_op(fake, rapi):
    allocated_claim(fake)
    first = apply(rapi, DRIVER_A, [entry(DRIVER_A, "eth1")])
    second = apply(rapi, DRIVER_A, [entry(DRIVER_A, "eth1")])
    assert second.metadata.resource_version == first.metadata.resource_version


def test_apply_without_force_conflicts_with_another_managers_field(fake, rapi):
    allocated_claim(fake)
    apply(rapi, DRIVER_A, [entry(DRIVER_A, "eth1")])
    before = fake.get_claim(NS, "c1")
    with pytest.raises(ConflictException) as info:
        apply(rapi, "intruder", [entry(DRIVER_A, "eth1", ips=["10.9.9.9/24"])], force=None)
    body = body_of(info.value)
    # networkData merges per field (structured-merge-diff; ips is an atomic list): only the
    # changed ips conflict.
    path = '.status.devices[device="eth1",driver="a.dracni.io",pool="node-a"].networkData.ips'
    assert body["reason"] == "Conflict" and body["code"] == 409
    assert (
        body["message"] == f'Apply failed with 1 conflict: conflict with "{DRIVER_A}" with subresource "status": {path}'
    )
    assert body["details"]["causes"] == [
        {
            "reason": "FieldManagerConflict",
            "message": f'conflict with "{DRIVER_A}" with subresource "status"',
            "field": path,
        }
    ]
    assert fake.get_claim(NS, "c1") == before
    # The same value is no conflict: ownership is shared.
    shared = apply(rapi, "intruder", [entry(DRIVER_A, "eth1")], force=None)
    assert {m.manager for m in shared.metadata.managed_fields} >= {DRIVER_A, "intruder"}


def test_force_takes_ownership_of_conflicting_fields(fake, rapi):
    allocated_claim(fake)
    apply(rapi, DRIVER_A, [entry(DRIVER_A, "eth1")])
    taken = apply(
        rapi,
        "intruder",
        [{"driver": DRIVER_A, "pool": NODE, "device": "eth1", "networkData": {"interfaceName": "net9"}}],
        force=True,
    )
    assert taken.status.devices[0].network_data.interface_name == "net9"
    owners = {
        m.manager: m.fields_v1["f:status"]["f:devices"] for m in taken.metadata.managed_fields if m.operation == "Apply"
    }
    key = 'k:{"device":"eth1","driver":"a.dracni.io","pool":"node-a"}'
    # Ownership is per field inside networkData: the intruder took interfaceName, ips stay DRIVER_A's.
    assert owners["intruder"][key]["f:networkData"] == {"f:interfaceName": {}}
    assert "f:interfaceName" not in owners[DRIVER_A][key]["f:networkData"]
    assert "f:ips" in owners[DRIVER_A][key]["f:networkData"]
    # The original manager now leaves the entry: the fields only it owned go, the rest stays.
    left = apply(rapi, DRIVER_A, [])
    assert left.status.devices[0].conditions is None
    assert left.status.devices[0].network_data.interface_name == "net9"
    assert left.status.devices[0].network_data.ips is None


def test_apply_accepts_a_yaml_body(fake, api_client):
    allocated_claim(fake)
    text = yaml.safe_dump(status_body("c1", [entry(DRIVER_A, "eth1")]))
    result = raw_call(
        api_client,
        "PATCH",
        f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/c1/status",
        text,
        "ResourceV1ResourceClaim",
        APPLY_PATCH,
        [("fieldManager", DRIVER_A), ("force", True)],
    )
    assert device_ids(result) == [(DRIVER_A, "eth1")]
    assert fake.requests[-1].body["status"]["devices"][0]["device"] == "eth1"


def test_apply_needs_a_field_manager_and_a_kind(fake, rapi):
    allocated_claim(fake)
    with pytest.raises(UnprocessableEntityException) as info:
        apply(rapi, None, [entry(DRIVER_A, "eth1")])
    assert body_of(info.value)["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'
    )
    with pytest.raises(ApiException) as info:
        rapi.patch_namespaced_resource_claim_status(
            "c1", NS, {"status": {"devices": []}}, field_manager=DRIVER_A, _content_type=APPLY_PATCH
        )
    assert info.value.status == 400


def test_apply_to_a_missing_claim_is_404(fake, rapi):
    fake.add_namespace(NS)
    with pytest.raises(NotFoundException):
        apply(rapi, DRIVER_A, [entry(DRIVER_A, "eth1")], name="ghost")


def test_conditions_come_back_in_go_form(fake, rapi):
    """metav1.Condition always serializes reason and message (the client's model requires message)."""
    allocated_claim(fake)
    condition = {"type": "Ready", "status": "True", "reason": "Ok", "lastTransitionTime": "2025-01-01T01:00:00+01:00"}
    result = apply(rapi, DRIVER_A, [{"driver": DRIVER_A, "pool": NODE, "device": "eth1", "conditions": [condition]}])
    raw = fake.get_claim(NS, "c1")["status"]["devices"][0]["conditions"][0]
    assert raw == {
        "type": "Ready",
        "status": "True",
        "reason": "Ok",
        "message": "",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }
    assert result.status.devices[0].conditions[0].message == ""


# -- status: merge patches and PUT ------------------------------------------------------------------
def test_merge_patch_replaces_the_whole_list_and_wipes_other_drivers(fake, rapi):
    allocated_claim(fake)
    apply(rapi, DRIVER_A, [entry(DRIVER_A, "eth1")])
    apply(rapi, DRIVER_B, [entry(DRIVER_B, "eth2")])
    result = rapi.patch_namespaced_resource_claim_status(
        "c1", NS, {"status": {"devices": [entry(DRIVER_A, "eth1")]}}, field_manager=DRIVER_A, _content_type=MERGE_PATCH
    )
    assert device_ids(result) == [(DRIVER_A, "eth1")]  # DRIVER_B's entry is gone
    assert fake.requests[-1].content_type == MERGE_PATCH


def test_the_clients_default_patch_is_strategic_and_wipes_too(fake, rapi):
    allocated_claim(fake)
    apply(rapi, DRIVER_B, [entry(DRIVER_B, "eth2")])
    result = rapi.patch_namespaced_resource_claim_status("c1", NS, {"status": {"devices": [entry(DRIVER_A, "eth1")]}})
    assert device_ids(result) == [(DRIVER_A, "eth1")]
    record = fake.requests[-1]
    assert record.content_type == "application/strategic-merge-patch+json"
    assert record.field_manager is None  # the server falls back to the user agent's product


def test_force_is_forbidden_on_a_merge_patch(fake, rapi):
    allocated_claim(fake)
    with pytest.raises(UnprocessableEntityException) as info:
        rapi.patch_namespaced_resource_claim_status("c1", NS, {"status": {}}, force=True, _content_type=MERGE_PATCH)
    assert "force: Forbidden: may not be specified for non-apply patch" in body_of(info.value)["message"]


def test_put_status_checks_the_resource_version(fake, rapi):
    allocated_claim(fake)
    current = fake.get_claim(NS, "c1")
    current["status"]["devices"] = [entry(DRIVER_A, "eth1")]
    updated = rapi.replace_namespaced_resource_claim_status("c1", NS, current, field_manager="writer")
    assert device_ids(updated) == [(DRIVER_A, "eth1")]
    assert ("writer", "Update", "status") in {
        (m.manager, m.operation, m.subresource) for m in updated.metadata.managed_fields
    }
    current["status"]["devices"] = []
    with pytest.raises(ConflictException) as info:
        rapi.replace_namespaced_resource_claim_status("c1", NS, current)
    assert "the object has been modified" in body_of(info.value)["message"]
    # An apply must not conflict with itself, but it does with an Update manager's different value.
    with pytest.raises(ConflictException) as info:
        apply(rapi, DRIVER_A, [entry(DRIVER_A, "eth1", ips=["10.1.1.1/24"])], force=None)
    assert '"writer" with subresource "status" using resource.k8s.io/v1 at ' in body_of(info.value)["message"]


def test_put_status_ignores_spec_changes(fake, rapi):
    allocated_claim(fake)
    current = fake.get_claim(NS, "c1")
    current["spec"]["devices"]["requests"][0]["name"] = "changed"
    current["metadata"]["labels"] = {"ignored": "yes"}
    updated = rapi.replace_namespaced_resource_claim_status("c1", NS, current)
    assert updated.spec.devices.requests[0].name == "net"
    assert updated.metadata.labels is None


# -- status validation (422) -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("device", "field", "fragment"),
    [
        (
            entry(DRIVER_A, "eth9"),
            "status.devices[0]",
            # structured.SharedDeviceID is a fmt.Stringer: field.ErrorBody prints it unquoted
            "Invalid value: a.dracni.io/node-a/eth9: must be an allocated device in the claim",
        ),
        (
            entry(DRIVER_A, "eth1", ips=["10.0.0.300/24"]),
            "status.devices[0].networkData.ips[0]",
            'Invalid value: "10.0.0.300/24": must be a valid address in CIDR form',
        ),
        (
            entry(DRIVER_A, "eth1", ips=["10.0.0.5"]),
            "status.devices[0].networkData.ips[0]",
            'Invalid value: "10.0.0.5": must be a valid address in CIDR form',
        ),
        (
            entry(DRIVER_A, "eth1", ips=[f"10.0.0.{i}/24" for i in range(1, 18)]),
            "status.devices[0].networkData.ips",
            "Too many: 17: must have at most 16 items",
        ),
        (
            entry(DRIVER_A, "eth1", data={"blob": "x" * (10 * 1024)}),
            "status.devices[0].data",
            "Too long: must have at most 10240 bytes",
        ),
        (
            entry(DRIVER_A, "eth1", conditions=[{**READY[0], "reason": ""}]),
            "status.devices[0].conditions[0].reason",
            "Required value",
        ),
    ],
    ids=["not-allocated", "bad-ip", "not-cidr", "too-many-ips", "data-too-big", "no-reason"],
)
def test_invalid_status_is_422_with_the_field_path(fake, rapi, device, field, fragment):
    allocated_claim(fake)
    before = fake.get_claim(NS, "c1")
    with pytest.raises(UnprocessableEntityException) as info:
        apply(rapi, DRIVER_A, [device])
    body = body_of(info.value)
    assert body["reason"] == "Invalid" and body["code"] == 422
    assert body["message"].startswith('ResourceClaim.resource.k8s.io "c1" is invalid: ')
    assert f"{field}: {fragment}" in body["message"]
    assert body["details"]["name"] == "c1" and body["details"]["kind"] == "ResourceClaim"
    assert any(c["field"] == field and fragment in c["message"] for c in body["details"]["causes"])
    assert fake.get_claim(NS, "c1") == before
    with pytest.raises(UnprocessableEntityException):  # the same rules for a merge patch
        rapi.patch_namespaced_resource_claim_status(
            "c1", NS, {"status": {"devices": [device]}}, _content_type=MERGE_PATCH
        )


def test_several_errors_are_aggregated(fake, rapi):
    allocated_claim(fake)
    with pytest.raises(UnprocessableEntityException) as info:
        apply(rapi, DRIVER_A, [entry(DRIVER_A, "eth9", ips=["bad"])])
    body = body_of(info.value)
    assert body["message"].startswith('ResourceClaim.resource.k8s.io "c1" is invalid: [status.devices[0]: ')
    assert {c["field"] for c in body["details"]["causes"]} == {
        "status.devices[0]",
        "status.devices[0].networkData.ips[0]",
    }
    assert {c["reason"] for c in body["details"]["causes"]} == {"FieldValueInvalid"}


def test_status_of_an_unallocated_claim_is_rejected(fake, rapi):
    fake.create_claim(claim("c1"))
    with pytest.raises(UnprocessableEntityException) as info:
        apply(rapi, DRIVER_A, [entry(DRIVER_A, "eth1")])
    assert "must be an allocated device in the claim" in body_of(info.value)["message"]


def test_deallocation_clears_device_status(fake, rapi):
    allocated_claim(fake)
    apply(rapi, DRIVER_A, [entry(DRIVER_A, "eth1")])
    fake.set_claim_allocation(NS, "c1", None)
    assert "devices" not in (fake.get_claim(NS, "c1").get("status") or {})


# -- resourceslices ------------------------------------------------------------------------------------
def test_slice_crud(fake, rapi):
    created = rapi.create_resource_slice(slice_obj("s1"))
    assert created.metadata.generation == 1 and created.metadata.uid
    assert created.spec.devices[0].attributes["dracni.io/ifName"].string == "eth1"
    got = rapi.read_resource_slice("s1")
    got.spec.devices.append(client.V1Device(name="eth2"))
    got.spec.pool.generation = 2
    replaced = rapi.replace_resource_slice("s1", got)
    assert replaced.metadata.generation == 2
    assert int(replaced.metadata.resource_version) > int(got.metadata.resource_version)
    with pytest.raises(ConflictException) as info:
        rapi.replace_resource_slice("s1", got)  # stale resourceVersion
    assert body_of(info.value)["reason"] == "Conflict"
    with pytest.raises(ConflictException) as info:
        rapi.create_resource_slice(slice_obj("s1"))
    assert body_of(info.value)["reason"] == "AlreadyExists"
    assert body_of(info.value)["message"] == 'resourceslices.resource.k8s.io "s1" already exists'
    deleted = rapi.delete_resource_slice("s1")
    assert isinstance(deleted, client.V1ResourceSlice) and deleted.metadata.name == "s1"
    with pytest.raises(NotFoundException) as info:
        rapi.read_resource_slice("s1")
    assert body_of(info.value)["message"] == 'resourceslices.resource.k8s.io "s1" not found'
    assert fake.list_slices() == []


def test_slice_field_and_label_selectors(fake, rapi):
    fake.create_slice(slice_obj("a1", node="node-a", driver=DRIVER_A, labels={"k": "v"}))
    fake.create_slice(slice_obj("a2", node="node-a", driver=DRIVER_B))
    fake.create_slice(slice_obj("b1", node="node-b", driver=DRIVER_A))
    fake.create_slice(slice_obj("net", node=None, driver=DRIVER_A, allNodes=True))

    def names(**kw):
        return [s.metadata.name for s in rapi.list_resource_slice(**kw).items]

    assert names(field_selector="spec.nodeName=node-a") == ["a1", "a2"]
    assert names(field_selector=f"spec.driver={DRIVER_A}") == ["a1", "b1", "net"]
    assert names(field_selector=f"spec.nodeName=node-a,spec.driver={DRIVER_A}") == ["a1"]
    assert names(field_selector="spec.nodeName=") == ["net"]
    assert names(field_selector="spec.nodeName!=node-a") == ["b1", "net"]
    assert names(field_selector="metadata.name=b1") == ["b1"]
    assert names(label_selector="k=v") == ["a1"]
    listed = rapi.list_resource_slice()
    assert listed.metadata.resource_version == fake.resource_version


def test_slice_deletecollection_with_a_field_selector(fake, rapi):
    fake.create_slice(slice_obj("a1", node="node-a"))
    fake.create_slice(slice_obj("a2", node="node-a", driver=DRIVER_B))
    fake.create_slice(slice_obj("b1", node="node-b"))
    result = rapi.delete_collection_resource_slice(field_selector=f"spec.nodeName=node-a,spec.driver={DRIVER_A}")
    # The server answers the list of deleted slices; the client's declared type is V1Status.
    assert isinstance(result, client.V1Status) and result.kind == "ResourceSliceList"
    assert [s["metadata"]["name"] for s in fake.list_slices()] == ["a2", "b1"]
    record = fake.requests[-1]
    assert (record.method, record.path, record.query["fieldSelector"]) == (
        "DELETE",
        "/apis/resource.k8s.io/v1/resourceslices",
        f"spec.nodeName=node-a,spec.driver={DRIVER_A}",
    )


def _devices(n: int) -> list[dict]:
    return [{"name": f"eth{i}"} for i in range(n)]


@pytest.mark.parametrize(
    ("change", "field", "fragment"),
    [
        (lambda s: s["spec"].pop("driver"), "spec.driver", "Required value"),
        (lambda s: s["spec"].update(driver="Not_A_Domain"), "spec.driver", "Invalid value"),
        (lambda s: s["spec"].pop("pool"), "spec.pool.name", "Required value"),
        (
            lambda s: s["spec"]["pool"].update(resourceSliceCount=0),
            "spec.pool.resourceSliceCount",
            "must be greater than zero",
        ),
        (
            lambda s: s["spec"].pop("nodeName"),
            "spec",
            "Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
        ),
        (lambda s: s["spec"].update(allNodes=True), "spec", "but multiple fields are set"),
        (
            lambda s: s["spec"].update(devices=_devices(129)),
            "spec.devices",
            "Too many: 129: must have at most 128 items",
        ),
        (lambda s: s["spec"].update(devices=[{"name": "Eth_1"}]), "spec.devices[0].name", "RFC 1123 label"),
        (
            lambda s: s["spec"].update(devices=[{"name": "eth1"}, {"name": "eth1"}]),
            "spec.devices[1].name",
            'Duplicate value: "eth1"',
        ),
        (
            lambda s: s["spec"]["devices"][0]["attributes"].update(both={"int": 1, "string": "x"}),
            "spec.devices[0].attributes[both]",
            "exactly one value must be specified",
        ),
        (
            lambda s: s["spec"]["devices"][0]["attributes"].update(none={}),
            "spec.devices[0].attributes[none]",
            "Required value: exactly one value must be specified",
        ),
        (
            lambda s: s["spec"]["devices"][0]["attributes"].update(long={"string": "x" * 65}),
            "spec.devices[0].attributes[long].string",
            "Too long: must have at most 64 bytes",
        ),
        (
            lambda s: s["spec"]["devices"][0]["attributes"].update({"1bad": {"int": 1}}),
            "spec.devices[0].attributes[1bad]",
            "a valid C identifier",
        ),
        (
            lambda s: s["spec"]["devices"][0]["attributes"].update({"a" * 33: {"int": 1}}),
            f"spec.devices[0].attributes[{'a' * 33}]",
            "Too long: must have at most 32 bytes",
        ),
        (
            lambda s: s["spec"]["devices"][0]["attributes"].update({"Bad_Domain/x": {"int": 1}}),
            "spec.devices[0].attributes[Bad_Domain/x]",
            "RFC 1123 subdomain",
        ),
        (
            lambda s: s["spec"]["devices"][0]["attributes"].update({f"a{i}": {"int": i} for i in range(31)}),
            "spec.devices[0]",
            "Invalid value: 33: the total number of attributes and capacities must not exceed 32",
        ),
        (
            lambda s: s["spec"]["devices"][0]["attributes"].update(v={"version": "1.2"}),
            "spec.devices[0].attributes[v].version",
            "must be a string compatible with semver.org spec 2.0.0",
        ),
    ],
)
def test_slice_validation_is_422_with_the_field_path(fake, api_client, change, field, fragment):
    body = slice_obj("bad")
    change(body)
    # Raw POST: the client's pydantic models would already refuse a slice without driver or pool.
    with pytest.raises(UnprocessableEntityException) as info:
        raw_call(api_client, "POST", "/apis/resource.k8s.io/v1/resourceslices", body, "V1ResourceSlice")
    status = body_of(info.value)
    assert status["message"].startswith('ResourceSlice.resource.k8s.io "bad" is invalid: ')
    assert f"{field}: " in status["message"] and fragment in status["message"]
    assert any(c["field"] == field for c in status["details"]["causes"]), status
    assert fake.list_slices() == []


def test_the_client_validates_required_fields_before_sending(fake, rapi):
    body = slice_obj("bad")
    del body["spec"]["driver"]
    with pytest.raises(pydantic.ValidationError):
        rapi.create_resource_slice(body)
    assert fake.requests == []


def test_slice_driver_and_node_are_immutable(fake, rapi):
    rapi.create_resource_slice(slice_obj("s1"))
    current = rapi.read_resource_slice("s1")
    current.spec.driver = DRIVER_B
    with pytest.raises(UnprocessableEntityException) as info:
        rapi.replace_resource_slice("s1", current)
    assert 'spec.driver: Invalid value: "b.example.com": field is immutable' in body_of(info.value)["message"]


# -- nodes, discovery ------------------------------------------------------------------------------------
def test_nodes_get_and_list(fake, core):
    seeded = fake.add_node(NODE, labels={"zone": "z1"})
    fake.add_node("node-b")
    node = core.read_node(NODE)
    assert isinstance(node, client.V1Node)
    assert node.metadata.uid == seeded["metadata"]["uid"] and node.metadata.labels["zone"] == "z1"
    assert [n.metadata.name for n in core.list_node().items] == [NODE, "node-b"]
    assert [n.metadata.name for n in core.list_node(label_selector="zone=z1").items] == [NODE]
    with pytest.raises(NotFoundException) as info:
        core.read_node("ghost")
    assert body_of(info.value)["message"] == 'nodes "ghost" not found'
    assert body_of(info.value)["details"] == {"name": "ghost", "kind": "nodes"}


def test_discovery(fake, api_client):
    assert client.VersionApi(api_client).get_code().git_version.startswith("v1.")
    resources = client.ResourceV1Api(api_client).get_api_resources()
    assert {r.name for r in resources.resources} >= {"resourceclaims", "resourceclaims/status", "resourceslices"}
    assert client.CoreApi(api_client).get_api_versions().versions == ["v1"]
    groups = client.ApisApi(api_client).get_api_versions()
    assert [g.name for g in groups.groups] == ["resource.k8s.io"]


# -- auth, outages, bookkeeping ---------------------------------------------------------------------
def test_bearer_token_is_required(fake, tmp_path):
    wrong = client_for(fake.write_kubeconfig(tmp_path / "wrong", token="not-the-token"))
    with pytest.raises(UnauthorizedException) as info:
        client.ResourceV1Api(wrong).list_resource_slice()
    assert body_of(info.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }
    anonymous = client.Configuration()
    anonymous.host = fake.url
    with pytest.raises(UnauthorizedException):
        client.CoreV1Api(client.ApiClient(anonymous)).list_node()
    assert [r.status for r in fake.requests] == [401, 401]


def test_a_second_token_is_another_identity(fake, rapi):
    other = client.ResourceV1Api(client_for(fake.other_kubeconfig_path))
    other.list_resource_slice()
    rapi.list_resource_slice()
    assert [r.user for r in fake.requests] == [fake.other_user, fake.user]


def test_authorizer_hook_answers_403(fake, rapi):
    allocated_claim(fake)
    fake.authorizer = lambda a: not (a.verb == "patch" and a.subresource == "status" and a.user == fake.user)
    with pytest.raises(ForbiddenException) as info:
        apply(rapi, DRIVER_A, [entry(DRIVER_A, "eth1")])
    assert body_of(info.value)["message"] == (
        f'resourceclaims.resource.k8s.io "c1" is forbidden: User "{fake.user}" cannot patch resource '
        f'"resourceclaims/status" in API group "resource.k8s.io" in the namespace "{NS}"'
    )
    assert rapi.read_namespaced_resource_claim("c1", NS).metadata.name == "c1"


def test_stop_and_start_keep_port_and_data(fake, rapi):
    allocated_claim(fake)
    port, rv = fake.port, fake.resource_version
    fake.stop()
    with pytest.raises(urllib3.exceptions.HTTPError):
        rapi.read_namespaced_resource_claim("c1", NS)
    fake.start()
    assert fake.port == port
    got = rapi.read_namespaced_resource_claim("c1", NS)
    assert got.metadata.resource_version == rv
    fake.create_claim(claim("after"))
    assert int(fake.resource_version) == int(rv) + 1


def test_injected_failures(fake, rapi):
    fake.fail_next(500, method="GET", path="/resourceslices")
    with pytest.raises(ApiException) as info:
        rapi.list_resource_slice()
    assert info.value.status == 500 and body_of(info.value)["reason"] == "InternalError"
    assert rapi.list_resource_slice().items == []


def test_request_log(fake, rapi):
    fake.create_claim(claim("c1"))
    rapi.list_namespaced_resource_claim(NS, label_selector="a=b")
    record = fake.requests[-1]
    assert (record.method, record.path, record.query, record.status, record.user) == (
        "GET",
        f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims",
        {"labelSelector": "a=b"},
        200,
        fake.user,
    )
    assert record.user_agent.startswith("dracni/")  # the client dracni builds (load_api_client)


def test_load_kube_config_into_the_default_configuration(fake):
    saved = client.Configuration.get_default_copy()
    try:
        config.load_kube_config(config_file=fake.kubeconfig_path)
        assert client.ResourceV1Api().list_resource_slice().items == []
    finally:
        client.Configuration.set_default(saved)


def test_the_double_imports_nothing_from_dracni():
    """The test API server must not share the assumptions of the code it tests: no module of
    tests/fakes/apiserver imports dracni (a circular check otherwise)."""
    import ast
    import pathlib

    package = pathlib.Path(__file__).resolve().parents[1] / "fakes" / "apiserver"
    offenders = []
    for module in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{module.name}: {n}" for n in names if n == "dracni" or n.startswith("dracni.")]
    assert not offenders, offenders


def test_a_kept_alive_connection_idle_past_the_idle_timeout_is_closed(fake):
    """Go net/http ``Server.IdleTimeout`` (kube-apiserver: 90 s): a connection may wait that
    long for its next request; requests sooner keep it, one later finds it closed."""
    fake.idle_timeout = 0.3
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=5)
    headers = {"Authorization": f"Bearer {fake.token}"}
    try:
        for _ in range(3):  # 0.1 s apart: under the timeout, one connection throughout
            conn.request("GET", "/api/v1/namespaces", headers=headers)
            assert conn.getresponse().read() and fake.open_connections == 1
            time.sleep(0.1)
        deadline = time.monotonic() + 5
        while fake.open_connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake.open_connections == 0
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            conn.request("GET", "/api/v1/namespaces", headers=headers)
            conn.getresponse()
    finally:
        conn.close()
