"""GC's inputs and its forwarding: which attachments the runtime still calls valid, and the GC
of each delegate network (CNI 1.1.0) listing the attachments of it that stay.

The release of dracni's own stale attachments is the plugin's (``plugin.py MetaPlugin.gc``);
this module holds the two steps around it that need no attachment record of their own.
"""

from __future__ import annotations

from . import errors as E
from .conflist import gc_network
from .errors import CNIError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..state.records import JSON, Attachment
    from ..state.store import BadRecord, StateDir
    from .delegate import DelegateRunner


def valid_attachments(conf: JSON) -> set[tuple[str, str]]:
    """GC's ``cni.dev/valid-attachments`` (or the legacy ``cni.dev/attachments``) as a set of
    (containerID, ifname); an invalid list is INVALID_CONFIG."""
    key = "cni.dev/valid-attachments" if "cni.dev/valid-attachments" in conf else "cni.dev/attachments"
    entries = conf.get(key)
    if entries is None:
        raise CNIError(E.INVALID_CONFIG, "cni.dev/valid-attachments: required for GC")
    if not isinstance(entries, list):
        raise CNIError(E.INVALID_CONFIG, f"{key}: must be a list of {{containerID, ifname}} objects")
    valid = set()
    for i, entry in enumerate(entries):
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("containerID"), str)
            or not isinstance(entry.get("ifname"), str)
        ):
            raise CNIError(E.INVALID_CONFIG, f"{key}[{i}]: must be an object with string containerID and ifname")
        valid.add((entry["containerID"], entry["ifname"]))
    return valid


def forward_gc(runner: DelegateRunner, state: StateDir, kept: list[Attachment]) -> list[str]:
    """GC each delegate network that speaks 1.1.0, listing the attachments still valid."""
    networks: dict[tuple[str, str], JSON] = {}
    unreadable: list[BadRecord] = []  # the service's records: reported by inspect, left in place
    for claim in state.list_claims(unreadable):
        for spec in claim.get("devices", []):
            for plugin in spec["config"]["plugins"]:
                networks.setdefault((spec["config"]["name"], plugin.get("type")), {"plugin": plugin, "valid": []})
    for record in kept:
        for dev in record["devices"]:
            for delegate in dev["delegates"]:
                entry = networks.setdefault(
                    (delegate["config"]["name"], delegate["type"]), {"plugin": delegate["config"], "valid": []}
                )
                entry["valid"].append({"containerID": record["containerID"], "ifname": dev["ifName"]})
    problems = []
    for (network, plugin_type), entry in sorted(networks.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        try:
            gc_network(runner, {**entry["plugin"], "type": plugin_type}, network, entry["valid"])
        except CNIError as exc:
            problems.append(f"GC of delegate network {network} ({plugin_type}): {exc.msg}")
    return problems
