"""``resource.k8s.io/v1`` ResourceSlices (cluster-scoped): the generic verbs with the spec
validated as ``ValidateResourceSlice``/``ValidateResourceSliceUpdate`` do (422; pool, driver and
node immutable), field selectors ``spec.nodeName``, ``spec.driver``, ``metadata.name``.
Capacity quantities are decoded (400) and stored in canonical form; ``dropDisabledFields`` runs
before validation (``consumable_capacity.py``: ``allowMultipleAllocations`` and request policies
go while ``DRAConsumableCapacity`` is off; ``device_taints.py``: taints get ``timeAdded``
defaulted, are validated, cap a slice at 64 devices, and go while ``DRADeviceTaints`` is off;
``list_attributes.py``: list-type attribute values are validated, counted against 48 values a
device, and go while ``DRAListTypeAttributes`` is off).
Test helpers: ``create_slice``, ``get_slice``,
``list_slices``, ``delete_all_slices``."""

from __future__ import annotations

import copy
from typing import Any

from . import crud
from . import field as fe
from .consumable_capacity import capacity_errors, decode_slice_capacities, drop_slice_fields
from .device_taints import default_taint_times, device_taint_errors, drop_taint_fields, max_devices
from .features import FeatureGates
from .list_attributes import MAX_ATTRIBUTE_VALUES, SEMVER, drop_list_attributes, list_value_errors, value_count
from .names import (
    dns_label_errors,
    dns_subdomain_errors,
    driver_name_errors,
    key_path,
    pool_name_errors,
    qualified_name_errors,
)
from .resources import RESOURCES, Kind, Obj
from .store import Store

SLICES = RESOURCES["resourceslices"]


def validate_slice(obj: Obj, old: Obj | None = None) -> list[str]:
    """``ValidateResourceSlice`` / ``ValidateResourceSliceUpdate`` for resource.k8s.io/v1."""
    errs: list[str] = []
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [fe.required("spec")]
    errs.extend(driver_name_errors("spec.driver", spec.get("driver")))
    pool = spec.get("pool")
    if not isinstance(pool, dict):
        errs.append(fe.required("spec.pool.name"))
        errs.append(fe.invalid("spec.pool.resourceSliceCount", 0, "must be greater than zero"))
    else:
        errs.extend(pool_name_errors("spec.pool.name", pool.get("name")))
        count = pool.get("resourceSliceCount")
        if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            errs.append(
                fe.invalid(
                    "spec.pool.resourceSliceCount", count if count is not None else 0, "must be greater than zero"
                )
            )
        generation = pool.get("generation", 0)
        if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
            errs.append(fe.invalid("spec.pool.generation", generation, "must be greater than or equal to zero"))
    if old is not None:
        old_spec = old.get("spec") or {}
        for path, new_value, old_value in (
            ("spec.pool.name", (spec.get("pool") or {}).get("name"), (old_spec.get("pool") or {}).get("name")),
            ("spec.driver", spec.get("driver"), old_spec.get("driver")),
            ("spec.nodeName", spec.get("nodeName"), old_spec.get("nodeName")),
        ):
            if new_value != old_value:
                errs.append(fe.invalid(path, new_value, "field is immutable"))

    set_fields = []
    if spec.get("nodeName"):
        set_fields.append("`nodeName`")
        errs.extend(dns_subdomain_errors("spec.nodeName", spec["nodeName"]))
    if spec.get("nodeSelector") is not None:
        set_fields.append("`nodeSelector`")
        terms = (
            (spec["nodeSelector"] or {}).get("nodeSelectorTerms") if isinstance(spec["nodeSelector"], dict) else None
        )
        if not isinstance(terms, list) or len(terms) != 1:
            errs.append(
                fe.invalid("spec.nodeSelector.nodeSelectorTerms", terms, "must have exactly one node selector term")
            )
    if spec.get("allNodes"):
        set_fields.append("`allNodes`")
    if spec.get("perDeviceNodeSelection"):
        set_fields.append("`perDeviceNodeSelection`")
    one_of = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
    if not set_fields:
        errs.append(fe.required("spec", one_of))
    elif len(set_fields) > 1:
        errs.append(fe.invalid("spec", "{" + ", ".join(set_fields) + "}", one_of + ", but multiple fields are set"))

    devices = spec.get("devices") or []
    if not isinstance(devices, list):
        errs.append(fe.invalid("spec.devices", "<value omitted>", "must be a list"))
        return errs
    seen: set[str] = set()
    for index, device in enumerate(devices):
        path = f"spec.devices[{index}]"
        if not isinstance(device, dict):
            errs.append(fe.invalid(path, "<value omitted>", "must be an object"))
            continue
        errs.extend(dns_label_errors(f"{path}.name", device.get("name")))
        attributes = device.get("attributes") or {}
        capacity = device.get("capacity") or {}
        if not isinstance(attributes, dict):
            errs.append(fe.invalid(f"{path}.attributes", "<value omitted>", "must be a map"))
            attributes = {}
        if not isinstance(capacity, dict):
            errs.append(fe.invalid(f"{path}.capacity", "<value omitted>", "must be a map"))
            capacity = {}
        for name, attribute in attributes.items():
            apath = key_path(f"{path}.attributes", name)
            errs.extend(qualified_name_errors(apath, name))
            errs.extend(_attribute_errors(apath, attribute))
        allow_multiple = device.get("allowMultipleAllocations") is True
        for name, value in capacity.items():
            cpath = key_path(f"{path}.capacity", name)
            errs.extend(qualified_name_errors(cpath, name))
            if not isinstance(value, dict) or value.get("value") in (None, ""):
                errs.append(fe.required(f"{cpath}.value"))
            else:
                errs.extend(capacity_errors(cpath, value, allow_multiple))
        errs.extend(device_taint_errors(path, device, old))
        combined = len(attributes) + len(capacity)
        if combined > 32:
            errs.append(fe.invalid(path, combined, "the total number of attributes and capacities must not exceed 32"))
        values = value_count(attributes)
        if values > MAX_ATTRIBUTE_VALUES:
            errs.append(
                fe.invalid(path, values, f"the total number of attribute values must not exceed {MAX_ATTRIBUTE_VALUES}")
            )
    limit = max_devices(obj)
    if len(devices) > limit:
        errs.append(fe.too_many("spec.devices", len(devices), limit))
    for index, device in enumerate(devices):
        if isinstance(device, dict) and isinstance(device.get("name"), str):
            if device["name"] in seen:
                errs.append(fe.duplicate(f"spec.devices[{index}].name", device["name"]))
            seen.add(device["name"])
    return errs


