"""Node installation: put the bundle into the CNI bin dir and chain dracni into the node's conflist.

What it guarantees, and why (the failures Multus users met):

- **No "text file busy", no half-written binary.**  The bundle is copied into
  ``<bin_dir>/.dracni/<content-hash>/`` through a temp dir and one rename, then
  ``<bin_dir>/dracni`` is pointed at it by renaming a new symlink over the old one.  Nothing
  that may be executing is ever written in place.  libcni finds plugins with stat(), which
  follows the link.  The link is *relative* (``.dracni/<hash>/dracni``), so it resolves the same
  on the host and inside an installer container that mounts the host's bin dir elsewhere.
- **An exec racing the switch still works.**  The previous version's directory is kept (an
  exec that resolved the old link a moment ago still finds its ``_internal/``); older ones go.
- **Idempotent.**  Same content -> same hash dir, same link, no write at all.
- **No empty or dangling conflist.**  dracni's conflist is a separate file that sorts first
  (``00-dracni.conflist``), generated from the primary's (whose file is never touched), written
  atomically (temp + fsync + rename) and only when its content changes.  When the primary is
  gone, ours is removed: a conflist chaining a primary that no longer exists would still be
  used by the runtime.
- **Reversible.**  ``uninstall`` removes exactly what ``install`` created: our conflist first
  (so the runtime stops calling dracni), then the link, then ``.dracni/``.
- **Least privilege.**  It needs write access to the bin dir and the conf dir and nothing
  else; installed files are never group/other-writable, never setuid.

Library only (the click commands live in ``dracni.cli``).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
import stat
import tempfile
import threading
import time

from .. import defaults, jsonio
from ..atomicfile import fsync_dir, write_atomic

log = logging.getLogger("dracni.install")

PLUGIN_NAME = defaults.PLUGIN_NAME
VERSIONS_DIR = ".dracni"
DEFAULT_CONF_FILE = defaults.CONF_FILE
#: Top-level key of the generated conflist naming the primary file it was made from.
PRIMARY_KEY = "dracni.io/primary"
#: The extensions libcni reads network configs from (``libcni.ConfFiles``).
CONFIG_EXTENSIONS = (".conf", ".conflist", ".json")
RESYNC_SECONDS = 60.0
_LOCK_NAME = ".lock"
_TMP_PREFIX = ".tmp-"
_HASH_FORMAT = b"dracni-bundle-v1\0"
_HASH_LEN = 20


class InstallError(Exception):
    """A clear, one-line reason why installation cannot proceed (no traceback needed)."""


class NoPrimaryError(InstallError):
    """The conf dir holds no primary network config (yet)."""


# -- the bundle ---------------------------------------------------------------------------------

def running_bundle_dir() -> str | None:
    """The onedir bundle this process runs from when frozen, else None."""
    import sys

    if not getattr(sys, "frozen", False):
        return None
    return os.path.dirname(os.path.realpath(sys.executable))


def _check_bundle(bundle_dir: str) -> None:
    exe = os.path.join(bundle_dir, PLUGIN_NAME)
    if not os.path.isdir(bundle_dir):
        raise InstallError(f"bundle dir {bundle_dir}: not a directory")
    try:
        st = os.stat(exe)
    except OSError as exc:
        raise InstallError(f"bundle dir {bundle_dir}: no {PLUGIN_NAME} executable ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o111:
        raise InstallError(f"bundle dir {bundle_dir}: {exe} is not an executable file")
    if not os.path.isdir(os.path.join(bundle_dir, "_internal")):
        raise InstallError(f"bundle dir {bundle_dir}: no _internal/ directory (not a onedir bundle)")


def _file_mode(mode: int) -> int:
    """Installed files are 0755 or 0644: no setuid/setgid, never group/other-writable."""
    return 0o755 if mode & 0o111 else 0o644


def _walk(root: str):
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
                    os.fsync(fout.fileno())
    for dirpath, _dirs, _files in os.walk(dst):
        fsync_dir(dirpath)


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


def install_bundle(bundle_dir: str, bin_dir: str) -> str:
    """Install the onedir bundle under ``bin_dir`` and point ``<bin_dir>/dracni`` at it.

    Returns the installed executable, ``<bin_dir>/.dracni/<hash>/dracni``.  Raises
    InstallError (bad bundle, ``<bin_dir>/dracni`` is a directory) or OSError.
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


def _prune(versions: str, keep: set) -> None:
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


# -- the chained conflist -----------------------------------------------------------------------

def _config_files(conf_dir: str) -> list[str]:
    """Network config file names in libcni's order (sorted by name, matching extensions)."""
    try:
        names = sorted(os.listdir(conf_dir))
    except FileNotFoundError:
        return []
    return [n for n in names if os.path.splitext(n)[1] in CONFIG_EXTENSIONS
            and os.path.isfile(os.path.join(conf_dir, n))]


def _is_generated(path: str) -> bool:
    """A conflist this module wrote (under whatever name)."""
    try:
        with open(path, "rb") as f:
            doc = jsonio.loads(f.read())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and PRIMARY_KEY in doc


