"""dracni.state.store.StateDir against real directories, real files and real processes.

Nothing of dracni is mocked: records are written to pytest temp dirs, the lock is exercised by
other Python processes (started with the venv's interpreter) and checked with flock(2) itself.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dracni.state import facts
from dracni.state.store import SCHEMA_VERSION, BadRecord, StateDir, StateError

REPO = Path(__file__).resolve().parents[3]
SCHEMA_PATH = REPO / "spec" / "state-records.schema.json"


# -- helpers ------------------------------------------------------------------------------


def mode(path: Path | str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def all_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def tmp_leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if ".tmp" in p.name]


def conflist(name: str = "macnet", version: str = "1.0.0") -> dict:
    return {
        "cniVersion": version,
        "name": name,
        "plugins": [
            {
                "type": "macvlan",
                "master": "eth1",
                "mode": "bridge",
                "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.10.0.0/24"}]]},
            },
            {"type": "tuning", "capabilities": {"mac": True}},
        ],
    }


def prepared_claim(
    uid: str = "claim-uid-1",
    *,
    namespace: str = "default",
    name: str = "web-net",
    pods: list[tuple[str, str]] = (("pod-uid-1", "web-0"),),
) -> dict:
    """A PreparedClaim as the kubelet plugin service writes it (without schema/kind)."""
    return {
        "uid": uid,
        "namespace": namespace,
        "name": name,
        "driver": "dracni.io",
        "source": None,
        "preparedAt": "2024-05-01T10:00:00Z",
        "pods": [{"uid": u, "name": n} for u, n in pods],
        "devices": [
            {
                "request": "net",
                "pool": "node-a",
                "device": "eth1-macvlan",
                "shareID": None,
                "ifName": None,
                "config": conflist(),
                "runtimeConfig": {"mac": "02:00:00:00:00:01"},
                "capabilities": {"mac": True},
            },
            {
                "request": "fast/sriov",
                "pool": "node-a",
                "device": "vf-3",
                "shareID": "share-7",
                "ifName": "fast0",
                "config": conflist("sriovnet", "0.4.0"),
            },
        ],
    }


def result_1x(address: str = "10.10.0.5/24") -> dict:
    return {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "net1", "mac": "02:00:00:00:00:01", "sandbox": "/var/run/netns/pod"}],
        "ips": [{"address": address, "gateway": "10.10.0.1", "interface": 0}],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dns": {},
    }


def attachment(container_id: str = "c0ffee", ifname: str = "eth0", network: str = "cbr0") -> dict:
    """An Attachment as the CNI plugin's ADD writes it (without schema/kind)."""
    claim_ref = {"uid": "claim-uid-1", "namespace": "default", "name": "web-net"}
    return {
        "network": network,
        "containerID": container_id,
        "ifName": ifname,
        "netns": "/var/run/netns/pod",
        "cniArgs": "K8S_POD_UID=pod-uid-1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0",
        "cniVersion": "1.0.0",
        "pod": {"uid": "pod-uid-1", "namespace": "default", "name": "web-0"},
        "state": "ready",
        "error": None,
        "updatedAt": "2024-05-01T10:00:01Z",
        "devices": [
            {
                "claim": claim_ref,
                "request": "net",
                "pool": "node-a",
                "device": "eth1-macvlan",
                "shareID": None,
                "ifName": "net1",
                "driver": "dracni.io",
                "result": result_1x(),
                "error": None,
                "delegates": [
                    {
                        "type": "macvlan",
                        "cniVersion": "1.0.0",
                        "added": True,
                        "result": result_1x(),
                        "config": {"type": "macvlan", "name": "macnet", "cniVersion": "1.0.0", "master": "eth1"},
                    },
                    {
                        "type": "tuning",
                        "cniVersion": "1.0.0",
                        "added": True,
                        "result": result_1x(),
                        "config": {
                            "type": "tuning",
                            "name": "macnet",
                            "cniVersion": "1.0.0",
                            "runtimeConfig": {"mac": "02:00:00:00:00:01"},
                        },
                    },
                ],
            }
        ],
    }


def failed_attachment() -> dict:
    rec = attachment(container_id="deadbeef")
    err = {"code": 100, "msg": "delegate macvlan ADD failed: master eth1 not found", "details": ""}
    rec["state"] = "failed"
    rec["error"] = err
    rec["devices"][0].update(result=None, error=err)
    for d in rec["devices"][0]["delegates"]:
        d.update(added=False, result=None)
    return rec


