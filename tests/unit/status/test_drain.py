"""drain_outbox: pending StatusOutbox records to a StatusSink, seq by seq."""

from __future__ import annotations

import os

import pytest

from dracni.state import facts
from dracni.state.store import StateDir
from dracni.status.drain import DrainReport, drain_outbox
from dracni.status.sink import LocalStatusSink, SinkError

DRIVER = "dracni.io"


def claim(n: int) -> dict:
    return {"uid": f"claim-uid-{n}", "namespace": "default", "name": f"nets-{n}", "driver": DRIVER}


def fact(device: str, *, ready: bool = True, updated: str = "2026-11-21T05:00:00Z") -> dict:
    return {
        "request": "macvlan",
        "pool": "node-1",
        "device": device,
        "shareID": None,
        "ifName": device,
        "ready": ready,
        "result": {
            "cniVersion": "1.1.0",
            "interfaces": [{"name": device, "mac": "0A:58:0A:00:00:05", "sandbox": "/var/run/netns/x"}],
            "ips": [{"address": "10.0.0.5/24", "gateway": "10.0.0.1", "interface": 0}],
        }
        if ready
        else None,
        "error": None if ready else {"code": 7, "msg": "no master"},
        "containerID": "c0ffee",
        "podUID": "pod-1",
        "updatedAt": updated,
    }


def add(*facts):
    return lambda devices: devices + list(facts)


class RecordingSink:
    def __init__(self, fail: dict | None = None, during=None):
        self.calls: list[tuple[dict, str, list[dict]]] = []
        self.fail = fail or {}
        self.during = during

    def apply(self, claim: dict, driver: str, devices: list[dict]) -> None:
        self.calls.append((claim, driver, devices))
        if self.during is not None:
            self.during(claim)
        error = self.fail.get(claim["uid"])
        if error is not None:
            raise error


@pytest.fixture
def state(tmp_path):
    s = StateDir(str(tmp_path / "state"))
    s.ensure()
    return s


def test_publishes_and_marks(state):
    facts.update_outbox(state, claim(1), add(fact("net1")))
    facts.update_outbox(state, claim(2), add(fact("net2", ready=False)))
    sink = RecordingSink()
    report = drain_outbox(state, sink, driver=DRIVER)
    assert report == DrainReport(published=2, failed={})
    assert [c[0] for c in sink.calls] == [
        {"uid": "claim-uid-1", "namespace": "default", "name": "nets-1"},
        {"uid": "claim-uid-2", "namespace": "default", "name": "nets-2"},
    ]
    _, driver, devices = sink.calls[0]
    assert driver == DRIVER
    assert devices[0]["networkData"] == {
        "interfaceName": "net1",
        "ips": ["10.0.0.5/24"],
        "hardwareAddress": "0a:58:0a:00:00:05",
    }
    assert state.pending_outbox() == []
    # published records with facts stay (the desired state); nothing to do on the next drain
    assert state.read_outbox("claim-uid-1")["publishedSeq"] == 1
    assert drain_outbox(state, sink, driver=DRIVER) == DrainReport()
    assert len(sink.calls) == 2


def test_failing_claim_stays_pending_others_continue(state):
    facts.update_outbox(state, claim(1), add(fact("net1")))
    facts.update_outbox(state, claim(2), add(fact("net2")))
    facts.update_outbox(state, claim(3), add(fact("net3")))
    sink = RecordingSink(fail={"claim-uid-2": SinkError("apiserver said 503")})
    report = drain_outbox(state, sink, driver=DRIVER)
    assert report.published == 2
    assert report.failed == {"claim-uid-2": "apiserver said 503"}
    assert [r["claim"]["uid"] for r in state.pending_outbox()] == ["claim-uid-2"]
    # the retry succeeds
    sink.fail = {}
    assert drain_outbox(state, sink, driver=DRIVER) == DrainReport(published=1)
    assert state.pending_outbox() == []


def test_unexpected_sink_exception_is_reported(state):
    facts.update_outbox(state, claim(1), add(fact("net1")))
    report = drain_outbox(state, RecordingSink(fail={"claim-uid-1": RuntimeError("bug")}), driver=DRIVER)
    assert report.published == 0 and report.failed == {"claim-uid-1": "RuntimeError: bug"}
    assert len(state.pending_outbox()) == 1


