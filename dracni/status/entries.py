"""ResourceClaim ``status.devices`` entries (AllocatedDeviceStatus, KEP-4817) from outbox facts.

The CNI plugin writes, per claim, the full desired set of *device facts* into the state
directory's StatusOutbox record (``dracni.state.facts``).  This module turns them into the
camelCase API form of ``status.devices[]``, within the API server's limits
(``dracni.apirules.validation``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..addresses import canonical_interface_address
from ..apirules.gojson import go_json_size
from ..apirules.validation import (
    DATA_MAX_BYTES,
    HARDWARE_ADDRESS_MAX,
    INTERFACE_NAME_MAX,
    MAX_IPS,
    MESSAGE_MAX,
)
from ..clock import normalize_time, parse_rfc3339, zero_time
from ..state.facts import entry_key

READY = "Ready"
REASON_READY = "NetworkInterfaceReady"
REASON_NOT_READY = "NetworkInterfaceNotReady"
#: A persistent attachment whose pod is gone: the entry keeps its addresses for the next pod.
REASON_DETACHED = "Detached"
#: Ready, but the CNI result is too large for ``data`` even shrunk: ``data`` is left out and
#: this reason (with the size in the message) marks its place.
REASON_DATA_OMITTED = "NetworkInterfaceReadyResultTooLarge"

Entry = dict[str, Any]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..state.records import DeviceFact, StatusOutbox


# -- building entries --------------------------------------------------------------------
def _utf8_truncate(text: str, limit: int) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    return raw[:limit].decode("utf-8", "ignore")


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
        if ip.get("interface") is not None and (
            index is None or not _is_index(ip["interface"]) or ip["interface"] != index
        ):
            continue
        canonical = canonical_interface_address(ip.get("address"))
        if canonical is None or canonical in out:
            continue
        out.append(canonical)
        if len(out) == MAX_IPS:
            break
    return out


def _strip_sandbox(result: dict[str, Any]) -> dict[str, Any]:
    data = dict(result)
    if isinstance(data.get("interfaces"), list):
        data["interfaces"] = [
            {k: v for k, v in iface.items() if k != "sandbox"} if isinstance(iface, dict) else iface
            for iface in data["interfaces"]
        ]
    return data


def _only_attachment_interface(data: dict[str, Any], index: int | None) -> dict[str, Any]:
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


def _fit_data(result: Any, index: int | None) -> tuple[dict[str, Any] | None, int | None]:
    """The CNI result as ``data``: no sandbox paths, at most 10 KiB as the API server counts.

    Returns ``(data, None)``, or ``(None, size)`` when even the attachment's interface alone
    is too large (``size``: the full result's bytes as Go encodes it, 0 when Go could not
    encode it); ``(None, None)`` without a result.  Sizes are Go's (``apirules.gojson``): what
    the server measures after its own re-encoding, where each ``<`` of a DNS domain takes 6 bytes.
    """
    if not isinstance(result, dict):
        return None, None
    data = _strip_sandbox(result)

    def fits(candidate: dict[str, Any]) -> bool:
        size = go_json_size(candidate)
        return size is not None and size <= DATA_MAX_BYTES

    full = data
    if fits(data):
        return data, None
    for key in ("dns", "routes"):
        if key in data:
            data = {k: v for k, v in data.items() if k != key}
            if fits(data):
                return data, None
    data = _only_attachment_interface(data, index)
    if fits(data):
        return data, None
    size = go_json_size(full)
    return None, size or 0


def _omitted_note(size: int) -> str:
    measured = f"{size} bytes as the API server encodes it" if size else "not encodable as JSON"
    return (
        f"data left out: the CNI result ({measured}) does not fit the {DATA_MAX_BYTES}-byte limit "
        "of status data even without dns, routes and other interfaces"
    )


def error_message(error: Any, if_name: str) -> str:
    """A CNI error as one line: its msg (or code), then its details."""
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


def device_status_entry(fact: DeviceFact, *, driver: str) -> Entry:
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
            "message": error_message(fact.get("error"), if_name),
        }
    index = _attachment_index(result, if_name)
    data, omitted = _fit_data(result, index)
    if data is not None:
        entry["data"] = data
    if omitted is not None:  # the reason says why data is missing (Ready stays True)
        if ready:
            condition["reason"] = REASON_DATA_OMITTED
        condition["message"] = f"{condition['message']}; {_omitted_note(omitted)}"
    condition["message"] = _utf8_truncate(condition["message"], MESSAGE_MAX)
    condition["lastTransitionTime"] = normalize_time(fact.get("updatedAt"))
    entry["conditions"] = [condition]

    network: dict[str, Any] = {}
    if if_name and len(if_name.encode("utf-8")) <= INTERFACE_NAME_MAX:
        network["interfaceName"] = if_name
    ips = fact_ips(fact)
    if ips:
        network["ips"] = ips
    if index is not None and isinstance(result, dict):
        mac = result["interfaces"][index].get("mac")
        if isinstance(mac, str) and mac and len(mac) <= HARDWARE_ADDRESS_MAX:
            network["hardwareAddress"] = mac.lower()
    if network:
        entry["networkData"] = network
    return entry


def fact_ips(fact: DeviceFact) -> list[str]:
    """The attachment's addresses as ``networkData.ips`` shows them: canonical, at most 16.

    Those of the attachment's interface in the CNI result; without a result (Detached, or a
    failed ADD), a persistent attachment's kept addresses.
    """
    result = fact.get("result")
    return _attachment_ips(result, _attachment_index(result, fact.get("ifName") or "")) or _kept_ips(
        fact.get("keptIPs")
    )


def _kept_ips(values: Any) -> list[str]:
    """A persistent attachment's addresses when there is no result (Detached, or a failed ADD)."""
    out: list[str] = []
    for value in values or []:
        text = canonical_interface_address(value) if isinstance(value, str) else None
        if text and text not in out:
            out.append(text)
    return out[:MAX_IPS]


