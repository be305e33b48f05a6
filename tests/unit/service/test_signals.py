"""dracni.service.signals: the one signal path of the service and `dracni install --watch`.

Each case runs in a Python subprocess of its own: handlers and fork hooks are per process.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests import procs

ROOT = Path(__file__).resolve().parents[3]

PRELUDE = """
import os, signal, sys, threading, time
from dracni.service import signals
stop = threading.Event()
signals.stop_on_signals(stop)
"""


@pytest.fixture
def run():
    """Start PRELUDE + ``code`` in a Python subprocess; killed at the end of the test."""
    started: list[subprocess.Popen] = []

    def run(code: str) -> subprocess.Popen:
        started.append(
            subprocess.Popen(
                [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
                cwd=ROOT,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
        return started[-1]

    yield run
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def line(proc: subprocess.Popen) -> str:
    text = proc.stdout.readline().strip()
    assert text, f"no output; exit {proc.poll()}: {proc.stderr.read()}"
    return text


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_signals_set_the_event_and_wait_returns(run, sig):
    proc = run("""
        import logging
        logging.basicConfig(level=logging.INFO)
        print("waiting", flush=True)
        signals.wait_for_stop(stop)
        print("stopped", flush=True)
    """)
    assert line(proc) == "waiting"
    proc.send_signal(sig)
    assert line(proc) == "stopped"
    assert proc.wait(5) == 0
    assert f"signal {sig.name}: stopping" in proc.stderr.read()


def test_a_signal_caught_by_another_thread_still_wakes_the_main_thread(run):
    """The kernel gives a process signal to any thread; Python runs the handler in the main
    thread only, and a main thread asleep in an untimed Event.wait() never wakes to run it."""
    proc = run("""
        def other():
            time.sleep(0.3)
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # the C handler runs here
            time.sleep(60)
        threading.Thread(target=other, daemon=True).start()
        started = time.monotonic()
        signals.wait_for_stop(stop)
        print(f"{time.monotonic() - started:.2f}", flush=True)
    """)
    assert float(line(proc)) < 0.3 + 2 * 0.2 + 0.5
    assert proc.wait(5) == 0


def test_a_forked_child_dies_of_sigterm_instead_of_running_the_handler(run):
    """pyroute2 forks to open a netlink socket in another netns, then SIGTERMs the child: with
    the service's handler inherited, the child hung on a lock and outlived the service."""
    proc = run("""
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        time.sleep(0.2)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
        print(os.WTERMSIG(status) if os.WIFSIGNALED(status) else f"exit {os.waitstatus_to_exitcode(status)}",
              stop.is_set(), flush=True)
    """)
    assert line(proc) == f"{int(signal.SIGTERM)} False"
    assert proc.wait(5) == 0


def test_a_forked_child_dies_with_the_thread_that_forked_it(run):
    proc = run("""
        def forker():
            pid = os.fork()
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            print(pid, flush=True)
            time.sleep(0.3)
        thread = threading.Thread(target=forker)
        thread.start()
        thread.join()
        time.sleep(60)
    """)
    child = procs.read(int(line(proc)))
    assert child is not None
    deadline = time.monotonic() + 5
    while procs.alive(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not procs.alive(child), "the forked child outlived the thread that forked it"


def test_exit_after_ends_a_process_whose_stop_is_stuck(run):
    proc = run("""
        threading.Thread(target=time.sleep, args=(60,)).start()  # not a daemon: exit would wait for it
        signals.exit_after(0.5)
        print("stopping", flush=True)
    """)
    assert line(proc) == "stopping"
    started = time.monotonic()
    assert proc.wait(10) == 1
    assert time.monotonic() - started < 3
    assert "still stopping after 0.5 s" in proc.stderr.read()


def test_stop_on_signals_registers_its_fork_hook_once(run):
    proc = run("""
        signals.stop_on_signals(stop)
        signals.stop_on_signals(stop)
        print(len(signals._fork_hook), flush=True)
    """)
    assert line(proc) == "1"
    assert proc.wait(5) == 0


def test_the_untimed_wait_this_replaces_would_hang():
    """The control: without wait_for_stop's polling, the same signal leaves the main thread asleep."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
        import signal, threading, time
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        def other():
            time.sleep(0.3)
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        threading.Thread(target=other, daemon=True).start()
        stop.wait()
    """),
        ]
    )
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(2)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
