"""ADD's identity checks: an attachment never takes a MAC or an address the node sees on its parent.

What the policy cannot know at prepare time is who else uses an identity on the parent's
segment; only the node sees it.  Rule macOwnership (``dracni.policy.macs`` already refused
group and vendor MACs): a requested MAC is never the parent NIC's own, another dracni
attachment's on the same parent (its result's interfaces, or the MAC it asked for while still
adding), a neighbour's (IPv4 and IPv6) or one of the parent's unicast FDB entries (a bridge's
learned MACs, a port's, an ordinary NIC's own address list).  A switch forwards a MAC to the
last port it came from, so any of these would steal that NIC's traffic.  Rule
addressOwnership (prepare already refused network, broadcast and gateway addresses): a
requested address is never one of the node's own on the parent, another attachment's on that
parent, nor a neighbour's, unless it is this claim's own kept address (``requestedIPs``: its
reservation, status or IPAMClaim; a stale neighbour entry of its last pod must not lock it
out); the neighbours' ARP/ND caches would otherwise point the address at this pod.

Runs only when a delegate is sent a MAC or an address (no netlink otherwise); imports only C
modules (``dracni.netlink`` is hand-written on ``_socket``).
"""

from __future__ import annotations

from ..macaddr import canonical, canonical_mac
from . import errors as E
from .errors import CNIError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .. import netlink
    from ..state.records import JSON, AttachedDevice, Attachment, Delegate
    from ..state.store import StateDir

#: The plugin keys that name the link a delegate's interface sits on.
PARENT_KEYS = ("master", "bridge")
SIOCGIFHWADDR = 0x8927
WHY = (
    "rule macOwnership: an attachment's MAC is never one the node sees on its parent (the parent's own, "
    "another attachment's on the same parent, a neighbour's, an FDB entry's): the switch would send that "
    "NIC's traffic to this pod; choose another locally administered MAC"
)
ADDRESS_WHY = (
    "rule addressOwnership: an attachment's address is never one the node sees in use on its parent (the "
    "node's own, another attachment's on the same parent, a neighbour's unless the claim keeps it): the "
    "segment's ARP/ND caches would send that host's traffic to this pod; choose a free address"
)


def requested_macs(delegates: list[Delegate]) -> list[tuple[str, str]]:
    """``(field, canonical MAC)`` of every MAC the delegates are sent (runtimeConfig.mac, a
    plugin's ``mac``, ``args.cni.mac``); a MAC the delegate could not parse is its to refuse."""
    out = []
    for index, delegate in enumerate(delegates):
        conf = delegate["config"]
        found = [("runtimeConfig.mac", (conf.get("runtimeConfig") or {}).get("mac")), ("mac", conf.get("mac"))]
        cni = _args_cni(conf)
        if cni is not None:
            found.append(("args.cni.mac", cni.get("mac")))
        for key, value in found:
            mac = canonical_mac(value)
            if mac is not None:
                out.append((f"config.plugins[{index}].{key}", mac))
    return out


def requested_addresses(delegates: list[Delegate]) -> list[tuple[str, str]]:
    """``(field, address)`` of every address the delegates are sent (runtimeConfig.ips,
    ``args.cni.ips``, a static IPAM's ``addresses[].address``), in ``inet_ntop`` form without
    prefix; a value that is no address is the delegate's to refuse."""
    out = []
    for index, delegate in enumerate(delegates):
        conf = delegate["config"]
        found = [(f"runtimeConfig.ips[{i}]", v) for i, v in _items((conf.get("runtimeConfig") or {}).get("ips"))]
        cni = _args_cni(conf)
        if cni is not None:
            found += [(f"args.cni.ips[{i}]", v) for i, v in _items(cni.get("ips"))]
        ipam = conf.get("ipam")
        if isinstance(ipam, dict):
            for i, entry in _items(ipam.get("addresses")):
                if isinstance(entry, dict):
                    found.append((f"ipam.addresses[{i}].address", entry.get("address")))
        for key, value in found:
            ip = address_text(value)
            if ip is not None:
                out.append((f"config.plugins[{index}].{key}", ip))
    return out


def address_text(value: object) -> str | None:
    """``10.0.0.5`` for ``10.0.0.5/24`` or ``10.0.0.5`` (IPv6 compressed as ``inet_ntop`` does)."""
    import _socket

    if not isinstance(value, str):
        return None
    addr = value.split("/", 1)[0]
    for family in (_socket.AF_INET, _socket.AF_INET6):
        try:
            return str(_socket.inet_ntop(family, _socket.inet_pton(family, addr)))
        except (OSError, ValueError, UnicodeError):
            continue
    return None


def parent_of(delegates: list[Delegate]) -> str | None:
    """The node's link the attachment's interface sits on (macvlan/ipvlan master, a bridge)."""
    for delegate in delegates:
        for key in PARENT_KEYS:
            value = delegate["config"].get(key)
            if isinstance(value, str) and value:
                return value
    return None


