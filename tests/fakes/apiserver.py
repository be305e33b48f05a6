"""A test Kubernetes API server, spoken to over HTTP by the real ``kubernetes`` Python client.

``FakeApiServer`` serves, on 127.0.0.1 and an ephemeral port, exactly the part of
kube-apiserver that dracni uses (``CONTRACTS.md`` sections 3-5), with the real response shapes:

- ``resource.k8s.io/v1`` ``resourceclaims`` (namespaced): create, get, list (one namespace or
  all), watch, update (``PUT``, resourceVersion precondition), delete, the ``status``
  subresource (``GET``/``PUT``/``PATCH``).  ``PATCH .../status`` with
  ``application/apply-patch+yaml`` is server-side apply of ``status.devices`` as a list-map keyed
  by (driver, device, pool, shareID), ownership tracked per entry and per top-level entry field
  (``conditions``, ``data``, ``networkData``), with conflicts, ``force`` and ``managedFields``;
  ``application/merge-patch+json`` and ``application/strategic-merge-patch+json`` replace the
  whole ``devices`` list, as the real server does.  Status writes are validated with
  ``dracni.kube.validation.validate_status_devices`` against the claim's allocation (422).
- ``resource.k8s.io/v1`` ``resourceslices`` (cluster-scoped): create, get, list, watch, update,
  patch (merge), delete, deletecollection; field selectors ``spec.nodeName``, ``spec.driver``,
  ``metadata.name``; validation of the spec (422).
- ``v1`` ``nodes`` and ``namespaces``: get, list, watch (seeded by the test).
- ``k8s.cni.cncf.io/v1alpha1`` ``ipamclaims`` (namespaced custom resource, the Network Plumbing
  WG's IPAMClaim for sticky IPs; only with ``FakeApiServer(ipamclaims=True)``): CRUD, watch, and
  the ``status`` subresource (``PUT``, merge patch, simple server-side apply), pruned and validated
  like the upstream CRD (``spec/crds/ipamclaims.k8s.cni.cncf.io.yaml``), ``status.ips`` as CIDRs.
- ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/resource.k8s.io[/v1]``,
  ``/apis/k8s.cni.cncf.io[/v1alpha1]`` (when installed): discovery.

Every write bumps one global resourceVersion counter; watches replay a bounded event history
(``history_limit``; ``compact()`` drops it) and answer a too-old resourceVersion with an ``ERROR``
event carrying a 410 ``Expired`` Status, as kube-apiserver's watch cache does.

Bearer-token authentication (401), an optional authorizer hook (403), injected failures
(``fail_next``), a request log (``requests``) and ``stop()``/``start()`` (same port, same data)
let tests drive a client through outages and assert exactly what it sent.

Only the standard library, PyYAML and ``dracni.kube.validation`` are imported: no kubernetes
client code runs inside the fake.
"""

from __future__ import annotations

import bisect
import collections
import copy
import ipaddress
import json
import os
import re
import secrets
import shutil
import socket
import tempfile
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from dracni.clock import format_rfc3339, parse_rfc3339
from dracni.kube.validation import validate_status_devices
from dracni.kube.fielderrors import (duplicate as _fe_duplicate, forbidden as _fe_forbidden, invalid as _fe_invalid,
                                        required as _fe_required, too_long as _fe_too_long,
                                        too_many as _fe_too_many)

__all__ = ["FakeApiServer", "RecordedRequest", "RequestAttributes"]

RESOURCE_GROUP = "resource.k8s.io"
RESOURCE_VERSION = "v1"
RESOURCE_API_VERSION = f"{RESOURCE_GROUP}/{RESOURCE_VERSION}"
# The Network Plumbing WG's IPAMClaim CRD (multi-network de-facto standard v1.3, "sticky IPs"),
# served only when the fake is told the CRD is installed (``FakeApiServer(ipamclaims=True)``).
IPAM_GROUP = "k8s.cni.cncf.io"
IPAM_VERSION = "v1alpha1"
IPAM_API_VERSION = f"{IPAM_GROUP}/{IPAM_VERSION}"
KUBERNETES_VERSION = {"major": "1", "minor": "34", "gitVersion": "v1.34.0"}

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"

DEVICE_KEY_FIELDS = ("driver", "device", "pool", "shareID")
_MISSING = object()


# -- resource table -------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Resource:
    plural: str
    kind: str
    group: str
    version: str
    namespaced: bool
    field_labels: frozenset[str]
    verbs: tuple[str, ...]
    singular: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``resourceclaims.resource.k8s.io`` (``nodes`` for the core group), as in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def group_kind(self) -> str:
        """``ResourceClaim.resource.k8s.io`` (``Node`` for the core group), as in 422 messages."""
        return f"{self.kind}.{self.group}" if self.group else self.kind


_CRUD = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
RESOURCES: dict[str, _Resource] = {
    "resourceclaims": _Resource(
        "resourceclaims", "ResourceClaim", RESOURCE_GROUP, RESOURCE_VERSION, True,
        frozenset({"metadata.name", "metadata.namespace"}), _CRUD, "resourceclaim"),
    "resourceslices": _Resource(
        "resourceslices", "ResourceSlice", RESOURCE_GROUP, RESOURCE_VERSION, False,
        frozenset({"metadata.name", "spec.nodeName", "spec.driver"}), _CRUD, "resourceslice"),
    "nodes": _Resource(
        "nodes", "Node", "", "v1", False, frozenset({"metadata.name", "spec.unschedulable"}),
        ("get", "list", "watch"), "node"),
    "namespaces": _Resource(
        "namespaces", "Namespace", "", "v1", False, frozenset({"metadata.name", "status.phase"}),
        ("get", "list", "watch"), "namespace"),
    # A custom resource: field selectors are metadata.name/metadata.namespace only.
    "ipamclaims": _Resource(
        "ipamclaims", "IPAMClaim", IPAM_GROUP, IPAM_VERSION, True,
        frozenset({"metadata.name", "metadata.namespace"}), _CRUD, "ipamclaim"),
}
#: Resources with a ``status`` subresource.
_STATUS_SUBRESOURCE = frozenset({"resourceclaims", "ipamclaims"})


# -- public records -------------------------------------------------------------------------------
@dataclass
class RecordedRequest:
    """One HTTP request the fake received (also the rejected ones)."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str | None
    field_manager: str | None
    user: str | None
    body: Any = None
    status: int | None = None  # the HTTP status answered (200 for a watch stream)
    user_agent: str | None = None

    @property
    def watch(self) -> bool:
        return self.query.get("watch") in ("true", "1")


@dataclass(frozen=True)
class RequestAttributes:
    """What an authorizer hook is asked about (like a SubjectAccessReview)."""

    user: str
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    group: str


# -- Status objects --------------------------------------------------------------------------------
class ApiStatusError(Exception):
    """An API error answered as a ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(res: _Resource | None, name: str | None, **extra: Any) -> dict:
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if res is not None:
        if res.group:
            details["group"] = res.group
        details["kind"] = res.plural
    details.update(extra)
    return details


def _not_found(res: _Resource, name: str) -> ApiStatusError:
    return ApiStatusError(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))


def _namespace_not_found(namespace: str) -> ApiStatusError:
    return ApiStatusError(404, "NotFound", f'namespaces "{namespace}" not found',
                          _details(RESOURCES["namespaces"], namespace))


def _already_exists(res: _Resource, name: str) -> ApiStatusError:
    return ApiStatusError(409, "AlreadyExists", f'{res.qualified} "{name}" already exists',
                          _details(res, name))


def _conflict(res: _Resource, name: str, why: str) -> ApiStatusError:
    return ApiStatusError(409, "Conflict", f'Operation cannot be fulfilled on {res.qualified} "{name}": {why}',
                          _details(res, name))


_STALE = "the object has been modified; please apply your changes to the latest version and try again"


def _bad_request(message: str) -> ApiStatusError:
    return ApiStatusError(400, "BadRequest", message)


_CAUSE_TYPES = {
    "Invalid value": "FieldValueInvalid",
    "Required value": "FieldValueRequired",
    "Duplicate value": "FieldValueDuplicate",
    "Unsupported value": "FieldValueNotSupported",
    "Forbidden": "FieldValueForbidden",
    "Too long": "FieldValueTooLong",
    "Too many": "FieldValueTooMany",
    "Not found": "FieldValueNotFound",
    "Internal error": "InternalError",
}


def _field_error_parts(error: str) -> tuple[str, str]:
    """``"status.devices[0].driver: Required value"`` -> (field, body)."""
    path, sep, body = error.partition(": ")
    if not sep:
        return "", error
    return path, body


def _invalid(res: _Resource, name: str, errors: list[str]) -> ApiStatusError:
    """422 like ``errors.NewInvalid``: causes per field error, the message aggregated."""
    unique: list[str] = []
    for error in errors:
        if error not in unique:
            unique.append(error)
    causes = []
    for error in unique:
        path, body = _field_error_parts(error)
        kind = next((t for prefix, t in _CAUSE_TYPES.items() if body.startswith(prefix)), "FieldValueInvalid")
        causes.append({"reason": kind, "message": body, "field": path})
    aggregate = unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"
    return ApiStatusError(
        422, "Invalid", f'{res.group_kind} "{name}" is invalid: {aggregate}',
        {"name": name, "group": res.group, "kind": res.kind, "causes": causes} if res.group
        else {"name": name, "kind": res.kind, "causes": causes},
    )


# -- small helpers ---------------------------------------------------------------------------------
def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
    r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$"
)
_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
              "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
              "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                  "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                  "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
_C_IDENTIFIER_MSG = ("a valid C identifier must start with alphabetic character or '_', followed by a string of "
                     "alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used "
                     "for validation is '[A-Za-z_][A-Za-z0-9_]*')")


def _dns_label_errors(path: str, value: Any) -> list[str]:
    if not isinstance(value, str) or not value:
        return [_fe_required(path)]
    errs = []
    if len(value) > 63:
        errs.append(_fe_invalid(path, value, "must be no more than 63 characters"))
    if not _DNS_LABEL.match(value):
        errs.append(_fe_invalid(path, value, _LABEL_MSG))
    return errs


def _dns_subdomain_errors(path: str, value: str) -> list[str]:
    errs = []
    if len(value) > 253:
        errs.append(_fe_invalid(path, value, "must be no more than 253 characters"))
    if not _DNS_SUBDOMAIN.match(value):
        errs.append(_fe_invalid(path, value, _SUBDOMAIN_MSG))
    return errs


def _driver_name_errors(path: str, value: Any) -> list[str]:
    """``validateDriverName``: required, <= 63, a DNS subdomain (checked lower-cased)."""
    if not isinstance(value, str) or not value:
        return [_fe_required(path)]
    errs = []
    if len(value) > 63:
        errs.append(_fe_too_long(path, 63))
    errs.extend(_dns_subdomain_errors(path, value.lower()))
    return errs


def _pool_name_errors(path: str, value: Any) -> list[str]:
    if not isinstance(value, str) or not value:
        return [_fe_required(path)]
    errs = []
    if len(value) > 253:
        errs.append(_fe_too_long(path, 253))
    for part in value.split("/"):
        errs.extend(_dns_subdomain_errors(path, part))
    return errs


def _qualified_name_errors(path: str, name: str) -> list[str]:
    """``validateQualifiedName`` for attribute and capacity names."""
    if not name:
        return [_fe_required(path, "name required")]
    parts = name.split("/")
    errs: list[str] = []

    def c_identifier(ident: str) -> None:
        if len(ident) > 32:
            errs.append(_fe_too_long(path, 32))
        if not _C_IDENTIFIER.match(ident):
            errs.append(_fe_invalid(path, ident, _C_IDENTIFIER_MSG))

    if len(parts) == 1:
        c_identifier(parts[0])
    elif len(parts) == 2:
        if not parts[0]:
            errs.append(_fe_required(path, "the domain must not be empty"))
        else:
            errs.extend(_driver_name_errors(path, parts[0]))
        if not parts[1]:
            errs.append(_fe_required(path, "the name must not be empty"))
        else:
            c_identifier(parts[1])
    else:
        errs.append(_fe_invalid(path, name, "must be a C identifier, optionally prefixed with a DNS subdomain and '/'"))
    return errs


