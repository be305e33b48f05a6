"""NodeDevices: which NIC an allocated device is, by the names the node's slices carry."""

from __future__ import annotations

from dracni.inventory.lookup import NodeDevices
from dracni.inventory.nics import Nic
from dracni.inventory.slices import Offer
from dracni.policy.binding import DeviceFacts


def test_published_devices_answer_without_looking_at_the_node() -> None:
    nic = Nic(name="eth_1", index=3, mac="02:00:00:00:00:03", pci_address="0000:03:00.0")
    published = {"eth-1": Offer("eth-1", nic, "exclusive"), "eth-1-slot-0": Offer("eth-1-slot-0", nic, "slots", 0)}
    lookup = NodeDevices(netns="/nonexistent/netns", published=lambda: published)
    assert lookup("node1", "eth-1") == DeviceFacts("eth_1", "0000:03:00.0", "02:00:00:00:00:03")
    assert lookup("node1", "eth-1-slot-0") == DeviceFacts("eth_1", "0000:03:00.0", "02:00:00:00:00:03", "slots")
    assert lookup("node1", "eth2") is None  # not published: not this node's device


def test_loopback_is_never_a_device() -> None:
    """Without a publisher the node itself is looked at (the integration tests find the lab's
    NICs that way, through ``dracni prepare --nic-netns``); its loopback is never a device."""
    assert NodeDevices()("node1", "lo") is None


def test_a_missing_namespace_finds_nothing() -> None:
    assert NodeDevices(netns="/nonexistent/netns")("node1", "eth1") is None
