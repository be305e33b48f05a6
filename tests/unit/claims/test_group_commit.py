"""Batched state writes (StateDir.batched) and the service's group commit (claims/commits.py)."""

from __future__ import annotations

import os
import threading
import time

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
    # one file per distinct record: each pod's index by name is a link to its index by UID
    inodes = {os.stat(os.path.join(state.root, f)).st_ino for f in files(state)}
    assert len(inodes) == 4 == len(started)
    assert {name.split(".tmp")[0] for name, _ in started} <= set(written)
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


def test_a_leader_returns_after_its_own_batch_and_a_waiting_call_leads_the_next(state):
    commits = GroupCommit(state)
    release_first, release_second = threading.Event(), threading.Event()
    led_by: dict[str, int] = {}

    def first(s: StateDir) -> str:
        release_first.wait(10)
        s.put_claims([claim("first")])
        return "first"

    def second(uid: str):
        def work(s: StateDir) -> str:
            led_by[uid] = threading.get_ident()
            release_second.wait(10)
            s.put_claims([claim(uid, pod=f"pod-{uid}")])
            return uid

        return work

    results: dict[str, str] = {}
    threads: dict[str, threading.Thread] = {}

    def start(name: str, work) -> None:
        threads[name] = threading.Thread(target=lambda: results.update({name: commits.run(work)}), name=name)
        threads[name].start()

    start("first", first)
    while not commits._leading:
        threading.Event().wait(0.001)
    for uid in ("u1", "u2"):
        start(uid, second(uid))
    while len(commits._queue) < 2:
        threading.Event().wait(0.001)
    release_first.set()
    threads["first"].join(10)
    try:
        # The first call has its answer while the next batch is still being applied.
        assert not threads["first"].is_alive() and results == {"first": "first"}
        while not led_by:  # the next batch's leader runs the first work of that batch
            threading.Event().wait(0.001)
        assert threads["first"].ident not in led_by.values()
    finally:
        release_second.set()
        for t in threads.values():
            t.join(10)
    assert results == {"first": "first", "u1": "u1", "u2": "u2"}
    assert set(led_by) == {"u1", "u2"} and len(set(led_by.values())) == 1  # one batch, one leader
    assert not commits._leading and not commits._queue


def test_records_with_the_same_bytes_share_one_file_written_and_fsynced_once(state, monkeypatch):
    """A pod's index under its UID and under its name hold the same claims: one temp file,
    fsynced once, hard-linked under the second name; a later write of one name replaces only
    that name."""
    fsynced: list[str] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        fsynced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    with state.locked(), state.batched():
        state.put_claims([claim("a"), claim("b")])  # both for pod-1
    by_uid = os.path.join(state.root, "pods", "uid_pod-1.json")
    by_name = os.path.join(state.root, "pods", "name_default_pod-1.json")
    assert os.stat(by_uid).st_ino == os.stat(by_name).st_ino and os.stat(by_uid).st_nlink == 2
    assert state.pod_claim_uids("pod-1", None, None) == state.pod_claim_uids(None, "default", "pod-1") == ["a", "b"]
    record_files = [p for p in fsynced if not os.path.isdir(p)]
    assert len(record_files) == 3  # the two claims and one index file, not four
    assert not [f for f in files(state) if ".tmp" in f]

    # The pod is gone, another pod of the same name has claim c: only the name's index changes.
    with state.locked(), state.batched():
        state.put_claims([claim("c", pod="pod-1b") | {"pods": [{"uid": "pod-1b", "name": "pod-1"}]}])
    assert state.pod_claim_uids("pod-1", None, None) == ["a", "b"]
    assert state.pod_claim_uids(None, "default", "pod-1") == ["a", "b", "c"]
    assert os.stat(by_uid).st_ino != os.stat(by_name).st_ino and os.stat(by_uid).st_nlink == 1


def test_where_hard_links_are_refused_each_record_gets_its_own_file(state, monkeypatch):
    def refused(src: str, dst: str) -> None:
        raise PermissionError(1, "Operation not permitted", src)

    monkeypatch.setattr(os, "link", refused)
    with state.locked(), state.batched():
        state.put_claims([claim("a")])
    by_uid = os.path.join(state.root, "pods", "uid_pod-1.json")
    by_name = os.path.join(state.root, "pods", "name_default_pod-1.json")
    assert os.stat(by_uid).st_ino != os.stat(by_name).st_ino
    assert state.pod_claim_uids(None, "default", "pod-1") == state.pod_claim_uids("pod-1", None, None) == ["a"]
    assert not [f for f in files(state) if ".tmp" in f]


