"""What the node's kernel knows about its links and a link's segment: the links themselves, a
link's addresses, neighbours and FDB entries.

A minimal rtnetlink reader, hand-written on ``_socket`` and ``struct`` because the CNI plugin's
ADD reads it (the identity check of ``dracni.cni.identity``): pyroute2 costs tens of
milliseconds of imports on every pod start, and the hot path imports only C modules (see
``tests/unit/test_hot_path_imports.py``).  It also parses the link messages of the service's
link database (``inventory/links.py``, which owns that socket: ``messages()`` splits what it
receives, ``link()`` reads an RTM_NEWLINK/RTM_DELLINK), so the service does without pyroute2
too.  The message layouts follow the kernel's uapi headers:

- ``linux/netlink.h``: ``struct nlmsghdr`` (len u32, type u16, flags u16, seq u32, pid u32),
  ``NLM_F_REQUEST``/``NLM_F_DUMP``, ``NLMSG_DONE``/``NLMSG_ERROR`` (``struct nlmsgerr``: a
  negative errno, 0 for an acknowledgement, then the request's header), 4-byte alignment;
- ``linux/rtnetlink.h``: ``struct rtattr`` (len u16, type u16), ``struct ifinfomsg`` (family u8,
  pad u8, type u16, index s32, flags u32, change u32), ``RTM_*LINK``/``RTM_GETADDR``/``RTM_GETNEIGH``;
- ``linux/if_link.h``: the ``IFLA_*`` link attributes, ``IFLA_INFO_*`` nested in IFLA_LINKINFO;
  ``linux/if.h``: the ``IF_OPER_*`` operational states (RFC 2863);
- ``linux/if_addr.h``: ``struct ifaddrmsg`` (family, prefixlen, flags, scope u8; index u32),
  ``IFA_ADDRESS``/``IFA_LOCAL``;
- ``linux/neighbour.h``: ``struct ndmsg`` (family u8, pad u8, pad u16, ifindex s32, state u16,
  flags u8, type u8), ``NDA_DST``/``NDA_LLADDR``/``NDA_MASTER``, the ``NUD_*`` states.

Every dump function filters by interface index and answers an empty list when the kernel
cannot be asked (no netlink, EPERM, an interrupted dump): a reader for checks that add
refusals, never a new way for ADD to fail.  Records are ``__slots__`` classes
(``typing.NamedTuple`` would import ``typing`` on the hot path).
"""

from __future__ import annotations

import _socket
import struct

AF_NETLINK = 16
NETLINK_ROUTE = 0
AF_BRIDGE = 7  # linux/socket.h PF_BRIDGE: a neighbour dump of this family lists bridge FDB entries
NLM_F_REQUEST = 0x01
NLM_F_DUMP = 0x300  # NLM_F_ROOT | NLM_F_MATCH
NLM_F_DUMP_INTR = 0x10  # the table changed during the dump: its parts may not agree
NLMSG_ERROR = 2
NLMSG_DONE = 3
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
RTM_NEWADDR, RTM_GETADDR = 20, 22
RTM_NEWNEIGH, RTM_GETNEIGH = 28, 30
IFA_ADDRESS, IFA_LOCAL = 1, 2
NDA_DST, NDA_LLADDR, NDA_MASTER = 1, 2, 9
NUD_INCOMPLETE, NUD_FAILED, NUD_NOARP = 0x01, 0x20, 0x40
# linux/if_link.h, enum IFLA_* (IFLA_TARGET_NETNSID aliases IFLA_IF_NETNSID, 46: the count goes
# on from 47); pyroute2's ifinfmsg.nla_map has the same numbers.
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU = 1, 3, 4
IFLA_MASTER = 10
IFLA_OPERSTATE = 16  # u8, enum IF_OPER_* (linux/if.h)
IFLA_LINKINFO = 18  # nested: IFLA_INFO_*
IFLA_CARRIER = 33  # u8
IFLA_PROP_LIST, IFLA_ALT_IFNAME = 52, 53  # IFLA_PROP_LIST nests one IFLA_ALT_IFNAME per altname
IFLA_PARENT_DEV_NAME, IFLA_PARENT_DEV_BUS_NAME = 56, 57  # Linux 5.17+
IFLA_INFO_KIND = 1  # linux/if_link.h enum IFLA_INFO_*: a string, the link's kind ("veth", "bridge")
#: linux/if.h enum IF_OPER_* (0..6), lowercased: what pyroute2's ifinfmsg ``states`` gives.
OPER_STATES = ("unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up")
NLMSGHDR = struct.Struct("=IHHII")
NLMSGERR = struct.Struct("=i")  # struct nlmsgerr's error, a negative errno (0: an acknowledgement)
IFINFOMSG = struct.Struct("=BxHiII")  # family, pad, type (ARPHRD_*), index, flags (IFF_*), change
U32 = struct.Struct("=I")
IFADDRMSG = struct.Struct("=BBBBI")
NDMSG = struct.Struct("=BBHiHBB")
RTATTR = struct.Struct("=HH")
TIMEOUT = 2.0  # seconds: a dump of one node's tables answers in well under that


