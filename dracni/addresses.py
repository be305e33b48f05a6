"""IP addresses in CIDR form: the API server's canonical form, and what an IPAM handed out.

One home for address handling: ``status.devices[].networkData.ips`` and IPAMClaims want the
canonical form of Go's ``netutils.ParseCIDRSloppy`` + ``ip.String()``; the CNI plugin checks
that a pinned address came back.  Imported only where addresses matter (never by a plain
pass-through ADD).
"""

from __future__ import annotations

import ipaddress
import re

TYPE_CHECKING = False
if TYPE_CHECKING:  # the CNI plugin imports this module: no typing at run time
    from typing import Any

_IPV4_SLOPPY = re.compile(r"^([0-9]+)\.([0-9]+)\.([0-9]+)\.([0-9]+)$")


def parse_interface_address(value: Any) -> tuple[str, str] | None:
    """Parse an "ifaddr" CIDR value like Go's ``netutils.ParseCIDRSloppy``.

    Returns ``(canonical, family)`` where canonical is the form the API server demands
    (``ip.String()/prefix``, so ``10.0.0.5/24``, ``fd00::5/64``), or None when the value is
    not an address in CIDR form at all.
    """
    if not isinstance(value, str) or value.count("/") != 1:
        return None
    addr, prefix = value.split("/")
    if not prefix or not prefix.isascii() or not prefix.isdigit() or "%" in addr:
        return None
    bits = int(prefix)
    m = _IPV4_SLOPPY.match(addr)
    if m:
        # ParseCIDRSloppy accepts leading zeros in IPv4 octets (as decimal).
        octets = [int(o) for o in m.groups()]
        if any(o > 255 for o in octets) or bits > 32:
            return None
        return f"{'.'.join(map(str, octets))}/{bits}", "ipv4"
    if ":" not in addr:
        return None
    try:
        ip6 = ipaddress.IPv6Address(addr)
    except ValueError:
        return None
    if bits > 128:
        return None
    mapped = ip6.ipv4_mapped
    if mapped is not None:
        # Go treats a v4-mapped address as IPv4 and prints it dotted; its 128-bit mask
        # loses 96 bits (e.g. ::ffff:10.0.0.1/120 -> 10.0.0.1/24).
        if bits > 32:
            bits -= 96
        return f"{mapped}/{bits}", "ipv4"
    return f"{ip6.compressed}/{bits}", "ipv6"


def canonical_interface_address(value: Any) -> str | None:
    """Canonical CIDR interface address (``10.0.0.5/24``, ``fd00::5/64``), or None if invalid."""
    parsed = parse_interface_address(value)
    if parsed is None:
        return None
    canonical, family = parsed
    prefix = int(canonical.rsplit("/", 1)[1])  # may be negative: ::ffff:a.b.c.d/64
    if not 0 <= prefix <= (32 if family == "ipv4" else 128):
        return None
    return canonical


def result_addresses(result: dict[str, Any] | None) -> list[str]:
    """The ``address`` of every entry of a CNI result's ``ips``."""
    return [ip["address"] for ip in (result or {}).get("ips") or [] if isinstance(ip.get("address"), str)]


def missing_addresses(requested: list[str], returned: list[str]) -> list[str]:
    """The requested CIDRs whose address the IPAM did not hand out (prefix lengths aside)."""
    got = set()
    for value in returned:
        try:
            got.add(ipaddress.ip_interface(value).ip)
        except ValueError:
            continue
    return [value for value in requested if ipaddress.ip_interface(value).ip not in got]
