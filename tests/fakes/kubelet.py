"""A fake kubelet: a real gRPC client that registers DRA plugins and calls them the way
kubelet does (pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go,
pkg/kubelet/cm/dra/plugin/ and pkg/kubelet/cm/dra/manager.go).

Registration, per registration socket found in the registry dir:

1. dial the socket (10 s), ``GetInfo`` with a 1 s deadline;
2. validate: ``type == "DRAPlugin"``, a name (the expected driver, when given), an absolute
   endpoint, and a supported service: kubelet walks the plugin's ``supported_versions`` in
   order and takes the first one it speaks (``v1.DRAPlugin``, ``v1beta1.DRAPlugin``; with
   ``force_v1beta1`` only the latter, like a 1.32/1.33 kubelet);
3. ``NotifyRegistrationStatus(plugin_registered=True)`` (5 s), or ``False`` with the error and
   a :class:`RegistrationError`;
4. dial the endpoint for the DRA calls.

``prepare`` / ``unprepare`` send one batch with a 45 s deadline and check the response like
kubelet: a UID that was not requested, or a requested claim without an entry, raises
:class:`ProtocolError`.  Per-claim errors are *returned* (the response entries, with their
``error``) so tests can look at a mixed batch; ``raise_on_error=True`` raises
:class:`ClaimError` on the first one instead, as kubelet fails the pod's sync.
"""

from __future__ import annotations

import os
import socket
import stat
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from dracni.kubelet.proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    registration_pb2,
    registration_pb2_grpc,
)

PLUGIN_TYPE = "DRAPlugin"
V1 = "v1.DRAPlugin"
V1BETA1 = "v1beta1.DRAPlugin"

DIAL_TIMEOUT = 10.0  # operation_generator.go dialTimeoutDuration
GET_INFO_TIMEOUT = 1.0  # operation_generator.go: GetInfo gets one second
NOTIFY_TIMEOUT = 5.0  # notifyTimeoutDuration
CALL_TIMEOUT = 45.0  # dra_plugin.go defaultClientCallTimeout

_API = {
    V1: (dra_v1_pb2, dra_v1_pb2_grpc),
    V1BETA1: (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc),
}

ClaimTuple = tuple[str, str, str]  # (namespace, uid, name)


class KubeletError(Exception):
    """Base of the fake kubelet's errors."""


class RegistrationError(KubeletError):
    """Registration failed (the plugin was told so, when it could be reached)."""


class ProtocolError(KubeletError):
    """The plugin broke the DRA protocol (a missing or unknown claim UID in a response)."""


class ClaimError(KubeletError):
    """A claim's entry carried an error (only with ``raise_on_error=True``)."""


@dataclass
class Plugin:
    """A registered DRA plugin: what GetInfo said and the service version chosen."""

    driver: str
    endpoint: str
    service: str  # "v1.DRAPlugin" or "v1beta1.DRAPlugin"
    registration_socket: str
    supported_versions: list[str] = field(default_factory=list)
    socket_id: tuple[int, int, int] | None = None  # identity of the registration socket file
    channel: grpc.Channel | None = field(default=None, repr=False)

    @property
    def version(self) -> str:
        return self.service.split(".", 1)[0]


