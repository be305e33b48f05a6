"""MAC ownership (rule ``macOwnership``): a claim's MAC never takes another NIC's identity.

A switch forwards a MAC to the port it last saw it on: a pod sending from the gateway's MAC
receives the gateway's traffic.  So every MAC a claim supplies (``runtimeConfig.mac``, and in
a full claim config every plugin's ``mac`` key, e.g. tuning's, macvlan's, ``args.cni.mac``)
must be unicast and locally administered; the administrator allows vendor prefixes per
network (``allowedMACPrefixes`` in a DeviceClass config).  Each MAC is rewritten in its
canonical form, so the record, the CNI plugin's ADD check (the parent's MAC, other
attachments') and the status all see one spelling.  A class's own config is not checked.
"""

from __future__ import annotations

from typing import Any

from dracni.macaddr import canonical_mac, mac_problem, parse_prefix
from dracni.params import DeviceParameters

from .rules import refuse

KNOB = "allowedMACPrefixes"
MAC_KEY = "mac"


def prefixes_of(network: DeviceParameters | None) -> list[str]:
    """The canonical MAC prefixes the network's administrator allows (none without a network)."""
    raw = network.get("allowedMACPrefixes") if network is not None else None
    return [p for p in (parse_prefix(text) for text in raw or []) if p is not None]


def check_mac(value: Any, network: DeviceParameters | None, field: str, *, any_prefix: bool = False) -> str:
    """``value`` in canonical form, or the refusal naming ``field`` (and the knob, when a wider
    network would take it).  ``any_prefix``: the network is unknown, judge what no knob widens."""
    mac = canonical_mac(value)
    if mac is None:
        raise refuse(
            field,
            f"{_show(value)} is not a 6-byte MAC address (e.g. 02:00:00:00:00:01, 02-00-00-00-00-01 or 0200.0000.0001)",
            "macOwnership",
        )
    prefixes = [""] if any_prefix else prefixes_of(network)
    problem = mac_problem(mac, prefixes)
    if problem is None:
        return mac
    if "globally administered" in problem:
        allowed = f"this network allows {', '.join(prefixes)}" if prefixes else "this network allows none"
        problem += f"; or ask the administrator to add its prefix to {KNOB} in the DeviceClass config ({allowed})"
    raise refuse(field, problem, "macOwnership")


def check_mac_form(params: DeviceParameters, where: str) -> None:
    """A profile claim's ``runtimeConfig.mac`` as far as no network's knob matters: its form, and
    unicast (whether a globally administered one is allowed is the network's ``allowedMACPrefixes``)."""
    if MAC_KEY in params["runtimeConfig"]:
        check_mac(params["runtimeConfig"][MAC_KEY], None, f"{where}.runtimeConfig.{MAC_KEY}", any_prefix=True)


def check_no_mac_prefixes(params: DeviceParameters, where: str) -> None:
    """Only the administrator widens the MACs a network takes."""
    if params.get("allowedMACPrefixes") is not None:
        raise refuse(f"{where}.{KNOB}", "a claim cannot allow MAC prefixes", "macOwnership")


def check_claim_macs(params: DeviceParameters, where: str) -> None:
    """Every MAC a full claim config supplies, checked and rewritten in canonical form."""
    if MAC_KEY in params["runtimeConfig"]:
        field = f"{where}.runtimeConfig.{MAC_KEY}"
        params["runtimeConfig"][MAC_KEY] = check_mac(params["runtimeConfig"][MAC_KEY], None, field)
    config = params["config"]
    assert config is not None
    for index, plugin in enumerate(config["plugins"]):
        stack: list[tuple[dict[str, Any], str]] = [
            (plugin, f"{where}.config" if params["single"] else f"{where}.config.plugins[{index}]")
        ]
        while stack:
            node, path = stack.pop()
            for key, child in node.items():
                if key == "capabilities":  # {"mac": true} declares the capability: no MAC in it
                    continue
                if key == MAC_KEY:
                    node[key] = check_mac(child, None, f"{path}.{key}")
                elif isinstance(child, dict):
                    stack.append((child, f"{path}.{key}"))


def _show(value: object) -> str:
    import json

    try:
        return json.dumps(value, ensure_ascii=True)[:80]
    except (TypeError, ValueError):
        return repr(value)[:80]