def _key_path(path: str, key: str) -> str:
    """``field.Path.Key`` with validateMap's truncation of long keys (domain + 1 + id = 96)."""
    limit = 63 + 1 + 32
    if len(key) > limit:
        remaining = limit - 3
        key = key[: (remaining + 1) // 2] + "..." + key[len(key) - remaining // 2:]
    return f"{path}[{key}]"


def _json_equal(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _merge_patch(target: Any, patch: Any, strategic: bool = False) -> Any:
    """RFC 7386 JSON merge patch (lists replaced).  ``strategic``: drop ``$`` directives, which is
    what a strategic merge patch amounts to for lists without a patch strategy (all of DRA's)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if strategic and key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value, strategic)
    return result


# -- selectors -----------------------------------------------------------------------------------
def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


_LABEL_KEY = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _parse_label_selector(text: str) -> list[tuple[str, str, Any]]:
    requirements: list[tuple[str, str, Any]] = []
    for term in _split_top_level(text or ""):
        m = re.fullmatch(r"(\S+)\s+(in|notin)\s+\((.*)\)", term)
        if m:
            values = {v.strip() for v in m.group(3).split(",") if v.strip()}
            requirements.append((m.group(1), m.group(2), values))
            continue
        m = re.fullmatch(r"(\S+?)\s*(==|!=|=)\s*(\S*)", term)
        if m:
            op = {"==": "=", "=": "=", "!=": "!="}[m.group(2)]
            requirements.append((m.group(1), op, m.group(3)))
            continue
        if term.startswith("!") and _LABEL_KEY.match(term[1:].strip()):
            requirements.append((term[1:].strip(), "!exists", None))
            continue
        if _LABEL_KEY.match(term):
            requirements.append((term, "exists", None))
            continue
        raise _bad_request(f"unable to parse requirement: found '{term}', expected: in, notin, =, ==, !=, gt, lt")
    return requirements


def _labels_match(labels: dict, requirements: list[tuple[str, str, Any]]) -> bool:
    for key, op, value in requirements:
        present = key in labels
        actual = labels.get(key)
        if op == "=" and not (present and actual == value):
            return False
        if op == "!=" and present and actual == value:
            return False
        if op == "in" and not (present and actual in value):
            return False
        if op == "notin" and present and actual in value:
            return False
        if op == "exists" and not present:
            return False
        if op == "!exists" and present:
            return False
    return True


def _parse_field_selector(res: _Resource, text: str) -> list[tuple[str, str, str]]:
    requirements = []
    for term in _split_top_level(text or ""):
        m = re.fullmatch(r"([^=!]+?)\s*(==|!=|=)\s*(.*)", term)
        if not m:
            raise _bad_request(f"invalid field selector: '{term}'")
        key, op, value = m.group(1).strip(), m.group(2), m.group(3).strip()
        if key not in res.field_labels:
            raise _bad_request(f'field label not supported: {key}')
        requirements.append((key, "!=" if op == "!=" else "=", value))
    return requirements


def _field_value(obj: dict, label: str) -> str:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    if label == "metadata.name":
        return meta.get("name") or ""
    if label == "metadata.namespace":
        return meta.get("namespace") or ""
    if label == "spec.nodeName":
        return spec.get("nodeName") or ""
    if label == "spec.driver":
        return spec.get("driver") or ""
    if label == "spec.unschedulable":
        return "true" if spec.get("unschedulable") else "false"
    if label == "status.phase":
        return (obj.get("status") or {}).get("phase") or ""
    return ""


def _fields_match(obj: dict, requirements: list[tuple[str, str, str]]) -> bool:
    for label, op, value in requirements:
        actual = _field_value(obj, label)
        if (op == "=") != (actual == value):
            return False
    return True


@dataclass
class _Filter:
    res: _Resource
    namespace: str | None
    labels: list[tuple[str, str, Any]]
    fields: list[tuple[str, str, str]]

    def matches(self, obj: dict | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return _labels_match(meta.get("labels") or {}, self.labels) and _fields_match(obj, self.fields)


# -- events ----------------------------------------------------------------------------------------
@dataclass
class _Event:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    resource: str
    obj: dict
    old: dict | None


# -- status.devices ownership (server-side apply, per entry and top-level entry field) -------------
ManagerId = tuple[str, str, str]  # (manager, operation, subresource)
DeviceKey = tuple[Any, Any, Any, Any]  # (driver, device, pool, shareID or None)


def _device_key(entry: Any) -> DeviceKey:
    if not isinstance(entry, dict):
        return (None, None, None, None)
    return (entry.get("driver"), entry.get("device"), entry.get("pool"), entry.get("shareID") or None)


def _key_fields(key: DeviceKey) -> list[tuple[str, Any]]:
    driver, device, pool, share = key
    fields = [("device", device), ("driver", driver), ("pool", pool)]
    if share is not None:
        fields.append(("shareID", share))
    return fields


def _device_path(key: DeviceKey, fieldname: str | None = None) -> str:
    """Structured-merge-diff's path: ``.status.devices[device="d",driver="x",pool="p"].conditions``."""
    inner = ",".join(f"{name}={json.dumps(value)}" for name, value in _key_fields(key))
    path = f".status.devices[{inner}]"
    return path + (f".{fieldname}" if fieldname and fieldname != "." else "")


def _fields_v1_key(key: DeviceKey) -> str:
    return "k:" + json.dumps(dict(_key_fields(key)), separators=(",", ":"), sort_keys=True)


def _print_manager(mid: ManagerId, when: str | None, api_version: str = RESOURCE_API_VERSION) -> str:
    manager, operation, subresource = mid
    text = json.dumps(manager)
    if subresource:
        text += f" with subresource {json.dumps(subresource)}"
    if operation == "Update":
        text += f" using {api_version}" + (f" at {when}" if when else "")
    return text


@dataclass
class _Bookkeeping:
    """Per-object server-side state kept outside the object (managed fields)."""

    managers: dict[ManagerId, dict] = field(default_factory=dict)  # mid -> {"time", "fields"}
    devices: dict[DeviceKey, dict[str, set[ManagerId]]] = field(default_factory=dict)
    #: IPAMClaims: owners of each top-level ``status`` field (``ips``, ``ownerPod``, ``conditions``).
    status_fields: dict[str, set[ManagerId]] = field(default_factory=dict)

    def touch(self, mid: ManagerId, fields: dict | None = None) -> None:
        entry = self.managers.setdefault(mid, {"time": _now(), "fields": {}})
        entry["time"] = _now()
        if fields:
            entry["fields"] = _deep_merge(entry["fields"], fields)

    def owned_devices(self, mid: ManagerId) -> dict[DeviceKey, set[str]]:
        out: dict[DeviceKey, set[str]] = {}
        for key, fmap in self.devices.items():
            for fname, owners in fmap.items():
                if mid in owners:
                    out.setdefault(key, set()).add(fname)
        return out

    def render(self, api_version: str) -> list[dict]:
        entries = []
        mids = list(self.managers)
        for key, fmap in self.devices.items():
            for owners in fmap.values():
                for mid in owners:
                    if mid not in mids:
                        mids.append(mid)
        for owners in self.status_fields.values():
            for mid in sorted(owners):
                if mid not in mids:
                    mids.append(mid)
        for mid in mids:
            info = self.managers.get(mid) or {"time": _now(), "fields": {}}
            fields = copy.deepcopy(info["fields"])
            owned_status = sorted(f for f, owners in self.status_fields.items() if mid in owners)
            if owned_status:
                fields = _deep_merge(fields, {"f:status": {f"f:{f}": {} for f in owned_status}})
            owned = self.owned_devices(mid)
            if owned:
                devices: dict[str, Any] = {}
                for key, fnames in owned.items():
                    item: dict[str, Any] = {".": {}}
                    for name, _ in _key_fields(key):
                        item[f"f:{name}"] = {}
                    for fname in sorted(fnames - {"."}):
                        item[f"f:{fname}"] = {}
                    devices[_fields_v1_key(key)] = item
                fields = _deep_merge(fields, {"f:status": {"f:devices": devices}})
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


def _deep_merge(a: dict, b: dict) -> dict:
    out = copy.deepcopy(a)
    for key, value in b.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _entry_fields(entry: dict) -> list[str]:
    return [f for f in entry if f not in DEVICE_KEY_FIELDS]


def _record_update_ownership(book: _Bookkeeping, old: list, new: list, mid: ManagerId) -> None:
    """An Update operation (PUT, merge patch) owns what it changed; removed fields lose owners."""
    old_map = {_device_key(e): e for e in old if isinstance(e, dict)}
    new_map = {_device_key(e): e for e in new if isinstance(e, dict)}
    for key in list(book.devices):
        if key not in new_map:
            del book.devices[key]
    for key, entry in new_map.items():
        fmap = book.devices.setdefault(key, {})
        before = old_map.get(key)
        for fname in list(fmap):
            if fname != "." and fname not in entry:
                del fmap[fname]
        for fname in _entry_fields(entry):
            if before is None or not _json_equal(before.get(fname, None), entry[fname]) or fname not in before:
                fmap[fname] = {mid}
        if before is None:
            fmap.setdefault(".", set()).add(mid)
        dot = fmap.setdefault(".", set())
        for fname, owners in fmap.items():
            if fname != ".":
                dot.update(owners)


# -- the server ------------------------------------------------------------------------------------
class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address, handler, fake: "FakeApiServer") -> None:
        self.fake = fake
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        # As Go's net/http does: without it, headers and body written separately meet the
        # client's delayed ACK and every response waits ~40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.connections_lock:
                self.server.connections.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence stderr
        pass

    def _handle(self) -> None:
        self.server.fake._dispatch(self)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    # -- writing -------------------------------------------------------------------------------
    def send_json(self, code: int, body: Any) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.flush()

    def send_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is not None:
            return self.rfile.read(int(length)) if int(length) > 0 else b""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        return b""


@dataclass
class _Injected:
    code: int
    method: str | None
    path: str | None
    times: int
    reason: str
    message: str
    headers: dict[str, str]


_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
            409: "Conflict", 410: "Expired", 415: "UnsupportedMediaType", 422: "Invalid", 429: "TooManyRequests",
            500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}


