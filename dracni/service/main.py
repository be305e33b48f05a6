"""``dracni kubelet-plugin``: the long-lived service of the DaemonSet.

It serves kubelet's DRA gRPC API (prepare writes claims into the state dir), publishes the
CNI plugin's status outbox as claim status, and publishes the node's NICs as ResourceSlices.
Everything that talks to the API server lives here, never in the CNI plugin.

With an instance ID (``--instance-id``, the pod's UID) a second instance may run beside this
one during a rolling update (``kubelet/instances.py``): calls are serialized between them,
the node's singleton work (slices, status, reservations, shared-claim pods) is the leader's,
and a stopping instance waits for its successor's registration before it goes.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import defaults
from ..inventory.sharing import Sharing
from ..kubelet.instances import HANDOVER_SECONDS
from ..policy.config import TenantPolicy
from . import signals

if TYPE_CHECKING:
    from ..inventory.links import LinkDB
    from ..state.records import StatusOutbox
    from ..status.drain import Notes

log = logging.getLogger("dracni.service")


#: The service's process (and thread) name in ``ps``, ``top``, ``pgrep`` and ``perf``.
PROCESS_NAME = "dracni"


def name_process() -> None:
    """Call the process ``PROCESS_NAME``, before its first thread starts (threads take their
    creator's name).

    The native fast path runs ``dracni-python`` through the bundle's own loader
    (``native/fastpath.c exec_python``), so the kernel names the process after the loader
    (``ld-linux-x86-64``): ``pgrep dracni`` and ``top`` would not find the DaemonSet's process.
    A ``/proc`` that refuses the write leaves the name as it was.
    """
    try:
        with open("/proc/self/comm", "w") as comm:
            comm.write(PROCESS_NAME)
    except OSError as exc:
        log.debug("cannot name the process %s: %s", PROCESS_NAME, exc)


def freeze_startup_objects() -> None:
    """Collect once, then leave what start-up made (modules, the client's configuration, the
    protobuf descriptors, the compiled schema: ~all the service's objects) out of every later
    collection (``gc.freeze``).

    The cyclic collector's older generations walk every tracked object: in (h)'s bursts of
    100 pod starts, collections cost the service 46 ms per burst of prepares and unprepares,
    a full one of 33-50 ms every few bursts, with the interpreter lock held.  With start-up's
    objects frozen: 16 ms (measured from the source tree with ``gc.callbacks``, 8 bursts each).
    The frozen objects live as long as the service anyway; the collection first frees any
    cycle start-up left, so none is kept forever.
    """
    gc.collect()
    gc.freeze()


#: In-flight kubelet calls get this long once the service stops (kubelet retries what fails).
GRPC_GRACE_SECONDS = 2.0
#: The loops' threads get this long, all together, to finish what they are doing.
JOIN_SECONDS = 1.0
#: After a stop signal the process is gone within this long, whatever is stuck (issue 8).
STOP_DEADLINE_SECONDS = 4.0
#: How often the node's address reservations are checked against its prepared claims.
POOL_RECONCILE_SECONDS = 60.0


@dataclass
class ServiceOptions:
    driver: str
    node: str
    state_dir: str
    kubeconfig: str | None = None
    registry_dir: str = defaults.REGISTRY_DIR
    plugins_dir: str = defaults.PLUGINS_DIR
    health_address: str = defaults.HEALTH_ADDRESS
    policy: TenantPolicy = field(default_factory=TenantPolicy)
    sharing: Sharing = field(default_factory=Sharing)
    nic_include: list[str] = field(default_factory=list)
    nic_exclude: list[str] = field(default_factory=list)
    publish_slices: bool = True
    netns: str | None = None  # discover NICs in this netns (tests); default: the service's own
    link_taint_effect: str = "NoSchedule"  # a NIC whose link is down or gone: NoSchedule, NoExecute, None
    instance: str | None = None  # the pod's UID: sockets of this instance's own (kubelet 1.33+)
    device_metadata_versions: tuple[str, ...] = ()  # KEP-5304 versions to write; () = off
    cdi_dir: str = "/var/run/cdi"  # where the device metadata's CDI specs go
    network_status: bool = False  # write pods' k8s.v1.cni.cncf.io/network-status (kube/pod_network_status.py)


class Service:
    """All parts of the service, started and stopped together."""

    def __init__(self, opts: ServiceOptions) -> None:
        from ..claims.api_source import ApiClaimSource
        from ..claims.device_metadata import metadata_writer
        from ..claims.driver import network_plugin
        from ..claims.pool_addresses import PoolAddresses
        from ..claims.prepare import Resolver
        from ..claims.shared_claims import SharedClaimPods
        from ..inventory.health import DeviceHealthReporter, DiscoveredOffers
        from ..inventory.links import LinkDB
        from ..inventory.lookup import NodeDevices
        from ..inventory.nics import eligible
        from ..inventory.publisher import SlicePublisher
        from ..kube.api import KubeApi, load_api_client
        from ..kube.events import EventRecorder
        from ..kube.ipamclaims import IpamClaimWriter
        from ..kube.pod_network_status import PodNetworkStatus
        from ..kube.reservations import ApiReservations, NodeUid
        from ..kube.status_sink import ApiStatusSink
        from ..kubelet.instances import CallGate, InstanceMarks, Leadership, check_instance_id
        from ..kubelet.server import DRAPluginServer
        from ..kubelet.sockets import plugin_data_dir
        from ..pools.allocator import PoolAllocator
        from ..state.store import StateDir
        from .events import ServiceEvents
        from .health_server import HealthServer
        from .observer import CommitMetrics, ServiceObserver, observe_request
        from .status_publisher import StatusPublisher

        self.opts = opts
        self.stop_event = threading.Event()
        if opts.instance is not None:
            check_instance_id(opts.instance)
        data_dir = plugin_data_dir(opts.plugins_dir, opts.driver)
        #: the other instance of a rolling update: calls never overlap, one leads (instances.py)
        self.gate = CallGate(data_dir)
        self.leadership = Leadership(data_dir)
        self.marks = InstanceMarks(data_dir, opts.instance, opts.registry_dir, opts.driver) if opts.instance else None
        self.state = StateDir(opts.state_dir)
        self.api = KubeApi(load_api_client(opts.kubeconfig, node=opts.node))
        self.api.api_client.on_request = observe_request
        #: Warning Events on pods and claims (failed ADD, failed prepare, unhealthy device, IPAMClaim)
        self.recorder = EventRecorder(self.api, controller=opts.driver, instance=f"{opts.driver}-{opts.node}")
        self.events = ServiceEvents(self.recorder)
        self.claims = ApiClaimSource(self.api)  # a GET per claim kubelet names: no cluster-wide watch
        # The node's links, in dependency order: one netlink watcher (links) -> the slices it
        # publishes -> the device lookup and the device health that read both.
        self.links = LinkDB(opts.netns)
        self.slices = (
            SlicePublisher(
                self.api,
                driver=opts.driver,
                node=opts.node,
                include=opts.nic_include or None,
                exclude=opts.nic_exclude or None,
                netns=opts.netns,
                sharing=opts.sharing,
                link_taint_effect=opts.link_taint_effect,
                in_use=self._claimed_devices,
                links=self.links,
                leader=self.leadership.held,
            )
            if opts.publish_slices
            else None
        )
        self.devices = NodeDevices(
            netns=opts.netns,
            offered=lambda nic: eligible(nic, opts.nic_include or None, opts.nic_exclude or None),
            published=self.slices.offered if self.slices is not None else None,
            sharing=opts.sharing,
            links=self.links,
        )
        # Device health (kubelet's health stream) covers the devices the node publishes.
        self.device_health = DeviceHealthReporter(
            pool=opts.node,
            offered=(
                self.slices.offered
                if self.slices is not None
                else DiscoveredOffers(
                    lambda: frozenset(self.links.by_name()),
                    lambda: _discovered_offers(opts, self.links),
                )
            ),
            links=self.links,
            ready=self.slices.published.is_set if self.slices is not None else None,
            on_unhealthy=lambda device: self.events.unhealthy(self.state, device),
        )
        #: the addresses of networks with an address pool, reserved in the API at prepare time
        self.pools = PoolAddresses(PoolAllocator(ApiReservations(self.api), opts.node, NodeUid(self.api, opts.node)))
        #: kubelet's calls go through the generic helper to dracni's network driver; the
        #: observer counts them and puts a Warning Event on each claim that failed to prepare
        resolver = Resolver(
            state=self.state,
            driver=opts.driver,
            node=opts.node,
            policy=opts.policy,
            devices=self.devices,
            ipamclaims=self.api.get_ipamclaim,
            pools=self.pools,
            metadata=metadata_writer(opts.driver, data_dir, opts.cdi_dir, opts.device_metadata_versions, self.devices),
        )
        self.helper, self.network = network_plugin(
            resolver,
            claims=self.claims,
            observer=ServiceObserver(self.events),
            commit_observer=CommitMetrics(),
            gate=self.gate.held,
        )
        #: pods that join a claim kubelet already prepared here (it prepares a claim only once);
        #: they log their own failures and are not kubelet calls, so no metrics nor Events
        self.shared_claims = SharedClaimPods(
            self.api, self.state, opts.node, lambda refs: self.helper.prepare(refs, report=False)
        )
        self.grpc = DRAPluginServer(
            driver=opts.driver,
            plugins_dir=opts.plugins_dir,
            registry_dir=opts.registry_dir,
            prepare=self.helper.prepare,
            unprepare=self.helper.unprepare,
            health=self.device_health,
            instance=opts.instance,
            on_registered=self.marks.mark_registered if self.marks else None,
        )
        ipamclaims = IpamClaimWriter(self.api, on_problem=self.events.ipamclaim_problem)

        def annotate(record: StatusOutbox) -> Notes:
            self.events.attachment_failures(record)
            return ipamclaims.sync(record)

        pod_status = PodNetworkStatus(self.api, opts.state_dir, self._exclusive_pci) if opts.network_status else None
        self.status = StatusPublisher(
            self.state,
            ApiStatusSink(self.api),
            opts.driver,
            annotate=annotate,
            annotate_pods=pod_status.sync if pod_status else None,
        )
        self.health = (
            HealthServer(opts.health_address, self.ready, share_port=opts.instance is not None)
            if opts.health_address
            else None
        )
        self._threads: list[threading.Thread] = []
        self._stops: list[Callable[[], None]] = []  # undo what start() did, newest last

    def _exclusive_pci(self, pool: str, device: str) -> str | None:
        """The PCI address of a NIC this node offers exclusively (a passthrough): the
        network-status entry's ``device-info`` (status/network_status.py)."""
        facts = self.devices(pool, device)
        return facts.pci_bus_id if facts is not None and facts.sharing == "exclusive" else None

    def _claimed_devices(self) -> set[str]:
        """Device names the prepared claims in the state dir hold (the slice publisher asks
        when a NIC left the node's netns: host-device moved it into a pod)."""
        return {d["device"] for claim in self.state.list_claims() for d in claim["devices"]}

    def ready(self) -> tuple[bool, str]:
        if self.slices is not None and not self.slices.published.is_set():
            return False, "ResourceSlices not published"
        if not self.grpc.registered:  # None until kubelet's first NotifyRegistrationStatus
            error = self.grpc.registration_error
            return False, f"kubelet refused the registration: {error}" if error else "not registered with kubelet"
        return True, "ok"

    def start(self) -> None:
        self.state.ensure()
        if self.health:
            self.health.start()
            self._stops.append(self.health.stop)
        # The link database enters the node's netns (setns on a thread of its own, no fork)
        # and reads its first dump before any gRPC thread exists and before the slices loop.
        try:
            self.links.start()
        except OSError as exc:  # health is optional: prepare must work without it
            log.error("cannot watch the NICs' links (%s): kubelet will see their health as Unknown", exc)
        self._stops.append(self.links.stop)
        loops = [("events", self.recorder.run), ("leadership", self._lead)]
        if self.slices is not None:
            loops.append(("slice-publisher", self.slices.run))
        self._start_loops(loops)
        self._stops.append(self.helper.close)  # after the gRPC servers have stopped
        self._stops.append(self.pools.allocator.close)
        # Health follows the link database (when it could start); its streams end (cleanly)
        # before the gRPC server stops.
        if self.links.running():
            self.device_health.start()
        self.grpc.start()  # the DRA socket listens before the registration socket appears
        self._stops.append(lambda: self.grpc.stop(GRPC_GRACE_SECONDS))
        self._stops.append(self.device_health.close)
        log.info("dracni kubelet plugin %s serving on node %s", self.opts.driver, self.opts.node)
        log.info("tenant policy: %s", self.opts.policy.describe())
        freeze_startup_objects()

    def _start_loops(self, loops: Sequence[tuple[str, Callable[[threading.Event], Any]]]) -> None:
        for name, loop in loops:
            thread = threading.Thread(target=loop, args=(self.stop_event,), name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def _lead(self, stop: threading.Event) -> None:
        """Wait for the leader lock, then do the node's singleton work until the stop."""
        if not self.leadership.acquire(stop):
            return
        if self.slices is not None:
            self.slices.wake()
        self._start_loops(
            [
                ("address-pools", self._reconcile_pools),
                ("status-publisher", self.status.run),
                ("shared-claim-pods", self.shared_claims.run),
            ]
        )

    def _reconcile_pools(self, stop: threading.Event) -> None:
        """This node's address reservations against its prepared claims, at start and every
        ``POOL_RECONCILE_SECONDS`` (claims being prepared meanwhile are left alone)."""
        at_start = True
        while True:
            try:
                released = self.pools.reconcile(self.state, self.api.get_claim, at_start=at_start)
                at_start = False
                if released:
                    log.info("address pools: released %d reservations of claims gone from this node", released)
            except Exception as exc:  # the API server may be away: next round
                log.warning("address pools: reconcile failed: %s", exc)
            if stop.wait(POOL_RECONCILE_SECONDS):
                return

    def stop(self) -> None:
        """Stop what ``start()`` started, newest first (the gRPC servers: kubelet deregisters
        the plugin), then give the loops ``JOIN_SECONDS`` in all: they are daemon threads, and
        one blocked in a call to a vanished API server must not hold the process.  A successor
        being started beside this instance is first given the time to register with kubelet."""
        if self.marks is not None:
            self.marks.unmark()
            if self.grpc.running:
                self.marks.wait_for_successor()
        self.stop_event.set()
        while self._stops:
            try:
                self._stops.pop()()
            except Exception:  # stop the rest anyway
                log.exception("stopping the service")
        deadline = time.monotonic() + JOIN_SECONDS
        for thread in list(self._threads):
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self.leadership.release()  # the other instance takes over from here
        self.gate.close()

    def run_until_signalled(self) -> None:
        """Serve until SIGTERM or SIGINT, then stop; the process ends within
        ``STOP_DEADLINE_SECONDS`` of the signal even if something is stuck."""
        signals.stop_on_signals(self.stop_event)
        try:
            self.start()
            signals.wait_for_stop(self.stop_event)
        finally:
            handover = HANDOVER_SECONDS if self.marks is not None else 0.0
            signals.exit_after(STOP_DEADLINE_SECONDS + handover)
            self.stop()


def _discovered_offers(opts: ServiceOptions, links: LinkDB) -> dict[str, Any]:
    """The devices the node would publish (``--no-publish-slices``): its eligible NICs."""
    from ..inventory.nics import discover_nics, eligible
    from ..inventory.slices import offers

    include, exclude = opts.nic_include or None, opts.nic_exclude or None
    nics = [n for n in discover_nics(links=links) if eligible(n, include, exclude)]
    return {o.name: o for o in offers(nics, opts.sharing)}
