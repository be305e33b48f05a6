"""API errors answered as ``Status`` objects, worded as kube-apiserver words them (404, 409,
400, 422 with one cause per field error, 405, 415, ...)."""

from __future__ import annotations

from typing import Any

from .resources import RESOURCES, Resource


class ApiStatusError(Exception):
    """An API error answered as a ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
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


class BodyError(Exception):
    """A request body that is neither JSON nor (for YAML content types) YAML: a 400."""


#: The ``reason`` of a Status for each code (used by injected failures).
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

STALE = "the object has been modified; please apply your changes to the latest version and try again"


def details(res: Resource | None, name: str | None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if name:
        out["name"] = name
    if res is not None:
        if res.group:
            out["group"] = res.group
        out["kind"] = res.plural
    out.update(extra)
    return out


def not_found(res: Resource, name: str) -> ApiStatusError:
    return ApiStatusError(404, "NotFound", f'{res.qualified} "{name}" not found', details(res, name))


def namespace_not_found(namespace: str) -> ApiStatusError:
    return not_found(RESOURCES["namespaces"], namespace)


def already_exists(res: Resource, name: str) -> ApiStatusError:
    return ApiStatusError(409, "AlreadyExists", f'{res.qualified} "{name}" already exists', details(res, name))


def conflict(res: Resource, name: str, why: str) -> ApiStatusError:
    return ApiStatusError(
        409, "Conflict", f'Operation cannot be fulfilled on {res.qualified} "{name}": {why}', details(res, name)
    )


def bad_request(message: str) -> ApiStatusError:
    return ApiStatusError(400, "BadRequest", message)


def method_not_allowed() -> ApiStatusError:
    return ApiStatusError(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {}
    )


def path_not_found() -> ApiStatusError:
    return ApiStatusError(404, "NotFound", "the server could not find the requested resource", {})


def unsupported_media_type(message: str) -> ApiStatusError:
    return ApiStatusError(415, "UnsupportedMediaType", message)


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


def _cause(error: str) -> dict[str, str]:
    """``"status.devices[0].driver: Required value"`` -> a Status cause (reason, message, field)."""
    path, sep, body = error.partition(": ")
    if not sep:
        path, body = "", error
    reason = next((t for prefix, t in _CAUSE_TYPES.items() if body.startswith(prefix)), "FieldValueInvalid")
    return {"reason": reason, "message": body, "field": path}


def invalid(res: Resource, name: str, errors: list[str]) -> ApiStatusError:
    """422 like ``errors.NewInvalid``: causes per field error, the message aggregated."""
    unique: list[str] = []
    for error in errors:
        if error not in unique:
            unique.append(error)
    causes = [_cause(error) for error in unique]
    aggregate = unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"
    return ApiStatusError(
        422,
        "Invalid",
        f'{res.group_kind} "{name}" is invalid: {aggregate}',
        {"name": name, "group": res.group, "kind": res.kind, "causes": causes}
        if res.group
        else {"name": name, "kind": res.kind, "causes": causes},
    )


def invalid_options(kind: str, error: str) -> ApiStatusError:
    """422 for bad request options (``ValidatePatchOptions``): ``PatchOptions.meta.k8s.io "" is invalid``."""
    return ApiStatusError(
        422,
        "Invalid",
        f'{kind}.meta.k8s.io "" is invalid: {error}',
        {"group": "meta.k8s.io", "kind": kind, "causes": [_cause(error)]},
    )
