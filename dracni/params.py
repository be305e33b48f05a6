"""Validate and normalise the opaque parameters of a ResourceClaim device config.

The rules live in ``spec/claim-parameters.schema.json``; this module applies that schema,
turns the most specific schema error into a message naming the offending field
(``parameters.config.plugins[1].type: "macvlan/x" must not contain "/"``), and adds what a
schema cannot express: decoding a JSON-string config first, config and network being
exclusive, and the derived names of a single-plugin config.  What a tenant may put in them is
the tenant policy's business (``dracni.policy``).

The schema runs compiled (fastjsonschema) and, only to word a refusal, through jsonschema; both
are imported here only (lazily, on first validation): nothing on the CNI hot path imports this
module.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any, NotRequired, TypedDict

SCHEMA_FILE = "claim-parameters.schema.json"
API_VERSION_DRACNI = "dracni.io/v1alpha1"
API_VERSION_CNI_DRA = "cni.networking.x-k8s.io/v1alpha1"

_NETWORK_NAME = re.compile(r"\A[a-zA-Z0-9][a-zA-Z0-9_.\-]*\Z")
_PLAIN_KEY = re.compile(r"\A[A-Za-z_][A-Za-z0-9_\-]*\Z")
_IFNAMSIZ = 15  # bytes, without the terminating NUL
#: A character of an interface name that Linux tools mishandle: anything but printable ASCII
#: (control characters such as ESC reach terminals raw through ``ip`` and ``dracni inspect``,
#: and break ``ip -j``'s JSON), quotes and backslash (quoting in scripts and JSON tools), '/'
#: and ':' (the kernel's own dev_valid_name refuses them) and '%' (the kernel reads a name
#: holding "%d" as a pattern and picks a free number: the interface gets another name).
_IF_NAME_UNSAFE = re.compile(r"[^\x21-\x7e]|[\"'`\\%/:]")
#: Why: the same text as dracni.policy.rules.RULES["ifNameCharacters"] (a test holds them equal;
#: this module sits below the policy and cannot import it).
IF_NAME_CHARACTERS = (
    "an interface name is printable ASCII without whitespace, quotes, backslash, '/', ':' or '%', "
    "so that ip, JSON tools and terminals show it as it is and the kernel creates it under that name"
)
_VALUE_LIMIT = 80

#: How deep the opaque parameters may nest (objects and arrays).  A real config needs fewer
#: than ten levels; the limit keeps the recursive schema check and copies far from Python's
#: recursion limit, whatever a tenant sends.
MAX_PARAMETER_DEPTH = 32


class DeviceParameters(TypedDict):
    """Validated, normalised parameters of one device: the attachment part of a ``DeviceSpec``.

    ``config`` is None when the parameters choose a DeviceClass network instead (``network``
    names it, or None: the class's last one); ``single`` says the config was one plugin.
    """

    ifName: str | None
    config: dict[str, Any] | None  # always a conflist when present
    network: str | None
    single: bool
    runtimeConfig: dict[str, Any]
    capabilities: dict[str, bool]
    persistentIPs: bool
    ipamClaim: str | None
    addressPool: NotRequired[dict[str, Any]]  # only when the parameters name a pool
    allowedMACPrefixes: NotRequired[list[str]]  # only when given: vendor MAC prefixes tenants may use


class ParameterError(ValueError):
    """Invalid opaque parameters; ``field`` is the offending path, e.g. ``parameters.ifName``."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def validate_parameters(params: object, *, where: str = "parameters") -> DeviceParameters:
    """Check the shape of ``params`` and return the normalised attachment.

    ``config``, when given, is always returned as a conflist object (a single plugin config
    becomes a one-plugin conflist named after its ``name``, else its ``type``).  The input is
    never modified; the result shares nothing with it.
    """
    if not isinstance(params, dict):
        raise ParameterError(where, f"must be a JSON object, not {_json_type(params)}")
    _check_depth(params, where)
    check_encodable(params, where)
    params = _decode_config(params, where)
    _check_schema(params, where)
    raw = params.get("config")
    if raw is not None and params.get("network") is not None:
        raise ParameterError(
            f"{where}.network", "give either network (a network of the DeviceClass) or config, not both"
        )
    single = raw is not None and "plugins" not in raw
    config_field = f"{where}.config"
    config = None if raw is None else _as_conflist(raw, config_field) if single else copy.deepcopy(raw)
    if_name = params.get("ifName")
    if if_name is not None and len(if_name.encode()) > _IFNAMSIZ:
        raise ParameterError(f"{where}.ifName", f"{_show(if_name)} is longer than {_IFNAMSIZ} bytes")
    if if_name is not None and (bad := _IF_NAME_UNSAFE.search(if_name)):
        raise ParameterError(
            f"{where}.ifName",
            f"{_show(if_name, ascii_only=True)} holds a character Linux tools mishandle,"
            f" {_show(bad.group(), ascii_only=True)} (rule ifNameCharacters: {IF_NAME_CHARACTERS})",
        )
    out: DeviceParameters = {
        "ifName": if_name,
        "config": config,
        "network": params.get("network"),
        "single": single,
        "runtimeConfig": copy.deepcopy(params.get("runtimeConfig") or {}),
        "capabilities": dict(params.get("capabilities") or {}),
        "persistentIPs": bool(params.get("persistentIPs", False)),
        "ipamClaim": params.get("ipamClaim"),
    }
    if params.get("addressPool") is not None:
        out["addressPool"] = copy.deepcopy(params["addressPool"])
    if params.get("allowedMACPrefixes") is not None:
        out["allowedMACPrefixes"] = list(params["allowedMACPrefixes"])
    return out


# -- steps -------------------------------------------------------------------------------


def _decode_config(params: dict[str, Any], where: str) -> dict[str, Any]:
    """dracni's own form accepts the config as a JSON string: decode it before validating."""
    config = params.get("config")
    if params.get("apiVersion") != API_VERSION_DRACNI or not isinstance(config, str):
        return params
    try:
        decoded = json.loads(config)
    except json.JSONDecodeError as exc:
        raise ParameterError(f"{where}.config", f"not valid JSON: {exc}") from None
    except RecursionError:
        raise ParameterError(f"{where}.config", _too_deep()) from None
    if not isinstance(decoded, dict):
        raise ParameterError(
            f"{where}.config",
            f"the JSON string holds {_json_type(decoded)}, not a conflist or plugin config object",
        )
    _check_depth(decoded, f"{where}.config", base=1)
    check_encodable(decoded, f"{where}.config")
    return {**params, "config": decoded}


def nesting_depth(value: object, stop_after: int) -> int:
    """How deep ``value`` nests objects and arrays (a scalar: 0), counted without recursion;
    counting stops once past ``stop_after``."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[object]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if deepest > stop_after:
            return deepest
        stack.extend((child, depth) for child in children)
    return deepest


def check_encodable(value: object, where: str) -> None:
    """Refuse a string (key or value, at any depth) that cannot be written as UTF-8 text: a lone
    surrogate (JSON's "\\ud800" decodes to one) or a NUL.  Checked where the parameters enter,
    so that nothing later (the schema's messages, the stored record, a plugin's stdin) meets one.
    Without recursion; the caller has bounded the depth.
    """
    stack: list[tuple[object, list[str | int]]] = [(value, [])]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and (problem := _unencodable(key)):
                    raise ParameterError(_format_path(where, path), f"the key {_show(key, ascii_only=True)} {problem}")
                stack.append((child, [*path, key]))
        elif isinstance(item, list):
            stack.extend((child, [*path, i]) for i, child in enumerate(item))
        elif isinstance(item, str) and (problem := _unencodable(item)):
            raise ParameterError(_format_path(where, path), f"{_show(item, ascii_only=True)} {problem}")


def _unencodable(text: str) -> str | None:
    if "\0" in text:
        return "holds a NUL character"
    try:
        text.encode()
    except UnicodeEncodeError:
        return "holds a lone surrogate: not valid Unicode text"
    return None


def _check_depth(value: object, field: str, base: int = 0) -> None:
    if base + nesting_depth(value, MAX_PARAMETER_DEPTH - base) > MAX_PARAMETER_DEPTH:
        raise ParameterError(field, _too_deep())


def _too_deep() -> str:
    return f"nested too deeply: the limit is {MAX_PARAMETER_DEPTH} levels of objects and arrays"


def _check_schema(params: dict[str, Any], where: str) -> None:
    """The schema's verdict: fastjsonschema's compiled check first (a valid claim, the common
    case, costs ~10 us instead of jsonschema's ~60-180 us, and jsonschema is never imported);
    only for parameters it refuses does jsonschema, the reference, find and word the error.  Where
    the two disagree on a refusal, jsonschema's "valid" stands (tests/unit/test_params_schema.py
    holds them to the same verdict over the tests' corpus)."""
    if _fast_check(params):
        return
    errors = list(_validator().iter_errors(params))
    if errors:
        field, reason = _describe(_best_error(errors), where)
        raise ParameterError(field, reason)


def _fast_check(params: dict[str, Any]) -> bool:
    """Whether the compiled schema passes ``params``."""
    import fastjsonschema

    try:
        _compiled()(params)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


def _as_conflist(plugin: dict[str, Any], field: str) -> dict[str, Any]:
    """Wrap a single plugin config the way libcni's ConfListFromConf does."""
    plugin = copy.deepcopy(plugin)
    name = plugin.get("name") or plugin["type"]
    if not _NETWORK_NAME.match(name):
        raise ParameterError(
            f"{field}.type",
            f'{_show(plugin["type"])} cannot be used as the network name; set "name" in the config',
        )
    conflist: dict[str, Any] = {"name": name, "plugins": [plugin]}
    if "cniVersion" in plugin:
        conflist["cniVersion"] = plugin["cniVersion"]
    return conflist


# -- schema errors -----------------------------------------------------------------------


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
        reason = template.replace("{value}", _show(error.instance))
    else:
        reason = error.message
    return _format_path(where, path), reason


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


def _format_path(where: str, parts: Iterable[str | int]) -> str:
    out = where
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            out += f".{part}"
        else:
            out += f"[{json.dumps(part)}]"
    return out


def _show(value: object, *, ascii_only: bool = False) -> str:
    """A value as JSON, shortened for messages; ``ascii_only`` escapes all but printable ASCII."""
    try:
        text = json.dumps(value, ensure_ascii=ascii_only)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _VALUE_LIMIT else text[: _VALUE_LIMIT - 3] + "..."


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__
