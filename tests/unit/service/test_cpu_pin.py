"""The service runs its threads on one CPU of those it may use (``service/cpu.py``).

Run in child interpreters: pinning the test process would slow every test after it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from dracni.service.cpu import _cpu_list
from tests.harness import REPO

#: Starts a thread, pins, starts another; prints the message and every thread's CPUs.
CHILD = textwrap.dedent(
    """
    import json, os, threading

    from dracni.service.cpu import pin_to_one_cpu

    hold = threading.Event()
    before = threading.Thread(target=hold.wait)
    before.start()
    message = pin_to_one_cpu()
    after = threading.Thread(target=hold.wait)
    after.start()
    cpus = {tid: sorted(os.sched_getaffinity(int(tid))) for tid in os.listdir("/proc/self/task")}
    hold.set()
    print(json.dumps({"message": message, "cpus": cpus}))
    """
)


def _run_child(cpus: set[int] | None = None) -> dict:
    def restrict() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)

    done = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True, check=False, preexec_fn=restrict
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_thread_before_and_after_the_pin_runs_on_one_cpu_of_those_allowed() -> None:
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        pytest.skip(f"this machine lets the tests use one CPU ({_cpu_list(allowed)}): there is nothing to pin")
    got = _run_child()
    assert len(got["cpus"]) == 3, got  # the main thread and the two started
    (cpu,) = {tuple(cpus) for cpus in got["cpus"].values()}
    assert len(cpu) == 1 and cpu[0] in allowed, got
    assert got["message"].startswith(f"threads pinned to CPU {cpu[0]} of {_cpu_list(allowed)}"), got


def test_a_process_allowed_one_cpu_is_left_as_it_is() -> None:
    cpu = min(os.sched_getaffinity(0))
    got = _run_child({cpu})
    assert all(cpus == [cpu] for cpus in got["cpus"].values()), got
    assert got["message"] == f"threads on CPU {cpu}, the one CPU this process may use", got


@pytest.mark.parametrize(
    ("cpus", "written"),
    [({0}, "0"), ({0, 1}, "0-1"), ({0, 1, 2, 5}, "0-2,5"), ({3, 7, 8, 9, 11}, "3,7-9,11")],
)
def test_cpu_lists_are_written_as_the_kernel_writes_them(cpus: set[int], written: str) -> None:
    assert _cpu_list(cpus) == written
