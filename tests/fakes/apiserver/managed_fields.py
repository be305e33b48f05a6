"""``metadata.managedFields``: who owns which field of an object, kept per object outside it.

Managers are ``(manager, operation, subresource)``.  ``status.devices`` of a ResourceClaim is
owned as structured-merge-diff owns it (field sets of smd.py paths); an IPAMClaim's status is
owned per top-level field.  ``Bookkeeping.render`` writes the
FieldsV1 entries the real server serves; Update operations (PUT, merge patch) own what they
changed (``record_update_ownership``).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from . import smd
from .clock import now_rfc3339
from .objects import deep_merge, json_equal
from .resources import RESOURCE_API_VERSION

ManagerId = tuple[str, str, str]  # (manager, operation, subresource)


def print_manager(mid: ManagerId, when: str | None, api_version: str = RESOURCE_API_VERSION) -> str:
    """A manager as conflict messages name it."""
    manager, operation, subresource = mid
    text = json.dumps(manager)
    if subresource:
        text += f" with subresource {json.dumps(subresource)}"
    if operation == "Update":
        text += f" using {api_version}" + (f" at {when}" if when else "")
    return text


@dataclass
class Bookkeeping:
    """Per-object server-side state kept outside the object (managed fields)."""

    managers: dict[ManagerId, dict[str, Any]] = field(default_factory=dict)  # mid -> {"time", "fields"}
    #: ResourceClaims: each manager's field set under ``status.devices`` (smd.py paths).
    device_paths: dict[ManagerId, set[smd.Path]] = field(default_factory=dict)
    #: IPAMClaims: owners of each top-level ``status`` field (``ips``, ``ownerPod``, ``conditions``).
    status_fields: dict[str, set[ManagerId]] = field(default_factory=dict)

    def touch(self, mid: ManagerId, fields: dict[str, Any] | None = None) -> None:
        entry = self.managers.setdefault(mid, {"time": now_rfc3339(), "fields": {}})
        entry["time"] = now_rfc3339()
        if fields:
            entry["fields"] = deep_merge(entry["fields"], fields)

    def when(self, mid: ManagerId) -> str | None:
        """When ``mid`` last wrote (None when it is not a manager)."""
        return (self.managers.get(mid) or {}).get("time")

    def render(self, api_version: str) -> list[dict[str, Any]]:
        entries = []
        mids = list(self.managers)
        for mid in self.device_paths:
            if mid not in mids:
                mids.append(mid)
        for owners in self.status_fields.values():
            for mid in sorted(owners):
                if mid not in mids:
                    mids.append(mid)
        for mid in mids:
            info = self.managers.get(mid) or {"time": now_rfc3339(), "fields": {}}
            fields = copy.deepcopy(info["fields"])
            owned_status = sorted(f for f, owners in self.status_fields.items() if mid in owners)
            if owned_status:
                fields = deep_merge(fields, {"f:status": {f"f:{f}": {} for f in owned_status}})
            paths = self.device_paths.get(mid)
            if paths:
                fields = deep_merge(fields, smd.fields_v1(paths))
            if not fields:
                continue
            manager, operation, subresource = mid
            entry = {
                "manager": manager,
                "operation": operation,
                "apiVersion": api_version,
                "time": info["time"],
                "fieldsType": "FieldsV1",
                "fieldsV1": fields,
            }
            if subresource:
                entry["subresource"] = subresource
            entries.append(entry)
        return entries


def same_ownership(old: Bookkeeping | None, new: Bookkeeping, api_version: str) -> bool:
    """Whether both render the same managedFields, times aside (a write that changes neither the
    object nor its ownership is a no-op: no new resourceVersion, no event)."""

    def untimed(book: Bookkeeping | None) -> list[dict[str, Any]]:
        entries = book.render(api_version) if book is not None else []
        return [{k: v for k, v in e.items() if k != "time"} for e in entries]

    return json_equal(untimed(old), untimed(new))


def devices_object(devices: list[Any] | None) -> dict[str, Any]:
    """The part of a claim smd.py's schema covers."""
    return {"status": {"devices": list(devices or [])}}


def record_update_ownership(book: Bookkeeping, old: list[Any], new: list[Any], mid: ManagerId) -> None:
    """An Update operation (PUT, merge patch) on ``status.devices``: ``Updater.Update``."""
    smd.update(devices_object(old), devices_object(new), smd.CLAIM_STATUS, book.device_paths, mid)
