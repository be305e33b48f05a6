"""``resource.k8s.io/v1`` ResourceClaims: the generic verbs with ``spec`` immutable and
``status`` dropped on create, and the ``status`` subresource: ``PUT``, merge patches (which
replace the whole ``devices`` list, as the real server's do) and server-side apply of
``status.devices``.  Status writes go through the strategy's ``dropDisabledStatusFields``
(``consumable_capacity.py``), Go's round trip (``normalize_status``) and
``validateResourceClaimStatusUpdate`` (422); spec writes through ``dropDisabledSpecFields``.
Test helpers: ``create_claim``, ``get_claim``, ``list_claims``, ``set_claim_allocation`` (the
scheduler's write), ``delete_claim``."""

from __future__ import annotations

import copy
from typing import Any

from . import field as fe
from . import smd
from .apply import apply_devices, check_applied_object
from .claim_status import (
    authorization_errors,
    drop_deallocated_status_devices,
    drop_disabled_device_status,
    validate_status_update,
)
from .clock import format_rfc3339, parse_rfc3339
from .consumable_capacity import allocation_errors, drop_claim_spec_fields, drop_claim_status_fields
from .core import ensure_namespace
from .errors import ApiStatusError, already_exists, bad_request, invalid
from .features import FeatureGates
from .managed_fields import Bookkeeping, ManagerId, record_update_ownership, same_ownership
from .objects import check_url_names, json_equal, merge_patch, require_object
from .resources import RESOURCE_API_VERSION, RESOURCES, Kind, Obj, StatusOps
from .store import Store, check_preconditions

CLAIMS = RESOURCES["resourceclaims"]
_MISSING = object()


# -- Go round-trip normalisation ------------------------------------------------------------------
def normalize_device_entry(entry: Any) -> Any:
    """What decoding into Go types and encoding again does to an AllocatedDeviceStatus.

    ``metav1.Condition`` has no ``omitempty`` on ``reason``/``message`` (so they are always
    served, possibly empty: the client's ``V1Condition`` model even requires ``message``) and
    ``lastTransitionTime`` is re-encoded as RFC 3339 seconds in UTC; null fields are dropped.
    """
    if not isinstance(entry, dict):
        return entry
    entry = {k: v for k, v in entry.items() if v is not None}
    conditions = entry.get("conditions")
    if isinstance(conditions, list):
        normalized = []
        for condition in conditions:
            if isinstance(condition, dict):
                condition = {k: v for k, v in condition.items() if v is not None}
                condition.setdefault("reason", "")
                condition.setdefault("message", "")
                moment = parse_rfc3339(condition.get("lastTransitionTime"))
                if moment is not None:
                    condition["lastTransitionTime"] = format_rfc3339(moment)
            normalized.append(condition)
        entry["conditions"] = normalized
    network = entry.get("networkData")
    if isinstance(network, dict):
        entry["networkData"] = {k: v for k, v in network.items() if v not in (None, "", [])}
    return entry


def normalize_status(status: Obj) -> Obj:
    status = {k: v for k, v in status.items() if v is not None}
    devices = status.get("devices")
    if isinstance(devices, list):
        if devices:
            status["devices"] = [normalize_device_entry(e) for e in devices]
        else:
            status.pop("devices")
    return status


# -- validation -------------------------------------------------------------------------------
def validate_claim_status(status: Obj, old: Obj, deleted: bool = False) -> list[str]:
    """``validateResourceClaimStatusUpdate`` (claim_status.py) with the consumable-capacity rules of
    ``validateAllocationResult`` for a new allocation."""
    return validate_status_update(status, old, deleted, allocation_errors)


# -- the main resource ------------------------------------------------------------------------
def _drop_disabled_spec(new: Obj, old: Obj | None, gates: FeatureGates) -> None:
    """resourceclaim/strategy.go ``dropDisabledSpecFields`` (``PrepareForCreate``/``PrepareForUpdate``)."""
    drop_claim_spec_fields(new.get("spec"), (old or {}).get("spec"), gates)


