"""An address pool as the administrator writes it in a DeviceClass network, and its addresses.

A pool is a cluster-wide address space with a name (``addressPool.name``): every network that
names it shares its addresses, and an address belongs to at most one attachment of the whole
cluster at a time (the reservations, ``pools/reservations.py``).  Its subnets give, per family,
the addresses that may be handed out: the subnet's ranges (default: all of it) minus the network
address, the IPv4 broadcast address, the gateway (default: the subnet's first address, as
host-local's) and the excluded addresses.

The addresses of a family are kept as a few sorted, disjoint integer intervals, so that a /64
costs what a /24 costs: ``size`` counts them and ``address(index)`` finds the index-th one
without listing anything.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..params import ParameterError
from ..recent import RecentResults

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: A pool name is one DNS label, short enough that ``<pool>.<address>`` fits an object name.
POOL_NAME = re.compile(r"\A[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
POOL_NAME_MAX = 40
MAX_SUBNETS = 8
MAX_EXCLUDES = 256
FAMILIES = ("ipv4", "ipv6")
#: Pools parsed lately (their JSON text -> the pool), at most this many; see ``parse_pool``.
PARSED_POOLS_CACHED = 64


@dataclass(frozen=True)
class Subnet:
    """One subnet of a pool: its network, gateway and the intervals handed out."""

    network: Network
    gateway: Address
    #: Sorted, disjoint, inclusive integer intervals of the addresses handed out.
    intervals: tuple[tuple[int, int], ...]

    @property
    def family(self) -> str:
        return "ipv4" if self.network.version == 4 else "ipv6"

    @property
    def size(self) -> int:
        return sum(end - start + 1 for start, end in self.intervals)

    def holds(self, ip: Address) -> bool:
        value = int(ip)
        return ip.version == self.network.version and any(s <= value <= e for s, e in self.intervals)


@dataclass(frozen=True)
class AddressPool:
    """A parsed ``addressPool``; see the module docstring."""

    name: str
    subnets: tuple[Subnet, ...]

    @property
    def families(self) -> tuple[str, ...]:
        """The families the pool serves, IPv4 first: one address of each per attachment."""
        present = {s.family for s in self.subnets}
        return tuple(f for f in FAMILIES if f in present)

    def size(self, family: str) -> int:
        return sum(s.size for s in self.subnets if s.family == family)

    def address(self, family: str, index: int) -> Address:
        """The ``index``-th address of ``family`` (0 <= index < size), subnets in order."""
        for subnet in self.subnets:
            if subnet.family != family:
                continue
            for start, end in subnet.intervals:
                if index <= end - start:
                    return ipaddress.ip_address(start + index)
                index -= end - start + 1
        raise IndexError(f"address pool {self.name}: no {family} address number {index}")

    def subnet_of(self, ip: Address) -> Subnet | None:
        """The subnet that hands ``ip`` out, or None when the pool never does."""
        return next((s for s in self.subnets if s.holds(ip)), None)

    def cidr(self, ip: Address) -> str:
        """``ip`` with its subnet's prefix length, as IPAMs and ``status.devices`` write it."""
        subnet = self.subnet_of(ip)
        prefix = subnet.network.prefixlen if subnet else ip.max_prefixlen
        return f"{ip}/{prefix}"

    def describe(self) -> str:
        return ", ".join(str(s.network) for s in self.subnets)


_parsed: RecentResults[AddressPool] = RecentResults(PARSED_POOLS_CACHED)


def parse_pool(value: Any, field: str) -> AddressPool:
    """The pool of ``value`` (the ``addressPool`` object); ``ParameterError`` names the field.

    A DeviceClass's pool comes with every claim of the class and is parsed twice per claim
    (the tenant policy's check, then the assignment), ~35 us each on a slow machine: the last
    ``PARSED_POOLS_CACHED`` results are kept, keyed by the exact JSON text (``AddressPool`` is
    immutable, so a hit is shared as it is; a refusal is not kept and is raised again, naming
    the caller's field)."""
    return _parsed.made(value, lambda: _parse_pool(value, field))


def _parse_pool(value: Any, field: str) -> AddressPool:
    if not isinstance(value, dict):
        raise ParameterError(field, "must be an object with name and subnets")
    unknown = sorted(set(value) - {"name", "subnets"})
    if unknown:
        raise ParameterError(f"{field}.{unknown[0]}", "unknown field (known fields: name, subnets)")
    name = value.get("name")
    if not isinstance(name, str) or not POOL_NAME.match(name) or len(name) > POOL_NAME_MAX:
        raise ParameterError(
            f"{field}.name",
            f"{_show(name)} must be a DNS label of at most {POOL_NAME_MAX} characters (a-z, 0-9, '-')",
        )
    subnets = value.get("subnets")
    if not isinstance(subnets, list) or not 1 <= len(subnets) <= MAX_SUBNETS:
        raise ParameterError(f"{field}.subnets", f"must list 1 to {MAX_SUBNETS} subnets")
    parsed = tuple(_subnet(s, f"{field}.subnets[{i}]") for i, s in enumerate(subnets))
    _check_disjoint(parsed, f"{field}.subnets")
    return AddressPool(name, parsed)


