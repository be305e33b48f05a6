"""Device health from link state, for kubelet's DRAResourceHealth stream (KEP-4680).

Kubelet shows a DRA device's health in the container statuses of the pods using it
(``allocatedResourcesStatus``: Healthy, Unhealthy, Unknown).  dracni's devices are NICs, so a
device's health is its link's:

- **Healthy**: the interface is in the node's namespace, administratively up, has carrier,
  and its operational state is ``up`` (or ``unknown``: drivers that keep no RFC 2863 state,
  e.g. dummy or tun, report that while they work; carrier and ``IFF_UP`` decide then);
- **Unhealthy**: it is there but down: taken down, no carrier (cable, peer, switch port), or
  an operational state of ``down``, ``lowerlayerdown``, ``dormant``, ``notpresent``,
  ``testing``;
- **Unknown**: it is not in the node's namespace.  Nothing can be said about it there: the
  link may be gone, or a pod may hold it (``host-device`` moves the whole NIC into the pod's
  namespace), and kubelet's Unknown means exactly "cannot be determined"
  (dra-health/v1/api.proto ``UNKNOWN``; kubelet also turns a device Unknown when its plugin
  stops vouching for it, healthinfo.go ``getHealthInfo``).

Every device of a NIC carries the NIC's health: a shared NIC is one device, a NIC offered as
slots is several, and all of them go down with the link.  A device that was offered once and
no longer is stays in the report (Unknown) while this process runs, so kubelet does not keep
an old Healthy for it until its timeout.

Kubelet keeps a device's health for ``health_check_timeout_seconds`` (30 s by default) from
when it *received* it (healthinfo.go ``updateHealthInfo`` stamps ``LastUpdated = now``), so
the stream re-sends the full list every ``RESEND_SECONDS``, but only while the link monitor
is alive: a wedged monitor lets kubelet decay the devices to Unknown instead of vouching for
a stale view (the same rule as upstream's kubeletplugin helper, health.go).

Link state comes from a netlink socket (``RTMGRP_LINK`` events plus a dump) opened in the
node's namespace by ``LinkMonitor``.  It enters that namespace with ``setns(2)`` on its own
thread and returns at once: the socket stays bound to the namespace it was made in, and
nothing forks (pyroute2's ``NetNS`` forks, and a fork next to gRPC's threads is not safe).
pyroute2 is used only to parse the messages.

Not on the CNI hot path: the service imports this.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .slices import Offer

log = logging.getLogger(__name__)

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
UNKNOWN = "Unknown"

#: The full list goes out again this often, well inside kubelet's lease.
RESEND_SECONDS = 10.0
#: ``health_check_timeout_seconds`` sent with every device: kubelet's default, said explicitly.
HEALTH_TIMEOUT_SECONDS = 30
#: The monitor wakes at least this often (stop, a changed device list) and counts as alive
#: while it has woken within ``ALIVE_SECONDS``.
POLL_SECONDS = 0.5
ALIVE_SECONDS = 5.0
#: kubelet truncates longer messages (dra-health api.proto, DeviceHealth.message).
MESSAGE_MAX = 1024

# netlink (linux/netlink.h, linux/rtnetlink.h)
_NETLINK_ROUTE = 0
_RTMGRP_LINK = 1
_RTM_NEWLINK = 16
_RTM_DELLINK = 17
_RTM_GETLINK = 18
_NLMSG_ERROR = 2
_NLM_F_REQUEST = 0x1
_NLM_F_DUMP = 0x300
_IFF_UP = 0x1
_CLONE_NEWNET = 0x40000000
_RCVBUF = 1 << 20

#: Operational states (IFLA_OPERSTATE, RFC 2863) of a link that is not passing traffic.
DOWN_STATES = frozenset({"down", "lowerlayerdown", "dormant", "notpresent", "testing"})


@dataclass(frozen=True)
class LinkState:
    """What netlink says about one link of the node's namespace."""

    name: str
    index: int
    admin_up: bool  # IFF_UP
    oper_state: str  # IFLA_OPERSTATE, lowercased: up, down, lowerlayerdown, unknown, ...
    carrier: bool | None  # IFLA_CARRIER; None when the kernel did not say


