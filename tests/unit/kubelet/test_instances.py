"""Two instances side by side (kubelet/instances.py): the call gate, the leader lock and the
registration marks, each instance played by its own objects (flock locks belong to an open
file, so two gates in one process exclude each other exactly as two processes do)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from dracni.kubelet.instances import CallGate, InstanceMarks, Leadership, check_instance_id
from dracni.kubelet.sockets import dra_socket_path, registration_socket_path

UID_A = "6b1f3c2e-0000-4000-8000-00000000000a"
UID_B = "6b1f3c2e-0000-4000-8000-00000000000b"


def test_socket_names_per_instance_follow_upstreams_helper(tmp_path):
    assert dra_socket_path(str(tmp_path), "dracni.io", UID_A) == f"{tmp_path}/dracni.io/dra-{UID_A}.sock"
    assert registration_socket_path(str(tmp_path), "dracni.io", UID_A) == f"{tmp_path}/dracni.io-{UID_A}-reg.sock"
    assert dra_socket_path(str(tmp_path), "dracni.io") == f"{tmp_path}/dracni.io/dra.sock"
    assert registration_socket_path(str(tmp_path), "dracni.io") == f"{tmp_path}/dracni.io-reg.sock"


@pytest.mark.parametrize("bad", ["", "../x", "a/b", "a b", "-leading", "x" * 64])
def test_an_instance_id_that_cannot_name_a_file_is_refused(bad):
    with pytest.raises(ValueError, match="pod's UID"):
        check_instance_id(bad)


def test_calls_of_one_instance_overlap_and_never_those_of_the_other(tmp_path):
    a, b = CallGate(str(tmp_path)), CallGate(str(tmp_path))
    inside: list[str] = []
    events: list[tuple[str, str]] = []
    lock = threading.Lock()
    both_a_in = threading.Barrier(2, timeout=5)
    a_inside = threading.Event()

    def call(gate: CallGate, who: str, hold: float, barrier: threading.Barrier | None = None) -> None:
        with gate.held():
            with lock:
                inside.append(who)
                events.append(("in", who))
                assert {w[0] for w in inside} == {who[0]}, f"{who} beside {inside}"
            if barrier is not None:
                barrier.wait()  # both calls of A are inside at once
                a_inside.set()
            time.sleep(hold)
            with lock:
                inside.remove(who)
                events.append(("out", who))

    threads = [
        threading.Thread(target=call, args=(a, "a1", 0.2, both_a_in)),
        threading.Thread(target=call, args=(a, "a2", 0.2, both_a_in)),
    ]
    for t in threads:
        t.start()
    assert a_inside.wait(5)
    other = threading.Thread(target=call, args=(b, "b1", 0.0))
    other.start()
    for t in [*threads, other]:
        t.join(5)
    assert [e for e in events if e[1] == "b1"] == [("in", "b1"), ("out", "b1")]
    assert events.index(("in", "b1")) > max(events.index(("out", "a1")), events.index(("out", "a2")))
    a.close()
    b.close()


def test_one_instance_leads_and_the_other_takes_over_when_it_goes(tmp_path):
    a, b = Leadership(str(tmp_path)), Leadership(str(tmp_path))
    stop = threading.Event()
    assert a.acquire(stop) and a.held()
    took = threading.Event()
    waiter = threading.Thread(target=lambda: b.acquire(stop) and took.set())
    waiter.start()
    assert not took.wait(0.6) and not b.held()  # A still leads
    a.release()
    assert took.wait(2) and b.held() and not a.held()
    waiter.join()
    b.release()


def test_a_waiting_instance_gives_up_at_the_stop(tmp_path):
    a, b = Leadership(str(tmp_path)), Leadership(str(tmp_path))
    stop = threading.Event()
    assert a.acquire(stop)
    threading.Timer(0.3, stop.set).start()
    assert b.acquire(stop) is False and not b.held()
    a.release()


def _reg_socket(registry: Path, uid: str) -> None:
    registry.mkdir(exist_ok=True)
    (registry / f"dracni.io-{uid}-reg.sock").touch()


def test_a_stopping_instance_without_successor_does_not_wait(tmp_path):
    marks = InstanceMarks(str(tmp_path / "data"), UID_A, str(tmp_path / "reg"), "dracni.io")
    _reg_socket(tmp_path / "reg", UID_A)
    started = time.monotonic()
    assert marks.wait_for_successor(timeout=5) is None
    assert time.monotonic() - started < 2  # no wait at all: nobody to hand over to


def test_a_stopping_instance_waits_for_its_successors_registration(tmp_path):
    old = InstanceMarks(str(tmp_path / "data"), UID_A, str(tmp_path / "reg"), "dracni.io")
    new = InstanceMarks(str(tmp_path / "data"), UID_B, str(tmp_path / "reg"), "dracni.io")
    _reg_socket(tmp_path / "reg", UID_A)
    _reg_socket(tmp_path / "reg", UID_B)
    threading.Timer(0.4, new.mark_registered).start()
    started = time.monotonic()
    assert old.wait_for_successor(timeout=5) == UID_B
    assert 0.3 < time.monotonic() - started < 3


def test_a_successor_that_never_registers_is_waited_for_at_most_the_timeout(tmp_path):
    old = InstanceMarks(str(tmp_path / "data"), UID_A, str(tmp_path / "reg"), "dracni.io")
    _reg_socket(tmp_path / "reg", UID_B)
    started = time.monotonic()
    assert old.wait_for_successor(timeout=0.5) is None
    assert time.monotonic() - started >= 0.5
