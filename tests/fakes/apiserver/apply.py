"""Server-side apply of a status: what an apply body must be (400s), who owns what after it,
conflicts with other managers (409 unless ``force``, which takes the fields over), and fields a
manager applied before and omits now (released; removed when nobody owns them any more).

Two granularities, as the two served schemas have: ``status.devices`` of a ResourceClaim, a
list-map keyed by (driver, device, pool, shareID) with ``conditions`` a list-map keyed by
``type`` and ``networkData`` a struct with ``ips`` atomic (``apply_devices``, smd.py); an
IPAMClaim's top-level status fields (``apply_fields``).
"""

from __future__ import annotations

import copy
from typing import Any

from . import smd
from .errors import ApiStatusError, bad_request
from .managed_fields import Bookkeeping, ManagerId, devices_object, print_manager
from .objects import check_url_names, json_equal
from .resources import Obj, Resource


def check_applied_object(res: Resource, api_version_expected: str, body: Any, name: str) -> Obj:
    """The checks kube-apiserver makes on any apply body before looking at its fields (400s);
    returns the body's metadata."""
    if not isinstance(body, dict):
        raise bad_request("error decoding patch: the applied configuration must be an object")
    api_version, kind = body.get("apiVersion"), body.get("kind")
    if not api_version or not kind:
        raise bad_request(f"invalid object type: {api_version or ''}, Kind={kind or ''}")
    if api_version != api_version_expected:
        raise bad_request(
            f"the API version in the data ({api_version}) does not match the expected API version "
            f"({api_version_expected})"
        )
    if kind != res.kind:
        raise bad_request(f"the kind in the data ({kind}) does not match the expected kind ({res.kind})")
    meta: Obj = body.get("metadata") or {}
    check_url_names(meta, name)
    return meta


def conflict_error(
    conflicts: list[tuple[ManagerId, str]], book: Bookkeeping, api_version: str, *, by_manager: bool
) -> ApiStatusError:
    """409 for ``(manager, field path)`` conflicts.  Several are listed grouped by manager
    (``by_manager``) or one line each."""

    def who(mid: ManagerId) -> str:
        return print_manager(mid, book.when(mid), api_version)

    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {who(mid)}", "field": path}
        for mid, path in conflicts
    ]
    if len(conflicts) == 1:
        mid, path = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {who(mid)}: {path}"
    elif by_manager:
        paths: dict[str, list[str]] = {}
        for mid, path in conflicts:
            paths.setdefault(who(mid), []).append(path)
        lines = []
        for manager in sorted(paths):
            lines.append(f"conflicts with {manager}:")
            lines.extend(f"- {p}" for p in paths[manager])
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    else:
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(
            f"conflict with {who(mid)}: {path}" for mid, path in conflicts
        )
    return ApiStatusError(409, "Conflict", message, {"causes": causes})


def apply_devices(
    book: Bookkeeping, live: list[Obj], applied: list[Obj], mid: ManagerId, force: bool, api_version: str
) -> list[Obj]:
    """Server-side apply of ``applied`` entries by ``mid`` over the stored ``live`` ones
    (``smd.apply``: list-maps by key down to each condition, ``networkData`` per field); the new
    list (``book`` changed in place; 409 on conflicts unless ``force``)."""
    paths = copy.deepcopy(book.device_paths)
    try:
        merged = smd.apply(devices_object(live), devices_object(applied), smd.CLAIM_STATUS, paths, mid, force)
    except smd.Conflicts as err:
        raise conflict_error(
            [(other, smd.path_text(path)) for other, path in err.items], book, api_version, by_manager=True
        ) from None
    book.device_paths = paths
    return list(((merged.get("status") or {}).get("devices")) or [])


def apply_fields(book: Bookkeeping, status: Obj, applied: Obj, mid: ManagerId, force: bool, api_version: str) -> None:
    """Apply top-level ``status`` fields by ``mid`` (``status`` and ``book`` changed in place):
    each applied field replaces the stored one and is owned by ``mid``."""
    conflicts: list[tuple[ManagerId, str]] = []
    for fname, value in applied.items():
        if fname in status and not json_equal(status[fname], value):
            for other in sorted(book.status_fields.get(fname, set()) - {mid}):
                conflicts.append((other, f".status.{fname}"))
    if conflicts and not force:
        raise conflict_error(conflicts, book, api_version, by_manager=False)
    for fname, owners in list(book.status_fields.items()):
        if mid in owners and fname not in applied:
            owners.discard(mid)
            if not owners:
                del book.status_fields[fname]
                status.pop(fname, None)
    for fname, value in applied.items():
        owners = book.status_fields.setdefault(fname, set())
        if fname not in status or not json_equal(status[fname], value):
            owners.clear()  # a forced (or uncontested) change takes the field over
        owners.add(mid)
        status[fname] = copy.deepcopy(value)
