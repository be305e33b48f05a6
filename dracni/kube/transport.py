"""The kubernetes Python client's configuration, and the requests made with it (dicts in and
out) over libcurl: what ``kube/api.py``'s ``KubeApi`` calls run on.

The calls take the client's ``Configuration`` (kubeconfig or in-cluster: server, TLS,
credentials and their refresh, proxies), but neither its generated API classes nor its urllib3
transport: the service makes a fixed handful of calls, and those are what a node agent cannot
afford on every node.  Measured on this machine (kubernetes 37): ``CoreV1Api`` alone adds
20 MiB of RSS and 0.3 s at first use, ``ResourceV1Api`` 6 MiB, the ``ApiClient`` behind them
10 MiB (pydantic, dateutil); every call runs pydantic's ``validate_call`` and the client's
parameter serialization.  The requests go through libcurl (pycurl), whose HTTP is C: a claim
GET through urllib3 and http.client cost 0.5-0.6 ms of CPU on this machine (one thread, the
test API server), most of it in Python's header parsing (``email.feedparser``) and urllib3's
pool and response objects; through libcurl 0.1-0.15 ms.  Answers are decoded by orjson;
objects are plain camelCase dicts, as the API serves them.  Every failure becomes an
``ApiError`` with the HTTP status, so callers decide on retry without knowing the client
library.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import quote, urlencode

import orjson
import pycurl

from .client_modules import import_client

import_client()  # before any other kubernetes import: see client_modules
from kubernetes.client.configuration import Configuration  # noqa: E402

from .curl_target import CurlTarget  # noqa: E402

#: ``KubeClient.on_request(method, resource, waited, seconds)``: one request's verb, its
#: resource (``resourceclaims``, ``resourceclaims/status``), the seconds it waited for a free
#: connection and the seconds it took in all, that wait included.
RequestObserver = Callable[[str, str, float, float], None]

REQUEST_TIMEOUT = 30
#: Connections to the API server, the service's requests out at once at most.  Each is an
#: HTTP/1.1 connection (libcurl), one request at a time; kube-apiserver closes one idle for 90 s
#: (``IdleTimeout`` in k8s.io/apiserver ``pkg/server/secure_serving.go``), so the connections a
#: burst of pod starts opened do not stay.  Measured in ``make bench`` (h), 100 pods x 2 claims
#: at once: with 32 the claim GETs waited for a connection (p99 8.0-8.2x one pod alone), with 64
#: 6.5-7.5x, the service's RSS at the burst's peak 83 -> 89-91 MiB.
CONNECTIONS = 64


@dataclass(frozen=True)
class Resource:
    """A resource type's REST path: ``/api/v1/...`` for the core group, ``/apis/<group>/<version>/...``."""

    group: str
    version: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str = "") -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += "/namespaces/" + quote(namespace, safe="")
        base += "/" + self.plural
        if name is not None:
            base += "/" + quote(name, safe="")
        return base + ("/" + subresource if subresource else "")


class ApiError(Exception):
    """An API call failed; ``status`` is the HTTP status (0 when the server was unreachable),
    ``reason`` the Status object's reason (``AlreadyExists``, ``Conflict``, ...) when it sent one."""

    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason

    @property
    def retryable(self) -> bool:
        return self.status in (0, 408, 409, 429) or self.status >= 500


