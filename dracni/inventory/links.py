"""The node's links: the one owner of what netlink says about them (the shape of dranet's
pkg/inventory DB).  Nothing else in dracni's service speaks netlink or enters the node's
network namespace; health, the slice publisher, the device lookup and ``dracni inventory``
all read the links from here.

- **Entering the namespace.**  ``open_route_socket(netns)`` makes a netlink route socket in the
  namespace at path ``netns``: a short-lived thread of its own calls ``setns(2)`` (which moves
  the calling thread only), creates the socket and ends there.  The socket stays bound to the
  namespace it was made in, so any thread uses it afterwards.  Nothing forks: pyroute2's
  ``NetNS`` forks a child into the namespace for every socket, and a fork beside gRPC's threads
  is unsafe (gRPC skips its fork handlers and says so in its own log format, and a child forked
  while another thread held a lock can hang on it).
- **Reading the messages.**  ``dracni.netlink`` parses them (``messages()`` splits a received
  buffer, ``link()`` reads an RTM_NEWLINK/RTM_DELLINK): stdlib only, the parser the CNI plugin's
  dumps use.  (pyroute2 parsed them before; its imports cost the service ~10 MiB and 200 modules.)
- **The view.**  ``LinkDB`` dumps the links and follows ``RTMGRP_LINK`` events on one thread.
  Subscribers hear after every batch of messages (``changed``: a link was added, changed or
  removed) and every ``POLL_SECONDS`` anyway, on that thread.  Without a running watcher,
  ``snapshot()`` dumps once (``dracni inventory``, tests, a watcher that could not start).
- **Whether a link passes traffic** (``link_problems``, below): the one predicate behind both
  kubelet's device health (Unhealthy) and the ResourceSlice's ``link=down`` taint.

Not on the CNI hot path (``threading``, ``select`` and ``dataclasses`` are too heavy for it).
"""

from __future__ import annotations

import errno
import logging
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .. import netlink
from ..netns import in_netns

log = logging.getLogger(__name__)

#: The watcher wakes at least this often (stop, subscribers' periodic work) and counts as
#: alive while it has woken within ``ALIVE_SECONDS``.
POLL_SECONDS = 0.5
ALIVE_SECONDS = 5.0
#: A one-shot dump that takes longer than this failed.
DUMP_TIMEOUT_SECONDS = 10.0

#: Operational states (IFLA_OPERSTATE lowercased, RFC 2863 ifOperStatus) of a link that cannot
#: pass traffic.  RFC 2863 section 3.1.12: ``down``, ``lowerLayerDown`` and ``notPresent`` are
#: down by definition; ``testing`` means "no operational packets can be passed"; ``dormant``
#: means the interface "is not actually in a condition to pass packets", waiting for an
#: external event (on Linux: 802.1X or a wireless association not done yet, or a link set to
#: ``mode dormant``).  ``up`` passes traffic; ``unknown`` is what drivers that keep no RFC 2863
#: state report (dummy, tun, some virtual NICs) while they work, so the carrier decides then.
#: A dormant or testing NIC fails a pod's traffic just as a down one does: kubelet must see
#: its devices Unhealthy *and* the scheduler must see the taint, so both read this one set.
DOWN_STATES = frozenset({"down", "lowerlayerdown", "dormant", "notpresent", "testing"})

# netlink (linux/netlink.h, linux/rtnetlink.h, linux/if.h); message types and layouts: dracni.netlink
_NETLINK_ROUTE = 0
_RTMGRP_LINK = 1
_IFF_UP = 0x1
_RCVBUF = 1 << 20
_RECV = 1 << 16


def link_problems(oper_state: str, carrier: bool | None, admin_up: bool = True) -> list[str]:
    """Why a link cannot pass traffic; empty when it can.  See ``DOWN_STATES``.

    ``admin_up`` False (``IFF_UP`` clear) is named as a reason, but never changes the verdict
    on a real link: the kernel reports the operational state ``down`` for a link taken down.
    """
    problems = []
    if not admin_up:
        problems.append("administratively down")
    if carrier is False:
        problems.append("no carrier")
    if oper_state in DOWN_STATES:
        problems.append(f"operational state {oper_state}")
    return problems


