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
    """The file's bytes, None when it does not exist; ``error("cannot read ...")`` otherwise.

    Four system calls (open, fstat, read, close), not the nine of ``open(path, "rb").read()``
    (its buffered reader adds an ``isatty`` ioctl, two seeks, a second fstat and a read that
    finds the end).  Each system call hands the interpreter lock to another thread when one
    waits for it, and waits to get it back: in a burst of pod starts the service's threads do
    (``make bench`` (h)).  A file replaced whole (this module's kind) does not change once it
    has been opened, so its size is known; a read that returns less than asked has reached
    the end, and one that returns more (the file grew: not one of ours) reads on to the end.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            data = os.read(fd, size + 1)
            if len(data) != size:  # grown or shrunk since the fstat, or a short read: to the end
                chunks = [data]
                while chunks[-1]:
                    chunks.append(os.read(fd, 65536))
                data = b"".join(chunks)
            return data
        finally:
            os.close(fd)
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
