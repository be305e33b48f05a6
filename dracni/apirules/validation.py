"""The Kubernetes API server's validation rules that dracni's objects must pass.

Names (DNS labels and subdomains, qualified names, label values, UUIDs), ``status.devices``
entries (``k8s.io/kubernetes/pkg/apis/resource/validation``: ``validateDeviceStatus``,
``validateNetworkDeviceData``; conditions as ``metav1validation.ValidateConditions``) and the
size limits of those entries and of ResourceSlices.  Messages are Kubernetes field errors
(``<path>: Invalid value: ...``) so that a refusal reads like the API server's 422.  Used by
status, the ResourceSlice builder and the kubelet server.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeGuard

from ..addresses import parse_interface_address
from ..clock import parse_rfc3339, zero_time
from .fielderrors import duplicate as _duplicate
from .fielderrors import invalid as _invalid
from .fielderrors import not_supported as _not_supported
from .fielderrors import quote as _quote
from .fielderrors import required as _required
from .fielderrors import too_long as _too_long
from .fielderrors import too_many as _too_many
from .gojson import go_json_size

# -- API limits (k8s.io/kubernetes/pkg/apis/resource, apimachinery metav1 validation) ----
DATA_MAX_BYTES = 10 * 1024  # AllocatedDeviceStatusDataMaxLength
MAX_CONDITIONS = 8  # AllocatedDeviceStatusMaxConditions
INTERFACE_NAME_MAX = 256  # NetworkDeviceDataInterfaceNameMaxLength
HARDWARE_ADDRESS_MAX = 128  # NetworkDeviceDataHardwareAddressMaxLength
MAX_IPS = 16  # NetworkDeviceDataMaxIPs
REASON_MAX = 1024  # metav1 condition reason
MESSAGE_MAX = 32 * 1024  # metav1 condition message
DRIVER_NAME_MAX = 63
POOL_NAME_MAX = 253
DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
LABEL_VALUE_MAX = 63  # apimachinery validation.LabelValueMaxLength
SLICE_MAX_DEVICES = 128  # ResourceSliceMaxDevices
SLICE_MAX_DEVICES_WITH_TAINTS = 64  # ResourceSliceMaxDevicesWithTaintsOrConsumesCounters
DEVICE_MAX_ATTRIBUTES = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
ATTRIBUTE_VALUE_MAX = 64  # DeviceAttributeMaxValueLength (bytes of a string or version value)


def _is_index(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _blen(value: str) -> int:
    return len(value.encode("utf-8"))


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}'," for e in examples)
    return f"{msg} (e.g. {shown} regex used for validation is '{fmt}')"


_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile(f"^{_DNS1123_LABEL_FMT}$")
_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + r"(\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN = re.compile(f"^{_DNS1123_SUBDOMAIN_FMT}$")
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME = re.compile(f"^{_QUALIFIED_NAME_FMT}$")
_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_REASON_FMT = "[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?"
_REASON = re.compile(f"^{_REASON_FMT}$")
_REASON_MSG = (
    "a condition reason must start with alphabetic character, optionally followed by a string "
    "of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_'"
)
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_CONDITION_STATUSES = ("False", "True", "Unknown")


def is_dns_subdomain(value: str) -> bool:
    """An RFC 1123 subdomain (object names, pool names), at most 253 characters."""
    return 0 < len(value) <= DNS1123_SUBDOMAIN_MAX and bool(_DNS1123_SUBDOMAIN.match(value))


def is_driver_name(value: object) -> bool:
    """A DRA driver name: a DNS subdomain of at most 63 characters (``validateDriverName``)."""
    return isinstance(value, str) and len(value) <= DRIVER_NAME_MAX and is_dns_subdomain(value)


def is_label_value(value: str) -> bool:
    """A label value (``IsValidLabelValue``): empty, or at most 63 alphanumerics, '-', '_' or '.'
    starting and ending with an alphanumeric."""
    return value == "" or (len(value) <= LABEL_VALUE_MAX and bool(_QUALIFIED_NAME.match(value)))


def _dns1123_label(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _DNS1123_LABEL.match(value):
        errs.append(_regex_error(_DNS1123_LABEL_MSG, _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def _dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.match(value):
        errs.append(_regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def _qualified_name(value: str) -> list[str]:
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
        errs: list[str] = []
    elif len(parts) == 2:
        prefix, name = parts
        errs = []
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + e for e in _dns1123_subdomain(prefix))
    else:
        return [
            "a qualified name "
            + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if not _QUALIFIED_NAME.match(name):
        errs.append(
            "name part " + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def _str_field(entry: dict[str, Any], key: str) -> str:
    value = entry.get(key)
    return value if isinstance(value, str) else ""


def device_id(item: dict[str, Any]) -> str:
    """``driver/pool/device`` plus ``/shareID`` when set (structured.SharedDeviceID)."""
    ident = f"{_str_field(item, 'driver')}/{_str_field(item, 'pool')}/{_str_field(item, 'device')}"
    share = item.get("shareID")
    if share:
        ident += f"/{share}"
    return ident


def _validate_names(entry: dict[str, Any], path: str) -> list[str]:
    errs: list[str] = []
    driver = entry.get("driver")
    driver = driver if isinstance(driver, str) else ""
    if not driver:
        errs.append(_required(f"{path}.driver"))
    if len(driver) > DRIVER_NAME_MAX:
        errs.append(_too_long(f"{path}.driver", DRIVER_NAME_MAX))
    errs.extend(_invalid(f"{path}.driver", driver, m) for m in _dns1123_subdomain(driver.lower()))

    pool = entry.get("pool")
    pool = pool if isinstance(pool, str) else ""
    if not pool:
        errs.append(_required(f"{path}.pool"))
    else:
        if len(pool) > POOL_NAME_MAX:
            errs.append(_too_long(f"{path}.pool", POOL_NAME_MAX))
        for part in pool.split("/"):
            errs.extend(_invalid(f"{path}.pool", part, m) for m in _dns1123_subdomain(part))

    device = entry.get("device")
    device = device if isinstance(device, str) else ""
    errs.extend(_invalid(f"{path}.device", device, m) for m in _dns1123_label(device))

    share = entry.get("shareID")
    if share is not None:
        if not isinstance(share, str) or not _UUID.match(share):
            errs.append(_invalid(f"{path}.shareID", share, "error validating uid: invalid UUID format"))
        elif share != share.lower():
            errs.append(
                _invalid(
                    f"{path}.shareID",
                    share,
                    "uid must be in RFC 4122 normalized form, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` "
                    "with lowercase hexadecimal characters",
                )
            )
    return errs


def _optional(value: Any, path: str, kind: type, problem: str, check: Callable[[Any, str], list[str]]) -> list[str]:
    """The rules of an optional field: none when it is absent, ``problem`` when of another JSON type."""
    if value is None:
        return []
    if not isinstance(value, kind):
        return [_invalid(path, value, problem)]
    return check(value, path)


def _validate_conditions(conditions: list[Any], path: str) -> list[str]:
    errs: list[str] = []
    if len(conditions) > MAX_CONDITIONS:
        errs.append(_too_many(path, len(conditions), MAX_CONDITIONS))
    seen: set[str] = set()
    for i, condition in enumerate(conditions):
        item = f"{path}[{i}]"
        if not isinstance(condition, dict):
            errs.append(_invalid(item, condition, "must be a condition object"))
            continue
        ctype = condition.get("type")
        ctype = ctype if isinstance(ctype, str) else ""
        if ctype in seen:
            errs.append(_duplicate(f"{item}.type", ctype))
        seen.add(ctype)
        errs.extend(_invalid(f"{item}.type", ctype, m) for m in _qualified_name(ctype))
        status = condition.get("status")
        if status not in _CONDITION_STATUSES:
            errs.append(_not_supported(f"{item}.status", status if status is not None else "", _CONDITION_STATUSES))
        generation = condition.get("observedGeneration")
        if _is_index(generation) and generation < 0:
            errs.append(_invalid(f"{item}.observedGeneration", generation, "must be greater than or equal to zero"))
        ltt = condition.get("lastTransitionTime")
        if ltt in (None, ""):
            errs.append(_required(f"{item}.lastTransitionTime", "must be set"))
        else:
            moment = parse_rfc3339(ltt)
            if moment is None:
                errs.append(_invalid(f"{item}.lastTransitionTime", ltt, "must be an RFC 3339 date-time"))
            elif moment == zero_time():
                errs.append(_required(f"{item}.lastTransitionTime", "must be set"))
        reason = condition.get("reason")
        reason = reason if isinstance(reason, str) else ""
        if not reason:
            errs.append(_required(f"{item}.reason", "must be set"))
        else:
            if not _REASON.match(reason):
                errs.append(
                    _invalid(
                        f"{item}.reason",
                        reason,
                        _regex_error(
                            _REASON_MSG,
                            _REASON_FMT,
                            "my_name",
                            "MY_NAME",
                            "MyName",
                            "ReasonA,ReasonB",
                            "ReasonA:ReasonB",
                        ),
                    )
                )
            if _blen(reason) > REASON_MAX:
                errs.append(_too_long(f"{item}.reason", REASON_MAX))
        message = condition.get("message")
        if isinstance(message, str) and _blen(message) > MESSAGE_MAX:
            errs.append(_too_long(f"{item}.message", MESSAGE_MAX))
    return errs


def _validate_data(data: Any, path: str) -> list[str]:
    """``validateRawExtension``: the size Go's ``json.Marshal`` gives it (``gojson``), then an object."""
    if data is None:  # optional
        return []
    size = go_json_size(data)
    if size is None:
        return [_invalid(path, "<value omitted>", "error parsing data as JSON")]
    if size > DATA_MAX_BYTES:
        return [_too_long(path, DATA_MAX_BYTES)]
    if not isinstance(data, dict):
        return [_invalid(path, "<value omitted>", "must be a valid JSON object")]
    return []


