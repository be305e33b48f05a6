"""Device health from link state, for kubelet's DRAResourceHealth stream (KEP-4680).

Kubelet shows a DRA device's health in the container statuses of the pods using it
(``allocatedResourcesStatus``: Healthy, Unhealthy, Unknown).  dracni's devices are NICs, so a
device's health is its link's:

- **Healthy**: the interface is in the node's namespace, administratively up, has carrier,
  and its operational state is ``up`` (or ``unknown``: drivers that keep no RFC 2863 state,
  e.g. dummy or tun, report that while they work; carrier and ``IFF_UP`` decide then);
- **Unhealthy**: it is there but cannot pass traffic (``links.link_problems``): taken down,
  no carrier (cable, peer, switch port), or an RFC 2863 operational state of ``down``,
  ``lowerlayerdown``, ``dormant``, ``notpresent`` or ``testing``.  The slice publisher taints
  the NIC's devices ``link=down`` by the same predicate, so kubelet and the scheduler agree;
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

Link state comes from ``links.LinkDB``, the one watcher of the node's links: the service
shares it with the slice publisher and the device lookup, and the reporter recomputes after
every batch of netlink messages and every ``links.POLL_SECONDS`` (its change callback).  The
database enters the node's namespace without a fork (see ``links``).

Not on the CNI hot path: the service imports this.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from .links import ALIVE_SECONDS, DOWN_STATES, POLL_SECONDS, LinkDB, LinkState
from .slices import Offer

__all__ = [
    "HEALTHY",
    "UNHEALTHY",
    "UNKNOWN",
    "ALIVE_SECONDS",
    "DOWN_STATES",
    "POLL_SECONDS",
    "LinkState",
    "DeviceHealth",
    "DeviceHealthReporter",
    "DiscoveredOffers",
    "HealthReport",
    "device_health",
    "link_health",
]

log = logging.getLogger(__name__)

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
UNKNOWN = "Unknown"

#: The full list goes out again this often, well inside kubelet's lease.
RESEND_SECONDS = 10.0
#: ``health_check_timeout_seconds`` sent with every device: kubelet's default, said explicitly.
HEALTH_TIMEOUT_SECONDS = 30
#: kubelet truncates longer messages (dra-health api.proto, DeviceHealth.message).
MESSAGE_MAX = 1024


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
    problems = link.problems  # the predicate the slice taints use too (links.link_problems)
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


class DiscoveredOffers:
    """Device name -> Offer for a service that publishes no slices: the node's eligible NICs,
    discovered again only when the set of link names the link database sees changes (a
    discovery reads sysfs for every link; the reporter asks twice a second)."""

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
    Offer, e.g. the slice publisher's ``offered``) by the links ``links`` (a ``LinkDB``) sees.
    Its watcher thread recomputes them after every netlink batch and every ``POLL_SECONDS``.
    Without ``links`` the reporter watches ``netns`` with a database of its own, started and
    stopped with it; a shared one is the service's to start and stop (``monitor`` either way).

    ``watch()`` yields the full list first, again whenever a device's health changes, and
    again every ``resend_seconds`` while the monitor is alive; it ends at ``close()``.
    """

    def __init__(
        self,
        *,
        pool: str,
        offered: Callable[[], Mapping[str, Offer]],
        netns: str | None = None,
        links: LinkDB | None = None,
        ready: Callable[[], bool] | None = None,
        resend_seconds: float = RESEND_SECONDS,
        on_unhealthy: Callable[[DeviceHealth], None] | None = None,
    ) -> None:
        self.pool = pool
        self.resend_seconds = resend_seconds
        self.offered = offered
        #: Streams send nothing before this is true (e.g. the slices are published), so their
        #: first message lists every device the node offers.
        self.ready = ready
        self.monitor, self._owns_monitor = LinkDB.shared_or_own(links, netns)
        self._cond = threading.Condition()
        self._version = 0
        self._devices: tuple[DeviceHealth, ...] = ()
        self._formerly: dict[str, str] = {}  # device name -> interface, every device offered so far
        self._primed = False
        self._closed = False
        #: told of each device that turns Unhealthy (the service's Events), outside the lock
        self.on_unhealthy = on_unhealthy

    def start(self) -> None:
        """Follow the links (an own database opens its socket in the node's namespace here,
        before any gRPC thread runs) and compute the first report."""
        if self._owns_monitor:
            self.monitor.start()
        self.monitor.subscribe(self._on_links)
        self.refresh()

    def stop(self) -> None:
        self.close()
        self.monitor.unsubscribe(self._on_links)
        if self._owns_monitor:
            self.monitor.stop()

    def _on_links(self, changed: bool) -> None:
        self.refresh()

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
        links = self.monitor.by_name()
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
