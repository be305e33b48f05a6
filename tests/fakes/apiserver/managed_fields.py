"""``metadata.managedFields``: who owns which field of an object, kept per object outside it.

Managers are ``(manager, operation, subresource)``.  ``status.devices`` of a ResourceClaim is a
list-map keyed by (driver, device, pool, shareID): ownership is per entry and per top-level entry
field; an IPAMClaim's status is owned per top-level field.  ``Bookkeeping.render`` writes the
FieldsV1 entries the real server serves; Update operations (PUT, merge patch) own what they
changed (``record_update_ownership``).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from .dracni_rules import now_rfc3339
from .objects import deep_merge, json_equal
from .resources import RESOURCE_API_VERSION

ManagerId = tuple[str, str, str]  # (manager, operation, subresource)
DeviceKey = tuple[Any, Any, Any, Any]  # (driver, device, pool, shareID or None)
DEVICE_KEY_FIELDS = ("driver", "device", "pool", "shareID")


def device_key(entry: Any) -> DeviceKey:
    if not isinstance(entry, dict):
        return (None, None, None, None)
    return (entry.get("driver"), entry.get("device"), entry.get("pool"), entry.get("shareID") or None)


def key_fields(key: DeviceKey) -> list[tuple[str, Any]]:
    driver, device, pool, share = key
    fields = [("device", device), ("driver", driver), ("pool", pool)]
    if share is not None:
        fields.append(("shareID", share))
    return fields


def key_text(key: DeviceKey) -> str:
    """``device="d",driver="x",pool="p"``, as structured-merge-diff prints a list-map key."""
    return ",".join(f"{name}={json.dumps(value)}" for name, value in key_fields(key))


def device_path(key: DeviceKey, fieldname: str | None = None) -> str:
    """Structured-merge-diff's path: ``.status.devices[device="d",driver="x",pool="p"].conditions``."""
    path = f".status.devices[{key_text(key)}]"
    return path + (f".{fieldname}" if fieldname and fieldname != "." else "")


def entry_fields(entry: dict[str, Any]) -> list[str]:
    """A ``status.devices`` entry's fields other than its key."""
    return [f for f in entry if f not in DEVICE_KEY_FIELDS]


def _fields_v1_key(key: DeviceKey) -> str:
    return "k:" + json.dumps(dict(key_fields(key)), separators=(",", ":"), sort_keys=True)


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
    devices: dict[DeviceKey, dict[str, set[ManagerId]]] = field(default_factory=dict)
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

    def owned_devices(self, mid: ManagerId) -> dict[DeviceKey, set[str]]:
        out: dict[DeviceKey, set[str]] = {}
        for key, fmap in self.devices.items():
            for fname, owners in fmap.items():
                if mid in owners:
                    out.setdefault(key, set()).add(fname)
        return out

    def render(self, api_version: str) -> list[dict[str, Any]]:
        entries = []
        mids = list(self.managers)
        for fmap in self.devices.values():
            for owners in fmap.values():
                for mid in owners:
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
            owned = self.owned_devices(mid)
            if owned:
                devices: dict[str, Any] = {}
                for key, fnames in owned.items():
                    item: dict[str, Any] = {".": {}}
                    for name, _ in key_fields(key):
                        item[f"f:{name}"] = {}
                    for fname in sorted(fnames - {"."}):
                        item[f"f:{fname}"] = {}
                    devices[_fields_v1_key(key)] = item
                fields = deep_merge(fields, {"f:status": {"f:devices": devices}})
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


def record_update_ownership(book: Bookkeeping, old: list[Any], new: list[Any], mid: ManagerId) -> None:
    """An Update operation (PUT, merge patch) owns what it changed; removed fields lose owners."""
    old_map = {device_key(e): e for e in old if isinstance(e, dict)}
    new_map = {device_key(e): e for e in new if isinstance(e, dict)}
    for key in list(book.devices):
        if key not in new_map:
            del book.devices[key]
    for key, entry in new_map.items():
        fmap = book.devices.setdefault(key, {})
        before = old_map.get(key)
        for fname in list(fmap):
            if fname != "." and fname not in entry:
                del fmap[fname]
        for fname in entry_fields(entry):
            if before is None or not json_equal(before.get(fname, None), entry[fname]) or fname not in before:
                fmap[fname] = {mid}
        if before is None:
            fmap.setdefault(".", set()).add(mid)
        dot = fmap.setdefault(".", set())
        for fname, owners in fmap.items():
            if fname != ".":
                dot.update(owners)
