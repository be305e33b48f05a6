"""Run a piece of work inside another network namespace, on a thread made for it.

``setns(2)`` moves only the calling thread, so the work runs on a short-lived thread that
enters the namespace, does the work and ends there: the caller's threads stay where they are,
and nothing forks (a fork beside gRPC's threads is what the service must never do).  What the
work makes inside the namespace, such as a netlink socket, stays bound to it after the thread
has ended.  Used by the CNI plugin (the pod's links on ADD) and by the service's link database
(the node's NICs with ``--nic-netns``); on the CNI hot path, so ``_thread`` and ``ctypes`` are
imported only when a namespace is entered, and nothing else.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    T = TypeVar("T")

_CLONE_NEWNET = 0x40000000  # <linux/sched.h>


def setns(fd: int) -> None:
    """Move the calling thread into the network namespace open at ``fd`` (OSError if not)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"setns: {os.strerror(code)}")


def in_netns(path: str, work: Callable[[], T]) -> T:
    """``work()`` run in the network namespace at ``path``; its result, or what it (or entering
    the namespace) raised.  A missing path raises FileNotFoundError and is never created."""
    import _thread

    results: list[T] = []
    errors: list[BaseException] = []
    done = _thread.allocate_lock()
    done.acquire()

    def enter() -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                setns(fd)
            finally:
                os.close(fd)
            results.append(work())
        except BaseException as exc:  # handed to the caller
            errors.append(exc)
        finally:
            done.release()  # the thread, inside the namespace, ends right after: never reused

    _thread.start_new_thread(enter, ())
    done.acquire()
    if errors:
        raise errors[0]
    return results[0]
