"""Which NIC of this node an allocated device is: the device binding's view of the inventory.

Device names are the ones ``slices.build_slices`` publishes (``unique_device_names`` over the
offered NICs), so a device the scheduler allocated maps back to exactly one interface.  The
node is looked at when a claim is prepared, not cached: interfaces come and go.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..policy.binding import DeviceFacts
from .links import LinkDB
from .nics import Nic, discover_nics
from .sharing import Sharing
from .slices import Offer, device_for, offered_device, offers


class NodeDevices:
    """``lookup(pool, device)`` -> the NIC's facts, or None when this node has no such device.

    ``offered`` picks the NICs the node publishes (the service's include/exclude rules); None
    takes every interface but loopback (clusterless manifests name interfaces freely).
    ``published`` is what the node last published (device name -> NIC, kept by the slice
    publisher, which updates it before it publishes): then that is the answer, and the node is
    not looked at again (no netlink dump on a gRPC thread).  Otherwise ``links`` (the service's
    running ``LinkDB``) gives the node's links without a netlink call; without it, each lookup
    dumps the links of ``netns`` once.
    The pool is not compared: a node publishes one pool, and clusterless pools are free names.
    """

    def __init__(
        self,
        *,
        netns: str | None = None,
        offered: Callable[[Nic], bool] | None = None,
        published: Callable[[], Mapping[str, Offer]] | None = None,
        sharing: Sharing | None = None,
        links: LinkDB | None = None,
    ) -> None:
        self.netns = netns
        self.links = links
        self.offered = offered
        self.published = published
        self.sharing = sharing

    def __call__(self, pool: str, device: str) -> DeviceFacts | None:
        offer = self._offer(device)
        return _facts(offer) if offer is not None else None

    def attributes(self, pool: str, device: str, *, domain: str) -> dict[str, Any] | None:
        """The device's attributes as the node's ResourceSlice has them (``slices.offered_device``),
        for its device metadata file (KEP-5304); None when this node has no such device."""
        offer = self._offer(device)
        if offer is None:
            return None
        if self.sharing is None:
            published = device_for(offer.nic, domain=domain, name=offer.name)
        else:
            published = offered_device(offer, domain=domain, sharing=self.sharing)
        attributes: dict[str, Any] = published["attributes"]
        return attributes

    def _offer(self, device: str) -> Offer | None:
        if self.published is not None:
            return self.published().get(device)
        try:
            nics = discover_nics(netns=self.netns, links=self.links)
        except OSError:
            return None
        chosen = [n for n in nics if (self.offered(n) if self.offered else not n.is_loopback)]
        try:
            found = [o for o in offers(chosen, self.sharing) if o.name == device]
        except ValueError:
            return None
        return found[0] if found else None


def _facts(offer: Offer) -> DeviceFacts:
    nic = offer.nic
    return DeviceFacts(if_name=nic.name, pci_bus_id=nic.pci_address, mac=nic.mac or None, sharing=offer.mode)
