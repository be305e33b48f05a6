"""MAC addresses: the spellings Go's ``net.ParseMAC`` reads, one canonical form, the two bits.

Every reference plugin (macvlan, tuning, bridge) parses a requested MAC with Go's
``net.ParseMAC``, so a tenant may spell one MAC three ways (``02:00:5e:10:00:01``,
``02-00-5E-10-00-01``, ``0200.5e10.0001``); dracni judges and records the canonical
lowercase colon form (``HardwareAddr.String()``), so a check on one spelling holds for all.
Imported by the tenant policy and by the CNI plugin's ADD: no imports at all (hot path).
"""

from __future__ import annotations

_HEX = "0123456789abcdefABCDEF"
#: Bytes of an Ethernet MAC; ParseMAC also reads 8-byte EUI-64 and 20-byte InfiniBand forms.
ETHER_LEN = 6
#: The I/G bit of the first octet: set in a multicast (group) address.
GROUP_BIT = 0x01
#: The U/L bit of the first octet: set in a locally administered address.
LOCAL_BIT = 0x02


def parse_mac(text: object) -> bytes | None:
    """The bytes of ``text`` read as Go's ``net.ParseMAC`` reads it (src/net/mac.go
    ``ParseMAC``: groups of two hex digits split by one ``:`` or ``-`` used throughout, or of
    four split by ``.``; 6, 8 or 20 bytes), or None when Go would refuse it."""
    if not isinstance(text, str) or len(text) < 14 or not text.isascii():
        return None
    if text[2] in ":-":
        sep, width = text[2], 2
    elif text[4] == ".":
        sep, width = ".", 4
    else:
        return None
    groups = text.split(sep)
    if any(len(g) != width or any(c not in _HEX for c in g) for g in groups):
        return None
    raw = bytes.fromhex("".join(groups))
    return raw if len(raw) in (6, 8, 20) else None


def canonical(raw: bytes) -> str:
    """Go's ``HardwareAddr.String()``: lowercase hex pairs joined by colons."""
    return ":".join(f"{b:02x}" for b in raw)


def canonical_mac(text: object) -> str | None:
    """The canonical form of a 6-byte MAC in any ParseMAC spelling, else None."""
    raw = parse_mac(text)
    return canonical(raw) if raw is not None and len(raw) == ETHER_LEN else None


def parse_prefix(text: object) -> str | None:
    """An administrator's MAC prefix (1 to 6 octets, ``:`` or ``-`` between them) in canonical
    form, e.g. ``00-16-3E`` -> ``00:16:3e``; None when it is not one."""
    if not isinstance(text, str) or not text.isascii() or not text:
        return None
    sep = text[2] if len(text) > 2 else ":"
    groups = text.split(sep)
    if not 1 <= len(groups) <= ETHER_LEN or any(len(g) != 2 or any(c not in _HEX for c in g) for g in groups):
        return None
    return ":".join(g.lower() for g in groups)


def mac_problem(mac: str, prefixes: list[str]) -> str | None:
    """Why a canonical 6-byte ``mac`` may not be a tenant's, or None when it may: it is unicast,
    and locally administered or under one of ``prefixes`` (canonical, from ``parse_prefix``)."""
    first = int(mac[:2], 16)
    if first & GROUP_BIT:
        return f"{mac} is a multicast address (the I/G bit of its first octet is set)"
    if mac == "00:00:00:00:00:00":
        return f"{mac} is the zero address"
    if first & LOCAL_BIT or any(mac.startswith(p) for p in prefixes):
        return None
    return (
        f"{mac} is globally administered (a vendor's address: the U/L bit of its first octet is clear); "
        "use a locally administered one (second-lowest bit of the first octet set, e.g. 02:xx:xx:xx:xx:xx)"
    )
