"""The state lock: ``flock(2)`` on ``<state dir>/state.lock`` between processes, a mutex between
the threads of one process, re-entrant within a thread.

Not the ``filelock`` package: importing it costs ~18 ms (typing, inspect, logging, asyncio
support), almost half of the CNI ADD budget, for the same three syscalls.  The kernel drops
the lock when the process dies, so a crashed plugin never wedges the node.  Imports only
``os`` and ``_thread`` (the CNI hot path takes this lock), ``fcntl`` and ``time`` on first use.
"""

from __future__ import annotations

import _thread
import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # the CNI hot path: no typing at run time
    from collections.abc import Callable

#: The lock file is the state dir's: owner only.
LOCK_FILE_MODE = 0o600


class StateLock:
    """Exclusive across processes (flock) and threads (a mutex); re-entrant in one thread.

    ``prepare()`` runs before the lock file is first opened (it creates the directory);
    ``error(message)`` is what a lock that stays busy for the whole timeout raises.
    """

    def __init__(self, path: str, *, prepare: Callable[[], None], error: Callable[[str], Exception]) -> None:
        self.path = path
        self._prepare = prepare
        self._error = error
        self._flock: FlockFile | None = None
        # flock serializes processes; this mutex serializes the threads of one process (the
        # service shares one StateDir between its gRPC handlers and its status publisher).
        self._mutex = _thread.allocate_lock()
        self._owner: int | None = None
        self._depth = 0

    def held(self, timeout: float) -> Held:
        """``with lock.held(timeout):``."""
        return Held(self, timeout)

    def is_mine(self) -> bool:
        return self._owner == _thread.get_ident()

    def acquire(self, timeout: float) -> None:
        me = _thread.get_ident()
        if self._owner == me:  # re-entrant within one thread
            self._depth += 1
            return
        if not self._mutex.acquire(timeout=timeout):
            raise self._error(f"state lock {self.path} busy for {timeout:g}s (in this process)")
        try:
            self._prepare()
            if self._flock is None:
                self._flock = FlockFile(self.path)
            if not self._flock.acquire(timeout):
                raise self._error(f"state lock {self.path} busy for {timeout:g}s")
        except BaseException:
            self._mutex.release()
            raise
        self._owner = me
        self._depth = 1

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
            if self._flock is not None:
                self._flock.release()
            self._mutex.release()


class FlockFile:
    """An exclusive ``flock(2)`` on a lock file, waited for up to a timeout."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: int | None = None

    def acquire(self, timeout: float) -> bool:
        import fcntl
        import time

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, LOCK_FILE_MODE)
        deadline = time.monotonic() + timeout
        delay = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.fd = fd
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(delay)
                delay = min(delay * 2, 0.05)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the flock
            self.fd = None


class Held:
    """Context manager of ``StateLock.held`` (contextlib would cost an import on the hot path)."""

    __slots__ = ("lock", "timeout")

    def __init__(self, lock: StateLock, timeout: float) -> None:
        self.lock = lock
        self.timeout = timeout

    def __enter__(self) -> None:
        self.lock.acquire(self.timeout)

    def __exit__(self, *exc_info: object) -> None:
        self.lock.release()