def test_newer_update_during_drain_stays_pending(state):
    facts.update_outbox(state, claim(1), add(fact("net1")))

    def meanwhile(c):
        # the CNI plugin records a DEL while the status is being published
        facts.update_outbox(state, claim(1), lambda devices: [])

    sink = RecordingSink(during=meanwhile)
    report = drain_outbox(state, sink, driver=DRIVER)
    assert report.published == 1
    record = state.read_outbox("claim-uid-1")
    assert record["seq"] == 2 and record["publishedSeq"] == 1
    assert [r["claim"]["uid"] for r in state.pending_outbox()] == ["claim-uid-1"]

    # the next drain publishes the empty set and the record disappears
    sink.during = None
    assert drain_outbox(state, sink, driver=DRIVER) == DrainReport(published=1)
    assert sink.calls[-1][2] == []
    assert state.read_outbox("claim-uid-1") is None


def test_latest_fact_per_device_is_published(state):
    facts.update_outbox(state, claim(1), add(fact("net1", ready=False, updated="2026-11-21T05:00:00Z")))
    facts.update_outbox(state, claim(1), add(fact("net1", ready=True, updated="2026-11-21T05:00:01Z")))
    sink = RecordingSink()
    drain_outbox(state, sink, driver=DRIVER)
    devices = sink.calls[0][2]
    assert len(devices) == 1 and devices[0]["conditions"][0]["status"] == "True"


def test_corrupt_record_does_not_block_the_others(state):
    facts.update_outbox(state, claim(1), add(fact("net1")))
    with open(os.path.join(state.root, "outbox", "claim-uid-9.json"), "w") as f:
        f.write("{broken")
    sink = RecordingSink()
    report = drain_outbox(state, sink, driver=DRIVER)
    assert report.published == 1
    # waiting would never make it readable: moved aside intact (issue 12 item 3), not retried
    assert not report.failed and list(report.quarantined) == ["claim-uid-9"]
    (moved,) = os.listdir(os.path.join(state.root, "quarantine"))
    assert moved.startswith("outbox+claim-uid-9.") and moved in report.quarantined["claim-uid-9"]
    with open(os.path.join(state.root, "quarantine", moved)) as f:
        assert f.read() == "{broken"
    assert drain_outbox(state, sink, driver=DRIVER) == DrainReport()


def test_the_publisher_logs_a_quarantined_outbox_record_once_and_counts_it(tmp_path, caplog) -> None:
    import logging

    from dracni import metrics
    from dracni.service.status_publisher import StatusPublisher

    state = StateDir(str(tmp_path / "state"))
    facts.update_outbox(state, claim(1), add(fact("net1")))
    with open(os.path.join(state.root, "outbox", "claim-uid-1.json"), "w") as f:
        f.write('{"schema": 2, "kind": "StatusOutbox"}')  # a newer dracni's, after a downgrade
    publisher = StatusPublisher(state, RecordingSink(), DRIVER)
    with caplog.at_level(logging.WARNING, logger="dracni.service.status_publisher"):
        assert publisher._drain_once(0.0) == 0.0
        assert publisher._drain_once(0.0) == 0.0
    lines = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
    assert len(lines) == 1 and "claim-uid-1" in lines[0] and "schema 2" in lines[0]
    assert metrics.REGISTRY.get_sample_value("dracni_state_quarantined_records") == 1


def test_drain_into_local_sink(state, tmp_path):
    manifest = tmp_path / "claims.yaml"
    manifest.write_text("kind: ResourceClaim\n")
    sink = LocalStatusSink(lambda ns, name: str(manifest) if name.startswith("nets-") else None)
    facts.update_outbox(state, claim(1), add(fact("net1"), fact("net2", ready=False)))
    facts.update_outbox(state, {**claim(2), "name": "unknown"}, add(fact("net1")))
    report = drain_outbox(state, sink, driver=DRIVER)
    assert report.published == 1
    # A claim the sink cannot locate stays pending (its manifest may be elsewhere), named apart.
    assert set(report.failed) == {"claim-uid-2"} and not report.dropped
    assert sink.unmatched == {"claim-uid-2": "claim default/unknown is not in any manifest here"}
    assert [r["claim"]["uid"] for r in state.pending_outbox()] == ["claim-uid-2"]
    document = sink.read("default", "nets-1")
    assert [d["device"] for d in document["status"]["devices"]] == ["net1", "net2"]

    facts.update_outbox(state, claim(1), lambda devices: [])
    assert drain_outbox(state, sink, driver=DRIVER).published == 1
    assert sink.read("default", "nets-1") is None
    assert state.read_outbox("claim-uid-1") is None