def find_primary(conf_dir: str, name: str | None = None, own: str = DEFAULT_CONF_FILE) -> str:
    """The primary network config's path: ``name`` in ``conf_dir``, or the first config file in
    libcni's order that is not dracni's own (``own``, or any file this module generated).

    Raises NoPrimaryError when there is none.
    """
    if name:
        if os.sep in name or name in (".", ".."):
            raise InstallError(f"--primary {name!r}: give a file name in {conf_dir}, not a path")
        if name == own:
            raise InstallError(f"--primary {name}: that is dracni's own conflist")
        path = os.path.join(conf_dir, name)
        if not os.path.isfile(path):
            raise NoPrimaryError(f"primary CNI network config {path} does not exist (yet)")
        return path
    for candidate in _config_files(conf_dir):
        path = os.path.join(conf_dir, candidate)
        if candidate != own and not _is_generated(path):
            return path
    raise NoPrimaryError(f"no CNI network config in {conf_dir} yet: is the primary CNI installed?")


def _load_primary(path: str) -> tuple[dict, list[dict]]:
    """(top-level keys without plugins, plugins) of the primary, or InstallError naming the file."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise InstallError(f"primary CNI config {path}: cannot read it: {exc.strerror}") from None
    if not raw.strip():
        raise InstallError(f"primary CNI config {path}: the file is empty")
    try:
        doc = jsonio.loads(raw)
    except ValueError as exc:
        raise InstallError(f"primary CNI config {path}: invalid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InstallError(f"primary CNI config {path}: not a JSON object")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise InstallError(f"primary CNI config {path}: no network 'name'")
    if path.endswith(".conflist"):
        plugins = doc.get("plugins")
        if not isinstance(plugins, list) or not plugins:
            raise InstallError(f"primary CNI config {path}: no 'plugins' list")
        top = {k: v for k, v in doc.items() if k != "plugins"}
    else:  # .conf / .json: one plugin, which libcni wraps into a one-plugin list
        if "plugins" in doc:
            raise InstallError(f"primary CNI config {path}: a plugin list in a file not named *.conflist "
                               "(libcni reads it as a single plugin)")
        top = {k: doc[k] for k in ("cniVersion", "name") if k in doc}
        plugins = [{k: v for k, v in doc.items() if k not in ("cniVersion", "name")}]
    for i, plugin in enumerate(plugins):
        where = f"plugins[{i}]" if path.endswith(".conflist") else "the plugin"
        if not isinstance(plugin, dict):
            raise InstallError(f"primary CNI config {path}: {where} is not a JSON object")
        if not isinstance(plugin.get("type"), str) or not plugin["type"]:
            raise InstallError(f"primary CNI config {path}: {where} has no 'type'")
        if plugin["type"] == PLUGIN_NAME:
            raise InstallError(f"primary CNI config {path}: it already chains {PLUGIN_NAME} "
                               f"({where}); remove it there or do not install the chained conflist")
    if PRIMARY_KEY in doc:
        raise InstallError(f"primary CNI config {path}: it was generated by dracni install")
    from ..cni.versions import SUPPORTED_VERSIONS

    version = top.get("cniVersion")
    if version not in SUPPORTED_VERSIONS:
        raise InstallError(f"primary CNI config {path}: cniVersion {version!r} is not one dracni speaks "
                           f"({', '.join(SUPPORTED_VERSIONS)})")
    return top, plugins


def render_chained(primary_path: str, dracni_conf: dict) -> dict:
    """The primary's network with dracni appended: same ``cniVersion``, ``name`` (so the runtime's
    network name and cached results stay the same) and other top-level keys, plus
    ``dracni.io/primary`` naming the primary file.  Raises InstallError for a malformed primary.
    """
    top, plugins = _load_primary(primary_path)
    ours = {"type": PLUGIN_NAME, **{k: v for k, v in dracni_conf.items() if k != "type"}}
    return {**top, PRIMARY_KEY: os.path.basename(primary_path), "plugins": [*plugins, ours]}


def _render_bytes(conflist: dict) -> bytes:
    return jsonio.dumps(conflist, pretty=True) + b"\n"


def write_chained(conf_dir: str, primary_path: str, dracni_conf: dict, filename: str = DEFAULT_CONF_FILE) -> bool:
    """Write the chained conflist as ``<conf_dir>/<filename>`` (atomically, 0644) if its content
    changed; returns whether it did.  The primary file is never modified.  Raises InstallError
    when the primary is malformed or ``filename`` would not be the first config the runtime reads.
    """
    _check_own_name(filename)
    data = _render_bytes(render_chained(primary_path, dracni_conf))
    first = next((n for n in _config_files(conf_dir) if n != filename), None)
    if first is not None and first < filename:
        raise InstallError(f"{first} sorts before {filename} in {conf_dir}: the runtime would use it, not "
                           "dracni's conflist; choose a --conf-file name that sorts first")
    path = os.path.join(conf_dir, filename)
    try:
        with open(path, "rb") as f:
            unchanged = f.read() == data
    except FileNotFoundError:
        unchanged = False
    if unchanged:
        if stat.S_IMODE(os.stat(path).st_mode) != 0o644:
            os.chmod(path, 0o644)
        return False
    write_atomic(path, data, mode=0o644)
    if stat.S_IMODE(os.stat(path).st_mode) != 0o644:  # the umask may have narrowed it
        os.chmod(path, 0o644)
    log.info("wrote %s chaining %s", path, os.path.basename(primary_path))
    return True


def _check_own_name(filename: str) -> None:
    if os.sep in filename or filename.startswith(".") or os.path.splitext(filename)[1] != ".conflist":
        raise InstallError(f"--conf-file {filename!r}: give a file name ending in .conflist (no path)")


def remove_chained(conf_dir: str, filename: str = DEFAULT_CONF_FILE) -> bool:
    path = os.path.join(conf_dir, filename)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    fsync_dir(conf_dir)
    log.info("removed %s", path)
    return True


def sync(conf_dir: str, dracni_conf: dict, primary_name: str | None = None,
         filename: str = DEFAULT_CONF_FILE) -> str:
    """Bring ``<conf_dir>/<filename>`` in line with the primary.

    Returns the primary's path, or ``""`` when there is no primary (our conflist is then
    removed: it must not outlive the primary it chains).  A malformed primary raises
    InstallError and leaves our file as it was.
    """
    _check_own_name(filename)
    try:
        primary = find_primary(conf_dir, primary_name, own=filename)
    except NoPrimaryError:
        remove_chained(conf_dir, filename)
        return ""
    try:
        write_chained(conf_dir, primary, dracni_conf, filename)
    except InstallError:
        if not os.path.exists(primary):  # it went away while we read it
            remove_chained(conf_dir, filename)
            return ""
        raise
    return primary


def watch(conf_dir: str, dracni_conf: dict, primary_name: str | None = None,
          filename: str = DEFAULT_CONF_FILE, *, stop: threading.Event,
          resync_seconds: float = RESYNC_SECONDS, debounce_seconds: float = 0.05) -> None:
    """Keep the chained conflist in sync until ``stop`` is set.

    Every create/modify/move/delete of a config file in ``conf_dir`` triggers a ``sync``, and
    so does a timer every ``resync_seconds`` in case events were missed.  Errors are logged
    (once per distinct message) and retried; they never end the watch.  ``conf_dir`` is
    created when missing, and watched again when it is removed and comes back.
    """
    from inotify_simple import INotify, flags

    mask = (flags.CREATE | flags.CLOSE_WRITE | flags.MODIFY | flags.MOVED_TO | flags.MOVED_FROM
            | flags.DELETE | flags.ATTRIB | flags.DELETE_SELF | flags.MOVE_SELF)
    gone = flags.IGNORED | flags.DELETE_SELF | flags.MOVE_SELF
    last_message: list[str | None] = [None]

    def do_sync() -> None:
        try:
            primary = sync(conf_dir, dracni_conf, primary_name, filename)
            message = None if primary else f"no CNI network config in {conf_dir} yet: waiting for the primary CNI"
        except (InstallError, OSError) as exc:
            message = str(exc)
        if message and message != last_message[0]:
            log.warning("%s", message)
        elif not message and last_message[0]:
            log.info("%s is in sync again", os.path.join(conf_dir, filename))
        last_message[0] = message

    notifier = INotify()
    try:
        watching = False
        next_sync = 0.0
        while not stop.is_set():
            if not watching:
                try:
                    os.makedirs(conf_dir, 0o755, exist_ok=True)
                    notifier.add_watch(conf_dir, mask)
                    watching = True
                    next_sync = 0.0  # whatever happened while unwatched
                except OSError as exc:
                    log.warning("cannot watch %s: %s", conf_dir, exc)
            if time.monotonic() >= next_sync:
                do_sync()
                next_sync = time.monotonic() + (resync_seconds if watching else min(resync_seconds, 1.0))
            timeout = max(0.0, min(next_sync - time.monotonic(), 0.25))
            if not watching:
                stop.wait(timeout)
                continue
            events = notifier.read(timeout=int(timeout * 1000))
            if not events:
                continue
            if any(ev.mask & gone for ev in events):
                watching = False
            if not any(ev.mask & gone or os.path.splitext(ev.name)[1] in CONFIG_EXTENSIONS for ev in events):
                continue  # temp files (ours and others'), unrelated names
            time.sleep(debounce_seconds)  # a burst (write + rename, several files) becomes one sync
            if any(ev.mask & gone for ev in notifier.read(timeout=0)):
                watching = False
            next_sync = 0.0
    finally:
        notifier.close()


# -- uninstall ----------------------------------------------------------------------------------

def uninstall(bin_dir: str, conf_dir: str, filename: str = DEFAULT_CONF_FILE) -> list[str]:
    """Remove our conflist (first: the runtime stops calling dracni), the ``dracni`` link (only
    when it points into ``.dracni/``) and ``<bin_dir>/.dracni/``.  Idempotent; returns the
    paths removed.  The primary's and every other file stay.
    """
    _check_own_name(filename)
    removed = []
    if remove_chained(conf_dir, filename):
        removed.append(os.path.join(conf_dir, filename))
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
