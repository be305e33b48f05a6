"""The ResourceClaim status strategy: what a status write goes through between decoding and
storage, transcribed from kubernetes (1.36 unless noted):

- ``pkg/registry/resource/resourceclaim/strategy.go`` ``resourceclaimStatusStrategy.PrepareForUpdate``:
  ``dropDeallocatedStatusDevices`` and ``dropDisabledDRAResourceClaimDeviceStatusFields`` (gate
  ``DRAResourceClaimDeviceStatus``; the consumable-capacity part lives in ``consumable_capacity.py``);
- ``resourceclaimStatusStrategy.ValidateUpdate``: with ``DRAResourceClaimGranularStatusAuthorization``
  on, ``pkg/registry/resource/utils.go`` ``AuthorizedForBinding`` and ``AuthorizedForDeviceStatus``
  (refusals are ``field.Forbidden``, so a **422**), then
  ``pkg/apis/resource/validation/validation.go`` ``validateResourceClaimStatusUpdate``.

Differences between releases that matter here: older ``validateNetworkDeviceData`` parsed each IP
with ``netutils.ParseCIDRSloppy`` itself (``IsValidCIDR``'s message when unparsable, the canonical
form unquoted in its message); current code calls apimachinery ``IsValidInterfaceAddress``
(same verdicts for the addresses drivers write; the messages here are the current ones, and so
is ``field.TooLong``'s "must have at most N bytes", once "may not be more than N bytes").  The
granular authorization exists from 1.36 (beta, on; off here stands for 1.34/1.35); the
device-status gate is beta (on) 1.33-1.36 and GA in 1.37.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import field as fe
from .clock import ZERO, parse_rfc3339
from .consumable_capacity import uid_errors
from .features import DRA_GRANULAR_STATUS_AUTHZ, DRA_RESOURCE_CLAIM_DEVICE_STATUS, FeatureGates
from .gojson import marshal_size
from .names import (
    DNS_SUBDOMAIN,
    SUBDOMAIN_MSG,
    dns_label_errors,
    dns_subdomain_errors,
    driver_name_errors,
    pool_name_errors,
)
from .objects import json_equal
from .resources import Obj

# pkg/apis/resource/types.go
ALLOCATED_DEVICE_STATUS_MAX_CONDITIONS = 8
ALLOCATED_DEVICE_STATUS_DATA_MAX_LENGTH = 10 * 1024
NETWORK_DEVICE_DATA_INTERFACE_NAME_MAX_LENGTH = 256
NETWORK_DEVICE_DATA_HARDWARE_ADDRESS_MAX_LENGTH = 128
NETWORK_DEVICE_DATA_MAX_IPS = 16
RESOURCE_CLAIM_RESERVED_FOR_MAX_SIZE = 256

# k8s.io/api/resource/v1 types.go
SUBRESOURCE_BINDING = "binding"
SUBRESOURCE_DRIVER = "driver"
VERB_PREFIX_ASSOCIATED_NODE = "associated-node:"
VERB_PREFIX_ARBITRARY_NODE = "arbitrary-node:"
#: k8s.io/apiserver/pkg/authentication/serviceaccount ``NodeNameKey``.
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"


def _dicts(value: Any) -> list[Obj]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _results(status: Obj) -> list[Obj]:
    allocation = status.get("allocation")
    if not isinstance(allocation, dict):
        return []
    devices = allocation.get("devices")
    return _dicts(devices.get("results")) if isinstance(devices, dict) else []


def device_id(entry: Obj) -> str:
    """``structured.MakeDeviceID(driver, pool, device).String()``: ``driver/pool/device``."""
    return f"{entry.get('driver') or ''}/{entry.get('pool') or ''}/{entry.get('device') or ''}"


def shared_device_id(entry: Obj) -> str:
    """``structured.MakeSharedDeviceID(...).String()``: the device ID, then ``/<shareID>`` if set."""
    share = entry.get("shareID")
    return device_id(entry) + (f"/{share}" if share else "")


# -- PrepareForUpdate ---------------------------------------------------------------------------------
def drop_deallocated_status_devices(new_status: Obj, old_status: Obj, gates: FeatureGates) -> None:
    """strategy.go ``dropDeallocatedStatusDevices``: entries of devices that the old allocation had
    and the new one no longer has are removed (deallocation clears them)."""
    in_use = bool(_dicts(old_status.get("devices")))
    if not gates.enabled(DRA_RESOURCE_CLAIM_DEVICE_STATUS) and not in_use:
        return
    deallocated = {device_id(r) for r in _results(old_status)} - {device_id(r) for r in _results(new_status)}
    devices = new_status.get("devices")
    if not isinstance(devices, list):
        return
    kept = [e for e in devices if not (isinstance(e, dict) and device_id(e) in deallocated)]
    if kept:
        new_status["devices"] = kept
    else:
        new_status.pop("devices", None)


def drop_disabled_device_status(new_status: Obj, old_status: Obj | None, gates: FeatureGates) -> None:
    """strategy.go ``dropDisabledDRAResourceClaimDeviceStatusFields``: with the gate off,
    ``status.devices`` is dropped silently unless the stored claim already has entries."""
    in_use = old_status is not None and bool(_dicts(old_status.get("devices")))
    if not gates.enabled(DRA_RESOURCE_CLAIM_DEVICE_STATUS) and not in_use:
        new_status.pop("devices", None)


# -- authorization (ValidateUpdate, 1.36+) --------------------------------------------------------------
@dataclass(frozen=True)
class Caller:
    """What ``filters.GetAuthorizerAttributes(ctx)`` gives the strategy: the authenticated user
    (name and ``extra``), the request verb and namespace."""

    user: str
    verb: str
    namespace: str
    extra: dict[str, list[str]] = field(default_factory=dict)


#: ``(user, verb, subresource, namespace, name) -> (allowed, reason)``: the server's authorizer
#: asked about a synthetic subresource (``syntheticSubresourceAttrs``), and the 403 message
#: ``responsewriters.ForbiddenStatusError`` would make of a refusal.
Authorize = Callable[[Caller, str, str, str, str], tuple[bool, str]]


def node_name_from_allocation(status: Obj) -> str:
    """utils.go ``nodeNameFromAllocation``: the node of a selector with exactly one term holding
    exactly one ``metadata.name In [node]`` field requirement and no expressions; else ""."""
    allocation = status.get("allocation")
    if not isinstance(allocation, dict) or not isinstance(allocation.get("nodeSelector"), dict):
        return ""
    terms = allocation["nodeSelector"].get("nodeSelectorTerms") or []
    if len(terms) != 1 or not isinstance(terms[0], dict):
        return ""
    term = terms[0]
    fields = term.get("matchFields") or []
    if term.get("matchExpressions") or len(fields) != 1:
        return ""
    requirement = fields[0]
    values = requirement.get("values") or []
    if requirement.get("key") != "metadata.name" or requirement.get("operator") != "In" or len(values) != 1:
        return ""
    return str(values[0])


_SA_PREFIX = "system:serviceaccount:"


def sa_associated_with_node(caller: Caller, node: str) -> bool:
    """utils.go ``saAssociatedWithAllocatedNode``: a service account (``serviceaccount.SplitUsername``)
    whose token carries exactly one node-name extra, a valid node name, equal to ``node``."""
    if not node:
        return False
    parts = caller.user[len(_SA_PREFIX) :].split(":") if caller.user.startswith(_SA_PREFIX) else []
    if len(parts) != 2 or not all(parts):
        return False
    names = caller.extra.get(NODE_NAME_KEY) or []
    if len(names) != 1 or dns_subdomain_errors("", names[0]):  # ValidateNodeName
        return False
    return names[0] == node


def _device_key(entry: Obj) -> tuple[str, str, str, str]:
    """utils.go ``makeDeviceKey``."""
    return (entry.get("driver") or "", entry.get("pool") or "", entry.get("device") or "", entry.get("shareID") or "")


def modified_drivers(new_status: Obj, old_status: Obj) -> set[str]:
    """utils.go ``getModifiedDrivers``: drivers with an entry added, removed or changed."""
    old = {_device_key(e): e for e in _dicts(old_status.get("devices"))}
    drivers: set[str] = set()
    for entry in _dicts(new_status.get("devices")):
        before = old.pop(_device_key(entry), None)
        if before is None or not json_equal(before, entry):
            drivers.add(entry.get("driver") or "")
    drivers.update(e.get("driver") or "" for e in old.values())
    return drivers


def authorized_for_binding(caller: Caller, authorize: Authorize, new_status: Obj, old_status: Obj) -> list[str]:
    """utils.go ``AuthorizedForBinding``: changing ``allocation`` or ``reservedFor`` needs the
    request verb on ``resourceclaims/binding`` (cluster-wide, all names)."""
    if json_equal(new_status.get("allocation"), old_status.get("allocation")) and json_equal(
        new_status.get("reservedFor") or None, old_status.get("reservedFor") or None
    ):
        return []
    allowed, reason = authorize(caller, caller.verb, SUBRESOURCE_BINDING, "", "")
    if allowed:
        return []
    return [
        fe.forbidden(
            "status",
            f'changing status.allocation or status.reservedFor requires resource="resourceclaims/binding", '
            f'verb="{caller.verb}" permission: {reason}',
        )
    ]


def authorized_for_device_status(caller: Caller, authorize: Authorize, new_status: Obj, old_status: Obj) -> list[str]:
    """utils.go ``AuthorizedForDeviceStatus``: for each driver whose entries changed (sorted), one
    of the verbs on ``resourceclaims/driver`` named after the driver, in the request's namespace:
    ``associated-node:<verb>`` (only when the caller's pod runs on the allocation's one node),
    else ``arbitrary-node:<verb>`` (``checkDriverAuthorization`` ORs them, reporting the first
    refusal)."""
    drivers = modified_drivers(new_status, old_status)
    if not drivers:
        return []
    verbs = [VERB_PREFIX_ARBITRARY_NODE + caller.verb]
    if sa_associated_with_node(caller, node_name_from_allocation(new_status)):
        verbs.insert(0, VERB_PREFIX_ASSOCIATED_NODE + caller.verb)
    errs = []
    for driver in sorted(drivers):
        first = ""
        for verb in verbs:
            allowed, reason = authorize(caller, verb, SUBRESOURCE_DRIVER, caller.namespace, driver)
            if allowed:
                break
            first = first or reason
        else:
            errs.append(
                fe.forbidden(
                    "status.devices",
                    f'changing status.devices requires resource="resourceclaims/driver", '
                    f'verb="[{" ".join(verbs)}]" permission: {first}',
                )
            )
    return errs


def authorization_errors(
    caller: Caller | None, authorize: Authorize | None, new_status: Obj, old_status: Obj, gates: FeatureGates
) -> list[str]:
    """The granular checks of ``resourceclaimStatusStrategy.ValidateUpdate`` (gate on, a request
    with an authorizer; the fake's direct helpers are not requests)."""
    if caller is None or authorize is None or not gates.enabled(DRA_GRANULAR_STATUS_AUTHZ):
        return []
    errs = authorized_for_binding(caller, authorize, new_status, old_status)
    return errs + authorized_for_device_status(caller, authorize, new_status, old_status)


# -- validation ----------------------------------------------------------------------------------------
_QNAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_REASON_FMT = "[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?"
_REASON_MSG = (
    "a condition reason must start with alphabetic character, optionally followed by a string of "
    "alphanumeric characters or '_,:', and must end with an alphanumeric character or '_'"
)
_CONDITION_STATUSES = ("False", "True", "Unknown")  # sets.NewString(...).List(): sorted


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    """apimachinery ``validation.RegexError``."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    return msg + " (e.g. " + " or ".join(f"'{e}', " for e in examples) + f"regex used for validation is '{fmt}')"


def is_qualified_name(value: str) -> list[str]:
    """apimachinery ``validation.IsQualifiedName`` (label keys, condition types)."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                errs.append("prefix part must be no more than 253 characters")
            if not DNS_SUBDOMAIN.match(prefix):
                errs.append("prefix part " + SUBDOMAIN_MSG)
    else:
        return [
            "a qualified name "
            + regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if not _QNAME.match(name):
        errs.append("name part " + regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc"))
    return errs


def validate_condition(condition: Obj, path: str) -> list[str]:
    """apimachinery ``metav1validation.ValidateCondition``."""
    errs = [
        fe.invalid(f"{path}.type", condition.get("type") or "", m)
        for m in is_qualified_name(str(condition.get("type") or ""))
    ]
    status = condition.get("status") or ""
    if status not in _CONDITION_STATUSES:
        errs.append(fe.not_supported(f"{path}.status", status, _CONDITION_STATUSES))
    generation = condition.get("observedGeneration")
    if isinstance(generation, int) and generation < 0:
        errs.append(fe.invalid(f"{path}.observedGeneration", generation, "must be greater than or equal to zero"))
    moment = parse_rfc3339(condition.get("lastTransitionTime"))
    if moment is None or moment == ZERO:
        errs.append(fe.required(f"{path}.lastTransitionTime", "must be set"))
    reason = condition.get("reason") or ""
    if not reason:
        errs.append(fe.required(f"{path}.reason", "must be set"))
    else:
        if not _REASON.match(reason):
            errs.append(
                fe.invalid(
                    f"{path}.reason",
                    reason,
                    regex_error(
                        _REASON_MSG, _REASON_FMT, "my_name", "MY_NAME", "MyName", "ReasonA,ReasonB", "ReasonA:ReasonB"
                    ),
                )
            )
        if len(reason.encode()) > 1024:
            errs.append(fe.too_long(f"{path}.reason", 1024))
    if len(str(condition.get("message") or "").encode()) > 32 * 1024:
        errs.append(fe.too_long(f"{path}.message", 32 * 1024))
    return errs


def validate_conditions(conditions: list[Any], path: str) -> list[str]:
    """apimachinery ``metav1validation.ValidateConditions``: duplicate types, then each condition."""
    errs: list[str] = []
    seen: set[Any] = set()
    for i, condition in enumerate(conditions):
        condition = condition if isinstance(condition, dict) else {}
        if condition.get("type") in seen:
            errs.append(fe.duplicate(f"{path}[{i}].type", condition.get("type")))
        else:
            seen.add(condition.get("type"))
        errs.extend(validate_condition(condition, f"{path}[{i}]"))
    return errs


def validate_raw_extension(value: Any, path: str, max_length: int) -> list[str]:
    """validation.go ``validateRawExtension`` (not stored): ``len(Raw)``, then an object; ``Raw``
    as Go's ``json.Marshal`` rebuilt it (``gojson.py``: ``<`` is ``\u003c``, 6 bytes)."""
    if value is None:
        return [fe.required(path)]
    if marshal_size(value) > max_length:
        return [fe.too_long(path, max_length)]
    if not isinstance(value, dict):
        return [fe.invalid(path, "<value omitted>", "must be a valid JSON object")]
    return []


def is_valid_interface_address(path: str, value: str) -> list[str]:
    """apimachinery ``validation.IsValidInterfaceAddress``: ``ParseCIDRSloppy`` (leading zeros
    allowed in IPv4), then the canonical ``<ip>/<prefix>`` form."""
    address, sep, bits = value.partition("/")
    try:
        if not sep or not bits.isdigit():
            raise ValueError(value)
        if ":" not in address:
            octets = address.split(".")
            if len(octets) != 4 or not all(o.isdigit() and int(o) < 256 for o in octets):
                raise ValueError(value)
            address = ".".join(str(int(o)) for o in octets)
        interface = ipaddress.ip_interface(f"{address}/{int(bits)}")
    except ValueError:
        return [fe.invalid(path, value, "must be a valid address in CIDR form, (e.g. 10.9.8.7/24 or 2001:db8::1/64)")]
    ip = interface.ip
    prefix = interface.network.prefixlen
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip, prefix = ip.ipv4_mapped, max(prefix - 96, 0)
    canonical = f"{ip}/{prefix}"
    if value != canonical:
        return [fe.invalid(path, value, f"must be in canonical form ({json.dumps(canonical)})")]
    return []


def validate_network_device_data(network: Any, path: str) -> list[str]:
    """validation.go ``validateNetworkDeviceData``."""
    if not isinstance(network, dict):
        return []
    errs: list[str] = []
    if len(str(network.get("interfaceName") or "").encode()) > NETWORK_DEVICE_DATA_INTERFACE_NAME_MAX_LENGTH:
        errs.append(fe.too_long(f"{path}.interfaceName", NETWORK_DEVICE_DATA_INTERFACE_NAME_MAX_LENGTH))
    if len(str(network.get("hardwareAddress") or "").encode()) > NETWORK_DEVICE_DATA_HARDWARE_ADDRESS_MAX_LENGTH:
        errs.append(fe.too_long(f"{path}.hardwareAddress", NETWORK_DEVICE_DATA_HARDWARE_ADDRESS_MAX_LENGTH))
    ips = network.get("ips") or []
    errs.extend(
        validate_set(
            [str(ip) for ip in ips],
            NETWORK_DEVICE_DATA_MAX_IPS,
            is_valid_interface_address_item,
            lambda ip: ip,
            f"{path}.ips",
        )
    )
    return errs


def is_valid_interface_address_item(value: str, path: str) -> list[str]:
    return is_valid_interface_address(path, value)


def validate_set(
    items: list[Any],
    max_size: int,
    validate_item: Callable[[Any, str], list[str]],
    key: Callable[[Any], Any],
    path: str,
) -> list[str]:
    """validation.go ``validateSet``: too many short-circuits; each item; duplicates by key."""
    if max_size >= 0 and len(items) > max_size:
        return [fe.too_many(path, len(items), max_size)]
    errs: list[str] = []
    for i, item in enumerate(items):
        errs.extend(validate_item(item, f"{path}[{i}]"))
    seen: set[Any] = set()
    for i, item in enumerate(items):
        k = key(item)
        if k in seen:
            errs.append(fe.duplicate(f"{path}[{i}]", fe.Stringer(str(k)) if not isinstance(k, str) else k))
        else:
            seen.add(k)
    return errs


def validate_device_status(entry: Any, path: str, allocated: set[str]) -> list[str]:
    """validation.go ``validateDeviceStatus``."""
    entry = entry if isinstance(entry, dict) else {}
    errs = driver_name_errors(f"{path}.driver", entry.get("driver"))
    errs += pool_name_errors(f"{path}.pool", entry.get("pool"))
    errs += dns_label_errors(f"{path}.device", entry.get("device"))
    if entry.get("shareID") is not None:
        errs += uid_errors(f"{path}.shareID", entry["shareID"])
    ident = shared_device_id(entry)
    if ident not in allocated:
        errs.append(fe.invalid(path, fe.Stringer(ident), "must be an allocated device in the claim"))
    conditions = entry.get("conditions") or []
    if len(conditions) > ALLOCATED_DEVICE_STATUS_MAX_CONDITIONS:
        errs.append(fe.too_many(f"{path}.conditions", len(conditions), ALLOCATED_DEVICE_STATUS_MAX_CONDITIONS))
    errs += validate_conditions(conditions, f"{path}.conditions")
    if entry.get("data") is not None:  # "Data is an optional field"
        errs += validate_raw_extension(entry["data"], f"{path}.data", ALLOCATED_DEVICE_STATUS_DATA_MAX_LENGTH)
    errs += validate_network_device_data(entry.get("networkData"), f"{path}.networkData")
    return errs


def _consumer_errors(ref: Any, path: str) -> list[str]:
    """validation.go ``validateResourceClaimUserReference``."""
    ref = ref if isinstance(ref, dict) else {}
    return [fe.required(f"{path}.{k}") for k in ("resource", "name", "uid") if not ref.get(k)]


def validate_status_update(
    status: Obj, old: Obj, deleted: bool, new_allocation_errors: Callable[[Obj], list[str]]
) -> list[str]:
    """validation.go ``validateResourceClaimStatusUpdate`` (``new_allocation_errors``: the parts of
    ``validateAllocationResult`` the fake models, for an allocation set by this write)."""
    reserved = status.get("reservedFor") or []
    errs = validate_set(
        reserved if isinstance(reserved, list) else [],
        RESOURCE_CLAIM_RESERVED_FOR_MAX_SIZE,
        _consumer_errors,
        lambda ref: ref.get("uid") if isinstance(ref, dict) else None,
        "status.reservedFor",
    )
    allocated = {shared_device_id(r) for r in _results(status)}
    devices = status.get("devices") or []
    errs += validate_set(
        devices if isinstance(devices, list) else [],
        -1,
        lambda entry, path: validate_device_status(entry, path, allocated),
        lambda entry: fe.Stringer(shared_device_id(entry)) if isinstance(entry, dict) else None,
        "status.devices",
    )
    if reserved:
        if not status.get("allocation"):
            errs.append(fe.forbidden("status.reservedFor", "may not be specified when `allocated` is not set"))
        elif deleted:
            old_refs = [json.dumps(r, sort_keys=True) for r in old.get("reservedFor") or []]
            if any(json.dumps(r, sort_keys=True) not in old_refs for r in reserved):
                errs.append(
                    fe.forbidden(
                        "status.reservedFor",
                        "new entries may not be added while `deallocationRequested` or `deletionTimestamp` are set",
                    )
                )
    if old.get("allocation") and status.get("allocation"):
        if not json_equal(old["allocation"], status["allocation"]):
            errs.append(fe.invalid("status.allocation", "<value omitted>", "field is immutable"))
    elif status.get("allocation"):
        errs += new_allocation_errors(status)
    return errs