def test_retryable_failure_stays_pending_and_final_failure_is_dropped(state):
    class Sink:
        def __init__(self, retryable):
            self.retryable = retryable

        def apply(self, claim, driver, devices):
            raise SinkError("nope", retryable=self.retryable)

    facts.update_outbox(state, claim(1), add(fact("net1")))
    report = drain_outbox(state, Sink(retryable=True), driver=DRIVER)
    assert list(report.failed) == ["claim-uid-1"] and not report.dropped
    assert [r["claim"]["uid"] for r in state.pending_outbox()] == ["claim-uid-1"]
    report = drain_outbox(state, Sink(retryable=False), driver=DRIVER)
    assert list(report.dropped) == ["claim-uid-1"] and not report.failed and report.published == 0
    assert state.pending_outbox() == []


def test_the_publisher_logs_an_authorization_refusal_once_and_keeps_retrying(tmp_path, caplog) -> None:
    import logging

    from dracni.service.status_publisher import StatusPublisher
    from dracni.state.store import StateDir
    from dracni.status.sink import SinkError

    class Refusing:  # a StatusSink the API server refuses
        calls = 0

        def apply(self, claim, driver, devices):
            Refusing.calls += 1
            raise SinkError("forbidden: resourceclaims/status", forbidden=True)

    state = StateDir(str(tmp_path / "state"))
    facts.update_outbox(state, {"uid": "u1", "namespace": "n", "name": "c", "driver": "dracni.io"}, lambda facts: [])
    publisher = StatusPublisher(state, Refusing(), "dracni.io")
    with caplog.at_level(logging.WARNING, logger="dracni.service.status_publisher"):
        backoffs = [publisher._drain_once(0.0), publisher._drain_once(0.2), publisher._drain_once(0.4)]
    assert Refusing.calls == 3 and backoffs == [0.2, 0.4, 0.8]
    refusals = [r for r in caplog.records if "refused by the API server's authorization" in r.getMessage()]
    assert len(refusals) == 1 and state.pending_outbox()


def test_publish_status_keeps_claims_of_other_manifests_pending(state, tmp_path):
    """``dracni publish-status DIR``: an entry whose claim is in no manifest of DIR is not
    dropped; it stays pending, is named, and the exit code is 0; moving the manifest into DIR
    publishes it on the next run."""
    import yaml
    from click.testing import CliRunner

    from dracni.cli import main as cli

    def manifest(n: int) -> str:
        meta = {"name": f"nets-{n}", "namespace": "default", "uid": f"claim-uid-{n}"}
        return yaml.safe_dump({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta})

    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    (here / "one.yaml").write_text(manifest(1))
    (elsewhere / "two.yaml").write_text(manifest(2))
    facts.update_outbox(state, claim(1), add(fact("net1")))
    facts.update_outbox(state, claim(2), add(fact("net2")))

    def publish(directory) -> tuple[int, str]:
        result = CliRunner().invoke(cli, ["publish-status", str(directory), f"--state-dir={state.root}"])
        return result.exit_code, result.output

    code, output = publish(here)
    assert code == 0, output
    assert "published 1 claim status update(s)" in output
    assert "claim claim-uid-2: kept pending: claim default/nets-2 is not in any manifest here" in output
    assert f"1 claim(s) kept pending: their manifests are not in {here}" in output
    assert "dropped" not in output
    assert [r["claim"]["uid"] for r in state.pending_outbox()] == ["claim-uid-2"]

    (elsewhere / "two.yaml").rename(here / "two.yaml")
    code, output = publish(here)
    assert code == 0, output
    assert "published 1 claim status update(s)" in output and "kept pending" not in output
    assert state.pending_outbox() == []
    assert (here / "two.default.nets-2.status.json").exists()


def test_publish_status_exits_non_zero_on_a_real_error(state, tmp_path):
    from click.testing import CliRunner

    from dracni.cli import main as cli

    (tmp_path / "one.yaml").write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: nets-1, uid: claim-uid-1}\n"
    )
    (tmp_path / "one.default.nets-1.status.json").mkdir()  # the status file cannot be written
    facts.update_outbox(state, claim(1), add(fact("net1")))
    result = CliRunner().invoke(cli, ["publish-status", str(tmp_path), f"--state-dir={state.root}"])
    assert result.exit_code == 1, result.output
    assert "claim claim-uid-1: not published, will retry:" in result.output
    assert "kept pending" not in result.output


