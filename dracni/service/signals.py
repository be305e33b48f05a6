"""SIGTERM and SIGINT: the one way dracni's long-running commands (the kubelet plugin service,
``dracni install --watch``) learn that they must stop.

``stop_on_signals(stop)`` makes both signals set ``stop``; the command's main thread waits for
it with ``wait_for_stop(stop)`` (or checks it between timed waits of its own loop), then stops.
Four rules, each learned from a service that would not die (issue 8):

- The handler only sets the event.  Python runs it in the main thread between two bytecodes,
  possibly inside a ``logging`` call or a write to stderr that holds a lock it would need.
- The kernel hands a process-wide signal to any thread that does not block it, and then only
  the C-level handler runs there: a main thread asleep in an untimed ``Event.wait()`` never
  wakes up to run the Python handler.  ``wait_for_stop`` wakes every ``POLL_SECONDS``.
- A process forked by a library (pyroute2 opens a netlink socket inside another network
  namespace from a forked child, then sends it SIGTERM) inherits the Python handlers: the
  child ran the service's handler instead of dying, hung on a lock copied in its held state,
  and outlived the service.  Forked children get the default dispositions back, and the
  kernel sends them SIGKILL when the thread that forked them ends.
- Stopping is bounded: ``exit_after(seconds)`` ends the process if its orderly stop (a gRPC
  call still running on a worker thread that the interpreter joins at exit, ...) takes longer.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from types import FrameType

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: The longest a signal can wait for the main thread to run its handler.
POLL_SECONDS = 0.2
#: Exit status when the orderly stop did not finish in time.
EXIT_STUCK = 1

_PR_SET_PDEATHSIG = 1
_received: list[int] = []  # signal numbers, in order (list.append needs no lock in a handler)
_fork_hook: list[bool] = []


def stop_on_signals(stop: threading.Event, signals: Iterable[int] = STOP_SIGNALS) -> None:
    """Make ``signals`` set ``stop`` (call from the main thread, before starting threads)."""
    wanted = tuple(signals)

    def handler(signum: int, _frame: FrameType | None) -> None:
        _received.append(signum)
        stop.set()

    for sig in wanted:
        signal.signal(sig, handler)
    if not _fork_hook:  # once per process: os.register_at_fork cannot be undone
        _fork_hook.append(True)
        os.register_at_fork(after_in_child=_make_child_hook(wanted))


def wait_for_stop(stop: threading.Event, poll: float = POLL_SECONDS) -> None:
    """Block the main thread until ``stop`` is set; log the signal that set it, if one did."""
    while not stop.wait(poll):
        pass
    if _received:
        log.info("signal %s: stopping", signal.Signals(_received[-1]).name)


def exit_after(seconds: float, status: int = EXIT_STUCK) -> threading.Thread:
    """End the process with ``status`` in ``seconds`` unless it has exited by then.

    A daemon thread: it runs on while the interpreter joins the other threads at exit, and
    dies with the process when that exit is on time.  It writes to fd 2 directly: a logging
    lock may be held by the thread that is stuck.
    """

    def watchdog() -> None:
        time.sleep(seconds)
        os.write(2, f"dracni: still stopping after {seconds:g} s: exiting now\n".encode())
        os._exit(status)

    thread = threading.Thread(target=watchdog, name="exit-watchdog", daemon=True)
    thread.start()
    return thread


def _make_child_hook(signals: tuple[int, ...]) -> Callable[[], None]:
    """What a forked child runs first: default dispositions, and death with its parent thread."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved now: no dlopen in the child
    except (OSError, AttributeError):
        prctl = None
    parent = os.getpid()

    def after_in_child() -> None:
        for sig in signals:
            signal.signal(sig, signal.SIG_DFL)
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # the parent was gone before the request took effect
                os._exit(EXIT_STUCK)

    return after_in_child