def _validate_network_data(network: dict[str, Any], path: str) -> list[str]:
    errs: list[str] = []
    name = network.get("interfaceName")
    if isinstance(name, str) and _blen(name) > INTERFACE_NAME_MAX:
        errs.append(_too_long(f"{path}.interfaceName", INTERFACE_NAME_MAX))
    mac = network.get("hardwareAddress")
    if isinstance(mac, str) and _blen(mac) > HARDWARE_ADDRESS_MAX:
        errs.append(_too_long(f"{path}.hardwareAddress", HARDWARE_ADDRESS_MAX))
    ips = network.get("ips")
    if ips is None:
        return errs
    if not isinstance(ips, list):
        errs.append(_invalid(f"{path}.ips", ips, "must be a list of addresses"))
        return errs
    if len(ips) > MAX_IPS:
        # The API server short-circuits on size (DoS protection): no per-item errors.
        errs.append(_too_many(f"{path}.ips", len(ips), MAX_IPS))
        return errs
    seen: set[Any] = set()
    for i, value in enumerate(ips):
        item = f"{path}.ips[{i}]"
        parsed = parse_interface_address(value)
        if parsed is None:
            errs.append(
                _invalid(item, value, "must be a valid address in CIDR form, (e.g. 10.9.8.7/24 or 2001:db8::1/64)")
            )
        elif parsed[0] != value:
            errs.append(_invalid(item, value, f"must be in canonical form ({_quote(parsed[0])})"))
    for i, value in enumerate(ips):
        key = value if isinstance(value, (str, int, float, bool)) or value is None else _quote(value)
        if key in seen:
            errs.append(_duplicate(f"{path}.ips[{i}]", value))
        else:
            seen.add(key)
    return errs


