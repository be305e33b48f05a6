"""Kubelet's side of the DRA device health stream (KEP-4680, feature gate ResourceHealthStatus),
modelled on kubelet's code, with its own protos: it compiles ``spec/k8s.io/kubelet/pkg/apis/``
with grpc_tools.protoc into a private descriptor pool and imports nothing from ``dracni``.

Which service kubelet dials (``health_service_for``):

- 1.34, 1.35, 1.36: with ResourceHealthStatus on, ``DRAPluginManager.add`` starts a goroutine
  per registered plugin that calls ``v1alpha1.DRAResourceHealth/NodeWatchResources``,
  whatever the plugin advertised (pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go ``add``,
  dra_plugin.go ``NodeWatchResources``);
- 1.37: only when the plugin's registration lists a health service, v1 first, else v1alpha1
  (dra_plugin_manager.go ``pickHealthService``, ``healthServicesSupportedByKubelet``; the
  v1alpha1 fallback is kept for three releases, dra-health/v1/conversion.go).

How it watches (``HealthWatcher``):

- the stream is (re)started by ``wait.UntilWithContext(..., 5*time.Second)``: after a failed
  dial, an error or the end of a stream, again 5 s after the last attempt returned
  (dra_plugin_manager.go ``add``); 1.37 stops for good on UNIMPLEMENTED
  (``healthStreamTerminated``), 1.34-1.36 keep retrying (and logging);
- every response goes through ``updateHealthInfo`` (pkg/kubelet/cm/dra/healthinfo.go): each
  reported device is stamped with the *receipt* time, its timeout is its
  ``health_check_timeout_seconds`` when positive, else 30 s (``DefaultHealthTimeout``;
  manager.go ``HandleWatchResourcesStream``); a device the report leaves out turns Unknown once
  its timeout has passed;
- reading a device (``getHealthInfo``): Unknown when never reported or stale;
- when a stream ends, the driver's whole cache is cleared (``HandleWatchResourcesStream``'s
  deferred ``clearDriver``): every device reads Unknown until the next stream reports it;
- the pod's status shows each device as ``{resourceID, health}``, the ID being the device's
  first CDI ID or ``<driver>/<pool>/<device>`` (manager.go ``UpdateAllocatedResourcesStatus``).
"""

from __future__ import annotations

import functools
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

SPEC = Path(__file__).resolve().parents[2] / "spec"
APIS = "k8s.io/kubelet/pkg/apis"

V1 = "v1.DRAResourceHealth"
V1BETA1 = "v1beta1.DRAResourceHealth"
V1ALPHA1 = "v1alpha1.DRAResourceHealth"
_PACKAGE = {V1: "v1", V1BETA1: "v1beta1", V1ALPHA1: "v1alpha1"}

HEALTHY, UNHEALTHY, UNKNOWN = "Healthy", "Unhealthy", "Unknown"  # state.DeviceHealthStatus
DEFAULT_HEALTH_TIMEOUT = 30.0  # healthinfo.go DefaultHealthTimeout
RETRY_INTERVAL = 5.0  # dra_plugin_manager.go add: wait.UntilWithContext(..., 5*time.Second)
GET_INFO_TIMEOUT = 1.0  # operation_generator.go: GetInfo gets one second


