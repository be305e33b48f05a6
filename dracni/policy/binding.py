"""The allocated device binds the configuration: which NIC ``master``, ``device`` and
``pciBusID`` name.

The scheduler allocated one device (a NIC of this node) to the request; the configuration
must use that NIC and no other.  Absent keys are filled in from the device, for every source
(a DeviceClass config cannot know which NIC the scheduler picks); a claim config naming
another NIC is refused, naming both.  The administrator's configs (FromClass) are trusted and
keep what they name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from dracni.params import DeviceParameters, ParameterError

from .rules import refuse
from .tenant import plugin_field

#: Plugins that stack on a parent link named by ``master``.
MASTER_TYPES = frozenset({"macvlan", "ipvlan", "vlan"})
HOST_DEVICE = "host-device"


class DeviceFacts(NamedTuple):
    """What binding needs to know of the allocated device: the NIC behind it, and whether the
    node offers it to several claims (``shared`` or ``slots``; inventory/sharing.py)."""

    if_name: str
    pci_bus_id: str | None
    mac: str | None
    sharing: str = "exclusive"


#: Finds the NIC behind an allocated device (pool, device), None when this node has none.
DeviceLookup = Callable[[str, str], "DeviceFacts | None"]


def bind_to_device(
    params: DeviceParameters,
    *,
    pool: str,
    device: str,
    shared: bool,
    tenant: bool,
    lookup: DeviceLookup | None,
    where: str,
) -> None:
    """Fill in and check, in place, the keys of ``params``' plugins that name a NIC."""
    config = params["config"]
    assert config is not None
    label = f"{pool}/{device}"
    facts: list[DeviceFacts | None] = []  # looked up once, on first need

    def known() -> DeviceFacts | None:
        if not facts:
            facts.append(lookup(pool, device) if lookup is not None else None)
        return facts[0]

    def nic(field: str) -> DeviceFacts:
        found = known()
        if found is None:
            raise ParameterError(
                field,
                f"cannot tell which network interface the allocated device {label} is: this node has "
                "no such device (is the device name one dracni published for this node?)",
            )
        return found

    for index, plugin in enumerate(config["plugins"]):
        field = plugin_field(where, index, params["single"])
        kind = plugin["type"]
        if kind in MASTER_TYPES:
            if not plugin.get("master"):
                plugin["master"] = nic(f"{field}.master").if_name
            elif tenant:
                _same(plugin["master"], nic(f"{field}.master").if_name, f"{field}.master", label)
        elif kind == HOST_DEVICE:
            if not any(plugin.get(k) for k in ("device", "pciBusID", "hwaddr", "kernelpath")):
                plugin["device"] = nic(f"{field}.device").if_name
            elif tenant:
                for key, fact in (("device", 0), ("pciBusID", 1), ("hwaddr", 2)):
                    if plugin.get(key):
                        actual = nic(f"{field}.{key}")[fact]
                        _same(
                            _lower(plugin[key]) if key == "hwaddr" else plugin[key],
                            _lower(actual) if key == "hwaddr" else actual,
                            f"{field}.{key}",
                            label,
                        )
            _whole_nic(kind, shared, known(), f"{field}.type", label)
        if tenant:
            _shared_parent(plugin, shared, known, field, label)
    device_id = params["runtimeConfig"].get("deviceID")
    if tenant and device_id is not None:
        _same(device_id, nic(f"{where}.runtimeConfig.deviceID").pci_bus_id, f"{where}.runtimeConfig.deviceID", label)


def _whole_nic(kind: str, share_id: bool, facts: DeviceFacts | None, field: str, label: str) -> None:
    """A plugin that takes the whole NIC needs a device no other claim can be allocated."""
    if share_id:
        how = "allocated with a shareID: other claims share it"
    elif facts is not None and facts.sharing != "exclusive":
        how = f"one of the devices sharing NIC {facts.if_name} (offered as {facts.sharing})"
    else:
        return
    raise refuse(
        field,
        f"{kind} moves the whole NIC, but device {label} is {how}; have the administrator offer the NIC "
        f"exclusively (--nic-sharing {facts.if_name if facts else 'NIC'}=exclusive) and select it with "
        f'device.attributes["<driver>"].sharing == "exclusive"',
        "exclusiveDevice",
    )


#: What a tenant's plugin may not do on a NIC other claims share: settings the kernel keeps per
#: parent, so that one attachment's choice changes every other attachment on it.
#: - macvlan ``passthru``: the one child takes over the parent (its MAC and flags);
#: - ipvlan: the kernel keeps one mode per parent (``ipvlan_link_new`` sets the port's mode), so a
#:   tenant's ipvlan (whose plugin always sends a mode, l2 by default) can switch every other
#:   ipvlan attachment on the parent between l2, l3 and l3s;
#: - tuning ``promisc`` / ``allmulti`` on a macvlan or ipvlan child: the kernel raises the
#:   parent's promiscuity / allmulti counters with the child's (``macvlan_change_rx_flags``);
#: - vlan without a ``vlanId`` of 1..4094: the kernel allows one VLAN device per ID on a parent
#:   (``vlan_check_real_dev``), so which IDs are free is checked at ADD (dracni/cni/vlanguard.py);
#:   here the ID must be one a VLAN can have (0 is priority tagging, 4095 reserved).
PARENT_FLAGS = ("promisc", "allmulti")
VLAN_IDS = range(1, 4095)


def _shared_parent(
    plugin: dict[str, Any], shared: bool, known: Callable[[], DeviceFacts | None], field: str, label: str
) -> None:
    kind = plugin["type"]
    vid = plugin.get("vlanId", 1)
    if kind == "vlan" and (not isinstance(vid, int) or isinstance(vid, bool) or vid not in VLAN_IDS):
        raise refuse(
            f"{field}.vlanId",
            f"{vid!r} is no VLAN ID of 1..4094 (0 is priority tagging, 4095 reserved); dracni's ADD also refuses "
            f"an ID the node or another attachment uses on the parent of {label}",
            "sharedParent",
        )
    if kind not in ("macvlan", "ipvlan", "tuning", "vlan"):
        return
    facts = known()
    if not shared and (facts is None or facts.sharing == "exclusive"):
        return
    how = "allocated with a shareID" if shared else f"offered as {facts.sharing if facts else 'shared'}"
    if kind == "macvlan" and str(plugin.get("mode", "")).lower() == "passthru":
        raise refuse(f"{field}.mode", f"passthru takes over the parent of {label} ({how})", "sharedParent")
    if kind == "ipvlan":
        raise refuse(
            f"{field}.type",
            f"the kernel keeps one ipvlan mode per parent: an ipvlan of the claim's own on {label} ({how}) would "
            "set it for every ipvlan attachment there; use the administrator's ipvlan network",
            "sharedParent",
        )
    if kind == "vlan" and plugin.get("vlanId") is None:
        raise refuse(
            f"{field}.vlanId", f"a VLAN on the parent of {label} ({how}) needs a vlanId of 1..4094", "sharedParent"
        )
    if kind == "tuning":
        for flag in PARENT_FLAGS:
            if plugin.get(flag):
                raise refuse(
                    f"{field}.{flag}", f"raises the {flag} counter of the parent of {label} ({how})", "sharedParent"
                )


def _same(named: Any, actual: str | None, field: str, label: str) -> None:
    """A claim naming a NIC must name the allocated one."""
    if named != actual:
        shown = f"{actual!r}" if actual else "unknown"
        raise refuse(field, f"{named!r} is not the allocated device {label} ({shown})", "deviceBinding")


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value
