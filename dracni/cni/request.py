"""Parse the CNI invocation (environment and stdin) into a validated ``Request``.

Every problem becomes a ``CNIError`` whose message names the variable or field at fault.
"""

from __future__ import annotations

import os

from .. import jsonio
from . import errors as E
from .errors import CNIError
from .versions import LATEST, require_supported, to_current

TYPE_CHECKING = False
if TYPE_CHECKING:  # the CNI hot path: no typing at run time
    from typing import Any

    JSON = dict[str, Any]

COMMANDS = ("ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION")
_ID_PATTERN = "^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$"
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_ID_CHARS = _ALNUM | frozenset("_.-")
_LOG_LEVELS = ("debug", "info", "warning", "error")
MAX_DELEGATE_TIMEOUT = 3600

#: Set in the environment of every delegate dracni runs.  A dracni that finds it was started by
#: dracni (a claim naming ``type: dracni`` as a plugin or as an IPAM) refuses to run, so that a
#: claim can neither make it recurse nor hand it a ``logFile``/``stateDir`` of its choosing.
DELEGATE_MARK = "DRACNI_DELEGATE_OF"

#: dracni's own keys in its plugin config, with their expected JSON types.
OWN_KEYS: dict[str, type | tuple[type, ...]] = {
    "stateDir": str,
    "logFile": str,
    "logLevel": str,
    "delegateTimeout": (int, float),
}


class Request:
    """One CNI invocation.  ``conf`` is the plugin's config object as received."""

    __slots__ = (
        "command",
        "container_id",
        "netns",
        "ifname",
        "args",
        "cni_args",
        "path",
        "conf",
        "cni_version",
        "network",
        "prev_result",
        "env",
    )

    def __init__(self) -> None:
        self.command = ""
        self.container_id = ""
        self.netns = ""
        self.ifname = ""
        self.args = ""
        self.cni_args: dict[str, str] = {}
        self.path: list[str] = []
        self.conf: JSON = {}
        self.cni_version = LATEST
        self.network = ""
        self.prev_result: JSON | None = None  # internal 1.x form
        self.env: dict[str, str] = {}

    @property
    def pod_uid(self) -> str | None:
        return self.cni_args.get("K8S_POD_UID") or None

    @property
    def pod_namespace(self) -> str | None:
        return self.cni_args.get("K8S_POD_NAMESPACE") or None

    @property
    def pod_name(self) -> str | None:
        return self.cni_args.get("K8S_POD_NAME") or None

    def option(self, key: str, default: Any = None) -> Any:
        return self.conf.get(key, default)

    @property
    def state_dir(self) -> str:
        """``stateDir`` of the config, else ``$DRACNI_STATE_DIR``, else the default."""
        configured = self.option("stateDir") or os.environ.get("DRACNI_STATE_DIR")
        if configured:
            return str(configured)
        from ..defaults import STATE_DIR

        return STATE_DIR

    def passthrough_result(self) -> JSON:
        """The result of an ADD that adds nothing: the chain's prevResult as received."""
        if self.prev_result is not None:
            prev: JSON = self.conf["prevResult"]
            return prev
        return {"cniVersion": self.cni_version, "dns": {}}


def parse(env: dict[str, str], stdin: bytes) -> Request:
    req = Request()
    req.env = env
    command = env.get("CNI_COMMAND", "")
    if not command:
        raise CNIError(E.INVALID_ENV, "required environment variable CNI_COMMAND is missing")
    if command not in COMMANDS:
        raise CNIError(E.INVALID_ENV, f"CNI_COMMAND {command!r} is not one of {', '.join(COMMANDS)}")
    req.command = command

    conf = _decode_stdin(stdin, required=command != "VERSION")
    req.conf = conf
    if command == "VERSION":
        version = conf.get("cniVersion", LATEST)
        req.cni_version = version if isinstance(version, str) else LATEST
        return req

    _parse_conf(req, conf)
    _parse_env(req, env)
    return req


def _decode_stdin(stdin: bytes, required: bool) -> JSON:
    if not stdin.strip():
        if required:
            raise CNIError(E.DECODE_FAILURE, "stdin: expected the network configuration as a JSON object, got nothing")
        return {}
    try:
        return jsonio.loads_object(stdin, "stdin: network configuration")
    except ValueError as exc:
        raise CNIError(E.DECODE_FAILURE, str(exc)) from None


