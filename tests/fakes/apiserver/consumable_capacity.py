"""Consumable capacity (KEP-5075, gate ``DRAConsumableCapacity``): what the API server drops
while the gate is off, and how it validates the fields while they are kept.

Dropped silently (no error, no warning) unless the old object already uses the feature, so that
an object written while the gate was on keeps its fields through later writes:

- ResourceSlice ``spec.devices[].allowMultipleAllocations`` and
  ``spec.devices[].capacity[*].requestPolicy`` on create and update: k8s
  ``pkg/registry/resource/resourceslice/strategy.go dropDisabledDRAConsumableCapacityFields``
  (in use: ``draConsumableCapacityFeatureInUse``).  ``sharedCounters``/``consumesCounters``
  belong to another gate (DRAPartitionableDevices) and are left alone.
- ResourceClaim ``spec.devices.constraints[].distinctAttribute``,
  ``spec.devices.requests[].exactly.capacity`` and ``.firstAvailable[].capacity`` on create and
  update: k8s ``pkg/api/resourceclaimspec/util.go
  dropDisabledDRAResourceClaimConsumableCapacityFields`` (in use:
  ``DRAConsumableCapacityFeatureInUse``, the old spec only).
- ResourceClaim ``status.allocation.devices.results[].shareID`` and ``.consumedCapacity`` and
  ``status.devices[].shareID`` on status writes: k8s
  ``pkg/registry/resource/resourceclaim/strategy.go
  dropDisabledDRAResourceClaimConsumableCapacityStatusFields`` (in use:
  ``draConsumableCapacityFeatureInUse``: the old claim's spec, allocation results or status
  entries).

Validation (k8s ``pkg/apis/resource/validation/validation.go``): a device's capacity may carry a
``requestPolicy`` only when ``allowMultipleAllocations`` is true
(``validateSingleAllocatableDeviceCapacity``), and the policy must hold together
(``validateMultiAllocatableDeviceCapacity``, ``validateRequestPolicy``,
``validateValidRequestValues``, ``validateRequestPolicyValidValues``,
``validateRequestPolicyRange``, ``validateRequestPolicyRangeStep``); a new allocation's
``shareID`` must be a UUID in normalized form (``validateDeviceRequestAllocationResult``,
``validateUID``).  ``status.devices[].shareID`` is checked by the shared ``validateDeviceStatus``
rules (``claim_status.validate_device_status``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from . import field as fe
from .errors import ApiStatusError, bad_request
from .features import DRA_CONSUMABLE_CAPACITY, FeatureGates
from .quantity import Quantity, QuantityError, canonical, decode
from .resources import Obj

#: ``resource.CapacityRequestPolicyDiscreteMaxOptions``.
VALID_VALUES_MAX = 10
_HEX = re.compile(r"^[0-9a-fA-F]{2}$")


def _present(obj: Any, key: str) -> bool:
    """A Go pointer, slice or map field that is not nil: the key is there and not null."""
    return isinstance(obj, dict) and obj.get(key) is not None


def _dicts(value: Any) -> list[Obj]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


# -- ResourceSlices ---------------------------------------------------------------------------------
def _slice_devices(obj: Obj | None) -> list[Obj]:
    spec = (obj or {}).get("spec")
    return _dicts(spec.get("devices")) if isinstance(spec, dict) else []


def _capacities(device: Obj) -> list[Obj]:
    capacity = device.get("capacity")
    return [c for c in capacity.values() if isinstance(c, dict)] if isinstance(capacity, dict) else []


def slice_in_use(obj: Obj | None) -> bool:
    """resourceslice ``draConsumableCapacityFeatureInUse``."""
    return any(
        _present(device, "allowMultipleAllocations") or any(_present(c, "requestPolicy") for c in _capacities(device))
        for device in _slice_devices(obj)
    )


def drop_slice_fields(new: Obj, old: Obj | None, gates: FeatureGates) -> None:
    """resourceslice ``dropDisabledDRAConsumableCapacityFields``."""
    if gates.enabled(DRA_CONSUMABLE_CAPACITY) or slice_in_use(old):
        return
    for device in _slice_devices(new):
        device.pop("allowMultipleAllocations", None)
        for capacity in _capacities(device):
            capacity.pop("requestPolicy", None)


# -- ResourceClaim spec -----------------------------------------------------------------------------
def _devices_claim(spec: Any) -> Obj:
    devices = spec.get("devices") if isinstance(spec, dict) else None
    return devices if isinstance(devices, dict) else {}


def claim_spec_in_use(spec: Any) -> bool:
    """resourceclaimspec ``DRAConsumableCapacityFeatureInUse``."""
    devices = _devices_claim(spec)
    if any(_present(c, "distinctAttribute") for c in _dicts(devices.get("constraints"))):
        return True
    for request in _dicts(devices.get("requests")):
        if _present(request.get("exactly"), "capacity"):
            return True
        if any(_present(sub, "capacity") for sub in _dicts(request.get("firstAvailable"))):
            return True
    return False


def drop_claim_spec_fields(new_spec: Any, old_spec: Any, gates: FeatureGates) -> None:
    """resourceclaimspec ``dropDisabledDRAResourceClaimConsumableCapacityFields`` (the same for
    ResourceClaimTemplates' ``spec.spec``)."""
    if gates.enabled(DRA_CONSUMABLE_CAPACITY) or claim_spec_in_use(old_spec):
        return
    devices = _devices_claim(new_spec)
    for constraint in _dicts(devices.get("constraints")):
        constraint.pop("distinctAttribute", None)
    for request in _dicts(devices.get("requests")):
        exactly = request.get("exactly")
        if isinstance(exactly, dict):
            exactly.pop("capacity", None)
        for sub in _dicts(request.get("firstAvailable")):
            sub.pop("capacity", None)


# -- ResourceClaim status ---------------------------------------------------------------------------
def _results(status: Any) -> list[Obj]:
    allocation = status.get("allocation") if isinstance(status, dict) else None
    devices = allocation.get("devices") if isinstance(allocation, dict) else None
    return _dicts(devices.get("results")) if isinstance(devices, dict) else []


def claim_in_use(claim: Obj | None) -> bool:
    """resourceclaim ``draConsumableCapacityFeatureInUse``."""
    if claim is None:
        return False
    if claim_spec_in_use(claim.get("spec")):
        return True
    status = claim.get("status") or {}
    if any(_present(r, "shareID") or _present(r, "consumedCapacity") for r in _results(status)):
        return True
    return any(_present(entry, "shareID") for entry in _dicts(status.get("devices")))


def drop_claim_status_fields(new_status: Obj, old: Obj | None, gates: FeatureGates) -> None:
    """resourceclaim ``dropDisabledDRAResourceClaimConsumableCapacityStatusFields`` (``old``: the
    stored claim; the new claim has its spec)."""
    if gates.enabled(DRA_CONSUMABLE_CAPACITY) or claim_in_use(old):
        return
    for result in _results(new_status):
        result.pop("shareID", None)
        result.pop("consumedCapacity", None)
    for entry in _dicts(new_status.get("devices")):
        entry.pop("shareID", None)


# -- decoding ---------------------------------------------------------------------------------------
def _undecodable(kind: str, detail: str) -> ApiStatusError:
    """400, as the server answers a body its JSON decoder refuses."""
    return bad_request(f'{kind} in version "v1" cannot be handled as a {kind}: {detail}')


def _quantity(value: Any, kind: str) -> Quantity:
    try:
        return decode(value)
    except QuantityError as exc:
        raise _undecodable(kind, str(exc)) from None


def decode_slice_capacities(obj: Obj, kind: str = "ResourceSlice") -> None:
    """Every capacity Quantity of a slice must decode (400 otherwise), the request policy must
    have the shape of ``CapacityRequestPolicy``; then each Quantity is re-encoded in canonical
    form, as the server's round trip through Go types does."""
    for device in _slice_devices(obj):
        for capacity in _capacities(device):
            if capacity.get("value") not in (None, ""):
                capacity["value"] = canonical(_quantity(capacity["value"], kind))
            policy = capacity.get("requestPolicy")
            if policy is None:
                continue
            if not isinstance(policy, dict):
                raise _undecodable(kind, "requestPolicy: expected an object")
            if policy.get("validValues") is not None and not isinstance(policy["validValues"], list):
                raise _undecodable(kind, "requestPolicy.validValues: expected a list")
            if policy.get("validRange") is not None and not isinstance(policy["validRange"], dict):
                raise _undecodable(kind, "requestPolicy.validRange: expected an object")
            if isinstance(policy.get("validValues"), list):
                policy["validValues"] = [canonical(_quantity(v, kind)) for v in policy["validValues"]]
            _canonical_fields(policy, ("default",), kind)
            _canonical_fields(policy.get("validRange") or {}, ("min", "max", "step"), kind)


def _canonical_fields(container: Obj, keys: tuple[str, ...], kind: str) -> None:
    for key in keys:
        if container.get(key) is not None:
            container[key] = canonical(_quantity(container[key], kind))


# -- validation -------------------------------------------------------------------------------------
def capacity_errors(path: str, capacity: Obj, allow_multiple: bool) -> list[str]:
    """``validateMultiAllocatableDeviceCapacity`` / ``validateSingleAllocatableDeviceCapacity``
    for one (decoded) capacity at ``path``."""
    policy = capacity.get("requestPolicy")
    if policy is None:
        return []
    if not allow_multiple:
        return [fe.forbidden(f"{path}.requestPolicy", "allowMultipleAllocations must be true")]
    return request_policy_errors(decode(capacity.get("value") or "0"), policy, f"{path}.requestPolicy")


def _opt(value: Any) -> Quantity | None:
    return decode(value) if value is not None else None


def request_policy_errors(max_capacity: Quantity, policy: Obj, path: str) -> list[str]:
    """``validateRequestPolicy`` and ``validateValidRequestValues``."""
    values = [decode(v) for v in policy.get("validValues") or []]
    valid_range = policy.get("validRange")
    default = _opt(policy.get("default"))
    if values and valid_range is not None:
        return [
            fe.forbidden(
                path,
                'exactly one policy can be specified, cannot specify "validValues" and "validRange" at the same time',
            )
        ]
    if values:
        if default is None:
            return [fe.required(f"{path}.default", "required when validValues is defined")]
        return valid_values_errors(default, max_capacity, values, f"{path}.validValues")
    if valid_range is not None:
        if default is None:
            return [fe.required(f"{path}.default", "required when validRange is defined")]
        return range_errors(default, max_capacity, valid_range, f"{path}.validRange")
    return []


def valid_values_errors(default: Quantity, max_capacity: Quantity, values: list[Quantity], path: str) -> list[str]:
    """``validateRequestPolicyValidValues``: ascending, at most 10, none above the capacity, no
    two with the same integer value, the default among them."""
    errs = [
        fe.invalid(f"{path}[{i + 1}]", str(values[i + 1]), "values must be sorted in ascending order")
        for i in range(len(values) - 1)
        if values[i].cmp(values[i + 1]) > 0
    ]
    found_default = False
    if len(values) > VALID_VALUES_MAX:  # validateSet: the size check short-circuits
        errs.append(fe.too_many(path, len(values), VALID_VALUES_MAX))
    else:
        for i, option in enumerate(values):
            if option.cmp(max_capacity) > 0:
                errs.append(
                    fe.invalid(f"{path}[{i}]", str(option), f"option is larger than capacity value: {max_capacity}")
                )
            if option.cmp(default) == 0:
                found_default = True
        seen: set[str] = set()
        for i, option in enumerate(values):
            key = str(option.int_value())  # quantityKey
            if key in seen:
                errs.append(fe.duplicate(f"{path}[{i}]", key))
            seen.add(key)
    if not found_default:
        errs.append(fe.invalid(path, str(default), "default value is not valid according to the requestPolicy"))
    return errs


def range_errors(default: Quantity, max_capacity: Quantity, valid_range: Obj, path: str) -> list[str]:
    """``validateRequestPolicyRange``."""
    low, high, step = (_opt(valid_range.get(k)) for k in ("min", "max", "step"))
    if low is None:
        return [fe.required(f"{path}.min", "required when validRange is defined")]
    errs = []
    if low.cmp(max_capacity) > 0:
        errs.append(fe.invalid(f"{path}.min", str(low), f"min is larger than capacity value: {max_capacity}"))
    if default.cmp(low) < 0:
        errs.append(fe.invalid(f"{path}.min", str(default), f"default is less than min: {low}"))
    if high is not None:
        if low.cmp(high) > 0:
            errs.append(fe.invalid(f"{path}.max", str(low), f"min is larger than max: {high}"))
        if high.cmp(max_capacity) > 0:
            errs.append(fe.invalid(f"{path}.max", str(high), f"max is larger than capacity value: {max_capacity}"))
        if default.cmp(high) > 0:
            errs.append(fe.invalid(f"{path}.max", str(default), f"default is more than max: {high}"))
    if step is not None:
        added = low.add(step)
        if added.cmp(max_capacity) > 0:
            errs.append(
                fe.invalid(f"{path}.step", str(step), f"one step {added} is larger than capacity value: {max_capacity}")
            )
        errs.extend(_step_errors(default, low, step, f"{path}.step"))
        if high is not None:
            errs.extend(_step_errors(high, low, step, f"{path}.step"))
    return errs


def _step_errors(value: Quantity, low: Quantity, step: Quantity, path: str) -> list[str]:
    """``validateRequestPolicyRangeStep``: ``value - min`` a multiple of ``step`` (integer values).

    A step whose integer value is 0 makes upstream divide by zero; the fake reports nothing."""
    step_value = step.int_value()
    if step_value == 0 or (value.int_value() - low.int_value()) % step_value == 0:
        return []
    return [fe.invalid(path, str(value), f"value is not a multiple of a given step ({step}) from ({low})")]


def uid_errors(path: str, value: Any) -> list[str]:
    """``validateUID``: github.com/google/uuid ``Validate``, then the normalized form."""
    uid = value if isinstance(value, str) else str(value)
    problem = _uuid_problem(uid)
    if problem:
        return [fe.invalid(path, uid, f"error validating uid: {problem}")]
    if len(uid) != 36 or uid != uid.lower():
        return [
            fe.invalid(
                path,
                uid,
                "uid must be in RFC 4122 normalized form, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` "
                "with lowercase hexadecimal characters",
            )
        ]
    return []


def _uuid_problem(text: str) -> str:
    """google/uuid ``Validate``: the 36-character form, ``urn:uuid:`` + it, ``{`` it ``}``, or 32
    hex digits."""
    if len(text) == 32:
        return "" if all(_HEX.match(text[i : i + 2]) for i in range(0, 32, 2)) else "invalid UUID format"
    if len(text) == 45:
        if text[:9].lower() != "urn:uuid:":
            return f"invalid urn prefix: {json.dumps(text[:9])}"
        text = text[9:]
    elif len(text) == 38:
        if text[0] != "{" or text[-1] != "}":
            return "invalid bracketed UUID format"
        text = text[1:-1]
    elif len(text) != 36:
        return f"invalid UUID length: {len(text)}"
    if any(text[i] != "-" for i in (8, 13, 18, 23)):
        return "invalid UUID format"
    pairs = (0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34)
    return "" if all(_HEX.match(text[i : i + 2]) for i in pairs) else "invalid UUID format"


def allocation_errors(status: Obj, path: str = "status.allocation.devices.results") -> list[str]:
    """The ``shareID`` rule of ``validateDeviceRequestAllocationResult`` for a new allocation."""
    errs: list[str] = []
    for i, result in enumerate(_results(status)):
        if result.get("shareID") is not None:
            errs.extend(uid_errors(f"{path}[{i}].shareID", result["shareID"]))
    return errs
