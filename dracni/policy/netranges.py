"""The addresses a network's IPAM config owns: its subnets, its gateways, and the part of each
subnet host-local hands out (``rangeStart`` .. ``rangeEnd``).

A claim that picks its own address (``runtimeConfig.ips``) is held to these at prepare time
(``policy.tenant``, rules ``networkRanges`` and ``addressOwnership``), so an address outside
what the network hands out is refused naming the rule, before any IPAM runs.  Read the way
host-local reads them (plugins/ipam/host-local/backend/allocator/range.go ``Range.Canonicalize``:
a missing rangeStart is the subnet's second address, a missing rangeEnd its last usable one;
the legacy top-level ``subnet``/``rangeStart``/``rangeEnd`` form is one range).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from dracni.params import DeviceParameters

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def network_subnets(network: DeviceParameters) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The address ranges the network's IPAM configs name (host-local, static, whereabouts)."""
    subnets = []
    for plugin in (network["config"] or {}).get("plugins", []):
        ipam = plugin.get("ipam")
        if not isinstance(ipam, dict):
            continue
        texts = [ipam.get("subnet"), ipam.get("range")]
        for range_set in ipam.get("ranges") or []:
            texts += [r.get("subnet") for r in range_set if isinstance(r, dict)] if isinstance(range_set, list) else []
        texts += [a.get("address") for a in ipam.get("addresses") or [] if isinstance(a, dict)]
        for text in texts:
            if isinstance(text, str):
                try:
                    subnets.append(ipaddress.ip_interface(text).network)
                except ValueError:
                    continue
    return subnets


def network_gateways(network: DeviceParameters) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The gateways the network's IPAM configs name or imply: a host-local range's ``gateway``
    (default: its subnet's first address, as host-local's ``Range.Canonicalize``), a top-level
    ``gateway``, a static address's ``gateway``, and every route's ``gw``."""
    found: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()

    def add(text: Any) -> None:
        if isinstance(text, str):
            try:
                found.add(ipaddress.ip_address(text))
            except ValueError:
                pass

    for plugin in (network["config"] or {}).get("plugins", []):
        ipam = plugin.get("ipam")
        if not isinstance(ipam, dict):
            continue
        ranges = [r for rs in ipam.get("ranges") or [] if isinstance(rs, list) for r in rs if isinstance(r, dict)]
        if ipam.get("subnet"):
            ranges.append({"subnet": ipam.get("subnet"), "gateway": ipam.get("gateway")})
        for r in ranges:
            if r.get("gateway"):
                add(r["gateway"])
                continue
            try:
                subnet = ipaddress.ip_network(str(r.get("subnet")), strict=False)
            except (TypeError, ValueError):
                continue
            if subnet.num_addresses > 2:
                found.add(subnet.network_address + 1)
        for a in ipam.get("addresses") or []:
            if isinstance(a, dict):
                add(a.get("gateway"))
        for route in ipam.get("routes") or []:
            if isinstance(route, dict):
                add(route.get("gw"))
    return found


def in_host_local_ranges(ip: IPAddress, network: DeviceParameters) -> str:
    """Empty when ``ip`` lies in a host-local range of the network (or no host-local range covers
    its subnet: static and other IPAMs take any address of their subnets); otherwise the
    ranges of its subnet, e.g. ``10.10.1.100-10.10.1.200``, to name in the refusal."""
    bounds = [(start, end) for subnet, start, end in _host_local_ranges(network) if ip in subnet]
    if not bounds or any(int(start) <= int(ip) <= int(end) for start, end in bounds):
        return ""
    return ", ".join(f"{start}-{end}" for start, end in bounds)


def _host_local_ranges(network: DeviceParameters) -> list[tuple[Any, IPAddress, IPAddress]]:
    out = []
    for plugin in (network["config"] or {}).get("plugins", []):
        ipam = plugin.get("ipam")
        if not isinstance(ipam, dict) or ipam.get("type") != "host-local":
            continue
        entries = [r for rs in ipam.get("ranges") or [] if isinstance(rs, list) for r in rs if isinstance(r, dict)]
        if ipam.get("subnet"):
            entries.append(ipam)
        for entry in entries:
            try:
                subnet = ipaddress.ip_network(str(entry.get("subnet")), strict=False)
                start = ipaddress.ip_address(entry["rangeStart"]) if entry.get("rangeStart") else None
                end = ipaddress.ip_address(entry["rangeEnd"]) if entry.get("rangeEnd") else None
            except (TypeError, ValueError):
                continue
            if subnet.num_addresses <= 2:
                continue
            first = subnet.network_address + 1
            last = subnet.broadcast_address - 1 if subnet.version == 4 else subnet.broadcast_address
            out.append((subnet, start or first, end or last))
    return out
