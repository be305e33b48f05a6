"""ResourceClaim ``status.devices`` entries (AllocatedDeviceStatus, KEP-4817) from outbox facts.

The CNI plugin writes, per claim, the full desired set of *device facts* into the state
directory's StatusOutbox record (``spec/state-records.schema.json``).  This module turns them
into the camelCase API form of ``status.devices[]`` and checks entries against the API
server's validation rules (``CONTRACTS.md`` section 3), with messages formatted like
Kubernetes field errors so that a test API server can answer 422 with them.

Imports stay light (``ipaddress``, ``re``, ``datetime``, ``orjson``): the status publisher
may run next to the CNI hot path.
"""

from __future__ import annotations

import ipaddress
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson

from .fielderrors import (duplicate as _duplicate, invalid as _invalid, not_supported as _not_supported,
                          quote as _quote, required as _required, too_long as _too_long, too_many as _too_many)

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

READY = "Ready"
REASON_READY = "NetworkInterfaceReady"
REASON_NOT_READY = "NetworkInterfaceNotReady"
#: A persistent attachment whose pod is gone: the entry keeps its addresses for the next pod.
REASON_DETACHED = "Detached"

Entry = dict[str, Any]


# -- time --------------------------------------------------------------------------------
_RFC3339 = re.compile(
    r"^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)
_ZERO_TIME = datetime(1, 1, 1, tzinfo=timezone.utc)


def parse_rfc3339(value: Any) -> datetime | None:
    """Parse an RFC 3339 timestamp (any fractional precision, ``Z`` or an offset) to UTC."""
    if not isinstance(value, str):
        return None
    m = _RFC3339.match(value)
    if not m:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    frac, zone = m.group(7), m.group(8)
    try:
        if zone in ("Z", "z"):
            tz = timezone.utc
        else:
            sign = 1 if zone[0] == "+" else -1
            hours, minutes = int(zone[1:3]), int(zone[4:6])
            if hours > 23 or minutes > 59:
                return None
            tz = timezone(sign * timedelta(hours=hours, minutes=minutes))
        micro = int((frac or "0")[:6].ljust(6, "0"))
        parsed = datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)
    except ValueError:
        return None
    try:
        return parsed.astimezone(timezone.utc)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00
        return None


def format_rfc3339(moment: datetime) -> str:
    """``metav1.Time`` form: seconds precision, UTC, ``Z``."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def normalize_time(value: Any) -> str:
    """``value`` as an RFC 3339 seconds-precision UTC time; now when it is missing or bad."""
    parsed = parse_rfc3339(value)
    if parsed is None or parsed == _ZERO_TIME:
        parsed = datetime.now(timezone.utc)
    return format_rfc3339(parsed)


# -- addresses ---------------------------------------------------------------------------
_IPV4_SLOPPY = re.compile(r"^([0-9]+)\.([0-9]+)\.([0-9]+)\.([0-9]+)$")


def _parse_interface_address(value: Any) -> tuple[str, str] | None:
    """Parse an "ifaddr" CIDR value like Go's ``netutils.ParseCIDRSloppy``.

    Returns ``(canonical, family)`` where canonical is the form the API server demands
    (``ip.String()/prefix``, so ``10.0.0.5/24``, ``fd00::5/64``), or None when the value is
    not an address in CIDR form at all.
    """
    if not isinstance(value, str) or value.count("/") != 1:
        return None
    addr, prefix = value.split("/")
    if not prefix or not prefix.isascii() or not prefix.isdigit() or "%" in addr:
        return None
    bits = int(prefix)
    m = _IPV4_SLOPPY.match(addr)
    if m:
        # ParseCIDRSloppy accepts leading zeros in IPv4 octets (as decimal).
        octets = [int(o) for o in m.groups()]
        if any(o > 255 for o in octets) or bits > 32:
            return None
        return f"{'.'.join(map(str, octets))}/{bits}", "ipv4"
    if ":" not in addr:
        return None
    try:
        ip6 = ipaddress.IPv6Address(addr)
    except ValueError:
        return None
    if bits > 128:
        return None
    mapped = ip6.ipv4_mapped
    if mapped is not None:
        # Go treats a v4-mapped address as IPv4 and prints it dotted; its 128-bit mask
        # loses 96 bits (e.g. ::ffff:10.0.0.1/120 -> 10.0.0.1/24).
        if bits > 32:
            bits -= 96
        return f"{mapped}/{bits}", "ipv4"
    return f"{ip6.compressed}/{bits}", "ipv6"


def canonical_interface_address(value: Any) -> str | None:
    """Canonical CIDR interface address (``10.0.0.5/24``, ``fd00::5/64``), or None if invalid."""
    parsed = _parse_interface_address(value)
    if parsed is None:
        return None
    canonical, family = parsed
    prefix = int(canonical.rsplit("/", 1)[1])  # may be negative: ::ffff:a.b.c.d/64
    if not 0 <= prefix <= (32 if family == "ipv4" else 128):
        return None
    return canonical


# -- building entries --------------------------------------------------------------------
def _utf8_truncate(text: str, limit: int) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    return raw[:limit].decode("utf-8", "ignore")


def _json_size(value: Any) -> int | None:
    try:
        return len(orjson.dumps(value))
    except (orjson.JSONEncodeError, TypeError):
        return None


def _attachment_index(result: Any, if_name: str) -> int | None:
    """Index of the attachment's interface in a CNI result's ``interfaces``.

    The interface named ``if_name`` inside a sandbox; failing that, any interface of that name.
    """
    if not isinstance(result, dict):
        return None
    interfaces = result.get("interfaces")
    if not isinstance(interfaces, list):
        return None
    fallback = None
    for index, iface in enumerate(interfaces):
        if isinstance(iface, dict) and iface.get("name") == if_name:
            if iface.get("sandbox"):
                return index
            if fallback is None:
                fallback = index
    return fallback


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _attachment_ips(result: Any, index: int | None) -> list[str]:
    """Canonical, de-duplicated addresses of the attachment's interface (at most 16)."""
    if not isinstance(result, dict) or not isinstance(result.get("ips"), list):
        return []
    out: list[str] = []
    for ip in result["ips"]:
        if not isinstance(ip, dict):
            continue
        if "interface" in ip and ip["interface"] is not None:
            if index is None or not _is_index(ip["interface"]) or ip["interface"] != index:
                continue
        canonical = canonical_interface_address(ip.get("address"))
        if canonical is None or canonical in out:
            continue
        out.append(canonical)
        if len(out) == MAX_IPS:
            break
    return out