def test_a_stale_temp_file_of_this_pid_does_not_stop_the_link(state):
    """A temp name left by a crashed process with this PID (a container's PIDs repeat): the
    record is written under it afresh."""
    stale = [
        os.path.join(state.root, "pods", f".{stem}.json.tmp{os.getpid()}")
        for stem in ("name_default_pod-1", "uid_pod-1")  # the file written, and the link to it
    ]
    for path in stale:
        with open(path, "w") as f:
            f.write("half a record")
    with state.locked(), state.batched():
        state.put_claims([claim("a")])
    assert state.pod_claim_uids(None, "default", "pod-1") == state.pod_claim_uids("pod-1", None, None) == ["a"]
    assert not [path for path in stale if os.path.exists(path)]


def test_a_batch_opens_no_record_that_its_directory_listing_lacks(state, monkeypatch):
    """A first prepare reads the claim's record and the pod's index, neither there yet: one
    listing of each directory instead of a failed open each.  Records that are there are read,
    and the batch's own writes are seen."""
    state.put_claims([claim("old")])
    opened: list[str] = []  # the files opened to be read (records are read with os.open)
    real_open = os.open

    def recording_open(path, flags, *args, **kwargs):
        if not flags & (os.O_WRONLY | os.O_RDWR | os.O_DIRECTORY):
            opened.append(str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    with state.locked(), state.batched():
        assert state.read_claim("new") is None
        assert state.read_claim("old")["uid"] == "old"
        state.put_claims([claim("new", pod="pod-2")])
        assert state.read_claim("new")["uid"] == "new"
        assert state.pod_claim_uids("pod-2", None, None) == ["new"]
    assert [os.path.basename(p) for p in opened if p.endswith(".json")] == ["old.json"]
    assert state.read_claim("new")["uid"] == "new"
    assert state.pod_claim_uids("pod-1", None, None) == ["old"]


class Observed:
    """A ``CommitObserver`` that keeps what it was told."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, float]] = []
        self.commits: list[float] = []

    def observe_batch(self, calls: int, held: float) -> None:
        self.batches.append((calls, held))

    def observe_commit(self, seconds: float) -> None:
        self.commits.append(seconds)


def test_the_observer_is_told_each_batch_and_each_call(state):
    """Five calls, four of them waiting behind the first one's batch: two batches (1 and 4
    calls), five commits; the first call's own commit lasted as long as its work held it."""
    observed = Observed()
    commits = GroupCommit(state, observed)
    release = threading.Event()

    def first(s: StateDir) -> None:
        release.wait(10)
        time.sleep(0.05)
        s.put_claims([claim("first")])

    threads = [threading.Thread(target=commits.run, args=(first,))]
    threads[0].start()
    while not commits._leading:
        threading.Event().wait(0.001)
    for uid in ("u1", "u2", "u3", "u4"):
        work = lambda s, uid=uid: s.put_claims([claim(uid, pod=f"pod-{uid}")])  # noqa: E731
        threads.append(threading.Thread(target=commits.run, args=(work,)))
        threads[-1].start()
    while len(commits._queue) < 4:
        threading.Event().wait(0.001)
    release.set()
    for t in threads:
        t.join(10)

    assert [calls for calls, _ in observed.batches] == [1, 4]
    assert observed.batches[0][1] >= 0.05  # the first batch held the lock through its work
    assert len(observed.commits) == 5 and all(seconds >= 0.05 for seconds in observed.commits)


def test_a_batch_that_cannot_be_written_is_observed_too(state):
    observed = Observed()
    commits = GroupCommit(state, observed)

    def work(s: StateDir) -> None:
        s.put_claims([claim("a")])
        s._write(os.path.join(s.root, "missing", "x.json"), {"kind": "StatusOutbox"})  # no such dir

    with pytest.raises(StateError, match="cannot write state records"):
        commits.run(work)
    assert [calls for calls, _ in observed.batches] == [1] and len(observed.commits) == 1
