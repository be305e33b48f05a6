"""dracni/netlink.py: a link's addresses, neighbours and FDB entries, read in a throwaway netns.

The namespace holds a veth pair ``probe0``/``probe1`` with ``probe0`` a port of bridge ``br0``
and ``probe1`` an ordinary link; the entries are made with iproute2 (``ip addr``, ``ip neigh``,
``bridge fdb``) and read back through the module, inside the namespace (``netns.in_netns``).
"""

from __future__ import annotations

import errno
import os
import select
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from dracni import netlink
from dracni.inventory.links import LinkState, _dump_done, _dump_request, dump_links, link_state, open_route_socket
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


# -- links: the service's link messages, parsed as pyroute2 parsed them -----------------------------
#
# ``inventory/links.py`` once parsed its messages with pyroute2's MarshalRtnl; the reference below
# is that code, kept here only, and every real message must give the same LinkState through both.


def _pyroute2_link_state(msg: Any) -> LinkState:
    """links.link_state as it was on pyroute2 (the reference)."""
    index = int(msg["index"])
    carrier = msg.get_attr("IFLA_CARRIER")
    props = msg.get_attr("IFLA_PROP_LIST")
    return LinkState(
        name=msg.get_attr("IFLA_IFNAME") or f"if{index}",
        index=index,
        admin_up=bool(msg["flags"] & 0x1),
        oper_state=str(msg.get_attr("IFLA_OPERSTATE") or "unknown").lower(),
        carrier=None if carrier is None else bool(carrier),
        mac=msg.get_attr("IFLA_ADDRESS") or "",
        mtu=msg.get_attr("IFLA_MTU") or 0,
        kind=msg.get_nested("IFLA_LINKINFO", "IFLA_INFO_KIND") or "",
        link_type=int(msg["ifi_type"]),
        master_index=msg.get_attr("IFLA_MASTER") or None,
        alt_names=() if props is None else tuple(props.get_attrs("IFLA_ALT_IFNAME")),
        parent_dev=msg.get_attr("IFLA_PARENT_DEV_NAME"),
        parent_bus=msg.get_attr("IFLA_PARENT_DEV_BUS_NAME"),
    )


def _pyroute2_messages(data: bytes) -> list[Any]:
    import pyroute2  # noqa: F401  the package first: marshal alone is a circular import
    from pyroute2.netlink.rtnl.marshal import MarshalRtnl

    return list(MarshalRtnl().parse(data))


def _parse_both(buffers: list[bytes]) -> list[tuple[netlink.Message, LinkState | None]]:
    """Every message of ``buffers``, checked against pyroute2's parse of the same bytes: the same
    headers, error codes and LinkStates.  (message, its LinkState or None)."""
    out = []
    for data in buffers:
        ours, theirs = netlink.messages(data), _pyroute2_messages(data)
        headers = [(h["type"], h["flags"], h["sequence_number"]) for h in (m["header"] for m in theirs)]
        assert [(m.kind, m.flags, m.seq) for m in ours] == headers
        for mine, ref in zip(ours, theirs, strict=True):
            state = None
            if mine.kind in (netlink.RTM_NEWLINK, netlink.RTM_DELLINK):
                state = link_state(mine)
                assert state == _pyroute2_link_state(ref)
            elif mine.kind == netlink.NLMSG_ERROR:
                error = ref["header"]["error"]
                assert mine.error == (error.args[0] if error else 0)
            out.append((mine, state))
    return out


def _read(sock: socket.socket, until: Callable[[list[netlink.Message]], bool], timeout: float = 5.0) -> list[bytes]:
    """The buffers ``sock`` receives until ``until`` holds for the messages so far."""
    buffers: list[bytes] = []
    seen: list[netlink.Message] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([sock], [], [], 0.1)[0]:
            buffers.append(sock.recv(1 << 16))
            seen += netlink.messages(buffers[-1])
            if until(seen):
                return buffers
    raise AssertionError(f"timed out after {len(seen)} messages")


def _dump_buffers(path: str) -> list[bytes]:
    with open_route_socket(path) as sock:
        sock.send(_dump_request(1))
        return _read(sock, lambda seen: any(m.kind == netlink.NLMSG_DONE and m.seq == 1 for m in seen))


