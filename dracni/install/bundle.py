"""The bundle in the CNI bin dir: a content-addressed copy and the link that is swapped atomically.

- **No "text file busy", no half-written binary.**  The bundle is copied into
  ``<bin_dir>/.dracni/<content-hash>/`` through a temp dir and one rename, then
  ``<bin_dir>/dracni`` is pointed at it by renaming a new symlink over the old one.  Nothing
  that may be executing is ever written in place.  libcni finds plugins with stat(), which
  follows the link.  The link is *relative* (``.dracni/<hash>/dracni``), so it resolves the same
  on the host and inside an installer container that mounts the host's bin dir elsewhere.
- **An exec racing the switch still works.**  The previous version's directory is kept (an
  exec that resolved the old link a moment ago still finds its ``_internal/``); older ones go.
- **Idempotent.**  Same content -> same hash dir, same link, no write at all.
- **Least privilege.**  Installed files are never group/other-writable, never setuid.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator

from ..atomicfile import fsync_dir
from ..defaults import PLUGIN_NAME, PYTHON_EXECUTABLE
from .errors import InstallError

log = logging.getLogger(__name__)

VERSIONS_DIR = ".dracni"
_LOCK_NAME = ".lock"
_TMP_PREFIX = ".tmp-"
_HASH_FORMAT = b"dracni-bundle-v1\0"
_HASH_LEN = 20


def running_bundle_dir() -> str | None:
    """The onedir bundle this process runs from when frozen, else None."""
    import sys

    if not getattr(sys, "frozen", False):
        return None
    return os.path.dirname(os.path.realpath(sys.executable))


def _check_bundle(bundle_dir: str) -> None:
    """A onedir bundle: the native ``dracni`` (the fast path), ``dracni-python`` it hands over
    to, and PyInstaller's ``_internal/``."""
    if not os.path.isdir(bundle_dir):
        raise InstallError(f"bundle dir {bundle_dir}: not a directory")
    for name in (PLUGIN_NAME, PYTHON_EXECUTABLE):
        exe = os.path.join(bundle_dir, name)
        try:
            st = os.stat(exe)
        except OSError as exc:
            raise InstallError(f"bundle dir {bundle_dir}: no {name} executable ({exc.strerror})") from None
        if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o111:
            raise InstallError(f"bundle dir {bundle_dir}: {exe} is not an executable file")
    if not os.path.isdir(os.path.join(bundle_dir, "_internal")):
        raise InstallError(f"bundle dir {bundle_dir}: no _internal/ directory (not a onedir bundle)")


def _file_mode(mode: int) -> int:
    """Installed files are 0755 or 0644: no setuid/setgid, never group/other-writable."""
    return 0o755 if mode & 0o111 else 0o644