@dataclass(frozen=True)
class LinkState:
    """What netlink says about one link (RTM_NEWLINK)."""

    name: str
    index: int
    admin_up: bool  # IFF_UP
    oper_state: str  # IFLA_OPERSTATE, lowercased: up, down, lowerlayerdown, unknown, ...
    carrier: bool | None  # IFLA_CARRIER; None when the kernel did not say
    mac: str = ""
    mtu: int = 0
    kind: str = ""  # IFLA_INFO_KIND; "" for a physical NIC (and lo)
    link_type: int = 1  # ARPHRD_*
    master_index: int | None = None
    alt_names: tuple[str, ...] = ()
    parent_dev: str | None = None  # IFLA_PARENT_DEV_NAME (Linux 5.17+), e.g. a PCI address
    parent_bus: str | None = None  # IFLA_PARENT_DEV_BUS_NAME, e.g. "pci"

    @property
    def problems(self) -> list[str]:
        return link_problems(self.oper_state, self.carrier, self.admin_up)


def link_state(msg: netlink.Message) -> LinkState | None:
    """The LinkState of an RTM_NEWLINK/RTM_DELLINK message; None when its body is too short to
    be one.  A link without a name is ``if<index>``; master 0 is no master."""
    link = netlink.link(msg.body)
    if link is None:
        return None
    return LinkState(
        name=link.name or f"if{link.index}",
        index=link.index,
        admin_up=bool(link.flags & _IFF_UP),
        oper_state=link.oper_state or "unknown",
        carrier=link.carrier,
        mac=link.mac or "",
        mtu=link.mtu or 0,
        kind=link.kind or "",
        link_type=link.link_type,
        master_index=link.master or None,
        alt_names=link.alt_names,
        parent_dev=link.parent_dev,
        parent_bus=link.parent_bus,
    )


# -- the socket -----------------------------------------------------------------------------------


def _route_socket(groups: int) -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, _NETLINK_ROUTE)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
        sock.bind((0, groups))
    except BaseException:
        sock.close()
        raise
    return sock


def open_route_socket(netns: str | None = None, *, groups: int = 0) -> socket.socket:
    """A netlink route socket (subscribed to ``groups``) in the namespace at path ``netns``, or
    in our own.  Another namespace is entered by a thread made for it, which ends there; a
    missing path raises FileNotFoundError and is never created."""
    if netns is None:
        return _route_socket(groups)
    return in_netns(netns, lambda: _route_socket(groups))


def _dump_request(seq: int) -> bytes:
    # struct nlmsghdr + struct ifinfomsg (all zero: every family, every link)
    flags = netlink.NLM_F_REQUEST | netlink.NLM_F_DUMP
    return struct.pack("=IHHII", 32, netlink.RTM_GETLINK, flags, seq, 0) + bytes(16)


def _receive(sock: socket.socket, timeout: float) -> list[netlink.Message]:
    """The messages that arrive within ``timeout`` (one read)."""
    readable, _, _ = select.select([sock], [], [], timeout)
    return netlink.messages(sock.recv(_RECV)) if readable else []


def _dump_done(msg: netlink.Message, seq: int) -> bool:
    """Whether ``msg`` ends the dump ``seq``; raises when the kernel refused it."""
    if msg.seq != seq:
        return False
    if msg.kind == netlink.NLMSG_ERROR and msg.error:
        raise OSError(msg.error, f"netlink link dump failed: {os.strerror(msg.error)}")
    return msg.kind == netlink.NLMSG_DONE


def dump_links(netns: str | None = None) -> list[LinkState]:
    """Every link of the namespace, once, sorted by index (no watcher)."""
    with open_route_socket(netns) as sock:
        sock.send(_dump_request(1))
        links: dict[int, LinkState] = {}
        deadline = time.monotonic() + DUMP_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            for msg in _receive(sock, POLL_SECONDS):
                if _dump_done(msg, 1):
                    return sorted(links.values(), key=lambda link: link.index)
                link = link_state(msg) if msg.kind == netlink.RTM_NEWLINK else None
                if link is not None:
                    links[link.index] = link
    raise OSError(errno.ETIMEDOUT, "netlink link dump did not finish")


# -- the view -------------------------------------------------------------------------------------


