"""dracni.state.facts: the claim-status facts' builders and merges, the one entry key, and the
intents (attached, failed, detached, unprepared, published) read-modify-writing a real outbox."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest

from dracni.apirules.validation import device_id
from dracni.specfiles import load_json_spec
from dracni.state import facts as F
from dracni.state import records as R
from dracni.state.store import StateDir
from dracni.status.entries import status_devices
from tests.unit.state.test_records import SHARE, attachment, stored


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(load_json_spec("state-records.schema.json"))


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    return StateDir(str(tmp_path / "state"))


def test_pod_index_and_outbox_builders_validate(validator: jsonschema.Draft202012Validator) -> None:
    index = R.new_pod_index()
    index["claims"].append("claim-1")
    validator.validate(stored(index))
    outbox = F.new_outbox({"uid": "claim-1", "namespace": "default", "name": "nets", "driver": "dracni.io"})
    assert outbox["claim"] == {"uid": "claim-1", "namespace": "default", "name": "nets"}
    assert outbox["driver"] == "dracni.io" and not R.is_pending(outbox)
    validator.validate(stored(outbox))


def test_facts_validate_inside_an_outbox(validator: jsonschema.Draft202012Validator) -> None:
    record = attachment("ready", persistentIPs=True, requestedIPs=["10.0.0.5/24"], shareID=SHARE)
    dev = record["devices"][0]
    ready = F.device_fact(record, dev)
    assert ready["ready"] and ready["keptIPs"] == ["10.0.0.5/24"] and ready["shareID"] == SHARE
    detached = F.detached_fact(record, dev, ["10.0.0.5/24"], "2026-11-23T20:01:00Z")
    assert detached["detached"] and not detached["ready"] and detached["result"] is None
    outbox = F.new_outbox({"uid": "claim-1", "namespace": "default", "name": "nets"})
    outbox["devices"] = [ready]
    outbox["seq"] = 1
    assert R.is_pending(outbox)
    validator.validate(stored(outbox))
    outbox["devices"] = [detached]
    validator.validate(stored(outbox))


def test_upsert_replaces_a_fact_of_the_same_device_and_share() -> None:
    record = attachment()
    dev = record["devices"][0]
    first = F.device_fact(record, dev)
    other = dict(first, device="eth2")
    newer = dict(first, ready=False, updatedAt="2026-11-23T20:05:00Z")
    merged = F.upsert_facts([first, other], [newer])
    assert merged == [other, newer]


def test_retract_drops_the_containers_facts_and_keeps_detached_ones() -> None:
    record = attachment(persistentIPs=True, requestedIPs=["10.0.0.5/24"])
    dev = record["devices"][0]
    mine = F.device_fact(record, dev)
    theirs = dict(mine, device="eth2", containerID="other")
    detached = F.detached_fact(record, dev, ["10.0.0.5/24"], "2026-11-23T20:01:00Z")
    assert F.retract_facts([mine, theirs], "c0ffee", []) == [theirs]
    assert F.retract_facts([mine, theirs], "c0ffee", [detached]) == [theirs, detached]


# -- the one entry key --------------------------------------------------------------------
def test_a_fact_without_share_id_and_an_entry_with_an_empty_one_are_the_same_entry() -> None:
    fact = {"pool": "node1", "device": "eth1", "shareID": None}
    entry = {"driver": "dracni.io", "pool": "node1", "device": "eth1", "shareID": ""}
    assert F.entry_key(fact) == F.entry_key(entry) == F.entry_key({"pool": "node1", "device": "eth1"})
    assert F.entry_key(fact) == ("node1", "eth1", "")
    assert F.entry_key({"pool": "node1", "device": "eth1", "shareID": SHARE}) == ("node1", "eth1", SHARE)
    # the API server's id of an entry agrees: an empty shareID is no shareID
    assert device_id(entry) == device_id({"driver": "dracni.io", "pool": "node1", "device": "eth1"})


def test_merges_and_entries_use_the_same_key() -> None:
    record = attachment(persistentIPs=True, requestedIPs=["10.0.0.5/24"])
    dev = record["devices"][0]
    detached = dict(F.detached_fact(record, dev, ["10.0.0.5/24"], "2026-11-23T20:01:00Z"), shareID="")
    ready = dict(F.device_fact(record, dev), containerID="next-pod")  # shareID None
    assert F.upsert_facts([detached], [ready]) == [ready]  # the next pod supersedes the Detached fact
    entries = status_devices({"devices": [detached, dict(ready, ifName="net2")]}, driver="dracni.io")
    assert len(entries) == 1 and "shareID" not in entries[0]


def test_claim_ref_is_the_identity_an_outbox_names() -> None:
    ref = F.claim_ref("claim-1", "default", "nets")
    assert ref == {"uid": "claim-1", "namespace": "default", "name": "nets"}
    assert F.new_outbox(F.outbox_claim(ref, "dracni.io"))["claim"] == ref


# -- the intents ----------------------------------------------------------------------------
def facts_of(state: StateDir) -> list[Any]:
    outbox = state.read_outbox("claim-1")
    assert outbox is not None
    return outbox["devices"]


def test_attached_upserts_one_fact_per_device_into_the_claims_outbox(state: StateDir) -> None:
    record = attachment()
    F.attached(state, record)
    outbox = state.read_outbox("claim-1")
    assert outbox is not None
    assert outbox["claim"] == {"uid": "claim-1", "namespace": "default", "name": "nets"}
    assert outbox["driver"] == "dracni.io" and outbox["seq"] == 1 and outbox["publishedSeq"] == 0
    assert [(f["containerID"], f["ready"]) for f in outbox["devices"]] == [("c0ffee", True)]
    F.attached(state, record)  # the same ADD again: its fact is replaced, not added
    assert len(facts_of(state)) == 1 and state.read_outbox("claim-1")["seq"] == 2  # type: ignore[index]


def test_a_failure_lasts_past_its_del_until_unprepare(state: StateDir) -> None:
    record = attachment("failed")
    record["devices"][0]["error"] = R.cni_error(100, "no master")
    F.failed(state, record)
    assert [f["ready"] for f in facts_of(state)] == [False]
    F.detached(state, record)  # the runtime's teardown DEL of the failed ADD
    assert [(f["containerID"], f.get("lasting")) for f in facts_of(state)] == [("c0ffee", True)]
    seq = state.read_outbox("claim-1")["seq"]  # type: ignore[index]
    F.unprepared(state, ["claim-1", "claim-without-outbox"])
    outbox = state.read_outbox("claim-1")
    assert outbox is not None and outbox["devices"] == [] and outbox["seq"] == seq + 1
    F.unprepared(state, ["claim-1"])  # nothing lasting: no new seq
    assert state.read_outbox("claim-1")["seq"] == seq + 1  # type: ignore[index]


def test_detached_keeps_a_persistent_attachments_addresses(state: StateDir) -> None:
    record = attachment(persistentIPs=True, requestedIPs=["10.0.0.9/24"], ipamClaim="vm-net1")
    F.attached(state, record)
    F.detached(state, record)
    (fact,) = facts_of(state)
    assert fact["detached"] and not fact["ready"] and fact["result"] is None
    assert fact["keptIPs"] == ["10.0.0.5/24"]  # the addresses the ADD got, not the requested ones


def test_detached_without_an_outbox_writes_none(state: StateDir) -> None:
    F.detached(state, attachment())
    assert state.read_outbox("claim-1") is None


def test_detached_unrecorded_retracts_the_containers_facts_where_an_outbox_exists(state: StateDir) -> None:
    F.attached(state, attachment())
    F.detached_unrecorded(state, {"claim-1", "claim-2"}, "c0ffee")
    assert facts_of(state) == [] and state.read_outbox("claim-2") is None


def test_published_marks_the_seq_and_drops_an_empty_record(state: StateDir) -> None:
    record = attachment()
    F.attached(state, record)
    assert F.published(state, "claim-1", 1) is True
    F.detached(state, record)
    assert F.published(state, "claim-1", 1) is False  # seq 2 is newer: it stays pending
    assert R.is_pending(state.read_outbox("claim-1"))  # type: ignore[arg-type]
    assert F.published(state, "claim-1", 2) is True
    assert state.read_outbox("claim-1") is None


def test_an_unreadable_outbox_is_quarantined_and_the_facts_start_afresh(state: StateDir) -> None:
    F.attached(state, attachment())
    path = Path(state.root) / "outbox" / "claim-1.json"
    path.write_text("{not json")
    F.attached(state, attachment())
    outbox = state.read_outbox("claim-1")
    assert outbox is not None and outbox["seq"] == 1 and len(outbox["devices"]) == 1
    assert state.quarantine_count() == 1
