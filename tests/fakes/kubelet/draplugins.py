"""kubelet's DRA plugin manager: the registration handler for the ``DRAPlugin`` type, which
keeps, per driver, every registered instance with its gRPC connection, and picks the one a call
goes to.

Modelled on (kubernetes/kubernetes, 1.33-1.36) ``pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go``
and ``dra_plugin.go``.  Since 1.33 a driver may run several instances side by side on one node
(the helper's ``kubeletplugin.RollingUpdate(podUID)`` in
staging/src/k8s.io/dynamic-resource-allocation/kubeletplugin/draplugin.go ``Start`` names the
registration socket ``<driver>-<podUID>-reg.sock`` and the endpoint ``dra-<podUID>.sock``, so
each pod of a surging DaemonSet registers on its own).  kubelet does not read those names: each
registration socket is one registration (the reconciler's actual state is keyed by socket path),
and every registration adds one instance here.  The rules, each where it is modelled:

- ``DRAPluginManager.store``: driver -> instances in the order they were added;
- ``add``: a second registration naming an endpoint an instance of the driver already has is
  refused ("One plugin instance cannot hijack the endpoint of another instance"); the same
  registration socket re-created is unregistered first by the reconciler, so it comes back as
  the newest instance with the same endpoint;
- ``remove`` (``DeRegisterPlugin``): only that instance goes, the others stay;
- ``GetPlugin``/``get``: the most recently added *connected* instance, else the most recent
  one: the newest registered instance gets the calls, and when it unregisters or its
  connection ends the calls go to the remaining one (fallback); which one serves a call is
  decided per call, so a call may reach either while both are registered;
- ``monitoredPlugin.HandleConn``: a connection began or ended -> ``sync``; gRPC's connection
  events are observed by dialling each endpoint (``monitor_connections``);
- ``sync``/``usable``: the driver's ResourceSlices are wiped ``wipingDelay`` (30 s) after no
  instance is connected any more (the last one gone, or all disconnected), unless one
  connects first; while one instance remains connected nothing is queued;
- ``Stop``: every connection closed, pending wipes cancelled.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from .protos import APIS

V1 = "v1.DRAPlugin"
V1BETA1 = "v1beta1.DRAPlugin"
#: dra_plugin.go servicesSupportedByKubelet, most recent first
SERVICES = (V1, V1BETA1)
CALL_TIMEOUT = 45.0  # dra_plugin.go defaultClientCallTimeout
WIPING_DELAY = 30.0  # manager.go defaultWipingDelay

SocketId = tuple[int, int, int]


class KubeletError(Exception):
    """Base of the fake kubelet's errors."""


@dataclass
class Plugin:
    """One registered instance of a DRA driver (dra_plugin.go ``DRAPlugin`` plus
    ``monitoredPlugin.connected``)."""

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


class DRAPluginManager:
    """The DRA registration handler (``DRAPluginManager``): instances per driver, the choice of
    the instance a call goes to, connection tracking and ResourceSlice wiping.

    ``expected_driver`` is the fake's own check (not upstream's): a test kubelet that wants one
    driver refuses others as a failed validation.  ``wipe(driver)`` deletes the driver's
    ResourceSlices (None: kubelet without an API client, which cannot wipe: ``sync``).
    """

    def __init__(
        self,
        *,
        expected_driver: str | None = None,
        services: tuple[str, ...] = SERVICES,
        call_timeout: float = CALL_TIMEOUT,
        wipe: Callable[[str], None] | None = None,
        wiping_delay: float = WIPING_DELAY,
    ) -> None:
        self.expected_driver = expected_driver
        self.services = services
        self.call_timeout = call_timeout
        self.wipe = wipe
        self.wiping_delay = wiping_delay
        self.lock = threading.RLock()
        #: dra_plugin_manager.go ``store``: driver -> instances in the order they were added
        self.store: dict[str, list[Plugin]] = {}
        #: (driver, when) of every wipe that fired after a driver went away
        self.wipes_fired: list[tuple[str, float]] = []
        self._pending_wipes: dict[str, threading.Timer] = {}

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
        """``validateSupportedServices``: the plugin's first service kubelet speaks."""
        return next(s for s in supported if s in self.services)

    def _add(self, plugin: Plugin) -> str | None:
        """``add``: an endpoint belongs to one instance of the driver; a channel; connect;
        appended as the newest instance; then ``sync``."""
        with self.lock:
            for old in self.store.get(plugin.driver, []):
                if old.endpoint == plugin.endpoint:  # no hijacking of another instance's endpoint
                    return f"endpoint {plugin.endpoint} already registered for DRA driver plugin {plugin.driver}"
            plugin.channel = grpc.insecure_channel("unix:" + plugin.endpoint)
            plugin.connected = _accepts(plugin.endpoint)  # conn.Connect(), and ConnBegin when it answers
            self.store.setdefault(plugin.driver, []).append(plugin)
            self.sync(plugin.driver)
            return None

    def _remove(self, driver: str, endpoint: str) -> None:
        """``remove``: drop that one instance (the driver's entry only with its last), close
        its connection, ``sync``."""
        with self.lock:
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
        """``GetPlugin``/``get``: the most recently added connected instance, else the most
        recently added one."""
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

    def instances(self, driver: str) -> list[Plugin]:
        """The driver's registered instances, oldest first (a copy of its ``store`` entry)."""
        with self.lock:
            return list(self.store.get(driver, []))

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
        """``sync``: ``usable`` (one instance connected) cancels a pending wipe; unusable queues
        one (once: the original deadline stands)."""
        if self.wipe is None:
            return  # no API client: cannot wipe
        with self.lock:
            if any(p.connected for p in self.store.get(driver, [])):  # usable
                timer = self._pending_wipes.pop(driver, None)
                if timer is not None:
                    timer.cancel()
                return
            if driver in self._pending_wipes:
                return
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

    def close_connections(self) -> None:
        """``Stop``: cancel pending wipes, close every connection."""
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


def _quoted(values: list[str]) -> str:
    """Go's ``%q`` of a ``[]string``."""
    return "[" + " ".join(f'"{v}"' for v in values) + "]"


def _accepts(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(path)
            return True
        except OSError:
            return False
