"""The bytes Go's ``encoding/json`` ``json.Marshal`` writes for a decoded JSON value.

The API server validates ``status.devices[].data`` (a RawExtension) on ``len(Raw)``
(``pkg/apis/resource/validation/validation.go`` ``validateDeviceStatus`` ->
``validateRawExtension``).  A server-side apply or a patch rebuilds ``Raw`` from unstructured
maps with ``json.Marshal`` (``k8s.io/apimachinery/pkg/runtime/converter.go``
``fromUnstructured``: a type with a custom ``UnmarshalJSON`` gets ``json.Marshal(sv.Interface())``),
so the size is that of Go's encoding, not of the client's bytes.  (A ``PUT`` keeps the client's
bytes; the fake, which parses bodies, measures those the same way.)

Go's encoder, as this module writes it (``encoding/json/encode.go``):

- strings (``appendString`` with ``escapeHTML``, ``Marshal``'s default): ``"`` and ``\\``
  escaped, ``\\b \\f \\n \\r \\t`` short (Go 1.22+), other bytes below 0x20 and ``<``, ``>``,
  ``&`` as ``\\u00XX``; U+2028 and U+2029 as ``\\u2028``/``\\u2029``; invalid UTF-8 (here: a
  lone surrogate) as U+FFFD; every other character as raw UTF-8;
- float64 (``floatEncoder``): shortest digits, exponent form only below 1e-6 or from 1e21 on,
  with at least one exponent digit (``1e-7``); integers as written;
- no spaces; maps with their keys sorted (the order does not change the size).
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _string(text: str) -> str:
    out = ['"']
    for char in text:
        code = ord(char)
        if char in _SHORT:
            out.append(_SHORT[char])
        elif code < 0x20 or char in "<>&" or char in "\u2028\u2029":
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\ufffd")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _float(value: float) -> str:
    if not math.isfinite(value):
        raise ValueError("json: unsupported value")
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        mantissa, _, exponent = repr(value).partition("e")
        return f"{mantissa}e{exponent[0]}{exponent[1:].lstrip('0') or '0'}"
    return format(Decimal(repr(value)).normalize(), "f")


def marshal(value: Any) -> str:
    """``json.Marshal(value)`` as text."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ",".join(marshal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_string(k)}:{marshal(value[k])}" for k in sorted(value)) + "}"
    raise TypeError(f"json: unsupported type {type(value).__name__}")


def marshal_size(value: Any) -> int:
    """``len(json.Marshal(value))`` in bytes."""
    return len(marshal(value).encode("utf-8"))
