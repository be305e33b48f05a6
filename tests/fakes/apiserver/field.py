"""Field errors worded as apimachinery words them (``k8s.io/apimachinery/pkg/util/validation/field``:
``errors.go`` ``Error.Error``/``ErrorBody`` and the constructors ``Invalid``, ``Required``,
``Duplicate``, ``NotSupported``, ``Forbidden``, ``TooLong``, ``TooMany``).

``Error.Error()`` is ``<field>: <ErrorBody>``; ``ErrorBody`` prints the type's text, then the bad
value (not for Required, Forbidden, TooLong and Internal: ``ErrorBody``'s first cases), strings
with Go's ``%q``, numbers and booleans with ``%v``, ``fmt.Stringer`` values with ``String()``, then
``: <detail>`` when there is one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


class Stringer(str):
    """A bad value printed with its ``String()`` method, unquoted (``fmt.Stringer`` in ``ErrorBody``),
    e.g. ``structured.SharedDeviceID``."""


def _value(value: Any) -> str:
    """``ErrorBody``'s printing of ``BadValue``."""
    if value is None:
        return "null"
    if isinstance(value, Stringer):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # Go's %q for the strings a test uses
    return json.dumps(value, separators=(",", ":"))


def invalid(path: str, value: Any, detail: str) -> str:
    """``field.Invalid``: ``<path>: Invalid value: <value>: <detail>``."""
    return f"{path}: Invalid value: {_value(value)}" + (f": {detail}" if detail else "")


def required(path: str, detail: str = "") -> str:
    """``field.Required``."""
    return f"{path}: Required value" + (f": {detail}" if detail else "")


def duplicate(path: str, value: Any) -> str:
    """``field.Duplicate``."""
    return f"{path}: Duplicate value: {_value(value)}"


def too_long(path: str, limit: int) -> str:
    """``field.TooLong`` (the value is never printed)."""
    return f"{path}: Too long: must have at most {limit} bytes"


def too_many(path: str, actual: int, limit: int) -> str:
    """``field.TooMany``."""
    return f"{path}: Too many: {actual}: must have at most {limit} items"


def not_supported(path: str, value: Any, supported: Iterable[str]) -> str:
    """``field.NotSupported``: the valid values each ``strconv.Quote``d."""
    values = ", ".join(json.dumps(v) for v in supported)
    return f"{path}: Unsupported value: {_value(value)}" + (f": supported values: {values}" if values else "")


def forbidden(path: str, detail: str) -> str:
    """``field.Forbidden``."""
    return f"{path}: Forbidden: {detail}"
