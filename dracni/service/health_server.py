"""The service's /healthz, /readyz and /metrics endpoint, and the prepare/unprepare counters."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..metrics import PREPARE_SECONDS, PREPARES, REGISTRY, UNPREPARE_SECONDS, UNPREPARES

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ..claims.prepare import PrepareOutcome
    from ..kubelet.helper import ClaimRef


def observed_prepare(
    prepare: Callable[[list[ClaimRef]], Mapping[str, PrepareOutcome]],
) -> Callable[[list[ClaimRef]], Mapping[str, PrepareOutcome]]:
    """``prepare`` counted (per claim, by result) and timed; failures logged."""

    def observed(refs: list[ClaimRef]) -> Mapping[str, PrepareOutcome]:
        started = time.monotonic()
        outcomes = prepare(refs)
        for uid, outcome in outcomes.items():
            PREPARES.labels(result="error" if outcome.error else "ok").inc()
            if outcome.error:
                log.warning("prepare of claim %s failed: %s", uid, outcome.error)
        PREPARE_SECONDS.observe(time.monotonic() - started)
        return outcomes

    return observed


def observed_unprepare(
    unprepare: Callable[[list[ClaimRef]], Mapping[str, str | None]],
) -> Callable[[list[ClaimRef]], Mapping[str, str | None]]:
    """``unprepare`` counted (per claim, by result) and timed."""

    def observed(refs: list[ClaimRef]) -> Mapping[str, str | None]:
        started = time.monotonic()
        results = unprepare(refs)
        for error in results.values():
            UNPREPARES.labels(result="error" if error else "ok").inc()
        UNPREPARE_SECONDS.observe(time.monotonic() - started)
        return results

    return observed


class HealthServer:
    """``/healthz`` (the process serves), ``/readyz`` (``ready()`` is true) and ``/metrics``."""

    def __init__(self, address: str, ready: Callable[[], tuple[bool, str]]) -> None:
        host, _, port = address.rpartition(":")
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/healthz":
                    self._send(200, b"ok\n", "text/plain")
                elif self.path == "/readyz":
                    ok, why = outer.ready()
                    self._send(200 if ok else 503, (why + "\n").encode(), "text/plain")
                elif self.path == "/metrics":
                    self._send(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.ready = ready
        self.httpd = ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="health", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
