"""Kubelet's device health stream: ``DRAResourceHealth`` (``v1``, ``v1beta1``, ``v1alpha1``)
on the DRA socket, fed by a health source (``inventory.health.DeviceHealthReporter``).

Kept apart from the DRA calls (``kubelet/server.py``): a stream is long-lived, holds one of the
server's worker threads while it runs, and knows nothing about claims.  Keep this module out of
the CNI hot path: it imports grpc.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import grpc

if TYPE_CHECKING:
    from dracni.inventory.health import HealthReport

log = logging.getLogger(__name__)

#: The health services, listed after ``server.SUPPORTED_SERVICES`` when served.  Kubelet 1.37 streams health only
#: from a plugin that lists one (pickHealthService: v1, else v1alpha1); 1.34-1.36 dial
#: v1alpha1 whatever the list says.  A kubelet ignores entries it does not know
#: (validateSupportedServices looks for the first DRAPlugin it speaks).
HEALTH_SERVICES = ("v1.DRAResourceHealth", "v1beta1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
#: Kubelet keeps one health stream per plugin open; more than this at once are refused
#: (RESOURCE_EXHAUSTED) so that streams never take all of the server's worker threads.
MAX_HEALTH_STREAMS = 4


class HealthSource(Protocol):
    """Where the health stream's reports come from (``inventory.health.DeviceHealthReporter``)."""

    def watch(self, active: Callable[[], bool]) -> Iterator[HealthReport]:
        """The full list first, then again on every change and as a keep-alive; ends when
        the source closes or ``active()`` turns False."""
        ...

    def wake(self) -> None:
        """Make every ``watch`` look at ``active()`` again."""
        ...


class HealthService:
    """``DRAResourceHealth`` of one API version (the messages are the same in all three).

    A stream sends the source's reports until the source closes (the service stops: the
    stream ends with OK, and kubelet dials again later) or kubelet goes away.
    """

    def __init__(self, streams: threading.BoundedSemaphore, source: HealthSource, pb2: Any, version: str) -> None:
        self._streams = streams
        self._source = source
        self._pb2 = pb2
        self._version = version

    def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        if not self._streams.acquire(blocking=False):
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"at most {MAX_HEALTH_STREAMS} health streams at once")
        try:
            context.add_callback(self._source.wake)
            log.info("kubelet watches device health (%s)", self._version)
            for report in self._source.watch(context.is_active):
                yield self._response(report)
            log.info("device health stream (%s) ended", self._version)
        finally:
            self._streams.release()

    def _response(self, report: HealthReport) -> Any:
        pb2 = self._pb2
        response = pb2.NodeWatchResourcesResponse()
        for device in report.devices:
            response.devices.add(
                device=pb2.DeviceIdentifier(pool_name=device.pool, device_name=device.device),
                health=pb2.HealthStatus.Value(device.health.upper()),
                last_updated_time=report.checked_at,
                health_check_timeout_seconds=report.timeout_seconds,
                message=device.message,
            )
        return response
