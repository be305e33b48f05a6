"""Sizes of JSON as the API server's Go code encodes it, not as Python does.

The API server measures a RawExtension (``status.devices[].data``) on bytes Go wrote: a
server-side apply turns the applied object into unstructured maps and back, and
``k8s.io/apimachinery/pkg/runtime/converter.go`` (``fromUnstructured``, the custom-unmarshaler
branch) rebuilds the RawExtension's ``Raw`` with ``encoding/json``'s ``json.Marshal``; then
``k8s.io/kubernetes/pkg/apis/resource/validation/validation.go`` (``validateDeviceStatus`` ->
``validateRawExtension``) compares ``len(Raw)`` with ``AllocatedDeviceStatusDataMaxLength``
(10 KiB, ``pkg/apis/resource/types.go``).

``json.Marshal`` differs from orjson in what changes a size: it escapes ``<``, ``>`` and ``&``
as ``\\u003c``, ``\\u003e``, ``\\u0026`` (6 bytes for 1, ``encoding/json`` ``appendString``
with HTML escaping on, ``Marshal``'s default) and U+2028/U+2029 as ``\\u2028``/``\\u2029``
(6 bytes for 3); it writes floats in ``strconv`` shortest form, exponent only below 1e-6 or
from 1e21 on (``floatEncoder``), so ``1.0`` is ``1``.  Everything else (compact separators,
UTF-8 kept raw, control characters escaped) is the same.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import orjson

_HTML_ESCAPES = (
    (b"<", b"\\u003c"),
    (b">", b"\\u003e"),
    (b"&", b"\\u0026"),
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
)


def go_float(value: float) -> str:
    """``value`` as ``encoding/json`` writes a float64 (``floatEncoder``)."""
    if not math.isfinite(value):
        raise ValueError("unsupported value: NaN or Inf")  # json.Marshal's UnsupportedValueError
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        text = repr(value)  # Python's shortest digits, in exponent form in this range
        mantissa, _, exponent = text.partition("e")
        sign, digits = exponent[0], exponent[1:].lstrip("0") or "0"
        return f"{mantissa}e{sign}{digits}"  # Go writes e-7 where Python writes e-07
    return format(Decimal(repr(value)).normalize(), "f")


def _go_numbers(value: Any, depth: int = 0) -> Any:
    """``value`` with each float replaced by its Go text (orjson writes the rest as Go does)."""
    if isinstance(value, float):
        return orjson.Fragment(go_float(value))
    if depth > 200:
        raise ValueError("nested too deeply")
    if isinstance(value, dict):
        return {k: _go_numbers(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_go_numbers(v, depth + 1) for v in value]
    return value


def go_marshal(value: Any) -> bytes | None:
    """``value`` encoded as Go's ``json.Marshal`` would (key order aside); None when Go could not."""
    try:
        raw = orjson.dumps(_go_numbers(value))
    except (orjson.JSONEncodeError, TypeError, ValueError):
        return None
    for plain, escaped in _HTML_ESCAPES:  # outside strings JSON has none of these bytes
        raw = raw.replace(plain, escaped)
    return raw


def go_json_size(value: Any) -> int | None:
    """Bytes of ``value`` as the API server's ``json.Marshal`` writes it; None: not JSON."""
    raw = go_marshal(value)
    return None if raw is None else len(raw)
