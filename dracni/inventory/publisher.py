"""Publish the node's NICs as this driver's ResourceSlice(s), and keep them there.

Kubelet deletes all of a node's ResourceSlices when it starts, and a driver's slices when its
socket has been gone for 30 s: a watch on our slices puts them back within seconds.  Netlink
link events (a NIC added, renamed, taken down) trigger a refresh; the pool generation goes up
whenever the published content changes.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..kube.api import ApiError, KubeApi
from ..service import metrics
from .nics import discover_nics, eligible
from .sharing import Sharing
from .slices import Offer, build_slices, offers, slices_equal

log = logging.getLogger(__name__)

RESYNC_SECONDS = 60.0
WATCH_TIMEOUT = 300


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
    ) -> None:
        self.api = api
        self.driver = driver
        self.node = node
        self.include = include
        self.exclude = exclude
        self.netns = netns
        self.sysfs_root = sysfs_root
        self.selector = f"spec.nodeName={node},spec.driver={driver}"
        self.generation = 0
        self.published = threading.Event()
        self._dirty = threading.Event()
        self._node_uid: str | None = None
        self._offered: dict[str, Offer] = {}
        #: how NICs are offered; ``shared`` becomes ``slots`` once the API server is seen to
        #: drop allowMultipleAllocations (its DRAConsumableCapacity gate is off)
        self.sharing = sharing or Sharing()

    # -- reconcile -------------------------------------------------------------------------
    def desired(self) -> list[dict[str, Any]]:
        nics = [
            n
            for n in discover_nics(netns=self.netns, sysfs_root=self.sysfs_root)
            if eligible(n, self.include, self.exclude)
        ]
        self._offered = {o.name: o for o in offers(nics, self.sharing)}
        return build_slices(
            driver=self.driver,
            node_name=self.node,
            node_uid=self._node_uid,
            nics=nics,
            generation=self.generation,
            sharing=self.sharing,
        )

    def offered(self) -> dict[str, Offer]:
        """Device name -> NIC, as last published: the device binding looks here first, so a
        prepare (on a gRPC thread) needs no netlink dump of its own."""
        return self._offered

    def reconcile(self) -> None:
        if self._node_uid is None:
            node = self.api.get_node(self.node)
            self._node_uid = (node or {}).get("metadata", {}).get("uid")
        existing, _ = self.api.list_slices(self.selector)
        by_name = {s["metadata"]["name"]: s for s in existing}
        self.generation = max([self.generation] + [s["spec"]["pool"].get("generation", 0) for s in existing])
        desired = self.desired()
        unchanged = len(existing) == len(desired) and all(
            d["metadata"]["name"] in by_name and slices_equal(d, by_name[d["metadata"]["name"]]) for d in desired
        )
        if unchanged:
            self.published.set()
            return
        self.generation += 1
        dropped = False
        for d in self.desired():
            name = d["metadata"]["name"]
            if name in by_name:
                d["metadata"]["resourceVersion"] = by_name[name]["metadata"]["resourceVersion"]
                answer = self.api.replace_slice(name, d)
                metrics.SLICE_PUBLISHES.labels(operation="update").inc()
            else:
                answer = self.api.create_slice(d)
                metrics.SLICE_PUBLISHES.labels(operation="create").inc()
            dropped = dropped or _dropped_sharing(d, answer)
            by_name.pop(name, None)
        for name in by_name:  # slices of ours that are no longer needed
            self.api.delete_slice(name)
            metrics.SLICE_PUBLISHES.labels(operation="delete").inc()
        log.info("published ResourceSlices for node %s, pool generation %d", self.node, self.generation)
        if dropped and self._fall_back_to_slots():
            self.reconcile()  # once: the fallback has no shared NIC left, so it cannot drop anything
            return
        self.published.set()

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
        threading.Thread(target=self._watch_links, args=(stop,), name="netlink-watch", daemon=True).start()
        backoff = 0.5
        while not stop.is_set():
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
            self._dirty.wait(wait)
            if stop.is_set():
                return

    def _watch_slices(self, stop: threading.Event) -> None:
        """Deleted or changed by someone else (kubelet at start): reconcile now."""
        while not stop.is_set():
            try:
                _, resource_version = self.api.list_slices(self.selector)
                for kind, _obj in self.api.watch_slices(self.selector, resource_version, WATCH_TIMEOUT):
                    if stop.is_set():
                        return
                    if kind in ("DELETED", "MODIFIED"):
                        self._dirty.set()
            except ApiError as exc:
                if exc.status != 410:
                    stop.wait(1.0)

    def _watch_links(self, stop: threading.Event) -> None:
        from pyroute2 import IPRoute, NetNS

        ipr = NetNS(self.netns, flags=0) if self.netns else IPRoute()
        try:
            ipr.bind()
            while not stop.is_set():
                for message in ipr.get():
                    if message.get("event") in ("RTM_NEWLINK", "RTM_DELLINK"):
                        self._dirty.set()
        except Exception as exc:
            log.warning("netlink link watch stopped: %s (slices still resync every %ss)", exc, RESYNC_SECONDS)
        finally:
            ipr.close()


def _dropped_sharing(sent: dict[str, Any], answer: dict[str, Any]) -> bool:
    """The API server stored a device we offered for sharing without ``allowMultipleAllocations``
    (it drops gated fields silently: resourceslice strategy, dropDisabledFields)."""
    wanted = {d["name"] for d in sent["spec"]["devices"] if d.get("allowMultipleAllocations")}
    if not wanted:
        return False
    kept = {d.get("name") for d in (answer.get("spec") or {}).get("devices") or [] if d.get("allowMultipleAllocations")}
    return bool(wanted - kept)