class FakeKubelet:
    """Registers the DRA plugins appearing in ``registry_dir`` and calls them."""

    def __init__(
        self,
        registry_dir: str,
        *,
        driver: str | None = None,
        force_v1beta1: bool = False,
        call_timeout: float = CALL_TIMEOUT,
    ) -> None:
        self.registry_dir = registry_dir
        self.expected_driver = driver
        self.services = (V1BETA1,) if force_v1beta1 else (V1, V1BETA1)  # what this kubelet speaks
        self.call_timeout = call_timeout
        self.plugins: dict[str, Plugin] = {}  # driver -> plugin
        #: every registration attempt: (socket, None or the error sent to the plugin)
        self.attempts: list[tuple[str, str | None]] = []

    # -- registration ------------------------------------------------------------------------

    def registration_sockets(self) -> list[str]:
        """The ``*-reg.sock`` sockets now in the registry dir (kubelet skips dot files)."""
        found = []
        try:
            entries = list(os.scandir(self.registry_dir))
        except FileNotFoundError:
            return []
        for entry in entries:
            if entry.name.startswith(".") or not entry.name.endswith("-reg.sock"):
                continue
            try:
                if stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                    found.append(entry.path)
            except FileNotFoundError:
                continue
        return sorted(found)

    def wait_for_plugin(self, timeout: float = 10.0, poll: float = 0.02) -> Plugin:
        """Poll the registry dir until a new plugin registers; return it.

        A socket that does not answer yet is retried (kubelet's reconciler retries too); a
        plugin that fails validation raises :class:`RegistrationError` at once.
        """
        deadline = time.monotonic() + timeout
        # A plugin that restarted made a new socket at the same path: that is new too.
        known = {(p.registration_socket, p.socket_id) for p in self.plugins.values()}
        last_error: Exception | None = None
        while True:
            for path in self.registration_sockets():
                if (path, _socket_id(path)) in known:
                    continue
                try:  # short dials: this loop is the retry
                    return self.register(path, dial_timeout=0.2)
                except _Unreachable as exc:
                    last_error = exc
            if time.monotonic() >= deadline:
                raise RegistrationError(
                    f"no DRA plugin registered in {self.registry_dir} within {timeout} s"
                    + (f": {last_error}" if last_error else "")
                )
            time.sleep(poll)

    def register(self, socket_path: str, dial_timeout: float = DIAL_TIMEOUT) -> Plugin:
        """Run kubelet's registration against one registration socket."""
        socket_id = _socket_id(socket_path)
        _dial(socket_path, dial_timeout)
        channel = grpc.insecure_channel("unix:" + socket_path)
        try:
            client = registration_pb2_grpc.RegistrationStub(channel)
            try:
                info = client.GetInfo(registration_pb2.InfoRequest(), timeout=GET_INFO_TIMEOUT)
            except grpc.RpcError as exc:
                raise _Unreachable(f"GetInfo at {socket_path}: {exc.code().name}: {exc.details()}") from None

            error = self._validate(info)
            if (
                error is None
                and info.name in self.plugins
                and self.plugins[info.name].endpoint == info.endpoint
                and self.plugins[info.name].registration_socket != socket_path
            ):
                error = f"endpoint {info.endpoint} already registered for DRA driver plugin {info.name}"
            self.attempts.append((socket_path, error))
            if error is not None:
                self._notify(client, False, f"RegisterPlugin error -- plugin validation failed with err: {error}")
                raise RegistrationError(error)

            plugin = Plugin(
                driver=info.name,
                endpoint=info.endpoint,
                service=self._choose_service(info.supported_versions),
                registration_socket=socket_path,
                supported_versions=list(info.supported_versions),
                socket_id=socket_id,
            )
            old = self.plugins.pop(plugin.driver, None)
            if old is not None and old.channel is not None:
                old.channel.close()
            plugin.channel = grpc.insecure_channel("unix:" + plugin.endpoint)
            self.plugins[plugin.driver] = plugin
            self._notify(client, True, "")
            return plugin
        finally:
            channel.close()

    def _validate(self, info: Any) -> str | None:
        if info.type != PLUGIN_TYPE:
            return f"no handler registered for plugin type: {info.type!r}"
        if not info.name:
            return "empty plugin name"
        if self.expected_driver is not None and info.name != self.expected_driver:
            return f"plugin name {info.name!r} is not the expected driver {self.expected_driver!r}"
        if not info.endpoint or not os.path.isabs(info.endpoint):
            return f"endpoint {info.endpoint!r} of DRA driver plugin {info.name} is not an absolute path"
        if not info.supported_versions:
            return "empty list of supported gRPC services (aka supported versions)"
        if not any(v in self.services for v in info.supported_versions):
            return (
                f"none of services supported by the plugin ({list(info.supported_versions)}) "
                f"are supported by the kubelet ({list(self.services)})"
            )
        return None

    def _choose_service(self, supported: Sequence[str]) -> str:
        return next(v for v in supported if v in self.services)  # plugin's order, as kubelet

    @staticmethod
    def _notify(client: Any, registered: bool, error: str) -> None:
        try:
            client.NotifyRegistrationStatus(
                registration_pb2.RegistrationStatus(plugin_registered=registered, error=error),
                timeout=NOTIFY_TIMEOUT,
            )
        except grpc.RpcError as exc:
            raise RegistrationError(f"NotifyRegistrationStatus failed: {exc.code().name}: {exc.details()}") from None

    # -- the DRA calls -----------------------------------------------------------------------

    def plugin(self, driver: str | None = None) -> Plugin:
        if driver is None:
            if len(self.plugins) != 1:
                raise KubeletError(f"name the driver: {len(self.plugins)} plugins are registered")
            return next(iter(self.plugins.values()))
        try:
            return self.plugins[driver]
        except KeyError:
            raise KubeletError(f"DRA driver {driver} is not registered") from None

    def prepare(
        self, claims: Iterable[ClaimTuple], *, driver: str | None = None, raise_on_error: bool = False
    ) -> dict[str, Any]:
        """NodePrepareResources: uid -> ``NodePrepareResourceResponse`` of the chosen version."""
        return self._call("NodePrepareResources", claims, driver, raise_on_error)

    def unprepare(
        self, claims: Iterable[ClaimTuple], *, driver: str | None = None, raise_on_error: bool = False
    ) -> dict[str, Any]:
        """NodeUnprepareResources: uid -> ``NodeUnprepareResourceResponse`` of the chosen version."""
        return self._call("NodeUnprepareResources", claims, driver, raise_on_error)

    def _call(self, method: str, claims: Iterable[ClaimTuple], driver: str | None, raise_on_error: bool) -> dict:
        plugin = self.plugin(driver)
        pb2, pb2_grpc = _API[plugin.service]
        requested = [pb2.Claim(namespace=ns, uid=uid, name=name) for ns, uid, name in claims]
        request_type = getattr(pb2, method + "Request")
        stub = pb2_grpc.DRAPluginStub(plugin.channel)
        response = getattr(stub, method)(request_type(claims=requested), timeout=self.call_timeout)

        by_uid = {c.uid: c for c in requested}
        results = dict(response.claims)
        unknown = sorted(set(results) - set(by_uid))
        if unknown:
            raise ProtocolError(f"{method} returned result for unknown claim UID {', '.join(unknown)}")
        missing = sorted(set(by_uid) - set(results))
        if missing:
            raise ProtocolError(f"{method} left out {len(missing)} claims: {', '.join(missing)}")
        if raise_on_error:
            for uid, entry in results.items():
                if entry.error:
                    c = by_uid[uid]
                    raise ClaimError(f"{method} failed for claim {c.namespace}/{c.name}: {entry.error}")
        return results

    # -- teardown ----------------------------------------------------------------------------

    def close(self) -> None:
        for plugin in self.plugins.values():
            if plugin.channel is not None:
                plugin.channel.close()
        self.plugins.clear()

    def __enter__(self) -> FakeKubelet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Unreachable(RegistrationError):
    """The registration socket did not answer (yet)."""


def _socket_id(path: str) -> tuple[int, int, int] | None:
    """Tells a re-created socket from the old one (a freed inode number is soon reused)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


def _dial(path: str, timeout: float) -> None:
    """Wait until ``path`` accepts a connection, like kubelet's blocking dial.  A raw
    connect: gRPC's channel_ready_future polls in 0.2 s steps."""
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            try:
                sock.connect(path)
                return
            except OSError as exc:
                if time.monotonic() >= deadline:
                    raise _Unreachable(f"dial {path} failed: {exc}") from None
        time.sleep(0.01)