class FakeApiServer:
    """A kube-apiserver double for ResourceClaims, ResourceSlices, Nodes, Namespaces (and IPAMClaims).

    ``FakeApiServer(directory=None, token=None, other_token=None, history_limit=1000)``; use as a
    context manager or call ``start()`` and ``close()``.  ``kubeconfig_path`` points the real client
    at it (``kubernetes.config.load_kube_config(config_file=...)``); ``other_kubeconfig_path`` does
    the same with ``other_token`` (user ``other_user``); ``write_kubeconfig(path, token)`` makes more.

    Test helpers (direct, no HTTP; each write bumps the resourceVersion and emits a watch event):
    ``add_namespace``, ``add_node``/``get_node``/``delete_node``, ``create_claim`` (stored as given,
    status included), ``get_claim``, ``list_claims``, ``set_claim_allocation`` (the scheduler's
    write; ``None`` deallocates and clears ``status.devices``), ``delete_claim``, ``create_slice``,
    ``get_slice``, ``list_slices``, ``delete_all_slices(node=None, driver=None)`` (kubelet at start),
    ``compact()``, ``events()``, ``resource_version``, ``fail_next(code, method=, path=, times=)``,
    ``authorizer`` (``RequestAttributes -> bool``), ``requests``/``requests_to()``/``reset_requests()``,
    ``internal_errors``, ``stop()``/``start()`` (same port, same data), ``close()``.

    IPAMClaims (``k8s.cni.cncf.io/v1alpha1``, namespaced, a custom resource): served only with
    ``FakeApiServer(ipamclaims=True)`` or after ``install_ipamclaims()`` (without the CRD the group
    is absent from discovery and its paths answer 404, as on a cluster without OVN-Kubernetes or
    KubeVirt's ipam-extensions).  get, list, watch, create, update, patch (merge), delete,
    deletecollection; ``status``: ``PUT`` (resourceVersion precondition), merge patch, and
    server-side apply with ownership of the top-level status fields (``ips``, ``ownerPod``,
    ``conditions``; conflicts unless ``force``).  Unknown fields and nulls are pruned, create drops
    ``status``, main-resource writes keep it, ``metadata.generation`` follows ``spec``.  Writes are
    validated against the upstream schema (``spec.network``/``spec.interface`` required when
    ``spec`` is set, ``status.ips`` required when ``status`` is set, ``ownerPod.name``,
    ``metav1.Condition`` fields) plus one check the real CRD does not make: every ``status.ips``
    entry must be a CIDR (``10.0.0.5/24``).  Helpers: ``create_ipamclaim``, ``get_ipamclaim``,
    ``list_ipamclaims``, ``set_ipamclaim_status`` (another controller's status write),
    ``delete_ipamclaim``, ``install_ipamclaims``/``uninstall_ipamclaims``.

    Not implemented (answered 400/405/415 rather than faked): JSON patch, apply outside
    ``resourceclaims/status`` and ``ipamclaims/status``, ``dryRun``; ignored:
    ``limit``/``continue`` (everything is returned at once), ``resourceVersion``/
    ``resourceVersionMatch`` on a list, ``sendInitialEvents``.
    """

    def __init__(
        self,
        directory: str | os.PathLike | None = None,
        *,
        token: str | None = None,
        other_token: str | None = None,
        user: str = "system:serviceaccount:kube-system:dracni",
        other_user: str = "system:serviceaccount:kube-system:other",
        history_limit: int = 1000,
        bookmark_interval: float | None = None,
        default_watch_timeout: float = 1800.0,
        namespaces: Iterable[str] = ("default", "kube-system"),
        ipamclaims: bool = False,
    ) -> None:
        self._own_dir = directory is None
        self.directory = str(directory) if directory is not None else tempfile.mkdtemp(prefix="fake-apiserver-")
        os.makedirs(self.directory, exist_ok=True)
        self.token = token or secrets.token_hex(16)
        self.other_token = other_token or secrets.token_hex(16)
        self.users: dict[str, str] = {self.token: user, self.other_token: other_user}
        self.user = user
        self.other_user = other_user
        self.history_limit = history_limit
        self.bookmark_interval = bookmark_interval
        self.default_watch_timeout = default_watch_timeout
        #: ``authorizer(RequestAttributes) -> bool``; None allows everything.
        self.authorizer: Callable[[RequestAttributes], bool] | None = None
        #: Every request received, in order.
        self.requests: list[RecordedRequest] = []
        #: Tracebacks of exceptions inside the fake (answered as 500): a test can assert it is empty.
        self.internal_errors: list[str] = []

        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._rv = 0
        self._objects: dict[tuple[str, str, str], dict] = {}
        self._books: dict[tuple[str, str, str], _Bookkeeping] = {}
        self._history: collections.deque[_Event] = collections.deque()
        self._history_rvs: collections.deque[int] = collections.deque()
        self._compacted_rv = 0  # watches must start at or after this resourceVersion
        self._injected: list[_Injected] = []
        self._epoch = 0  # bumped by stop(): running watches end
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None
        self.kubeconfig_path = os.path.join(self.directory, "kubeconfig")
        self.other_kubeconfig_path = os.path.join(self.directory, "kubeconfig-other")
        self._ipamclaims = bool(ipamclaims)
        for namespace in namespaces:
            self.add_namespace(namespace)

    # -- lifecycle ----------------------------------------------------------------------------------
    def __enter__(self) -> "FakeApiServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> "FakeApiServer":
        """Serve (again): the first start picks an ephemeral port, later ones reuse it."""
        if self._server is not None:
            return self
        server = _Server(("127.0.0.1", self.port or 0), _Handler, self)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fake-apiserver-{self.port}", daemon=True)
        self._thread.start()
        self.write_kubeconfig(self.kubeconfig_path, self.token)
        self.write_kubeconfig(self.other_kubeconfig_path, self.other_token)
        return self

    def stop(self) -> None:
        """Go down like a dead API server: refuse connections, cut open ones and watches.  Data stays."""
        server = self._server
        if server is None:
            return
        with self._cond:
            self._epoch += 1
            self._cond.notify_all()
        server.shutdown()
        server.server_close()
        with server.connections_lock:
            connections = list(server.connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def close(self) -> None:
        """Stop and remove the directory the fake created (a given directory is left alone)."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def write_kubeconfig(self, path: str | os.PathLike | None = None, token: str | None = None,
                         namespace: str = "default") -> str:
        """A kubeconfig for the fake's URL with a bearer token (the main one by default)."""
        if self.port is None:
            raise RuntimeError("start() the fake first: the kubeconfig needs its port")
        path = str(path or os.path.join(self.directory, f"kubeconfig-{secrets.token_hex(4)}"))
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": token if token is not None else self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}],
            "current-context": "fake",
        }
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            yaml.safe_dump(config, fh)
        os.replace(tmp, path)
        return path

    # -- test helpers (direct, not over HTTP) ------------------------------------------------------
    @property
    def resource_version(self) -> str:
        """The current global resourceVersion."""
        with self._lock:
            return str(self._rv)

    def add_namespace(self, name: str, labels: dict | None = None) -> dict:
        with self._lock:
            existing = self._objects.get(("namespaces", "", name))
            if existing is not None:
                return copy.deepcopy(existing)
            obj = {"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **(labels or {})}},
                   "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
            return self._create_object(RESOURCES["namespaces"], "", obj, ("kube-apiserver", "Update", ""))

    def add_node(self, name: str, labels: dict | None = None, uid: str | None = None) -> dict:
        """A Node as a kubelet registers it (``kubernetes.io/hostname`` label, Ready)."""
        obj = {
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                  **(labels or {})}},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "kubelet is posting ready status",
                                       "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}]},
        }
        if uid:
            obj["metadata"]["uid"] = uid
        with self._lock:
            return self._create_object(RESOURCES["nodes"], "", obj, ("kubelet", "Update", ""), keep_uid=True)

    def get_node(self, name: str) -> dict | None:
        return self._get_copy("nodes", "", name)

    def delete_node(self, name: str) -> dict | None:
        with self._lock:
            return self._remove("nodes", "", name)

    def create_claim(self, obj: dict) -> dict:
        """Store a ResourceClaim as given (status included, unvalidated); creates its namespace."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        namespace = meta.get("namespace") or "default"
        meta["namespace"] = namespace
        with self._lock:
            self.add_namespace(namespace)
            if ("resourceclaims", namespace, meta.get("name")) in self._objects:
                raise _already_exists(RESOURCES["resourceclaims"], meta.get("name"))
            if not obj.get("status"):
                obj.pop("status", None)
            return self._create_object(RESOURCES["resourceclaims"], namespace, obj,
                                       ("kube-controller-manager", "Update", ""), keep_uid=True)

    def get_claim(self, namespace: str, name: str) -> dict | None:
        return self._get_copy("resourceclaims", namespace, name)

    def list_claims(self, namespace: str | None = None) -> list[dict]:
        with self._lock:
            return [copy.deepcopy(o) for (r, ns, _), o in sorted(self._objects.items())
                    if r == "resourceclaims" and (namespace is None or ns == namespace)]

    def set_claim_allocation(self, namespace: str, name: str, allocation: dict | None,
                             reserved_for: list[dict] | None = None, *,
                             clear_devices: bool | None = None) -> dict:
        """Write ``status.allocation``/``reservedFor`` as the scheduler does (MODIFIED event).

        ``allocation=None`` deallocates; ``status.devices`` is then cleared too (as the
        resourceclaim controller does) unless ``clear_devices=False``.
        """
        with self._lock:
            claim = self._objects.get(("resourceclaims", namespace, name))
            if claim is None:
                raise _not_found(RESOURCES["resourceclaims"], name)
            status = copy.deepcopy(claim.get("status") or {})
            if allocation is None:
                status.pop("allocation", None)
                if clear_devices is None or clear_devices:
                    status.pop("devices", None)
            else:
                status["allocation"] = copy.deepcopy(allocation)
            if reserved_for:
                status["reservedFor"] = copy.deepcopy(reserved_for)
            else:
                status.pop("reservedFor", None)
            return self._scheduler_status(namespace, name, status)

    def _scheduler_status(self, namespace: str, name: str, status: dict) -> dict:
        key = ("resourceclaims", namespace, name)
        old = self._objects[key]
        new = copy.deepcopy(old)
        new["status"] = status
        if not status:
            new.pop("status", None)
        book = self._books.setdefault(key, _Bookkeeping())
        mid = ("kube-scheduler", "Update", "status")
        _record_update_ownership(book, (old.get("status") or {}).get("devices") or [],
                                 status.get("devices") or [], mid)
        book.touch(mid, {"f:status": {"f:allocation": {}, "f:reservedFor": {}}})
        return self._store(RESOURCES["resourceclaims"], namespace, name, new, "MODIFIED", old)

    def delete_claim(self, namespace: str, name: str) -> dict | None:
        """Remove a claim now (finalizers ignored); DELETED event.  None when it was not there."""
        with self._lock:
            return self._remove("resourceclaims", namespace, name)

    def create_slice(self, obj: dict) -> dict:
        """Store a ResourceSlice (validated like a create over HTTP)."""
        with self._lock:
            return self._create(RESOURCES["resourceslices"], "", copy.deepcopy(obj), ("test", "Update", ""))

    def get_slice(self, name: str) -> dict | None:
        return self._get_copy("resourceslices", "", name)

    def list_slices(self, node: str | None = None, driver: str | None = None) -> list[dict]:
        with self._lock:
            out = []
            for (resource, _, _), obj in sorted(self._objects.items()):
                if resource != "resourceslices":
                    continue
                spec = obj.get("spec") or {}
                if node is not None and spec.get("nodeName") != node:
                    continue
                if driver is not None and spec.get("driver") != driver:
                    continue
                out.append(copy.deepcopy(obj))
            return out

    def delete_all_slices(self, node: str | None = None, driver: str | None = None) -> int:
        """Delete slices (of ``node``/``driver`` when given), as kubelet does at start; DELETED events."""
        with self._lock:
            victims = [s["metadata"]["name"] for s in self.list_slices(node=node, driver=driver)]
            for name in victims:
                self._remove("resourceslices", "", name)
            return len(victims)

    # -- IPAMClaims (k8s.cni.cncf.io/v1alpha1) ----------------------------------------------------
    @property
    def ipamclaims_installed(self) -> bool:
        """Whether the IPAMClaim CRD is served (discovery and ``/apis/k8s.cni.cncf.io/v1alpha1``)."""
        return self._ipamclaims

    def install_ipamclaims(self) -> None:
        """Start serving the IPAMClaim CRD (as if ``spec/crds/ipamclaims.k8s.cni.cncf.io.yaml`` was applied)."""
        with self._lock:
            self._ipamclaims = True

    def uninstall_ipamclaims(self) -> int:
        """Stop serving the CRD; its objects go away (DELETED events), as when a CRD is deleted."""
        with self._lock:
            self._ipamclaims = False
            victims = [(ns, name) for (r, ns, name) in sorted(self._objects) if r == "ipamclaims"]
            for namespace, name in victims:
                self._remove("ipamclaims", namespace, name)
            return len(victims)

    def create_ipamclaim(self, namespace: str, name: str, network: str, interface: str | None = None,
                         ips: list[str] | None = None, *, owner_pod: str | None = None,
                         conditions: list[dict] | None = None, labels: dict | None = None,
                         owner_references: list[dict] | None = None,
                         manager: str = "virt-controller") -> dict:
        """Store an IPAMClaim as KubeVirt creates one; creates its namespace; ADDED event.

        ``ips``/``owner_pod``/``conditions`` pre-fill ``status`` (as if the IPAM plugin had already
        written it) in the same event.  Validated like an API write (``ApiStatusError`` 422), except
        that ``interface=None`` leaves ``spec.interface`` out, which the upstream CRD would reject.
        Needs the CRD installed (``ipamclaims=True``/``install_ipamclaims()``).
        """
        if not self._ipamclaims:
            raise RuntimeError("the IPAMClaim CRD is not installed: FakeApiServer(ipamclaims=True) "
                               "or install_ipamclaims()")
        res = RESOURCES["ipamclaims"]
        spec: dict[str, Any] = {"network": network}
        if interface is not None:
            spec["interface"] = interface
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if labels:
            meta["labels"] = dict(labels)
        if owner_references:
            meta["ownerReferences"] = copy.deepcopy(owner_references)
        obj: dict[str, Any] = {"apiVersion": IPAM_API_VERSION, "kind": res.kind, "metadata": meta, "spec": spec}
        status: dict[str, Any] = {}
        if ips is not None or owner_pod is not None or conditions is not None:
            status["ips"] = list(ips or [])
        if owner_pod is not None:
            status["ownerPod"] = {"name": owner_pod}
        if conditions is not None:
            status["conditions"] = copy.deepcopy(conditions)
        if status:
            obj["status"] = status
        obj = _ipam_prune(obj)
        errs = _dns_subdomain_errors("metadata.name", name) if name else [_fe_required("metadata.name")]
        errs += _validate_ipamclaim(obj, require_interface=interface is not None)
        if errs:
            raise _invalid(res, name, errs)
        with self._lock:
            self.add_namespace(namespace)
            key = ("ipamclaims", namespace, name)
            if key in self._objects:
                raise _already_exists(res, name)
            book = self._books.setdefault(key, _Bookkeeping())
            book.status_fields = {f: {(manager, "Update", "status")} for f in status}
            return self._create_object(res, namespace, obj, (manager, "Update", ""))

    def get_ipamclaim(self, namespace: str, name: str) -> dict | None:
        return self._get_copy("ipamclaims", namespace, name)

    def list_ipamclaims(self, namespace: str | None = None) -> list[dict]:
        with self._lock:
            return [copy.deepcopy(o) for (r, ns, _), o in sorted(self._objects.items())
                    if r == "ipamclaims" and (namespace is None or ns == namespace)]

    def set_ipamclaim_status(self, namespace: str, name: str, status: dict | None, *,
                             manager: str = "ovnkube-controller") -> dict:
        """Replace ``status`` as another controller's status ``PUT`` would (validated; MODIFIED event
        unless nothing changed); ``None`` clears it."""
        with self._lock:
            current = self._ipamclaim(namespace, name)
            return self._ipam_status_update(namespace, name, current, copy.deepcopy(status or {}),
                                            (manager, "Update", "status"))

    def delete_ipamclaim(self, namespace: str, name: str) -> dict | None:
        """Remove an IPAMClaim now (finalizers ignored); DELETED event.  None when it was not there."""
        with self._lock:
            return self._remove("ipamclaims", namespace, name)

    def compact(self) -> str:
        """Forget the event history: a watch from any older resourceVersion gets 410 Expired."""
        with self._cond:
            self._history.clear()
            self._history_rvs.clear()
            self._compacted_rv = self._rv
            self._cond.notify_all()
            return str(self._rv)

    def events(self) -> list[dict]:
        """The retained watch history as ``{"type", "object"}`` dicts (oldest first)."""
        with self._lock:
            return [{"type": e.type, "resource": e.resource, "object": copy.deepcopy(e.obj)} for e in self._history]

    def fail_next(self, code: int, *, method: str | None = None, path: str | None = None, times: int = 1,
                  reason: str | None = None, message: str | None = None,
                  headers: dict[str, str] | None = None) -> None:
        """Answer the next ``times`` matching requests (method, path substring) with a Status error."""
        with self._lock:
            self._injected.append(_Injected(code, method.upper() if method else None, path, times,
                                            reason or _REASONS.get(code, "Unknown"),
                                            message or f"injected failure {code}", headers or {}))

    def reset_requests(self) -> None:
        with self._lock:
            self.requests.clear()

    def requests_to(self, method: str | None = None, path_contains: str | None = None) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests
                    if (method is None or r.method == method.upper())
                    and (path_contains is None or path_contains in r.path)]

    # -- storage core (call with the lock held) -----------------------------------------------------
    def _get_copy(self, resource: str, namespace: str, name: str) -> dict | None:
        with self._lock:
            obj = self._objects.get((resource, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def _store(self, res: _Resource, namespace: str, name: str, obj: dict, etype: str,
               old: dict | None) -> dict:
        """Persist ``obj`` with a new resourceVersion and record the watch event."""
        self._rv += 1
        obj["apiVersion"] = res.api_version
        obj["kind"] = res.kind
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self._rv)
        key = (res.plural, namespace, name)
        book = self._books.get(key)
        if book is not None:
            rendered = book.render(res.api_version)
            if rendered:
                meta["managedFields"] = rendered
            else:
                meta.pop("managedFields", None)
        if etype == "DELETED":
            self._objects.pop(key, None)
            self._books.pop(key, None)
        else:
            self._objects[key] = obj
        self._record_event(_Event(self._rv, etype, res.plural, copy.deepcopy(obj),
                                  copy.deepcopy(old) if old is not None else None))
        return copy.deepcopy(obj)

    def _record_event(self, event: _Event) -> None:
        self._history.append(event)
        self._history_rvs.append(event.rv)
        while len(self._history) > max(self.history_limit, 0):
            dropped = self._history.popleft()
            self._history_rvs.popleft()
            self._compacted_rv = max(self._compacted_rv, dropped.rv)
        self._cond.notify_all()

    def _create_object(self, res: _Resource, namespace: str, obj: dict, mid: ManagerId,
                       keep_uid: bool = False) -> dict:
        meta = obj.setdefault("metadata", {})
        name = meta.get("name")
        if not name and meta.get("generateName"):
            name = meta["generateName"] + "".join(secrets.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
            meta["name"] = name
        if (res.plural, namespace, name) in self._objects:
            raise _already_exists(res, name)
        if res.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not (keep_uid and meta.get("uid")):
            meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        for transient in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields",
                          "selfLink"):
            meta.pop(transient, None)
        if res.plural in ("resourceclaims", "resourceslices", "ipamclaims"):
            meta["generation"] = 1
        book = self._books.setdefault((res.plural, namespace, name), _Bookkeeping())
        touched = {f"f:{k}": {} for k in obj if k not in ("apiVersion", "kind", "metadata", "status")}
        if meta.get("labels"):
            touched["f:metadata"] = {"f:labels": {f"f:{k}": {} for k in meta["labels"]}}
        book.touch(mid, touched or {"f:metadata": {}})
        devices = (obj.get("status") or {}).get("devices") if isinstance(obj.get("status"), dict) else None
        if isinstance(devices, list):
            _record_update_ownership(book, [], devices, mid)
        return self._store(res, namespace, name, obj, "ADDED", None)

    def _remove(self, resource: str, namespace: str, name: str) -> dict | None:
        res = RESOURCES[resource]
        old = self._objects.get((resource, namespace, name))
        if old is None:
            return None
        return self._store(res, namespace, name, copy.deepcopy(old), "DELETED", old)

    # -- HTTP dispatch -----------------------------------------------------------------------------
    def _dispatch(self, handler: _Handler) -> None:
        parts = urlsplit(handler.path)
        path = unquote(parts.path).rstrip("/") or "/"
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        content_type = (handler.headers.get("Content-Type") or "").split(";")[0].strip() or None
        record = RecordedRequest(handler.command, path, query, content_type, query.get("fieldManager"), None,
                                 user_agent=handler.headers.get("User-Agent"))
        with self._lock:
            self.requests.append(record)
        try:
            raw = handler.read_body()
            record.user = self._authenticate(handler)
            record.body = self._decode_body(raw, content_type) if raw else None
            self._maybe_inject(handler.command, path)
            code, body = self._route(handler, record, path, query, raw, content_type)
            if code is None:  # a watch stream answered already
                record.status = 200
                return
        except ApiStatusError as err:
            code, body = err.code, err.status()
        except _BodyError as err:
            code, body = 400, ApiStatusError(400, "BadRequest", str(err)).status()
        except (BrokenPipeError, ConnectionResetError):
            return
        except Exception as exc:  # a bug in the fake: answer 500 and keep it for the test to see
            detail = "".join(traceback.format_exception(exc))
            with self._lock:
                self.internal_errors.append(detail)
            code, body = 500, ApiStatusError(500, "InternalError", f"fake API server bug: {exc!r}").status()
        record.status = code
        try:
            handler.send_json(code, body)
        except (BrokenPipeError, ConnectionResetError, OSError):
            handler.close_connection = True

    @staticmethod
    def _decode_body(raw: bytes, content_type: str | None) -> Any:
        text = raw.decode("utf-8", "replace")
        try:
            return json.loads(text)
        except ValueError:
            pass
        if content_type and "yaml" in content_type:
            try:
                return yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise _BodyError(f"error decoding YAML: {exc}") from None
        raise _BodyError(f"couldn't get version/kind; json parse error: invalid JSON: {text[:80]!r}")

    def _authenticate(self, handler: _Handler) -> str:
        header = handler.headers.get("Authorization") or ""
        scheme, _, token = header.partition(" ")
        user = self.users.get(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise ApiStatusError(401, "Unauthorized", "Unauthorized")
        return user

    def _maybe_inject(self, method: str, path: str) -> None:
        with self._lock:
            for injected in self._injected:
                if injected.method and injected.method != method:
                    continue
                if injected.path and injected.path not in path:
                    continue
                injected.times -= 1
                if injected.times <= 0:
                    self._injected.remove(injected)
                raise ApiStatusError(injected.code, injected.reason, injected.message)

    def _authorize(self, user: str, verb: str, res: _Resource, subresource: str, namespace: str,
                   name: str) -> None:
        if self.authorizer is None:
            return
        attrs = RequestAttributes(user, verb, res.plural, subresource, namespace, name, res.group)
        if self.authorizer(attrs):
            return
        what = f"{res.plural}/{subresource}" if subresource else res.plural
        subject = f'{res.qualified} "{name}"' if name else res.qualified
        where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        group = f'in API group "{res.group}"'
        raise ApiStatusError(403, "Forbidden",
                             f'{subject} is forbidden: User "{user}" cannot {verb} resource "{what}" {group} {where}',
                             _details(res, name or None))

    def _route(self, handler: _Handler, record: RecordedRequest, path: str, query: dict, raw: bytes,
               content_type: str | None) -> tuple[int | None, Any]:
        method = handler.command
        segments = [s for s in path.split("/") if s]
        discovery = self._discovery(segments)
        if discovery is not None:
            if method != "GET":
                raise _method_not_allowed()
            return 200, discovery

        if segments[:2] == ["api", "v1"]:
            rest = segments[2:]
            group = ""
        elif segments[:3] == ["apis", RESOURCE_GROUP, RESOURCE_VERSION]:
            rest = segments[3:]
            group = RESOURCE_GROUP
        elif segments[:3] == ["apis", IPAM_GROUP, IPAM_VERSION] and self._ipamclaims:
            rest = segments[3:]
            group = IPAM_GROUP
        else:
            raise _path_not_found()

        namespace = ""
        if group and len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        elif group == "" and rest[:1] == ["namespaces"] and len(rest) >= 3:
            raise _path_not_found()  # no namespaced core resources here
        if not rest:
            raise _path_not_found()
        res = RESOURCES.get(rest[0])
        if res is None or (res.group != group):
            raise _path_not_found()
        if namespace and not res.namespaced:
            raise _path_not_found()
        name = rest[1] if len(rest) >= 2 else ""
        subresource = rest[2] if len(rest) >= 3 else ""
        if len(rest) > 3 or (subresource and (res.plural not in _STATUS_SUBRESOURCE or subresource != "status")):
            raise _path_not_found()

        body = record.body
        user = record.user or ""
        if "dryRun" in query and method != "GET":
            raise _bad_request("the fake API server does not implement dryRun")
        if not name:
            if method == "GET":
                watching = query.get("watch") in ("true", "1")
                self._authorize(user, "watch" if watching else "list", res, "", namespace, "")
                flt = self._filter(res, namespace or None, query)
                if watching:
                    self._serve_watch(handler, res, flt, query)
                    return None, None
                return 200, self._list(res, flt)
            if res.namespaced and not namespace:
                raise _method_not_allowed()
            if method == "POST":
                if "create" not in res.verbs:
                    raise _method_not_allowed()
                self._authorize(user, "create", res, "", namespace, "")
                return 201, self._http_create(res, namespace, body, query, record)
            if method == "DELETE":
                if "deletecollection" not in res.verbs:
                    raise _method_not_allowed()
                self._authorize(user, "deletecollection", res, "", namespace, "")
                return 200, self._delete_collection(res, self._filter(res, namespace or None, query))
            raise _method_not_allowed()

        verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
        if verb is None or verb not in res.verbs or (subresource and verb == "delete"):
            raise _method_not_allowed()
        self._authorize(user, verb, res, subresource, namespace, name)
        if method == "GET":
            with self._lock:
                obj = self._objects.get((res.plural, namespace, name))
                if obj is None:
                    raise _not_found(res, name)
                return 200, copy.deepcopy(obj)
        manager_name = query.get("fieldManager") or _manager_from_user_agent(record.user_agent)
        if len(manager_name) > 128:
            raise _invalid_options("PatchOptions" if method == "PATCH" else "UpdateOptions",
                                   "fieldManager: Too long: may not be more than 128 bytes")
        if method == "PUT":
            if subresource == "status" and res.plural == "ipamclaims":
                return 200, self._ipam_put_status(namespace, name, body, (manager_name, "Update", "status"))
            if subresource == "status":
                return 200, self._update_claim_status(namespace, name, body, (manager_name, "Update", "status"))
            return 200, self._http_update(res, namespace, name, body, (manager_name, "Update", ""))
        if method == "DELETE":
            return 200, self._http_delete(res, namespace, name, body)
        # PATCH
        if content_type == APPLY_PATCH:
            if not query.get("fieldManager"):
                raise _invalid_options("PatchOptions", "fieldManager: Required value: is required for apply patch")
            if res.plural not in _STATUS_SUBRESOURCE or subresource != "status":
                raise ApiStatusError(415, "UnsupportedMediaType", "the fake API server implements apply only "
                                     "for resourceclaims/status and ipamclaims/status")
            force = query.get("force") in ("true", "1")
            if res.plural == "ipamclaims":
                return 200, self._ipam_apply_status(namespace, name, body, query["fieldManager"], force)
            return 200, self._apply_claim_status(namespace, name, body, query["fieldManager"], force)
        if "force" in query:
            raise _invalid_options("PatchOptions", "force: Forbidden: may not be specified for non-apply patch")
        if res.plural == "ipamclaims" and content_type == STRATEGIC_MERGE_PATCH:
            # Custom resources have no strategic merge patch (the client sends one when asked for a
            # JSON patch with a non-list body).
            raise ApiStatusError(
                415, "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: "
                f"{JSON_PATCH}, {MERGE_PATCH}, {APPLY_PATCH}")
        if content_type in (MERGE_PATCH, STRATEGIC_MERGE_PATCH):
            strategic = content_type == STRATEGIC_MERGE_PATCH
            if not isinstance(body, dict):
                raise _bad_request("the body of the patch must be a JSON object")
            if subresource == "status" and res.plural == "ipamclaims":
                return 200, self._ipam_patch_status(namespace, name, body, (manager_name, "Update", "status"))
            if subresource == "status":
                return 200, self._patch_claim_status(namespace, name, body, strategic,
                                                     (manager_name, "Update", "status"))
            return 200, self._patch_object(res, namespace, name, body, strategic, (manager_name, "Update", ""))
        raise ApiStatusError(
            415, "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{MERGE_PATCH}, {STRATEGIC_MERGE_PATCH}, {APPLY_PATCH} (the fake has no {JSON_PATCH})")

    # -- discovery ------------------------------------------------------------------------------
    def _discovery(self, segments: list[str]) -> Any:
        if segments == ["version"]:
            return {**KUBERNETES_VERSION, "gitCommit": "0" * 40, "gitTreeState": "clean",
                    "buildDate": "2025-08-27T00:00:00Z", "goVersion": "go1.24.6", "compiler": "gc",
                    "platform": "linux/amd64"}
        if segments == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{self.port}"}]}
        group_version = {"groupVersion": RESOURCE_API_VERSION, "version": RESOURCE_VERSION}
        group = {"name": RESOURCE_GROUP, "versions": [group_version], "preferredVersion": group_version}
        ipam_version = {"groupVersion": IPAM_API_VERSION, "version": IPAM_VERSION}
        ipam_group = {"name": IPAM_GROUP, "versions": [ipam_version], "preferredVersion": ipam_version}
        if segments == ["apis"]:
            groups = [group, ipam_group] if self._ipamclaims else [group]
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        if segments == ["apis", RESOURCE_GROUP]:
            return {"kind": "APIGroup", "apiVersion": "v1", **group}
        if self._ipamclaims and segments == ["apis", IPAM_GROUP]:
            return {"kind": "APIGroup", "apiVersion": "v1", **ipam_group}
        if self._ipamclaims and segments == ["apis", IPAM_GROUP, IPAM_VERSION]:
            return self._resource_list(IPAM_API_VERSION, ["ipamclaims"])
        if segments == ["api", "v1"]:
            return self._resource_list("v1", ["nodes", "namespaces"])
        if segments == ["apis", RESOURCE_GROUP, RESOURCE_VERSION]:
            return self._resource_list(RESOURCE_API_VERSION, ["resourceclaims", "resourceslices"])
        return None

    @staticmethod
    def _resource_list(group_version: str, plurals: list[str]) -> dict:
        resources = []
        for plural in plurals:
            res = RESOURCES[plural]
            resources.append({"name": plural, "singularName": res.singular, "namespaced": res.namespaced,
                              "kind": res.kind, "verbs": list(res.verbs)})
            if plural in _STATUS_SUBRESOURCE:
                resources.append({"name": f"{plural}/status", "singularName": "", "namespaced": True,
                                  "kind": res.kind, "verbs": ["get", "patch", "update"]})
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}

    # -- list / watch ----------------------------------------------------------------------------
    def _filter(self, res: _Resource, namespace: str | None, query: dict) -> _Filter:
        # Listing in a namespace that does not exist is an empty list, as on the real server.
        return _Filter(res, namespace, _parse_label_selector(query.get("labelSelector", "")),
                       _parse_field_selector(res, query.get("fieldSelector", "")))

    def _list(self, res: _Resource, flt: _Filter) -> dict:
        with self._lock:
            items = []
            for (resource, _, _), obj in sorted(self._objects.items()):
                if resource == res.plural and flt.matches(obj):
                    item = copy.deepcopy(obj)
                    item.pop("kind", None)  # list items come without kind/apiVersion, like the real server
                    item.pop("apiVersion", None)
                    items.append(item)
            return {"kind": f"{res.kind}List", "apiVersion": res.api_version,
                    "metadata": {"resourceVersion": str(self._rv)}, "items": items}

    def _serve_watch(self, handler: _Handler, res: _Resource, flt: _Filter, query: dict) -> None:
        rv_text = query.get("resourceVersion", "")
        try:
            timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else self.default_watch_timeout
        except ValueError:
            raise _bad_request(f"invalid timeoutSeconds: {query.get('timeoutSeconds')!r}") from None
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        if rv_text not in ("", "0"):
            try:
                start_rv = int(rv_text)
            except ValueError:
                raise ApiStatusError(400, "BadRequest", f"invalid resource version: {rv_text}") from None
        else:
            start_rv = None
        deadline = time.monotonic() + timeout

        with self._lock:
            epoch = self._epoch
            initial: list[dict] = []
            if start_rv is None:
                for (resource, _, _), obj in sorted(self._objects.items()):
                    if resource == res.plural and flt.matches(obj):
                        initial.append({"type": "ADDED", "object": copy.deepcopy(obj)})
                last = self._rv
            else:
                last = start_rv
        handler.start_stream()
        try:
            for event in initial:
                handler.send_chunk(_line(event))
            next_bookmark = time.monotonic() + self.bookmark_interval if bookmarks and self.bookmark_interval else None
            while True:
                pending: list[dict] = []
                expired: dict | None = None
                with self._cond:
                    while True:
                        if self._epoch != epoch:  # the server went down: cut the stream, no clean end
                            handler.close_connection = True
                            return
                        if last < self._compacted_rv:
                            expired = ApiStatusError(
                                410, "Expired", f"too old resource version: {last} ({self._compacted_rv + 1})").status()
                            break
                        if self._rv > last:
                            index = bisect.bisect_right(self._history_rvs, last)
                            for event in list(self._history)[index:]:
                                converted = _watch_event(event, flt)
                                if converted is not None:
                                    pending.append(converted)
                            last = self._rv
                            if pending:
                                break
                        now = time.monotonic()
                        if now >= deadline or (next_bookmark is not None and now >= next_bookmark):
                            break
                        wake = deadline if next_bookmark is None else min(deadline, next_bookmark)
                        self._cond.wait(timeout=min(max(wake - now, 0.0), 0.5))
                if expired is not None:
                    handler.send_chunk(_line({"type": "ERROR", "object": expired}))
                    break
                for event in pending:
                    handler.send_chunk(_line(event))
                now = time.monotonic()
                if bookmarks and next_bookmark is not None and now >= next_bookmark:
                    handler.send_chunk(_line(_bookmark(res, last)))
                    next_bookmark = now + (self.bookmark_interval or 0)
                if now >= deadline:
                    if bookmarks:
                        handler.send_chunk(_line(_bookmark(res, last)))
                    break
            handler.end_stream()
        except (BrokenPipeError, ConnectionResetError, OSError):
            handler.close_connection = True

    # -- generic create / update / delete -----------------------------------------------------
    def _http_create(self, res: _Resource, namespace: str, body: Any, query: dict, record: RecordedRequest) -> dict:
        obj = _require_object(body, res)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise _bad_request("metadata must be an object")
        if res.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise _bad_request("the namespace of the provided object does not match the namespace sent on the request")
        manager = query.get("fieldManager") or _manager_from_user_agent(record.user_agent)
        with self._lock:
            if res.namespaced and ("namespaces", "", namespace) not in self._objects:
                raise _namespace_not_found(namespace)
            return self._create(res, namespace, obj, (manager, "Update", ""))

    def _create(self, res: _Resource, namespace: str, obj: dict, mid: ManagerId) -> dict:
        meta = obj.setdefault("metadata", {})
        name = meta.get("name") or ""
        if not name and not meta.get("generateName"):
            raise _invalid(res, "", [_fe_required("metadata.name", "name or generateName is required")])
        if name:
            errs = _dns_subdomain_errors("metadata.name", name)
            if errs:
                raise _invalid(res, name, errs)
        if res.plural == "resourceclaims":
            obj.pop("status", None)  # PrepareForCreate clears the status
        if res.plural == "ipamclaims":
            obj = _ipam_prune(obj)
            obj.pop("status", None)  # a CRD with a status subresource: create drops status
            errs = _validate_ipamclaim(obj)
            if errs:
                raise _invalid(res, name, errs)
        if res.plural == "resourceslices":
            errs = _validate_slice(obj)
            if errs:
                raise _invalid(res, name, errs)
        return self._create_object(res, namespace, obj, mid)

    def _http_update(self, res: _Resource, namespace: str, name: str, body: Any, mid: ManagerId) -> dict:
        obj = _require_object(body, res)
        meta = obj.get("metadata") or {}
        if meta.get("name") and meta["name"] != name:
            raise _bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
        if res.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise _bad_request("the namespace of the provided object does not match the namespace sent on the request")
        with self._lock:
            return self._update(res, namespace, name, obj, mid)

    def _check_preconditions(self, res: _Resource, name: str, current: dict, meta: dict) -> None:
        cur_meta = current["metadata"]
        uid = meta.get("uid")
        if uid and uid != cur_meta.get("uid"):
            raise _conflict(res, name, f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                                       f"{cur_meta.get('uid')}")
        rv = meta.get("resourceVersion")
        if rv and rv != cur_meta.get("resourceVersion"):
            raise _conflict(res, name, _STALE)

    def _update(self, res: _Resource, namespace: str, name: str, obj: dict, mid: ManagerId) -> dict:
        """PUT on the main resource: metadata and spec (claims: spec immutable; status kept)."""
        key = (res.plural, namespace, name)
        current = self._objects.get(key)
        if current is None:
            raise _not_found(res, name)
        meta = obj.setdefault("metadata", {})
        self._check_preconditions(res, name, current, meta)
        new = copy.deepcopy(obj)
        new_meta = new["metadata"]
        cur_meta = current["metadata"]
        for system in ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds"):
            if system in cur_meta:
                new_meta[system] = cur_meta[system]
            else:
                new_meta.pop(system, None)
        new_meta["name"] = name
        if res.namespaced:
            new_meta["namespace"] = namespace
        new_meta.pop("managedFields", None)
        if "status" in current:
            new["status"] = copy.deepcopy(current["status"])
        else:
            new.pop("status", None)
        errs: list[str] = []
        if res.plural == "resourceclaims" and not _json_equal(new.get("spec"), current.get("spec")):
            errs.append(_fe_invalid("spec", "<value omitted>", "field is immutable"))
        if res.plural == "resourceslices":
            errs.extend(_validate_slice(new, current))
            if not _json_equal(new.get("spec"), current.get("spec")):
                new_meta["generation"] = int(cur_meta.get("generation") or 1) + 1
        if res.plural == "ipamclaims":
            new = _ipam_prune(new)
            new_meta = new["metadata"]
            errs.extend(_validate_ipamclaim({k: v for k, v in new.items() if k != "status"}))
            if not _json_equal(new.get("spec"), current.get("spec")):
                new_meta["generation"] = int(cur_meta.get("generation") or 1) + 1
        if errs:
            raise _invalid(res, name, errs)
        if _same_object(new, current):
            return copy.deepcopy(current)
        book = self._books.setdefault(key, _Bookkeeping())
        book.touch(mid, {f"f:{k}": {} for k in new if k not in ("apiVersion", "kind", "metadata", "status")})
        if new_meta.get("deletionTimestamp") and not new_meta.get("finalizers"):
            return self._store(res, namespace, name, new, "DELETED", current)
        return self._store(res, namespace, name, new, "MODIFIED", current)

    def _patch_object(self, res: _Resource, namespace: str, name: str, patch: dict, strategic: bool,
                      mid: ManagerId) -> dict:
        with self._lock:
            current = self._objects.get((res.plural, namespace, name))
            if current is None:
                raise _not_found(res, name)
            merged = _merge_patch(current, patch, strategic)
            meta = merged.setdefault("metadata", {})
            patch_rv = (patch.get("metadata") or {}).get("resourceVersion")
            meta["resourceVersion"] = patch_rv or current["metadata"]["resourceVersion"]
            return self._update(res, namespace, name, merged, mid)

    def _http_delete(self, res: _Resource, namespace: str, name: str, body: Any) -> dict:
        with self._lock:
            current = self._objects.get((res.plural, namespace, name))
            if current is None:
                raise _not_found(res, name)
            preconditions = (body or {}).get("preconditions") if isinstance(body, dict) else None
            if preconditions:
                cur_meta = current["metadata"]
                if preconditions.get("uid") and preconditions["uid"] != cur_meta.get("uid"):
                    raise _conflict(res, name, f"Precondition failed: UID in precondition: {preconditions['uid']}, "
                                               f"UID in object meta: {cur_meta.get('uid')}")
                if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != cur_meta.get("resourceVersion"):
                    raise _conflict(res, name, f"Precondition failed: ResourceVersion in precondition: "
                                               f"{preconditions['resourceVersion']}, ResourceVersion in object meta: "
                                               f"{cur_meta.get('resourceVersion')}")
            if current["metadata"].get("finalizers"):
                if current["metadata"].get("deletionTimestamp"):
                    return copy.deepcopy(current)
                new = copy.deepcopy(current)
                new["metadata"]["deletionTimestamp"] = _now()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                return self._store(res, namespace, name, new, "MODIFIED", current)
            return self._store(res, namespace, name, copy.deepcopy(current), "DELETED", current)

    def _delete_collection(self, res: _Resource, flt: _Filter) -> dict:
        with self._lock:
            deleted = []
            for (resource, ns, name), obj in sorted(self._objects.items()):
                if resource == res.plural and flt.matches(obj):
                    item = self._http_delete(res, ns, name, None)
                    item.pop("kind", None)
                    item.pop("apiVersion", None)
                    deleted.append(item)
            return {"kind": f"{res.kind}List", "apiVersion": res.api_version,
                    "metadata": {"resourceVersion": str(self._rv)}, "items": deleted}

    # -- IPAMClaim status ---------------------------------------------------------------------------
    def _ipamclaim(self, namespace: str, name: str) -> dict:
        obj = self._objects.get(("ipamclaims", namespace, name))
        if obj is None:
            raise _not_found(RESOURCES["ipamclaims"], name)
        return obj

    def _ipam_put_status(self, namespace: str, name: str, body: Any, mid: ManagerId) -> dict:
        """``PUT .../ipamclaims/{name}/status``: the body's ``status`` replaces the stored one (absent
        clears it); metadata and spec changes in the body are ignored; resourceVersion precondition."""
        res = RESOURCES["ipamclaims"]
        obj = _require_object(body, res)
        meta = obj.get("metadata") or {}
        if meta.get("name") and meta["name"] != name:
            raise _bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise _bad_request("the namespace of the provided object does not match the namespace sent on the request")
        with self._lock:
            current = self._ipamclaim(namespace, name)
            self._check_preconditions(res, name, current, meta)
            status = obj.get("status")
            return self._ipam_status_update(namespace, name, current,
                                            copy.deepcopy(status) if isinstance(status, dict) else status, mid)

    def _ipam_patch_status(self, namespace: str, name: str, patch: dict, mid: ManagerId) -> dict:
        """Merge patch on ``.../status``: applied to the whole object, only ``status`` is kept."""
        res = RESOURCES["ipamclaims"]
        with self._lock:
            current = self._ipamclaim(namespace, name)
            self._check_preconditions(res, name, current, patch.get("metadata") or {})
            merged = _merge_patch(current, patch)
            return self._ipam_status_update(namespace, name, current, merged.get("status"), mid)

    def _ipam_status_update(self, namespace: str, name: str, current: dict, status: Any, mid: ManagerId) -> dict:
        """An Update operation on the status: ``mid`` owns the top-level fields it changed."""
        if status is None:
            status = {}
        if not isinstance(status, dict):
            raise _invalid(RESOURCES["ipamclaims"], name, [_ipam_type_error("status", status, "object")])
        status = _ipam_prune_status(status)
        old = current.get("status") or {}
        book = copy.deepcopy(self._books.get(("ipamclaims", namespace, name)) or _Bookkeeping())
        for fname in set(old) | set(status):
            if fname not in status:
                book.status_fields.pop(fname, None)
            elif fname not in old or not _json_equal(old[fname], status[fname]):
                book.status_fields[fname] = {mid}
        book.touch(mid)
        return self._ipam_commit_status(namespace, name, current, status, book)

    def _ipam_commit_status(self, namespace: str, name: str, current: dict, status: dict,
                            book: _Bookkeeping) -> dict:
        res = RESOURCES["ipamclaims"]
        errs = _validate_ipamclaim({"status": status}) if status else []
        if errs:
            raise _invalid(res, name, errs)
        for mid in [m for m in book.managers if m[2] == "status"]:
            if not any(mid in owners for owners in book.status_fields.values()) and not book.managers[mid]["fields"]:
                book.managers.pop(mid, None)
        key = ("ipamclaims", namespace, name)
        old_book = self._books.get(key) or _Bookkeeping()
        if _json_equal(status, current.get("status") or {}) and _json_equal(
                _strip_times(old_book.render(res.api_version)), _strip_times(book.render(res.api_version))):
            return copy.deepcopy(current)  # a no-op write: no new resourceVersion, no event
        new = copy.deepcopy(current)
        if status:
            new["status"] = status
        else:
            new.pop("status", None)
        self._books[key] = book
        return self._store(res, namespace, name, new, "MODIFIED", current)

    def _ipam_apply_status(self, namespace: str, name: str, body: Any, manager: str, force: bool) -> dict:
        """Server-side apply on ``ipamclaims/{name}/status``, kept simple: each top-level status field
        in the body (``ips``, ``ownerPod``, ``conditions``) replaces the stored one and is owned by
        ``manager``; changing a field another manager owns is a 409 conflict unless ``force``; a
        field the manager applied before and omits now is released, and removed if nobody owns it."""
        res = RESOURCES["ipamclaims"]
        meta = _check_applied_object(res, IPAM_API_VERSION, body, name)
        status = body.get("status")
        if status is None:
            status = {}
        if not isinstance(status, dict):
            raise _bad_request(".status: expected map, got " + type(status).__name__)
        applied = _ipam_prune_status(status)
        mid: ManagerId = (manager, "Apply", "status")
        with self._lock:
            current = self._ipamclaim(namespace, name)
            self._check_preconditions(res, name, current, meta)
            old_book = self._books.get(("ipamclaims", namespace, name)) or _Bookkeeping()
            book = copy.deepcopy(old_book)
            new_status = copy.deepcopy(current.get("status") or {})
            conflicts = []
            for fname, value in applied.items():
                if fname in new_status and not _json_equal(new_status[fname], value):
                    for other in sorted(book.status_fields.get(fname, set()) - {mid}):
                        conflicts.append((other, fname))
            if conflicts and not force:
                def who(other: ManagerId) -> str:
                    return _print_manager(other, (book.managers.get(other) or {}).get("time"), IPAM_API_VERSION)
                causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {who(o)}",
                           "field": f".status.{f}"} for o, f in conflicts]
                if len(conflicts) == 1:
                    other, fname = conflicts[0]
                    message = f"Apply failed with 1 conflict: conflict with {who(other)}: .status.{fname}"
                else:
                    message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(
                        f"conflict with {who(o)}: .status.{f}" for o, f in conflicts)
                raise ApiStatusError(409, "Conflict", message, {"causes": causes})
            for fname, owners in list(book.status_fields.items()):
                if mid in owners and fname not in applied:
                    owners.discard(mid)
                    if not owners:
                        del book.status_fields[fname]
                        new_status.pop(fname, None)
            for fname, value in applied.items():
                owners = book.status_fields.setdefault(fname, set())
                if fname not in new_status or not _json_equal(new_status[fname], value):
                    owners.clear()  # a forced (or uncontested) change takes the field over
                owners.add(mid)
                new_status[fname] = copy.deepcopy(value)
            book.touch(mid)
            return self._ipam_commit_status(namespace, name, current, new_status, book)

    # -- ResourceClaim status -----------------------------------------------------------------
    def _claim(self, namespace: str, name: str) -> dict:
        claim = self._objects.get(("resourceclaims", namespace, name))
        if claim is None:
            raise _not_found(RESOURCES["resourceclaims"], name)
        return claim

    def _commit_status(self, namespace: str, name: str, current: dict, status: dict,
                       book: _Bookkeeping) -> dict:
        """Validate the claim's new status and store it (unless nothing changed)."""
        res = RESOURCES["resourceclaims"]
        status = _normalize_status(status)
        errs = _validate_claim_status(status, current.get("status") or {})
        if errs:
            raise _invalid(res, name, errs)
        new = copy.deepcopy(current)
        if status:
            new["status"] = status
        else:
            new.pop("status", None)
        key = ("resourceclaims", namespace, name)
        old_book = self._books.get(key)
        rendered_old = old_book.render(res.api_version) if old_book is not None else []
        rendered_new = book.render(res.api_version)
        if _json_equal(new.get("status"), current.get("status")) and _json_equal(
                _strip_times(rendered_old), _strip_times(rendered_new)):
            return copy.deepcopy(current)  # a no-op write: no new resourceVersion, no event
        self._books[key] = book
        return self._store(res, namespace, name, new, "MODIFIED", current)

    def _update_claim_status(self, namespace: str, name: str, body: Any, mid: ManagerId) -> dict:
        res = RESOURCES["resourceclaims"]
        obj = _require_object(body, res)
        meta = obj.get("metadata") or {}
        if meta.get("name") and meta["name"] != name:
            raise _bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
        with self._lock:
            current = self._claim(namespace, name)
            self._check_preconditions(res, name, current, meta)
            status = copy.deepcopy(obj.get("status") or {})
            return self._status_update(namespace, name, current, status, mid)

    def _patch_claim_status(self, namespace: str, name: str, patch: dict, strategic: bool, mid: ManagerId) -> dict:
        res = RESOURCES["resourceclaims"]
        with self._lock:
            current = self._claim(namespace, name)
            self._check_preconditions(res, name, current, patch.get("metadata") or {})
            status = _merge_patch(current.get("status") or {}, patch.get("status") or {}, strategic) \
                if "status" in patch else copy.deepcopy(current.get("status") or {})
            if patch.get("status", _MISSING) is None:
                status = {}
            return self._status_update(namespace, name, current, status, mid)

    def _status_update(self, namespace: str, name: str, current: dict, status: dict, mid: ManagerId) -> dict:
        book = copy.deepcopy(self._books.get(("resourceclaims", namespace, name)) or _Bookkeeping())
        old_devices = (current.get("status") or {}).get("devices") or []
        new_devices = status.get("devices") or []
        if not isinstance(new_devices, list):
            new_devices = []
        _record_update_ownership(book, old_devices, new_devices, mid)
        changed = [f"f:{k}" for k in set(status) | set(current.get("status") or {})
                   if k != "devices" and not _json_equal(status.get(k), (current.get("status") or {}).get(k))]
        if changed or not _json_equal(old_devices, new_devices):
            book.touch(mid, {"f:status": {k: {} for k in changed}} if changed else None)
        return self._commit_status(namespace, name, current, status, book)

    def _apply_claim_status(self, namespace: str, name: str, body: Any, manager: str, force: bool) -> dict:
        """Server-side apply of ``status.devices`` by ``manager`` (a list-map keyed by driver,
        device, pool, shareID; ownership per entry and per top-level entry field)."""
        res = RESOURCES["resourceclaims"]
        meta = _check_applied_object(res, RESOURCE_API_VERSION, body, name)
        status = body.get("status") or {}
        if not isinstance(status, dict):
            raise _bad_request(".status: expected map, got " + type(status).__name__)
        applied = status.get("devices") or []
        if not isinstance(applied, list):
            raise _bad_request(".status.devices: expected list, got " + type(applied).__name__)
        mid: ManagerId = (manager, "Apply", "status")
        applied_map: dict[DeviceKey, dict] = {}
        for index, entry in enumerate(applied):
            if not isinstance(entry, dict):
                raise _bad_request(f"failed to create typed patch object ({RESOURCE_API_VERSION}, Kind={res.kind}): "
                                   f".status.devices[{index}]: expected map, got {type(entry).__name__}")
            entry = _normalize_device_entry(entry)
            for required in ("driver", "device", "pool"):
                if required not in entry:
                    raise _bad_request(
                        f"failed to create typed patch object ({RESOURCE_API_VERSION}, Kind={res.kind}): "
                        f".status.devices: element {index}: associative list with keys has an element that omits "
                        f'key field "{required}" (and doesn\'t have default value)')
            key = _device_key(entry)
            if key in applied_map:
                inner = ",".join(f"{n}={json.dumps(v)}" for n, v in _key_fields(key))
                raise _bad_request(f"failed to create typed patch object ({RESOURCE_API_VERSION}, Kind={res.kind}): "
                                   f".status.devices: duplicate entries for key [{inner}]")
            applied_map[key] = entry

        with self._lock:
            current = self._claim(namespace, name)
            self._check_preconditions(res, name, current, meta)
            old_book = self._books.get(("resourceclaims", namespace, name)) or _Bookkeeping()
            book = copy.deepcopy(old_book)
            cur_status = copy.deepcopy(current.get("status") or {})
            cur_entries: dict[DeviceKey, dict] = collections.OrderedDict()
            for entry in cur_status.get("devices") or []:
                cur_entries.setdefault(_device_key(entry), entry)

            conflicts: list[tuple[ManagerId, DeviceKey, str]] = []
            for key, entry in applied_map.items():
                existing = cur_entries.get(key)
                if existing is None:
                    continue
                for fname in _entry_fields(entry):
                    if fname in existing and not _json_equal(existing[fname], entry[fname]):
                        for other in sorted(book.devices.get(key, {}).get(fname, set()) - {mid}):
                            conflicts.append((other, key, fname))
            if conflicts and not force:
                raise _apply_conflict(conflicts, book)

            wanted = {(key, fname) for key, entry in applied_map.items() for fname in _entry_fields(entry)}
            wanted |= {(key, ".") for key in applied_map}
            # 1. what the manager applied before and omits now: it gives those fields up; fields
            #    nobody owns any more are removed, and entries nobody owns any more go away.
            for key, fmap in list(book.devices.items()):
                for fname, owners in list(fmap.items()):
                    if mid in owners and (key, fname) not in wanted:
                        owners.discard(mid)
                        if not owners:
                            del fmap[fname]
                            if fname != "." and key in cur_entries:
                                cur_entries[key].pop(fname, None)
                if not fmap.get("."):
                    if key in cur_entries and key not in applied_map and not any(fmap.values()):
                        del cur_entries[key]
                    if not any(fmap.values()):
                        del book.devices[key]
            # 2. what it applies now: set, owned (forced fields change hands).
            for key, entry in applied_map.items():
                target = cur_entries.get(key)
                if target is None:
                    target = {}
                    cur_entries[key] = target
                fmap = book.devices.setdefault(key, {})
                for kname in DEVICE_KEY_FIELDS:
                    if kname in entry:
                        target[kname] = entry[kname]
                for fname in _entry_fields(entry):
                    changed = fname not in target or not _json_equal(target[fname], entry[fname])
                    target[fname] = copy.deepcopy(entry[fname])
                    owners = fmap.setdefault(fname, set())
                    if changed:
                        owners.clear()
                    owners.add(mid)
                fmap.setdefault(".", set()).add(mid)
            devices = [entry for entry in cur_entries.values()]
            if devices:
                cur_status["devices"] = devices
            else:
                cur_status.pop("devices", None)
            book.touch(mid)
            if not book.owned_devices(mid) and not book.managers[mid]["fields"]:
                book.managers.pop(mid, None)
            if _json_equal(cur_status, current.get("status") or {}) and _json_equal(
                    _strip_times(old_book.render(res.api_version)), _strip_times(book.render(res.api_version))):
                return copy.deepcopy(current)
            return self._commit_status(namespace, name, current, cur_status, book)