def check_device(state: StateDir, record: Attachment, dev: AttachedDevice) -> None:
    """Refuse ``dev`` (CNIError INVALID_CONFIG naming the rule) when a MAC or an address it asks
    for is in use on its parent.  No netlink, no state read when it asks for neither."""
    macs = requested_macs(dev["delegates"])
    ips = requested_addresses(dev["delegates"])
    parent = parent_of(dev["delegates"])
    if (not macs and not ips) or parent is None:
        return
    segment = Segment(parent)
    attachments = _attachments(state, record, dev, parent)
    if macs:
        taken = segment.macs(attachments)
        for field, mac in macs:
            if mac in taken:
                raise CNIError(E.INVALID_CONFIG, f"{field}: {mac} is {taken[mac]} ({WHY})")
    if ips:
        kept = {address_text(text) for text in dev.get("requestedIPs") or []}
        used = segment.addresses(attachments, kept)
        for field, ip in ips:
            if ip in used:
                raise CNIError(E.INVALID_CONFIG, f"{field}: {ip} is {used[ip]} ({ADDRESS_WHY})")


class Segment:
    """What the node sees on ``parent``'s segment, read from the kernel once, when first asked."""

    __slots__ = ("parent", "_nl", "_index", "_neighbours")

    def __init__(self, parent: str) -> None:
        from .. import netlink  # only an ADD that asks for a MAC or an address reads the kernel

        self._nl = netlink
        self.parent = parent
        self._index = netlink.link_index(parent)
        self._neighbours: list[netlink.Neighbour] | None = None

    def neighbours(self) -> list[netlink.Neighbour]:
        if self._neighbours is None:
            self._neighbours = self._nl.neighbours(self._index) if self._index is not None else []
        return self._neighbours

    def macs(self, attachments: list[tuple[str, AttachedDevice]]) -> dict[str, str]:
        """MAC -> who uses it: other attachments first (their MACs are also the parent's FDB
        entries), then neighbours, FDB entries, and the parent's own MAC above all."""
        parent = self.parent
        taken: dict[str, str] = {}
        for who, device in attachments:
            owner = (
                f"the MAC of {who}'s interface {device.get('ifName')} on parent {parent} (another dracni attachment)"
            )
            for _, mac in requested_macs(device.get("delegates") or []):
                taken.setdefault(mac, owner)
            result: JSON = device.get("result") or {}
            for iface in result.get("interfaces") or []:
                made = canonical_mac(iface.get("mac")) if isinstance(iface, dict) and iface.get("sandbox") else None
                if made is not None:
                    taken.setdefault(made, owner)
        for n in self.neighbours():
            taken.setdefault(n.mac, f"the MAC of neighbour {n.ip} on parent {parent}")
        for entry in self._nl.fdb(self._index) if self._index is not None else []:
            if not int(entry.mac[:2], 16) & 0x01:  # unicast: group addresses are the kernel's to refuse
                taken.setdefault(entry.mac, f"an FDB entry of parent {parent}")
        own = _link_mac(parent)
        if own is not None:
            taken[own] = f"the MAC of parent {parent}"
        return taken

    def addresses(self, attachments: list[tuple[str, AttachedDevice]], kept: set[str | None]) -> dict[str, str]:
        """Address -> who uses it: the node's own on the parent above all, then other
        attachments', then neighbours' (except the claim's ``kept`` addresses)."""
        parent = self.parent
        used: dict[str, str] = {}
        for address in self._nl.addresses(self._index) if self._index is not None else []:
            used.setdefault(address.ip, f"the node's address on parent {parent}")
        for who, device in attachments:
            iface = f"{who}'s interface {device.get('ifName')}"
            owner = f"the address of {iface} on parent {parent} (another dracni attachment)"
            for _, ip in requested_addresses(device.get("delegates") or []):
                used.setdefault(ip, owner)
            result: JSON = device.get("result") or {}
            for entry in result.get("ips") or []:
                got = address_text(entry.get("address")) if isinstance(entry, dict) else None
                if got is not None:
                    used.setdefault(got, owner)
        for n in self.neighbours():
            if n.ip not in kept:
                used.setdefault(n.ip, f"the address of neighbour {n.mac} on parent {parent}")
        return used


def _attachments(
    state: StateDir, record: Attachment, dev: AttachedDevice, parent: str
) -> list[tuple[str, AttachedDevice]]:
    """``(who, device)`` of every other live dracni interface on ``parent``: other attachments'
    (a rolled-back one's interfaces are gone) and this pod's other devices."""
    out = []
    key = (record["network"], record["containerID"], record["ifName"])
    others: list[Attachment] = state.list_attachments(bad=[])
    for other in others:
        if (other.get("network"), other.get("containerID"), other.get("ifName")) == key:
            continue
        if other.get("state") == "failed":
            continue
        for device in other.get("devices") or []:
            if parent_of(device.get("delegates") or []) == parent:
                out.append((f"container {other.get('containerID')}", device))
    for device in record["devices"]:
        if device is not dev and parent_of(device.get("delegates") or []) == parent:
            out.append(("this pod", device))
    return out


def _args_cni(conf: JSON) -> JSON | None:
    args = conf.get("args")
    cni = args.get("cni") if isinstance(args, dict) else None
    return cni if isinstance(cni, dict) else None


def _items(value: object) -> list[tuple[int, object]]:
    return list(enumerate(value)) if isinstance(value, list) else []


def _link_mac(name: str) -> str | None:
    """The MAC of link ``name`` in this netns (SIOCGIFHWADDR), None when there is none."""
    import _socket
    import fcntl
    import struct

    try:
        sock = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    except OSError:
        return None
    try:
        answer = fcntl.ioctl(sock.fileno(), SIOCGIFHWADDR, struct.pack("256s", name.encode()[:15]))
    except (OSError, UnicodeEncodeError):
        return None
    finally:
        sock.close()
    return canonical(answer[18:24])
