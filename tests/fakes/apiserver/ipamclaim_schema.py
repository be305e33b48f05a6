"""The IPAMClaim CRD's structural schema (k8snetworkplumbingwg/ipamclaims v1alpha1, as shipped in
``spec/crds/ipamclaims.k8s.cni.cncf.io.yaml``): what pruning keeps, and the OpenAPI validation of
``spec`` and ``status`` (``metav1.Condition`` included), worded as the API server words it, plus
one stricter rule (every ``status.ips`` entry is a CIDR)."""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any

from . import field as fe
from .clock import parse_rfc3339
from .resources import Obj

# The structural schema of spec/crds/ipamclaims.k8s.cni.cncf.io.yaml: what is kept when pruning.
_IPAM_SPEC_FIELDS = ("network", "interface")
_IPAM_STATUS_FIELDS = ("ips", "ownerPod", "conditions")
_CONDITION_FIELDS = ("type", "status", "observedGeneration", "lastTransitionTime", "reason", "message")
_CONDITION_TYPE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
_CONDITION_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")


#: JSON Schema type names of Python's JSON values (bool before int: a bool is an int).
_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)


def _json_type(value: Any) -> str:
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), "null")


def type_error(path: str, value: Any, expected: str) -> str:
    """The OpenAPI validator's wording: ``spec.network: Invalid value: "integer": spec.network in
    body must be of type string: "integer"``."""
    got = _json_type(value)
    return fe.invalid(path, got, f"{path} in body must be of type {expected}: {json.dumps(got)}")


def _prune_fields(value: Any, fields: tuple[str, ...]) -> Any:
    """Drop unknown fields and nulls of an object (non-objects are left for validation to reject)."""
    if not isinstance(value, dict):
        return value
    return {k: v for k, v in value.items() if k in fields and v is not None}


def prune_status(status: Obj) -> Obj:
    status = _prune_fields(status, _IPAM_STATUS_FIELDS)
    if isinstance(status.get("ownerPod"), dict):
        status["ownerPod"] = _prune_fields(status["ownerPod"], ("name",))
    if isinstance(status.get("conditions"), list):
        status["conditions"] = [_prune_fields(c, _CONDITION_FIELDS) for c in status["conditions"]]
    return status


def prune(obj: Obj) -> Obj:
    """What the API server does to a custom resource before validation: unknown fields and nulls of
    non-nullable fields are pruned (``metadata`` is ObjectMeta, left alone here)."""
    out = {k: v for k, v in obj.items() if k in ("apiVersion", "kind", "metadata", "spec", "status") and v is not None}
    if "spec" in out:
        out["spec"] = _prune_fields(out["spec"], _IPAM_SPEC_FIELDS)
    if isinstance(out.get("status"), dict):
        out["status"] = prune_status(out["status"])
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
        return [type_error(path, condition, "object")]
    errs: list[str] = []
    for required in ("lastTransitionTime", "message", "reason", "status", "type"):
        if required not in condition:
            errs.append(fe.required(f"{path}.{required}"))
    for fname in ("lastTransitionTime", "message", "reason", "status", "type"):
        if fname in condition and not isinstance(condition[fname], str):
            errs.append(type_error(f"{path}.{fname}", condition[fname], "string"))
    ctype = condition.get("type")
    if isinstance(ctype, str):
        if len(ctype) > 316:
            errs.append(fe.too_long(f"{path}.type", 316))
        if not _CONDITION_TYPE.match(ctype):
            errs.append(
                fe.invalid(f"{path}.type", ctype, f"{path}.type in body should match '{_CONDITION_TYPE.pattern}'")
            )
    cstatus = condition.get("status")
    if isinstance(cstatus, str) and cstatus not in ("True", "False", "Unknown"):
        errs.append(
            f'{path}.status: Unsupported value: {json.dumps(cstatus)}: supported values: "True", "False", "Unknown"'
        )
    reason = condition.get("reason")
    if isinstance(reason, str):
        if len(reason) > 1024:
            errs.append(fe.too_long(f"{path}.reason", 1024))
        if not reason:
            errs.append(fe.invalid(f"{path}.reason", reason, f"{path}.reason in body should be at least 1 chars long"))
        elif not _CONDITION_REASON.match(reason):
            errs.append(
                fe.invalid(
                    f"{path}.reason", reason, f"{path}.reason in body should match '{_CONDITION_REASON.pattern}'"
                )
            )
    message = condition.get("message")
    if isinstance(message, str) and len(message) > 32768:
        errs.append(fe.too_long(f"{path}.message", 32768))
    moment = condition.get("lastTransitionTime")
    if isinstance(moment, str) and parse_rfc3339(moment) is None:
        errs.append(
            fe.invalid(
                f"{path}.lastTransitionTime",
                moment,
                f"{path}.lastTransitionTime in body must be of type date-time: {json.dumps(moment)}",
            )
        )
    generation = condition.get("observedGeneration")
    if generation is not None:
        if not isinstance(generation, int) or isinstance(generation, bool):
            errs.append(type_error(f"{path}.observedGeneration", generation, "integer"))
        elif generation < 0:
            errs.append(
                fe.invalid(
                    f"{path}.observedGeneration",
                    generation,
                    f"{path}.observedGeneration in body should be greater than or equal to 0",
                )
            )
    return errs


def validate(obj: Obj, require_interface: bool = True) -> list[str]:
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
            errs.append(type_error("spec", spec, "object"))
        else:
            for fname in _IPAM_SPEC_FIELDS:
                if fname not in spec:
                    if fname == "network" or require_interface:
                        errs.append(fe.required(f"spec.{fname}"))
                elif not isinstance(spec[fname], str):
                    errs.append(type_error(f"spec.{fname}", spec[fname], "string"))
    if "status" in obj:
        status = obj["status"]
        if not isinstance(status, dict):
            return errs + [type_error("status", status, "object")]
        if "ips" not in status:
            errs.append(fe.required("status.ips"))
        else:
            ips = status["ips"]
            if not isinstance(ips, list):
                errs.append(type_error("status.ips", ips, "array"))
            else:
                for index, ip in enumerate(ips):
                    path = f"status.ips[{index}]"
                    if not isinstance(ip, str):
                        errs.append(type_error(path, ip, "string"))
                    elif not _is_cidr(ip):
                        errs.append(
                            fe.invalid(
                                path,
                                ip,
                                "must be a CIDR: an IP address with a prefix length (e.g. 10.0.0.5/24 or fd00::5/64)",
                            )
                        )
        if "ownerPod" in status:
            owner = status["ownerPod"]
            if not isinstance(owner, dict):
                errs.append(type_error("status.ownerPod", owner, "object"))
            elif "name" not in owner:
                errs.append(fe.required("status.ownerPod.name"))
            elif not isinstance(owner["name"], str):
                errs.append(type_error("status.ownerPod.name", owner["name"], "string"))
        if "conditions" in status:
            conditions = status["conditions"]
            if not isinstance(conditions, list):
                errs.append(type_error("status.conditions", conditions, "array"))
            else:
                for index, condition in enumerate(conditions):
                    errs.extend(_validate_condition(f"status.conditions[{index}]", condition))
    return errs