# -- module helpers used by the server --------------------------------------------------------
class _BodyError(Exception):
    pass


def _line(event: dict) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"


def _bookmark(res: _Resource, rv: int) -> dict:
    return {"type": "BOOKMARK", "object": {"kind": res.kind, "apiVersion": res.api_version,
                                           "metadata": {"resourceVersion": str(rv)}}}


def _watch_event(event: _Event, flt: _Filter) -> dict | None:
    """The event as this watcher sees it: selector transitions become ADDED/DELETED."""
    if event.resource != flt.res.plural:
        return None
    now = flt.matches(event.obj)
    before = flt.matches(event.old) if event.old is not None else False
    if event.type == "ADDED":
        return {"type": "ADDED", "object": event.obj} if now else None
    if event.type == "DELETED":
        return {"type": "DELETED", "object": event.obj} if before or now else None
    if now and before:
        return {"type": "MODIFIED", "object": event.obj}
    if now:
        return {"type": "ADDED", "object": event.obj}
    if before:
        return {"type": "DELETED", "object": event.obj}
    return None


def _manager_from_user_agent(user_agent: str | None) -> str:
    """The default field manager: the user agent up to its first ``/`` (``OpenAPI-Generator``)."""
    return (user_agent or "unknown").split("/")[0]


def _method_not_allowed() -> ApiStatusError:
    return ApiStatusError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource",
                          {})