def _prepare_create(obj: Obj) -> tuple[Obj, list[str]]:
    obj.pop("status", None)  # PrepareForCreate clears the status
    return obj, []


def _prepare_update(new: Obj, current: Obj) -> tuple[Obj, list[str]]:
    if not json_equal(new.get("spec"), current.get("spec")):
        return new, [fe.invalid("spec", "<value omitted>", "field is immutable")]
    return new, []


# -- the status subresource -------------------------------------------------------------------
def _commit_status(store: Store, namespace: str, name: str, current: Obj, status: Obj, book: Bookkeeping) -> Obj:
    """The status strategy's ``PrepareForUpdate`` (``dropDeallocatedStatusDevices``,
    ``dropDisabledFields``), then its ``ValidateUpdate`` (the 1.36 granular authorization and
    ``validateResourceClaimStatusUpdate``: 422) and store the new status (unless nothing changed)."""
    old_status = current.get("status") or {}
    drop_deallocated_status_devices(status, old_status, store.gates)
    drop_disabled_device_status(status, old_status, store.gates)
    drop_claim_status_fields(status, current, store.gates)
    status = normalize_status(status)
    context = store.request_context()
    errs = authorization_errors(
        context.caller if context else None,
        context.authorize if context else None,
        status,
        old_status,
        store.gates,
    )
    errs += validate_claim_status(status, old_status, bool((current.get("metadata") or {}).get("deletionTimestamp")))
    if errs:
        raise invalid(CLAIMS, name, errs)
    return store.commit_status(CLAIMS, namespace, name, current, status, book)


def _status_update(store: Store, namespace: str, name: str, current: Obj, status: Obj, mid: ManagerId) -> Obj:
    """An Update operation on the status: ``mid`` owns the device entry fields and the other
    status fields it changed."""
    book = copy.deepcopy(store.books.get(("resourceclaims", namespace, name)) or Bookkeeping())
    old_devices = (current.get("status") or {}).get("devices") or []
    new_devices = status.get("devices") or []
    if not isinstance(new_devices, list):
        new_devices = []
    record_update_ownership(book, old_devices, new_devices, mid)
    changed = [
        f"f:{k}"
        for k in set(status) | set(current.get("status") or {})
        if k != "devices" and not json_equal(status.get(k), (current.get("status") or {}).get(k))
    ]
    if changed or not json_equal(old_devices, new_devices):
        book.touch(mid, {"f:status": {k: {} for k in changed}} if changed else None)
    return _commit_status(store, namespace, name, current, status, book)


def put_status(store: Store, namespace: str, name: str, body: Any, mid: ManagerId) -> Obj:
    """``PUT .../resourceclaims/{name}/status``: the body's status replaces the stored one."""
    obj = require_object(body, CLAIMS)
    meta = obj.get("metadata") or {}
    check_url_names(meta, name)
    with store.lock:
        current = store.require(CLAIMS, namespace, name)
        check_preconditions(CLAIMS, name, current, meta)
        status = copy.deepcopy(obj.get("status") or {})
        return _status_update(store, namespace, name, current, status, mid)


def patch_status(store: Store, namespace: str, name: str, patch: Obj, strategic: bool, mid: ManagerId) -> Obj:
    """A merge patch on ``.../status``: the patch's ``status`` merged into the stored one."""
    with store.lock:
        current = store.require(CLAIMS, namespace, name)
        check_preconditions(CLAIMS, name, current, patch.get("metadata") or {})
        status = (
            merge_patch(current.get("status") or {}, patch.get("status") or {}, strategic)
            if "status" in patch
            else copy.deepcopy(current.get("status") or {})
        )
        if patch.get("status", _MISSING) is None:
            status = {}
        return _status_update(store, namespace, name, current, status, mid)


