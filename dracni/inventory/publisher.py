"""Publish the node's NICs as this driver's ResourceSlice(s), and keep them there.

The publisher keeps its own informer-style view of this node's slices (``SliceCache``): one
LIST with ``resourceVersion=0`` (served from the API server's watch cache, not etcd), then a
WATCH from that list's resourceVersion, resumed from the last event's resourceVersion when it
times out; it lists again only after 410 Gone or a broken watch.  A netlink link event, a
periodic resync and any change to our slices by someone else (kubelet deletes a node's slices
when it starts, and a driver's slices 30 s after its socket went away) recompute the desired
slices from the node's NICs and compare them with that view: no API call unless something
must be written.  The pool generation goes up whenever the published content changes.

Writes are bounded: the API server may drop fields (gated fields such as device taints with
``DRADeviceTaints`` off) or default them, so what it stores can differ from what was sent
forever.  For each slice the publisher remembers what it sent and what the server answered,
and it writes again only when what it wants changes or the stored slice is no longer the
server's answer to it.  When the server drops ``allowMultipleAllocations`` the publisher offers
shared NICs as slots from then on (``_dropped_sharing``), once.

Link state (KEP-5055 device taints): a NIC whose link is down (``links.link_problems``, the
predicate kubelet's device health uses too: an RFC 2863 state that passes no traffic, or no
carrier) gets a ``<driver>/link=down`` taint on its devices, and a NIC that vanished from the node stays
published with ``<driver>/link=gone`` while the service runs, so a claim allocated to it shows
why it cannot work; both go when the link is back.  The effect is the service's
``--link-down-taint-effect`` (NoSchedule by default; None: no taint).  The link state is not a
slice attribute, so a flapping link rewrites the slice only when its taint comes or goes.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

from .. import metrics
from ..apirules.validation import SLICE_MAX_DEVICES, SLICE_MAX_DEVICES_WITH_TAINTS
from ..clock import now_rfc3339
from ..kube.api import ApiError, KubeApi
from .links import LinkDB
from .nics import Nic, discover_nics, eligible
from .sharing import Sharing
from .slicecache import SliceCache
from .slicecache import resource_version as _rv
from .slices import (
    LINK_DOWN,
    LINK_GONE,
    TAINT_EFFECTS,
    Offer,
    build_slices,
    link_taint,
    link_taint_key,
    offers,
    slice_content,
    slices_equal,
)

log = logging.getLogger(__name__)

RESYNC_SECONDS = 60.0
WATCH_TIMEOUT = 300
#: a device name of slots mode (``slices.offers``): ``<device name>-slot-<i>``
_SLOT_NAME = re.compile(r"-slot-\d+$")
#: ``--link-down-taint-effect`` values: a device taint effect, or no taint at all.
NO_TAINT = "None"
LINK_TAINT_EFFECTS = (*TAINT_EFFECTS, NO_TAINT)


class SlicePublisher:
    def __init__(
        self,
        api: KubeApi,
        *,
        driver: str,
        node: str,
        include: list[str] | None = None,
        exclude: list[str] | None = None,
        netns: str | None = None,
        sysfs_root: str = "/sys",
        sharing: Sharing | None = None,
        link_taint_effect: str = "NoSchedule",
        watch_timeout: int = WATCH_TIMEOUT,
        in_use: Callable[[], Collection[str]] | None = None,
        links: LinkDB | None = None,
        leader: Callable[[], bool] | None = None,
    ) -> None:
        if link_taint_effect not in LINK_TAINT_EFFECTS:
            raise ValueError(f"link taint effect {link_taint_effect!r}: one of {', '.join(LINK_TAINT_EFFECTS)}")
        self.api = api
        self.driver = driver
        self.node = node
        self.include = include
        self.exclude = exclude
        self.netns = netns
        self.sysfs_root = sysfs_root
        #: the node's links (a shared database the service starts; else one of our own, which
        #: ``run`` starts and stops)
        self.links, self._owns_links = LinkDB.shared_or_own(links, netns)
        self.selector = f"spec.nodeName={node},spec.driver={driver}"
        self.generation = 0
        self.published = threading.Event()
        self.cache = SliceCache()
        self.link_taint_effect = link_taint_effect
        self.watch_timeout = watch_timeout  # seconds one WATCH request lasts; then it resumes
        #: device names that prepared claims hold (the state dir): a NIC that leaves the node's
        #: netns while one of its devices is held went into a pod (host-device), it is not gone
        self.in_use = in_use
        #: whether this instance writes the slices (``kubelet/instances.py Leadership``); the
        #: other instance of a rolling update only keeps ``offered`` (None: always writes)
        self.leader = leader
        self._dirty = threading.Event()
        self._node_uid: str | None = None
        self._offered: dict[str, Offer] = {}
        #: NICs offered since the service started, by interface name: one that vanishes stays
        #: published (tainted "gone") until it is back
        self._seen: dict[str, Nic] = {}
        #: (interface name, taint value) -> timeAdded, so a taint keeps its time while it holds
        self._taint_since: dict[tuple[str, str], str] = {}
        #: slice name -> (content sent, content the server answered): see the module doc
        self._answered: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        #: resourceVersions of our own writes: their watch events need no reconcile
        self._own_rvs: set[str] = set()
        #: how NICs are offered; ``shared`` becomes ``slots`` once the API server is seen to
        #: drop allowMultipleAllocations (its DRAConsumableCapacity gate is off)
        self.sharing = sharing or Sharing()

    # -- desired state ---------------------------------------------------------------------
    def _nics(self, existing: dict[str, dict[str, Any]]) -> tuple[list[Nic], dict[str, list[dict[str, str]]]]:
        """The NICs to publish (the eligible ones, plus the vanished ones still remembered) and
        their link taints."""
        links = discover_nics(links=self.links, sysfs_root=self.sysfs_root)
        present = {n.name for n in links}
        nics = [n for n in links if eligible(n, self.include, self.exclude)]
        for nic in nics:
            self._seen[nic.name] = nic
        offered = {n.name for n in nics}
        # a remembered NIC that is no longer a link at all is gone; one that is still a link but
        # no longer eligible (renamed away, excluded, enslaved) is simply not offered any more
        for name in [name for name in self._seen if name not in offered and name in present]:
            del self._seen[name]
        gone = [nic for name, nic in self._seen.items() if name not in present]
        nics = nics + gone
        in_pods = self._in_pods({nic.name for nic in gone})
        taints: dict[str, list[dict[str, str]]] = {}
        states: dict[str, str] = {}
        if self.link_taint_effect != NO_TAINT:
            for nic in nics:
                if nic.name in in_pods:
                    continue
                if nic.name not in present:
                    states[nic.name] = LINK_GONE
                elif nic.link_down:
                    states[nic.name] = LINK_DOWN
            published = _published_taint_times(existing, self.driver)
            for name, value in states.items():
                since = self._taint_since.get((name, value))
                if since is None:
                    since = published.get((name, value, self.link_taint_effect)) or now_rfc3339()
                    log.warning("NIC %s: link %s; its devices are tainted %s", name, value, self.link_taint_effect)
                taints[name] = [link_taint(self.driver, value, self.link_taint_effect, since)]
        for key in list(self._taint_since):
            if states.get(key[0]) != key[1]:
                if key[0] not in states:
                    log.info("NIC %s: link up again; its taint goes", key[0])
                del self._taint_since[key]
        for name, value in states.items():
            self._taint_since[(name, value)] = taints[name][0]["timeAdded"]
        return nics, taints

    def _in_pods(self, gone: set[str]) -> set[str]:
        """Which of the ``gone`` NICs have a device that a prepared claim holds."""
        if not gone or self.in_use is None:
            return set()
        held = set(self.in_use())
        return {o.nic.name for name, o in self._offered.items() if o.nic.name in gone and name in held}

    def _build(self, nics: list[Nic], taints: dict[str, list[dict[str, str]]], generation: int) -> list[dict[str, Any]]:
        return build_slices(
            driver=self.driver,
            node_name=self.node,
            node_uid=self._node_uid,
            nics=nics,
            generation=generation,
            sharing=self.sharing,
            taints=taints,
            max_devices=SLICE_MAX_DEVICES if self.link_taint_effect == NO_TAINT else SLICE_MAX_DEVICES_WITH_TAINTS,
        )

    def offered(self) -> dict[str, Offer]:
        """Device name -> NIC, as last published: the device binding looks here first, so a
        prepare (on a gRPC thread) needs no netlink dump of its own."""
        return self._offered

    def _in_sync(self, want: dict[str, Any], held: dict[str, Any] | None) -> bool:
        """Whether ``held`` (our cache's copy) publishes ``want``: equal, or the server's answer
        to exactly this content (it dropped or defaulted fields: sending it again changes
        nothing)."""
        if held is None:
            return False
        if slices_equal(want, held):
            return True
        answered = self._answered.get(want["metadata"]["name"])
        return answered is not None and answered == (slice_content(want), slice_content(held))

    # -- reconcile -------------------------------------------------------------------------
    def reconcile(self) -> None:
        """Make the API server's slices match the node's NICs, from the cache (no LIST)."""
        if self._node_uid is None:
            node = self.api.get_node(self.node)
            self._node_uid = (node or {}).get("metadata", {}).get("uid")
        existing = self.cache.snapshot()
        self.generation = max(
            [self.generation] + [(s.get("spec") or {}).get("pool", {}).get("generation", 0) for s in existing.values()]
        )
        nics, taints = self._nics(existing)
        if self.leader is not None and not self.leader():
            self._follow(existing)
            self._offered = {o.name: o for o in offers(nics, self.sharing)}
            self.published.set()  # the leader publishes; this instance knows the devices
            return
        self._offered = {o.name: o for o in offers(nics, self.sharing)}
        desired = self._build(nics, taints, self.generation)
        names = {d["metadata"]["name"] for d in desired}
        if all(self._in_sync(d, existing.get(d["metadata"]["name"])) for d in desired) and set(existing) <= names:
            self.published.set()
            return
        self.generation += 1
        dropped = False
        for d in self._build(nics, taints, self.generation):
            name = d["metadata"]["name"]
            held = existing.get(name)
            if held is not None:
                d["metadata"]["resourceVersion"] = _rv(held)
                answer = self._write("update", lambda d=d, name=name: self.api.replace_slice(name, d))
            else:
                answer = self._write("create", lambda d=d: self.api.create_slice(d))
            self._answered[name] = (slice_content(d), slice_content(answer))
            dropped = dropped or _dropped_sharing(d, answer)
        for name in set(existing) - names:  # slices of ours that are no longer needed
            self.api.delete_slice(name)
            self.cache.remove(name)
            self._answered.pop(name, None)
            metrics.SLICE_PUBLISHES.labels(operation="delete").inc()
        log.info("published ResourceSlices for node %s, pool generation %d", self.node, self.generation)
        if dropped and self._fall_back_to_slots():
            self.reconcile()  # once: the fallback has no shared NIC left, so it cannot drop anything
            return
        self.published.set()

    def _write(self, operation: str, call: Any) -> dict[str, Any]:
        try:
            answer: dict[str, Any] = call()
        except ApiError as exc:
            if exc.status in (404, 409):  # our copy was stale: the watch brings the news; retry then
                self._dirty.set()
            raise
        metrics.SLICE_PUBLISHES.labels(operation=operation).inc()
        if len(self._own_rvs) > 64:  # events of our writes that a re-list skipped never come
            self._own_rvs.clear()
        self._own_rvs.add(_rv(answer))
        self.cache.put(answer)
        return answer

    def wake(self) -> None:
        """Reconcile now (this instance has just become the leader)."""
        self._dirty.set()

    def _follow(self, existing: dict[str, dict[str, Any]]) -> None:
        """Offer devices as the leader published them: slots once it fell back to slots."""
        names = (d.get("name", "") for s in existing.values() for d in (s.get("spec") or {}).get("devices") or [])
        if any(_SLOT_NAME.search(name) for name in names):
            self._fall_back_to_slots()

    def _fall_back_to_slots(self) -> bool:
        if self.sharing.without_consumable_capacity() == self.sharing:
            return False
        log.warning(
            "the API server dropped allowMultipleAllocations from the published devices: its feature "
            "gate DRAConsumableCapacity is off (beta and on from Kubernetes 1.36); offering each shared "
            "NIC as %d slots instead (one device per attachment), until this service restarts",
            self.sharing.slots,
        )
        self.sharing = self.sharing.without_consumable_capacity()
        return True

    # -- loops -----------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        threading.Thread(target=self._watch_slices, args=(stop,), name="slice-watch", daemon=True).start()
        self._follow_links()
        try:
            self._loop(stop)
        finally:
            self.links.unsubscribe(self._on_links)
            if self._owns_links:
                self.links.stop()

    def _follow_links(self) -> None:
        """Link events (added, changed, removed) -> reconcile."""
        if self._owns_links:
            try:
                self.links.start()
            except OSError as exc:
                log.warning("netlink link watch failed: %s (slices still resync every %ss)", exc, RESYNC_SECONDS)
        self.links.subscribe(self._on_links)

    def _on_links(self, changed: bool) -> None:
        if changed:
            self._dirty.set()

    def _loop(self, stop: threading.Event) -> None:
        backoff = 0.5
        while not stop.is_set():
            if not self.cache.synced.is_set():  # the first LIST has not answered yet
                self.cache.synced.wait(0.5)
                continue
            self._dirty.clear()
            try:
                self.reconcile()
                backoff = 0.5
                wait = RESYNC_SECONDS
            except ApiError as exc:
                log.warning("ResourceSlice publish failed: %s; retrying in %.1fs", exc, backoff)
                wait, backoff = backoff, min(backoff * 2, 30.0)
            except Exception as exc:
                log.exception("ResourceSlice publish failed: %s", exc)
                wait, backoff = backoff, min(backoff * 2, 30.0)
            self._wait_dirty(stop, wait)

    def _wait_dirty(self, stop: threading.Event, seconds: float) -> None:
        """Until something to reconcile, ``seconds``, or the stop (checked every second)."""
        deadline = time.monotonic() + seconds
        while not stop.is_set() and not self._dirty.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._dirty.wait(min(remaining, 1.0))

    def _watch_slices(self, stop: threading.Event) -> None:
        """The cache's LIST and WATCH; a change by someone else (kubelet's wipe) -> reconcile."""
        listed = False
        while not stop.is_set():
            try:
                if not listed:
                    items, resource_version = self.api.list_slices(self.selector, resource_version="0")
                    self.cache.replace(items, resource_version)
                    listed = True
                    self._dirty.set()
                for kind, obj in self.api.watch_slices(self.selector, self.cache.resource_version, self.watch_timeout):
                    if stop.is_set():
                        return
                    self._on_event(kind, obj)
                # the stream ended at its timeout: resume from the last resourceVersion seen
            except ApiError as exc:
                listed = False  # 410 Gone or a broken watch: list again
                if exc.status != 410:
                    log.info("ResourceSlice watch broken: %s; listing again", exc)
                    stop.wait(1.0)

    def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        rv = _rv(obj)
        if rv:
            self.cache.resource_version = rv
        if kind == "BOOKMARK" or not (obj.get("metadata") or {}).get("name"):
            return
        if kind == "DELETED":
            self.cache.remove(obj["metadata"]["name"])
        elif not self.cache.put(obj):
            return
        if kind != "DELETED" and rv in self._own_rvs:
            self._own_rvs.discard(rv)
            return
        self._dirty.set()


def _published_taint_times(existing: dict[str, dict[str, Any]], driver: str) -> dict[tuple[str, str, str], str]:
    """(interface name, taint value, effect) -> timeAdded of our link taints in the published
    slices, so a restarted service keeps a taint's time instead of rewriting it."""
    key = link_taint_key(driver)
    found: dict[tuple[str, str, str], str] = {}
    for obj in existing.values():
        for device in (obj.get("spec") or {}).get("devices") or []:
            ifname = ((device.get("attributes") or {}).get(f"{driver}/ifName") or {}).get("string")
            for taint in device.get("taints") or []:
                if ifname and taint.get("key") == key and taint.get("timeAdded"):
                    found[(ifname, taint.get("value", ""), taint.get("effect", ""))] = taint["timeAdded"]
    return found


def _dropped_sharing(sent: dict[str, Any], answer: dict[str, Any]) -> bool:
    """The API server stored a device we offered for sharing without ``allowMultipleAllocations``
    (it drops gated fields silently: resourceslice strategy, dropDisabledFields)."""
    wanted = {d["name"] for d in sent["spec"]["devices"] if d.get("allowMultipleAllocations")}
    if not wanted:
        return False
    kept = {d.get("name") for d in (answer.get("spec") or {}).get("devices") or [] if d.get("allowMultipleAllocations")}
    return bool(wanted - kept)
