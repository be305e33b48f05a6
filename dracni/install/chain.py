"""The chained conflist: dracni appended to the node's primary network config.

dracni's conflist is a separate file that sorts first (``00-dracni.conflist``), generated from
the primary's (whose file is never touched), written atomically (temp + fsync + rename) and only
when its content changes.  When the primary is gone, ours is removed: a conflist chaining a
primary that no longer exists would still be used by the runtime.
"""

from __future__ import annotations

import logging
import os
import stat
from typing import Any

from .. import jsonio
from ..atomicfile import fsync_dir, write_atomic
from ..defaults import CONF_FILE, PLUGIN_NAME
from .errors import InstallError, NoPrimaryError

log = logging.getLogger(__name__)

#: Top-level key of the generated conflist naming the primary file it was made from.
PRIMARY_KEY = "dracni.io/primary"
#: The extensions libcni reads network configs from (``libcni.ConfFiles``).
CONFIG_EXTENSIONS = (".conf", ".conflist", ".json")


def _config_files(conf_dir: str) -> list[str]:
    """Network config file names in libcni's order (sorted by name, matching extensions)."""
    try:
        names = sorted(os.listdir(conf_dir))
    except FileNotFoundError:
        return []
    return [
        n for n in names if os.path.splitext(n)[1] in CONFIG_EXTENSIONS and os.path.isfile(os.path.join(conf_dir, n))
    ]


def _is_generated(path: str) -> bool:
    """A conflist this module wrote (under whatever name)."""
    try:
        with open(path, "rb") as f:
            doc = jsonio.loads(f.read())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and PRIMARY_KEY in doc


def find_primary(conf_dir: str, name: str | None = None, own: str = CONF_FILE) -> str:
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


def _load_primary(path: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
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
            raise InstallError(
                f"primary CNI config {path}: a plugin list in a file not named *.conflist "
                "(libcni reads it as a single plugin)"
            )
        top = {k: doc[k] for k in ("cniVersion", "name") if k in doc}
        plugins = [{k: v for k, v in doc.items() if k not in ("cniVersion", "name")}]
    for i, plugin in enumerate(plugins):
        where = f"plugins[{i}]" if path.endswith(".conflist") else "the plugin"
        if not isinstance(plugin, dict):
            raise InstallError(f"primary CNI config {path}: {where} is not a JSON object")
        if not isinstance(plugin.get("type"), str) or not plugin["type"]:
            raise InstallError(f"primary CNI config {path}: {where} has no 'type'")
        if plugin["type"] == PLUGIN_NAME:
            raise InstallError(
                f"primary CNI config {path}: it already chains {PLUGIN_NAME} "
                f"({where}); remove it there or do not install the chained conflist"
            )
    if PRIMARY_KEY in doc:
        raise InstallError(f"primary CNI config {path}: it was generated by dracni install")
    from ..cni.versions import SUPPORTED_VERSIONS

    version = top.get("cniVersion")
    if version not in SUPPORTED_VERSIONS:
        raise InstallError(
            f"primary CNI config {path}: cniVersion {version!r} is not one dracni speaks "
            f"({', '.join(SUPPORTED_VERSIONS)})"
        )
    return top, plugins


def render_chained(primary_path: str, dracni_conf: dict[str, Any]) -> dict[str, Any]:
    """The primary's network with dracni appended: same ``cniVersion``, ``name`` (so the runtime's
    network name and cached results stay the same) and other top-level keys, plus
    ``dracni.io/primary`` naming the primary file.  Raises InstallError for a malformed primary.
    """
    top, plugins = _load_primary(primary_path)
    ours = {"type": PLUGIN_NAME, **{k: v for k, v in dracni_conf.items() if k != "type"}}
    return {**top, PRIMARY_KEY: os.path.basename(primary_path), "plugins": [*plugins, ours]}


def _render_bytes(conflist: dict[str, Any]) -> bytes:
    return jsonio.dumps(conflist, pretty=True) + b"\n"


def write_chained(conf_dir: str, primary_path: str, dracni_conf: dict[str, Any], filename: str = CONF_FILE) -> bool:
    """Write the chained conflist as ``<conf_dir>/<filename>`` (atomically, 0644) if its content
    changed; returns whether it did.  The primary file is never modified.  Raises InstallError
    when the primary is malformed or ``filename`` would not be the first config the runtime reads.
    """
    check_conf_file(filename)
    data = _render_bytes(render_chained(primary_path, dracni_conf))
    first = next((n for n in _config_files(conf_dir) if n != filename), None)
    if first is not None and first < filename:
        raise InstallError(
            f"{first} sorts before {filename} in {conf_dir}: the runtime would use it, not "
            "dracni's conflist; choose a --conf-file name that sorts first"
        )
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


def check_conf_file(filename: str) -> None:
    """InstallError unless ``filename`` is a plain file name ending in .conflist."""
    if os.sep in filename or filename.startswith(".") or os.path.splitext(filename)[1] != ".conflist":
        raise InstallError(f"--conf-file {filename!r}: give a file name ending in .conflist (no path)")


def remove_chained(conf_dir: str, filename: str = CONF_FILE) -> bool:
    """Remove ``<conf_dir>/<filename>``; returns whether it was there."""
    path = os.path.join(conf_dir, filename)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    fsync_dir(conf_dir)
    log.info("removed %s", path)
    return True


def sync(conf_dir: str, dracni_conf: dict[str, Any], primary_name: str | None = None, filename: str = CONF_FILE) -> str:
    """Bring ``<conf_dir>/<filename>`` in line with the primary.

    Returns the primary's path, or ``""`` when there is no primary (our conflist is then
    removed: it must not outlive the primary it chains).  A malformed primary raises
    InstallError and leaves our file as it was.
    """
    check_conf_file(filename)
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