# -- failure status lasts (issue 12 item 2): the outbox keeps it, the service holds nothing ---
def retract(container_id: str = "c0ffee"):
    """What the plugin's DEL does to the outbox (facts.retract_facts, no Detached fact)."""
    from dracni.state import facts as F

    return lambda devices: F.retract_facts(devices, container_id, [])


def reasons(call) -> list[str]:
    return [e["conditions"][0]["reason"] for e in call[2]]


def test_a_failure_outlives_the_teardown_del_until_the_next_ready_add(state):
    from dracni.state import facts as F

    sink = RecordingSink()
    facts.update_outbox(state, claim(1), add(fact("net1", ready=False)))
    drain_outbox(state, sink, driver=DRIVER)
    facts.update_outbox(state, claim(1), retract())  # the runtime's teardown DEL of the failed ADD
    drain_outbox(state, sink, driver=DRIVER)
    kept = sink.calls[-1][2]
    assert reasons(sink.calls[-1]) == ["NetworkInterfaceNotReady"]
    assert kept[0]["conditions"][0]["message"] == "no master"
    # it is in the state dir, not in a process's memory: a new publisher (a restarted
    # service) publishes it the same way
    assert [f.get("lasting") for f in state.read_outbox("claim-uid-1")["devices"]] == [True]
    facts.update_outbox(state, claim(1), lambda devices: devices)
    drain_outbox(state, RecordingSink(), driver=DRIVER)
    # the next successful ADD of that device (another sandbox) replaces it, and its DEL
    # leaves nothing behind
    ready = dict(fact("net1", updated="2026-11-21T05:00:09Z"), containerID="beef")
    facts.update_outbox(state, claim(1), lambda devices: F.upsert_facts(devices, [ready]))
    drain_outbox(state, sink, driver=DRIVER)
    assert [e["conditions"][0]["status"] for e in sink.calls[-1][2]] == ["True"]
    facts.update_outbox(state, claim(1), retract("beef"))
    drain_outbox(state, sink, driver=DRIVER)
    assert sink.calls[-1][2] == []
    assert state.read_outbox("claim-uid-1") is None


def test_one_lasting_failure_per_device_the_newest(state):
    sink = RecordingSink()
    first = dict(fact("net1", ready=False), containerID="a1")
    second = dict(fact("net1", ready=False, updated="2026-11-21T05:00:05Z"), containerID="b2")
    second["error"] = {"code": 7, "msg": "second try: no master"}
    facts.update_outbox(state, claim(1), add(first))
    facts.update_outbox(state, claim(1), retract("a1"))
    facts.update_outbox(state, claim(1), add(second))
    facts.update_outbox(state, claim(1), retract("b2"))
    assert [(f["containerID"], f.get("lasting")) for f in state.read_outbox("claim-uid-1")["devices"]] == [("b2", True)]
    drain_outbox(state, sink, driver=DRIVER)
    assert sink.calls[-1][2][0]["conditions"][0]["message"] == "second try: no master"


def test_unprepare_ends_a_kept_failure(state):
    from dracni.claims.prepare import unprepare_claims

    sink = RecordingSink()
    facts.update_outbox(state, claim(1), add(fact("net1", ready=False), fact("net2", ready=False)))
    facts.update_outbox(state, claim(1), retract())
    drain_outbox(state, sink, driver=DRIVER)
    assert [e["device"] for e in sink.calls[-1][2]] == ["net1", "net2"]

    assert unprepare_claims(state, ["claim-uid-1", "claim-uid-unknown"]) == {
        "claim-uid-1": None,
        "claim-uid-unknown": None,
    }
    drain_outbox(state, sink, driver=DRIVER)
    assert sink.calls[-1] == ({"uid": "claim-uid-1", "namespace": "default", "name": "nets-1"}, DRIVER, [])
    assert state.read_outbox("claim-uid-1") is None  # cleared once, nothing left to publish
    calls = len(sink.calls)
    drain_outbox(state, sink, driver=DRIVER)
    assert len(sink.calls) == calls


