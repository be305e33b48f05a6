"""The fields the Go types of ``resource.k8s.io/v1`` declare (k8s.io/api/resource/v1 ``types.go``,
k8s.io/apimachinery ``ObjectMeta``), for the API server's field validation of JSON bodies.

kube-apiserver decodes a body into the Go types: a field the type does not declare is dropped.
``fieldValidation`` (apiserver ``pkg/endpoints/handlers``: ``fieldValidation(...)`` in
``rest.go``, the strict decoding in ``create.go``/``update.go``/``patch.go``) decides what
else happens: ``Ignore`` nothing, ``Warn`` (the default) a ``Warning: 299 - "unknown field
\\"<path>\\""`` header per field, ``Strict`` a 400 ``strict decoding error: unknown field
"<path>", ...``.  Paths are written as the JSON decoder writes them (``spec.devices[0].foo``).

A schema here is a dict of field name to sub-schema: ``ANY`` (a scalar or a value not checked
further: ``RawExtension``, ``NodeSelector``), a dict (a struct), ``[schema]`` (a list of it) or
``MapOf(schema)`` (``map[string]T``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ANY: None = None


@dataclass(frozen=True)
class MapOf:
    value: Any


def _fields(*names: str) -> dict[str, Any]:
    return dict.fromkeys(names, ANY)


OWNER_REFERENCE = _fields("apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion")
OBJECT_META = {
    **_fields(
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "finalizers",
        "managedFields",
    ),
    "labels": MapOf(ANY),
    "annotations": MapOf(ANY),
    "ownerReferences": [OWNER_REFERENCE],
}
CONDITION = _fields("type", "status", "observedGeneration", "lastTransitionTime", "reason", "message")
TOLERATION = _fields("key", "operator", "value", "effect", "tolerationSeconds")
SELECTOR = {"cel": _fields("expression")}
CAPACITY_REQUIREMENTS = {"requests": MapOf(ANY)}
OPAQUE = _fields("driver", "parameters")
EXACT_REQUEST = {
    **_fields("deviceClassName", "allocationMode", "count", "adminAccess"),
    "selectors": [SELECTOR],
    "tolerations": [TOLERATION],
    "capacity": CAPACITY_REQUIREMENTS,
}
SUB_REQUEST = {**EXACT_REQUEST, "name": ANY}
SUB_REQUEST.pop("adminAccess")
CLAIM_SPEC = {
    "devices": {
        "requests": [{"name": ANY, "exactly": EXACT_REQUEST, "firstAvailable": [SUB_REQUEST]}],
        "constraints": [_fields("requests", "matchAttribute", "distinctAttribute")],
        "config": [{"requests": ANY, "opaque": OPAQUE}],
    }
}
ALLOCATION = {
    "devices": {
        "results": [
            {
                **_fields(
                    "request",
                    "driver",
                    "pool",
                    "device",
                    "adminAccess",
                    "bindingConditions",
                    "bindingFailureConditions",
                    "shareID",
                ),
                "tolerations": [TOLERATION],
                "consumedCapacity": MapOf(ANY),
            }
        ],
        "config": [{"source": ANY, "requests": ANY, "opaque": OPAQUE}],
    },
    "nodeSelector": ANY,
    "allocationTimestamp": ANY,
}
DEVICE_STATUS = {
    **_fields("driver", "pool", "device", "shareID", "data"),
    "conditions": [CONDITION],
    "networkData": _fields("interfaceName", "ips", "hardwareAddress"),
}
CLAIM_STATUS = {
    "allocation": ALLOCATION,
    "reservedFor": [_fields("apiGroup", "resource", "name", "uid")],
    "devices": [DEVICE_STATUS],
}
RESOURCE_CLAIM = {**_fields("apiVersion", "kind"), "metadata": OBJECT_META, "spec": CLAIM_SPEC, "status": CLAIM_STATUS}

COUNTER = _fields("value")
DEVICE = {
    **_fields(
        "name",
        "nodeName",
        "nodeSelector",
        "allNodes",
        "bindsToNode",
        "bindingConditions",
        "bindingFailureConditions",
        "allowMultipleAllocations",
    ),
    # DeviceAttribute: the list forms exist in the type from 1.36 (KEP-5491); a 1.34/1.35 server
    # drops them as unknown fields, a 1.36+ one by its strategy while the gate is off.
    "attributes": MapOf(_fields("int", "bool", "string", "version", "ints", "bools", "strings", "versions")),
    "capacity": MapOf(
        {
            "value": ANY,
            "requestPolicy": {**_fields("default", "validValues"), "validRange": _fields("min", "max", "step")},
        }
    ),
    "consumesCounters": [{"counterSet": ANY, "counters": MapOf(COUNTER)}],
    "taints": [_fields("key", "value", "effect", "timeAdded")],
}
SLICE_SPEC = {
    **_fields("driver", "nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection"),
    "pool": _fields("name", "generation", "resourceSliceCount"),
    "devices": [DEVICE],
    "sharedCounters": [{"name": ANY, "counters": MapOf(COUNTER)}],
}
RESOURCE_SLICE = {**_fields("apiVersion", "kind"), "metadata": OBJECT_META, "spec": SLICE_SPEC}

#: By plural: the resources whose bodies are decoded into Go types here.
SCHEMAS: dict[str, dict[str, Any]] = {"resourceclaims": RESOURCE_CLAIM, "resourceslices": RESOURCE_SLICE}


def drop_unknown(value: Any, schema: Any, path: str = "") -> list[str]:
    """Remove from ``value`` (in place) the fields ``schema`` does not declare; their paths."""
    unknown: list[str] = []
    if isinstance(schema, dict) and isinstance(value, dict):
        for name in list(value):
            sub = f"{path}.{name}" if path else name
            if name not in schema:
                del value[name]
                unknown.append(sub)
            elif schema[name] is not ANY:
                unknown += drop_unknown(value[name], schema[name], sub)
    elif isinstance(schema, list) and isinstance(value, list):
        for index, item in enumerate(value):
            unknown += drop_unknown(item, schema[0], f"{path}[{index}]")
    elif isinstance(schema, MapOf) and isinstance(value, dict) and schema.value is not ANY:
        for key, item in value.items():
            unknown += drop_unknown(item, schema.value, f"{path}[{key}]")
    return unknown