def _typed_patch_error(detail: str) -> ApiStatusError:
    return bad_request(f"failed to create typed patch object ({RESOURCE_API_VERSION}, Kind={CLAIMS.kind}): {detail}")


def _applied_devices(body: Obj) -> list[Obj]:
    """The ``status.devices`` entries of an apply body (normalized; 400 when the typed patch
    cannot be built: a wrong type, a missing key field, a duplicate key, an undeclared field)."""
    status = body.get("status") or {}
    if not isinstance(status, dict):
        raise bad_request(".status: expected map, got " + type(status).__name__)
    applied = status.get("devices") or []
    if not isinstance(applied, list):
        raise bad_request(".status.devices: expected list, got " + type(applied).__name__)
    entries: list[Obj] = []
    seen: set[str] = set()
    for index, entry in enumerate(applied):
        if not isinstance(entry, dict):
            raise _typed_patch_error(f".status.devices[{index}]: expected map, got {type(entry).__name__}")
        entry = normalize_device_entry(entry)
        for required in ("driver", "device", "pool"):
            if required not in entry:
                raise _typed_patch_error(
                    f".status.devices: element {index}: associative list with keys has an element that omits "
                    f'key field "{required}" (and doesn\'t have default value)'
                )
        key = smd.key_element(entry, smd.DEVICE_KEYS)
        where = ".status.devices" + smd.path_text((key,))
        if key in seen:
            raise _typed_patch_error(f".status.devices: duplicate entries for key {smd.path_text((key,))}")
        seen.add(key)
        for name in entry:
            if name not in smd.DEVICE_STATUS.fields:
                raise _typed_patch_error(f"{where}.{name}: field not declared in schema")
        conditions = entry.get("conditions")
        for condition in conditions if isinstance(conditions, list) else []:
            if isinstance(condition, dict):
                for name in condition:
                    if name not in smd.CONDITION.fields:
                        ckey = smd.path_text((smd.key_element(condition, ("type",)),))
                        raise _typed_patch_error(f"{where}.conditions{ckey}.{name}: field not declared in schema")
        network = entry.get("networkData")
        for name in network if isinstance(network, dict) else {}:
            if name not in smd.NETWORK_DATA.fields:
                raise _typed_patch_error(f"{where}.networkData.{name}: field not declared in schema")
        entries.append(entry)
    return entries


def apply_status(store: Store, namespace: str, name: str, body: Any, manager: str, force: bool) -> Obj:
    """Server-side apply of ``status.devices`` by ``manager`` (smd.py: a list-map keyed by driver,
    device, pool, shareID; inside an entry ``conditions`` by type, ``networkData`` per field)."""
    meta = check_applied_object(CLAIMS, RESOURCE_API_VERSION, body, name)
    applied = _applied_devices(body)
    mid: ManagerId = (manager, "Apply", "status")
    with store.lock:
        current = store.require(CLAIMS, namespace, name)
        check_preconditions(CLAIMS, name, current, meta)
        old_book = store.books.get(("resourceclaims", namespace, name))
        book = copy.deepcopy(old_book or Bookkeeping())
        cur_status = copy.deepcopy(current.get("status") or {})
        devices = apply_devices(book, cur_status.get("devices") or [], applied, mid, force, CLAIMS.api_version)
        if devices:
            cur_status["devices"] = devices
        else:
            cur_status.pop("devices", None)
        book.touch(mid)
        if not book.device_paths.get(mid) and not book.managers[mid]["fields"]:
            book.managers.pop(mid, None)
        if json_equal(cur_status, current.get("status") or {}) and same_ownership(old_book, book, CLAIMS.api_version):
            return copy.deepcopy(current)  # a no-op apply: not even validated
        return _commit_status(store, namespace, name, current, cur_status, book)


KIND = Kind(
    CLAIMS,
    _prepare_create,
    _prepare_update,
    StatusOps(put_status, patch_status, apply_status),
    drop_disabled=_drop_disabled_spec,
)


