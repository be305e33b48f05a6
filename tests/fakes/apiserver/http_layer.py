"""The HTTP layer: the threaded server and its handler (JSON responses, chunked watch streams),
request parsing, bearer-token authentication (401), the authorizer hook (403), injected failures
(``fail_next``), the request log (``requests``) and the mapping of errors to ``Status`` answers
(a bug in the fake is a 500 kept in ``internal_errors``).  What a path means is ``routes.py``'s.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from .claim_status import Caller
from .errors import REASONS, ApiStatusError, BodyError, details
from .objects import Encoded
from .resources import RESOURCES, Resource
from .routes import route
from .store import RequestContext
from .tls import accept_tls

if TYPE_CHECKING:
    from .server import FakeApiServer
    from .store import Store


@dataclass
class RecordedRequest:
    """One HTTP request the fake received (also the rejected ones)."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str | None
    field_manager: str | None
    user: str | None
    body: Any = None
    status: int | None = None  # the HTTP status answered (200 for a watch stream)
    user_agent: str | None = None
    #: ``Warning`` headers answered (``299 - "<text>"``): unknown fields under ``fieldValidation=Warn``.
    warnings: list[str] = field(default_factory=list)
    #: The ``Accept`` header (``application/json;as=Table;v=v1;g=meta.k8s.io``: a Table, tables.py).
    accept: str | None = None
    #: The caller's token's own ``extra`` (``add_token``); None: its user's ``user_extra``.
    extra: dict[str, list[str]] | None = None
    #: ``time.perf_counter()`` when the request was read, and when its answer was sent (0: not
    #: sent, or a watch): a benchmark's timeline of what the server did.
    received: float = 0.0
    answered: float = 0.0

    @property
    def watch(self) -> bool:
        return self.query.get("watch") in ("true", "1")


@dataclass(frozen=True)
class RequestAttributes:
    """What an authorizer hook is asked about (like a SubjectAccessReview)."""

    user: str
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    group: str


@dataclass
class Injected:
    """A failure ``fail_next`` asked for: the next ``times`` matching requests get it."""

    code: int
    method: str | None
    path: str | None
    times: int
    reason: str
    message: str
    headers: dict[str, str]


class Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    #: The listen backlog: kube-apiserver's listener (Go, net/sock_linux.go maxListenerBacklog)
    #: takes the kernel's somaxconn, where socketserver's default of 5 drops the SYNs of a burst
    #: of new connections (each then waits a 1 s retransmit).
    request_queue_size = socket.SOMAXCONN

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], fake: FakeApiServer) -> None:
        self.fake = fake
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        #: HTTPS (``FakeApiServer(tls=True)``): the serving certificate's context
        self.tls: ssl.SSLContext | None = fake.serving_cert.context() if fake.serving_cert else None
        super().__init__(address, handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        if self.tls is None:
            return super().get_request()
        return accept_tls(self.socket, self.tls)

    @property
    def open_connections(self) -> int:
        with self.connections_lock:
            return len(self.connections)

    def cut_connections(self) -> None:
        """Shut every open connection down (a dead API server's clients see their streams end)."""
        with self.connections_lock:
            connections = list(self.connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def setup(self) -> None:
        super().setup()
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()  # in this request's thread (tls.py)
            with self.server.fake._store.lock:
                self.server.fake.tls_handshakes.append(self.connection.session_reused)
        # As Go's net/http does: without it, headers and body written separately meet the
        # client's delayed ACK and every response waits ~40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.connections_lock:
            self.server.connections.add(self.connection)
        self.served = False

    def handle_one_request(self) -> None:
        """Go's ``conn.serve``: the first request line waits under the read timeouts (none here),
        each later one at most the idle timeout, then the connection is closed
        (``BaseHTTPRequestHandler`` ends it on the ``TimeoutError``)."""
        if self.served:
            self.connection.settimeout(self.server.fake.idle_timeout)
        super().handle_one_request()
        self.served = True

    def parse_request(self) -> bool:
        self.connection.settimeout(None)  # a request line came: no longer idle
        return super().parse_request()

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.connections_lock:
                self.server.connections.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        self.server.fake._dispatch(self)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    # -- writing -------------------------------------------------------------------------------
    def send_json(self, code: int, body: Any, warnings: list[str] | None = None) -> None:
        data = (body if isinstance(body, Encoded) else Encoded.of(body)).data
        self.send_response(code)
        for text in warnings or ():
            # apiserver pkg/warning: one header per warning, the text quoted as RFC 7234 wants.
            self.send_header("Warning", "299 - " + json.dumps(text))
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.flush()

    def send_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is not None:
            return self.rfile.read(int(length)) if int(length) > 0 else b""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        return b""


def decode_body(raw: bytes, content_type: str | None) -> Any:
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        pass
    if content_type and "yaml" in content_type:
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise BodyError(f"error decoding YAML: {exc}") from None
    raise BodyError(f"couldn't get version/kind; json parse error: invalid JSON: {text[:80]!r}")


def forbidden_message(attrs: RequestAttributes, res: Resource) -> str:
    """apiserver ``responsewriters.forbiddenMessage``."""
    what = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    subject = f'{res.qualified} "{attrs.name}"' if attrs.name else res.qualified
    where = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    group = f'in API group "{res.group}"'
    return f'{subject} is forbidden: User "{attrs.user}" cannot {attrs.verb} resource "{what}" {group} {where}'


class HttpFrontend:
    """``FakeApiServer``'s HTTP side: dispatch, authentication, authorization, injected
    failures and the request log."""

    _store: Store
    users: dict[str, str]
    #: ``user.Info.GetExtra()`` of each user (e.g. the node-name of a pod-bound token).
    user_extra: dict[str, dict[str, list[str]]]
    #: ``extra`` of single tokens, ahead of their user's ``user_extra`` (``add_token``).
    token_extra: dict[str, dict[str, list[str]]]
    authorizer: Callable[[RequestAttributes], bool] | None
    requests: list[RecordedRequest]
    #: every TLS handshake, in order: True where the client resumed a session from a ticket
    #: this server issued.  Go's crypto/tls server issues session tickets and resumes them
    #: unless ``Config.SessionTicketsDisabled``, which kube-apiserver's serving config leaves
    #: false (k8s.io/apiserver ``pkg/server/secure_serving.go`` ``SecureServingInfo.tlsConfig``;
    #: its certificates' ``GetConfigForClient`` keeps the original config's ticket keys,
    #: crypto/tls ``Config.ticketKeys``); Python's ssl server issues TLS 1.3 tickets too
    #: (``SSLContext.num_tickets``, 2 by default).
    tls_handshakes: list[bool]
    internal_errors: list[str]
    _injected: list[Injected]
    #: seconds every request but a watch waits before it is served (0: none)
    latency: float = 0.0
    #: seconds a kept-alive connection may wait for its next request before the server closes
    #: it: Go net/http ``Server.IdleTimeout``, 90 s in kube-apiserver (k8s.io/apiserver
    #: ``pkg/server/secure_serving.go`` ``SecureServingInfo.Serve``); None: never
    idle_timeout: float | None = 90.0

    def _dispatch(self, handler: Handler) -> None:
        parts = urlsplit(handler.path)
        path = unquote(parts.path).rstrip("/") or "/"
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        content_type = (handler.headers.get("Content-Type") or "").split(";")[0].strip() or None
        record = RecordedRequest(
            handler.command,
            path,
            query,
            content_type,
            query.get("fieldManager"),
            None,
            user_agent=handler.headers.get("User-Agent"),
            accept=handler.headers.get("Accept"),
            received=time.perf_counter(),
        )
        with self._store.lock:
            self.requests.append(record)
        try:
            raw = handler.read_body()
            record.user, record.extra = self._authenticate(handler)
            record.body = decode_body(raw, content_type) if raw else None
            self._maybe_inject(handler.command, path)
            if self.latency and not record.watch:
                time.sleep(self.latency)  # a loaded or distant API server (benchmarks)
            answer = route(self, handler, record)  # type: ignore[arg-type]  # self is a FakeApiServer
            if answer is None:  # a watch stream answered already
                record.status = 200
                return
            code, body = answer
        except ApiStatusError as err:
            code, body = err.code, err.status()
        except BodyError as err:
            code, body = 400, ApiStatusError(400, "BadRequest", str(err)).status()
        except (BrokenPipeError, ConnectionResetError):
            return
        except Exception as exc:
            detail = "".join(traceback.format_exception(exc))
            with self._store.lock:
                self.internal_errors.append(detail)
            code, body = 500, ApiStatusError(500, "InternalError", f"fake API server bug: {exc!r}").status()
        record.status = code
        try:
            handler.send_json(code, body, record.warnings if code < 400 else None)
            record.answered = time.perf_counter()
        except (BrokenPipeError, ConnectionResetError, OSError):
            handler.close_connection = True

    def _authenticate(self, handler: Handler) -> tuple[str, dict[str, list[str]] | None]:
        """The caller's name and, for a token of its own (``token_extra``), that token's extra."""
        header = handler.headers.get("Authorization") or ""
        scheme, _, token = header.partition(" ")
        user = self.users.get(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise ApiStatusError(401, "Unauthorized", "Unauthorized")
        return user, self.token_extra.get(token.strip())

    def _maybe_inject(self, method: str, path: str) -> None:
        with self._store.lock:
            for injected in self._injected:
                if injected.method and injected.method != method:
                    continue
                if injected.path and injected.path not in path:
                    continue
                injected.times -= 1
                if injected.times <= 0:
                    self._injected.remove(injected)
                raise ApiStatusError(injected.code, injected.reason, injected.message)

    def _authorize(self, user: str, verb: str, res: Resource, subresource: str, namespace: str, name: str) -> None:
        if self.authorizer is None:
            return
        attrs = RequestAttributes(user, verb, res.plural, subresource, namespace, name, res.group)
        if self.authorizer(attrs):
            return
        raise ApiStatusError(403, "Forbidden", forbidden_message(attrs, res), details(res, name or None))

    def _authorize_synthetic(
        self, caller: Caller, verb: str, subresource: str, namespace: str, name: str
    ) -> tuple[bool, str]:
        """The authorizer asked about a ``resourceclaims`` synthetic subresource (utils.go
        ``checkAuthorization`` with ``syntheticSubresourceAttrs``): allowed, else the message of
        the 403 ``responsewriters.ForbiddenStatusError`` would answer."""
        if self.authorizer is None:
            return True, ""
        res = RESOURCES["resourceclaims"]
        attrs = RequestAttributes(caller.user, verb, res.plural, subresource, namespace, name, res.group)
        if self.authorizer(attrs):
            return True, ""
        return False, forbidden_message(attrs, res)

    def _request_context(
        self, user: str, verb: str, namespace: str, extra: dict[str, list[str]] | None = None
    ) -> RequestContext:
        """The ``ctx`` a request's handler sees: the caller (with its token's ``extra``: the
        token's own, else its user's)."""
        caller = Caller(user, verb, namespace, dict(extra if extra is not None else self.user_extra.get(user) or {}))
        return RequestContext(caller, self._authorize_synthetic if self.authorizer is not None else None)

    # -- test helpers ---------------------------------------------------------------------------
    def fail_next(
        self,
        code: int,
        *,
        method: str | None = None,
        path: str | None = None,
        times: int = 1,
        reason: str | None = None,
        message: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer the next ``times`` matching requests (method, path substring) with a Status error."""
        with self._store.lock:
            self._injected.append(
                Injected(
                    code,
                    method.upper() if method else None,
                    path,
                    times,
                    reason or REASONS.get(code, "Unknown"),
                    message or f"injected failure {code}",
                    headers or {},
                )
            )

    def reset_requests(self) -> None:
        with self._store.lock:
            self.requests.clear()

    def requests_to(self, method: str | None = None, path_contains: str | None = None) -> list[RecordedRequest]:
        with self._store.lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method.upper()) and (path_contains is None or path_contains in r.path)
            ]