class _Record:
    """Equality, ordering-free hashing and a readable repr from ``__slots__``."""

    __slots__: tuple[str, ...] = ()

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"


class Address(_Record):
    """One of a link's addresses (``ip``: its text form, without prefix)."""

    __slots__ = ("ip", "prefixlen", "ifindex")

    def __init__(self, ip: str, prefixlen: int, ifindex: int) -> None:
        self.ip, self.prefixlen, self.ifindex = ip, prefixlen, ifindex


class Neighbour(_Record):
    """A neighbour table entry (IPv4 ARP or IPv6 ND) with its link-layer address."""

    __slots__ = ("ip", "mac", "ifindex", "state")

    def __init__(self, ip: str, mac: str, ifindex: int, state: int) -> None:
        self.ip, self.mac, self.ifindex, self.state = ip, mac, ifindex, state


class FdbEntry(_Record):
    """A forwarding database entry: ``mac`` reached through port ``ifindex`` (of bridge ``master``,
    0 for a device's own entries, as ``bridge fdb show dev X`` lists its unicast/multicast list)."""

    __slots__ = ("mac", "ifindex", "master")

    def __init__(self, mac: str, ifindex: int, master: int) -> None:
        self.mac, self.ifindex, self.master = mac, ifindex, master


class Message(_Record):
    """One netlink message of a received buffer: its header's ``kind`` (type), ``flags`` and
    ``seq``, its ``body`` (what follows the header) and, for NLMSG_ERROR, ``error``: the errno the
    kernel answered (positive; 0 for an acknowledgement).  0 for every other type."""

    __slots__ = ("kind", "flags", "seq", "body", "error")

    def __init__(self, kind: int, flags: int, seq: int, body: bytes, error: int = 0) -> None:
        self.kind, self.flags, self.seq, self.body, self.error = kind, flags, seq, body, error


class Link(_Record):
    """What an RTM_NEWLINK/RTM_DELLINK message says about a link: ``struct ifinfomsg``'s family,
    index, ``link_type`` (ARPHRD_*) and ``flags`` (IFF_*), then its attributes, None when absent:
    ``name`` (IFLA_IFNAME), ``oper_state`` (IFLA_OPERSTATE, one of ``OPER_STATES``; "unknown" for
    a state this table lacks), ``carrier`` (IFLA_CARRIER), ``mac`` (IFLA_ADDRESS, lowercase hex
    pairs joined by colons, every byte of it), ``mtu``, ``kind`` (IFLA_LINKINFO's IFLA_INFO_KIND),
    ``master`` (IFLA_MASTER, as the kernel sends it: 0 is no master), ``alt_names`` (every
    IFLA_ALT_IFNAME of IFLA_PROP_LIST, in order; () when none), ``parent_dev``/``parent_bus``
    (IFLA_PARENT_DEV_NAME/_BUS_NAME).  Strings lose their NUL; bytes that are not UTF-8 are
    kept as ``os.fsdecode`` keeps them (surrogate escapes), as ``socket.if_nameindex`` does."""

    __slots__ = (
        "family", "index", "link_type", "flags", "name", "oper_state", "carrier", "mac", "mtu",
        "kind", "master", "alt_names", "parent_dev", "parent_bus",
    )  # fmt: skip

    def __init__(
        self,
        family: int,
        index: int,
        link_type: int,
        flags: int,
        name: str | None = None,
        oper_state: str | None = None,
        carrier: bool | None = None,
        mac: str | None = None,
        mtu: int | None = None,
        kind: str | None = None,
        master: int | None = None,
        alt_names: tuple[str, ...] = (),
        parent_dev: str | None = None,
        parent_bus: str | None = None,
    ) -> None:
        self.family, self.index, self.link_type, self.flags = family, index, link_type, flags
        self.name, self.oper_state, self.carrier, self.mac = name, oper_state, carrier, mac
        self.mtu, self.kind, self.master, self.alt_names = mtu, kind, master, alt_names
        self.parent_dev, self.parent_bus = parent_dev, parent_bus


