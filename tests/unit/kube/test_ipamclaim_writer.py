"""IpamClaimWriter (issue 12 item 8): the IPAMClaim write-back from a claim's outbox facts,
through the real kubernetes client against the test API server's IPAMClaim CRD."""

from __future__ import annotations

import pytest

from dracni.kube.api import KubeApi
from dracni.kube.ipamclaims import IpamClaimWriter
from dracni.state import facts
from dracni.state.store import StateDir
from dracni.status.drain import drain_outbox
from dracni.status.sink import SinkError
from tests.kubeclient import serving

DRIVER = "dracni.io"


@pytest.fixture
def fake(tmp_path):
    with serving(tmp_path, ipamclaims=True) as server:
        yield server


@pytest.fixture
def api(api_client) -> KubeApi:
    return KubeApi(api_client)


def fact(address: str | None, *, ready: bool = True, detached: bool = False, pod: str = "pod-a", **extra) -> dict:
    result = (
        {"cniVersion": "1.0.0", "interfaces": [{"name": "net1", "sandbox": "/x"}],
         "ips": [{"address": address, "interface": 0}]}
        if ready else None
    )  # fmt: skip
    return {
        "request": "net", "pool": "node-a", "device": "eth1", "shareID": None, "ifName": "net1",
        "ready": ready, "result": result, "error": None, "containerID": f"c-{pod}", "podUID": f"uid-{pod}",
        "podName": pod, "updatedAt": "2026-11-21T05:00:00Z", "ipamClaim": "vm.net1",
        "keptIPs": [address] if detached else [], **({"detached": True} if detached else {}), **extra,
    }  # fmt: skip


def outbox(*facts) -> dict:
    return {"claim": {"uid": "u1", "namespace": "default", "name": "vm"}, "devices": list(facts)}


def test_a_non_canonical_address_held_is_the_same_address(fake, api):
    """The IPAMClaim holds FD00:78:7:0:0:0:0:20/64, the pod got fd00:78:7::20/64: the same, so
    ownerPod and the condition are written (compared as strings, they differed and nothing was)."""
    fake.create_ipamclaim("default", "vm.net1", network="n", ips=["FD00:78:7:0:0:0:0:20/64"])
    notes = IpamClaimWriter(api).sync(outbox(fact("fd00:78:7::20/64")))
    assert notes == {}
    status = fake.get_ipamclaim("default", "vm.net1")["status"]
    assert status["ownerPod"] == {"name": "pod-a"}
    assert status["ips"] == ["FD00:78:7:0:0:0:0:20/64"]
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [("IPsAllocated", "True")]


def test_an_attachment_already_detached_still_fills_the_ipamclaim(fake, api):
    """ADD and DEL both happened before the service caught up: only a Detached fact is left."""
    fake.create_ipamclaim("default", "vm.net1", network="n")
    IpamClaimWriter(api).sync(outbox(fact("10.0.0.7/24", ready=False, detached=True, pod="gone")))
    status = fake.get_ipamclaim("default", "vm.net1")["status"]
    assert status["ips"] == ["10.0.0.7/24"] and status["ownerPod"] == {"name": "gone"}


def test_a_ready_attachment_wins_over_a_detached_one(fake, api):
    fake.create_ipamclaim("default", "vm.net1", network="n")
    detached = fact("10.0.0.7/24", ready=False, detached=True, pod="old", updatedAt="2026-11-21T05:00:09Z")
    IpamClaimWriter(api).sync(outbox(detached, fact("10.0.0.7/24", pod="new")))
    assert fake.get_ipamclaim("default", "vm.net1")["status"]["ownerPod"] == {"name": "new"}


def test_a_conflict_becomes_a_condition_of_the_entry_and_a_reported_problem(fake, api):
    fake.create_ipamclaim("default", "vm.net1", network="n", ips=["10.0.0.9/24"])
    problems = []
    writer = IpamClaimWriter(api, on_problem=lambda record, f, reason, message: problems.append((reason, message)))
    notes = writer.sync(outbox(fact("10.0.0.7/24")))
    (condition,) = notes[("node-a", "eth1", "")]
    assert condition["type"] == "IPAMClaimSynced" and condition["status"] == "False"
    assert condition["reason"] == "IPAMClaimConflict"
    assert "holds 10.0.0.9/24 but the pod got 10.0.0.7/24" in condition["message"]
    assert problems == [("IPAMClaimConflict", condition["message"])]
    assert fake.get_ipamclaim("default", "vm.net1")["status"]["ips"] == ["10.0.0.9/24"]  # untouched


def test_a_missing_ipamclaim_is_a_condition_not_a_dropped_status(fake, api):
    notes = IpamClaimWriter(api).sync(outbox(fact("10.0.0.7/24")))
    assert notes[("node-a", "eth1", "")][0]["reason"] == "IPAMClaimNotFound"


def test_an_unreachable_api_server_is_retried(fake, api):
    fake.create_ipamclaim("default", "vm.net1", network="n")
    fake.close()
    with pytest.raises(SinkError) as info:
        IpamClaimWriter(api).sync(outbox(fact("10.0.0.7/24")))
    assert info.value.retryable


def test_the_conflict_shows_in_the_published_entry(fake, api, tmp_path):
    from dracni.status.sink import LocalStatusSink

    fake.create_ipamclaim("default", "vm.net1", network="n", ips=["10.0.0.9/24"])
    state = StateDir(str(tmp_path / "state"))
    facts.update_outbox(state, {"uid": "u1", "namespace": "default", "name": "vm", "driver": DRIVER},
                        lambda facts: [fact("10.0.0.7/24")])  # fmt: skip
    manifest = tmp_path / "claims.yaml"
    manifest.write_text("kind: ResourceClaim\n")
    sink = LocalStatusSink(lambda ns, name: str(manifest))
    report = drain_outbox(state, sink, driver=DRIVER, annotate=IpamClaimWriter(api).sync)
    assert report.published == 1
    (entry,) = sink.read("default", "vm")["status"]["devices"]
    assert [(c["type"], c["status"], c["reason"]) for c in entry["conditions"]] == [
        ("Ready", "True", "NetworkInterfaceReady"),
        ("IPAMClaimSynced", "False", "IPAMClaimConflict"),
    ]