def _walk(root: str) -> Iterator[tuple[str, str, os.stat_result]]:
    """(relative path, lstat) of everything under root, in a stable order; refuses odd entries."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        for name in sorted(dirnames + filenames):
            path = os.path.join(dirpath, name)
            rel = name if rel_dir == "." else os.path.join(rel_dir, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(path)
                resolved = os.path.normpath(os.path.join(os.path.dirname(rel), target))
                if os.path.isabs(target) or resolved == ".." or resolved.startswith("../"):
                    raise InstallError(f"bundle: symlink {path} -> {target} points outside the bundle")
                if name in dirnames:
                    dirnames.remove(name)  # os.walk does not follow it; keep it that way
            elif not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise InstallError(f"bundle: {path} is not a regular file, directory or symlink")
            yield rel, path, st


def bundle_hash(bundle_dir: str) -> str:
    """Content hash of a bundle tree: paths, file contents, exec bits and symlink targets."""
    h = hashlib.sha256(_HASH_FORMAT)
    for rel, path, st in _walk(bundle_dir):
        if stat.S_ISLNK(st.st_mode):
            h.update(b"l\0" + rel.encode() + b"\0" + os.readlink(path).encode() + b"\0")
        elif stat.S_ISDIR(st.st_mode):
            h.update(b"d\0" + rel.encode() + b"\0")
        else:
            h.update(b"f\0" + rel.encode() + b"\0" + oct(_file_mode(st.st_mode)).encode() + b"\0")
            fh = hashlib.sha256()
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    fh.update(chunk)
            h.update(fh.digest())
    return h.hexdigest()[:_HASH_LEN]


def _copy_tree(src: str, dst: str) -> None:
    """Copy the bundle into the (existing, empty) dst, normalising modes and fsyncing every file."""
    os.chmod(dst, 0o755)
    for rel, path, st in _walk(src):
        target = os.path.join(dst, rel)
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(path), target)
        elif stat.S_ISDIR(st.st_mode):
            os.mkdir(target, 0o755)
            os.chmod(target, 0o755)
        else:
            with open(path, "rb") as fin:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                with os.fdopen(fd, "wb") as fout:
                    shutil.copyfileobj(fin, fout, 1 << 20)
                    fout.flush()
                    os.fchmod(fout.fileno(), _file_mode(st.st_mode))
    _sync_filesystem(dst)


def _sync_filesystem(path: str) -> None:
    """Make the whole copy durable before it is renamed into place: one syncfs(2) of the bin
    dir's filesystem instead of an fsync per file and directory (the bundle has ~2,300 files,
    modules kept as files: 5.6 s of fsyncs against well under a second)."""
    import ctypes

    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        syncfs = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
        if syncfs is None:  # a C library without it: everything, the slow way
            os.sync()
        elif syncfs(fd) != 0:
            errno_ = ctypes.get_errno()
            raise OSError(errno_, os.strerror(errno_), path)
    finally:
        os.close(fd)


def _lock(versions_dir: str) -> int:
    import fcntl

    fd = os.open(os.path.join(versions_dir, _LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another installer (init container + rolling update) waits here
    return fd


def _link_target(link: str) -> str | None:
    try:
        return os.readlink(link)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.EINVAL):  # missing, or not a symlink
            return None
        raise


def _version_of(target: str | None) -> str | None:
    """The hash dir name of a link target ``.dracni/<hash>/dracni``, else None."""
    if not target:
        return None
    parts = os.path.normpath(target).split(os.sep)
    if len(parts) == 3 and parts[0] == VERSIONS_DIR and parts[2] == PLUGIN_NAME:
        return parts[1]
    return None


def install_bundle(bundle_dir: str, bin_dir: str, verify: Callable[[str], None] | None = None) -> str:
    """Install the onedir bundle under ``bin_dir`` and point ``<bin_dir>/dracni`` at it.

    ``verify(executable)`` runs on the copy before the link may point at it (``hostcheck``: does
    it run on this node?); when it raises, the link stays as it was, a copy nothing links to is
    removed again, and the error propagates.  Returns the installed executable,
    ``<bin_dir>/.dracni/<hash>/dracni``.  Raises InstallError (bad bundle, ``<bin_dir>/dracni``
    is a directory, a failed check) or OSError.
    """
    bundle_dir = os.path.realpath(bundle_dir)
    _check_bundle(bundle_dir)
    if not os.path.isdir(bin_dir):
        raise InstallError(f"CNI bin dir {bin_dir} does not exist")
    link = os.path.join(bin_dir, PLUGIN_NAME)
    if os.path.isdir(link) and not os.path.islink(link):
        raise InstallError(f"{link} is a directory: refusing to replace it")
    versions = os.path.join(bin_dir, VERSIONS_DIR)
    os.makedirs(versions, 0o755, exist_ok=True)
    digest = bundle_hash(bundle_dir)
    lock = _lock(versions)
    try:
        _remove_stale_tmp(versions)
        current_target = _link_target(link)
        previous = _version_of(current_target)
        _ensure_version_dir(bundle_dir, versions, digest)
        target = os.path.join(VERSIONS_DIR, digest, PLUGIN_NAME)
        if verify is not None:
            try:
                verify(os.path.join(bin_dir, target))
            except Exception:
                if current_target != target:  # never linked: it goes, the working one stays
                    shutil.rmtree(os.path.join(versions, digest), ignore_errors=True)
                raise
        if current_target != target:
            _replace_link(link, target)
            log.info("%s -> %s (was %s)", link, target, current_target or "absent")
            _prune(versions, keep={digest, previous})
        return os.path.join(bin_dir, target)
    finally:
        os.close(lock)


def _remove_stale_tmp(versions: str) -> None:
    """Temp dirs of an installer that died (we hold the lock: no installer is running)."""
    for name in os.listdir(versions):
        if name.startswith(_TMP_PREFIX):
            shutil.rmtree(os.path.join(versions, name), ignore_errors=True)


def _ensure_version_dir(bundle_dir: str, versions: str, digest: str) -> None:
    final = os.path.join(versions, digest)
    if os.path.isdir(final) and not os.path.islink(final):
        if os.path.realpath(final) == bundle_dir or bundle_hash(final) == digest:
            return
        log.warning("%s does not match its hash (damaged): replacing it", final)
    tmp = tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=versions)
    try:
        _copy_tree(bundle_dir, tmp)
        if os.path.lexists(final):
            # Only reached for a damaged copy: an exec of it fails anyway, so the brief gap
            # between the two renames loses nothing that worked.
            aside = tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=versions)
            os.rename(final, os.path.join(aside, "damaged"))
        os.rename(tmp, final)
        fsync_dir(versions)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    _remove_stale_tmp(versions)


def _replace_link(link: str, target: str) -> None:
    """Atomically make ``link`` a symlink to ``target`` (also over a regular file)."""
    directory = os.path.dirname(link)
    tmp = os.path.join(directory, f".{PLUGIN_NAME}.link{os.getpid()}")
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    os.symlink(target, tmp)
    try:
        os.rename(tmp, link)
    except OSError:
        os.unlink(tmp)
        raise
    fsync_dir(directory)


def _prune(versions: str, keep: set[str | None]) -> None:
    for name in os.listdir(versions):
        if name in keep or name == _LOCK_NAME or name.startswith(_TMP_PREFIX):
            continue
        path = os.path.join(versions, name)
        log.info("removing old version %s", path)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


def remove_bundle(bin_dir: str) -> list[str]:
    """Remove the ``dracni`` link (only when it points into ``.dracni/``) and
    ``<bin_dir>/.dracni/``; returns the paths removed.  Anything else stays."""
    removed = []
    link = os.path.join(bin_dir, PLUGIN_NAME)
    target = _link_target(link)
    if target is not None and _version_of(target) is not None:
        os.unlink(link)
        fsync_dir(bin_dir)
        removed.append(link)
    elif os.path.lexists(link):
        log.warning("%s is not dracni install's link: left in place", link)
    versions = os.path.join(bin_dir, VERSIONS_DIR)
    if os.path.lexists(versions):
        if os.path.isdir(versions) and not os.path.islink(versions):
            shutil.rmtree(versions)
        else:
            os.unlink(versions)
        removed.append(versions)
    return removed
