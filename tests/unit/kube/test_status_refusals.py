"""dracni's status sink and outbox drain against authorization refusals of the test API server:
the 403 of RBAC's front door and the 422 ``Forbidden`` of the 1.36 granular status authorization
(``AuthorizedForDeviceStatus``) keep the record pending and name the missing rule; a 422 that
refuses the entries themselves is final."""

from __future__ import annotations

import pytest

from dracni.kube.api import KubeApi
from dracni.kube.status_sink import ApiStatusSink
from dracni.state import facts
from dracni.state.store import StateDir
from dracni.status.drain import drain_outbox
from dracni.status.sink import SinkError
from tests.fakes.apiserver import FakeApiServer, RequestAttributes
from tests.kubeclient import serving

DRIVER = "dracni.io"
NODE = "node-a"
SHIPPED = {("patch", "status", ""), ("associated-node:patch", "driver", DRIVER)}
ARBITRARY = ("arbitrary-node:patch", "driver", DRIVER)
ONE_NODE = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}
BY_LABEL = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]}


class Rules:
    """An RBAC authorizer for the service account's ``resourceclaims`` rules."""

    def __init__(self, granted: set[tuple[str, str, str]]) -> None:
        self.granted = set(granted)
        self.asked: list[tuple[str, str, str]] = []

    def __call__(self, attrs: RequestAttributes) -> bool:
        asked = (attrs.verb, attrs.subresource, attrs.name if attrs.subresource == "driver" else "")
        self.asked.append(asked)
        return attrs.resource != "resourceclaims" or asked in self.granted


@pytest.fixture
def fake(tmp_path):
    with serving(tmp_path, NODE, node_name=NODE) as server:
        yield server


@pytest.fixture
def sink(api_client) -> ApiStatusSink:
    return ApiStatusSink(KubeApi(api_client))


def allocated(fake: FakeApiServer, name: str, selector: dict) -> dict:
    fake.create_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "net", "exactly": {"deviceClassName": DRIVER}}]}},
        }
    )
    fake.set_claim_allocation(
        "default",
        name,
        {
            "devices": {"results": [{"request": "net", "driver": DRIVER, "pool": NODE, "device": "eth1"}]},
            "nodeSelector": selector,
        },
        [{"resource": "pods", "name": "demo", "uid": "pod-uid-1"}],
    )
    claim = fake.get_claim("default", name)
    return {"uid": claim["metadata"]["uid"], "namespace": "default", "name": name}


def entry(ip: str = "10.0.0.5/24") -> dict:
    return {
        "driver": DRIVER,
        "pool": NODE,
        "device": "eth1",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "NetworkInterfaceReady",
                "message": "",
                "lastTransitionTime": "2026-11-21T05:00:00Z",
            }
        ],
        "networkData": {"interfaceName": "net1", "ips": [ip]},
    }


def test_a_claim_of_this_node_is_written_with_the_shipped_rules(fake, sink):
    fake.authorizer = Rules(SHIPPED)
    ref = allocated(fake, "here", ONE_NODE)
    sink.apply(ref, DRIVER, [entry()])
    assert fake.get_claim("default", "here")["status"]["devices"][0]["device"] == "eth1"
    assert ("associated-node:patch", "driver", DRIVER) in fake.authorizer.asked


def test_a_claim_not_bound_to_one_node_is_a_retryable_forbidden_naming_the_rule(fake, sink):
    fake.authorizer = Rules(SHIPPED)
    ref = allocated(fake, "spread", BY_LABEL)
    with pytest.raises(SinkError) as info:
        sink.apply(ref, DRIVER, [entry()])
    assert info.value.forbidden and info.value.retryable
    text = str(info.value)
    assert "status.devices: Forbidden: changing status.devices requires" in text
    assert f"resources: [resourceclaims/driver], resourceNames: [{DRIVER}], verbs: [arbitrary-node:patch]" in text
    assert "only arbitrary-node would do" in text
    # associated-node is not even asked: the allocation names no single node.
    assert ("associated-node:patch", "driver", DRIVER) not in fake.authorizer.asked


def test_a_token_without_the_node_name_is_refused_the_same_way(fake, sink):
    fake.authorizer = Rules(SHIPPED)
    fake.user_extra.clear()  # a legacy (not pod-bound) service account token
    ref = allocated(fake, "here", ONE_NODE)
    with pytest.raises(SinkError) as info:
        sink.apply(ref, DRIVER, [entry()])
    assert info.value.forbidden and "verbs: [arbitrary-node:patch]" in str(info.value)