def _strip_sandbox(result: dict) -> dict:
    data = dict(result)
    if isinstance(data.get("interfaces"), list):
        data["interfaces"] = [
            {k: v for k, v in iface.items() if k != "sandbox"} if isinstance(iface, dict) else iface
            for iface in data["interfaces"]
        ]
    return data


def _only_attachment_interface(data: dict, index: int | None) -> dict:
    """Keep only the attachment's interface; re-point or drop the ips that referenced others."""
    data = dict(data)
    interfaces = data.get("interfaces")
    if isinstance(interfaces, list) and index is not None and index < len(interfaces):
        data["interfaces"] = [interfaces[index]]
        keep = index
    else:
        data.pop("interfaces", None)
        keep = None
    if isinstance(data.get("ips"), list):
        ips = []
        for ip in data["ips"]:
            if not isinstance(ip, dict):
                continue
            if "interface" not in ip or ip["interface"] is None:
                ips.append(ip)
            elif keep is not None and _is_index(ip["interface"]) and ip["interface"] == keep:
                ips.append({**ip, "interface": 0})
        data["ips"] = ips
    return data


def _fit_data(result: Any, index: int | None) -> dict | None:
    """The CNI result as ``data``: no sandbox paths, at most 10 KiB of JSON, else None."""
    if not isinstance(result, dict):
        return None
    data = _strip_sandbox(result)

    def fits(candidate: dict) -> bool:
        size = _json_size(candidate)
        return size is not None and size <= DATA_MAX_BYTES

    if fits(data):
        return data
    for key in ("dns", "routes"):
        if key in data:
            data = {k: v for k, v in data.items() if k != key}
            if fits(data):
                return data
    data = _only_attachment_interface(data, index)
    if fits(data):
        return data
    return None


def _error_message(error: Any, if_name: str) -> str:
    if not isinstance(error, dict):
        return f"{if_name} not configured"
    msg = error.get("msg") or ""
    if not isinstance(msg, str):
        msg = str(msg)
    if not msg:
        code = error.get("code")
        msg = f"CNI error code {code}" if code is not None else f"{if_name} not configured"
    details = error.get("details")
    if details:
        msg = f"{msg}: {details}"
    return msg


def device_status_entry(fact: dict, *, driver: str) -> Entry:
    """One AllocatedDeviceStatus entry (camelCase API form) from an outbox device fact."""
    if_name = fact.get("ifName") or ""
    ready = bool(fact.get("ready"))
    result = fact.get("result")
    entry: Entry = {"driver": driver, "pool": fact["pool"], "device": fact["device"]}
    if fact.get("shareID"):
        entry["shareID"] = fact["shareID"]

    if ready:
        condition = {
            "type": READY,
            "status": "True",
            "reason": REASON_READY,
            "message": f"{if_name} configured",
        }
    elif fact.get("detached"):
        condition = {
            "type": READY,
            "status": "False",
            "reason": REASON_DETACHED,
            "message": f"{if_name} was removed with its pod; its addresses are kept for the next pod of this claim",
        }
    else:
        condition = {
            "type": READY,
            "status": "False",
            "reason": REASON_NOT_READY,
            "message": _error_message(fact.get("error"), if_name),
        }
    condition["message"] = _utf8_truncate(condition["message"], MESSAGE_MAX)
    condition["lastTransitionTime"] = normalize_time(fact.get("updatedAt"))
    entry["conditions"] = [condition]

    index = _attachment_index(result, if_name)
    data = _fit_data(result, index)
    if data is not None:
        entry["data"] = data

    network: dict[str, Any] = {}
    if if_name and len(if_name.encode("utf-8")) <= INTERFACE_NAME_MAX:
        network["interfaceName"] = if_name
    ips = _attachment_ips(result, index) or _kept_ips(fact.get("keptIPs"))
    if ips:
        network["ips"] = ips
    if index is not None:
        mac = result["interfaces"][index].get("mac")
        if isinstance(mac, str) and mac and len(mac) <= HARDWARE_ADDRESS_MAX:
            network["hardwareAddress"] = mac.lower()
    if network:
        entry["networkData"] = network
    return entry


