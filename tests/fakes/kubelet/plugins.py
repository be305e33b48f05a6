"""kubelet's plugin manager and DRA plugin manager, over real unix sockets.

Modelled on (kubernetes/kubernetes, 1.34-1.36):

- ``pkg/kubelet/pluginmanager/pluginwatcher/plugin_watcher.go`` ``traversePluginDir`` /
  ``handleCreateEvent`` / ``handleDeleteEvent``: every unix socket under the registry dir (sub
  dirs too) whose name does not start with ``.`` is a plugin to register; a socket re-created
  at the same path is a new plugin (``AddOrUpdatePlugin`` updates its timestamp; here: the
  socket file's identity).  The fake scans instead of using inotify.
- ``pkg/kubelet/pluginmanager/reconciler/reconciler.go`` ``reconcile``: unregister first
  (socket gone, or re-created), then register what is not registered; run every
  ``reconcile_period`` (``loopSleepDuration``, 1 s) by :meth:`PluginManager.start`, or one
  pass at a time by :meth:`PluginManager.reconcile` (``FakeKubelet.wait_for_plugin`` does).  A registration that failed is retried
  after an exponential backoff (``goroutinemap/exponentialbackoff``: 500 ms doubling to 2 min 2 s).
- ``pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go``
  ``GenerateRegisterPluginFunc``: dial (10 s), ``GetInfo`` (1 s), a handler for the type, an
  empty endpoint means the socket itself, ``ValidatePlugin``, add to the actual state *before*
  ``RegisterPlugin`` (so a failing ``RegisterPlugin`` is not retried), then
  ``NotifyRegistrationStatus`` (5 s); ``GenerateUnregisterPluginFunc``: remove, then
  ``DeRegisterPlugin``.
- ``pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go``, the one handler (``DRAPlugin`` type):
  :class:`.draplugins.DRAPluginManager`, which :class:`PluginManager` extends; several
  instances of one driver, each with its own registration socket, are each their own
  registration here and one instance there.  gRPC's connection events are observed by dialling
  each endpoint every ``poll`` seconds while the manager runs.

Not modelled: the health stream (``NodeWatchResources``) is another fake's job
(tests/fakes/kubelet_health.py).
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from .draplugins import (
    CALL_TIMEOUT,
    SERVICES,
    WIPING_DELAY,
    DRAPluginManager,
    KubeletError,
    Plugin,
    SocketId,
    _accepts,
)
from .protos import APIS

PLUGIN_TYPE = "DRAPlugin"

DIAL_TIMEOUT = 10.0  # operation_generator.go dialTimeoutDuration
GET_INFO_TIMEOUT = 1.0  # operation_generator.go: GetInfo gets one second
NOTIFY_TIMEOUT = 5.0  # operation_generator.go notifyTimeoutDuration
RECONCILE_PERIOD = 1.0  # plugin_manager.go loopSleepDuration
BACKOFF_INITIAL = 0.5  # exponentialbackoff.go initialDurationBeforeRetry
BACKOFF_MAX = 122.0  # exponentialbackoff.go maxDurationBeforeRetry (2 min 2 s)


class RegistrationError(KubeletError):
    """Registration failed (the plugin was told so, when it could be reached)."""


class Unreachable(RegistrationError):
    """The registration socket did not answer (yet): the reconciler tries again."""


@dataclass
class Attempt:
    """One registration attempt: the socket, and None or the error (sent to the plugin when reachable)."""

    socket: str
    error: str | None


class PluginManager(DRAPluginManager):
    """The plugin watcher, reconciler and operation executor of one kubelet, with its DRA
    registration handler (the base class: ``store``, ``get``, ``sync``, wipes).

    ``expected_driver``, ``services``, ``call_timeout``, ``wipe`` and ``wiping_delay`` are the
    handler's (:class:`.draplugins.DRAPluginManager`).
    """

    def __init__(
        self,
        registry_dir: str,
        *,
        expected_driver: str | None = None,
        services: tuple[str, ...] = SERVICES,
        call_timeout: float = CALL_TIMEOUT,
        wipe: Callable[[str], None] | None = None,
        wiping_delay: float = WIPING_DELAY,
        poll: float = 0.05,
        reconcile_period: float = RECONCILE_PERIOD,
    ) -> None:
        super().__init__(
            expected_driver=expected_driver,
            services=services,
            call_timeout=call_timeout,
            wipe=wipe,
            wiping_delay=wiping_delay,
        )
        self.registry_dir = registry_dir
        self.reconcile_period = reconcile_period
        self.poll = poll
        #: actual state of the world (actual_state_of_world.go): registration socket -> its
        #: instance; one entry per socket, so two instances of one driver are two entries
        self.registered: dict[str, Plugin] = {}
        #: every registration attempt, in order
        self.attempts: list[Attempt] = []
        self._backoff: dict[tuple[str, SocketId | None], tuple[float, float]] = {}  # -> (retry at, last delay)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- plugin watcher: the desired state of the world -----------------------------------------
    def registration_sockets(self) -> dict[str, SocketId]:
        """Sockets now under the registry dir (plugin_watcher.go ``traversePluginDir``)."""
        found: dict[str, SocketId] = {}
        for root, dirs, files in os.walk(self.registry_dir):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                if name.startswith("."):  # handleCreateEvent: names MUST NOT start with '.'
                    continue
                path = os.path.join(root, name)
                try:
                    st = os.lstat(path)
                except FileNotFoundError:
                    continue
                if stat.S_ISSOCK(st.st_mode):
                    found[path] = (st.st_dev, st.st_ino, st.st_ctime_ns)
        return found

    # -- reconciler --------------------------------------------------------------------------------
    def reconcile(self, dial_timeout: float = 0.2, backoff: bool = True) -> list[Plugin | RegistrationError]:
        """One ``reconcile`` pass; what each registration gave (new plugins and errors).

        Dials are short: a socket that does not answer is tried again on the next pass, as
        the reconciler retries a failed operation.
        """
        outcomes: list[Plugin | RegistrationError] = []
        with self.lock:
            desired = self.registration_sockets()
            for path, plugin in list(self.registered.items()):
                if desired.get(path) != plugin.socket_id:  # gone, or re-created: unregister first
                    self.unregister(path)
            now = time.monotonic()
            for path, socket_id in desired.items():
                if path in self.registered:
                    continue
                key = (path, socket_id)
                if backoff and key in self._backoff and now < self._backoff[key][0]:
                    continue
                try:
                    outcomes.append(self.register(path, dial_timeout=dial_timeout))
                    self._backoff.pop(key, None)
                except RegistrationError as exc:
                    last = self._backoff.get(key, (0.0, 0.0))[1]
                    delay = min(BACKOFF_MAX, last * 2 if last else BACKOFF_INITIAL)
                    self._backoff[key] = (now + delay, delay)
                    outcomes.append(exc)
            self.monitor_connections()
        return outcomes

    def start(self) -> None:
        """Run the reconciler (and the connection monitor) in the background."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="fake-kubelet-plugins", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last_reconcile = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now - last_reconcile >= self.reconcile_period:
                self.reconcile()
                last_reconcile = now
            else:
                with self.lock:
                    self.monitor_connections()
            self._stop.wait(self.poll)

    def stop(self) -> None:
        """Stop the background loop; cancel pending wipes; close every connection (``Stop``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        with self.lock:
            self.close_connections()
            self.registered.clear()

    # -- operation generator -------------------------------------------------------------------------
    def register(self, socket_path: str, dial_timeout: float = DIAL_TIMEOUT) -> Plugin:
        """``GenerateRegisterPluginFunc`` against one registration socket."""
        with self.lock:
            socket_id = _socket_id(socket_path)
            _dial(socket_path, dial_timeout)
            channel = grpc.insecure_channel("unix:" + socket_path)
            reg = APIS.registration
            try:
                try:
                    info = reg.unary(channel, "Registration", "GetInfo")(reg.InfoRequest(), timeout=GET_INFO_TIMEOUT)
                except grpc.RpcError as exc:
                    raise Unreachable(f"GetInfo at {socket_path}: {exc.code().name}: {exc.details()}") from None
                notify = reg.unary(channel, "Registration", "NotifyRegistrationStatus")

                if info.type != PLUGIN_TYPE:
                    error = f"RegisterPlugin error -- no handler registered for plugin type: {info.type} at socket {socket_path}"
                    self._refuse(notify, socket_path, error)
                endpoint = info.endpoint or socket_path
                problem = self.validate(info.name, endpoint, list(info.supported_versions))
                if problem is not None:
                    self._refuse(
                        notify, socket_path, f"RegisterPlugin error -- plugin validation failed with err: {problem}"
                    )
                old = self.registered.get(socket_path)
                if old is not None:  # re-created under our feet: the reconciler unregisters first
                    self.unregister(socket_path)
                plugin = Plugin(
                    driver=info.name,
                    endpoint=endpoint,
                    service=self._choose_service(list(info.supported_versions)),
                    registration_socket=socket_path,
                    supported_versions=list(info.supported_versions),
                    socket_id=socket_id,
                    call_timeout=self.call_timeout,
                )
                self.registered[socket_path] = plugin  # actual state first, as upstream
                problem = self._add(plugin)
                if problem is not None:
                    self._refuse(
                        notify, socket_path, f"RegisterPlugin error -- plugin registration failed with err: {problem}"
                    )
                self.attempts.append(Attempt(socket_path, None))
                _notify(notify, True, "")
                return plugin
            finally:
                channel.close()

    def _refuse(self, notify: Any, socket_path: str, error: str) -> None:
        self.attempts.append(Attempt(socket_path, error))
        _notify(notify, False, error)
        raise RegistrationError(error)

    def unregister(self, socket_path: str) -> None:
        """``GenerateUnregisterPluginFunc``: forget the socket, then ``DeRegisterPlugin``."""
        with self.lock:
            plugin = self.registered.pop(socket_path, None)
            if plugin is not None:
                self._remove(plugin.driver, plugin.endpoint)

    def close(self) -> None:
        self.stop()


def _notify(notify: Any, registered: bool, error: str) -> None:
    """``notifyPlugin``."""
    try:
        notify(APIS.registration.RegistrationStatus(plugin_registered=registered, error=error), timeout=NOTIFY_TIMEOUT)
    except grpc.RpcError as exc:
        raise RegistrationError(f"NotifyRegistrationStatus failed: {exc.code().name}: {exc.details()}") from None


def _socket_id(path: str) -> SocketId | None:
    """Tells a re-created socket from the old one (a freed inode number is soon reused)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


def _dial(path: str, timeout: float) -> None:
    """Wait until ``path`` accepts a connection, like the registration's blocking dial.  A
    raw connect: gRPC's channel_ready_future polls in 0.2 s steps."""
    deadline = time.monotonic() + timeout
    while True:
        if _accepts(path):
            return
        if time.monotonic() >= deadline:
            raise Unreachable(f"dial {path} failed: it does not accept connections")
        time.sleep(0.01)
