"""Where ``status.devices`` entries go: the API server, or a file beside a claim manifest.

A :class:`StatusSink` replaces *one driver's* entries of a claim's ``status.devices`` and keeps
the other drivers' entries, the semantics of a server-side apply of the status subresource
with ``fieldManager=<driver>`` (docs/contracts.md section 3).

:class:`LocalStatusSink` is the clusterless sink: for a claim read from a manifest file
``<dir>/<stem>.yaml`` it maintains ``<dir>/<stem>.<namespace>.<name>.status.json``, a partial
ResourceClaim holding only ``metadata`` and ``status.devices``.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

import orjson

from dracni.apirules.validation import device_id, validate_device_status
from dracni.atomicfile import fsync_dir, read_if_exists, write_atomic
from dracni.status.entries import Entry

TYPE_CHECKING = False
if TYPE_CHECKING:
    from dracni.state.facts import ClaimRef

API_VERSION = "resource.k8s.io/v1"
KIND = "ResourceClaim"
STATUS_FILE_MODE = 0o644
_MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


class SinkError(Exception):
    """Publishing a claim's status failed; ``retryable`` tells whether trying again may help.

    ``forbidden``: the server refused dracni the write (RBAC, or the 1.36 per-device status
    authorization): retried, since fixing the grant makes it work, and reported apart.
    ``refused``: the server refused the entries' content (a 422 of validation): final for
    these entries, but the drain tries them one by one so one entry never costs the others.
    """

    def __init__(self, message: str, *, retryable: bool = True, forbidden: bool = False, refused: bool = False) -> None:
        super().__init__(message)
        self.retryable = (retryable or forbidden) and not refused
        self.forbidden = forbidden
        self.refused = refused


@runtime_checkable
class StatusSink(Protocol):
    def apply(self, claim: ClaimRef, driver: str, devices: list[Entry]) -> None:
        """Make ``devices`` this driver's entries of the claim's ``status.devices``.

        ``claim`` is ``{"uid", "namespace", "name"}``.  Other drivers' entries stay.  Raises
        :class:`SinkError` on failure.
        """
        ...


def status_path_for(manifest_path: str, namespace: str, name: str) -> str:
    """``<manifest path without .yaml/.yml/.json>.<namespace>.<name>.status.json``."""
    stem = manifest_path
    for suffix in _MANIFEST_SUFFIXES:
        if stem.endswith(suffix) and len(stem) > len(suffix):
            stem = stem[: -len(suffix)]
            break
    return f"{stem}.{namespace}.{name}.status.json"


def _entry_sort_key(entry: Entry) -> tuple[str, str, str, str]:
    def text(key: str) -> str:
        value = entry.get(key)
        return value if isinstance(value, str) else ""

    return (text("driver"), text("pool"), text("device"), text("shareID"))


class LocalStatusSink:
    """Writes claim status next to the claim's manifest file (clusterless operation).

    ``locate(namespace, name)`` returns the manifest file of a claim, or None when the claim
    is unknown.  Writes are atomic (temp file, fsync, rename, fsync of the directory) and
    serialized across processes by an advisory lock on the directory, so drivers sharing a
    manifest do not lose each other's entries.  Entries are checked with the API server's
    rules first: what the API would answer 422 to fails here too (not retryable).

    A claim that no manifest holds (yet: its manifest lives elsewhere, or comes back) is not
    published and stays pending (a retryable failure); ``unmatched`` lists those claims by UID,
    so a caller tells them apart from real failures.
    """

    def __init__(self, locate: Callable[[str, str], str | None]) -> None:
        self._locate = locate
        #: claim UID -> why it is unmatched, for the claims ``apply`` found in no manifest
        self.unmatched: dict[str, str] = {}

    def status_path(self, namespace: str, name: str) -> str | None:
        manifest = self._locate(namespace, name)
        if manifest is None:
            return None
        return status_path_for(os.fspath(manifest), namespace, name)

    def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The status document of a claim, or None when there is none."""
        path = self.status_path(namespace, name)
        return None if path is None else _read_document(path)

    def apply(self, claim: ClaimRef, driver: str, devices: list[Entry]) -> None:
        namespace, name, uid = claim.get("namespace"), claim.get("name"), claim.get("uid")
        if not namespace or not name:
            raise SinkError(f"claim {claim!r} has no namespace/name", retryable=False)
        try:
            path = self.status_path(namespace, name)
        except Exception as exc:  # the locator reads manifests: report, don't crash the drain
            raise SinkError(f"cannot locate claim {namespace}/{name}: {exc}") from exc
        if path is None:
            reason = f"claim {namespace}/{name} is not in any manifest here"
            self.unmatched[str(uid or "")] = reason
            raise SinkError(reason, retryable=True)

        ours = [dict(d, driver=driver) for d in devices]
        directory = os.path.dirname(path) or "."
        with _locked_dir(directory):
            existing = _read_document(path)
            kept: list[Entry] = []
            if existing is not None:
                old_uid = (existing.get("metadata") or {}).get("uid")
                # A claim re-created under the same name is a new object: old entries die.
                if not uid or not old_uid or old_uid == uid:
                    old = (existing.get("status") or {}).get("devices") or []
                    kept = [e for e in old if isinstance(e, dict) and e.get("driver") != driver]
            merged = sorted(kept + ours, key=_entry_sort_key)

            mine = {id(e) for e in ours}
            problems: list[str] = []
            seen: set[str] = set()
            for index, entry in enumerate(merged):
                ident = device_id(entry)
                if id(entry) in mine:
                    problems.extend(validate_device_status(entry, path=f"status.devices[{index}]"))
                    if ident in seen:
                        problems.append(f"status.devices[{index}]: Duplicate value: {orjson.dumps(ident).decode()}")
                seen.add(ident)
            if problems:
                raise SinkError(
                    f"ResourceClaim.resource.k8s.io {name!r} is invalid: " + "; ".join(problems),
                    retryable=False,
                    refused=True,
                )

            if not merged:
                _remove(path)
                return
            document = {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "metadata": {"namespace": namespace, "name": name, **({"uid": uid} if uid else {})},
                "status": {"devices": merged},
            }
            _write_atomic(path, document)


# -- file helpers --------------------------------------------------------------------------
@contextmanager
def _locked_dir(directory: str) -> Iterator[None]:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise SinkError(f"cannot open {directory}: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _read_document(path: str) -> dict[str, Any] | None:
    data = read_if_exists(path, SinkError)
    if data is None:
        return None
    try:
        document: Any = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise SinkError(f"corrupt status file {path}: {exc}", retryable=False) from exc
    if not isinstance(document, dict):
        raise SinkError(f"corrupt status file {path}: not a JSON object", retryable=False)
    return document


def _write_atomic(path: str, document: dict[str, Any]) -> None:
    try:
        write_atomic(path, orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n", STATUS_FILE_MODE)
    except OSError as exc:
        raise SinkError(f"cannot write {path}: {exc.strerror}") from exc


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise SinkError(f"cannot remove {path}: {exc.strerror}") from exc
    try:
        fsync_dir(os.path.dirname(path) or ".")
    except OSError as exc:
        raise SinkError(f"cannot sync {os.path.dirname(path)}: {exc.strerror}") from exc
