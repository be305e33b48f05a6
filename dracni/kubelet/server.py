"""The kubelet plugin's gRPC side: the DRA service kubelet calls, and the registration
socket kubelet's plugin watcher finds it through (docs/contracts.md section 2).

- ``<plugins_dir>/<driver>/dra.sock``: ``DRAPlugin`` in both ``k8s.io.kubelet.pkg.apis.dra.v1``
  (kubelet 1.34+) and ``...v1beta1`` (1.32, 1.33), on one gRPC server.
- the same socket also serves ``DRAResourceHealth`` (``v1``, ``v1beta1``, ``v1alpha1``) when a
  health source is given: kubelet's stream of device health (``kubelet/health_service.py``);
- ``<registry_dir>/<driver>-reg.sock``: ``pluginregistration.Registration``, on a second server
  bound only once the DRA socket accepts connections: kubelet dials the endpoint as soon as it
  has registered the plugin.
- with an ``instance`` ID (a rolling update, ``kubelet/instances.py``) the two sockets are
  ``dra-<instance>.sock`` and ``<driver>-<instance>-reg.sock``: a stale socket is then only ever
  this instance's own (the same pod's container restarted), never another instance's.

The server knows nothing about claims: ``prepare`` and ``unprepare`` callbacks (the helper's,
``kubelet/helper.py``) do the work, and the server turns their answers into kubelet's
per-claim responses (``kubelet/answers.py``).
Kubelet treats a failed RPC as a failure of every claim in the batch, and a missing or
unknown claim UID as an error, so every requested claim gets exactly one entry: a callback
that raises or forgets a claim gives that claim an error string, never a failed RPC.
The callbacks run on the server's worker threads, several at once when kubelet prepares
claims of different pods concurrently: they must be thread-safe (the state dir's lock is).

Keep this module out of the CNI hot path: it imports grpc.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent import futures
from typing import Any

import grpc

from dracni.apirules.validation import is_driver_name
from dracni.kubelet.answers import prepare_answers, unprepare_answers
from dracni.kubelet.driver import ClaimRef, PrepareResult
from dracni.kubelet.health_service import HEALTH_SERVICES, MAX_HEALTH_STREAMS, HealthService, HealthSource
from dracni.kubelet.in_flight import InFlight
from dracni.kubelet.proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    health_v1_pb2,
    health_v1_pb2_grpc,
    health_v1alpha1_pb2,
    health_v1alpha1_pb2_grpc,
    health_v1beta1_pb2,
    health_v1beta1_pb2_grpc,
    registration_pb2,
    registration_pb2_grpc,
)
from dracni.kubelet.sockets import (
    check_socket_path,
    dra_socket_path,
    registration_socket_path,
    remove_stale_socket,
    wait_until_serving,
)

log = logging.getLogger(__name__)

#: ``PluginInfo.type`` of a DRA driver's kubelet plugin.
PLUGIN_TYPE = "DRAPlugin"
#: ``PluginInfo.supported_versions``: "<proto package>.<service>", most recent first. Kubelet
#: takes the first one of this list that it speaks.
SUPPORTED_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")

PrepareCallback = Callable[[list[ClaimRef]], Mapping[str, PrepareResult]]
UnprepareCallback = Callable[[list[ClaimRef]], Mapping[str, str | None]]


def check_driver_name(driver: str) -> None:
    """Raise ValueError unless ``driver`` is a valid DRA driver name."""
    if not is_driver_name(driver):
        raise ValueError(f"driver name {driver!r} is not a DNS subdomain of at most 63 characters")


#: Calls served at once.  Kubelet starts pods, and so sends their NodePrepareResources, in
#: parallel, and a device health stream holds a worker for as long as it lasts.  Twice the API
#: connections (``kube/transport.py CONNECTIONS``): a call waiting for its group commit holds a
#: worker but no connection, so with more workers than connections the connections stay busy
#: in a burst of pod starts.  Measured in ``make bench`` (h), 100 pods x 2 claims at once:
#: prepare p99 6.5-7.5x one pod alone with 128 workers over 64 connections, 8.0-8.2x with 64
#: over 32, the same CPU per claim.  The pool starts its threads only as calls need them.
DRA_WORKERS = 128


class DRAPluginServer:
    """Serves kubelet's DRA plugin API (v1 and v1beta1) and registers with kubelet.

    ``start()`` brings the DRA socket up first and the registration socket after it;
    ``stop()`` takes the registration socket down first (kubelet then deregisters the
    plugin) and removes both socket files; ``wait()`` returns once it has stopped.  Signals are
    the command's business (``dracni.service.signals``).

    Kubelet's verdict on the registration: ``registered`` (None until kubelet reports),
    ``registration_error`` and ``registered_event`` (set while kubelet says registered).
    """

    def __init__(
        self,
        *,
        driver: str,
        plugins_dir: str,
        registry_dir: str,
        prepare: PrepareCallback,
        unprepare: UnprepareCallback,
        max_workers: int = DRA_WORKERS,
        health: HealthSource | None = None,
        instance: str | None = None,
        on_registered: Callable[[], None] | None = None,
    ) -> None:
        check_driver_name(driver)
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, not {max_workers}")
        self.driver = driver
        self.dra_socket = dra_socket_path(plugins_dir, driver, instance)
        self.registration_socket = registration_socket_path(registry_dir, driver, instance)
        self._on_registered = on_registered
        check_socket_path(self.dra_socket, "DRA service socket")
        check_socket_path(self.registration_socket, "registration socket")
        self._prepare_cb = prepare
        self._unprepare_cb = unprepare
        self._max_workers = max_workers
        self._health = health
        self._health_streams = threading.BoundedSemaphore(MAX_HEALTH_STREAMS)
        #: ``PluginInfo.supported_versions``
        self.services = SUPPORTED_SERVICES + (HEALTH_SERVICES if health is not None else ())

        #: Set while kubelet reports the plugin registered (NotifyRegistrationStatus).
        self.registered_event = threading.Event()
        self._registered: bool | None = None
        self._registration_error: str | None = None
        self._status_lock = threading.Lock()

        self._lifecycle_lock = threading.Lock()
        self._state = "new"  # new -> running -> stopped
        self._stopped = threading.Event()
        self._dra_server: grpc.Server | None = None
        self._reg_server: grpc.Server | None = None
        self._bound: dict[str, tuple[int, int]] = {}  # socket path -> (st_dev, st_ino) we created
        self.in_flight = InFlight()  # the DRA calls being served

    # -- kubelet's registration verdict ----------------------------------------------------

    @property
    def registered(self) -> bool | None:
        """Kubelet's last NotifyRegistrationStatus: True, False, or None before the first."""
        with self._status_lock:
            return self._registered

    @property
    def registration_error(self) -> str | None:
        """The error of kubelet's last failed registration (None after a success)."""
        with self._status_lock:
            return self._registration_error

    def _record_registration(self, registered: bool, error: str) -> None:
        with self._status_lock:
            self._registered = registered
            self._registration_error = None if registered else (error or "kubelet gave no reason")
        if registered:
            self.registered_event.set()
            log.info("kubelet registered DRA driver %s (endpoint %s)", self.driver, self.dra_socket)
            if self._on_registered is not None:
                try:
                    self._on_registered()
                except OSError as exc:  # a mark the other instance cannot see: it waits, then stops anyway
                    log.warning("cannot mark this instance registered: %s", exc)
        else:
            self.registered_event.clear()
            log.error("kubelet refused to register DRA driver %s: %s", self.driver, error or "no reason given")

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._state == "running"

    def start(self, ready_timeout: float = 5.0) -> None:
        """Create the directories, replace stale sockets, serve DRA, then serve registration.

        Returns once both sockets accept connections.  A server starts once: after ``stop()``
        make a new one.
        """
        with self._lifecycle_lock:
            if self._state != "new":
                raise RuntimeError(f"DRAPluginServer for {self.driver} was already {self._state}")
            os.makedirs(os.path.dirname(self.dra_socket), mode=0o750, exist_ok=True)
            os.makedirs(os.path.dirname(self.registration_socket), mode=0o750, exist_ok=True)
            # The registration socket goes first: while it exists kubelet may dial it.
            remove_stale_socket(self.registration_socket)
            remove_stale_socket(self.dra_socket)
            try:
                self._dra_server = grpc.server(
                    futures.ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="dracni-dra")
                )
                dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(
                    _DRAService(self, dra_v1_pb2, "v1", share_id=True), self._dra_server
                )
                dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(
                    _DRAService(self, dra_v1beta1_pb2, "v1beta1", share_id=False), self._dra_server
                )
                if self._health is not None:
                    for pb2, grpc_mod, version in (
                        (health_v1_pb2, health_v1_pb2_grpc, "v1"),
                        (health_v1beta1_pb2, health_v1beta1_pb2_grpc, "v1beta1"),
                        (health_v1alpha1_pb2, health_v1alpha1_pb2_grpc, "v1alpha1"),
                    ):
                        grpc_mod.add_DRAResourceHealthServicer_to_server(
                            HealthService(self._health_streams, self._health, pb2, version), self._dra_server
                        )
                self._bind(self._dra_server, self.dra_socket)
                self._dra_server.start()
                wait_until_serving(self.dra_socket, ready_timeout)

                self._reg_server = grpc.server(
                    futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="dracni-reg")
                )
                registration_pb2_grpc.add_RegistrationServicer_to_server(_RegistrationService(self), self._reg_server)
                self._bind(self._reg_server, self.registration_socket)
                self._reg_server.start()
            except BaseException:
                self._shutdown(grace=0)
                self._state = "stopped"
                self._stopped.set()
                raise
            self._state = "running"
        log.info(
            "serving DRA driver %s on %s (%s); registration on %s",
            self.driver,
            self.dra_socket,
            ", ".join(self.services),
            self.registration_socket,
        )

    def stop(self, grace: float | None = 5.0) -> None:
        """Stop both servers and remove the socket files this server created.

        In-flight DRA calls first get up to ``grace`` seconds to finish: kubelet closes its
        connection to a plugin whose registration socket goes, which would cancel them (its
        ``DRAPluginManager.remove``); with another instance beside this one, kubelet already
        sends new calls there.  Then registration goes, so kubelet deregisters the plugin
        before the DRA service stops.  Idempotent.
        """
        with self._lifecycle_lock:
            if self._state == "stopped":
                return
            was_running = self._state == "running"
            self._shutdown(grace)
            self._state = "stopped"
            self._stopped.set()
        if was_running:
            log.info("stopped DRA driver %s plugin server", self.driver)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server has stopped (or ``timeout``); True once stopped."""
        return self._stopped.wait(timeout)

    def __enter__(self) -> DRAPluginServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _bind(self, server: grpc.Server, path: str) -> None:
        try:
            port = server.add_insecure_port("unix:" + path)
        except RuntimeError as exc:
            raise OSError(f"cannot listen on unix socket {path}: {exc}") from exc
        if not port:
            raise OSError(f"cannot listen on unix socket {path}")
        st = os.stat(path)
        self._bound[path] = (st.st_dev, st.st_ino)

    def _shutdown(self, grace: float | None) -> None:
        if grace and not self.in_flight.wait_idle(grace):
            log.warning("stopping with DRA calls still in flight after %s s", grace)
        if self._reg_server is not None:
            self._reg_server.stop(None).wait()
        self._remove_own_socket(self.registration_socket)
        if self._dra_server is not None:
            self._dra_server.stop(grace).wait()
        self._remove_own_socket(self.dra_socket)

    def _remove_own_socket(self, path: str) -> None:
        """Unlink ``path`` if it is still the socket we bound, not a successor's."""
        ident = self._bound.pop(path, None)
        if ident is None:
            return
        try:
            st = os.lstat(path)
            if (st.st_dev, st.st_ino) != ident:
                log.warning("not removing %s: another process replaced our socket", path)
                return
            os.unlink(path)
        except FileNotFoundError:
            pass

    # -- the two DRA calls, independent of the API version -----------------------------------


