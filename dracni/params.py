"""Validate and normalise the opaque parameters of a ResourceClaim device config.

The rules live in ``spec/claim-parameters.schema.json``; this module applies that schema
(``dracni/paramschema.py``: the check, and a message naming the offending field) and adds what
a schema cannot express: decoding a JSON-string config first, config and network being
exclusive, and the derived names of a single-plugin config.  What a tenant may put in them is
the tenant policy's business (``dracni.policy``).  Nothing on the CNI hot path imports this
module.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from typing import Any, NotRequired, TypedDict

from dracni.paramschema import format_path, schema_problem, show
from dracni.recent import RecentResults

API_VERSION_DRACNI = "dracni.io/v1alpha1"
API_VERSION_CNI_DRA = "cni.networking.x-k8s.io/v1alpha1"

_NETWORK_NAME = re.compile(r"\A[a-zA-Z0-9][a-zA-Z0-9_.\-]*\Z")
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


def _copied(value: Any) -> Any:
    """A copy of JSON data sharing nothing mutable with it (5x faster than ``copy.deepcopy``,
    which also keeps a memo for shared and cyclic references, which JSON data has none of)."""
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_copied(v) for v in value)
    return value


#: Parameters validated lately (their JSON text -> the result), at most this many: a
#: DeviceClass's network reaches the node in the allocation of every claim of the class, and the
#: claims of one template carry the same parameters, so in a burst of pod starts most
#: validations are repeats (each ~100 us of the ~600 us a claim costs; a hit is a copy, ~5 us).
#: Failures are not kept.
VALIDATED_CACHE_SIZE = 128
_validated: RecentResults[DeviceParameters] = RecentResults(VALIDATED_CACHE_SIZE, copy=_copied)


def validate_parameters(params: object, *, where: str = "parameters") -> DeviceParameters:
    """Check the shape of ``params`` and return the normalised attachment.

    ``config``, when given, is always returned as a conflist object (a single plugin config
    becomes a one-plugin conflist named after its ``name``, else its ``type``).  The input is
    never modified; the result shares nothing with it.  Parameters seen lately are answered from
    ``_validated`` (the result does not depend on ``where``, which only words errors).
    """
    if not isinstance(params, dict):  # refused, and never kept
        return _validate(params, where)
    return _validated.made(params, lambda: _validate(params, where))


def _validate(params: object, where: str) -> DeviceParameters:
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
        raise ParameterError(f"{where}.ifName", f"{show(if_name)} is longer than {_IFNAMSIZ} bytes")
    if if_name is not None and (bad := _IF_NAME_UNSAFE.search(if_name)):
        raise ParameterError(
            f"{where}.ifName",
            f"{show(if_name, ascii_only=True)} holds a character Linux tools mishandle,"
            f" {show(bad.group(), ascii_only=True)} (rule ifNameCharacters: {IF_NAME_CHARACTERS})",
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
                    raise ParameterError(format_path(where, path), f"the key {show(key, ascii_only=True)} {problem}")
                stack.append((child, [*path, key]))
        elif isinstance(item, list):
            stack.extend((child, [*path, i]) for i, child in enumerate(item))
        elif isinstance(item, str) and (problem := _unencodable(item)):
            raise ParameterError(format_path(where, path), f"{show(item, ascii_only=True)} {problem}")


def _unencodable(text: str) -> str | None:
    if "\0" in text:
        return "holds a NUL character"
    try:
        text.encode()
    except UnicodeEncodeError:
        return "holds a lone surrogate: not valid Unicode text"
    return None


def _check_schema(params: dict[str, Any], where: str) -> None:
    problem = schema_problem(params, where)
    if problem is not None:
        raise ParameterError(*problem)


def _check_depth(value: object, field: str, base: int = 0) -> None:
    if base + nesting_depth(value, MAX_PARAMETER_DEPTH - base) > MAX_PARAMETER_DEPTH:
        raise ParameterError(field, _too_deep())


def _too_deep() -> str:
    return f"nested too deeply: the limit is {MAX_PARAMETER_DEPTH} levels of objects and arrays"


def _as_conflist(plugin: dict[str, Any], field: str) -> dict[str, Any]:
    """Wrap a single plugin config the way libcni's ConfListFromConf does."""
    plugin = copy.deepcopy(plugin)
    name = plugin.get("name") or plugin["type"]
    if not _NETWORK_NAME.match(name):
        raise ParameterError(
            f"{field}.type",
            f'{show(plugin["type"])} cannot be used as the network name; set "name" in the config',
        )
    conflist: dict[str, Any] = {"name": name, "plugins": [plugin]}
    if "cniVersion" in plugin:
        conflist["cniVersion"] = plugin["cniVersion"]
    return conflist


# -- schema errors -----------------------------------------------------------------------


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
