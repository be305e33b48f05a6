"""ADD's MAC check (rule macOwnership): an attachment never takes a MAC the node sees on its parent.

The policy (``dracni.policy.macs``) already refused group and vendor MACs at prepare time; what
only the node knows is who else uses a MAC on the segment: the parent NIC itself, the other
dracni attachments on the same parent (their results' interfaces, or the MACs they asked for
while still adding), and the parent's IPv4 neighbours (``/proc/net/arp``: the gateway, other
hosts).  A switch forwards a MAC to the last port it came from, so any of these would steal
that NIC's traffic.  Runs only when a delegate is sent a MAC; imports only C modules.
"""

from __future__ import annotations

from ..macaddr import canonical, canonical_mac
from . import errors as E
from .errors import CNIError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..state.records import JSON, AttachedDevice, Attachment, Delegate
    from ..state.store import StateDir

#: The plugin keys that name the link a delegate's interface sits on.
PARENT_KEYS = ("master", "bridge")
SIOCGIFHWADDR = 0x8927
ARP_TABLE = "/proc/net/arp"
WHY = (
    "rule macOwnership: an attachment's MAC is never one the node sees on its parent (the parent's own, "
    "another attachment's on the same parent, a neighbour's): the switch would send that NIC's traffic "
    "to this pod; choose another locally administered MAC"
)


def requested_macs(delegates: list[Delegate]) -> list[tuple[str, str]]:
    """``(field, canonical MAC)`` of every MAC the delegates are sent (runtimeConfig.mac, a
    plugin's ``mac``, ``args.cni.mac``); a MAC the delegate could not parse is its to refuse."""
    out = []
    for index, delegate in enumerate(delegates):
        conf = delegate["config"]
        found = [("runtimeConfig.mac", (conf.get("runtimeConfig") or {}).get("mac")), ("mac", conf.get("mac"))]
        args = conf.get("args")
        cni = args.get("cni") if isinstance(args, dict) else None
        if isinstance(cni, dict):
            found.append(("args.cni.mac", cni.get("mac")))
        for key, value in found:
            mac = canonical_mac(value)
            if mac is not None:
                out.append((f"config.plugins[{index}].{key}", mac))
    return out


def parent_of(delegates: list[Delegate]) -> str | None:
    """The node's link the attachment's interface sits on (macvlan/ipvlan master, a bridge)."""
    for delegate in delegates:
        for key in PARENT_KEYS:
            value = delegate["config"].get(key)
            if isinstance(value, str) and value:
                return value
    return None


def check_device(state: StateDir, record: Attachment, dev: AttachedDevice) -> None:
    """Refuse ``dev`` (CNIError INVALID_CONFIG naming the rule) when a MAC it asks for is in use."""
    wanted = requested_macs(dev["delegates"])
    parent = parent_of(dev["delegates"])
    if not wanted or parent is None:
        return
    taken = _taken(state, record, dev, parent)
    for field, mac in wanted:
        owner = taken.get(mac)
        if owner is not None:
            raise CNIError(E.INVALID_CONFIG, f"{field}: {mac} is {owner} ({WHY})")


def _taken(state: StateDir, record: Attachment, dev: AttachedDevice, parent: str) -> dict[str, str]:
    taken: dict[str, str] = {}
    for mac, ip in _neighbours(parent):
        taken.setdefault(mac, f"the MAC of neighbour {ip} on parent {parent}")
    others: list[Attachment] = state.list_attachments(bad=[])
    key = (record["network"], record["containerID"], record["ifName"])
    for other in others:
        if (other.get("network"), other.get("containerID"), other.get("ifName")) == key:
            continue
        if other.get("state") == "failed":  # rolled back: its interfaces are gone
            continue
        for device in other.get("devices") or []:
            _attachment_macs(taken, device, parent, f"container {other.get('containerID')}")
    for device in record["devices"]:
        if device is not dev:
            _attachment_macs(taken, device, parent, "this pod")
    own = _link_mac(parent)
    if own is not None:
        taken[own] = f"the MAC of parent {parent}"
    return taken


def _attachment_macs(taken: dict[str, str], device: AttachedDevice, parent: str, who: str) -> None:
    delegates = device.get("delegates") or []
    if parent_of(delegates) != parent:
        return
    owner = f"the MAC of {who}'s interface {device.get('ifName')} on parent {parent} (another dracni attachment)"
    for _, mac in requested_macs(delegates):
        taken.setdefault(mac, owner)
    result: JSON = device.get("result") or {}
    for iface in result.get("interfaces") or []:
        made = canonical_mac(iface.get("mac")) if isinstance(iface, dict) and iface.get("sandbox") else None
        if made is not None:
            taken.setdefault(made, owner)


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


def _neighbours(parent: str) -> list[tuple[str, str]]:
    """``(MAC, IPv4 address)`` of the parent's complete ARP entries (flag ATF_COM, 0x2)."""
    try:
        with open(ARP_TABLE, encoding="ascii", errors="replace") as table:
            lines = table.read().splitlines()[1:]
    except OSError:
        return []
    out = []
    for line in lines:
        cols = line.split()
        if len(cols) >= 6 and cols[5] == parent and int(cols[2], 16) & 0x2:
            mac = canonical_mac(cols[3])
            if mac is not None and mac != "00:00:00:00:00:00":
                out.append((mac, cols[0]))
    return out
