"""Address checks for persistent attachments (imported only when an attachment pins IPs)."""

from __future__ import annotations

import ipaddress


def result_addresses(result: dict | None) -> list[str]:
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