def _attribute_errors(path: str, attribute: Any) -> list[str]:
    if not isinstance(attribute, dict):
        return [fe.invalid(path, attribute, "must be an object")]
    errs = []
    present = [k for k in ("int", "bool", "string", "version") if attribute.get(k) is not None]
    if "int" in present and (not isinstance(attribute["int"], int) or isinstance(attribute["int"], bool)):
        errs.append(fe.invalid(f"{path}.int", attribute["int"], "must be an integer"))
    if "bool" in present and not isinstance(attribute["bool"], bool):
        errs.append(fe.invalid(f"{path}.bool", attribute["bool"], "must be a boolean"))
    if "string" in present:
        value = attribute["string"]
        if not isinstance(value, str):
            errs.append(fe.invalid(f"{path}.string", value, "must be a string"))
        elif len(value.encode()) > 64:
            errs.append(fe.too_long(f"{path}.string", 64))
    if "version" in present:
        value = attribute["version"]
        if not isinstance(value, str) or not SEMVER.match(value):
            errs.append(fe.invalid(f"{path}.version", value, "must be a string compatible with semver.org spec 2.0.0"))
        elif len(value) > 64:
            errs.append(fe.too_long(f"{path}.version", 64))
    lists, list_errs = list_value_errors(path, attribute)
    errs.extend(list_errs)
    if not present and not lists:
        errs.append(fe.required(path, "exactly one value must be specified"))
    elif len(present) + lists > 1:
        errs.append(fe.invalid(path, attribute, "exactly one value must be specified"))
    return errs


def _drop_disabled(new: Obj, old: Obj | None, gates: FeatureGates) -> None:
    """Decoding first (a capacity quantity that does not parse is a 400; defaults such as a
    taint's ``timeAdded``), then the strategy's ``dropDisabledFields`` (resourceslice/strategy.go;
    ``PrepareForCreate``/``PrepareForUpdate``)."""
    decode_slice_capacities(new)
    default_taint_times(new)
    drop_taint_fields(new, old, gates)
    drop_slice_fields(new, old, gates)
    drop_list_attributes(new, old, gates)


def _prepare_create(obj: Obj) -> tuple[Obj, list[str]]:
    return obj, validate_slice(obj)


def _prepare_update(new: Obj, current: Obj) -> tuple[Obj, list[str]]:
    return new, validate_slice(new, current)


KIND = Kind(SLICES, _prepare_create, _prepare_update, drop_disabled=_drop_disabled)


class SliceHelpers:
    """``FakeApiServer``'s ResourceSlice helpers (direct, not over HTTP)."""

    _store: Store

    def create_slice(self, obj: Obj) -> Obj:
        """Store a ResourceSlice (validated like a create over HTTP)."""
        with self._store.lock:
            return crud.create(self._store, KIND, "", copy.deepcopy(obj), ("test", "Update", ""))

    def get_slice(self, name: str) -> Obj | None:
        return self._store.copy_of("resourceslices", "", name)

    def list_slices(self, node: str | None = None, driver: str | None = None) -> list[Obj]:
        return [
            obj
            for obj in self._store.copies("resourceslices")
            if (node is None or (obj.get("spec") or {}).get("nodeName") == node)
            and (driver is None or (obj.get("spec") or {}).get("driver") == driver)
        ]

    def delete_all_slices(self, node: str | None = None, driver: str | None = None) -> int:
        """Delete slices (of ``node``/``driver`` when given), as kubelet does at start; DELETED events."""
        with self._store.lock:
            victims = [s["metadata"]["name"] for s in self.list_slices(node=node, driver=driver)]
            for name in victims:
                self._store.remove("resourceslices", "", name)
            return len(victims)