class LinkDB:
    """The links of the namespace at ``netns`` (None: our own), kept current on one thread.

    ``start()`` opens the socket and reads the first dump before it returns (so readers see
    the links at once, and a namespace that cannot be entered fails the start); the thread
    then follows events until ``stop()``.  ``subscribe(callback)``: ``callback(changed)`` runs
    on that thread after every batch of messages and every ``POLL_SECONDS``; an exception in
    it is logged and does not stop the watcher.
    """

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        self._lock = threading.Lock()
        self._links: dict[int, LinkState] = {}
        self._subscribers: list[Callable[[bool], None]] = []
        self._alive_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self._seq = 0

    @classmethod
    def shared_or_own(cls, links: LinkDB | None, netns: str | None) -> tuple[LinkDB, bool]:
        """(database, owned): the shared ``links`` (its owner, the service, starts and stops it),
        else a database of our own for ``netns``, which the caller starts and stops (owned)."""
        return (links, False) if links is not None else (cls(netns), True)

    def subscribe(self, callback: Callable[[bool], None]) -> None:
        with self._lock:
            self._subscribers.append(callback)

    def unsubscribe(self, callback: Callable[[bool], None]) -> None:
        with self._lock:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def alive(self) -> bool:
        """Whether the watcher runs and has read netlink recently (its view is current)."""
        return self.running() and time.monotonic() - self._alive_at < ALIVE_SECONDS

    def by_name(self) -> dict[str, LinkState]:
        """The watcher's view: interface name -> state (empty before ``start()``)."""
        with self._lock:
            return {link.name: link for link in self._links.values()}

    def snapshot(self) -> list[LinkState]:
        """Every link, sorted by index: the watcher's view while it runs, else a dump."""
        if not self.running():
            return dump_links(self.netns)
        with self._lock:
            return sorted(self._links.values(), key=lambda link: link.index)

    def start(self) -> None:
        if self.running():
            return
        self._stop.clear()
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(ready, failure), name="netlink-links", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]

    def stop(self, timeout: float = 1.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the thread ---------------------------------------------------------------------------
    def _run(self, ready: threading.Event, failure: list[BaseException]) -> None:
        try:
            self._sock = open_route_socket(self.netns, groups=_RTMGRP_LINK)
            self._dump()
            self._alive_at = time.monotonic()
        except BaseException as exc:  # handed to start()'s caller
            failure.append(exc)
            ready.set()
            return
        ready.set()
        try:
            while not self._stop.is_set():
                try:
                    changed = self._apply(_receive(self._sock, POLL_SECONDS))
                except OSError as exc:
                    if exc.errno != errno.ENOBUFS:
                        raise
                    log.warning("netlink link events overflowed; reading the links again")
                    changed = self._dump()
                self._alive_at = time.monotonic()
                self._notify(changed)
        except Exception as exc:
            log.error("netlink link watcher stopped: %s; kubelet will see the devices' health as Unknown", exc)
        finally:
            sock, self._sock = self._sock, None
            if sock is not None:
                sock.close()

    def _notify(self, changed: bool) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(changed)
            except Exception:  # one subscriber's problem must not stop the others or the watcher
                log.exception("link change subscriber failed")

    def _dump(self) -> bool:
        """Ask for every link and read until the dump is done (events read meanwhile count
        too); whether the view changed."""
        assert self._sock is not None
        self._seq += 1
        seq = self._seq
        self._sock.send(_dump_request(seq))
        fresh: dict[int, LinkState] = {}
        done = False
        while not done and not self._stop.is_set():
            for msg in _receive(self._sock, POLL_SECONDS):
                if _dump_done(msg, seq):
                    done = True
                elif msg.seq == seq:
                    link = link_state(msg) if msg.kind == netlink.RTM_NEWLINK else None
                    if link is not None:
                        fresh[link.index] = link
                else:  # an event during the dump: the dump's answer may predate it
                    self._apply([msg], fresh)
        with self._lock:
            changed = fresh != self._links
            self._links = fresh
        return changed

    def _apply(self, messages: list[netlink.Message], also: dict[int, LinkState] | None = None) -> bool:
        """Apply link events to the view (and to ``also``); whether the view changed."""
        changed = False
        for msg in messages:
            kind = msg.kind
            link = link_state(msg) if kind in (netlink.RTM_NEWLINK, netlink.RTM_DELLINK) else None
            if link is None:
                continue
            for view in (self._links, also):
                if view is None:
                    continue
                with self._lock:
                    if kind == netlink.RTM_DELLINK:
                        found = view.pop(link.index, None) is not None
                    else:
                        found = view.get(link.index) != link
                        view[link.index] = link
                changed = changed or (found and view is self._links)
        return changed
