"""Group commit of state records: the writes of one lock hold, fsynced in parallel.

The service groups the record writes of concurrent kubelet calls into one state-lock hold
(``StateDir.batched()``).  Every record still goes to a temp file that is fsynced before it is
renamed into place, but the fsyncs of the batch run at the same time (the file system commits
them together), and each directory touched is fsynced once.  Only the service uses it: it
imports threads, which the CNI hot path never does.
"""

from __future__ import annotations

import os

from .files import FILE_MODE, StateError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .files import RecordFiles


class Batch:
    """The record writes of one ``with`` block, applied together (``StateDir.batched()``).

    Inside the block writes and deletions are staged in memory, and reads of the state dir
    object see them.  On a clean exit every new record goes to a temp file; the temp files
    are fsynced at the same time (the file system commits them together), then renamed into
    place, deletions done, and each directory touched fsynced once.  If a temp file cannot be
    written or synced nothing is applied (StateError).  An exception in the block discards
    what it staged.  Only the service uses it (it imports threads); the state lock must be
    held around the block.
    """

    def __init__(self, state: RecordFiles) -> None:
        self.state = state

    def __enter__(self) -> Batch:
        assert self.state._pending is None, "batches do not nest"
        assert self.state._lock is not None and self.state._lock.is_mine(), "a batch must hold the state lock"
        self.state._pending = {}
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        pending, self.state._pending = self.state._pending or {}, None
        if exc_type is None and pending:
            apply_together(pending)


#: The threads that fsync a batch's files at the same time (made by the first batch of more
#: than one file: the service's; the CNI plugin never batches).
_SYNC_THREADS = 8
_sync_pool: Any = None


def _fsync_all(fds: list[int]) -> None:
    """fsync every descriptor, at the same time when there are several (the file system then
    commits them together).  Only the fsyncs go to the pool: each hand-over to a thread and
    back costs two context switches and a GIL hand-over (measured: the pool's threads doing
    open, write, fsync and close each were a third of the service's context switches in a
    burst of prepares), so the quick calls stay on the committing thread."""
    global _sync_pool
    if len(fds) <= 1:
        for fd in fds:
            os.fsync(fd)
        return
    if _sync_pool is None:
        from concurrent.futures import ThreadPoolExecutor

        _sync_pool = ThreadPoolExecutor(max_workers=_SYNC_THREADS, thread_name_prefix="dracni-fsync")
    list(_sync_pool.map(os.fsync, fds))


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def apply_together(pending: dict[str, bytes | None]) -> None:
    """Write the temp files, fsync them (in parallel), rename and delete; then fsync each
    directory once (in parallel)."""
    writes = {path: data for path, data in pending.items() if data is not None}
    temps = {
        path: os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp{os.getpid()}") for path in writes
    }
    fds: list[int] = []
    try:
        try:
            for path, data in writes.items():
                fd = os.open(temps[path], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
                fds.append(fd)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            _fsync_all(fds)
        finally:
            _close_all(fds)
    except OSError as exc:
        for temp in temps.values():
            try:
                os.unlink(temp)
            except OSError:
                pass
        raise StateError(f"cannot write state records: {exc}") from exc
    try:
        for path in pending:
            if path in temps:
                os.rename(temps[path], path)
            else:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
        dirs: list[int] = []
        try:
            for directory in sorted({os.path.dirname(path) for path in pending}):
                dirs.append(os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
            _fsync_all(dirs)
        finally:
            _close_all(dirs)
    except OSError as exc:
        raise StateError(f"cannot apply state records: {exc}") from exc
