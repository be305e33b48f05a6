"""The service's /healthz, /readyz and /metrics endpoint.

``share_port``: two instances of a rolling update both listen on the port (``SO_REUSEPORT``;
under ``hostNetwork`` it is a port of the node, and the surge pod could not bind it while the old
one runs).  The kernel then hands each connection to either instance, so a probe answers for
the node's dracni rather than for one pod: both instances report the same kind of readiness
(registered with kubelet, the node's devices known), and the old instance stays until its
successor is registered (``kubelet/instances.py``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..metrics import REGISTRY

log = logging.getLogger(__name__)


class HealthServer:
    """``/healthz`` (the process serves), ``/readyz`` (``ready()`` is true) and ``/metrics``."""

    def __init__(self, address: str, ready: Callable[[], tuple[bool, str]], *, share_port: bool = False) -> None:
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
        server_class = _SharedPortServer if share_port else ThreadingHTTPServer
        self.httpd = server_class((host or "0.0.0.0", int(port)), Handler)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="health", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for serve_forever: only a started server
            self.httpd.shutdown()
        self.httpd.server_close()


class _SharedPortServer(ThreadingHTTPServer):
    allow_reuse_port = True  # socketserver sets SO_REUSEPORT before bind
