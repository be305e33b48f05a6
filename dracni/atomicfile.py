"""Files that are replaced whole: write a temp file, fsync it, rename it over, fsync the directory.

A reader sees the old content or the new, never a mix, and after a crash the file is one of
the two.  Imports only ``os`` (the CNI hot path uses it).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # the CNI hot path imports this module: no typing at run time
    from collections.abc import Callable


def write_atomic(path: str, data: bytes, mode: int = 0o600, *, sync_dir: bool = True) -> None:
    """Raises OSError; no temp file is left behind on failure.

    ``sync_dir=False`` leaves out the directory's fsync: readers still see the old content or
    the new (the new content is on disk before the rename), but after a crash the file may be
    the old one.  Only for a file whose previous durable content is as good an answer after a
    crash (see ``StateDir.put_attachment``).
    """
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
        if sync_dir:
            fsync_dir(directory)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_if_exists(path: str, error: Callable[[str], Exception]) -> bytes | None:
    """The file's bytes, None when it does not exist; ``error("cannot read ...")`` otherwise."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror}") from exc


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
