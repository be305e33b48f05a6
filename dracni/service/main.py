"""``dracni kubelet-plugin``: the long-lived service of the DaemonSet.

It serves kubelet's DRA gRPC API (prepare writes claims into the state dir), publishes the
CNI plugin's status outbox as claim status, and publishes the node's NICs as ResourceSlices.
Everything that talks to the API server lives here, never in the CNI plugin.
"""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass, field

from .. import defaults

log = logging.getLogger("dracni.service")


@dataclass
class ServiceOptions:
    driver: str
    node: str
    state_dir: str
    kubeconfig: str | None = None
    registry_dir: str = defaults.REGISTRY_DIR
    plugins_dir: str = defaults.PLUGINS_DIR
    health_address: str = defaults.HEALTH_ADDRESS
    allowed_types: frozenset[str] | None = None
    nic_include: list[str] = field(default_factory=list)
    nic_exclude: list[str] = field(default_factory=list)
    publish_slices: bool = True
    netns: str | None = None  # discover NICs in this netns (tests); default: the service's own


class Service:
    """All parts of the service, started and stopped together."""

    def __init__(self, opts: ServiceOptions) -> None:
        from ..kube.api import KubeApi, load_api_client
        from ..claims.api_source import ClaimCache
        from ..kube.ipamclaims import IpamClaimWriter
        from ..kube.status_sink import ApiStatusSink
        from ..kubelet.helper import KubeletPluginHelper
        from ..kubelet.server import DRAPluginServer
        from ..state.store import StateDir
        from ..inventory.publisher import SlicePublisher
        from .metrics import HealthServer, observed_prepare, observed_unprepare
        from .status_publisher import StatusPublisher

        self.opts = opts
        self.stop_event = threading.Event()
        self.state = StateDir(opts.state_dir)
        self.api = KubeApi(load_api_client(opts.kubeconfig))
        self.claims = ClaimCache(self.api)
        self.helper = KubeletPluginHelper(state=self.state, claims=self.claims, driver=opts.driver, node=opts.node,
                                          allowed_types=opts.allowed_types, ipamclaims=self.api.get_ipamclaim)
        self.grpc = DRAPluginServer(driver=opts.driver, plugins_dir=opts.plugins_dir,
                                    registry_dir=opts.registry_dir, prepare=observed_prepare(self.helper.prepare),
                                    unprepare=observed_unprepare(self.helper.unprepare))
        self.status = StatusPublisher(self.state, ApiStatusSink(self.api), opts.driver,
                                      on_published=IpamClaimWriter(self.api).sync)
        self.slices = SlicePublisher(self.api, driver=opts.driver, node=opts.node, include=opts.nic_include or None,
                                     exclude=opts.nic_exclude or None, netns=opts.netns) \
            if opts.publish_slices else None
        self.health = HealthServer(opts.health_address, self.ready) if opts.health_address else None
        self._threads: list[threading.Thread] = []

    def ready(self) -> tuple[bool, str]:
        if not self.claims.synced.is_set():
            return False, "claim cache not synced"
        if self.slices is not None and not self.slices.published.is_set():
            return False, "ResourceSlices not published"
        return True, "ok"

    def start(self) -> None:
        self.state.ensure()
        if self.health:
            self.health.start()
        loops = [("claim-cache", self.claims.run), ("status-publisher", self.status.run)]
        if self.slices is not None:
            loops.append(("slice-publisher", self.slices.run))
        for name, loop in loops:
            thread = threading.Thread(target=loop, args=(self.stop_event,), name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        self.grpc.start()  # the DRA socket listens before the registration socket appears
        log.info("dracni kubelet plugin %s serving on node %s", self.opts.driver, self.opts.node)

    def stop(self) -> None:
        self.stop_event.set()
        self.grpc.stop()
        if self.health:
            self.health.stop()
        for thread in self._threads:
            thread.join(timeout=2)

    def run_until_signalled(self) -> None:
        def handle(signum, _frame):
            log.info("signal %d: stopping", signum)
            self.stop_event.set()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
        self.start()
        try:
            self.stop_event.wait()
        finally:
            self.stop()
