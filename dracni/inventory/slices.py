"""Build the node's ResourceSlices (resource.k8s.io/v1) from discovered NICs. Pure: no API calls.

One pool per node, named after the node; one device per offered interface.  Device names are
DNS labels derived from interface names; attributes live in the driver's domain
(``<driver>/ifName``, ...) plus the standard ``resource.kubernetes.io/pciBusID``,
``resource.kubernetes.io/pcieRoot`` and ``resource.kubernetes.io/numaNode``.  A NIC whose link
is down or gone carries a device taint (KEP-5055, ``link_taint``) on each of its devices.
Limits (docs/contracts.md section 4, and the API server's validation, whose rules and numbers
are in ``dracni.apirules.validation``): <=128 devices per slice (64 with taints), <=32 attributes
per device, attribute names ``[<dns-subdomain <=63>/]<C identifier <=32>``, string and version
values <=64 bytes, each attribute exactly one of int/bool/string/version.

Objects are plain dicts in the API's camelCase JSON form, ready for the kubernetes client or
``kubectl apply``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from .. import defaults
from ..apirules.validation import (
    ATTRIBUTE_VALUE_MAX,
    DEVICE_MAX_ATTRIBUTES,
    DNS1123_LABEL_MAX,
    DNS1123_SUBDOMAIN_MAX,
    DRIVER_NAME_MAX,
    SLICE_MAX_DEVICES,
    SLICE_MAX_DEVICES_WITH_TAINTS,
    is_dns_subdomain,
    is_driver_name,
    is_label_value,
)
from .nics import Nic
from .sharing import EXCLUSIVE, SHARED, SLOTS, Sharing
from .slicediff import slice_content, slices_equal

__all__ = [
    "API_VERSION",
    "LABEL_DRIVER",
    "LABEL_NODE",
    "PCI_BUS_ID",
    "PCIE_ROOT",
    "NUMA_NODE",
    "MAX_NUMA_NODES",
    "TAINT_EFFECTS",
    "LINK_DOWN",
    "LINK_GONE",
    "link_taint",
    "link_taint_key",
    "Offer",
    "build_slices",
    "device_for",
    "offers",
    "device_name",
    "label_value",
    "slice_name",
    "slice_content",
    "slices_equal",
    "unique_device_names",
]

API_VERSION = "resource.k8s.io/v1"

PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
#: Kubernetes 1.37 (k8s.io/dynamic-resource-allocation/deviceattribute
#: ``StandardDeviceAttributeNUMANode``): the kernel's ``numa_node`` in the scalar form (``int``),
#: which needs no feature gate; the list form (``ints``) needs ``DRAListTypeAttributes`` (alpha,
#: off in 1.36 and 1.37) and a server without it drops and refuses it (docs/contracts.md
#: section 4).  Omitted for no NUMA affinity (-1) and for a node number the helper refuses
#: (``numa_linux.go GetNUMANodeAttribute``: at most ``maxNUMANodes`` - 1).
NUMA_NODE = "resource.kubernetes.io/numaNode"
MAX_NUMA_NODES = 1024

#: Device taint effects (k8s ``pkg/apis/resource/types.go`` ``DeviceTaintEffect``) a link taint
#: may carry; the service's ``--link-down-taint-effect`` also accepts ``None`` (no taint).
TAINT_EFFECTS = ("NoSchedule", "NoExecute")
#: Values of the link taint: the link cannot carry traffic, or the NIC vanished from the node.
LINK_DOWN = "down"
LINK_GONE = "gone"

# Labels on every slice dracni writes, to list and clean up its own slices.
LABEL_DRIVER = "dracni.io/driver"
LABEL_NODE = "dracni.io/node"

_INVALID_LABEL_CHARS = re.compile(r"[^a-z0-9-]")
_HASH_LEN = 6


def _hash(text: str, n: int = _HASH_LEN) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:n]


# -- names ----------------------------------------------------------------------------------------


def device_name(ifname: str) -> str:
    """The DNS label for interface ``ifname``: lowercased, each character outside [a-z0-9-]
    replaced by "-", leading and trailing "-" dropped, at most 63 characters ("nic" if nothing
    is left).  Not necessarily unique: see ``unique_device_names``."""
    name = _INVALID_LABEL_CHARS.sub("-", ifname.lower())[:DNS1123_LABEL_MAX].strip("-")
    return name or "nic"


def _suffixed(base: str, suffix: str) -> str:
    head = base[: DNS1123_LABEL_MAX - len(suffix) - 1].rstrip("-") or "nic"
    return f"{head}-{suffix}"


def unique_device_names(ifnames: Iterable[str]) -> dict[str, str]:
    """Map each interface name to a device name unique among them, deterministically.

    An interface whose sanitized name is unique keeps it.  When several sanitize to the same
    label (``eth_0``, ``eth.0``, ``ETH-0``), the one whose name already *is* that label keeps
    it and the others get ``-<6 hex of sha256(interface name)>`` appended, so the result depends
    only on the set of names, never on their order.  Raises ValueError on duplicate names.
    """
    names = list(ifnames)
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"duplicate interface names: {', '.join(dupes)}")
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(device_name(name), []).append(name)

    result: dict[str, str] = {}
    taken: set[str] = set()
    pending: list[tuple[str, str]] = []  # (ifname, base) needing a suffix
    for base, members in groups.items():
        if len(members) == 1:
            result[members[0]] = base
            taken.add(base)
            continue
        for member in members:
            if member == base:
                result[member] = base
                taken.add(base)
            else:
                pending.append((member, base))
    # Suffixed names could in theory hit a real interface's name: resolve in a fixed order.
    pending.sort()
    for member, base in pending:
        digest = _hash(member)
        candidate = _suffixed(base, digest)
        counter = 1
        while candidate in taken:
            candidate = _suffixed(base, f"{digest}-{counter}")
            counter += 1
        result[member] = candidate
        taken.add(candidate)
    return result


def label_value(value: str) -> str:
    """``value`` if it is a valid label value (<=63 chars), else a valid, stable stand-in."""
    if is_label_value(value):
        return value
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", value)[:54].strip("-_.")
    return f"{cleaned}-{_hash(value, 8)}" if cleaned else _hash(value, 8)


def slice_name(node_name: str, driver: str, index: int) -> str:
    """``<node>-<driver with dots as dashes>-<index>``; the node part is shortened and given a
    hash of the full node name when the whole would exceed 253 characters."""
    tail = f"-{driver.replace('.', '-')}-{index}"
    if len(node_name) + len(tail) <= DNS1123_SUBDOMAIN_MAX:
        return node_name + tail
    keep = DNS1123_SUBDOMAIN_MAX - len(tail) - 9
    head = node_name[:keep].rstrip("-.")
    return f"{head}-{_hash(node_name, 8)}{tail}"


# -- devices --------------------------------------------------------------------------------------


def _string(value: str) -> dict[str, str]:
    encoded = value.encode("utf-8", "replace")
    if len(encoded) > ATTRIBUTE_VALUE_MAX:  # the API limit counts bytes
        value = encoded[:ATTRIBUTE_VALUE_MAX].decode("utf-8", "ignore")
    return {"string": value}


def device_for(nic: Nic, *, domain: str = defaults.DRIVER, name: str | None = None) -> dict[str, Any]:
    """The v1 Device for ``nic``: ``{"name", "attributes"}``.

    ``name`` defaults to ``device_name(nic.name)`` (``build_slices`` passes the de-duplicated
    one).  Attributes under ``domain`` (the driver name): ifName, mac, mtu, kind ("" for a
    physical NIC), virtual, sriovVF always; speedMbps, numaNode, sriovTotalVFs, sriovNumVFs,
    master, kernelDriver, pciVendor, pciDevice when known; plus the standard
    ``resource.kubernetes.io/pciBusID``, ``.../pcieRoot`` and ``.../numaNode`` when known.

    The link's state is not an attribute: a link that is down is a taint (``link_taint``), so
    a flapping link rewrites the slice only when its taint comes or goes.
    """
    attrs: dict[str, dict[str, Any]] = {}

    def put(key: str, value: dict[str, Any]) -> None:
        attrs[f"{domain}/{key}"] = value

    put("ifName", _string(nic.name))
    if nic.mac:
        put("mac", _string(nic.mac))
    put("mtu", {"int": int(nic.mtu)})
    put("kind", _string(nic.kind))
    put("virtual", {"bool": bool(nic.virtual)})
    put("sriovVF", {"bool": bool(nic.sriov_is_vf)})
    if nic.speed_mbps is not None:
        put("speedMbps", {"int": int(nic.speed_mbps)})
    if nic.numa_node is not None:
        put("numaNode", {"int": int(nic.numa_node)})
    if nic.sriov_totalvfs is not None:
        put("sriovTotalVFs", {"int": int(nic.sriov_totalvfs)})
    if nic.sriov_numvfs is not None:
        put("sriovNumVFs", {"int": int(nic.sriov_numvfs)})
    if nic.master:
        put("master", _string(nic.master))
    if nic.driver:
        put("kernelDriver", _string(nic.driver))
    if nic.vendor_id:
        put("pciVendor", _string(nic.vendor_id))
    if nic.device_id:
        put("pciDevice", _string(nic.device_id))
    if nic.pci_address:
        attrs[PCI_BUS_ID] = _string(nic.pci_address)
    if nic.pcie_root:
        attrs[PCIE_ROOT] = _string(nic.pcie_root)
    if nic.numa_node is not None and 0 <= nic.numa_node < MAX_NUMA_NODES:
        attrs[NUMA_NODE] = {"int": int(nic.numa_node)}
    assert len(attrs) <= DEVICE_MAX_ATTRIBUTES
    return {"name": name if name is not None else device_name(nic.name), "attributes": attrs}


# -- sharing --------------------------------------------------------------------------------------


class Offer(NamedTuple):
    """One device the node offers: its name, the NIC behind it, how it is shared."""

    name: str
    nic: Nic
    mode: str  # sharing.EXCLUSIVE, SHARED or SLOTS
    slot: int | None = None


def offers(nics: Iterable[Nic], sharing: Sharing | None = None) -> list[Offer]:
    """The devices for ``nics``: one per NIC, or ``sharing.slots`` per NIC in slots mode
    (``<device name>-slot-<i>``).  None: every NIC exclusive.  Raises ValueError on duplicate
    interface names or device names."""
    nics = list(nics)
    names = unique_device_names(nic.name for nic in nics)
    out: list[Offer] = []
    for nic in nics:
        mode = sharing.mode(nic.name) if sharing else EXCLUSIVE
        if mode != SLOTS:
            out.append(Offer(names[nic.name], nic, mode))
            continue
        assert sharing is not None
        for slot in range(sharing.slots):
            suffix = f"-slot-{slot}"
            out.append(Offer(names[nic.name][: DNS1123_LABEL_MAX - len(suffix)].rstrip("-") + suffix, nic, mode, slot))
    if len({o.name for o in out}) != len(out):
        raise ValueError("device names clash between a NIC and another NIC's slots; rename the NIC or use fewer slots")
    return out


def offered_device(offer: Offer, *, domain: str, sharing: Sharing) -> dict[str, Any]:
    """The v1 Device for ``offer``: ``device_for`` plus the sharing attributes, and for a
    shared NIC ``allowMultipleAllocations`` with the attachments capacity (a plain request
    consumes one: its request policy's default and only valid value)."""
    device = device_for(offer.nic, domain=domain, name=offer.name)
    device["attributes"][f"{domain}/sharing"] = _string(offer.mode)
    if offer.mode == SLOTS:
        device["attributes"][f"{domain}/parent"] = _string(offer.nic.name)
        device["attributes"][f"{domain}/slot"] = {"int": offer.slot}
    elif offer.mode == SHARED:
        device["allowMultipleAllocations"] = True
        device["capacity"] = {
            f"{domain}/attachments": {
                "value": canonical_count(sharing.max_attachments),
                "requestPolicy": {"default": "1", "validValues": ["1"]},
            }
        }
    return device


def canonical_count(n: int) -> str:
    """``n`` as the API server writes a DecimalSI quantity back (1000 -> "1k", 1500 -> "1500"),
    so a slice read back compares equal to the one written (resource.Quantity's canonical form)."""
    for suffix in ("E", "P", "T", "G", "M", "k"):
        scale = 1000 ** ("kMGTPE".index(suffix) + 1)
        if n and n % scale == 0:
            return f"{n // scale}{suffix}"
    return str(n)


# -- taints ---------------------------------------------------------------------------------------


def link_taint_key(driver: str) -> str:
    """``<driver>/link``: a label name (the driver name is a DNS subdomain, the prefix)."""
    return f"{driver}/link"


def link_taint(driver: str, value: str, effect: str, time_added: str) -> dict[str, str]:
    """The v1 DeviceTaint saying the NIC's link is ``value`` (``LINK_DOWN``/``LINK_GONE``) since
    ``time_added`` (RFC 3339; the API server would default it to the write's time, and a
    publisher that resent a new one would rewrite the slice for nothing)."""
    if effect not in TAINT_EFFECTS:
        raise ValueError(f"taint effect {effect!r}: must be one of {', '.join(TAINT_EFFECTS)}")
    return {"key": link_taint_key(driver), "value": value, "effect": effect, "timeAdded": time_added}


# -- slices ---------------------------------------------------------------------------------------


def build_slices(
    *,
    driver: str,
    node_name: str,
    node_uid: str | None,
    nics: list[Nic],
    generation: int,
    max_devices: int = SLICE_MAX_DEVICES,
    sharing: Sharing | None = None,
    taints: Mapping[str, list[dict[str, str]]] | None = None,
) -> list[dict[str, Any]]:
    """The ResourceSlices publishing ``nics`` as the pool of node ``node_name``, each NIC as
    ``sharing`` says (``offers``; None: one exclusive device per NIC, no sharing attributes).

    Devices are sorted by name and split into ceil(n / max_devices) slices (one slice with no
    devices when ``nics`` is empty, so the pool still says "nothing here"); every slice carries
    the same ``pool.generation`` and ``pool.resourceSliceCount`` = the number of slices.
    Slice names are deterministic (``slice_name``); an ownerReference to the Node is added when
    ``node_uid`` is known.  ``taints`` (interface name -> DeviceTaints) go on every device of
    that NIC; a slice with taints holds at most 64 devices (the API's limit), so a caller that
    may taint passes ``max_devices=SLICE_MAX_DEVICES_WITH_TAINTS`` to keep the split stable.
    Raises ValueError on an invalid driver or node name, a negative generation, a
    ``max_devices`` outside 1..128 (1..64 with taints), or duplicate interface names.
    """
    if not is_driver_name(driver):
        raise ValueError(f"driver {driver!r}: must be a DNS subdomain of at most {DRIVER_NAME_MAX} characters")
    if not is_dns_subdomain(node_name):
        raise ValueError(f"node name {node_name!r}: must be a DNS subdomain")
    if isinstance(generation, bool) or not isinstance(generation, int) or not 0 <= generation < 2**63:
        raise ValueError(f"generation {generation!r}: must be a non-negative int64")
    if isinstance(max_devices, bool) or not isinstance(max_devices, int) or not 1 <= max_devices <= SLICE_MAX_DEVICES:
        raise ValueError(f"max_devices {max_devices!r}: must be between 1 and {SLICE_MAX_DEVICES}")
    taints = {name: list(t) for name, t in (taints or {}).items() if t}
    if taints and max_devices > SLICE_MAX_DEVICES_WITH_TAINTS:
        raise ValueError(f"max_devices {max_devices}: slices with taints hold at most {SLICE_MAX_DEVICES_WITH_TAINTS}")

    if sharing is None:
        names = unique_device_names(nic.name for nic in nics)
        pairs = [(nic, device_for(nic, domain=driver, name=names[nic.name])) for nic in nics]
    else:
        pairs = [(o.nic, offered_device(o, domain=driver, sharing=sharing)) for o in offers(nics, sharing)]
    unsorted = []
    for nic, device in pairs:
        if nic.name in taints:
            device["taints"] = [dict(t) for t in taints[nic.name]]
        unsorted.append(device)
    devices = sorted(unsorted, key=lambda d: d["name"])
    chunks = [devices[i : i + max_devices] for i in range(0, len(devices), max_devices)] or [[]]

    labels = {LABEL_DRIVER: label_value(driver), LABEL_NODE: label_value(node_name)}
    slices = []
    for index, chunk in enumerate(chunks):
        metadata: dict[str, Any] = {"name": slice_name(node_name, driver, index), "labels": dict(labels)}
        if node_uid:
            metadata["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": node_name,
                    "uid": node_uid,
                    "controller": True,
                }
            ]
        slices.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ResourceSlice",
                "metadata": metadata,
                "spec": {
                    "driver": driver,
                    "nodeName": node_name,
                    "pool": {"name": node_name, "generation": generation, "resourceSliceCount": len(chunks)},
                    "devices": chunk,
                },
            }
        )
    return slices