@pytest.fixture
def link_lab() -> Iterator[tuple[str, Callable[..., bool]]]:
    """A throwaway netns: lo up; veth lk0/lk1, lk0 a port of bridge br1 (up), lk1 down.  Yields
    its path and ``ip(*args) -> bool`` (whether iproute2 did it), for what a kernel may refuse."""
    name = f"dracni-nll-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)

    def ip(*args: str) -> bool:
        return subprocess.run(["ip", "-n", name, *args], capture_output=True).returncode == 0

    try:
        for args in (
            ("link", "add", "lk0", "type", "veth", "peer", "name", "lk1"),
            ("link", "add", "br1", "type", "bridge"),
            ("link", "set", "lk0", "master", "br1"),
            *(("link", "set", link, "up") for link in ("lo", "lk0", "br1", "lk1")),
            ("link", "set", "lk1", "down"),
        ):
            assert ip(*args), args
        yield f"/run/netns/{name}", ip
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_a_link_dump_parses_as_pyroute2_parses_it(link_lab) -> None:
    path, _ = link_lab
    buffers = _dump_buffers(path)
    parsed = _parse_both(buffers)
    states = {state.name: state for _, state in parsed if state is not None}
    assert set(states) == {"lo", "lk0", "lk1", "br1"}
    assert states["lk0"].master_index == states["br1"].index and states["lk1"].master_index is None
    assert (states["lk1"].admin_up, states["lk1"].oper_state, states["lk1"].carrier) == (False, "down", False)
    assert (states["br1"].kind, states["lk0"].kind, states["lo"].kind, states["lo"].link_type) == (
        "bridge",
        "veth",
        "",
        772,
    )
    assert states["lo"].mac == "00:00:00:00:00:00" and len(states["lk0"].mac) == 17 and states["lk0"].mtu == 1500
    assert max(sum(m.kind == netlink.RTM_NEWLINK for m in netlink.messages(data)) for data in buffers) > 1
    assert parsed[-1][0].kind == netlink.NLMSG_DONE
    assert dump_links(path) == sorted(states.values(), key=lambda s: s.index)


def test_a_dummy_link_parses_as_pyroute2_parses_it(link_lab) -> None:
    path, ip = link_lab
    if not ip("link", "add", "dm0", "type", "dummy"):
        pytest.skip("this kernel has no dummy links (CONFIG_DUMMY): `ip link add dm0 type dummy` failed")
    states = {state.name: state for _, state in _parse_both(_dump_buffers(path)) if state is not None}
    assert states["dm0"].kind == "dummy"


def test_every_altname_in_order_as_pyroute2_reads_them(link_lab) -> None:
    path, ip = link_lab
    names = ("lk1-first-altname", "lk1-second-altname")
    for alt in names:
        if not ip("link", "property", "add", "dev", "lk1", "altname", alt):
            pytest.skip("this kernel refuses alternative names (`ip link property add ... altname`, Linux 5.5+)")
    states = {state.name: state for _, state in _parse_both(_dump_buffers(path)) if state is not None}
    assert states["lk1"].alt_names == names and states["lk0"].alt_names == ()


def _deleted(msg: netlink.Message, name: str) -> bool:
    found = netlink.link(msg.body) if msg.kind == netlink.RTM_DELLINK else None
    return found is not None and found.name == name


def test_link_events_parse_as_pyroute2_parses_them(link_lab) -> None:
    """RTM_NEWLINK and RTM_DELLINK events (RTMGRP_LINK), with a bridge's port notifications."""
    path, ip = link_lab
    with open_route_socket(path, groups=1) as sock:
        for args in (
            ("link", "add", "ev0", "type", "veth", "peer", "name", "ev1"),
            ("link", "set", "ev0", "master", "br1"),
            ("link", "set", "ev0", "nomaster"),
            ("link", "del", "ev0"),
        ):
            assert ip(*args), args
        parsed = _parse_both(_read(sock, lambda seen: any(_deleted(m, "ev1") for m in seen)))
    gone = {state.name for msg, state in parsed if msg.kind == netlink.RTM_DELLINK and state is not None}
    assert {"ev0", "ev1"} <= gone
    ports = [netlink.link(msg.body) for msg, _ in parsed if msg.kind == netlink.RTM_NEWLINK]
    assert any(p is not None and p.family == netlink.AF_BRIDGE and p.name == "ev0" for p in ports)


# -- handcrafted messages ---------------------------------------------------------------------------


def _rtattr(kind: int, payload: bytes) -> bytes:
    return struct.pack("=HH", 4 + len(payload), kind) + payload + bytes(-len(payload) % 4)


def _nlmsg(kind: int, seq: int, body: bytes, flags: int = 0) -> bytes:
    body += bytes(-len(body) % 4)
    return struct.pack("=IHHII", 16 + len(body), kind, flags, seq, 0) + body


def _newlink(index: int, *attrs: bytes, flags: int = 0x1, link_type: int = 1) -> bytes:
    return struct.pack("=BxHiII", 0, link_type, index, flags, 0) + b"".join(attrs)