def _kept_ips(values: Any) -> list[str]:
    """A persistent attachment's addresses when there is no result (Detached, or a failed ADD)."""
    out: list[str] = []
    for value in values or []:
        text = canonical_interface_address(value) if isinstance(value, str) else None
        if text and text not in out:
            out.append(text)
    return out[:MAX_IPS]


def _device_key(item: dict) -> tuple[str, str, str]:
    return (str(item.get("pool") or ""), str(item.get("device") or ""), str(item.get("shareID") or ""))


def status_devices(outbox: dict, *, driver: str) -> list[Entry]:
    """All ``status.devices`` entries of a StatusOutbox record, sorted by (pool, device, shareID).

    One entry per (pool, device, shareID); of two facts with the same key the one with the
    latest ``updatedAt`` wins (the later one in the record on a tie or an unreadable time).
    """
    chosen: dict[tuple[str, str, str], tuple[datetime, dict]] = {}
    for fact in outbox.get("devices") or []:
        if not isinstance(fact, dict):
            continue
        key = _device_key(fact)
        when = parse_rfc3339(fact.get("updatedAt")) or _ZERO_TIME
        current = chosen.get(key)
        if current is None or when >= current[0]:
            chosen[key] = (when, fact)
    return [device_status_entry(chosen[key][1], driver=driver) for key in sorted(chosen)]


# -- validation (k8s.io/kubernetes/pkg/apis/resource/validation, validateDeviceStatus) -----
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
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_REASON_FMT = "[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?"
_REASON = re.compile(f"^{_REASON_FMT}$")
_REASON_MSG = (
    "a condition reason must start with alphabetic character, optionally followed by a string "
    "of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_'"
)
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_CONDITION_STATUSES = ("False", "True", "Unknown")


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


def _str_field(entry: dict, key: str) -> str:
    value = entry.get(key)
    return value if isinstance(value, str) else ""


def device_id(item: dict) -> str:
    """``driver/pool/device`` plus ``/shareID`` when set (structured.SharedDeviceID)."""
    ident = f"{_str_field(item, 'driver')}/{_str_field(item, 'pool')}/{_str_field(item, 'device')}"
    share = item.get("shareID")
    if share:
        ident += f"/{share}"
    return ident


def _validate_names(entry: dict, path: str) -> list[str]:
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


def _validate_conditions(conditions: Any, path: str) -> list[str]:
    if conditions is None:
        return []
    if not isinstance(conditions, list):
        return [_invalid(path, conditions, "must be a list of conditions")]
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
            elif moment == _ZERO_TIME:
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
                        _regex_error(_REASON_MSG, _REASON_FMT, "my_name", "MY_NAME", "MyName", "ReasonA,ReasonB", "ReasonA:ReasonB"),
                    )
                )
            if _blen(reason) > REASON_MAX:
                errs.append(_too_long(f"{item}.reason", REASON_MAX))
        message = condition.get("message")
        if isinstance(message, str) and _blen(message) > MESSAGE_MAX:
            errs.append(_too_long(f"{item}.message", MESSAGE_MAX))
    return errs


def _validate_data(data: Any, path: str) -> list[str]:
    if data is None:  # optional
        return []
    size = _json_size(data)
    if size is None:
        return [_invalid(path, "<value omitted>", "error parsing data as JSON")]
    if size > DATA_MAX_BYTES:
        return [_too_long(path, DATA_MAX_BYTES)]
    if not isinstance(data, dict):
        return [_invalid(path, "<value omitted>", "must be a valid JSON object")]
    return []


def _validate_network_data(network: Any, path: str) -> list[str]:
    if network is None:
        return []
    if not isinstance(network, dict):
        return [_invalid(path, network, "must be an object")]
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
        parsed = _parse_interface_address(value)
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
    entry: dict,
    allocated_results: list[dict] | None = None,
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
    errs.extend(_validate_conditions(entry.get("conditions"), f"{path}.conditions"))
    errs.extend(_validate_data(entry.get("data"), f"{path}.data"))
    errs.extend(_validate_network_data(entry.get("networkData"), f"{path}.networkData"))
    return errs


def validate_status_devices(
    devices: list[dict],
    allocated_results: list[dict] | None = None,
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
