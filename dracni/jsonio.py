"""JSON for the CNI hot path.

The standard library's ``json`` costs ~6 ms to import; orjson costs ~15 ms (its extension
imports dataclasses, inspect, uuid and datetime at load), which would double the start-up
time of every CNI call.  Records and CNI messages are small, so parsing speed does not matter
here and the standard library wins.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:  # the CNI hot path imports this module: no typing at run time
    from typing import Any


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads(data: bytes | str) -> Any:
    """Strict JSON in UTF-8: raises ValueError (also for NaN/Infinity, UTF-16/32 and bad UTF-8)."""
    if isinstance(data, bytes | bytearray):
        data = data.decode("utf-8")  # json.loads would guess UTF-16/32 and pass surrogates
    return json.loads(data, parse_constant=_reject_constant)


def loads_object(data: bytes | str, what: str) -> dict[str, Any]:
    """A JSON object; ValueError naming ``what`` when ``data`` is not JSON or not an object."""
    try:
        decoded = loads(data)
    except ValueError as exc:
        raise ValueError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(decoded, dict):
        raise ValueError(f"{what} must be a JSON object, not {type(decoded).__name__}")
    obj: dict[str, Any] = decoded
    return obj


def dumps(obj: object, pretty: bool = False, ascii_only: bool = False) -> bytes:
    """Serialize; ``ascii_only`` escapes everything non-ASCII (lone surrogates included)."""
    if ascii_only:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=True).encode()
    if pretty:
        return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False).encode()
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