def _path_not_found() -> ApiStatusError:
    return ApiStatusError(404, "NotFound", "the server could not find the requested resource", {})


def _invalid_options(kind: str, error: str) -> ApiStatusError:
    """422 for bad request options (``ValidatePatchOptions``): ``PatchOptions.meta.k8s.io "" is invalid``."""
    path, body = _field_error_parts(error)
    reason = next((t for prefix, t in _CAUSE_TYPES.items() if body.startswith(prefix)), "FieldValueInvalid")
    return ApiStatusError(422, "Invalid", f'{kind}.meta.k8s.io "" is invalid: {error}',
                          {"group": "meta.k8s.io", "kind": kind,
                           "causes": [{"reason": reason, "message": body, "field": path}]})


def _require_object(body: Any, res: _Resource) -> dict:
    if not isinstance(body, dict):
        raise _bad_request(f"the request body must be a {res.kind} object")
    kind = body.get("kind")
    if kind and kind != res.kind:
        raise _bad_request(f"the kind in the data ({kind}) does not match the expected kind ({res.kind})")
    api_version = body.get("apiVersion")
    if api_version and api_version != res.api_version:
        raise _bad_request(f"the API version in the data ({api_version}) does not match the expected API version "
                           f"({res.api_version})")
    return copy.deepcopy(body)