def _subnet(value: Any, field: str) -> Subnet:
    if not isinstance(value, dict):
        raise ParameterError(field, "must be an object with subnet, and optionally gateway, ranges, exclude")
    unknown = sorted(set(value) - {"subnet", "gateway", "ranges", "exclude"})
    if unknown:
        raise ParameterError(f"{field}.{unknown[0]}", "unknown field (known fields: exclude, gateway, ranges, subnet)")
    network = _network(value.get("subnet"), f"{field}.subnet")
    first, last = int(network.network_address), int(network.broadcast_address)
    gateway = _address_in(value.get("gateway"), network, f"{field}.gateway") if "gateway" in value else None
    if gateway is None:
        gateway = ipaddress.ip_address(first + 1) if last - first >= 2 else network.network_address
    intervals = _ranges(value.get("ranges"), network, f"{field}.ranges") or [(first, last)]
    never = [(first, first), (int(gateway), int(gateway))]
    if network.version == 4:
        never.append((last, last))
    excludes = value.get("exclude") or []
    if not isinstance(excludes, list) or len(excludes) > MAX_EXCLUDES:
        raise ParameterError(f"{field}.exclude", f"must be a list of at most {MAX_EXCLUDES} addresses or CIDRs")
    for i, text in enumerate(excludes):
        excluded = _excluded(text, network, f"{field}.exclude[{i}]")
        never.append((int(excluded.network_address), int(excluded.broadcast_address)))
    kept = tuple(_subtract(sorted(_merge(intervals)), sorted(never)))
    if not kept:
        raise ParameterError(field, f"{network} hands out no address once the gateway and exclusions are taken out")
    return Subnet(network, gateway, kept)


def _network(text: Any, field: str) -> Network:
    try:
        network = ipaddress.ip_network(text, strict=True) if isinstance(text, str) else None
    except ValueError as exc:
        raise ParameterError(field, f"{_show(text)} is not a subnet in CIDR form: {exc}") from None
    if network is None:
        raise ParameterError(field, f"{_show(text)} is not a subnet in CIDR form (e.g. 10.10.1.0/24)")
    if network.num_addresses < 4 and network.version == 4 or network.num_addresses < 2:
        raise ParameterError(field, f"{network} is too small to hand out addresses")
    return network


def _address_in(text: Any, network: Network, field: str) -> Address:
    try:
        ip = ipaddress.ip_address(text) if isinstance(text, str) else None
    except ValueError:
        ip = None
    if ip is None:
        raise ParameterError(field, f"{_show(text)} is not an IP address")
    if ip not in network:
        raise ParameterError(field, f"{ip} is not in {network}")
    return ip


def _ranges(value: Any, network: Network, field: str) -> list[tuple[int, int]]:
    if value is None:
        return []
    if not isinstance(value, list) or not value:
        raise ParameterError(field, "must be a non-empty list of {start, end}")
    out = []
    for i, item in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(item, dict) or set(item) - {"start", "end"} or not {"start", "end"} <= set(item):
            raise ParameterError(where, "must be an object with start and end (addresses of the subnet)")
        start = _address_in(item["start"], network, f"{where}.start")
        end = _address_in(item["end"], network, f"{where}.end")
        if int(end) < int(start):
            raise ParameterError(f"{where}.end", f"{end} comes before start {start}")
        out.append((int(start), int(end)))
    return out


def _excluded(text: Any, network: Network, field: str) -> Network:
    try:
        excluded = ipaddress.ip_network(text, strict=True) if isinstance(text, str) else None
    except ValueError:
        excluded = None
    if excluded is None:
        raise ParameterError(field, f"{_show(text)} is not an address or a CIDR of whole addresses")
    if excluded.version != network.version or not excluded.subnet_of(network):  # type: ignore[arg-type]
        raise ParameterError(field, f"{excluded} is not inside {network}")
    return excluded


def _check_disjoint(subnets: tuple[Subnet, ...], field: str) -> None:
    for i, a in enumerate(subnets):
        for b in subnets[:i]:
            if a.network.version == b.network.version and a.network.overlaps(b.network):
                raise ParameterError(f"{field}[{i}].subnet", f"{a.network} overlaps {b.network}")


def _merge(intervals: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    current: tuple[int, int] | None = None
    for start, end in sorted(intervals):
        if current is not None and start <= current[1] + 1:
            current = (current[0], max(current[1], end))
            continue
        if current is not None:
            yield current
        current = (start, end)
    if current is not None:
        yield current


def _subtract(keep: list[tuple[int, int]], drop: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """``keep`` minus ``drop``; both sorted by start."""
    for start, end in keep:
        for d_start, d_end in drop:
            if d_end < start or d_start > end:
                continue
            if d_start > start:
                yield (start, d_start - 1)
            start = max(start, d_end + 1)
            if start > end:
                break
        if start <= end:
            yield (start, end)


def _show(value: object) -> str:
    import json

    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


#: The IPAMs a pool's addresses can reach: both grant a requested address (runtimeConfig.ips /
#: args.cni.ips) and keep no cluster state of their own that could disagree.
POOL_IPAM_TYPES = ("host-local", "static")


def check_pool_network(params: Any, where: str) -> AddressPool:
    """A network with an ``addressPool``: the pool is valid and the network's IPAM can take it."""
    pool = parse_pool(params["addressPool"], f"{where}.addressPool")
    plugins = (params.get("config") or {}).get("plugins") or []
    ipams = [p.get("ipam") for p in plugins if isinstance(p, dict) and isinstance(p.get("ipam"), dict)]
    types = [str(i.get("type")) for i in ipams if isinstance(i, dict)]
    if not types or any(t not in POOL_IPAM_TYPES for t in types):
        found = ", ".join(types) or "none"
        raise ParameterError(
            f"{where}.addressPool",
            f"the network's IPAM must be {' or '.join(POOL_IPAM_TYPES)} (it has: {found}); "
            "the pool's addresses reach it as requested addresses",
        )
    return pool