@dataclass(frozen=True)
class DeviceHealth:
    """One device's health as the stream reports it."""

    pool: str
    device: str
    health: str  # HEALTHY, UNHEALTHY or UNKNOWN
    message: str


def link_health(name: str, link: LinkState | None) -> tuple[str, str]:
    """(health, message) of the interface ``name``, given its link (None: not in the namespace)."""
    if link is None:
        return UNKNOWN, f"interface {name} is not in the node's network namespace"
    problems = []
    if not link.admin_up:
        problems.append("administratively down")
    if link.carrier is False:
        problems.append("no carrier")
    if link.oper_state in DOWN_STATES:
        problems.append(f"operational state {link.oper_state}")
    if problems:
        return UNHEALTHY, f"interface {link.name}: " + ", ".join(problems)
    return HEALTHY, f"interface {link.name} is up"


def device_health(
    pool: str,
    offered: Mapping[str, Offer],
    links: Mapping[str, LinkState],
    formerly: Mapping[str, str] | None = None,
) -> list[DeviceHealth]:
    """Every device's health, sorted by name: ``offered`` (device name -> the NIC behind it)
    by its NIC's link in ``links`` (interface name -> state), and each device of ``formerly``
    (device name -> interface) no longer offered as Unknown."""
    out = []
    for name, offer in offered.items():
        health, message = link_health(offer.nic.name, links.get(offer.nic.name))
        out.append(DeviceHealth(pool, name, health, message[:MESSAGE_MAX]))
    for name, if_name in (formerly or {}).items():
        if name not in offered:
            out.append(DeviceHealth(pool, name, UNKNOWN, f"device no longer offered (interface {if_name})"))
    return sorted(out, key=lambda d: d.device)


# -- netlink ----------------------------------------------------------------------------------


def _libc_setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"setns: {os.strerror(code)}")


def open_link_socket(netns: str | None = None) -> socket.socket:
    """A netlink route socket subscribed to link events, in ``netns`` (a path) or our own.

    For another namespace the *calling thread* enters it, makes the socket and comes back;
    if it cannot come back, it raises and the thread must not run anything else.
    """
    if netns is None:
        return _link_socket()
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _libc_setns(target)
        finally:
            os.close(target)
        try:
            return _link_socket()
        finally:
            _libc_setns(own)
    finally:
        os.close(own)


def _link_socket() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, _NETLINK_ROUTE)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
        sock.bind((0, _RTMGRP_LINK))
    except BaseException:
        sock.close()
        raise
    return sock


def _dump_request(seq: int) -> bytes:
    # struct nlmsghdr + struct ifinfomsg (all zero: every family, every link)
    return struct.pack("=IHHII", 32, _RTM_GETLINK, _NLM_F_REQUEST | _NLM_F_DUMP, seq, 0) + bytes(16)


def _link_state(msg: Any) -> LinkState:
    carrier = msg.get_attr("IFLA_CARRIER")
    index = int(msg["index"])
    return LinkState(
        name=msg.get_attr("IFLA_IFNAME") or f"if{index}",
        index=index,
        admin_up=bool(msg["flags"] & _IFF_UP),
        oper_state=str(msg.get_attr("IFLA_OPERSTATE") or "unknown").lower(),
        carrier=None if carrier is None else bool(carrier),
    )


