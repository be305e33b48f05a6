"""dracni.state.records: every builder's record validates against spec/state-records.schema.json
(the facts' builders and merges: test_facts.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest

from dracni.specfiles import load_json_spec
from dracni.state import facts as F
from dracni.state import records as R

SHARE = "4b7f2c1e-9a0d-4c5e-8f3a-2d1b0c9e8f7a"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(load_json_spec("state-records.schema.json"))


def stored(record: Any) -> dict[str, Any]:
    """What the store writes: the record with its schema version."""
    return {**record, "schema": R.SCHEMA_VERSION}


def spec(**extra: Any) -> Any:
    return {
        "request": "net",
        "pool": "node1",
        "device": "eth1",
        "shareID": None,
        "ifName": None,
        "config": {"name": "macnet", "cniVersion": "1.0.0", "plugins": [{"type": "macvlan"}]},
        "runtimeConfig": {},
        "capabilities": {},
        "persistentIPs": False,
        "ipamClaim": None,
        "requestedIPs": [],
        **extra,
    }


def attachment(state: str = "ready", **device_extra: Any) -> Any:
    call = SimpleNamespace(
        network="podnet",
        container_id="c0ffee",
        ifname="eth0",
        netns="/var/run/netns/p",
        args="K8S_POD_UID=pod-1",
        cni_version="1.1.0",
        pod_uid="pod-1",
        pod_namespace="default",
        pod_name="web-0",
    )
    record = R.new_attachment(call, "2026-11-23T20:00:00Z")
    delegate = {
        "type": "macvlan",
        "cniVersion": "1.0.0",
        "config": {"type": "macvlan", "name": "macnet"},
        "added": True,
        "result": {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.5/24"}]},
    }
    dev = R.attached_device(
        F.claim_ref("claim-1", "default", "nets"), "dracni.io", spec(**device_extra), "net1", [delegate]
    )
    dev["result"] = delegate["result"]
    record["devices"].append(dev)
    record["state"] = state
    return record


def test_prepared_claim_builder_validates(validator: jsonschema.Draft202012Validator) -> None:
    claim = R.new_prepared_claim(
        F.claim_ref("claim-1", "default", "nets"),
        driver="dracni.io",
        source=None,
        prepared_at="2026-11-23T20:00:00Z",
        pods=[{"uid": "pod-1", "name": "web-0"}],
        devices=[spec(), spec(request="net2", shareID=SHARE, ifName="net9")],
    )
    assert claim["kind"] == "PreparedClaim"
    validator.validate(stored(claim))


def test_attachment_builders_validate_in_every_state(validator: jsonschema.Draft202012Validator) -> None:
    adding = attachment("adding")
    assert adding["kind"] == "Attachment" and adding["error"] is None
    validator.validate(stored(adding))
    failed = attachment("failed")
    failed["error"] = R.cni_error(100, "delegate macvlan ADD failed")
    failed["devices"][0]["error"] = R.cni_error(100, "delegate macvlan ADD failed", "details")
    validator.validate(stored(failed))


def test_devices_by_claim_and_index_keys() -> None:
    record = attachment()
    assert list(R.devices_by_claim(record)) == ["claim-1"]
    assert R.attachment_key("podnet", "c0ffee", "eth0") == "podnet+c0ffee+eth0"
    assert R.pod_index_keys("pod-1", "default", "web-0") == ["uid_pod-1", "name_default_web-0"]
    claim = {
        "kind": "PreparedClaim",
        "uid": "claim-1",
        "namespace": "default",
        "name": "nets",
        "driver": "dracni.io",
        "source": None,
        "preparedAt": "2026-11-23T20:00:00Z",
        "pods": [{"uid": "pod-1", "name": "web-0"}],
        "devices": [spec()],
    }
    assert R.claim_pod_keys(claim) == {"uid_pod-1", "name_default_web-0"}


def test_check_record_refuses_other_schema_versions() -> None:
    assert R.check_record({"schema": 1, "kind": "PodIndex"}, "x") == {"schema": 1, "kind": "PodIndex"}
    with pytest.raises(R.NewerRecord, match="has schema 2, newer than this dracni's 1"):
        R.check_record({"schema": 2}, "pods/x.json")
    with pytest.raises(R.RecordError, match="unknown schema version None"):
        R.check_record({"kind": "PodIndex"}, "pods/x.json")
    for bad in (["schema", 1], None):
        with pytest.raises(R.RecordError, match="not a JSON object of a known schema version"):
            R.check_record(bad, "pods/x.json")
