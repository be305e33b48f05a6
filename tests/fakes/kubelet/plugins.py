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
- ``pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go``: ``validateSupportedServices`` (the
  plugin's first service kubelet speaks), ``add`` (one endpoint per driver: "endpoint ...
  already registered"), ``remove``, ``GetPlugin``/``get`` (newest connected plugin, else the
  newest), ``HandleConn`` (connected or not, then ``sync``), ``sync`` (a driver with no
  connected plugin gets its ResourceSlices wiped after ``wipingDelay``, 30 s, unless one
  connects first), ``wipeResourceSlices`` (see :mod:`.kube`).  gRPC's connection events are
  observed here by dialling each endpoint every ``poll`` seconds while the manager runs.
- ``pkg/kubelet/cm/dra/plugin/dra_plugin.go``: ``defaultClientCallTimeout`` (45 s) per call,
  the chosen service's client.

Not modelled: several plugins of one driver at once are kept, but the health stream
(``NodeWatchResources``) is another fake's job (tests/fakes/kubelet_health.py).
"""

from __future__ import annotations

import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from .protos import APIS

PLUGIN_TYPE = "DRAPlugin"
V1 = "v1.DRAPlugin"
V1BETA1 = "v1beta1.DRAPlugin"
#: dra_plugin.go servicesSupportedByKubelet, most recent first
SERVICES = (V1, V1BETA1)

DIAL_TIMEOUT = 10.0  # operation_generator.go dialTimeoutDuration
GET_INFO_TIMEOUT = 1.0  # operation_generator.go: GetInfo gets one second
NOTIFY_TIMEOUT = 5.0  # operation_generator.go notifyTimeoutDuration
CALL_TIMEOUT = 45.0  # dra_plugin.go defaultClientCallTimeout
WIPING_DELAY = 30.0  # manager.go defaultWipingDelay
RECONCILE_PERIOD = 1.0  # plugin_manager.go loopSleepDuration
BACKOFF_INITIAL = 0.5  # exponentialbackoff.go initialDurationBeforeRetry
BACKOFF_MAX = 122.0  # exponentialbackoff.go maxDurationBeforeRetry (2 min 2 s)


class KubeletError(Exception):
    """Base of the fake kubelet's errors."""


class RegistrationError(KubeletError):
    """Registration failed (the plugin was told so, when it could be reached)."""


class Unreachable(RegistrationError):
    """The registration socket did not answer (yet): the reconciler tries again."""


SocketId = tuple[int, int, int]


@dataclass
class Plugin:
    """A registered DRA plugin (dra_plugin.go ``DRAPlugin`` plus ``monitoredPlugin.connected``)."""

    driver: str
    endpoint: str
    service: str  # the chosen service: "v1.DRAPlugin" or "v1beta1.DRAPlugin"
    registration_socket: str
    supported_versions: list[str] = field(default_factory=list)
    socket_id: SocketId | None = None  # identity of the registration socket file (its "timestamp")
    call_timeout: float = CALL_TIMEOUT
    connected: bool = False
    channel: grpc.Channel | None = field(default=None, repr=False)

    @property
    def version(self) -> str:
        return self.service.split(".", 1)[0]

    @property
    def api(self) -> Any:
        """The proto package of the chosen service (message classes)."""
        return APIS.dra[self.service]

    def call(self, method: str, claims: list[tuple[str, str, str]]) -> Any:
        """``NodePrepareResources``/``NodeUnprepareResources`` with the chosen service's client
        (dra_plugin.go ``NodePrepareResources``): the raw response; gRPC errors propagate."""
        if self.channel is None:
            raise KubeletError(f"DRA driver {self.driver} plugin at {self.endpoint} is closed")
        api = self.api
        request = getattr(api, method + "Request")(
            claims=[api.Claim(namespace=ns, uid=uid, name=name) for ns, uid, name in claims]
        )
        return api.unary(self.channel, "DRAPlugin", method)(request, timeout=self.call_timeout)


@dataclass
class Attempt:
    """One registration attempt: the socket, and None or the error (sent to the plugin when reachable)."""

    socket: str
    error: str | None