def _same_object(a: dict, b: dict) -> bool:
    def strip(obj: dict) -> dict:
        obj = copy.deepcopy(obj)
        meta = obj.get("metadata") or {}
        for k in ("resourceVersion", "managedFields"):
            meta.pop(k, None)
        obj.pop("kind", None)
        obj.pop("apiVersion", None)
        return obj
    return _json_equal(strip(a), strip(b))


def _strip_times(entries: list[dict]) -> list[dict]:
    return [{k: v for k, v in e.items() if k != "time"} for e in entries]


def _apply_conflict(conflicts: list[tuple[ManagerId, DeviceKey, str]], book: _Bookkeeping) -> ApiStatusError:
    def who(mid: ManagerId) -> str:
        info = book.managers.get(mid) or {}
        return _print_manager(mid, info.get("time"))

    causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {who(mid)}",
               "field": _device_path(key, fname)} for mid, key, fname in conflicts]
    if len(conflicts) == 1:
        mid, key, fname = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {who(mid)}: {_device_path(key, fname)}"
    else:
        by_manager: dict[str, list[str]] = {}
        for mid, key, fname in conflicts:
            by_manager.setdefault(who(mid), []).append(_device_path(key, fname))
        lines = []
        for manager in sorted(by_manager):
            lines.append(f"conflicts with {manager}:")
            lines.extend(f"- {p}" for p in by_manager[manager])
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApiStatusError(409, "Conflict", message, {"causes": causes})