def validate_device_status(
    entry: dict[str, Any],
    allocated_results: list[dict[str, Any]] | None = None,
    path: str = "status.devices[0]",
) -> list[str]:
    """Violations of the API server's rules for one ``status.devices`` entry.

    Messages are Kubernetes field errors (``<path>: Invalid value: "...": ...``).  With
    ``allocated_results`` (``status.allocation.devices.results``), the entry must name one of
    them by driver/pool/device(/shareID).
    """
    if not isinstance(entry, dict):
        return [_invalid(path, entry, "must be an object")]
    errs = _validate_names(entry, path)
    if allocated_results is not None:
        allocated = {device_id(r) for r in allocated_results if isinstance(r, dict)}
        ident = device_id(entry)
        if ident not in allocated:
            errs.append(_invalid(path, ident, "must be an allocated device in the claim"))
    errs.extend(
        _optional(
            entry.get("conditions"), f"{path}.conditions", list, "must be a list of conditions", _validate_conditions
        )
    )
    errs.extend(_validate_data(entry.get("data"), f"{path}.data"))
    errs.extend(
        _optional(entry.get("networkData"), f"{path}.networkData", dict, "must be an object", _validate_network_data)
    )
    return errs


def validate_status_devices(
    devices: list[dict[str, Any]],
    allocated_results: list[dict[str, Any]] | None = None,
    path: str = "status.devices",
) -> list[str]:
    """Violations for a whole ``status.devices`` list: every entry, plus duplicate keys."""
    if not isinstance(devices, list):
        return [_invalid(path, devices, "must be a list")]
    errs: list[str] = []
    seen: set[str] = set()
    for i, entry in enumerate(devices):
        errs.extend(validate_device_status(entry, allocated_results, f"{path}[{i}]"))
    for i, entry in enumerate(devices):
        if not isinstance(entry, dict):
            continue
        ident = device_id(entry)
        if ident in seen:
            errs.append(_duplicate(f"{path}[{i}]", ident))
        seen.add(ident)
    return errs