def fact(device: str, *, container_id: str = "c0ffee", ready: bool = True) -> dict:
    return {
        "request": "net",
        "pool": "node-a",
        "device": device,
        "shareID": None,
        "ifName": "net1",
        "ready": ready,
        "result": result_1x() if ready else None,
        "error": None if ready else {"code": 100, "msg": "boom"},
        "containerID": container_id,
        "podUID": "pod-uid-1",
        "updatedAt": "2024-05-01T10:00:01Z",
    }


CLAIM_REF = {"uid": "claim-uid-1", "namespace": "default", "name": "web-net", "driver": "dracni.io"}


def run_python(code: str, *args: str, **kwargs) -> subprocess.Popen:
    """Start the venv's Python on ``code`` (dracni importable through the editable install)."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


HOLDER = """
    import sys, time
    from dracni.state.store import StateDir
    state = StateDir(sys.argv[1])
    with state.locked(timeout=10):
        print("locked", flush=True)
        time.sleep(float(sys.argv[2]))
    print("released", flush=True)
"""


def start_holder(root: Path, hold: float) -> subprocess.Popen:
    proc = run_python(HOLDER, str(root), str(hold))
    line = proc.stdout.readline()
    if line.strip() != "locked":
        proc.kill()
        raise AssertionError(f"lock holder did not start: {line!r} {proc.stderr.read()}")
    return proc


# -- permissions and atomic writes ---------------------------------------------------------


def test_tree_is_owner_only_and_records_are_0600(state: StateDir, root: Path) -> None:
    state.put_claim(prepared_claim())
    state.put_attachment(attachment())
    facts.update_outbox(state, CLAIM_REF, lambda facts: facts + [fact("eth1-macvlan")])
    state.write_cache("plugin-versions", {"kind": "PluginVersions"})

    for sub in ("", "claims", "pods", "attachments", "outbox", "cache"):
        assert mode(root / sub) == 0o700, sub
    files = all_files(root)
    assert root / "state.lock" in files
    assert {p.relative_to(root).as_posix() for p in files} == {
        "state.lock",
        "claims/claim-uid-1.json",
        "pods/uid_pod-uid-1.json",
        "pods/name_default_web-0.json",
        "attachments/cbr0+c0ffee+eth0.json",
        "outbox/claim-uid-1.json",
        "cache/plugin-versions.json",
    }
    for path in files:
        assert mode(path) == 0o600, path


def test_permissions_do_not_depend_on_umask(root: Path) -> None:
    old = os.umask(0)
    try:
        state = StateDir(str(root))
        state.put_claim(prepared_claim())
    finally:
        os.umask(old)
    assert mode(root) == 0o700
    assert mode(root / "claims") == 0o700
    assert mode(root / "claims" / "claim-uid-1.json") == 0o600
    assert mode(root / "state.lock") == 0o600


def test_existing_open_directory_is_tightened(root: Path) -> None:
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    (root / "claims").mkdir()
    os.chmod(root / "claims", 0o777)
    StateDir(str(root)).ensure()
    assert mode(root) == 0o700
    assert mode(root / "claims") == 0o700


def test_no_temp_files_left_after_writes(state: StateDir, root: Path) -> None:
    for i in range(5):
        state.put_claim(prepared_claim(f"claim-{i}", pods=[(f"pod-{i % 2}", f"web-{i % 2}")]))
        state.put_attachment(attachment(container_id=f"c{i}"))
        facts.update_outbox(state, dict(CLAIM_REF, uid=f"claim-{i}"), lambda facts, i=i: facts + [fact(f"d{i}")])
        facts.published(state, f"claim-{i}", 1)
    state.remove_claim("claim-0")
    state.remove_attachment("cbr0", "c0", "eth0")
    assert tmp_leftovers(root) == []
    # every file left is a record or the lock
    assert all(p.name == "state.lock" or p.suffix == ".json" for p in all_files(root))


def test_write_into_replaced_directory_fails_and_keeps_old_record(state: StateDir, root: Path) -> None:
    old = attachment()
    state.put_attachment(old)
    before = (root / "attachments" / "cbr0+c0ffee+eth0.json").read_bytes()

    # Something replaced the attachments directory by a regular file.
    os.rename(root / "attachments", root / "attachments.aside")
    (root / "attachments").write_text("not a directory\n")
    changed = attachment()
    changed["state"] = "failed"
    # Taking the lock re-creates the tree and notices the file in the way ...
    with pytest.raises(StateError, match="attachments"):
        state.put_attachment(changed)
    # ... and when it is replaced while the lock is held, the record write itself fails.
    (root / "attachments").unlink()
    os.rename(root / "attachments.aside", root / "attachments")
    with state.locked(timeout=5):
        os.rename(root / "attachments", root / "attachments.aside")
        (root / "attachments").write_text("not a directory\n")
        with pytest.raises(StateError) as info:
            state.put_attachment(changed)
    assert "cannot write" in str(info.value)
    assert str(root / "attachments" / "cbr0+c0ffee+eth0.json") in str(info.value)
    assert (root / "attachments").read_text() == "not a directory\n"

    # Put the directory back: the old record is exactly as it was, no temp file anywhere.
    (root / "attachments").unlink()
    os.rename(root / "attachments.aside", root / "attachments")
    assert (root / "attachments" / "cbr0+c0ffee+eth0.json").read_bytes() == before
    assert state.read_attachment("cbr0", "c0ffee", "eth0")["state"] == "ready"
    assert tmp_leftovers(root) == []
    # and the lock was released: the next write works
    state.put_attachment(changed)
    assert state.read_attachment("cbr0", "c0ffee", "eth0")["state"] == "failed"


def test_write_that_cannot_create_its_temp_file_keeps_old_record(state: StateDir, root: Path) -> None:
    facts.update_outbox(state, CLAIM_REF, lambda facts: [fact("a")])
    path = root / "outbox" / "claim-uid-1.json"
    before = path.read_bytes()
    blocker = path.parent / f".{path.name}.tmp{os.getpid()}"
    blocker.mkdir()  # the temp file this process would write cannot be created
    try:
        with pytest.raises(StateError, match="cannot write .*claim-uid-1.json"):
            facts.update_outbox(state, CLAIM_REF, lambda facts: facts + [fact("b")])
    finally:
        blocker.rmdir()
    assert path.read_bytes() == before
    assert state.read_outbox("claim-uid-1")["seq"] == 1


def test_unsafe_record_names_are_refused(state: StateDir) -> None:
    for bad in ("", "..", ".", "a/b", "x\0y"):
        with pytest.raises(StateError):
            state.put_claim(prepared_claim(bad))
        with pytest.raises(StateError):
            state.read_outbox(bad)


# -- record shape and the schema -----------------------------------------------------------


def test_records_carry_schema_and_kind(state: StateDir, root: Path) -> None:
    state.put_claim(prepared_claim())
    state.put_attachment(attachment())
    facts.update_outbox(state, CLAIM_REF, lambda facts: [fact("x")])
    kinds = {}
    for path in all_files(root):
        if path.suffix != ".json":
            continue
        record = json.loads(path.read_text())
        assert record["schema"] == SCHEMA_VERSION == 1, path
        kinds[path.relative_to(root).parts[0]] = record["kind"]
    assert kinds == {
        "claims": "PreparedClaim",
        "pods": "PodIndex",
        "attachments": "Attachment",
        "outbox": "StatusOutbox",
    }


def test_every_record_written_validates_against_the_schema(state: StateDir, root: Path, validator) -> None:
    state.put_claim(prepared_claim())
    state.put_claim(prepared_claim("claim-uid-2", name="other", pods=[("pod-uid-1", "web-0"), ("pod-uid-2", "web-1")]))
    state.put_attachment(attachment())
    state.put_attachment(failed_attachment())
    facts.update_outbox(state, CLAIM_REF, lambda facts: [fact("eth1-macvlan"), fact("vf-3", ready=False)])
    facts.update_outbox(state, {"uid": "claim-uid-3", "namespace": "", "name": ""}, lambda facts: [])  # driver None
    facts.published(state, "claim-uid-1", 1)

    seen = set()
    for path in all_files(root):
        if path.suffix != ".json" or path.parent.name == "cache":
            continue
        record = json.loads(path.read_text())
        errors = sorted(validator.iter_errors(record), key=lambda e: list(e.path))
        assert not errors, f"{path}: {[e.message for e in errors]}"
        seen.add(record["kind"])
    assert seen == {"PreparedClaim", "PodIndex", "Attachment", "StatusOutbox"}

    # The validator is not a rubber stamp: a broken record of each kind is rejected.
    claim = json.loads((root / "claims" / "claim-uid-1.json").read_text())
    del claim["devices"][0]["config"]["plugins"]
    assert not validator.is_valid(claim)
    outbox = json.loads((root / "outbox" / "claim-uid-1.json").read_text())
    outbox["seq"] = -1
    assert not validator.is_valid(outbox)
    att = json.loads((root / "attachments" / "cbr0+c0ffee+eth0.json").read_text())
    att["state"] = "half-done"
    assert not validator.is_valid(att)


# -- the pod index ---------------------------------------------------------------------------


def test_put_claim_indexes_by_uid_and_by_name(state: StateDir, root: Path) -> None:
    state.put_claim(prepared_claim())
    assert json.loads((root / "pods" / "uid_pod-uid-1.json").read_text())["claims"] == ["claim-uid-1"]
    assert json.loads((root / "pods" / "name_default_web-0.json").read_text())["claims"] == ["claim-uid-1"]
    assert state.pod_claim_uids("pod-uid-1", None, None) == ["claim-uid-1"]
    assert state.pod_claim_uids("pod-uid-1", "default", "web-0") == ["claim-uid-1"]
    assert state.pod_claim_uids(None, "default", "web-0") == ["claim-uid-1"]
    assert [c["uid"] for c in state.pod_claims(None, "default", "web-0")] == ["claim-uid-1"]
    assert state.read_claim("claim-uid-1")["kind"] == "PreparedClaim"


def test_pod_lookup_prefers_uid_and_never_falls_back_from_an_unknown_uid(state: StateDir) -> None:
    state.put_claim(prepared_claim())
    # A new pod re-using the name (StatefulSet restart) has another UID: not this claim.
    assert state.pod_claim_uids("pod-uid-NEW", "default", "web-0") == []
    assert state.pod_claims("pod-uid-NEW", "default", "web-0") == []
    # Name only: the fallback is used.
    assert state.pod_claim_uids(None, "default", "web-0") == ["claim-uid-1"]
    assert state.pod_claim_uids("", "default", "web-0") == ["claim-uid-1"]
    # Incomplete or wrong names do not match.
    assert state.pod_claim_uids(None, "default", None) == []
    assert state.pod_claim_uids(None, None, "web-0") == []
    assert state.pod_claim_uids(None, "other", "web-0") == []
    assert state.pod_claim_uids(None, None, None) == []


def test_uid_index_wins_over_name_index(state: StateDir) -> None:
    state.put_claim(prepared_claim("claim-a", pods=[("pod-a", "web-0")]))
    state.put_claim(prepared_claim("claim-b", pods=[("pod-b", "web-1")]))
    # The UID says pod-b even though the name is that of pod-a.
    assert state.pod_claim_uids("pod-b", "default", "web-0") == ["claim-b"]


def test_reput_with_changed_reserved_for_moves_the_index(state: StateDir, root: Path) -> None:
    state.put_claim(prepared_claim(pods=[("pod-old", "web-0")]))
    state.put_claim(prepared_claim(pods=[("pod-new", "web-1")]))
    assert state.pod_claim_uids("pod-old", None, None) == []
    assert state.pod_claim_uids(None, "default", "web-0") == []
    assert state.pod_claim_uids("pod-new", None, None) == ["claim-uid-1"]
    assert state.pod_claim_uids(None, "default", "web-1") == ["claim-uid-1"]
    assert sorted(p.name for p in (root / "pods").iterdir()) == ["name_default_web-1.json", "uid_pod-new.json"]
    # Adding a second pod keeps the first; re-putting unchanged does not duplicate.
    state.put_claim(prepared_claim(pods=[("pod-new", "web-1"), ("pod-2", "web-2")]))
    state.put_claim(prepared_claim(pods=[("pod-new", "web-1"), ("pod-2", "web-2")]))
    assert state.pod_claim_uids("pod-new", None, None) == ["claim-uid-1"]
    assert state.pod_claim_uids("pod-2", None, None) == ["claim-uid-1"]
    # No pods at all: unindexed everywhere.
    state.put_claim(prepared_claim(pods=[]))
    assert list((root / "pods").iterdir()) == []
    assert state.read_claim("claim-uid-1")["pods"] == []


def test_remove_claim_unindexes_and_is_idempotent(state: StateDir, root: Path) -> None:
    state.put_claim(prepared_claim())
    removed = state.remove_claim("claim-uid-1")
    assert removed is not None and removed["uid"] == "claim-uid-1"
    assert state.read_claim("claim-uid-1") is None
    assert state.pod_claim_uids("pod-uid-1", None, None) == []
    assert state.pod_claim_uids(None, "default", "web-0") == []
    assert list((root / "pods").iterdir()) == []
    assert list((root / "claims").iterdir()) == []
    assert state.remove_claim("claim-uid-1") is None
    assert state.remove_claim("never-existed") is None


def test_two_claims_of_one_pod_are_both_listed(state: StateDir) -> None:
    state.put_claim(prepared_claim("claim-a", name="a"))
    state.put_claim(prepared_claim("claim-b", name="b"))
    assert state.pod_claim_uids("pod-uid-1", None, None) == ["claim-a", "claim-b"]
    assert state.pod_claim_uids(None, "default", "web-0") == ["claim-a", "claim-b"]
    assert [c["uid"] for c in state.pod_claims("pod-uid-1", "default", "web-0")] == ["claim-a", "claim-b"]
    assert [c["uid"] for c in state.list_claims()] == ["claim-a", "claim-b"]
    state.remove_claim("claim-a")
    assert state.pod_claim_uids("pod-uid-1", None, None) == ["claim-b"]
    assert state.pod_claim_uids(None, "default", "web-0") == ["claim-b"]


def test_pod_claims_skips_index_entries_whose_claim_is_gone(state: StateDir, root: Path) -> None:
    state.put_claim(prepared_claim("claim-a"))
    state.put_claim(prepared_claim("claim-b"))
    (root / "claims" / "claim-a.json").unlink()  # e.g. a crash between the two renames
    assert [c["uid"] for c in state.pod_claims("pod-uid-1", None, None)] == ["claim-b"]


# -- attachments -------------------------------------------------------------------------------


def test_attachments_round_trip_and_list_by_network(state: StateDir) -> None:
    state.put_attachment(attachment("c1", "eth0", "cbr0"))
    state.put_attachment(attachment("c2", "eth0", "cbr0"))
    state.put_attachment(attachment("c1", "eth0", "cbr0x"))  # a network whose name extends another
    assert state.read_attachment("cbr0", "c1", "eth0")["containerID"] == "c1"
    assert [a["containerID"] for a in state.list_attachments("cbr0")] == ["c1", "c2"]
    assert [a["network"] for a in state.list_attachments("cbr0x")] == ["cbr0x"]
    assert len(state.list_attachments()) == 3
    assert state.remove_attachment("cbr0", "c1", "eth0") is True
    assert state.remove_attachment("cbr0", "c1", "eth0") is False
    assert state.read_attachment("cbr0", "c1", "eth0") is None


# -- the status outbox -------------------------------------------------------------------------


def test_update_outbox_creates_with_seq_1_and_increments(state: StateDir) -> None:
    rec = facts.update_outbox(state, CLAIM_REF, lambda facts: facts + [fact("a")])
    assert (rec["seq"], rec["publishedSeq"], rec["kind"], rec["driver"]) == (1, 0, "StatusOutbox", "dracni.io")
    assert rec["claim"] == {"uid": "claim-uid-1", "namespace": "default", "name": "web-net"}
    seen: list[list[dict]] = []

    def change(facts):
        seen.append(facts)
        return facts + [fact("b")]

    rec = facts.update_outbox(state, CLAIM_REF, change)
    assert seen == [[fact("a")]]  # the change sees the stored facts
    assert rec["seq"] == 2
    assert [f["device"] for f in state.read_outbox("claim-uid-1")["devices"]] == ["a", "b"]
    # the claim identity of the first write is kept even if a later caller knows less
    facts.update_outbox(state, {"uid": "claim-uid-1", "namespace": "", "name": ""}, lambda facts: facts)
    stored = state.read_outbox("claim-uid-1")
    assert stored["seq"] == 3 and stored["claim"]["name"] == "web-net"


def test_mark_published_current_seq_clears_pending_and_deletes_empty(state: StateDir, root: Path) -> None:
    facts.update_outbox(state, CLAIM_REF, lambda facts: [fact("a")])
    assert [r["claim"]["uid"] for r in state.pending_outbox()] == ["claim-uid-1"]
    assert facts.published(state, "claim-uid-1", 1) is True
    assert state.pending_outbox() == []
    stored = state.read_outbox("claim-uid-1")
    assert (stored["seq"], stored["publishedSeq"]) == (1, 1)  # devices not empty: kept

    facts.update_outbox(state, CLAIM_REF, lambda facts: [])  # the pod went away
    assert [r["seq"] for r in state.pending_outbox()] == [2]
    assert facts.published(state, "claim-uid-1", 2) is True
    assert state.read_outbox("claim-uid-1") is None
    assert not (root / "outbox" / "claim-uid-1.json").exists()
    assert state.pending_outbox() == []
    assert facts.published(state, "claim-uid-1", 2) is False  # nothing left to publish


def test_mark_published_with_an_older_seq_keeps_newer_state_pending(state: StateDir) -> None:
    facts.update_outbox(state, CLAIM_REF, lambda facts: [fact("a")])
    facts.update_outbox(state, CLAIM_REF, lambda facts: [])  # newer state arrives while seq 1 is in flight
    assert facts.published(state, "claim-uid-1", 1) is False
    stored = state.read_outbox("claim-uid-1")
    assert (stored["seq"], stored["publishedSeq"], stored["devices"]) == (2, 1, [])
    assert [r["seq"] for r in state.pending_outbox()] == [2]
    # publishing an older seq again never moves publishedSeq backwards
    facts.published(state, "claim-uid-1", 2)
    assert state.read_outbox("claim-uid-1") is None


def test_mark_published_with_an_unknown_future_seq_is_refused(state: StateDir) -> None:
    facts.update_outbox(state, CLAIM_REF, lambda facts: [fact("a")])
    assert facts.published(state, "claim-uid-1", 5) is False
    assert state.read_outbox("claim-uid-1")["publishedSeq"] == 0
    assert facts.published(state, "no-such-claim", 1) is False


def test_pending_outbox_lists_only_unpublished(state: StateDir) -> None:
    for uid in ("c-1", "c-2", "c-3"):
        facts.update_outbox(state, dict(CLAIM_REF, uid=uid), lambda facts: [fact("a")])
    facts.published(state, "c-2", 1)
    facts.update_outbox(state, dict(CLAIM_REF, uid="c-3"), lambda facts: facts + [fact("b")])
    facts.published(state, "c-3", 1)  # older than seq 2
    assert [(r["claim"]["uid"], r["seq"], r["publishedSeq"]) for r in state.pending_outbox()] == [
        ("c-1", 1, 0),
        ("c-3", 2, 1),
    ]
    assert [r["claim"]["uid"] for r in state.list_outbox()] == ["c-1", "c-2", "c-3"]


# -- unreadable records ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"",
        b'{"schema": 1, "kind": "PreparedClaim"',  # torn write
        b"\xff\xfe{}",  # not UTF-8
        b'{"schema": 1, "x": NaN}',
    ],
)
def test_corrupt_record_raises_state_error_naming_the_file(state: StateDir, root: Path, content: bytes) -> None:
    state.put_claim(prepared_claim())
    path = root / "claims" / "claim-uid-1.json"
    path.write_bytes(content)
    with pytest.raises(StateError) as info:
        state.read_claim("claim-uid-1")
    assert str(path) in str(info.value)
    with pytest.raises(StateError, match="claim-uid-1.json"):
        state.list_claims()
    with pytest.raises(StateError, match="claim-uid-1.json"):
        state.pod_claims("pod-uid-1", None, None)


@pytest.mark.parametrize(
    "record",
    [
        {"schema": 2, "kind": "StatusOutbox"},
        {"schema": "1", "kind": "StatusOutbox"},
        {"kind": "StatusOutbox"},
        [1, 2, 3],
        "a string",
    ],
)
def test_unknown_schema_version_raises_state_error_naming_the_file(state: StateDir, root: Path, record) -> None:
    facts.update_outbox(state, CLAIM_REF, lambda facts: [fact("a")])
    path = root / "outbox" / "claim-uid-1.json"
    path.write_text(json.dumps(record))
    with pytest.raises(StateError) as info:
        state.read_outbox("claim-uid-1")
    assert str(path) in str(info.value)
    assert "schema" in str(info.value)
    # a writer never overwrites a record it cannot understand: it moves it aside, intact
    facts.update_outbox(state, CLAIM_REF, lambda facts: [fact("b")])
    (moved,) = (root / "quarantine").iterdir()
    assert moved.name.startswith("outbox+claim-uid-1.") and json.loads(moved.read_text()) == record
    assert [f["device"] for f in state.read_outbox("claim-uid-1")["devices"]] == ["b"]


def test_corrupt_pod_index_raises_naming_the_file(state: StateDir, root: Path) -> None:
    state.put_claim(prepared_claim())
    (root / "pods" / "uid_pod-uid-1.json").write_text("garbage")
    with pytest.raises(StateError, match="uid_pod-uid-1.json"):
        state.pod_claim_uids("pod-uid-1", None, None)


@pytest.mark.parametrize(
    "damage,reason",
    [
        (lambda rec: "{torn", "corrupt state record"),
        (lambda rec: json.dumps({**rec, "schema": 2}), "schema 2, newer than this dracni's 1"),
        (lambda rec: json.dumps({k: v for k, v in rec.items() if k != "devices"}), "lacks a valid 'devices'"),
        (lambda rec: json.dumps({**rec, "devices": [{"claim": {}, "ifName": "net1"}]}), "'devices[].delegates'"),
        (lambda rec: json.dumps({**rec, "kind": "StatusOutbox"}), "is a 'StatusOutbox', not a Attachment"),
    ],
)
def test_unreadable_attachment_is_a_bad_record_that_quarantine_moves_aside_intact(
    state: StateDir, root: Path, damage, reason: str
) -> None:
    state.put_attachment(attachment())
    path = root / "attachments" / "cbr0+c0ffee+eth0.json"
    damaged = damage(json.loads(path.read_text()))
    path.write_text(damaged)
    with pytest.raises(BadRecord, match=re.escape(reason)) as info:
        state.read_attachment("cbr0", "c0ffee", "eth0")
    assert info.value.path == str(path) and info.value.newer == ("newer" in reason)
    bad: list[BadRecord] = []
    assert state.list_attachments(bad=bad) == [] and [b.path for b in bad] == [str(path)]

    seen = []
    state.on_quarantine = lambda src, dest, why: seen.append((src, dest, why))
    target = state.quarantine(str(path))

    assert target is not None and not path.exists()
    assert Path(target).read_text() == damaged  # renamed, never rewritten
    assert Path(target).name.startswith("attachments+cbr0+c0ffee+eth0.") and mode(target) == 0o600
    assert seen == [(str(path), target, str(info.value))]
    assert state.read_attachment("cbr0", "c0ffee", "eth0") is None
    ((listed, why),) = state.list_quarantine()
    assert listed == target and reason in why


def test_quarantine_leaves_a_readable_or_missing_record_alone(state: StateDir, root: Path) -> None:
    state.put_attachment(attachment())
    path = root / "attachments" / "cbr0+c0ffee+eth0.json"
    assert state.quarantine(str(path)) is None and path.exists()
    assert state.quarantine(str(root / "attachments" / "nope.json")) is None
    assert state.list_quarantine() == []


def test_write_ahead_refuses_to_overwrite_a_newer_record_and_quarantines_a_corrupt_one(
    state: StateDir, root: Path
) -> None:
    state.put_attachment(attachment())
    path = root / "attachments" / "cbr0+c0ffee+eth0.json"
    newer = {**json.loads(path.read_text()), "schema": 7, "futureKey": True}
    path.write_text(json.dumps(newer))
    with pytest.raises(BadRecord, match="schema 7") as info:
        state.put_attachment(attachment(), ahead=True)
    assert info.value.newer and json.loads(path.read_text()) == newer
    path.write_text("{torn")
    state.put_attachment(attachment(), ahead=True)
    assert state.read_attachment("cbr0", "c0ffee", "eth0")["state"] == "ready"
    assert [p.name.split(".")[0] for p in (root / "quarantine").iterdir()] == ["attachments+cbr0+c0ffee+eth0"]


def test_prepare_and_unprepare_move_an_unreadable_prepared_claim_aside_instead_of_failing(
    state: StateDir, root: Path
) -> None:
    """kubelet retries prepare and unprepare until they succeed: a damaged claim record must not
    make either fail forever.  It is moved aside intact and the pod indexes stay right."""
    state.put_claims([prepared_claim("a"), prepared_claim("b")])
    (root / "claims" / "a.json").write_text("{torn")
    state.put_claims([prepared_claim("a")])  # kubelet's next prepare
    assert state.read_claim("a") is not None
    assert [p.name.split(".")[0] for p in (root / "quarantine").iterdir()] == ["claims+a"]

    (root / "claims" / "a.json").write_text(json.dumps({"schema": 99, "kind": "PreparedClaim"}))
    assert state.remove_claims(["a"]) == {"a": None}  # unprepare: the newer record is moved, not rewritten
    assert state.read_claim("a") is None and len(list((root / "quarantine").iterdir())) == 2
    assert state.pod_claim_uids("pod-uid-1", None, None) == ["b"]  # found by listing the indexes
    state.remove_claims(["b"])
    assert not list((root / "pods").iterdir())


def test_listings_collect_bad_records_instead_of_failing(state: StateDir, root: Path) -> None:
    state.put_claims([prepared_claim("a"), prepared_claim("b", pods=[("pod-uid-2", "web-1")])])
    facts.update_outbox(state, {**CLAIM_REF, "uid": "a"}, lambda facts: [fact("x")])
    facts.update_outbox(state, {**CLAIM_REF, "uid": "b"}, lambda facts: [fact("y")])
    (root / "claims" / "a.json").write_text("nope")
    (root / "outbox" / "b.json").write_text(json.dumps({"schema": 1, "kind": "StatusOutbox"}))
    bad: list[BadRecord] = []
    assert [c["uid"] for c in state.list_claims(bad)] == ["b"]
    assert [c["uid"] for c in state.read_claims(["a", "b"], bad)] == ["b"]
    assert [o["claim"]["uid"] for o in state.list_outbox(bad)] == ["a"]
    assert [Path(b.path).name for b in bad] == ["a.json", "a.json", "b.json"]
    assert state.has_outbox("b") and not state.has_outbox("c")


# -- the lock, across processes ----------------------------------------------------------------


def test_write_waits_while_another_process_holds_the_lock(state: StateDir, root: Path) -> None:
    state.ensure()
    holder = start_holder(root, 0.8)
    try:
        started = time.monotonic()
        state.put_attachment(attachment())
        waited = time.monotonic() - started
        assert holder.stdout.readline().strip() == "released"
    finally:
        holder.kill()
        holder.wait()
    assert waited >= 0.5, f"the write did not wait for the other process's lock ({waited:.3f}s)"
    assert waited < 10
    assert state.read_attachment("cbr0", "c0ffee", "eth0") is not None


def test_short_timeout_raises_state_error_naming_the_lock(root: Path) -> None:
    holder = start_holder(root, 30)
    try:
        state = StateDir(str(root))
        started = time.monotonic()
        with pytest.raises(StateError) as info, state.locked(timeout=0.3):
            pytest.fail("acquired a lock held by another process")
        elapsed = time.monotonic() - started
        assert "lock" in str(info.value)
        assert "state.lock" in str(info.value)
        assert 0.25 <= elapsed < 5
        # the failed attempt left the object usable: depth 0, nothing held
        with pytest.raises(StateError), state.locked(timeout=0.05):
            pass
    finally:
        holder.kill()
        holder.wait()
    with StateDir(str(root)).locked(timeout=5):
        pass


def test_lock_is_reentrant_within_one_state_dir(state: StateDir, root: Path) -> None:
    with state.locked(timeout=1):
        with state.locked(timeout=1):
            state.put_claim(prepared_claim())  # takes the lock a third time
            facts.update_outbox(state, CLAIM_REF, lambda facts: [fact("a")])
        # still held after the inner block: another StateDir (own open file) cannot get it
        with pytest.raises(StateError, match="lock"), StateDir(str(root)).locked(timeout=0.1):
            pass
        # nor can another process
        probe = run_python(
            """
            import sys
            from dracni.state.store import StateDir, StateError
            try:
                with StateDir(sys.argv[1]).locked(timeout=0.2):
                    print("acquired")
            except StateError:
                print("busy")
        """,
            str(root),
        )
        out, err = probe.communicate(timeout=30)
        assert out.strip() == "busy", err
    # released after the outermost block
    with StateDir(str(root)).locked(timeout=1):
        pass
    assert state.read_claim("claim-uid-1") is not None


def test_killed_holder_does_not_wedge_the_lock(root: Path) -> None:
    holder = start_holder(root, 300)
    with pytest.raises(StateError), StateDir(str(root)).locked(timeout=0.1):
        pass
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    assert holder.returncode == -signal.SIGKILL
    state = StateDir(str(root))
    started = time.monotonic()
    with state.locked(timeout=5):
        pass
    assert time.monotonic() - started < 1
    state.put_claim(prepared_claim())
    assert state.read_claim("claim-uid-1") is not None


# -- concurrency -------------------------------------------------------------------------------

WORKER = """
    import os, sys, time
    from dracni.state import facts
    from dracni.state.store import StateDir
    root, worker, go = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    state = StateDir(root)
    claim = {"uid": "claim-uid-1", "namespace": "default", "name": "web-net", "driver": "dracni.io"}
    deadline = time.monotonic() + 30
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.001)
    for i in range(25):
        item = {"request": "net", "pool": "node-a", "device": f"w{worker}-i{i}", "shareID": None,
                "ifName": "net1", "ready": True, "containerID": f"c{worker}", "podUID": None}
        facts.update_outbox(state, claim, lambda facts: facts + [item])
    print("done", flush=True)
