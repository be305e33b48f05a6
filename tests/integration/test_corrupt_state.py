"""Damaged state never blocks DEL (issue 12 item 3) and stderr stays quiet (item 7): the frozen
binary chained after ptp, driven by cnitool 1.1.2, with Debian's macvlan and host-local.

An attachment record DEL cannot read (corrupt JSON, a newer ``schema`` after a downgrade, the
``devices`` key missing) is moved into ``<state>/quarantine/`` intact and DEL rebuilds the
delegate calls from the prepared claims, so net1 and its address are released; a corrupt
outbox record of the claim is quarantined the same way.  ``dracni inspect`` reports both
kinds of bad records instead of crashing.
"""

from __future__ import annotations

import json
import os

import pytest

from tests import procs
from tests.harness import container_id_for
from tests.integration.conftest import ipam_reservations, macvlan, one_device_claim
from tests.integration.test_process_safety import first_add_pid, start_add, stop


def _attachment_path(lab, pod):
    return lab.state_dir / "attachments" / f"podnet+{container_id_for(pod.path)}+eth0.json"


def _quarantined(lab) -> list:
    directory = lab.state_dir / "quarantine"
    return sorted(directory.iterdir()) if directory.exists() else []


def _damage_newer_schema(text: str) -> str:
    return json.dumps({**json.loads(text), "schema": 2, "addedLater": {"x": 1}})


def _damage_no_devices(text: str) -> str:
    return json.dumps({k: v for k, v in json.loads(text).items() if k != "devices"})