class LinkMonitor:
    """The node namespace's links, kept current from netlink events on a thread of its own.

    ``start()`` opens the socket and reads the first dump before it returns (so callers see
    the links at once, and a namespace that cannot be entered fails the start); the thread
    then follows events until ``stop()``.  ``on_change`` runs on that thread after every
    batch of messages, and every ``POLL_SECONDS`` anyway.
    """

    def __init__(self, netns: str | None = None, on_change: Callable[[], None] | None = None) -> None:
        self.netns = netns
        self.on_change = on_change
        self._lock = threading.Lock()
        self._links: dict[int, LinkState] = {}
        self._alive_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self._seq = 0
        self._parser: Any = None

    def links(self) -> dict[str, LinkState]:
        """Interface name -> state."""
        with self._lock:
            return {link.name: link for link in self._links.values()}

    def alive(self) -> bool:
        """Whether the thread runs and has read netlink recently (its view is current)."""
        thread = self._thread
        return thread is not None and thread.is_alive() and time.monotonic() - self._alive_at < ALIVE_SECONDS

    def start(self) -> None:
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(ready, failure), name="link-health", daemon=True)
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
            self._open()
        except BaseException as exc:  # handed to start()'s caller
            failure.append(exc)
            ready.set()
            return
        ready.set()
        try:
            while not self._stop.is_set():
                try:
                    self._read(POLL_SECONDS)
                except OSError as exc:
                    if exc.errno != errno.ENOBUFS:
                        raise
                    log.warning("netlink link events overflowed; reading the links again")
                    self._dump()
                self._alive_at = time.monotonic()
                if self.on_change is not None:
                    self.on_change()
        except Exception as exc:
            log.error("link health monitor stopped: %s; kubelet will see the devices' health as Unknown", exc)
        finally:
            sock, self._sock = self._sock, None
            if sock is not None:
                sock.close()

    def _open(self) -> None:
        self._sock = open_link_socket(self.netns)
        self._dump()
        self._alive_at = time.monotonic()

    def _dump(self) -> None:
        """Ask for every link and read until the dump is done (events read meanwhile count too)."""
        assert self._sock is not None
        self._seq += 1
        seq = self._seq
        self._sock.send(_dump_request(seq))
        fresh: dict[int, LinkState] = {}
        while not self._stop.is_set():
            if self._read(POLL_SECONDS, dump=(seq, fresh)):
                break
        with self._lock:
            self._links = fresh

    def _marshal(self) -> Any:
        if self._parser is None:
            import pyroute2  # noqa: F401  the package first: marshal alone is a circular import
            from pyroute2.netlink.rtnl.marshal import MarshalRtnl

            self._parser = MarshalRtnl()
        return self._parser

    def _read(self, timeout: float, dump: tuple[int, dict[int, LinkState]] | None = None) -> bool:
        """Read what is there within ``timeout``; True once the dump ``dump`` is complete."""
        assert self._sock is not None
        readable, _, _ = select.select([self._sock], [], [], timeout)
        if not readable:
            return False
        data = self._sock.recv(1 << 16)
        done = False
        for msg in self._marshal().parse(data):
            kind = msg["header"]["type"]
            seq = msg["header"]["sequence_number"]
            if dump is not None and seq == dump[0]:
                if kind == 3:  # NLMSG_DONE
                    done = True
                elif kind == _NLMSG_ERROR and msg["header"].get("error"):
                    raise OSError(f"netlink link dump failed: {msg['header']['error']}")
                elif kind == _RTM_NEWLINK:
                    link = _link_state(msg)
                    dump[1][link.index] = link
                continue
            if kind not in (_RTM_NEWLINK, _RTM_DELLINK):
                continue
            link = _link_state(msg)
            with self._lock:
                if kind == _RTM_DELLINK:
                    self._links.pop(link.index, None)
                else:
                    self._links[link.index] = link
            if dump is not None:  # an event during a dump: the dump's answer may predate it
                if kind == _RTM_DELLINK:
                    dump[1].pop(link.index, None)
                else:
                    dump[1][link.index] = link
        return done


class DiscoveredOffers:
    """Device name -> Offer for a service that publishes no slices: the node's eligible NICs,
    discovered again only when the set of link names the monitor sees changes (a discovery
    dumps netlink and reads sysfs; the monitor asks twice a second)."""

    def __init__(
        self,
        link_names: Callable[[], frozenset[str]],
        discover: Callable[[], Mapping[str, Offer]],
    ) -> None:
        self.link_names = link_names
        self.discover = discover
        self._names: frozenset[str] | None = None
        self._offers: Mapping[str, Offer] = {}

    def __call__(self) -> Mapping[str, Offer]:
        names = self.link_names()
        if names != self._names:
            self._offers = self.discover()
            self._names = names
        return self._offers


# -- the report the stream sends --------------------------------------------------------------