class ClaimHelpers:
    """``FakeApiServer``'s ResourceClaim helpers (direct, not over HTTP)."""

    _store: Store

    def create_claim(self, obj: Obj) -> Obj:
        """Store a ResourceClaim as given (status included, unvalidated); creates its namespace.

        The feature gates apply as to a create followed by a status write: fields of a disabled
        gate are dropped from the spec, and from the status unless the (dropped) spec uses them.
        """
        obj = copy.deepcopy(obj)
        gates = self._store.gates
        _drop_disabled_spec(obj, None, gates)
        if isinstance(obj.get("status"), dict):
            drop_disabled_device_status(obj["status"], None, gates)
            drop_claim_status_fields(obj["status"], {k: v for k, v in obj.items() if k != "status"}, gates)
        meta = obj.setdefault("metadata", {})
        namespace = meta.get("namespace") or "default"
        meta["namespace"] = namespace
        with self._store.lock:
            ensure_namespace(self._store, namespace)
            if ("resourceclaims", namespace, meta.get("name")) in self._store.objects:
                raise already_exists(CLAIMS, meta.get("name"))
            if not obj.get("status"):
                obj.pop("status", None)
            return self._store.create(CLAIMS, namespace, obj, ("kube-controller-manager", "Update", ""), keep_uid=True)

    def get_claim(self, namespace: str, name: str) -> Obj | None:
        return self._store.copy_of("resourceclaims", namespace, name)

    def list_claims(self, namespace: str | None = None) -> list[Obj]:
        return self._store.copies("resourceclaims", namespace)

    def set_claim_allocation(
        self,
        namespace: str,
        name: str,
        allocation: Obj | None,
        reserved_for: list[Obj] | None = None,
        *,
        clear_devices: bool | None = None,
    ) -> Obj:
        """Write ``status.allocation``/``reservedFor`` as the scheduler does (MODIFIED event).

        ``allocation=None`` deallocates; ``status.devices`` is then cleared too (as the
        resourceclaim controller does) unless ``clear_devices=False``.  As for the scheduler's
        status write, fields of a disabled gate are dropped (``shareID``/``consumedCapacity`` of
        the results while ``DRAConsumableCapacity`` is off, unless the claim already uses them)
        and a new allocation's ``shareID``s must be UUIDs (422); otherwise unvalidated.
        """
        with self._store.lock:
            old = self._store.require(CLAIMS, namespace, name)
            status = copy.deepcopy(old.get("status") or {})
            if allocation is None:
                status.pop("allocation", None)
                if clear_devices is None or clear_devices:
                    status.pop("devices", None)
            else:
                status["allocation"] = copy.deepcopy(allocation)
            drop_claim_status_fields(status, old, self._store.gates)
            if allocation is not None and not (old.get("status") or {}).get("allocation"):
                errs = allocation_errors(status)
                if errs:
                    raise invalid(CLAIMS, name, errs)
            if reserved_for:
                status["reservedFor"] = copy.deepcopy(reserved_for)
            else:
                status.pop("reservedFor", None)
            new = copy.deepcopy(old)
            new["status"] = status
            if not status:
                new.pop("status", None)
            book = self._store.book(("resourceclaims", namespace, name))
            mid = ("kube-scheduler", "Update", "status")
            record_update_ownership(
                book, (old.get("status") or {}).get("devices") or [], status.get("devices") or [], mid
            )
            book.touch(mid, {"f:status": {"f:allocation": {}, "f:reservedFor": {}}})
            return self._store.put(CLAIMS, namespace, name, new, "MODIFIED", old)

    def delete_claim(self, namespace: str, name: str) -> Obj | None:
        """Remove a claim now (finalizers ignored); DELETED event.  None when it was not there."""
        return self._store.remove("resourceclaims", namespace, name)