class KubeClient:
    """The client's ``Configuration`` and the libcurl handles requests go out on, with the
    headers every request carries (``default_headers``: the User-Agent).

    Each handle keeps its connection to the API server open between requests; at most
    ``connection_pool_maxsize`` requests (and watches) are out at once, the others wait up to
    ``REQUEST_TIMEOUT`` for a handle: in a burst of prepares no connection is opened beyond
    that and closed after.  Thread-safe: a handle serves one request at a time.
    """

    def __init__(self, configuration: Configuration, user_agent: str | None = None) -> None:
        self.configuration = configuration
        self.default_headers: dict[str, str] = {} if user_agent is None else {"User-Agent": user_agent}
        self._slots = threading.BoundedSemaphore(max(1, configuration.connection_pool_maxsize or CONNECTIONS))
        self._idle: list[pycurl.Curl] = []
        self._lock = threading.Lock()
        self._closed = False
        self._target = CurlTarget.of(configuration, connect_timeout=REQUEST_TIMEOUT)
        #: The handles' TLS sessions, shared (libcurl's share; pycurl locks it for threads): a
        #: connection opened after the first resumes the server's session ticket instead of a
        #: full handshake (kube-apiserver, as Go's crypto/tls, issues tickets).  A burst of pod
        #: starts after 90 s idle opens up to ``CONNECTIONS`` of them; on this machine a new
        #: connection cost the client 2.0-2.3 ms of CPU with a full handshake, 1.5-1.7 resumed,
        #: a request on an open one 0.3 ms.
        self._tls_sessions = pycurl.CurlShare()
        self._tls_sessions.setopt(pycurl.SH_SHARE, pycurl.LOCK_DATA_SSL_SESSION)
        #: told of every request but a watch (the service's metrics); None: nobody
        self.on_request: RequestObserver | None = None

    @property
    def user_agent(self) -> str:
        return self.default_headers["User-Agent"]

    @user_agent.setter
    def user_agent(self, value: str) -> None:
        self.default_headers["User-Agent"] = value

    def close(self) -> None:
        """Close the idle connections; a request still out closes its own when it ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for handle in idle:
            handle.close()

    @contextmanager
    def handle(self, reuse: bool = True) -> Iterator[pycurl.Curl]:
        """A handle for one request, back to the idle ones after it unless ``reuse`` is False
        or the request failed (its connection may then be in any state): closed then."""
        if not self._slots.acquire(timeout=REQUEST_TIMEOUT):
            raise ApiError(0, f"no connection to the API server free for {REQUEST_TIMEOUT} s")
        try:
            with self._lock:
                handle = self._idle.pop() if self._idle else None
            if handle is None:
                handle = self._target.new_handle()
                handle.setopt(pycurl.SHARE, self._tls_sessions)
            reusable = False
            try:
                yield handle
                reusable = True
            finally:
                with self._lock:
                    if reuse and reusable and not self._closed:
                        self._idle.append(handle)
                        handle = None
                if handle is not None:
                    handle.close()
        finally:
            self._slots.release()

    def prepare(
        self,
        handle: pycurl.Curl,
        method: str,
        path: str,
        query: dict[str, str] | None,
        body: dict[str, Any] | None,
        content_type: str,
        timeout: float,
    ) -> None:
        """Set ``handle`` up for one request: the client's host, credentials (refreshed as the
        client refreshes them: ``Configuration.auth_settings``) and headers."""
        headers = [f"{k}: {v}" for k, v in self.default_headers.items()]
        headers.append("Accept: application/json")
        params = list((query or {}).items())
        settings: dict[str, Any] = dict(self.configuration.auth_settings())
        for auth in settings.values():
            if not auth.get("value"):
                continue
            if auth["in"] == "header":
                headers.append(f"{auth['key']}: {auth['value']}")
            elif auth["in"] == "query":
                params.append((auth["key"], auth["value"]))
        handle.setopt(pycurl.URL, self._target.url + path + ("?" + urlencode(params) if params else ""))
        if body is None:
            handle.setopt(pycurl.HTTPGET, 1)
        else:
            headers.append("Content-Type: " + content_type)
            headers.append("Expect:")  # no 100-continue round trip before a body
            handle.setopt(pycurl.POSTFIELDS, orjson.dumps(body))
        handle.setopt(pycurl.CUSTOMREQUEST, method)
        handle.setopt(pycurl.HTTPHEADER, headers)
        handle.setopt(pycurl.TIMEOUT_MS, int(timeout * 1000))


def load_api_client(kubeconfig: str | None = None, node: str | None = None) -> KubeClient:
    """In-cluster config when no kubeconfig is named (the DaemonSet), else the file.

    Every request says it is dracni, which version, on which node (User-Agent), so audit logs
    and API priority and fairness rules can tell dracni's requests apart.
    """
    from .. import __version__

    configuration = Configuration()
    if kubeconfig:
        from kubernetes.config.kube_config import load_kube_config  # only with a kubeconfig (tests)

        load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        from kubernetes.config.incluster_config import load_incluster_config

        load_incluster_config(client_configuration=configuration)
    # The proxy the environment names, resolved once: the client re-reads the whole environment
    # (urllib.request.getproxies) each time the host is assigned, and its credential refresh
    # assigns it before every request (30% of a claim GET's client CPU, measured).  The host
    # never changes, and neither does the process's environment.
    configuration.proxy = configuration.proxy
    # Kubelet prepares pods in parallel and the service reads their claims at the same time:
    # keep that many connections (the client's default is 5 per CPU).
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, CONNECTIONS)
    return KubeClient(configuration, user_agent(__version__, node))


def user_agent(version: str, node: str | None) -> str:
    """``dracni/<version> (<node>)``, in the shape of Kubernetes' own components' agents."""
    return f"dracni/{version} ({node})" if node else f"dracni/{version}"


def _status_error(status: int, data: bytes) -> ApiError:
    """The error of a non-2xx answer: the Status object's message and reason when it sent one."""
    try:
        body = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        body = None
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    if isinstance(body, dict):
        return ApiError(status, str(body.get("message") or phrase), str(body.get("reason") or ""))
    return ApiError(status, f"{status} {phrase}".rstrip())


