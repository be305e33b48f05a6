"""The node's network interfaces: link facts from ``links`` (netlink), hardware facts from sysfs.

``nics_from()`` turns the links of a namespace (``links.LinkDB``'s view or one dump) into
``Nic`` records, adding what sysfs knows about each: PCI address and root complex, NUMA node,
SR-IOV role, link speed, kernel driver.  ``discover_nics()`` is that for one namespace, the one
place every reader (slice publisher, device lookup, health, ``dracni inventory``) gets NICs
from.  ``eligible()`` decides which of them dracni offers as devices in its ResourceSlices.

No netlink here: ``links`` owns the socket (``dracni.netlink`` parses its messages), so
importing this module costs the CNI plugin and the state code nothing.

sysfs and network namespaces: ``/sys/class/net`` lists the links of the namespace that mounted
that sysfs, not those of the process or of ``netns``.  A ``class/net/<name>`` entry is used only
when its ``ifindex`` and ``address`` files (where present) agree with what netlink reported for
the link, so a same-named interface of another namespace never lends its hardware facts.  PCI
facts do not depend on the namespace: when netlink names the link's parent PCI device
(``IFLA_PARENT_DEV_NAME``, Linux 5.17+), ``<sysfs>/bus/pci/devices/<address>`` supplies them even
for a NIC moved into another namespace.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .links import LinkDB, LinkState, link_problems

__all__ = [
    "Nic",
    "HardwareFacts",
    "DEFAULT_EXCLUDED_KINDS",
    "discover_nics",
    "nics_from",
    "hardware_facts",
    "eligible",
    "default_exclusion_reason",
]

ARPHRD_LOOPBACK = 772

# A PCI function address in sysfs form, "<domain>:<bus>:<device>.<function>" (the domain may be
# wider than four hex digits on some platforms).
_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
# A PCI root complex directory directly under /sys/devices, e.g. "pci0000:3a".
_PCI_ROOT = re.compile(r"^pci[0-9a-f]{4,8}:[0-9a-f]{2}$")
_VIRTIO = re.compile(r"^virtio\d+$")

# Link kinds (IFLA_INFO_KIND) not offered by default: links that software on the node creates on
# top of a NIC or for the node's own plumbing (pod veths, bridges, overlay and tunnel devices),
# and the children dracni's own delegates create.  An explicit ``include`` naming an interface
# overrides this; see ``eligible``.
DEFAULT_EXCLUDED_KINDS = frozenset(
    {
        "veth",
        "bridge",
        "netkit",
        "tun",  # tun and tap both report "tun"
        "macvlan",
        "macvtap",
        "ipvlan",
        "ipvtap",
        "vlan",
        "ifb",
        "nlmon",
        "vxlan",
        "geneve",  # overlays of the node's primary CNI
        "ipip",
        "sit",
        "gre",
        "gretap",
        "ip6gre",
        "ip6gretap",
        "ip6tnl",
        "vti",
        "vti6",
        "erspan",
        "ip6erspan",  # tunnels, incl. the kernel's fallback tunl0/sit0/...
    }
)


@dataclass(frozen=True)
class HardwareFacts:
    """What sysfs (and netlink's parent device) say about one interface's hardware."""

    speed_mbps: int | None = None
    pci_address: str | None = None
    pcie_root: str | None = None
    numa_node: int | None = None
    sriov_totalvfs: int | None = None
    sriov_numvfs: int | None = None
    sriov_is_vf: bool = False
    virtual: bool | None = None  # None: sysfs had no usable entry for the interface
    driver: str | None = None  # kernel driver of the interface's device, e.g. "ice"
    vendor_id: str | None = None  # PCI IDs as sysfs prints them, e.g. "0x8086"
    device_id: str | None = None


@dataclass(frozen=True)
class _Link:
    name: str
    index: int


@dataclass(frozen=True)
class Nic(HardwareFacts, _Link):
    """One network interface as seen by netlink, plus its hardware facts (the fields of
    ``HardwareFacts``; ``virtual`` is always known here).  ``Nic(name, index, ...)``."""

    mac: str = ""
    mtu: int = 0
    kind: str = ""  # IFLA_INFO_KIND; "" for a physical NIC (and lo)
    oper_state: str = "unknown"  # IFLA_OPERSTATE lowercased: up, down, lowerlayerdown, ...
    admin_up: bool = False  # IFF_UP
    carrier: bool | None = None  # IFLA_CARRIER; None when netlink did not say
    link_type: int = 1  # ARPHRD_* (1 ether, 772 loopback)
    virtual: bool = False
    master: str | None = None
    alt_names: tuple[str, ...] = field(default_factory=tuple)

    @property
    def is_loopback(self) -> bool:
        return self.link_type == ARPHRD_LOOPBACK or self.name == "lo"

    @property
    def link_down(self) -> bool:
        """The link cannot carry traffic (``links.link_problems``, the predicate device health
        uses too): an operational state in ``links.DOWN_STATES`` or no carrier.  ``unknown``
        (links that do not report a state, e.g. dummies) with a carrier counts as up."""
        return bool(link_problems(self.oper_state, self.carrier))


# -- sysfs ----------------------------------------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except (OSError, ValueError):
        return None


def _read_int(path: str) -> int | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text, 0) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def _link_basename(path: str) -> str | None:
    try:
        return os.path.basename(os.readlink(path)) or None
    except OSError:
        return None


def _pci_function_dir(device_dir: str) -> str | None:
    """The PCI function directory of a resolved ``device`` path, or None when not PCI.

    The device is the PCI function itself for most NICs; a virtio NIC's device is ``virtioN``
    under the virtio PCI function.  Other buses (USB, platform) give None.
    """
    base = os.path.basename(device_dir)
    if _PCI_ADDRESS.match(base):
        return device_dir
    if _VIRTIO.match(base):
        parent = os.path.dirname(device_dir)
        if _PCI_ADDRESS.match(os.path.basename(parent)):
            return parent
    return None


def _pcie_root(pci_dir: str, sysfs_root: str) -> str | None:
    devices = os.path.join(os.path.realpath(sysfs_root), "devices")
    rel = os.path.relpath(pci_dir, devices)
    if rel.startswith(".."):
        return None
    first = rel.split(os.sep, 1)[0]
    return first if _PCI_ROOT.match(first) else None


def _usable_class_entry(entry: str, ifindex: int | None, mac: str | None) -> bool:
    """Whether ``class/net/<name>`` describes the link netlink reported (see the module doc)."""
    if not os.path.isdir(entry):
        return False
    if ifindex is not None:
        seen = _read_int(os.path.join(entry, "ifindex"))
        if seen is not None and seen != ifindex:
            return False
    if mac:
        seen_mac = _read(os.path.join(entry, "address"))
        if seen_mac and seen_mac.lower() != mac.lower():
            return False
    return True


def hardware_facts(
    name: str,
    sysfs_root: str = "/sys",
    *,
    ifindex: int | None = None,
    mac: str | None = None,
    parent_dev: str | None = None,
    parent_bus: str | None = None,
) -> HardwareFacts:
    """Hardware facts of interface ``name`` from the sysfs tree at ``sysfs_root``.

    ``ifindex`` and ``mac`` (from netlink) guard against a same-named interface of another
    namespace; ``parent_dev``/``parent_bus`` (netlink's IFLA_PARENT_DEV_NAME/_BUS_NAME) name the
    PCI function when the class entry is missing or unusable.  Unreadable files give None.
    """
    entry = os.path.join(sysfs_root, "class", "net", name)
    facts: dict[str, Any] = {}
    pci_dir: str | None = None
    device_dir: str | None = None

    if _usable_class_entry(entry, ifindex, mac):
        speed = _read_int(os.path.join(entry, "speed"))
        facts["speed_mbps"] = speed if speed is not None and speed > 0 else None
        device_link = os.path.join(entry, "device")
        if os.path.islink(device_link) or os.path.isdir(device_link):
            device_dir = os.path.realpath(device_link)
            facts["virtual"] = False
            facts["driver"] = _link_basename(os.path.join(device_dir, "driver"))
            pci_dir = _pci_function_dir(device_dir)
        else:
            facts["virtual"] = True

    if pci_dir is None and parent_bus == "pci" and parent_dev and _PCI_ADDRESS.match(parent_dev):
        candidate = os.path.join(sysfs_root, "bus", "pci", "devices", parent_dev)
        pci_dir = os.path.realpath(candidate) if os.path.exists(candidate) else None
        facts["pci_address"] = parent_dev
        facts.setdefault("virtual", False)

    if pci_dir is not None:
        address = os.path.basename(pci_dir)
        facts["pci_address"] = address
        # Prefer the canonical /sys/bus/pci/devices/<address> resolution when present.
        canonical = os.path.join(sysfs_root, "bus", "pci", "devices", address)
        if os.path.exists(canonical):
            pci_dir = os.path.realpath(canonical)
        facts["pcie_root"] = _pcie_root(pci_dir, sysfs_root)
        numa = _read_int(os.path.join(pci_dir, "numa_node"))
        if numa is None and device_dir is not None:
            numa = _read_int(os.path.join(device_dir, "numa_node"))
        facts["numa_node"] = numa if numa is not None and numa >= 0 else None
        facts["sriov_totalvfs"] = _read_int(os.path.join(pci_dir, "sriov_totalvfs"))
        facts["sriov_numvfs"] = _read_int(os.path.join(pci_dir, "sriov_numvfs"))
        facts["sriov_is_vf"] = os.path.lexists(os.path.join(pci_dir, "physfn"))
        facts["vendor_id"] = _read(os.path.join(pci_dir, "vendor")) or None
        facts["device_id"] = _read(os.path.join(pci_dir, "device")) or None
    elif device_dir is not None:
        numa = _read_int(os.path.join(device_dir, "numa_node"))
        facts["numa_node"] = numa if numa is not None and numa >= 0 else None

    return HardwareFacts(**facts)


# -- netlink facts + sysfs facts -------------------------------------------------------------------

#: What a Nic takes as it is from netlink's ``LinkState``: the fields both have (name, index,
#: MAC, MTU, kind, states, link type, altnames); ``master`` names the link ``master_index`` is.
_LINK_FIELDS = tuple(f.name for f in fields(Nic) if f.name in {f.name for f in fields(LinkState)})


def nics_from(links: Iterable[LinkState], sysfs_root: str = "/sys") -> list[Nic]:
    """The NICs of ``links`` (one namespace's, from ``links.LinkDB``), with their hardware
    facts from the sysfs tree at ``sysfs_root``, sorted by index."""
    links = list(links)
    names = {link.index: link.name for link in links}
    nics: list[Nic] = []
    for link in links:
        hw = hardware_facts(
            link.name,
            sysfs_root,
            ifindex=link.index,
            mac=link.mac,
            parent_dev=link.parent_dev,
            parent_bus=link.parent_bus,
        )
        facts = asdict(hw)
        if hw.virtual is None:  # no usable sysfs entry: a link kind or loopback says virtual, else False
            facts["virtual"] = bool(link.kind) or link.link_type == ARPHRD_LOOPBACK
        master = names.get(link.master_index) if link.master_index else None
        nics.append(Nic(**{name: getattr(link, name) for name in _LINK_FIELDS}, master=master, **facts))
    nics.sort(key=lambda n: n.index)
    return nics


def discover_nics(*, netns: str | None = None, sysfs_root: str = "/sys", links: LinkDB | None = None) -> list[Nic]:
    """Every link of the namespace (the caller's, or the one at path ``netns``), sorted by index:
    the view of ``links`` (a running ``LinkDB``: no netlink call), or one netlink dump.

    Raises OSError (FileNotFoundError for a missing ``netns``) when the namespace cannot be
    entered or the dump fails.
    """
    if links is None:
        if netns is not None and not os.path.exists(netns):
            raise FileNotFoundError(2, "network namespace not found", netns)
        links = LinkDB(netns)
    return nics_from(links.snapshot(), sysfs_root)


# -- eligibility ----------------------------------------------------------------------------------

_GLOB_CHARS = frozenset("*?[")


def _is_literal(pattern: str) -> bool:
    return not (_GLOB_CHARS & set(pattern))


def default_exclusion_reason(nic: Nic, dracni_created: set[str] | frozenset[str] = frozenset()) -> str | None:
    """Why ``nic`` is not offered by default, or None when it is."""
    if nic.is_loopback:
        return "loopback"
    if nic.name in dracni_created:
        return "created by dracni"
    if nic.kind in DEFAULT_EXCLUDED_KINDS:
        return f"link kind {nic.kind}"
    if nic.master:
        return f"enslaved to {nic.master}"
    return None


def eligible(
    nic: Nic,
    include: list[str] | None = None,
    exclude: list[str] | None = None,
    dracni_created: set[str] | frozenset[str] = frozenset(),
) -> bool:
    """Whether dracni offers ``nic`` as a device.

    Patterns are shell-style globs on the interface name (``fnmatch.fnmatchcase``).  In order:
    a link dracni created (``dracni_created``) is never offered; a match in ``exclude`` rejects;
    a non-empty ``include`` that no pattern matches rejects; an
    ``include`` entry that is the interface's literal name (no glob characters) accepts, even a
    link the defaults exclude; otherwise the defaults decide (``default_exclusion_reason``:
    loopback, kinds in ``DEFAULT_EXCLUDED_KINDS``, links enslaved
    to a bridge or bond).  So ``include=["*"]`` still leaves out lo and pod veths, while
    ``include=["br0"]`` offers the bridge br0.
    """
    name = nic.name
    if name in dracni_created:
        return False
    if exclude and any(fnmatch.fnmatchcase(name, p) for p in exclude):
        return False
    if include:
        if not any(fnmatch.fnmatchcase(name, p) for p in include):
            return False
        if any(_is_literal(p) and p == name for p in include):
            return True
    return default_exclusion_reason(nic, dracni_created) is None
