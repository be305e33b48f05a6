"""Device taints in ResourceSlices (KEP-5055, gate ``DRADeviceTaints``): defaulting, validation,
the device limit they bring, and what the server drops while the gate is off.

- Decoding and defaulting (before the strategy runs, gate or no gate): ``timeAdded`` is a
  ``metav1.Time``, read as RFC 3339 and stored as UTC seconds (``UnmarshalJSON``/``MarshalJSON``
  in apimachinery ``pkg/apis/meta/v1/time.go``: a client's ``+00:00`` comes back as ``Z``); a
  taint without it gets the current time, truncated to seconds: k8s
  ``pkg/apis/resource/v1/defaults.go SetDefaults_DeviceTaint``.
- Dropped silently on create and update while the gate is off, unless the old slice already
  has a device with taints: k8s ``pkg/registry/resource/resourceslice/strategy.go
  dropDisabledDRADeviceTaintsFields`` (in use: ``draDeviceTaintsFeatureInUse``).
- Validation (k8s ``pkg/apis/resource/validation/validation.go``): a device's taints are checked
  only when they differ from the old device of the same name (``validateDevice``,
  ``lookupDevice``), at most ``DeviceTaintsMaxLength`` = 16 (``validateSlice``: TooMany), each
  by ``validateDeviceTaint``: ``key`` a label name (``metav1validation.ValidateLabelName``, i.e.
  ``IsQualifiedName``), ``value`` a label value when not empty (``validateLabelValue``,
  ``IsValidLabelValue``), ``effect`` required and one of None, NoExecute, NoSchedule
  (``validDeviceTaintEffects``; NotSupported).
- A slice with any tainted device (or any device consuming counters) holds at most 64 devices
  instead of 128 (``validateResourceSliceSpec``: ``haveDeviceTaints``, ``haveConsumesCounters``,
  ``ResourceSliceMaxDevicesWithTaintsOrConsumesCounters``).
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Any

from . import field as fe
from .features import DRA_DEVICE_TAINTS, FeatureGates
from .names import DNS_SUBDOMAIN, SUBDOMAIN_MSG
from .resources import Obj

#: ``resource.DeviceTaintsMaxLength``.
TAINTS_MAX = 16
#: ``resource.ResourceSliceMaxDevices`` and ``ResourceSliceMaxDevicesWithTaintsOrConsumesCounters``.
MAX_DEVICES = 128
MAX_DEVICES_WITH_TAINTS = 64
#: ``validDeviceTaintEffects``, sorted as ``sets.List`` prints them.
EFFECTS = ("NoExecute", "NoSchedule", "None")

# apimachinery pkg/util/validation/validation.go: qualifiedNameFmt, labelValueFmt and their messages.
_QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_QUALIFIED_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation "
    "is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def _devices(obj: Obj | None) -> list[Obj]:
    spec = (obj or {}).get("spec")
    devices = spec.get("devices") if isinstance(spec, dict) else None
    return [d for d in devices if isinstance(d, dict)] if isinstance(devices, list) else []


def _taints(device: Obj) -> list[Any]:
    taints = device.get("taints")
    return taints if isinstance(taints, list) else []


# -- defaulting and dropping -------------------------------------------------------------------------
def _metav1_time(value: Any) -> Any:
    """``metav1.Time`` through JSON: RFC 3339 in, UTC seconds with ``Z`` out; what does not parse
    is left for the request to fail on elsewhere (the real server answers 400)."""
    if not isinstance(value, str):
        return value
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return value
    if parsed.tzinfo is None:
        return value
    return parsed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def default_taint_times(obj: Obj) -> None:
    """Decode ``timeAdded``; ``SetDefaults_DeviceTaint``: now (seconds) where it is not set."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for device in _devices(obj):
        for taint in _taints(device):
            if isinstance(taint, dict):
                taint["timeAdded"] = now if taint.get("timeAdded") is None else _metav1_time(taint["timeAdded"])


def taints_in_use(obj: Obj | None) -> bool:
    """``draDeviceTaintsFeatureInUse`` (also ``haveDeviceTaints`` of the validation)."""
    return any(_taints(device) for device in _devices(obj))


def drop_taint_fields(new: Obj, old: Obj | None, gates: FeatureGates) -> None:
    """``dropDisabledDRADeviceTaintsFields``."""
    if gates.enabled(DRA_DEVICE_TAINTS) or taints_in_use(old):
        return
    for device in _devices(new):
        device.pop("taints", None)


# -- validation --------------------------------------------------------------------------------------
def max_devices(obj: Obj) -> int:
    """The device limit of a slice: 64 once a device has taints or consumes counters."""
    counters = any(device.get("consumesCounters") for device in _devices(obj))
    return MAX_DEVICES_WITH_TAINTS if taints_in_use(obj) or counters else MAX_DEVICES


def _label_name_messages(value: str) -> list[str]:
    """``IsQualifiedName``."""
    parts = value.split("/")
    msgs: list[str] = []
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            msgs.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:  # IsDNS1123Subdomain
                msgs.append("prefix part must be no more than 253 characters")
            if not DNS_SUBDOMAIN.match(prefix):
                msgs.append("prefix part " + SUBDOMAIN_MSG)
    else:
        return [
            "a qualified name " + _QUALIFIED_MSG + " with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
    if not name:
        msgs.append("name part must be non-empty")
    elif len(name) > 63:
        msgs.append("name part must be no more than 63 characters")
    if not _QUALIFIED.match(name):
        msgs.append("name part " + _QUALIFIED_MSG)
    return msgs


def _label_value_messages(value: str) -> list[str]:
    """``IsValidLabelValue``."""
    msgs = []
    if len(value) > 63:
        msgs.append("must be no more than 63 characters")
    if not _LABEL_VALUE.match(value):
        msgs.append(_LABEL_VALUE_MSG)
    return msgs


def taint_errors(path: str, taint: Any) -> list[str]:
    """``validateDeviceTaint`` (no old taint: a slice's taints are validated as new)."""
    if not isinstance(taint, dict):
        return [fe.invalid(path, "<value omitted>", "must be an object")]
    errs = []
    key = taint.get("key") if isinstance(taint.get("key"), str) else ""
    errs.extend(fe.invalid(f"{path}.key", key, msg) for msg in _label_name_messages(key))
    value = taint.get("value")
    if isinstance(value, str) and value:
        errs.extend(fe.invalid(f"{path}.value", value, msg) for msg in _label_value_messages(value))
    effect = taint.get("effect")
    if not effect:
        errs.append(fe.required(f"{path}.effect"))
    elif effect not in EFFECTS:
        errs.append(fe.not_supported(f"{path}.effect", effect, EFFECTS))
    return errs


def device_taint_errors(path: str, device: Obj, old: Obj | None) -> list[str]:
    """``validateDevice``'s taint part: skipped when the device's taints are those of the old
    slice's device of the same name (``lookupDevice``)."""
    taints = device.get("taints")
    if old is not None:
        previous = next((d for d in _devices(old) if d.get("name") == device.get("name")), None)
        if previous is not None and previous.get("taints") == taints:
            return []
    if taints is None:
        return []
    if not isinstance(taints, list):
        return [fe.invalid(f"{path}.taints", "<value omitted>", "must be a list")]
    errs = [e for index, taint in enumerate(taints) for e in taint_errors(f"{path}.taints[{index}]", taint)]
    if len(taints) > TAINTS_MAX:  # validateSlice: the items, then the size
        errs.append(fe.too_many(f"{path}.taints", len(taints), TAINTS_MAX))
    return errs
