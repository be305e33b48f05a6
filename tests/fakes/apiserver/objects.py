"""JSON object helpers shared by the verbs: comparison, RFC 7386 merge patch, and the checks a
request body passes before anything looks at its fields (kind, apiVersion, names on the URL)."""

from __future__ import annotations

import copy
import json
from typing import Any, NamedTuple

from .errors import bad_request
from .resources import Resource


class Encoded(NamedTuple):
    """An answer's body encoded as JSON, as the fake sends every answer and watch event
    (``of``); a GET's is the object as it was when it was read, under the store's lock.  kube-apiserver's GET serializes the object its storage returned
    (apiserver endpoints/handlers/get.go ``getResourceHandler``, then ``transformResponseObject``
    and responsewriters ``WriteObjectNegotiated``); encoding it at the read gives the same
    snapshot as a deep copy encoded later, without the copy (the fake's dearest step per GET)."""

    data: bytes

    @classmethod
    def of(cls, obj: Any) -> Encoded:
        return cls(json.dumps(obj, separators=(",", ":")).encode())


def json_equal(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def merge_patch(target: Any, patch: Any, strategic: bool = False) -> Any:
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
            result[key] = merge_patch(result.get(key), value, strategic)
    return result


def deep_merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(a)
    for key, value in b.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def same_object(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal but for resourceVersion, managedFields, kind and apiVersion."""

    def strip(obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        meta = obj.get("metadata") or {}
        for k in ("resourceVersion", "managedFields"):
            meta.pop(k, None)
        obj.pop("kind", None)
        obj.pop("apiVersion", None)
        return obj

    return json_equal(strip(a), strip(b))


def require_object(body: Any, res: Resource) -> dict[str, Any]:
    """A copy of a PUT/POST body, which must be an object of ``res``'s kind and apiVersion."""
    if not isinstance(body, dict):
        raise bad_request(f"the request body must be a {res.kind} object")
    kind = body.get("kind")
    if kind and kind != res.kind:
        raise bad_request(f"the kind in the data ({kind}) does not match the expected kind ({res.kind})")
    api_version = body.get("apiVersion")
    if api_version and api_version != res.api_version:
        raise bad_request(
            f"the API version in the data ({api_version}) does not match the expected API version ({res.api_version})"
        )
    return copy.deepcopy(body)


def check_url_names(meta: dict[str, Any], name: str | None = None, namespace: str | None = None) -> None:
    """400 when the body's ``metadata`` names another object (``name``) or namespace than the URL;
    None: not checked."""
    if name is not None and meta.get("name") and meta["name"] != name:
        raise bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
    if namespace is not None and meta.get("namespace") and meta["namespace"] != namespace:
        raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