def status_devices(outbox: StatusOutbox, *, driver: str) -> list[Entry]:
    """All ``status.devices`` entries of a StatusOutbox record, sorted by (pool, device, shareID).

    One entry per (pool, device, shareID) (``state/facts.py entry_key``).  Its facts are one
    per pod attached (a claim may be reserved for several pods); the entry shows, while any pod
    is attached and ready, the first attached pod's attachment (interface, MAC, CNI result,
    condition) with the addresses of every ready attachment (that pod's first, at most 16);
    with none ready, the latest fact (a failure, or a persistent attachment's Detached state).
    One pod's failed ADD therefore never turns the entry of a device another pod uses to Ready=False.
    """
    groups: dict[tuple[str, str, str], list[tuple[datetime, int, DeviceFact]]] = {}
    for order, fact in enumerate(outbox.get("devices") or []):
        if isinstance(fact, dict):
            when = parse_rfc3339(fact.get("updatedAt")) or zero_time()
            groups.setdefault(entry_key(fact), []).append((when, order, fact))
    return [_composed_entry(groups[key], driver) for key in sorted(groups)]


def _composed_entry(facts: list[tuple[datetime, int, DeviceFact]], driver: str) -> Entry:
    ready = sorted((f for f in facts if f[2].get("ready")), key=lambda f: (f[0], f[1]))
    if not ready:  # the latest fact; the later one in the record on a tie or an unreadable time
        return device_status_entry(max(facts, key=lambda f: (f[0], f[1]))[2], driver=driver)
    entry = device_status_entry(ready[0][2], driver=driver)
    ips: list[str] = []
    for _, _, fact in ready:
        ips += [ip for ip in fact_ips(fact) if ip not in ips]
    if ips:
        entry.setdefault("networkData", {})["ips"] = ips[:MAX_IPS]
    return entry


# -- validation (k8s.io/kubernetes/pkg/apis/resource/validation, validateDeviceStatus) -----
