"""Group commit of the network driver's state-dir writes.

Each prepare or unprepare ends in a few record writes, and each write costs fsyncs (about
2.5 ms each on a virtual disk) under the state lock: a burst of pod starts would queue behind
the lock one call at a time.  Here the calls that arrive while a commit is running wait for
the next one, and one caller (the leader) runs all their writes in one lock hold as one
``StateDir.batched()`` block: the batch's files are written back together, and each directory
is fsynced once.  A call alone commits at once, as before.

One commit at a time, on purpose.  Letting the next batch take the lock while the one before
still fsyncs its new files (renamed into place first) made ``make bench`` (h) slower, not
faster (burst p99 9.6-10.0x one pod alone against 8.6-9.4x, more CPU): on ext4 every fsync
after the journal commit still costs the disk a cache flush, so more, smaller batches cost
more flushes.  A ``CommitObserver`` (the service's metrics) is told each batch's size and
lock hold and each call's commit time, so a slow disk shows as what it is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from ..state.store import StateDir, StateError

T = TypeVar("T")


class CommitObserver(Protocol):
    """What the service measures of its group commits (``service/observer.py``: metrics)."""

    def observe_batch(self, calls: int, held: float) -> None:
        """A batch of ``calls`` calls was applied (or failed), the state lock held ``held`` seconds."""

    def observe_commit(self, seconds: float) -> None:
        """One call's commit took ``seconds``: from ``run`` until its batch was applied, the
        wait for the batch ahead of it included."""


class _Waiting(Generic[T]):
    def __init__(self, work: Callable[[StateDir], T]) -> None:
        self.work = work
        self.woken = threading.Event()  # its batch was applied, or it is to lead the next one
        self.finished = False
        self.result: T | None = None
        self.error: BaseException | None = None


class GroupCommit:
    """``run(work)``: ``work(state)`` inside a batch shared with the calls waiting meanwhile.

    ``work`` stages record writes through the state dir's usual methods.  An exception from one
    ``work`` is its caller's alone (what it staged before raising is kept, as without a batch);
    a failure to apply the batch is every caller's StateError.

    A leader applies one batch, the one holding its own call, and returns: the first call
    waiting for the next batch leads that one.  A leader that kept committing until no call
    was waiting would answer its own kubelet call only once no other call waits, in a burst
    of pod starts at the end of the burst.
    """

    def __init__(self, state: StateDir, observer: CommitObserver | None = None) -> None:
        self.state = state
        self.observer = observer
        self._mutex = threading.Lock()
        self._queue: list[_Waiting[object]] = []
        self._leading = False

    def run(self, work: Callable[[StateDir], T]) -> T:
        started = time.monotonic()
        waiting = _Waiting(work)
        with self._mutex:
            self._queue.append(waiting)  # type: ignore[arg-type]
            lead = not self._leading
            self._leading = True
        while True:
            if lead:
                self._lead()
            waiting.woken.wait()
            if waiting.finished:
                break
            waiting.woken.clear()  # handed the lead: this call is the next batch's first
            lead = True
        if self.observer is not None:
            self.observer.observe_commit(time.monotonic() - started)
        if waiting.error is not None:
            raise waiting.error
        return waiting.result  # type: ignore[return-value]

    def _lead(self) -> None:
        """Apply the waiting calls' batch, then hand the lead to the next batch's first call."""
        with self._mutex:
            batch, self._queue = self._queue, []
        acquired: float | None = None  # when the lock was taken (None: it was not)
        try:
            with self.state.locked():
                acquired = time.monotonic()
                with self.state.batched():
                    for waiting in batch:
                        try:
                            waiting.result = waiting.work(self.state)
                        except Exception as exc:
                            waiting.error = exc
        except StateError as exc:
            for waiting in batch:
                waiting.error = waiting.error or exc
        except BaseException as exc:  # KeyboardInterrupt, SystemExit: fail every waiting call
            with self._mutex:
                batch, self._queue = batch + self._queue, []
                self._leading = False
            for waiting in batch:
                waiting.error = waiting.error or exc
                _finish(waiting)
            raise
        held = time.monotonic() - acquired if acquired is not None else None
        for waiting in batch:
            _finish(waiting)
        with self._mutex:
            if self._queue:
                self._queue[0].woken.set()
            else:
                self._leading = False
        if self.observer is not None and held is not None:  # last: the calls and the next lead go first
            self.observer.observe_batch(len(batch), held)


def _finish(waiting: _Waiting[object]) -> None:
    waiting.finished = True
    waiting.woken.set()