def _mac(raw: bytes) -> str:
    """Lowercase hex pairs joined by colons (``dracni.macaddr``'s canonical form; the base
    layer imports no other dracni module)."""
    return ":".join(f"{b:02x}" for b in raw)


def link_index(name: str) -> int | None:
    """The index of link ``name`` in this network namespace, None when there is none."""
    try:
        return int(_socket.if_nametoindex(name))
    except (OSError, ValueError, UnicodeError):
        return None


def addresses(ifindex: int) -> list[Address]:
    """The IPv4 and IPv6 addresses of link ``ifindex`` (IFA_LOCAL, else IFA_ADDRESS: they differ
    only on point-to-point links, where IFA_ADDRESS is the peer's)."""
    out = []
    for body in _dump(RTM_GETADDR, IFADDRMSG.pack(_socket.AF_UNSPEC, 0, 0, 0, 0), RTM_NEWADDR):
        if len(body) < IFADDRMSG.size:
            continue
        family, prefixlen, _, _, index = IFADDRMSG.unpack_from(body)
        attrs = _attributes(body, IFADDRMSG.size)
        raw = attrs.get(IFA_LOCAL) or attrs.get(IFA_ADDRESS)
        ip = _ip_text(family, raw)
        if index == ifindex and ip is not None:
            out.append(Address(ip, prefixlen, index))
    return out


def neighbours(ifindex: int) -> list[Neighbour]:
    """Link ``ifindex``'s IPv4 and IPv6 neighbours that have a link-layer address (an entry still
    resolving or failed has none worth trusting; a NOARP entry may have none at all)."""
    out = []
    for ndm, attrs in _neighbour_dump(_socket.AF_UNSPEC):
        family, _, _, index, state, _, _ = ndm
        if index != ifindex or state & (NUD_INCOMPLETE | NUD_FAILED):
            continue
        ip = _ip_text(family, attrs.get(NDA_DST))
        lladdr = attrs.get(NDA_LLADDR)
        mac = _mac(lladdr) if lladdr is not None and len(lladdr) == 6 else None
        if ip is None or mac is None or (state & NUD_NOARP and mac == "00:00:00:00:00:00"):
            continue
        out.append(Neighbour(ip, mac, index, state))
    return out


def fdb(ifindex: int) -> list[FdbEntry]:
    """The FDB entries of link ``ifindex``: those learned or set on it as a bridge port, its own
    (``self``) entries, and, for a bridge, those of every one of its ports (NDA_MASTER)."""
    out = []
    for ndm, attrs in _neighbour_dump(AF_BRIDGE):
        index = ndm[3]
        raw_master = attrs.get(NDA_MASTER)
        master = struct.unpack("=I", raw_master[:4])[0] if raw_master and len(raw_master) >= 4 else 0
        lladdr = attrs.get(NDA_LLADDR)
        if ifindex not in (index, master) or lladdr is None or len(lladdr) != 6:
            continue
        out.append(FdbEntry(_mac(lladdr), index, master))
    return out


def messages(data: bytes) -> list[Message]:
    """The netlink messages of one received buffer (a dump's part or events), in order.  A
    message that runs past the buffer or is too short for its header ends the list (the kernel
    sends none; a reader of a too-small buffer would see one): what precedes it is whole."""
    out = []
    pos = 0
    while pos + NLMSGHDR.size <= len(data):
        length, kind, flags, seq, _ = NLMSGHDR.unpack_from(data, pos)
        if length < NLMSGHDR.size or pos + length > len(data):
            break
        body = data[pos + NLMSGHDR.size : pos + length]
        error = 0
        if kind == NLMSG_ERROR:
            if len(body) < NLMSGERR.size:
                break
            error = -NLMSGERR.unpack_from(body)[0]
        out.append(Message(kind, flags, seq, body, error))
        pos += _align(length)
    return out


