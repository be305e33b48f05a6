"""Batched state writes (StateDir.batched) and the service's group commit (claims/commits.py)."""

from __future__ import annotations

import os
import threading

import pytest

from dracni.claims.commits import GroupCommit
from dracni.state import batch
from dracni.state.store import StateDir, StateError


def claim(uid: str, pod: str = "pod-1") -> dict:
    return {
        "kind": "PreparedClaim",
        "uid": uid,
        "namespace": "default",
        "name": f"claim-{uid}",
        "driver": "dracni.io",
        "source": None,
        "preparedAt": "2026-11-25T00:00:00Z",
        "pods": [{"uid": pod, "name": pod}],
        "devices": [],
    }


@pytest.fixture
def state(tmp_path) -> StateDir:
    s = StateDir(str(tmp_path / "state"))
    s.ensure()
    return s


def files(state: StateDir) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, f), state.root)
        for d, _, fs in os.walk(state.root)
        for f in fs
        if f != "state.lock"
    )


def test_a_batch_is_read_back_inside_and_applied_on_exit(state):
    with state.locked():
        state.put_claims([claim("a")])
    with state.locked(), state.batched():
        state.put_claims([claim("b"), claim("c", pod="pod-2")])
        state.remove_claims(["a"])
        assert [c["uid"] for c in state.list_claims()] == ["b", "c"]
        assert state.pod_claim_uids("pod-1", None, None) == ["b"]
        assert "claims/b.json" not in files(state)  # staged only
        assert "claims/a.json" in files(state)
    assert [c["uid"] for c in state.list_claims()] == ["b", "c"]
    assert state.pod_claim_uids("pod-2", None, None) == ["c"]
    assert not [f for f in files(state) if ".tmp" in f]


def test_an_exception_in_the_block_applies_nothing(state):
    with pytest.raises(RuntimeError), state.locked(), state.batched():
        state.put_claims([claim("a")])
        raise RuntimeError("boom")
    assert state.list_claims() == []
    assert files(state) == []


def test_a_record_that_cannot_be_written_applies_none_of_the_batch(state):
    with pytest.raises(StateError, match="cannot write state records"), state.locked(), state.batched():
        state.put_claims([claim("a")])
        state._write(os.path.join(state.root, "missing", "x.json"), {"kind": "StatusOutbox"})  # no such dir
    assert state.list_claims() == []
    assert not [f for f in files(state) if f.startswith(("claims", "pods"))]


def test_a_batch_starts_the_writeback_of_its_files_and_fsyncs_them_on_its_own_thread(state, monkeypatch):
    """Every new record's temp file gets ``sync_file_range`` (the real libc call, which this
    kernel accepts) before the fsyncs, and the commit starts no thread (the 8 fsync threads it
    had cost the service a third of its context switches)."""
    real = batch._writeback_starter()
    assert real is not None, "libc has no sync_file_range"
    started: list[tuple[str, int]] = []

    def recording(fd: int, offset: int, length: int, flags: int) -> int:
        result = real(fd, offset, length, flags)
        started.append((os.path.basename(os.readlink(f"/proc/self/fd/{fd}")), result))
        return result

    monkeypatch.setattr(batch, "_start_writeback", recording)
    threads = threading.active_count()
    with state.locked(), state.batched():
        state.put_claims([claim("a"), claim("b", pod="pod-2")])
    assert threading.active_count() == threads
    assert [c["uid"] for c in state.list_claims()] == ["a", "b"]
    written = sorted(f".{os.path.basename(f)}" for f in files(state))  # the claims and both pods' index files
    assert len(written) == 6
    assert sorted(name.split(".tmp")[0] for name, _ in started) == written
    assert {result for _, result in started} == {0}


def test_a_batch_commits_without_the_writeback_hint(state, monkeypatch):
    """Where libc lacks ``sync_file_range`` or the file system refuses it, the fsyncs alone
    make the records durable: the batch is applied just the same."""
    monkeypatch.setattr(batch, "_start_writeback", lambda *args: -1)  # refused
    with state.locked(), state.batched():
        state.put_claims([claim("a"), claim("b", pod="pod-2")])
    monkeypatch.setattr(batch, "_start_writeback", False)  # no such call
    with state.locked(), state.batched():
        state.put_claims([claim("c"), claim("d", pod="pod-3")])
    assert [c["uid"] for c in state.list_claims()] == ["a", "b", "c", "d"]
    assert not [f for f in files(state) if ".tmp" in f]


def test_calls_arriving_during_a_commit_share_the_next_one(state):
    commits = GroupCommit(state)
    release = threading.Event()
    ran_in: dict[str, int] = {}

    def first(s: StateDir) -> str:
        release.wait(10)
        s.put_claims([claim("first")])
        return "first"

    def later(uid: str):
        def work(s: StateDir) -> str:
            ran_in[uid] = threading.get_ident()
            s.put_claims([claim(uid, pod=f"pod-{uid}")])
            return uid

        return work

    results: dict[str, str] = {}
    threads = [threading.Thread(target=lambda: results.update(first=commits.run(first)))]
    threads[0].start()
    while not commits._leading:
        threading.Event().wait(0.001)
    for uid in ("u1", "u2", "u3", "u4"):
        t = threading.Thread(target=lambda uid=uid: results.update({uid: commits.run(later(uid))}))
        t.start()
        threads.append(t)
    while len(commits._queue) < 4:  # all four wait behind the first commit
        threading.Event().wait(0.001)
    release.set()
    for t in threads:
        t.join(10)

    assert results == {"first": "first", "u1": "u1", "u2": "u2", "u3": "u3", "u4": "u4"}
    assert len(set(ran_in.values())) == 1  # one leader ran the four works in one batch
    assert sorted(c["uid"] for c in state.list_claims()) == ["first", "u1", "u2", "u3", "u4"]


def test_a_failing_work_fails_its_own_call_only(state):
    commits = GroupCommit(state)

    def bad(s: StateDir) -> None:
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        commits.run(bad)
    assert commits.run(lambda s: s.put_claims([claim("ok")])) is None
    assert [c["uid"] for c in state.list_claims()] == ["ok"]