def test_a_failure_of_one_pod_never_hides_another_pods_ready_attachment(state):
    shared = dict(fact("net1"), containerID="ready-pod")
    facts.update_outbox(state, claim(1), add(shared, dict(fact("net1", ready=False), containerID="failed-pod")))
    facts.update_outbox(state, claim(1), retract("failed-pod"))
    sink = RecordingSink()
    drain_outbox(state, sink, driver=DRIVER)
    assert [e["conditions"][0]["status"] for e in sink.calls[-1][2]] == ["True"]


def test_annotations_add_conditions_and_a_retryable_one_keeps_the_record_pending(state):
    facts.update_outbox(state, claim(1), add(fact("net1")))
    note = {
        "type": "IPAMClaimSynced",
        "status": "False",
        "reason": "IPAMClaimConflict",
        "message": "m",
        "lastTransitionTime": "2026-11-21T05:00:00Z",
    }
    sink = RecordingSink()
    drain_outbox(state, sink, driver=DRIVER, annotate=lambda record: {("node-1", "net1", ""): [note]})
    assert [c["type"] for c in sink.calls[-1][2][0]["conditions"]] == ["Ready", "IPAMClaimSynced"]

    facts.update_outbox(state, claim(1), add(fact("net1", updated="2026-11-21T05:00:05Z")))

    def flaky(record):
        raise SinkError("IPAMClaim default/x: 503")

    report = drain_outbox(state, sink, driver=DRIVER, annotate=flaky)
    assert list(report.failed) == ["claim-uid-1"]
    assert [c["type"] for c in sink.calls[-1][2][0]["conditions"]] == ["Ready"]  # the status still went out
    assert [r["claim"]["uid"] for r in state.pending_outbox()] == ["claim-uid-1"]


def test_an_entry_refused_alone_becomes_a_marker_and_the_others_are_published(state):
    """A 422 for one entry's content (here: the server finds eth1's data too large) is retried per
    entry: eth1 as a marker (Ready reason StatusRefused, the server's words, no data), eth0 and
    eth2 as they are; the claim is published, not dropped."""

    class Refusing:
        def __init__(self):
            self.calls: list[list[dict]] = []

        def apply(self, claim, driver, devices):
            self.calls.append(devices)
            if any(d["device"] == "eth1" and "data" in d for d in devices):
                raise SinkError("status.devices[1].data: Too long: may not be more than 10240 bytes", refused=True)

    facts.update_outbox(state, claim(1), add(fact("eth0"), fact("eth1"), fact("eth2")))
    sink = Refusing()
    report = drain_outbox(state, sink, driver=DRIVER)
    assert report.published == 1 and not report.dropped and not report.failed
    assert report.refused["claim-uid-1"].startswith(
        "node-1/eth1 replaced by a marker: status.devices[1].data: Too long"
    )
    final = sink.calls[-1]
    assert [d["device"] for d in final] == ["eth0", "eth1", "eth2"]
    assert "data" in final[0] and "data" in final[2] and "data" not in final[1] and "networkData" not in final[1]
    (ready,) = final[1]["conditions"]
    assert ready["type"] == "Ready" and ready["status"] == "True" and ready["reason"] == "StatusRefused"
    assert ready["message"].startswith("the API server refused this entry's status: status.devices[1].data")
    assert state.pending_outbox() == []


def test_a_refusal_of_every_entry_leaves_none_and_a_lost_server_keeps_the_record_pending(state):
    class Sink:
        def __init__(self, refuse_all: bool):
            self.refuse_all, self.calls = refuse_all, []

        def apply(self, claim, driver, devices):
            self.calls.append(devices)
            if devices and self.refuse_all:
                raise SinkError("not allocated", refused=True)
            if len(self.calls) > 1 and not self.refuse_all:
                raise SinkError("connection refused")  # retryable
            if not self.refuse_all:
                raise SinkError("one is bad", refused=True)

    facts.update_outbox(state, claim(1), add(fact("eth0"), fact("eth1")))
    sink = Sink(refuse_all=True)
    report = drain_outbox(state, sink, driver=DRIVER)
    assert sink.calls[-1] == []  # the old entries are replaced by none
    assert "node-1/eth0 left out: not allocated" in report.refused["claim-uid-1"]
    assert report.published == 1 and not report.dropped
    facts.update_outbox(state, claim(1), add(fact("eth2")))
    report = drain_outbox(state, Sink(refuse_all=False), driver=DRIVER)
    assert list(report.failed) == ["claim-uid-1"] and not report.refused and report.published == 0
    assert [r["claim"]["uid"] for r in state.pending_outbox()] == ["claim-uid-1"]