# -- Go round-trip normalisation ------------------------------------------------------------------
def _normalize_device_entry(entry: Any) -> Any:
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


def _normalize_status(status: dict) -> dict:
    status = {k: v for k, v in status.items() if v is not None}
    devices = status.get("devices")
    if isinstance(devices, list):
        if devices:
            status["devices"] = [_normalize_device_entry(e) for e in devices]
        else:
            status.pop("devices")
    return status


# -- validation -------------------------------------------------------------------------------
def _allocated_results(status: dict) -> list[dict]:
    allocation = status.get("allocation")
    if not isinstance(allocation, dict):
        return []
    results = (allocation.get("devices") or {}).get("results") or []
    return [r for r in results if isinstance(r, dict)]


def _validate_claim_status(status: dict, old: dict) -> list[str]:
    """``validateResourceClaimStatusUpdate``, the parts a driver can hit."""
    errs: list[str] = []
    devices = status.get("devices")
    if devices is not None:
        errs.extend(validate_status_devices(devices, _allocated_results(status)))
    reserved = status.get("reservedFor") or []
    if isinstance(reserved, list):
        if len(reserved) > 256:
            errs.append(_fe_too_many("status.reservedFor", len(reserved), 256))
        if reserved and not status.get("allocation"):
            errs.append(_fe_forbidden("status.reservedFor", "may not be specified when `allocated` is not set"))
    if old.get("allocation") and status.get("allocation") and not _json_equal(old["allocation"], status["allocation"]):
        errs.append(_fe_invalid("status.allocation", "<value omitted>", "field is immutable"))
    return errs


_NODE_SELECTION = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")


