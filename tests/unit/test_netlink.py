"""dracni/netlink.py: a link's addresses, neighbours and FDB entries, read in a throwaway netns.

The namespace holds a veth pair ``probe0``/``probe1`` with ``probe0`` a port of bridge ``br0``
and ``probe1`` an ordinary link; the entries are made with iproute2 (``ip addr``, ``ip neigh``,
``bridge fdb``) and read back through the module, inside the namespace (``netns.in_netns``).
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from dracni import netlink
from dracni.netns import in_netns

T = TypeVar("T")


@pytest.fixture
def ns() -> Iterator[Callable[[Callable[[], T]], T]]:
    name = f"dracni-nl-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)

    def ip(*args: str) -> None:
        subprocess.run(["ip", "-n", name, *args], check=True)

    try:
        ip("link", "add", "probe0", "type", "veth", "peer", "name", "probe1")
        ip("link", "add", "br0", "type", "bridge")
        ip("link", "set", "probe0", "master", "br0")
        for link in ("probe0", "probe1", "br0"):
            ip("link", "set", link, "up")
        ip("addr", "add", "10.7.0.1/24", "dev", "probe1")
        ip("addr", "add", "fd07::1/64", "dev", "probe1", "nodad")
        ip("addr", "add", "10.8.0.1/24", "dev", "br0")
        ip("neigh", "add", "10.7.0.9", "lladdr", "02:00:00:00:07:09", "dev", "probe1", "nud", "permanent")
        ip("neigh", "add", "fd07::9", "lladdr", "02:00:00:00:07:69", "dev", "probe1", "nud", "permanent")
        ip("neigh", "add", "10.7.0.10", "dev", "probe1", "nud", "incomplete")
        ip("neigh", "add", "10.8.0.9", "lladdr", "02:00:00:00:08:09", "dev", "br0", "nud", "permanent")
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                name,
                "bridge",
                "fdb",
                "add",
                "02:00:00:00:0f:01",
                "dev",
                "probe0",
                "master",
                "static",
            ],
            check=True,
        )
        path = f"/run/netns/{name}"
        yield lambda work: in_netns(path, work)
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_link_index(ns) -> None:
    assert ns(lambda: netlink.link_index("probe1")) > 0
    assert ns(lambda: netlink.link_index("no-such-link0")) is None


def test_addresses_of_both_families_of_one_link(ns) -> None:
    found = ns(lambda: netlink.addresses(netlink.link_index("probe1")))
    assert {(a.ip, a.prefixlen) for a in found} >= {("10.7.0.1", 24), ("fd07::1", 64)}
    assert "10.8.0.1" not in {a.ip for a in found}  # br0's


def test_neighbours_ipv4_and_ipv6_with_a_link_layer_address(ns) -> None:
    found = ns(lambda: netlink.neighbours(netlink.link_index("probe1")))
    pairs = {(n.ip, n.mac) for n in found}
    assert ("10.7.0.9", "02:00:00:00:07:09") in pairs
    assert ("fd07::9", "02:00:00:00:07:69") in pairs
    assert "10.7.0.10" not in {n.ip for n in found}  # incomplete: no lladdr to trust
    assert "10.8.0.9" not in {n.ip for n in found}  # br0's


def test_fdb_of_a_port_of_its_bridge_and_of_an_ordinary_link(ns) -> None:
    def read() -> tuple[list[netlink.FdbEntry], list[netlink.FdbEntry], list[netlink.FdbEntry], int, int]:
        port, bridge = netlink.link_index("probe0"), netlink.link_index("br0")
        assert port and bridge
        return netlink.fdb(port), netlink.fdb(bridge), netlink.fdb(netlink.link_index("probe1") or 0), port, bridge

    port_fdb, bridge_fdb, own_fdb, port, bridge = ns(read)
    assert netlink.FdbEntry("02:00:00:00:0f:01", port, bridge) in port_fdb
    assert netlink.FdbEntry("02:00:00:00:0f:01", port, bridge) in bridge_fdb  # NDA_MASTER
    assert own_fdb and all(e.master == 0 for e in own_fdb)  # the device's own (self) list
    assert "02:00:00:00:0f:01" not in {e.mac for e in own_fdb}


def test_records_compare_and_print() -> None:
    a = netlink.Neighbour("10.0.0.1", "02:00:00:00:00:01", 3, 0x80)
    assert a == netlink.Neighbour("10.0.0.1", "02:00:00:00:00:01", 3, 0x80) and len({a, a}) == 1
    assert repr(a) == "Neighbour(ip='10.0.0.1', mac='02:00:00:00:00:01', ifindex=3, state=128)"


def test_no_netlink_gives_empty_results(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netlink, "AF_NETLINK", 12345)  # an address family no kernel has
    assert netlink.addresses(1) == [] and netlink.neighbours(1) == [] and netlink.fdb(1) == []