def link(body: bytes) -> Link | None:
    """The link an RTM_NEWLINK/RTM_DELLINK message's body describes; None when the body is too
    short for its ``struct ifinfomsg``."""
    if len(body) < IFINFOMSG.size:
        return None
    family, link_type, index, flags, _ = IFINFOMSG.unpack_from(body)
    attrs = _attributes(body, IFINFOMSG.size)
    state = _u8(attrs.get(IFLA_OPERSTATE))
    carrier = _u8(attrs.get(IFLA_CARRIER))
    address = attrs.get(IFLA_ADDRESS)
    info = attrs.get(IFLA_LINKINFO)
    props = attrs.get(IFLA_PROP_LIST)
    alt_names = () if props is None else tuple(_text(v) for k, v in _attribute_items(props, 0) if k == IFLA_ALT_IFNAME)
    return Link(
        family,
        index,
        link_type,
        flags,
        name=_string(attrs.get(IFLA_IFNAME)),
        oper_state=None if state is None else (OPER_STATES[state] if state < len(OPER_STATES) else "unknown"),
        carrier=None if carrier is None else bool(carrier),
        mac=None if address is None else _mac(address),
        mtu=_u32(attrs.get(IFLA_MTU)),
        kind=None if info is None else _string(_attributes(info, 0).get(IFLA_INFO_KIND)),
        master=_u32(attrs.get(IFLA_MASTER)),
        alt_names=alt_names,
        parent_dev=_string(attrs.get(IFLA_PARENT_DEV_NAME)),
        parent_bus=_string(attrs.get(IFLA_PARENT_DEV_BUS_NAME)),
    )


def _text(raw: bytes) -> str:
    """A NUL-terminated string attribute's text (up to its first NUL)."""
    return raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _string(raw: bytes | None) -> str | None:
    return None if raw is None else _text(raw)


def _u8(raw: bytes | None) -> int | None:
    return raw[0] if raw else None


def _u32(raw: bytes | None) -> int | None:
    return int(U32.unpack_from(raw)[0]) if raw is not None and len(raw) >= U32.size else None


def _neighbour_dump(family: int) -> list[tuple[tuple[int, ...], dict[int, bytes]]]:
    out = []
    for body in _dump(RTM_GETNEIGH, NDMSG.pack(family, 0, 0, 0, 0, 0, 0), RTM_NEWNEIGH):
        if len(body) >= NDMSG.size:
            out.append((NDMSG.unpack_from(body), _attributes(body, NDMSG.size)))
    return out


def _ip_text(family: int, raw: bytes | None) -> str | None:
    want = {_socket.AF_INET: 4, _socket.AF_INET6: 16}.get(family)
    if raw is None or want is None or len(raw) != want:
        return None
    return str(_socket.inet_ntop(family, raw))


def _align(n: int) -> int:
    return (n + 3) & ~3


def _attributes(body: bytes, start: int) -> dict[int, bytes]:
    """The rtattrs from ``start`` (after a message's fixed header, or a nested attribute's
    payload from 0): type -> payload of the first of that type."""
    attrs: dict[int, bytes] = {}
    for kind, value in _attribute_items(body, start):
        attrs.setdefault(kind, value)
    return attrs


def _attribute_items(body: bytes, start: int) -> list[tuple[int, bytes]]:
    """Every rtattr from ``start``, in order: (type, payload), NLA_F_NESTED and
    NLA_F_NET_BYTEORDER cleared; a malformed one ends the list."""
    items = []
    pos = start
    while pos + RTATTR.size <= len(body):
        length, kind = RTATTR.unpack_from(body, pos)
        if length < RTATTR.size or pos + length > len(body):
            break
        items.append((kind & 0x3FFF, body[pos + RTATTR.size : pos + length]))
        pos += _align(length)
    return items


def _dump(request: int, header: bytes, answer: int) -> list[bytes]:
    """The bodies of the ``answer`` messages of one NLM_F_DUMP request; [] on any failure."""
    try:
        sock = _socket.socket(AF_NETLINK, _socket.SOCK_RAW | _socket.SOCK_CLOEXEC, NETLINK_ROUTE)
    except (OSError, AttributeError):
        return []
    try:
        sock.settimeout(TIMEOUT)
        sock.bind((0, 0))
        seq = 1
        sock.sendto(
            NLMSGHDR.pack(NLMSGHDR.size + len(header), request, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + header, (0, 0)
        )
        return _read_dump(sock, seq, answer)
    except OSError:
        return []
    finally:
        sock.close()


def _read_dump(sock: _socket.socket, seq: int, answer: int) -> list[bytes]:
    bodies: list[bytes] = []
    while True:
        data = sock.recv(1 << 16)
        if not data:
            return []
        pos = 0
        while pos + NLMSGHDR.size <= len(data):
            length, kind, flags, msg_seq, _ = NLMSGHDR.unpack_from(data, pos)
            if length < NLMSGHDR.size or pos + length > len(data) or flags & NLM_F_DUMP_INTR:
                return []
            if msg_seq == seq:
                if kind == NLMSG_DONE:
                    return bodies
                if kind == NLMSG_ERROR:
                    return []  # e.g. EPERM, or a dump interrupted by a change: nothing to trust
                if kind == answer:
                    bodies.append(data[pos + NLMSGHDR.size : pos + length])
            pos += _align(length)