def _parse_conf(req: Request, conf: JSON) -> None:
    if "cniVersion" not in conf:
        raise CNIError(E.INVALID_CONFIG, "cniVersion: required field is missing from the network configuration")
    req.cni_version = require_supported(conf["cniVersion"])
    name = conf.get("name")
    if not isinstance(name, str) or not is_cni_identifier(name):
        raise CNIError(E.INVALID_CONFIG, f"name: network name {name!r} must match {_ID_PATTERN}")
    req.network = name
    for key, kind in OWN_KEYS.items():
        if key in conf and (not isinstance(conf[key], kind) or isinstance(conf[key], bool)):
            raise CNIError(E.INVALID_CONFIG, f"{key}: must be a {_type_name(kind)}, got {_json_type(conf[key])}")
    for key in ("stateDir", "logFile"):
        if key in conf:
            _check_path(conf[key], key)
    if "logLevel" in conf and conf["logLevel"] not in _LOG_LEVELS:
        raise CNIError(E.INVALID_CONFIG, f"logLevel: {conf['logLevel']!r} must be one of {', '.join(_LOG_LEVELS)}")
    if "delegateTimeout" in conf and not 0 < conf["delegateTimeout"] <= MAX_DELEGATE_TIMEOUT:
        raise CNIError(
            E.INVALID_CONFIG, f"delegateTimeout: must be a number of seconds above 0 and at most {MAX_DELEGATE_TIMEOUT}"
        )
    for key in ("runtimeConfig", "args"):
        if key in conf and not isinstance(conf[key], dict):
            raise CNIError(E.INVALID_CONFIG, f"{key}: must be a JSON object, got {_json_type(conf[key])}")
    prev = conf.get("prevResult")
    if prev is not None:
        if not isinstance(prev, dict):
            raise CNIError(E.INVALID_CONFIG, f"prevResult: must be a JSON object, got {_json_type(prev)}")
        version = prev.get("cniVersion", req.cni_version)
        require_supported(version, "prevResult.cniVersion")
        _check_result_shape(prev, "prevResult")
        req.prev_result = to_current(prev, version)


def _check_path(value: str, key: str) -> None:
    if not value.startswith("/"):
        raise CNIError(E.INVALID_CONFIG, f"{key}: {value!r} must be an absolute path")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise CNIError(E.INVALID_CONFIG, f"{key}: {value!r} is not valid UTF-8") from None
    if "\0" in value:
        raise CNIError(E.INVALID_CONFIG, f"{key}: {value!r} must not contain a NUL character")


def _check_result_shape(result: JSON, where: str) -> None:
    for key in ("interfaces", "ips", "routes"):
        value = result.get(key)
        if value is not None and (not isinstance(value, list) or not all(isinstance(x, dict) for x in value)):
            raise CNIError(E.INVALID_CONFIG, f"{where}.{key}: must be a list of objects")
    if "dns" in result and not isinstance(result["dns"], dict):
        raise CNIError(E.INVALID_CONFIG, f"{where}.dns: must be an object")


def _parse_env(req: Request, env: dict[str, str]) -> None:
    per_container = req.command in ("ADD", "DEL", "CHECK")
    if per_container:
        cid = env.get("CNI_CONTAINERID", "")
        if not cid:
            raise CNIError(E.UNKNOWN_CONTAINER, "required environment variable CNI_CONTAINERID is missing")
        if not is_cni_identifier(cid):
            raise CNIError(E.INVALID_ENV, f"CNI_CONTAINERID {cid!r} must match {_ID_PATTERN}")
        req.container_id = cid
        req.netns = env.get("CNI_NETNS", "")
        if req.command != "DEL" and not req.netns:
            raise CNIError(E.INVALID_ENV, f"required environment variable CNI_NETNS is missing for {req.command}")
        req.ifname = validate_ifname(env.get("CNI_IFNAME", ""), "CNI_IFNAME", E.INVALID_ENV)
        req.args = env.get("CNI_ARGS", "")
        req.cni_args = parse_cni_args(req.args)
    path = env.get("CNI_PATH", "")
    if not path and req.command != "STATUS":
        raise CNIError(E.INVALID_ENV, "required environment variable CNI_PATH is missing")
    req.path = [p for p in path.split(":") if p]


def is_cni_identifier(value: object) -> bool:
    """Container IDs and network names: ``^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$`` (no ``re`` import)."""
    return isinstance(value, str) and bool(value) and value[0] in _ALNUM and all(c in _ID_CHARS for c in value)


def validate_ifname(name: str, field: str, code: int) -> str:
    """The kernel's and CNI's rules for an interface name."""
    problem = None
    if not name:
        problem = "is missing"
    elif len(name.encode("utf-8", "surrogateescape")) > 15:
        problem = "is longer than 15 bytes"
    elif name in (".", ".."):
        problem = "must not be '.' or '..'"
    elif any(c in name for c in "/:") or any(c.isspace() for c in name):
        problem = "must not contain '/', ':' or whitespace"
    if problem:
        raise CNIError(code, f"{field} {name!r} {problem}" if name else f"required {field} {problem}")
    return name


def parse_cni_args(args: str) -> dict[str, str]:
    """``K=V;K2=V2`` -> dict; a pair without ``=`` is an error naming CNI_ARGS."""
    out: dict[str, str] = {}
    if not args:
        return out
    for pair in args.split(";"):
        if not pair:
            continue
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CNIError(E.INVALID_ENV, f"CNI_ARGS: {pair!r} is not a KEY=VALUE pair")
        out[key] = value
    return out


def _json_type(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def _type_name(kind: object) -> str:
    return "string" if kind is str else "number"
