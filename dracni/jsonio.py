"""JSON for the CNI hot path, straight from the standard library's C accelerator ``_json``.

Importing ``json`` costs ~6 ms of every CNI exec: ``json.decoder``, ``json.scanner`` and
``json.encoder`` import ``re`` (and through it ``enum``, ``functools``, ``collections``) for
patterns the C accelerator never uses.  orjson costs more (~15 ms: its extension imports
dataclasses, inspect, uuid and datetime).  So this module drives ``_json``'s scanner and
encoder the way ``json`` itself does (``json.decoder.JSONDecoder`` and
``json.encoder.JSONEncoder.iterencode`` of CPython 3.11 build them from the same settings),
and formats the indented records in Python as ``json``'s pure-Python encoder would.

The results are those of ``json``: anything the fast path does not take on (an error to word,
a type other than the JSON ones, keys that are not strings, deep nesting) goes to the
``json`` module itself, imported then, so error messages stay ``json``'s word for word.
``tests/unit/test_jsonio.py`` holds both paths to the same output.
"""

from __future__ import annotations

import _json

TYPE_CHECKING = False
if TYPE_CHECKING:  # the CNI hot path imports this module: no typing at run time
    from typing import Any

#: JSON's insignificant whitespace (``json.decoder.WHITESPACE`` without the regular expression).
_WS = " \t\n\r"
#: Deeper than this, the fast encoders hand over to ``json`` (which detects cycles).
_MAX_DEPTH = 200


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class _DecoderSettings:
    """What ``_json.make_scanner`` reads from a ``json.JSONDecoder``: the defaults, except that
    NaN and Infinity are refused (``parse_constant``)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_reject_constant)


_scan_once = _json.make_scanner(_DecoderSettings())  # type: ignore[arg-type]


def _type_error(o: object) -> Any:
    """``json.JSONEncoder.default``: what the C encoder calls for a type it does not know."""
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


def _compact_encoder(ascii_only: bool) -> Any:
    """``JSONEncoder(separators=(",", ":"), ensure_ascii=ascii_only).iterencode(o, _one_shot=True)``
    as ``json.encoder`` builds it: markers for cycles, the C string encoder, no indent."""
    strings = _json.encode_basestring_ascii if ascii_only else _json.encode_basestring
    return _json.make_encoder({}, _type_error, strings, None, ":", ",", False, False, True)


class _Unsupported(Exception):
    """The fast path does not take this value on: ``json`` does."""


def loads(data: bytes | str) -> Any:
    """Strict JSON in UTF-8: raises ValueError (also for NaN/Infinity, UTF-16/32 and bad UTF-8)."""
    if isinstance(data, bytes | bytearray):
        data = data.decode("utf-8")  # json.loads would guess UTF-16/32 and pass surrogates
    # json.decoder.JSONDecoder.decode: skip whitespace, scan one value, only whitespace after it.
    start = len(data) - len(data.lstrip(_WS))
    try:
        value, end = _scan_once(data, start)
    except (StopIteration, ValueError, SystemError):
        # SystemError: CPython 3.11's scanner words its errors with json.decoder.JSONDecodeError
        # and fails that way while json.decoder is not imported.
        return _slow_loads(data)
    if end != len(data) and data[end:].strip(_WS):
        return _slow_loads(data)
    return value


def _slow_loads(data: str) -> Any:
    """``json.loads`` itself: here only to raise its error (or, never expected, to disagree)."""
    import json

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
    """Serialize; ``ascii_only`` escapes everything non-ASCII (lone surrogates included).

    Compact (``separators=(",", ":")``) unless ``pretty``: ``indent=2``, ``sort_keys=True``.
    """
    if ascii_only or not pretty:
        if isinstance(obj, str):  # JSONEncoder.encode's shortcut for a bare string
            text = _json.encode_basestring_ascii(obj) if ascii_only else _json.encode_basestring(obj)
        else:
            text = "".join(_compact_encoder(ascii_only)(obj, 0))
        return text.encode()
    out: list[str] = []
    try:
        _pretty(obj, 0, out)
    except _Unsupported:
        import json

        return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False).encode()
    return "".join(out).encode()


def _float(value: float) -> str:
    """``json.encoder``'s ``floatstr`` with ``allow_nan=True``."""
    if value != value:
        return "NaN"
    if value == float("inf"):
        return "Infinity"
    if value == float("-inf"):
        return "-Infinity"
    return float.__repr__(value)


def _pretty(o: object, level: int, out: list[str]) -> None:
    """``json.encoder._make_iterencode`` with ``indent=2``, ``sort_keys=True``,
    ``ensure_ascii=False``, for exactly the JSON types (str, int, float, bool, None, list,
    tuple, dict with string keys); anything else raises ``_Unsupported``."""
    kind = type(o)
    if isinstance(o, str) and kind is str:
        out.append(_json.encode_basestring(o))
    elif o is None:
        out.append("null")
    elif o is True:
        out.append("true")
    elif o is False:
        out.append("false")
    elif kind is int:
        out.append(int.__repr__(o))
    elif kind is float:
        out.append(_float(o))  # type: ignore[arg-type]
    elif kind is list or kind is tuple:
        items: list[Any] | tuple[Any, ...] = o  # type: ignore[assignment]
        if not items:
            out.append("[]")
            return
        if level >= _MAX_DEPTH:
            raise _Unsupported
        newline = "\n" + "  " * (level + 1)
        out.append("[")
        for i, item in enumerate(items):
            out.append(newline if i == 0 else "," + newline)
            _pretty(item, level + 1, out)
        out.append("\n" + "  " * level + "]")
    elif kind is dict:
        mapping: dict[Any, Any] = o  # type: ignore[assignment]
        if not mapping:
            out.append("{}")
            return
        if level >= _MAX_DEPTH:
            raise _Unsupported
        for key in mapping:
            if type(key) is not str:
                raise _Unsupported
        newline = "\n" + "  " * (level + 1)
        out.append("{")
        for i, key in enumerate(sorted(mapping)):
            out.append(newline if i == 0 else "," + newline)
            out.append(_json.encode_basestring(key))
            out.append(": ")
            _pretty(mapping[key], level + 1, out)
        out.append("\n" + "  " * level + "}")
    else:
        raise _Unsupported