def test_the_front_door_403_names_the_status_rule(fake, sink):
    fake.authorizer = Rules({("associated-node:patch", "driver", DRIVER)})
    ref = allocated(fake, "here", ONE_NODE)
    with pytest.raises(SinkError) as info:
        sink.apply(ref, DRIVER, [entry()])
    assert info.value.forbidden and info.value.retryable
    assert "missing RBAC rule: {apiGroups: [resource.k8s.io], resources: [resourceclaims/status], verbs: [patch]}" in (
        str(info.value)
    )


def test_invalid_entries_are_final_not_forbidden(fake, sink):
    fake.authorizer = Rules(SHIPPED)
    ref = allocated(fake, "here", ONE_NODE)
    with pytest.raises(SinkError) as info:
        sink.apply(ref, DRIVER, [entry(ip="10.0.0.5")])
    assert not info.value.forbidden and not info.value.retryable


def test_a_refused_record_stays_pending_and_is_published_once_granted(fake, sink, tmp_path):
    fake.authorizer = Rules(SHIPPED)
    ref = allocated(fake, "spread", BY_LABEL)
    state = StateDir(str(tmp_path / "state"))
    state.ensure()
    fact = {
        "request": "net",
        "pool": NODE,
        "device": "eth1",
        "shareID": None,
        "ifName": "net1",
        "ready": True,
        "result": {"cniVersion": "1.1.0", "ips": [{"address": "10.0.0.5/24"}]},
        "error": None,
        "containerID": "c0ffee",
        "podUID": "pod-uid-1",
        "updatedAt": "2026-11-21T05:00:00Z",
    }
    facts.update_outbox(state, {**ref, "driver": DRIVER}, lambda devices: [*devices, fact])

    for _ in range(3):  # retried: refused each time, never dropped
        report = drain_outbox(state, sink, driver=DRIVER)
        assert report.published == 0 and not report.dropped
        assert ref["uid"] in report.forbidden and ref["uid"] in report.failed
        assert [r["claim"]["uid"] for r in state.pending_outbox()] == [ref["uid"]]
    assert "status" not in fake.get_claim("default", "spread") or not fake.get_claim("default", "spread")["status"].get(
        "devices"
    )

    fake.authorizer.granted.add(ARBITRARY)  # the operator grants it
    report = drain_outbox(state, sink, driver=DRIVER)
    assert report.published == 1 and not report.failed
    assert state.pending_outbox() == []
    devices = fake.get_claim("default", "spread")["status"]["devices"]
    assert devices[0]["networkData"]["ips"] == ["10.0.0.5/24"]


def test_a_refused_entry_never_drops_the_claims_other_entries(fake, sink, tmp_path):
    """The server refuses one entry (a device the claim no longer has: "must be an allocated device
    in the claim", validation.go ``validateDeviceStatus``): the claim's other entries are published,
    the refused one is left out, and the drain names it instead of dropping the claim's status."""
    fake.authorizer = Rules(SHIPPED)
    ref = allocated(fake, "two", ONE_NODE)
    state = StateDir(str(tmp_path / "state"))
    state.ensure()

    def fact(device: str, address: str) -> dict:
        return {
            "request": "net",
            "pool": NODE,
            "device": device,
            "shareID": None,
            "ifName": f"net-{device}",
            "ready": True,
            "result": {"cniVersion": "1.1.0", "ips": [{"address": address}]},
            "error": None,
            "containerID": "c0ffee",
            "podUID": "pod-uid-1",
            "updatedAt": "2026-11-21T05:00:00Z",
        }

    facts.update_outbox(
        state, {**ref, "driver": DRIVER}, lambda devices: [fact("eth0", "10.0.0.4/24"), fact("eth1", "10.0.0.5/24")]
    )
    report = drain_outbox(state, sink, driver=DRIVER)
    assert report.published == 1 and not report.dropped and not report.failed
    assert "eth0 left out: " in report.refused[ref["uid"]]
    assert "must be an allocated device in the claim" in report.refused[ref["uid"]]
    (published,) = fake.get_claim("default", "two")["status"]["devices"]
    assert published["device"] == "eth1" and published["networkData"]["ips"] == ["10.0.0.5/24"]
    assert state.pending_outbox() == []