REQUEST = struct.pack("=IHHII", 32, netlink.RTM_GETLINK, 0x301, 7, 0) + bytes(16)
FULL = _newlink(
    5,
    _rtattr(netlink.IFLA_IFNAME, b"eth7\0"),
    _rtattr(netlink.IFLA_MTU, struct.pack("=I", 9000)),
    _rtattr(netlink.IFLA_OPERSTATE, bytes([5])),
    _rtattr(netlink.IFLA_CARRIER, bytes([1])),
    _rtattr(netlink.IFLA_ADDRESS, bytes.fromhex("02AB00000007")),
    _rtattr(netlink.IFLA_MASTER, struct.pack("=I", 3)),
    _rtattr(netlink.IFLA_LINKINFO | 0x8000, _rtattr(netlink.IFLA_INFO_KIND, b"macvlan\0")),
    _rtattr(
        netlink.IFLA_PROP_LIST | 0x8000,
        _rtattr(netlink.IFLA_ALT_IFNAME, b"enp1s0f1\0") + _rtattr(netlink.IFLA_ALT_IFNAME, b"uplink\0"),
    ),
    _rtattr(netlink.IFLA_PARENT_DEV_NAME, b"0000:01:00.1\0"),
    _rtattr(netlink.IFLA_PARENT_DEV_BUS_NAME, b"pci\0"),
)
BARE = _newlink(6, _rtattr(netlink.IFLA_MASTER, struct.pack("=I", 0)), flags=0)


@pytest.mark.parametrize("body", [FULL, BARE], ids=["every-attribute", "no-attribute"])
def test_handcrafted_links_parse_as_pyroute2_parses_them(body: bytes) -> None:
    (msg, state), *_ = _parse_both([_nlmsg(netlink.RTM_NEWLINK, 7, body, flags=0x2)])
    assert msg.kind == netlink.RTM_NEWLINK and msg.flags == 0x2 and msg.seq == 7 and msg.error == 0
    if body is FULL:
        assert state == LinkState(
            "eth7", 5, True, "dormant", True, "02:ab:00:00:00:07", 9000, "macvlan", 1, 3,
            ("enp1s0f1", "uplink"), "0000:01:00.1", "pci",
        )  # fmt: skip
    else:  # no name, state, carrier or MAC; master 0 is none
        assert state == LinkState("if6", 6, False, "unknown", None)


def test_error_done_and_a_truncated_message() -> None:
    data = (
        _nlmsg(netlink.RTM_NEWLINK, 7, FULL, flags=0x2)
        + _nlmsg(netlink.NLMSG_ERROR, 7, struct.pack("=i", -errno.EPERM) + REQUEST)
        + _nlmsg(netlink.NLMSG_ERROR, 8, struct.pack("=i", 0) + REQUEST[:16])  # an acknowledgement
        + _nlmsg(netlink.NLMSG_DONE, 7, struct.pack("=i", 0), flags=0x2)
    )
    whole = _parse_both([data])
    assert [(m.kind, m.seq, m.error) for m, _ in whole] == [(16, 7, 0), (2, 7, errno.EPERM), (2, 8, 0), (3, 7, 0)]
    truncated = _nlmsg(netlink.RTM_NEWLINK, 7, BARE)
    assert netlink.messages(data + truncated[:-4]) == netlink.messages(data)  # runs past the buffer: dropped
    assert netlink.messages(data + struct.pack("=IHHII", 8, 16, 0, 7, 0)) == netlink.messages(data)  # too short
    assert netlink.messages(struct.pack("=IHHII", 18, netlink.NLMSG_ERROR, 0, 7, 0) + b"\0\0") == []  # no error code
    assert netlink.link(BARE[:15]) is None  # no whole struct ifinfomsg
    assert link_state(netlink.Message(netlink.RTM_NEWLINK, 0, 7, BARE[:15])) is None

    error, ack, done = (m for m, _ in whole[1:])
    with pytest.raises(OSError) as refused:
        _dump_done(error, 7)
    assert refused.value.errno == errno.EPERM and "netlink link dump failed" in str(refused.value)
    assert not _dump_done(error, 9)  # another request's error is not this dump's
    assert not _dump_done(ack, 8) and _dump_done(done, 7) and not _dump_done(done, 1)


def test_an_address_of_another_length_is_kept_whole() -> None:
    """InfiniBand's 20-byte and a tunnel's 4-byte addresses: every byte, as sysfs ``address`` and
    ``ip link`` show them.  (pyroute2 read 6 bytes whatever the length: the first 6 of 20, or 4
    and 2 of the next attribute's header.)  An unknown IF_OPER_* value is "unknown"."""
    ib = netlink.link(_newlink(9, _rtattr(netlink.IFLA_ADDRESS, bytes(range(20))), link_type=32))
    tunnel = netlink.link(_newlink(9, _rtattr(netlink.IFLA_ADDRESS, bytes([10, 0, 0, 1]))))
    odd = netlink.link(_newlink(9, _rtattr(netlink.IFLA_OPERSTATE, bytes([9]))))
    assert ib is not None and ib.mac == ":".join(f"{b:02x}" for b in range(20)) and ib.link_type == 32
    assert tunnel is not None and tunnel.mac == "0a:00:00:01"
    assert odd is not None and odd.oper_state == "unknown"


def test_a_name_that_is_not_utf8_is_kept_as_the_os_keeps_it() -> None:
    found = netlink.link(_newlink(9, _rtattr(netlink.IFLA_IFNAME, b"ab\xff\0")))
    assert (
        found is not None
        and found.name == os.fsdecode(b"ab\xff")
        and found.name.encode("utf-8", "surrogateescape") == b"ab\xff"
    )