class PluginManager:
    """The plugin watcher, reconciler and DRA registration handler of one kubelet.

    ``expected_driver`` is the fake's own check (not upstream's): a test kubelet that wants
    one driver refuses others as a failed validation.  ``wipe(driver)`` deletes the driver's
    ResourceSlices (None: kubelet without an API client, which cannot wipe: dra_plugin_manager.go ``sync``).
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
        self.registry_dir = registry_dir
        self.reconcile_period = reconcile_period
        self.expected_driver = expected_driver
        self.services = services
        self.call_timeout = call_timeout
        self.wipe = wipe
        self.wiping_delay = wiping_delay
        self.poll = poll
        self.lock = threading.RLock()
        #: actual state of the world: registration socket -> its plugin
        self.registered: dict[str, Plugin] = {}
        #: the DRA handler's store: driver -> plugins in the order they were added
        self.store: dict[str, list[Plugin]] = {}
        #: every registration attempt, in order
        self.attempts: list[Attempt] = []
        #: (driver, when) of every wipe that fired after a driver went away
        self.wipes_fired: list[tuple[str, float]] = []
        self._pending_wipes: dict[str, threading.Timer] = {}
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
            for timer in self._pending_wipes.values():
                timer.cancel()
            self._pending_wipes.clear()
            for plugins in self.store.values():
                for plugin in plugins:
                    if plugin.channel is not None:
                        plugin.channel.close()
                        plugin.channel = None
            self.store.clear()
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

    # -- the DRA registration handler (dra_plugin_manager.go) --------------------------------------
    def validate(self, driver: str, endpoint: str, supported: list[str]) -> str | None:
        """``ValidatePlugin`` / ``validateSupportedServices``; first the fake's own expected-driver check."""
        if self.expected_driver is not None and driver != self.expected_driver:
            return f"plugin name {driver!r} is not the expected driver {self.expected_driver!r}"
        prefix = f"invalid supported gRPC versions of DRA driver plugin {driver} at endpoint {endpoint}"
        if not supported:
            return f"{prefix}: empty list of supported gRPC services (aka supported versions)"
        if not any(s in self.services for s in supported):
            return (
                f"{prefix}: none of services supported by the plugin ({_quoted(supported)}) "
                f"are supported by the kubelet ({_quoted(list(self.services))})"
            )
        return None

    def _choose_service(self, supported: list[str]) -> str:
        return next(s for s in supported if s in self.services)  # the plugin's order, as kubelet

    def _add(self, plugin: Plugin) -> str | None:
        """``add``: one endpoint per driver; a channel; connect; then ``sync``."""
        for old in self.store.get(plugin.driver, []):
            if old.endpoint == plugin.endpoint:
                return f"endpoint {plugin.endpoint} already registered for DRA driver plugin {plugin.driver}"
        plugin.channel = grpc.insecure_channel("unix:" + plugin.endpoint)
        plugin.connected = _accepts(plugin.endpoint)  # conn.Connect(), and ConnBegin when it answers
        self.store.setdefault(plugin.driver, []).append(plugin)
        self.sync(plugin.driver)
        return None

    def _remove(self, driver: str, endpoint: str) -> None:
        """``remove``: drop the plugin, close its connection, ``sync``."""
        plugins = self.store.get(driver, [])
        for i, plugin in enumerate(plugins):
            if plugin.endpoint == endpoint:
                del plugins[i]
                if not plugins:
                    del self.store[driver]
                if plugin.channel is not None:
                    plugin.channel.close()
                    plugin.channel = None
                self.sync(driver)
                return

    def get(self, driver: str) -> Plugin:
        """``GetPlugin``: the newest connected plugin of the driver, else the newest one."""
        if not driver:
            raise KubeletError("DRA driver name is empty")
        with self.lock:
            plugins = self.store.get(driver) or []
            if not plugins:
                raise KubeletError(f"DRA driver {driver} is not registered")
            for plugin in reversed(plugins):
                if plugin.connected:
                    return plugin
            return plugins[-1]

    def monitor_connections(self) -> None:
        """``monitoredPlugin.HandleConn``: a connection began or ended -> ``sync``."""
        with self.lock:
            for driver, plugins in list(self.store.items()):
                changed = False
                for plugin in plugins:
                    now = _accepts(plugin.endpoint)
                    if now != plugin.connected:
                        plugin.connected = now
                        changed = True
                if changed:
                    self.sync(driver)

    def sync(self, driver: str) -> None:
        """``sync``: usable again cancels a pending wipe; unusable queues one (once)."""
        if self.wipe is None:
            return  # no API client: cannot wipe
        with self.lock:
            if any(p.connected for p in self.store.get(driver, [])):  # usable
                timer = self._pending_wipes.pop(driver, None)
                if timer is not None:
                    timer.cancel()
                return
            if driver in self._pending_wipes:
                return  # already queued: the original deadline stands
            timer = threading.Timer(self.wiping_delay, self._fire_wipe, args=(driver,))
            timer.daemon = True
            self._pending_wipes[driver] = timer
            timer.start()

    def pending_wipes(self) -> list[str]:
        with self.lock:
            return sorted(self._pending_wipes)

    def _fire_wipe(self, driver: str) -> None:
        with self.lock:
            if self._pending_wipes.pop(driver, None) is None:
                return  # cancelled meanwhile
            self.wipes_fired.append((driver, time.monotonic()))
        assert self.wipe is not None
        self.wipe(driver)

    def close(self) -> None:
        self.stop()


def _notify(notify: Any, registered: bool, error: str) -> None:
    """``notifyPlugin``."""
    try:
        notify(APIS.registration.RegistrationStatus(plugin_registered=registered, error=error), timeout=NOTIFY_TIMEOUT)
    except grpc.RpcError as exc:
        raise RegistrationError(f"NotifyRegistrationStatus failed: {exc.code().name}: {exc.details()}") from None


def _quoted(values: list[str]) -> str:
    """Go's ``%q`` of a ``[]string``."""
    return "[" + " ".join(f'"{v}"' for v in values) + "]"


def _socket_id(path: str) -> SocketId | None:
    """Tells a re-created socket from the old one (a freed inode number is soon reused)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


def _accepts(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(path)
            return True
        except OSError:
            return False


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
