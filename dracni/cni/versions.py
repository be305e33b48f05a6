"""CNI spec versions dracni speaks, and conversion of results between them.

Results are kept internally in the 1.x form (the 1.0.0 and 1.1.0 result types are the same
but for the version string).  The 0.3.x/0.4.0 form differs only in ``ips[].version`` and in
lacking the fields that 1.1.0 added.
"""

from __future__ import annotations

from .errors import INCOMPATIBLE_VERSION, CNIError

TYPE_CHECKING = False
if TYPE_CHECKING:  # the CNI hot path imports this module: no typing at run time
    from typing import Any

    JSON = dict[str, Any]

SUPPORTED_VERSIONS = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
LATEST = "1.1.0"

_V1_1_ONLY_INTERFACE_FIELDS = ("socketPath", "pciID")
_V1_1_ONLY_ROUTE_FIELDS = ("mtu", "advmss", "priority", "table", "scope")


def parse_version(version: object) -> tuple[int, int, int]:
    """``"1.0.0"`` -> ``(1, 0, 0)``; raises ValueError for anything else."""
    if not isinstance(version, str):
        raise ValueError(f"version must be a string, not {type(version).__name__}")
    parts = version.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"invalid version {version!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


def at_least(version: str, minimum: str) -> bool:
    return parse_version(version) >= parse_version(minimum)


def require_supported(version: object, field: str = "cniVersion") -> str:
    """Accept a config version only by exact match (the spec's rule), else code 1."""
    if version not in SUPPORTED_VERSIONS:
        raise CNIError(
            INCOMPATIBLE_VERSION,
            f"incompatible CNI versions: {field} {version!r} is not supported",
            f"supported versions: {', '.join(SUPPORTED_VERSIONS)}",
        )
    return version


#: Commands the spec introduced after 0.3.0, and the version that introduced each.
COMMAND_SINCE = {"CHECK": "0.4.0", "GC": "1.1.0", "STATUS": "1.1.0"}


def require_command_version(version: str, command: str) -> None:
    """The spec's version rule for a command: a config older than the command's version gets
    error 1 (libcni's ``pkg/skel`` ``PluginMainFuncsWithError``: "config version does not allow GC")."""
    since = COMMAND_SINCE.get(command)
    if since is not None and not at_least(version, since):
        raise CNIError(
            INCOMPATIBLE_VERSION,
            f"config version {version} does not allow {command}",
            f"{command} was introduced in CNI {since}",
        )


def best_common_version(theirs: list[str], cap: str = LATEST) -> str | None:
    """Highest version both sides speak, not above ``cap``."""
    ours = {parse_version(v): v for v in SUPPORTED_VERSIONS if parse_version(v) <= parse_version(cap)}
    common = []
    for v in theirs:
        try:
            key = parse_version(v)
        except ValueError:
            continue
        if key in ours:
            common.append(key)
    return ours[max(common)] if common else None


def to_current(result: JSON, version: str | None = None) -> JSON:
    """Convert a result of any supported version to the internal 1.x form.

    The form keeps the version it came in when that is 1.x (so a delegate's result is
    reported as the delegate wrote it); an older result becomes 1.0.0.
    """
    version = version or result.get("cniVersion") or LATEST
    if version not in SUPPORTED_VERSIONS:
        raise CNIError(
            INCOMPATIBLE_VERSION,
            f"cannot convert a result of version {version!r}",
            f"supported versions: {', '.join(SUPPORTED_VERSIONS)}",
        )
    out = dict(result)
    if at_least(version, "1.0.0"):
        out["cniVersion"] = version
    else:
        out["ips"] = [{k: v for k, v in ip.items() if k != "version"} for ip in result.get("ips") or []]
        out["cniVersion"] = "1.0.0"
    return out


def from_current(result: JSON, version: str) -> JSON:
    """Convert an internal 1.x result to the form of ``version``."""
    out = dict(result)
    out["cniVersion"] = version
    if at_least(version, "1.0.0"):
        return out
    out["interfaces"] = [
        {k: v for k, v in iface.items() if k not in _V1_1_ONLY_INTERFACE_FIELDS}
        for iface in result.get("interfaces") or []
    ]
    out["ips"] = [{**ip, "version": _ip_family(ip.get("address", ""))} for ip in result.get("ips") or []]
    out["routes"] = [
        {k: v for k, v in route.items() if k not in _V1_1_ONLY_ROUTE_FIELDS} for route in result.get("routes") or []
    ]
    for key in ("interfaces", "ips", "routes"):
        if not out[key]:
            del out[key]
    return out


def convert(result: JSON, to_version: str) -> JSON:
    return from_current(to_current(result), to_version)


def _ip_family(address: str) -> str:
    return "6" if ":" in address else "4"