# -- protos -----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _pool() -> Any:
    """The kubelet protos of spec/, compiled into a descriptor pool of our own."""
    from google.protobuf import descriptor_pb2, descriptor_pool
    from grpc_tools import protoc

    files = [f"{APIS}/dra-health/{v}/api.proto" for v in ("v1", "v1beta1", "v1alpha1")]
    files.append(f"{APIS}/pluginregistration/v1/api.proto")
    with tempfile.TemporaryDirectory(prefix="kubelet-health-") as tmp:
        out = os.path.join(tmp, "protos.pb")
        code = protoc.main(["protoc", f"-I{SPEC}", f"--descriptor_set_out={out}", *files])
        if code != 0:
            raise RuntimeError(f"protoc failed ({code}) on {files}")
        fds = descriptor_pb2.FileDescriptorSet.FromString(Path(out).read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for proto in fds.file:
        pool.Add(proto)
    return pool


def message(full_name: str) -> Any:
    """The message class ``full_name`` (e.g. ``v1.NodeWatchResourcesResponse``)."""
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(_pool().FindMessageTypeByName(full_name))


def health_name(service: str, value: int) -> str:
    """HealthStatus number -> kubelet's string (manager.go HandleWatchResourcesStream)."""
    enum = _pool().FindEnumTypeByName(f"{_PACKAGE[service]}.HealthStatus")
    name = enum.values_by_number[value].name if value in enum.values_by_number else "UNKNOWN"
    return {"HEALTHY": HEALTHY, "UNHEALTHY": UNHEALTHY}.get(name, UNKNOWN)


# -- which service ----------------------------------------------------------------------------
KUBELET_VERSIONS = ("1.34", "1.35", "1.36", "1.37")


def health_service_for(kubelet: str, supported_versions: Sequence[str]) -> str | None:
    """The health service a kubelet of version ``kubelet`` dials on a plugin that registered
    with ``supported_versions``; None: it does not watch that plugin's health."""
    if kubelet not in KUBELET_VERSIONS:
        raise ValueError(f"kubelet {kubelet!r}: one of {KUBELET_VERSIONS}")
    if kubelet != "1.37":
        return V1ALPHA1  # dialled unconditionally (dra_plugin_manager.go add, 1.34-1.36)
    for service in (V1, V1ALPHA1):  # pickHealthService: newest first
        if service in supported_versions:
            return service
    return None


def plugin_info(registration_socket: str) -> tuple[str, str, list[str]]:
    """``GetInfo`` on a registration socket: (driver name, endpoint, supported versions)."""
    request_cls = message("pluginregistration.InfoRequest")
    info_cls = message("pluginregistration.PluginInfo")
    with grpc.insecure_channel(f"unix:{registration_socket}") as channel:
        get_info = channel.unary_unary(
            "/pluginregistration.Registration/GetInfo",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=info_cls.FromString,
        )
        info = get_info(request_cls(), timeout=GET_INFO_TIMEOUT, wait_for_ready=True)
    return info.name, info.endpoint, list(info.supported_versions)


# -- kubelet's health cache (healthinfo.go) ---------------------------------------------------
@dataclass
class DeviceHealth:
    """state.DeviceHealth: one device's entry in kubelet's cache."""

    health: str
    message: str
    last_updated: float  # time.monotonic() of receipt
    timeout: float


@dataclass
class HealthCache:
    """One driver's part of kubelet's healthInfoCache."""

    devices: dict[tuple[str, str], DeviceHealth] = field(default_factory=dict)

    def update(self, reported: list[tuple[str, str, str, str, int]]) -> list[tuple[str, str]]:
        """updateHealthInfo: ``reported`` = (pool, device, health, message, timeout seconds)
        of one response; returns the devices whose entry changed."""
        now = time.monotonic()
        changed = []
        seen = set()
        for pool, device, health, msg, timeout_seconds in reported:
            timeout = float(timeout_seconds) if timeout_seconds > 0 else DEFAULT_HEALTH_TIMEOUT
            key = (pool, device)
            seen.add(key)
            old = self.devices.get(key)
            if old is None or (old.health, old.message, old.timeout) != (health, msg, timeout):
                changed.append(key)
            self.devices[key] = DeviceHealth(health, msg, now, timeout)
        for key, entry in self.devices.items():
            if key not in seen and entry.health != UNKNOWN and now - entry.last_updated > entry.timeout:
                self.devices[key] = DeviceHealth(UNKNOWN, "", now, entry.timeout)
                changed.append(key)
        return changed

    def get(self, pool: str, device: str) -> tuple[str, str]:
        """getHealthInfo: (health, message); Unknown when never reported or stale."""
        entry = self.devices.get((pool, device))
        if entry is None or time.monotonic() - entry.last_updated > entry.timeout:
            return UNKNOWN, ""
        return entry.health, entry.message


def resource_health(driver: str, pool: str, device: str, health: str, cdi_ids: Sequence[str] = ()) -> dict:
    """One entry of a container status' ``allocatedResourcesStatus[].resources``
    (manager.go UpdateAllocatedResourcesStatus)."""
    resource_id = cdi_ids[0] if cdi_ids else f"{driver}/{pool}/{device}"
    return {"resourceID": resource_id, "health": health}


# -- the watcher ------------------------------------------------------------------------------
class HealthWatcher:
    """Kubelet's health stream on one plugin: start(), read ``health()``, close().

    ``responses`` keeps every response as received (lists of (pool, device, health, message,
    timeout seconds, last_updated_time)); ``errors`` the gRPC status codes streams ended with;
    ``attempts`` counts dials; ``streams_ended`` the streams that ended without an error.
    """

    def __init__(
        self, endpoint: str, driver: str, service: str, *, retry_interval: float = RETRY_INTERVAL, kubelet: str = "1.37"
    ) -> None:
        if service not in _PACKAGE:
            raise ValueError(f"unknown health service {service!r}")
        self.endpoint = endpoint
        self.driver = driver
        self.service = service
        self.kubelet = kubelet
        self.retry_interval = retry_interval
        self.cache = HealthCache()
        self.responses: list[list[tuple[str, str, str, str, int, int]]] = []
        self.errors: list[grpc.StatusCode] = []
        self.attempts = 0
        self.streams_ended = 0
        self.terminated = False  # 1.37 gave up (UNIMPLEMENTED)
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._call: Any = None
        self._thread: threading.Thread | None = None
        package = _PACKAGE[service]
        self._request = message(f"{package}.NodeWatchResourcesRequest")
        self._response = message(f"{package}.NodeWatchResourcesResponse")

    @classmethod
    def for_plugin(cls, registration_socket: str, kubelet: str = "1.37", **kwargs: Any) -> HealthWatcher | None:
        """Register-time choice: GetInfo, then the service ``kubelet`` would dial (or None)."""
        driver, endpoint, supported = plugin_info(registration_socket)
        service = health_service_for(kubelet, supported)
        return None if service is None else cls(endpoint, driver, service, kubelet=kubelet, **kwargs)

    def start(self) -> HealthWatcher:
        self._thread = threading.Thread(target=self._run, name=f"kubelet-health-{self.service}", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        call = self._call
        if call is not None:
            call.cancel()
        if self._thread is not None:
            self._thread.join(10)
            if self._thread.is_alive():
                raise AssertionError("the health watcher did not stop")

    def __enter__(self) -> HealthWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ------------------------------------------------------------------------------
    def health(self, pool: str, device: str) -> tuple[str, str]:
        with self._lock:
            return self.cache.get(pool, device)

    def wait_for(self, pool: str, devices: Sequence[str], health: str, timeout: float = 10.0) -> list[str]:
        """Wait until every device in ``devices`` reads ``health``; returns their messages."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                got = [self.cache.get(pool, d) for d in devices]
                if all(h == health for h, _ in got):
                    return [m for _, m in got]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{list(devices)} not {health} within {timeout}s: {got}")
                self._lock.wait(min(left, 0.1))

    def wait_responses(self, count: int, timeout: float = 10.0) -> list[list[tuple[str, str, str, str, int, int]]]:
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self.responses) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{len(self.responses)} health responses within {timeout}s, wanted {count}")
                self._lock.wait(min(left, 0.1))
            return list(self.responses)

    def wait_errors(self, count: int, timeout: float = 10.0) -> list[grpc.StatusCode]:
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self.errors) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{self.errors} after {timeout}s, wanted {count} errors")
                self._lock.wait(min(left, 0.1))
            return list(self.errors)

    def wait_ended(self, count: int = 1, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        with self._lock:
            while self.streams_ended < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{self.streams_ended} streams ended within {timeout}s, wanted {count}")
                self._lock.wait(min(left, 0.1))

    # -- the goroutine ------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            if self._watch_once():
                return
            self._stop.wait(self.retry_interval)

    def _watch_once(self) -> bool:
        """One NodeWatchResources stream; True when kubelet stops watching for good."""
        path = f"/{self.service}/NodeWatchResources"
        with self._lock:
            self.attempts += 1
        try:
            with grpc.insecure_channel(f"unix:{self.endpoint}") as channel:
                call = channel.unary_stream(
                    path,
                    request_serializer=lambda m: m.SerializeToString(),
                    response_deserializer=self._response.FromString,
                )(self._request())
                self._call = call
                if self._stop.is_set():
                    call.cancel()
                for response in call:
                    self._handle(response)
            with self._lock:
                self.streams_ended += 1
                self._lock.notify_all()
            return False
        except grpc.RpcError as exc:
            code = exc.code()
            with self._lock:
                if code != grpc.StatusCode.CANCELLED or not self._stop.is_set():
                    self.errors.append(code)
                self._lock.notify_all()
            if code == grpc.StatusCode.UNIMPLEMENTED and self.kubelet == "1.37":
                self.terminated = True  # healthStreamTerminated: deactivate, no retry
                return True
            return False
        finally:
            self._call = None
            with self._lock:  # HandleWatchResourcesStream: clearDriver on every exit
                self.cache.devices.clear()
                self._lock.notify_all()

    def _handle(self, response: Any) -> None:
        reported = []
        for d in response.devices:
            reported.append(
                (
                    d.device.pool_name,
                    d.device.device_name,
                    health_name(self.service, d.health),
                    d.message,  # unknown to a v1alpha1 1.34 kubelet, which keeps no message
                    d.health_check_timeout_seconds,
                    d.last_updated_time,
                )
            )
        with self._lock:
            self.responses.append(reported)
            self.cache.update([r[:5] for r in reported])
            self._lock.notify_all()