DAMAGE = {
    "corrupt-json": lambda text: text[: len(text) // 2],
    "newer-schema": _damage_newer_schema,
    "missing-devices": _damage_no_devices,
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_del_with_an_unreadable_attachment_record_releases_net1_and_its_ip(lab, pod_uid, damage):
    lab.write_conflist()
    lab.prepare(one_device_claim("mv", pod_uid, [macvlan(lab)]))
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    assert "net1" in pod.links() and ipam_reservations(lab, "mv") == ["10.10.1.2"]
    path = _attachment_path(lab, pod)
    damaged = DAMAGE[damage](path.read_text())
    path.write_text(damaged)

    proc = lab.cnitool("del", pod, pod_uid=pod_uid)

    assert "net1" not in pod.links()
    assert ipam_reservations(lab, "mv") == []
    assert not path.exists()
    (moved,) = _quarantined(lab)
    assert moved.read_text() == damaged  # moved aside, never rewritten (a newer dracni's record survives)
    assert moved.name.startswith(f"attachments+{path.stem}.")
    assert b"dracni[" in proc.stderr and b"moved an unreadable state record aside" in proc.stderr  # one warning
    report = lab.dracni("inspect", f"--state-dir={lab.state_dir}").stdout.decode()
    assert "quarantined records: 1" in report and moved.name in report
    lab.cnitool("del", pod, pod_uid=pod_uid)  # and again: DEL stays idempotent


def test_del_with_a_corrupt_outbox_record_of_the_claim_succeeds(lab, pod_uid):
    lab.write_conflist()
    claim = one_device_claim("mv", pod_uid, [macvlan(lab)])
    lab.prepare(claim)
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    outbox = lab.state_dir / "outbox" / f"{claim['metadata']['uid']}.json"
    outbox.write_text('{"schema": 1, "kind": "StatusOutbox", "seq": ')

    lab.cnitool("del", pod, pod_uid=pod_uid)

    assert "net1" not in pod.links() and ipam_reservations(lab, "mv") == []
    assert not list((lab.state_dir / "attachments").iterdir())
    (moved,) = _quarantined(lab)
    assert moved.name.startswith(f"outbox+{claim['metadata']['uid']}.")
    assert json.loads(outbox.read_text())["devices"] == []  # the DEL's retraction, afresh


def test_add_refuses_to_overwrite_a_newer_record_and_the_teardown_del_moves_it_aside(lab, pod_uid):
    lab.write_conflist()
    lab.prepare(one_device_claim("mv", pod_uid, [macvlan(lab)]))
    pod = lab.pod()
    path = _attachment_path(lab, pod)
    path.parent.mkdir(parents=True, exist_ok=True)
    newer = {"schema": 2, "kind": "Attachment", "somethingNew": True}
    path.write_text(json.dumps(newer))

    proc = lab.cnitool("add", pod, pod_uid=pod_uid, check=False)

    assert proc.returncode != 0
    assert b"refusing to overwrite the attachment record" in proc.stderr and b"schema 2" in proc.stderr
    assert json.loads(path.read_text()) == newer
    assert "net1" not in pod.links() and ipam_reservations(lab, "mv") == []

    lab.cnitool("del", pod, pod_uid=pod_uid)  # the runtime's teardown of the failed sandbox
    (moved,) = _quarantined(lab)
    assert json.loads(moved.read_text()) == newer
    lab.cnitool("add", pod, pod_uid=pod_uid)  # the retried sandbox
    assert "net1" in pod.links()
    lab.cnitool("del", pod, pod_uid=pod_uid)
    assert ipam_reservations(lab, "mv") == []


def test_inspect_reports_unreadable_records_instead_of_crashing(lab, pod_uid):
    lab.write_conflist()
    claim = one_device_claim("mv", pod_uid, [macvlan(lab)])
    lab.prepare(claim)
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    (lab.state_dir / "claims" / f"{claim['metadata']['uid']}.json").write_text("{garbage")
    path = _attachment_path(lab, pod)
    path.write_text(_damage_newer_schema(path.read_text()))

    text = lab.dracni("inspect", f"--state-dir={lab.state_dir}").stdout.decode()
    snapshot = json.loads(lab.dracni("inspect", "--json", f"--state-dir={lab.state_dir}").stdout)

    assert "prepared claims: 0" in text and "attachments: 0" in text and "unreadable records: 2" in text
    assert "corrupt state record" in text and "schema 2, newer than this dracni's 1" in text
    assert sorted((u["path"].split("/")[-2], u["newer"]) for u in snapshot["unreadable"]) == [
        ("attachments", True),
        ("claims", False),
    ]
    assert snapshot["quarantine"] == []  # inspect only reads: nothing moved


# -- quiet stderr (issue 12 item 7) ----------------------------------------------------------------


def test_debug_log_level_keeps_the_runtimes_stderr_quiet(lab, pod_uid):
    """cnitool (libcni's RawExec) copies a successful plugin's stderr into its own: with
    ``logLevel: debug`` dracni's debug lines go to the logFile only."""
    lab.write_conflist()  # logLevel debug, logFile set
    lab.prepare(one_device_claim("mv", pod_uid, [macvlan(lab)]))
    pod = lab.pod()

    add = lab.cnitool("add", pod, pod_uid=pod_uid)
    delete = lab.cnitool("del", pod, pod_uid=pod_uid)

    assert b"dracni[" not in add.stderr + delete.stderr
    logged = lab.read_log()
    assert " DEBUG " in logged and "delegate macvlan ADD" in logged and "ADD attached net1" in logged


def test_a_killed_add_leaves_at_most_one_line_on_stderr(lab, pod_uid):
    """When the runtime kills dracni at its timeout, libcni's pluginErr makes the plugin's whole
    stderr the pod's error message: with ``logLevel: debug`` that must not be a debug dump."""
    lab.write_conflist()
    record_file = lab.tmp / "recorder.jsonl"
    slow = {"type": "recorder", "recordFile": str(record_file), "sleepSeconds": 60}
    lab.prepare(one_device_claim("slow", pod_uid, [macvlan(lab), slow]))
    pod = lab.pod()
    conf = json.loads((lab.netconf_dir / "10-podnet.conflist").read_text())["plugins"][1]
    conf.update({"cniVersion": "1.0.0", "name": "podnet"})
    env = lab.env(pod_uid=pod_uid)
    env.update({"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "killed", "CNI_NETNS": pod.path, "CNI_IFNAME": "eth0"})
    runtime = start_add(lab, env, conf)
    delegate = None
    try:
        delegate = first_add_pid(lab, runtime, record_file, "the slow delegate never started")
        os.kill(procs.read(delegate).ppid, 9)  # dracni, in the middle of the ADD
        runtime.wait(timeout=10)
        stderr = runtime.stderr.read()
        assert len(stderr.splitlines()) <= 1, stderr
        assert b"DEBUG" not in stderr and " DEBUG " in lab.read_log()
        proc = lab.plugin("DEL", conf, container_id="killed", netns=pod.path, ifname="eth0", cni_args=env["CNI_ARGS"])
        assert proc.returncode == 0, (proc.stdout, proc.stderr, lab.read_log())
        assert "net1" not in pod.links() and ipam_reservations(lab, "slow") == []
    finally:
        stop(runtime, delegate)