@dataclass(frozen=True)
class HealthReport:
    """The full list, with the time the link view behind it was current (Unix seconds)."""

    devices: tuple[DeviceHealth, ...]
    checked_at: int
    timeout_seconds: int = HEALTH_TIMEOUT_SECONDS


class DeviceHealthReporter:
    """Device health for the kubelet stream: the offered devices (``offered``, device name ->
    Offer, e.g. the slice publisher's ``offered``) by the links ``LinkMonitor`` sees.  The
    monitor's thread recomputes them after every netlink batch and every ``POLL_SECONDS``.

    ``watch()`` yields the full list first, again whenever a device's health changes, and
    again every ``resend_seconds`` while the monitor is alive; it ends at ``close()``.
    """

    def __init__(
        self,
        *,
        pool: str,
        offered: Callable[[], Mapping[str, Offer]],
        netns: str | None = None,
        ready: Callable[[], bool] | None = None,
        resend_seconds: float = RESEND_SECONDS,
    ) -> None:
        self.pool = pool
        self.resend_seconds = resend_seconds
        self.offered = offered
        #: Streams send nothing before this is true (e.g. the slices are published), so their
        #: first message lists every device the node offers.
        self.ready = ready
        self.monitor = LinkMonitor(netns, on_change=self.refresh)
        self._cond = threading.Condition()
        self._version = 0
        self._devices: tuple[DeviceHealth, ...] = ()
        self._formerly: dict[str, str] = {}  # device name -> interface, every device offered so far
        self._primed = False
        self._closed = False
        #: told of each device that turns Unhealthy (the service's Events), outside the lock
        self.on_unhealthy: Callable[[DeviceHealth], None] | None = None

    def start(self) -> None:
        """Open the netlink socket in the node's namespace (before any gRPC thread runs)."""
        self.monitor.start()
        self.refresh()

    def stop(self) -> None:
        self.close()
        self.monitor.stop()

    def close(self) -> None:
        """End every ``watch()``: their streams finish cleanly."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wake(self) -> None:
        """Make the watchers look again (a stream's client went away)."""
        with self._cond:
            self._cond.notify_all()

    def refresh(self) -> None:
        """Recompute the devices' health; watchers hear of it when anything changed."""
        if self.ready is not None and not self.ready():
            return
        try:
            offered = dict(self.offered())
        except Exception as exc:  # the device list is someone else's: keep the last one
            log.warning("device list unavailable for health: %s", exc)
            return
        links = self.monitor.links()
        turned_unhealthy: list[DeviceHealth] = []
        with self._cond:
            for name, offer in offered.items():
                self._formerly[name] = offer.nic.name
            devices = tuple(device_health(self.pool, offered, links, self._formerly))
            if devices != self._devices or not self._primed:
                # At the first refresh every device is new: one already Unhealthy when the
                # service starts is reported too (its pods may have failed meanwhile).
                changed = [d for d in devices if d not in self._devices]
                for d in changed:
                    if self._primed or d.health != HEALTHY:
                        log.info("device %s is %s: %s", d.device, d.health, d.message)
                    if d.health == UNHEALTHY:
                        turned_unhealthy.append(d)
                self._devices = devices
                self._version += 1
                self._primed = True
                self._cond.notify_all()
        report = self.on_unhealthy
        for d in turned_unhealthy:
            try:
                if report is not None:
                    report(d)
            except Exception:  # a reporting problem must not stop the health stream
                log.exception("reporting device %s unhealthy", d.device)

    def watch(self, active: Callable[[], bool] = lambda: True) -> Iterator[HealthReport]:
        """The reports one stream sends, until ``close()`` or ``active()`` turns False."""
        seen = -1
        sent_at = 0.0
        while True:
            with self._cond:
                while True:
                    if self._closed or not active():
                        return
                    if self._primed and self._version != seen:
                        break
                    due = sent_at + self.resend_seconds - time.monotonic()
                    alive = self.monitor.alive()
                    if self._primed and due <= 0 and alive:
                        break
                    self._cond.wait(min(max(due, 0.05), POLL_SECONDS) if alive else POLL_SECONDS)
                seen = self._version
                report = HealthReport(self._devices, int(time.time()))
            sent_at = time.monotonic()
            yield report
