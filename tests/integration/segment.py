"""A real layer-2 segment around a lab's node, for the identity attacks of issue 22.

What a tenant can steal on a network is what the switch and the other hosts believe: the
switch's forwarding table (MAC -> port) and each host's neighbour table (IP -> MAC).  So the
segment is built from real parts, every one in a throwaway network namespace:

- a "switch" netns with a Linux bridge ``br0``; the peer of the lab's node NIC (``eth1p``, the
  macvlan parent ``eth1`` stays in the lab's host netns) is moved there and enslaved;
- a "gateway" netns and an "other host" netns, each attached to the bridge by a veth, each with
  an address in the segment's subnet; the gateway's MAC is globally administered (a vendor's,
  as a real router's), the other host's a veth's random, locally administered one;
- the node's own address on the parent; pings make every party learn the others (ARP) and the
  bridge learn their MACs (FDB), with an ageing time long enough for a test run.

``snapshot`` reads both tables the way an operator would (``bridge -j fdb``, ``ip -j neigh``):
an attack that was refused leaves both exactly as they were.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

from tests.harness import Lab, Netns, ip

SUBNET = "10.10.1.0/24"
GATEWAY_IP = "10.10.1.1"
NODE_IP = "10.10.1.2"
OTHER_HOST_IP = "10.10.1.3"
#: A globally administered MAC (Xen's OUI), as a vendor's router would carry.
GATEWAY_MAC = "00:16:3e:0a:0b:01"
#: The addresses tenants' pods get: the class network's range, clear of the hosts above.
RANGE_START, RANGE_END = "10.10.1.100", "10.10.1.200"
#: Identities inside that range that are not the network's to hand out (an administrator's
#: overlap, or a host configured by hand): a second address of the node on the parent, a
#: second address of the other host (the node learns it), and a MAC the node's own software
#: programmed on the parent (``bridge fdb add ... self``, e.g. a VRRP instance's).
NODE_IN_RANGE_IP = "10.10.1.180"
OTHER_HOST_IN_RANGE_IP = "10.10.1.181"
PARENT_FDB_MAC = "02:00:5e:00:01:0a"
#: Bridge FDB entries live this long (centiseconds): no entry ages out during a test run.
AGEING = "3000000"


@dataclass
class Segment:
    """The lab (its host netns is the node), the switch, the gateway and the other host."""

    lab: Lab
    switch: Netns
    gateway: Netns
    other_host: Netns
    namespaces: list[Netns] = field(default_factory=list)

    def mac_of(self, ns: Netns, ifname: str) -> str:
        return ns.links()[ifname]["address"]

    @property
    def parent_mac(self) -> str:
        return self.mac_of(self.lab.host, "eth1")

    @property
    def other_host_mac(self) -> str:
        return self.mac_of(self.other_host, "oh0")

    def close(self) -> None:
        for ns in reversed(self.namespaces):
            ns.close()


def _attach(switch: Netns, ns: Netns, port: str, ifname: str, address: str, mac: str | None = None) -> None:
    """A veth from the bridge (``port``) to ``ns`` (``ifname``), with ``address`` on it."""
    ip("link", "add", port, "type", "veth", "peer", "name", ifname, netns=switch.name)
    ip("link", "set", ifname, "netns", ns.name, netns=switch.name)
    ip("link", "set", port, "master", "br0", "up", netns=switch.name)
    if mac:
        ip("link", "set", ifname, "address", mac, netns=ns.name)
    ip("addr", "add", f"{address}/24", "dev", ifname, netns=ns.name)
    ip("link", "set", ifname, "up", netns=ns.name)


#: A TCP connection attempt to a closed port: the peer's reset proves the two ends resolved each
#: other (ARP both ways) and the switch forwarded both frames.  No ``ping`` binary is needed.
_PROBE = """
import socket, sys, time
for _ in range(25):
    s = socket.socket()
    s.settimeout(0.2)
    try:
        s.connect((sys.argv[1], 9))
        sys.exit(0)
    except ConnectionRefusedError:
        sys.exit(0)
    except OSError:
        time.sleep(0.2)
    finally:
        s.close()
sys.exit(f"{sys.argv[1]} did not answer")
"""


def ping(ns: Netns, address: str) -> None:
    """One answered probe (a few tries while links come up): both ends learn each other."""
    ns.exec(sys.executable, "-c", _PROBE, address)


def build(lab: Lab) -> Segment:
    """The segment around ``lab`` (whose host netns has ``eth1`` and its peer ``eth1p``);
    on failure what was made is removed before the error propagates."""
    seg = Segment(lab, Netns("dracni-sw"), Netns("dracni-gw"), Netns("dracni-oh"))
    seg.namespaces += [seg.switch, seg.gateway, seg.other_host]
    try:
        ip("link", "add", "br0", "type", "bridge", "ageing_time", AGEING, netns=seg.switch.name)
        ip("link", "set", "br0", "up", netns=seg.switch.name)
        ip("link", "set", "eth1p", "netns", seg.switch.name, netns=lab.host.name)
        ip("link", "set", "eth1p", "master", "br0", "up", netns=seg.switch.name)
        ip("addr", "add", f"{NODE_IP}/24", "dev", "eth1", netns=lab.host.name)
        _attach(seg.switch, seg.gateway, "gwp", "gw0", GATEWAY_IP, GATEWAY_MAC)
        _attach(seg.switch, seg.other_host, "ohp", "oh0", OTHER_HOST_IP)
        ip("addr", "add", f"{NODE_IN_RANGE_IP}/24", "dev", "eth1", netns=lab.host.name)
        ip("addr", "add", f"{OTHER_HOST_IN_RANGE_IP}/24", "dev", "oh0", netns=seg.other_host.name)
        lab.host.exec("bridge", "fdb", "add", PARENT_FDB_MAC, "dev", "eth1", "self", "permanent")
        ping(lab.host, GATEWAY_IP)
        ping(lab.host, OTHER_HOST_IP)
        ping(lab.host, OTHER_HOST_IN_RANGE_IP)
        ping(seg.gateway, OTHER_HOST_IP)
    except BaseException:
        seg.close()
        raise
    return seg


# -- what the segment believes -----------------------------------------------------------------


def fdb(seg: Segment) -> dict[str, str]:
    """The switch's learned entries, MAC -> port; the bridge's and ports' own (permanent, self)
    entries are not learned from traffic and left out."""
    entries = json.loads(seg.switch.exec("bridge", "-j", "fdb", "show", "br", "br0").stdout or b"[]")
    return {
        e["mac"]: e["ifname"]
        for e in entries
        if "permanent" not in e.get("state", "") and "self" not in e.get("flags", [])
    }


def neighbours(seg: Segment) -> dict[str, str | None]:
    """The gateway's neighbour table, IP -> MAC (None while unresolved)."""
    entries = json.loads(seg.gateway.exec("ip", "-j", "neigh", "show").stdout or b"[]")
    return {e["dst"]: e.get("lladdr") for e in entries}


def snapshot(seg: Segment) -> dict:
    return {"fdb": fdb(seg), "gateway neighbours": neighbours(seg)}
