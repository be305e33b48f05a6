"""PodNetworkStatus (issue 24 item 3): the pods' network-status annotation from a claim's outbox
facts, through the real kubernetes client against the test API server's Pods."""

from __future__ import annotations

import json

import pytest

from dracni.kube.api import KubeApi
from dracni.kube.pod_network_status import PodNetworkStatus
from dracni.state.store import StateDir
from dracni.status.drain import drain_outbox
from dracni.status.network_status import ANNOTATION
from dracni.status.sink import SinkError
from tests.kubeclient import serving

DEFAULT = {"name": "kindnet", "interface": "eth0", "ips": ["10.244.0.7"], "default": True, "dns": {}}


@pytest.fixture
def fake(tmp_path):
    with serving(tmp_path, "node-a") as server:
        yield server


@pytest.fixture
def api(api_client) -> KubeApi:
    return KubeApi(api_client)


def fact(pod: str, uid: str, *, ready: bool = True) -> dict:
    result = {"cniVersion": "1.0.0", "interfaces": [{"name": "net1", "mac": "02:00:00:00:00:09", "sandbox": "/x"}],
              "ips": [{"address": "10.0.0.9/24", "interface": 0}]}  # fmt: skip
    return {
        "request": "net", "pool": "node-a", "device": "eth1", "shareID": None, "ifName": "net1", "ready": ready,
        "result": result if ready else None, "error": None, "containerID": f"c-{pod}", "podUID": uid,
        "podName": pod, "updatedAt": "2026-11-27T00:00:00Z",
    }  # fmt: skip


def record(*facts: dict, namespace: str = "tenant", name: str = "c") -> dict:
    return {"claim": {"uid": "claim-1", "namespace": namespace, "name": name}, "devices": list(facts)}


def entries(api: KubeApi, pod: str) -> list[dict] | None:
    got = api.get_pod("tenant", pod)
    assert got is not None
    value = (got["metadata"].get("annotations") or {}).get(ANNOTATION)
    return None if value is None else json.loads(value)


def pod(fake, name: str, api: KubeApi, *, default: bool = True) -> str:
    uid = fake.add_pod("tenant", name, node="node-a")["metadata"]["uid"]
    if default:  # the default network's entry, as Multus or the primary CNI left it
        rv = api.get_pod("tenant", name)["metadata"]["resourceVersion"]  # type: ignore[index]
        api.patch_pod_annotation("tenant", name, ANNOTATION, json.dumps([DEFAULT]), rv)
    return uid


def test_add_then_del_keeps_the_default_entry(fake, api, tmp_path):
    uid = pod(fake, "p", api)
    writer = PodNetworkStatus(api, str(tmp_path / "state"))
    writer.sync(record(fact("p", uid)))
    got = entries(api, "p")
    assert got is not None and got[0] == DEFAULT
    assert got[1] == {"name": "tenant/c/net", "interface": "net1", "ips": ["10.0.0.9"],
                      "mac": "02:00:00:00:00:09", "default": False, "dns": {}}  # fmt: skip
    # DEL: the facts are gone from the record, even its claim's name (an unrecorded DEL)
    writer.sync({"claim": {"uid": "claim-1", "namespace": "", "name": ""}, "devices": []})
    assert entries(api, "p") == [DEFAULT]
    assert not (tmp_path / "state" / "netstatus" / "claim-1.json").exists()


def test_a_pod_without_other_entries_loses_the_annotation(fake, api, tmp_path):
    uid = pod(fake, "p", api, default=False)
    writer = PodNetworkStatus(api, str(tmp_path / "state"))
    writer.sync(record(fact("p", uid)))
    assert [e["name"] for e in entries(api, "p") or []] == ["tenant/c/net"]
    writer.sync(record())
    assert entries(api, "p") is None


def test_a_pod_gone_or_recreated_is_final(fake, api, tmp_path):
    writer = PodNetworkStatus(api, str(tmp_path / "state"))
    writer.sync(record(fact("gone", "uid-gone")))  # never existed: nothing to write, no error
    uid = pod(fake, "p", api)
    writer.sync(record(fact("p", "uid-of-the-old-pod")))
    assert entries(api, "p") == [DEFAULT]
    assert uid != "uid-of-the-old-pod"


def test_a_conflict_re_reads_the_pod(fake, api, tmp_path):
    uid = pod(fake, "p", api)
    fake.fail_next(409, method="PATCH", path="/pods/p", times=2, reason="Conflict")
    PodNetworkStatus(api, str(tmp_path / "state")).sync(record(fact("p", uid)))
    assert [r.method for r in fake.requests_to(path_contains="/pods/p")][-6:] == ["GET", "PATCH"] * 3
    assert [e["name"] for e in entries(api, "p") or []] == ["kindnet", "tenant/c/net"]


def test_a_failure_keeps_the_record_pending_and_is_retried(fake, api, tmp_path):
    uid = pod(fake, "p", api)
    writer = PodNetworkStatus(api, str(tmp_path / "state"))
    fake.authorizer = lambda attrs: not (attrs.resource == "pods" and attrs.verb == "patch")
    with pytest.raises(SinkError) as info:
        writer.sync(record(fact("p", uid)))
    assert info.value.retryable and info.value.forbidden
    fake.authorizer = None
    writer.sync(record(fact("p", uid)))
    assert [e["name"] for e in entries(api, "p") or []] == ["kindnet", "tenant/c/net"]


class Sink:
    def __init__(self) -> None:
        self.applied: list[str] = []

    def apply(self, claim, driver, devices) -> None:
        self.applied.append(claim["uid"])


def test_the_drain_runs_it_and_keeps_the_record_pending_on_failure(fake, api, tmp_path):
    from dracni.state import facts

    uid = pod(fake, "p", api)
    state = StateDir(str(tmp_path / "state"))
    state.ensure()
    claim = {"uid": "claim-1", "namespace": "tenant", "name": "c", "driver": "dracni.io"}
    facts.update_outbox(state, claim, lambda old: [fact("p", uid)])  # type: ignore[arg-type]
    sink = Sink()

    def refuse(rec):
        raise SinkError("pods is forbidden", forbidden=True)

    report = drain_outbox(state, sink, driver="dracni.io", annotate_pods=refuse)
    assert report.failed and "claim-1" in report.forbidden and sink.applied == ["claim-1"]
    report = drain_outbox(state, sink, driver="dracni.io", annotate_pods=PodNetworkStatus(api, state.root).sync)
    assert report.published == 1 and not report.failed
    assert [e["name"] for e in entries(api, "p") or []] == ["kindnet", "tenant/c/net"]
