"""List-type device attributes in ResourceSlices (KEP-5491, gate ``DRAListTypeAttributes``):
``bools``, ``ints``, ``strings`` and ``versions`` beside the scalar ``bool``, ``int``, ``string``
and ``version`` of a ``DeviceAttribute``.

The gate is alpha and off from 1.36 and still alpha and off in 1.37 (k8s
``pkg/features/versioned_kube_features.go``, ``DRAListTypeAttributes``: one spec, 1.36 alpha).
What the server does with them, from k8s at the newest stored version:

- Dropped silently on create and update while the gate is off, unless the old slice already has
  an attribute in list form: ``pkg/registry/resource/resourceslice/strategy.go
  dropDisableDRAListTypeAttributesFields`` (in use: ``draListTypeAttributesFeatureInUse``).  An
  attribute that held only a list is left with no value and then fails validation ("exactly one
  value must be specified"): the upstream helper's note on this is
  ``staging/src/k8s.io/dynamic-resource-allocation/deviceattribute/numa_linux.go
  GetNUMANodeAttributeByPCIBusID`` ("the apiserver drops the list value and rejects the
  resulting value-less attribute").
- Validation (``pkg/apis/resource/validation/validation.go validateDeviceAttribute``): a list
  counts as one of the attribute's values (exactly one of the eight may be set); a list that is
  given must not be empty ("must not be empty if specified"); each string of ``strings`` at most
  64 bytes, each version of ``versions`` semver and at most 64 characters.
- A device holds at most 48 attribute values, counting each item of a list and each scalar as
  one (``validateDevice``, ``numEntriesDeviceAttribute``; ``ResourceSliceMaxAttributeValuesPerDevice``
  in ``staging/src/k8s.io/api/resource/v1/types.go``).  With scalars only the 32 attributes and
  capacities limit comes first.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from . import field as fe
from .features import DRA_LIST_TYPE_ATTRIBUTES, FeatureGates
from .resources import Obj

#: The scalar fields and the list fields of a ``DeviceAttribute`` (JSON names).
SCALAR_FIELDS = ("int", "bool", "string", "version")
LIST_FIELDS = ("ints", "bools", "strings", "versions")
#: ``resource.ResourceSliceMaxAttributeValuesPerDevice``.
MAX_ATTRIBUTE_VALUES = 48
#: ``resource.DeviceAttributeMaxValueLength``.
MAX_VALUE_LENGTH = 64

SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
    r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$"
)


def _attributes(obj: Obj | None) -> Iterator[dict[str, Any]]:
    if not isinstance(obj, dict):
        return
    spec = obj.get("spec")
    devices = spec.get("devices") if isinstance(spec, dict) else None
    for device in devices if isinstance(devices, list) else []:
        attributes = device.get("attributes") if isinstance(device, dict) else None
        if isinstance(attributes, dict):
            yield from (a for a in attributes.values() if isinstance(a, dict))


def list_attributes_in_use(obj: Obj | None) -> bool:
    """``draListTypeAttributesFeatureInUse``: some attribute of the slice has a list set (an
    empty list counts: upstream tests for a non-nil slice)."""
    return any(attribute.get(key) is not None for attribute in _attributes(obj) for key in LIST_FIELDS)


def drop_list_attributes(new: Obj, old: Obj | None, gates: FeatureGates) -> None:
    """``dropDisableDRAListTypeAttributesFields``."""
    if gates.enabled(DRA_LIST_TYPE_ATTRIBUTES) or list_attributes_in_use(old):
        return
    for attribute in _attributes(new):
        for key in LIST_FIELDS:
            attribute.pop(key, None)


def value_count(attributes: dict[str, Any]) -> int:
    """``numEntriesDeviceAttribute``: an attribute without a non-empty list counts once, one with
    lists counts their items."""
    total = 0
    for attribute in attributes.values():
        lists = [attribute.get(k) for k in LIST_FIELDS] if isinstance(attribute, dict) else []
        items = sum(len(v) for v in lists if isinstance(v, list))
        total += items or 1
    return total


def list_value_errors(path: str, attribute: dict[str, Any]) -> tuple[int, list[str]]:
    """The list half of ``validateDeviceAttribute``: (how many list fields are set, errors)."""
    errs: list[str] = []
    present = 0
    for key in LIST_FIELDS:
        values = attribute.get(key)
        if values is None:
            continue
        present += 1
        if not isinstance(values, list):
            errs.append(fe.invalid(f"{path}.{key}", values, "must be a list"))
            continue
        if not values:
            errs.append(fe.invalid(f"{path}.{key}", values, "must not be empty if specified"))
        for index, item in enumerate(values):
            errs.extend(_item_errors(f"{path}.{key}[{index}]", key, item))
    return present, errs


def _item_errors(path: str, key: str, item: Any) -> list[str]:
    if key == "ints" and (not isinstance(item, int) or isinstance(item, bool)):
        return [fe.invalid(path, item, "must be an integer")]
    if key == "bools" and not isinstance(item, bool):
        return [fe.invalid(path, item, "must be a boolean")]
    if key == "strings":
        if not isinstance(item, str):
            return [fe.invalid(path, item, "must be a string")]
        if len(item.encode()) > MAX_VALUE_LENGTH:
            return [fe.too_long(path, MAX_VALUE_LENGTH)]
    if key == "versions":
        errs = []
        if not isinstance(item, str) or not SEMVER.match(item):
            errs.append(fe.invalid(path, item, "must be a string compatible with semver.org spec 2.0.0"))
        if isinstance(item, str) and len(item) > MAX_VALUE_LENGTH:
            errs.append(fe.too_long(path, MAX_VALUE_LENGTH))
        return errs
    return []