class _DRAService:
    """``DRAPlugin`` of one API version; the messages differ only in v1's ``share_id``."""

    def __init__(self, owner: DRAPluginServer, pb2: Any, version: str, *, share_id: bool) -> None:
        self._owner = owner
        self._pb2 = pb2
        self._version = version
        self._share_id = share_id

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self._owner.in_flight:
            return self._prepare(request)

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self._owner.in_flight:
            return self._unprepare(request)

    def _prepare(self, request: Any) -> Any:
        claims = _claim_refs(request.claims)
        results = prepare_answers(self._owner._prepare_cb, claims)
        response = self._pb2.NodePrepareResourcesResponse()
        failed = 0
        for uid, (devices, error) in results.items():
            entry = response.claims[uid]  # creates the entry, also for a claim with no devices
            if error:
                entry.error = error
                failed += 1
                continue
            for dev in devices:
                out = entry.devices.add(
                    request_names=[dev["request"]] if dev["request"] else [],
                    pool_name=dev["pool"],
                    device_name=dev["device"],
                    cdi_device_ids=dev.get("cdiDeviceIDs") or [],
                )
                if self._share_id and dev["shareID"]:
                    out.share_id = dev["shareID"]
        _log_call("NodePrepareResources", self._version, claims, failed)
        return response

    def _unprepare(self, request: Any) -> Any:
        claims = _claim_refs(request.claims)
        results = unprepare_answers(self._owner._unprepare_cb, claims)
        response = self._pb2.NodeUnprepareResourcesResponse()
        failed = 0
        for uid, error in results.items():
            entry = response.claims[uid]
            if error:
                entry.error = error
                failed += 1
        _log_call("NodeUnprepareResources", self._version, claims, failed)
        return response


class _RegistrationService:
    def __init__(self, owner: DRAPluginServer) -> None:
        self._owner = owner

    def GetInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        log.debug("kubelet asked for plugin info of %s", self._owner.driver)
        return registration_pb2.PluginInfo(
            type=PLUGIN_TYPE,
            name=self._owner.driver,
            endpoint=self._owner.dra_socket,
            supported_versions=list(self._owner.services),
        )

    def NotifyRegistrationStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._owner._record_registration(request.plugin_registered, request.error)
        return registration_pb2.RegistrationStatusResponse()


def _claim_refs(claims: Iterable[Any]) -> list[ClaimRef]:
    refs: list[ClaimRef] = []
    seen: set[str] = set()
    for c in claims:
        if c.uid in seen:  # kubelet sends each claim once; a response map holds one entry anyway
            continue
        seen.add(c.uid)
        refs.append(ClaimRef(namespace=c.namespace, uid=c.uid, name=c.name))
    return refs


def _log_call(call: str, version: str, claims: list[ClaimRef], failed: int) -> None:
    """One line per call; each failed claim has its line from the helper."""
    log.info("%s (%s): %d claims, %d failed", call, version, len(claims), failed)
