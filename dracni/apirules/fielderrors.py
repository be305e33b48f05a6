"""Kubernetes field errors as the API server words them (apimachinery ``field.Error``).

Used by dracni's own status validation.  (The test API server words its errors from apimachinery
itself, tests/fakes/apiserver/field.py; current apimachinery says "Too long: must have at most N
bytes" where this module still says "may not be more than N bytes".)
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


def quote(value: Any) -> str:
    """Go's ``%q`` for strings, near enough; other values as JSON."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def invalid(path: str, value: Any, detail: str) -> str:
    return f"{path}: Invalid value: {quote(value)}: {detail}"


def required(path: str, detail: str = "") -> str:
    return f"{path}: Required value" + (f": {detail}" if detail else "")


def duplicate(path: str, value: Any) -> str:
    return f"{path}: Duplicate value: {quote(value)}"


def too_long(path: str, limit: int) -> str:
    return f"{path}: Too long: may not be more than {limit} bytes"


def too_many(path: str, actual: int, limit: int) -> str:
    return f"{path}: Too many: {actual}: must have at most {limit} items"


def not_supported(path: str, value: Any, supported: Iterable[str]) -> str:
    values = ", ".join(quote(v) for v in supported)
    return f"{path}: Unsupported value: {quote(value)}: supported values: {values}"


def forbidden(path: str, detail: str) -> str:
    return f"{path}: Forbidden: {detail}"