def _unreachable(exc: pycurl.error, what: str = "cannot reach the API server") -> ApiError:
    """A request that got no answer (refused, timed out, TLS, cut): status 0, libcurl's word."""
    code, message = exc.args if len(exc.args) == 2 else (0, str(exc))
    return ApiError(0, f"{what}: {message} (curl error {code})")


def call(
    api_client: KubeClient,
    method: str,
    resource: Resource,
    *,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str = "",
    query: dict[str, str] | None = None,
    body: dict[str, Any] | None = None,
    content_type: str = "application/json",
) -> dict[str, Any]:
    """One request; its answer decoded (``{}`` for an empty one)."""
    path = resource.path(namespace, name, subresource)
    chunks: list[bytes] = []
    observe = api_client.on_request
    started = time.monotonic()
    connected: float | None = None
    try:
        with api_client.handle() as handle:
            connected = time.monotonic()
            api_client.prepare(handle, method, path, query, body, content_type, REQUEST_TIMEOUT)
            handle.setopt(pycurl.WRITEFUNCTION, chunks.append)
            try:
                handle.perform()
            except pycurl.error as exc:  # connection refused, timeouts, TLS: the server is unreachable
                raise _unreachable(exc) from None
            status = handle.getinfo(pycurl.RESPONSE_CODE)
    finally:
        if observe is not None:
            ended = time.monotonic()
            what = resource.plural + ("/" + subresource if subresource else "")
            observe(method, what, (connected or ended) - started, ended - started)
    data = b"".join(chunks)
    if not 200 <= status <= 299:
        raise _status_error(status, data)
    if not data:
        return {}
    try:
        obj: dict[str, Any] = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ApiError(0, f"the API server's answer is not JSON: {exc}") from None
    return obj


def watch(
    api_client: KubeClient, resource: Resource, resource_version: str, timeout_seconds: int, query: dict[str, str]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Events after ``resource_version``; ``ApiError(410)`` when it is too old (re-list).

    The answer is a stream of JSON lines ``{"type", "object"}``; an ERROR event carries a
    Status, raised as an ``ApiError`` with its code.  The server ends the stream after
    ``timeout_seconds``; the client gives it ``REQUEST_TIMEOUT`` more.  libcurl's multi
    interface reads the stream as it comes; the handle is closed after, also when the caller
    stops early.
    """
    params = query | {
        "watch": "true",
        "resourceVersion": resource_version,
        "timeoutSeconds": str(timeout_seconds),
        "allowWatchBookmarks": "true",
    }
    chunks: list[bytes] = []
    with api_client.handle(reuse=False) as handle:  # closed after: never reused half-read
        api_client.prepare(handle, "GET", resource.path(), params, None, "", timeout_seconds + REQUEST_TIMEOUT)
        handle.setopt(pycurl.WRITEFUNCTION, chunks.append)
        multi = pycurl.CurlMulti()
        multi.add_handle(handle)
        try:
            yield from _events(multi, handle, chunks)
        finally:
            multi.remove_handle(handle)
            multi.close()


def _events(multi: pycurl.CurlMulti, handle: pycurl.Curl, chunks: list[bytes]) -> Iterator[tuple[str, dict[str, Any]]]:
    pending = b""
    status = 0
    running = 1
    while running:
        code, running = multi.perform()
        if code == pycurl.E_CALL_MULTI_PERFORM:
            continue
        _, _, failed = multi.info_read()
        if failed:
            raise _unreachable(pycurl.error(failed[0][1], failed[0][2]), "watch failed")
        if not status:
            status = handle.getinfo(pycurl.RESPONSE_CODE)
        if status and not 200 <= status <= 299:
            if not running:
                raise _status_error(status, b"".join(chunks))
        elif chunks:
            pending += b"".join(chunks)
            chunks.clear()
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    yield _watch_event(line)
        if running:
            multi.select(1.0)
    if pending.strip():
        yield _watch_event(pending)


def _watch_event(line: bytes) -> tuple[str, dict[str, Any]]:
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ApiError(0, f"watch failed: an event is not JSON: {exc}") from None
    kind, obj = event.get("type"), event.get("object") or {}
    if kind == "ERROR":
        raise ApiError(
            int(obj.get("code") or 0),
            f"{obj.get('code')} {obj.get('reason')}: {obj.get('message')}",
            str(obj.get("reason") or ""),
        )
    return str(kind), obj
