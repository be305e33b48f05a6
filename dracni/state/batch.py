"""Group commit of state records: the writes of one lock hold, fsynced in parallel.

The service groups the record writes of concurrent kubelet calls into one state-lock hold
(``StateDir.batched()``).  Every record still goes to a temp file that is fsynced before it is
renamed into place, but the fsyncs of the batch run at the same time (the file system commits
them together), and each directory touched is fsynced once.  Only the service uses it: it
imports threads, which the CNI hot path never does.
"""

from __future__ import annotations

import os

from ..atomicfile import fsync_dir
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


#: The threads that fsync a batch's files at the same time (made by the first batch: the
#: service's; the CNI plugin never batches).
_SYNC_THREADS = 8
_sync_pool: Any = None


def apply_together(pending: dict[str, bytes | None]) -> None:
    """Write, fsync (in parallel), rename and delete; then fsync each directory once."""
    global _sync_pool
    if _sync_pool is None:
        from concurrent.futures import ThreadPoolExecutor

        _sync_pool = ThreadPoolExecutor(max_workers=_SYNC_THREADS, thread_name_prefix="dracni-fsync")
    pool = _sync_pool
    writes = {path: data for path, data in pending.items() if data is not None}
    temps = {
        path: os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp{os.getpid()}") for path in writes
    }

    def stage(path: str) -> None:
        fd = os.open(temps[path], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
        try:
            view = memoryview(writes[path])
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)

    try:
        list(pool.map(stage, writes))
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
        list(pool.map(fsync_dir, sorted({os.path.dirname(path) for path in pending})))
    except OSError as exc:
        raise StateError(f"cannot apply state records: {exc}") from exc