"""


def test_concurrent_outbox_updates_lose_nothing(state: StateDir, root: Path, tmp_path: Path, validator) -> None:
    state.ensure()
    go = tmp_path / "go"
    workers = [run_python(WORKER, str(root), str(w), str(go)) for w in range(8)]
    time.sleep(0.3)  # let them all start and wait at the barrier
    go.touch()
    for w in workers:
        out, err = w.communicate(timeout=120)
        assert w.returncode == 0 and out.strip() == "done", err
    record = state.read_outbox("claim-uid-1")
    devices = [f["device"] for f in record["devices"]]
    assert len(devices) == 200
    assert sorted(devices) == sorted(f"w{w}-i{i}" for w in range(8) for i in range(25))
    assert record["seq"] == 200
    assert record["publishedSeq"] == 0
    # each worker's items are in its own order
    for w in range(8):
        mine = [d for d in devices if d.startswith(f"w{w}-")]
        assert mine == [f"w{w}-i{i}" for i in range(25)]
    assert tmp_leftovers(root) == []
    assert validator.is_valid(record)


def test_threads_sharing_one_state_dir_do_not_lose_updates(state: StateDir) -> None:
    """The service shares one StateDir between gRPC handler threads and the status publisher."""
    import threading

    claim = {"uid": "claim-uid-threads", "namespace": "default", "name": "n"}
    barrier = threading.Barrier(4)

    def worker(n: int) -> None:
        barrier.wait()
        for i in range(50):
            facts.update_outbox(state, claim, lambda devices, n=n, i=i: devices + [fact(f"t{n}-{i}")])

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    record = state.read_outbox("claim-uid-threads")
    assert record["seq"] == 200 and len(record["devices"]) == 200