def _validate_slice(obj: dict, old: dict | None = None) -> list[str]:
    """``ValidateResourceSlice`` / ``ValidateResourceSliceUpdate`` for resource.k8s.io/v1."""
    errs: list[str] = []
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [_fe_required("spec")]
    errs.extend(_driver_name_errors("spec.driver", spec.get("driver")))
    pool = spec.get("pool")
    if not isinstance(pool, dict):
        errs.append(_fe_required("spec.pool.name"))
        errs.append(_fe_invalid("spec.pool.resourceSliceCount", 0, "must be greater than zero"))
    else:
        errs.extend(_pool_name_errors("spec.pool.name", pool.get("name")))
        count = pool.get("resourceSliceCount")
        if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            errs.append(_fe_invalid("spec.pool.resourceSliceCount", count if count is not None else 0,
                                    "must be greater than zero"))
        generation = pool.get("generation", 0)
        if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
            errs.append(_fe_invalid("spec.pool.generation", generation, "must be greater than or equal to zero"))
    if old is not None:
        old_spec = old.get("spec") or {}
        for path, new_value, old_value in (
            ("spec.pool.name", (spec.get("pool") or {}).get("name"), (old_spec.get("pool") or {}).get("name")),
            ("spec.driver", spec.get("driver"), old_spec.get("driver")),
            ("spec.nodeName", spec.get("nodeName"), old_spec.get("nodeName")),
        ):
            if new_value != old_value:
                errs.append(_fe_invalid(path, new_value, "field is immutable"))

    set_fields = []
    if spec.get("nodeName"):
        set_fields.append("`nodeName`")
        errs.extend(_dns_subdomain_errors("spec.nodeName", spec["nodeName"]))
    if spec.get("nodeSelector") is not None:
        set_fields.append("`nodeSelector`")
        terms = (spec["nodeSelector"] or {}).get("nodeSelectorTerms") if isinstance(spec["nodeSelector"], dict) else None
        if not isinstance(terms, list) or len(terms) != 1:
            errs.append(_fe_invalid("spec.nodeSelector.nodeSelectorTerms", terms, "must have exactly one node selector term"))
    if spec.get("allNodes"):
        set_fields.append("`allNodes`")
    if spec.get("perDeviceNodeSelection"):
        set_fields.append("`perDeviceNodeSelection`")
    one_of = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
    if not set_fields:
        errs.append(_fe_required("spec", one_of))
    elif len(set_fields) > 1:
        errs.append(_fe_invalid("spec", "{" + ", ".join(set_fields) + "}", one_of + ", but multiple fields are set"))

    devices = spec.get("devices") or []
    if not isinstance(devices, list):
        errs.append(_fe_invalid("spec.devices", "<value omitted>", "must be a list"))
        return errs
    seen: set[str] = set()
    for index, device in enumerate(devices):
        path = f"spec.devices[{index}]"
        if not isinstance(device, dict):
            errs.append(_fe_invalid(path, "<value omitted>", "must be an object"))
            continue
        errs.extend(_dns_label_errors(f"{path}.name", device.get("name")))
        attributes = device.get("attributes") or {}
        capacity = device.get("capacity") or {}
        if not isinstance(attributes, dict):
            errs.append(_fe_invalid(f"{path}.attributes", "<value omitted>", "must be a map"))
            attributes = {}
        if not isinstance(capacity, dict):
            errs.append(_fe_invalid(f"{path}.capacity", "<value omitted>", "must be a map"))
            capacity = {}
        for name, attribute in attributes.items():
            apath = _key_path(f"{path}.attributes", name)
            errs.extend(_qualified_name_errors(apath, name))
            errs.extend(_attribute_errors(apath, attribute))
        for name, value in capacity.items():
            cpath = _key_path(f"{path}.capacity", name)
            errs.extend(_qualified_name_errors(cpath, name))
            if not isinstance(value, dict) or value.get("value") in (None, ""):
                errs.append(_fe_required(f"{cpath}.value"))
        combined = len(attributes) + len(capacity)
        if combined > 32:
            errs.append(_fe_invalid(path, combined, "the total number of attributes and capacities must not exceed 32"))
    if len(devices) > 128:
        errs.append(_fe_too_many("spec.devices", len(devices), 128))
    for index, device in enumerate(devices):
        if isinstance(device, dict) and isinstance(device.get("name"), str):
            if device["name"] in seen:
                errs.append(_fe_duplicate(f"spec.devices[{index}].name", device["name"]))
            seen.add(device["name"])
    return errs


def _attribute_errors(path: str, attribute: Any) -> list[str]:
    if not isinstance(attribute, dict):
        return [_fe_invalid(path, attribute, "must be an object")]
    errs = []
    present = [k for k in ("int", "bool", "string", "version") if attribute.get(k) is not None]
    if "int" in present and (not isinstance(attribute["int"], int) or isinstance(attribute["int"], bool)):
        errs.append(_fe_invalid(f"{path}.int", attribute["int"], "must be an integer"))
    if "bool" in present and not isinstance(attribute["bool"], bool):
        errs.append(_fe_invalid(f"{path}.bool", attribute["bool"], "must be a boolean"))
    if "string" in present:
        value = attribute["string"]
        if not isinstance(value, str):
            errs.append(_fe_invalid(f"{path}.string", value, "must be a string"))
        elif len(value.encode()) > 64:
            errs.append(_fe_too_long(f"{path}.string", 64))
    if "version" in present:
        value = attribute["version"]
        if not isinstance(value, str) or not _SEMVER.match(value):
            errs.append(_fe_invalid(f"{path}.version", value, "must be a string compatible with semver.org spec 2.0.0"))
        elif len(value) > 64:
            errs.append(_fe_too_long(f"{path}.version", 64))
    if not present:
        errs.append(_fe_required(path, "exactly one value must be specified"))
    elif len(present) > 1:
        errs.append(_fe_invalid(path, attribute, "exactly one value must be specified"))
    return errs


# -- IPAMClaim schema (k8snetworkplumbingwg/ipamclaims v1alpha1) --------------------------------------
# The structural schema of spec/crds/ipamclaims.k8s.cni.cncf.io.yaml: what is kept when pruning.
_IPAM_SPEC_FIELDS = ("network", "interface")
_IPAM_STATUS_FIELDS = ("ips", "ownerPod", "conditions")
_CONDITION_FIELDS = ("type", "status", "observedGeneration", "lastTransitionTime", "reason", "message")
_CONDITION_TYPE = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                             r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")
_CONDITION_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")


def _go_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _ipam_type_error(path: str, value: Any, expected: str) -> str:
    """The OpenAPI validator's wording: ``spec.network: Invalid value: "integer": spec.network in
    body must be of type string: "integer"``."""
    got = _go_type(value)
    return _fe_invalid(path, got, f"{path} in body must be of type {expected}: {json.dumps(got)}")


def _prune_fields(value: Any, fields: tuple[str, ...]) -> Any:
    """Drop unknown fields and nulls of an object (non-objects are left for validation to reject)."""
    if not isinstance(value, dict):
        return value
    return {k: v for k, v in value.items() if k in fields and v is not None}


def _ipam_prune_status(status: dict) -> dict:
    status = _prune_fields(status, _IPAM_STATUS_FIELDS)
    if isinstance(status.get("ownerPod"), dict):
        status["ownerPod"] = _prune_fields(status["ownerPod"], ("name",))
    if isinstance(status.get("conditions"), list):
        status["conditions"] = [_prune_fields(c, _CONDITION_FIELDS) for c in status["conditions"]]
    return status


def _ipam_prune(obj: dict) -> dict:
    """What the API server does to a custom resource before validation: unknown fields and nulls of
    non-nullable fields are pruned (``metadata`` is ObjectMeta, left alone here)."""
    out = {k: v for k, v in obj.items() if k in ("apiVersion", "kind", "metadata", "spec", "status") and v is not None}
    if "spec" in out:
        out["spec"] = _prune_fields(out["spec"], _IPAM_SPEC_FIELDS)
    if isinstance(out.get("status"), dict):
        out["status"] = _ipam_prune_status(out["status"])
    return out


def _is_cidr(value: str) -> bool:
    if "/" not in value:
        return False
    try:
        ipaddress.ip_interface(value)
    except ValueError:
        return False
    return True


def _validate_condition(path: str, condition: Any) -> list[str]:
    """``metav1.Condition`` as the CRD schema generated from it validates it."""
    if not isinstance(condition, dict):
        return [_ipam_type_error(path, condition, "object")]
    errs: list[str] = []
    for required in ("lastTransitionTime", "message", "reason", "status", "type"):
        if required not in condition:
            errs.append(_fe_required(f"{path}.{required}"))
    for fname in ("lastTransitionTime", "message", "reason", "status", "type"):
        if fname in condition and not isinstance(condition[fname], str):
            errs.append(_ipam_type_error(f"{path}.{fname}", condition[fname], "string"))
    ctype = condition.get("type")
    if isinstance(ctype, str):
        if len(ctype) > 316:
            errs.append(_fe_too_long(f"{path}.type", 316))
        if not _CONDITION_TYPE.match(ctype):
            errs.append(_fe_invalid(f"{path}.type", ctype, f"{path}.type in body should match "
                                    f"'{_CONDITION_TYPE.pattern}'"))
    cstatus = condition.get("status")
    if isinstance(cstatus, str) and cstatus not in ("True", "False", "Unknown"):
        errs.append(f'{path}.status: Unsupported value: {json.dumps(cstatus)}: supported values: '
                    f'"True", "False", "Unknown"')
    reason = condition.get("reason")
    if isinstance(reason, str):
        if len(reason) > 1024:
            errs.append(_fe_too_long(f"{path}.reason", 1024))
        if not reason:
            errs.append(_fe_invalid(f"{path}.reason", reason, f"{path}.reason in body should be at least 1 chars long"))
        elif not _CONDITION_REASON.match(reason):
            errs.append(_fe_invalid(f"{path}.reason", reason, f"{path}.reason in body should match "
                                    f"'{_CONDITION_REASON.pattern}'"))
    message = condition.get("message")
    if isinstance(message, str) and len(message) > 32768:
        errs.append(_fe_too_long(f"{path}.message", 32768))
    moment = condition.get("lastTransitionTime")
    if isinstance(moment, str) and parse_rfc3339(moment) is None:
        errs.append(_fe_invalid(f"{path}.lastTransitionTime", moment,
                                f"{path}.lastTransitionTime in body must be of type date-time: {json.dumps(moment)}"))
    generation = condition.get("observedGeneration")
    if generation is not None:
        if not isinstance(generation, int) or isinstance(generation, bool):
            errs.append(_ipam_type_error(f"{path}.observedGeneration", generation, "integer"))
        elif generation < 0:
            errs.append(_fe_invalid(f"{path}.observedGeneration", generation,
                                    f"{path}.observedGeneration in body should be greater than or equal to 0"))
    return errs


def _validate_ipamclaim(obj: dict, require_interface: bool = True) -> list[str]:
    """The upstream CRD schema (after pruning): ``spec`` is optional, but when set both
    ``spec.network`` and ``spec.interface`` are required strings; ``status`` is optional, but when
    set ``status.ips`` is a required list of strings, ``status.ownerPod`` (optional) needs a
    ``name``, and ``status.conditions`` are ``metav1.Condition``s.

    Stricter than upstream (whose ``ips`` items are plain strings): every ``status.ips`` entry must
    be a CIDR, an address with a prefix length (``10.0.0.5/24``, ``fd00::5/64``), which is what
    OVN-Kubernetes writes and what dracni must write too."""
    errs: list[str] = []
    if "spec" in obj:
        spec = obj["spec"]
        if not isinstance(spec, dict):
            errs.append(_ipam_type_error("spec", spec, "object"))
        else:
            for fname in _IPAM_SPEC_FIELDS:
                if fname not in spec:
                    if fname == "network" or require_interface:
                        errs.append(_fe_required(f"spec.{fname}"))
                elif not isinstance(spec[fname], str):
                    errs.append(_ipam_type_error(f"spec.{fname}", spec[fname], "string"))
    if "status" in obj:
        status = obj["status"]
        if not isinstance(status, dict):
            return errs + [_ipam_type_error("status", status, "object")]
        if "ips" not in status:
            errs.append(_fe_required("status.ips"))
        else:
            ips = status["ips"]
            if not isinstance(ips, list):
                errs.append(_ipam_type_error("status.ips", ips, "array"))
            else:
                for index, ip in enumerate(ips):
                    path = f"status.ips[{index}]"
                    if not isinstance(ip, str):
                        errs.append(_ipam_type_error(path, ip, "string"))
                    elif not _is_cidr(ip):
                        errs.append(_fe_invalid(path, ip, "must be a CIDR: an IP address with a prefix length "
                                                          "(e.g. 10.0.0.5/24 or fd00::5/64)"))
        if "ownerPod" in status:
            owner = status["ownerPod"]
            if not isinstance(owner, dict):
                errs.append(_ipam_type_error("status.ownerPod", owner, "object"))
            elif "name" not in owner:
                errs.append(_fe_required("status.ownerPod.name"))
            elif not isinstance(owner["name"], str):
                errs.append(_ipam_type_error("status.ownerPod.name", owner["name"], "string"))
        if "conditions" in status:
            conditions = status["conditions"]
            if not isinstance(conditions, list):
                errs.append(_ipam_type_error("status.conditions", conditions, "array"))
            else:
                for index, condition in enumerate(conditions):
                    errs.extend(_validate_condition(f"status.conditions[{index}]", condition))
    return errs


def _check_applied_object(res: _Resource, api_version_expected: str, body: Any, name: str) -> dict:
    """The checks kube-apiserver makes on any apply body before looking at its fields (400s);
    returns the body's metadata."""
    if not isinstance(body, dict):
        raise _bad_request("error decoding patch: the applied configuration must be an object")
    api_version, kind = body.get("apiVersion"), body.get("kind")
    if not api_version or not kind:
        raise _bad_request(f"invalid object type: {api_version or ''}, Kind={kind or ''}")
    if api_version != api_version_expected:
        raise _bad_request(f"the API version in the data ({api_version}) does not match the expected API version "
                           f"({api_version_expected})")
    if kind != res.kind:
        raise _bad_request(f"the kind in the data ({kind}) does not match the expected kind ({res.kind})")
    meta = body.get("metadata") or {}
    if meta.get("name") and meta["name"] != name:
        raise _bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
    return meta
