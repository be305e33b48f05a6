"""The claim-parameter schema (``spec/claim-parameters.schema.json``): the check, and the words
of a refusal (``dracni/params.py`` applies it with what a schema cannot say).

The schema runs compiled (fastjsonschema, once per process) and, only to word a refusal,
through jsonschema, the reference: a valid claim, the common case, costs ~10 us instead of
jsonschema's ~60-180 us, and jsonschema is never imported for it.  The most specific error
names the offending field (``parameters.config.plugins[1].type: "macvlan/x" must not contain
"/"``).  Both are imported lazily: nothing on the CNI hot path imports this module.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any

SCHEMA_FILE = "claim-parameters.schema.json"
_PLAIN_KEY = re.compile(r"\A[A-Za-z_][A-Za-z0-9_\-]*\Z")
_VALUE_LIMIT = 80


def schema_problem(params: dict[str, Any], where: str) -> tuple[str, str] | None:
    """None when ``params`` pass the schema, else the (field, reason) of the most specific
    error.  Where the compiled check and jsonschema disagree on a refusal, jsonschema's "valid"
    stands (tests/unit/test_params_schema.py holds them to the same verdict)."""
    if fast_check(params):
        return None
    errors = list(_validator().iter_errors(params))
    return _describe(_best_error(errors), where) if errors else None


def fast_check(params: dict[str, Any]) -> bool:
    """Whether the compiled schema passes ``params``."""
    import fastjsonschema

    try:
        _compiled()(params)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


@lru_cache(maxsize=1)
def _compiled() -> Any:
    """The schema compiled to Python once (fastjsonschema; ~15 ms)."""
    import fastjsonschema

    from dracni.specfiles import load_json_spec

    return fastjsonschema.compile(load_json_spec(SCHEMA_FILE), use_formats=False)


@lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema

    from dracni.specfiles import load_json_spec

    schema = load_json_spec(SCHEMA_FILE)
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def _leaves(errors: Iterable[Any]) -> Iterator[Any]:
    for error in errors:
        if error.context:
            yield from _leaves(error.context)
        else:
            yield error


def _best_error(errors: list[Any]) -> Any:
    """The deepest error (the most specific field); the first one among equals."""
    return max(_leaves(errors), key=_depth)


def _depth(error: Any) -> int:
    """Path length of the field an error is about (a missing or unknown key is one deeper)."""
    return len(error.absolute_path) + (error.validator in ("required", "additionalProperties"))


def _describe(error: Any, where: str) -> tuple[str, str]:
    path: list[str | int] = list(error.absolute_path)
    template = error.schema.get("errorMessage") if isinstance(error.schema, dict) else None
    if isinstance(template, dict):
        template = template.get(error.validator)
    if error.validator == "required":
        path.append(_missing_property(error))
        reason = template or "is required"
    elif error.validator == "additionalProperties":
        name, reason = _unknown_property(error)
        path.append(name)
    elif isinstance(template, str):
        reason = template.replace("{value}", show(error.instance))
    else:
        reason = error.message
    return format_path(where, path), reason


def _missing_property(error: Any) -> str:
    missing: list[str] = [p for p in error.validator_value if p not in error.instance]
    for name in missing:
        if error.message.startswith(repr(name)):
            return name
    return missing[0] if missing else "?"


def _unknown_property(error: Any) -> tuple[str, str]:
    known = sorted(error.schema.get("properties", {}))
    extras = [k for k in error.instance if k not in known]
    name = extras[0] if extras else "?"
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
    if close:
        hint = f'; did you mean "{by_lower[close[0]]}"?'
    else:
        hint = f" (known fields: {', '.join(known)})"
    return name, f"unknown field{hint}"


def format_path(where: str, parts: Iterable[str | int]) -> str:
    out = where
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            out += f".{part}"
        else:
            out += f"[{json.dumps(part)}]"
    return out


def show(value: object, *, ascii_only: bool = False) -> str:
    """A value as JSON, shortened for messages; ``ascii_only`` escapes all but printable ASCII."""
    try:
        text = json.dumps(value, ensure_ascii=ascii_only)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _VALUE_LIMIT else text[: _VALUE_LIMIT - 3] + "..."
