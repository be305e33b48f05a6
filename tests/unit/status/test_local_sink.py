"""LocalStatusSink: status.devices beside a claim manifest, with server-side-apply semantics."""

from __future__ import annotations

import errno
import os

import orjson
import pytest

from dracni.status.entries import device_status_entry
from dracni.status.sink import LocalStatusSink, SinkError, StatusSink, status_path_for

DRIVER = "dracni.io"
OTHER = "gpu.example.com"
CLAIM = {"uid": "11111111-2222-3333-4444-555555555555", "namespace": "default", "name": "nets"}


def entry(device: str, *, driver: str = DRIVER, ready: bool = True) -> dict:
    fact = {
        "request": "r",
        "pool": "node-1",
        "device": device,
        "ifName": device,
        "ready": ready,
        "result": {
            "cniVersion": "1.1.0",
            "interfaces": [{"name": device, "mac": "0A:58:0A:00:00:05", "sandbox": "/var/run/netns/x"}],
            "ips": [{"address": "10.0.0.5/24", "interface": 0}],
        }
        if ready
        else None,
        "error": None if ready else {"code": 7, "msg": "boom"},
        "containerID": "c",
        "podUID": "p",
        "updatedAt": "2026-11-21T05:00:00Z",
    }
    return device_status_entry(fact, driver=driver)


@pytest.fixture
def manifest(tmp_path):
    path = tmp_path / "claims.yaml"
    path.write_text("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\n")
    return path


@pytest.fixture
def sink(manifest):
    known = {("default", "nets"): str(manifest)}
    return LocalStatusSink(lambda namespace, name: known.get((namespace, name)))


def status_file(manifest) -> str:
    return str(manifest)[: -len(".yaml")] + ".default.nets.status.json"


def load(path: str) -> dict:
    with open(path, "rb") as f:
        return orjson.loads(f.read())


def test_is_a_status_sink(sink):
    assert isinstance(sink, StatusSink)


@pytest.mark.parametrize(
    "manifest_path,expected",
    [
        ("/m/claims.yaml", "/m/claims.ns.n.status.json"),
        ("/m/claims.yml", "/m/claims.ns.n.status.json"),
        ("/m/claims.json", "/m/claims.ns.n.status.json"),
        ("/m/claims.txt", "/m/claims.txt.ns.n.status.json"),
    ],
)
def test_status_path(manifest_path, expected):
    assert status_path_for(manifest_path, "ns", "n") == expected


def test_writes_the_claim_status_document(sink, manifest):
    sink.apply(CLAIM, DRIVER, [entry("net2"), entry("net1")])
    document = load(status_file(manifest))
    assert document["apiVersion"] == "resource.k8s.io/v1"
    assert document["kind"] == "ResourceClaim"
    assert document["metadata"] == {"namespace": "default", "name": "nets", "uid": CLAIM["uid"]}
    assert [d["device"] for d in document["status"]["devices"]] == ["net1", "net2"]
    assert document["status"]["devices"][0]["networkData"]["ips"] == ["10.0.0.5/24"]
    assert sink.read("default", "nets") == document
    # nothing but the status file and the manifest in the directory (no temp files left)
    assert sorted(os.listdir(manifest.parent)) == ["claims.default.nets.status.json", "claims.yaml"]


def test_replaces_own_entries_and_keeps_other_drivers(sink, manifest):
    sink.apply(CLAIM, OTHER, [entry("gpu0", driver=OTHER)])
    sink.apply(CLAIM, DRIVER, [entry("net1"), entry("net2")])
    sink.apply(CLAIM, DRIVER, [entry("net2", ready=False)])
    devices = load(status_file(manifest))["status"]["devices"]
    assert [(d["driver"], d["device"]) for d in devices] == [(DRIVER, "net2"), (OTHER, "gpu0")]
    assert devices[0]["conditions"][0]["status"] == "False"
    assert devices[1] == entry("gpu0", driver=OTHER)


def test_file_removed_when_no_entries_remain(sink, manifest):
    sink.apply(CLAIM, OTHER, [entry("gpu0", driver=OTHER)])
    sink.apply(CLAIM, DRIVER, [entry("net1")])
    sink.apply(CLAIM, DRIVER, [])
    assert [d["driver"] for d in load(status_file(manifest))["status"]["devices"]] == [OTHER]
    sink.apply(CLAIM, OTHER, [])
    assert not os.path.exists(status_file(manifest))
    # clearing again is fine
    sink.apply(CLAIM, DRIVER, [])
    assert not os.path.exists(status_file(manifest))
    assert manifest.exists()


def test_entries_of_a_previous_claim_with_the_same_name_are_dropped(sink, manifest):
    sink.apply(CLAIM, OTHER, [entry("gpu0", driver=OTHER)])
    recreated = dict(CLAIM, uid="99999999-2222-3333-4444-555555555555")
    sink.apply(recreated, DRIVER, [entry("net1")])
    document = load(status_file(manifest))
    assert document["metadata"]["uid"] == recreated["uid"]
    assert [d["driver"] for d in document["status"]["devices"]] == [DRIVER]


def test_a_claim_in_no_manifest_stays_pending_and_is_named_unmatched(sink):
    with pytest.raises(SinkError) as info:
        sink.apply(dict(CLAIM, name="missing"), DRIVER, [entry("net1")])
    assert info.value.retryable is True
    assert sink.unmatched == {CLAIM["uid"]: "claim default/missing is not in any manifest here"}


def test_invalid_entries_rejected_like_the_api_server(sink, manifest):
    bad = entry("net1")
    bad["networkData"]["ips"] = ["10.0.0.5"]
    with pytest.raises(SinkError) as info:
        sink.apply(CLAIM, DRIVER, [bad])
    assert info.value.retryable is False
    assert 'status.devices[0].networkData.ips[0]: Invalid value: "10.0.0.5"' in str(info.value)
    assert not os.path.exists(status_file(manifest))


def test_corrupt_status_file_is_not_overwritten(sink, manifest):
    with open(status_file(manifest), "w") as f:
        f.write("{not json")
    with pytest.raises(SinkError):
        sink.apply(CLAIM, DRIVER, [entry("net1")])
    with open(status_file(manifest)) as f:
        assert f.read() == "{not json"


def test_write_failure_is_retryable_and_leaves_no_temp_file(sink, manifest, monkeypatch):
    def failing_rename(src, dst):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr("dracni.status.sink.os.rename", failing_rename)
    with pytest.raises(SinkError) as info:
        sink.apply(CLAIM, DRIVER, [entry("net1")])
    assert info.value.retryable is True
    assert sorted(os.listdir(manifest.parent)) == ["claims.yaml"]
