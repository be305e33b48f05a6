"""The kubernetes Python client's configuration and connection pool, and the requests made over
them (dicts in and out): what ``kube/api.py``'s ``KubeApi`` calls run on.

The calls go through the client's ``Configuration`` (kubeconfig or in-cluster: server, TLS,
credentials and their refresh, proxies) and the urllib3 pool its ``RESTClientObject`` builds,
but not through the generated API classes: the service makes a fixed handful of calls, and
those classes are what a node agent cannot afford on every node.  Measured on this machine
(kubernetes 37): ``CoreV1Api`` alone adds 20 MiB of RSS and 0.3 s at first use,
``ResourceV1Api`` 6 MiB, the ``ApiClient`` behind them 10 MiB (pydantic, dateutil); every call
runs pydantic's ``validate_call`` and the client's parameter serialization (0.3 ms of CPU per
request), and answers are decoded by orjson here.  Objects are plain camelCase dicts, as the
API serves them.  Every failure becomes an ``ApiError`` with the HTTP status, so callers decide
on retry without knowing the client library.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import orjson
import urllib3

from .client_modules import import_client

import_client()  # before any other kubernetes import: see client_modules
from kubernetes.client.configuration import Configuration  # noqa: E402
from kubernetes.client.rest import RESTClientObject  # noqa: E402

REQUEST_TIMEOUT = 30
#: Connections kept open to the API server (the service's concurrent calls at most).
CONNECTIONS = 32


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
    """The client's ``Configuration`` and the REST transport it builds (``rest_client``), with
    the headers every request carries (``default_headers``: the User-Agent).  The attributes
    are those of the client's ``ApiClient``, so ``KubeApi`` also runs on one of those."""

    def __init__(self, configuration: Configuration) -> None:
        self.configuration = configuration
        self.rest_client = RESTClientObject(configuration)
        # At most ``connection_pool_maxsize`` requests at once, the others wait for a connection
        # (``KubeApi`` gives up after REQUEST_TIMEOUT): urllib3's default opens one more for
        # every request beyond and closes it after ("Connection pool is full, discarding
        # connection"), a TCP (and TLS) handshake each in a burst of prepares.
        self.rest_client.pool_manager.connection_pool_kw["block"] = True
        self.default_headers: dict[str, str] = {}

    @property
    def user_agent(self) -> str:
        return self.default_headers["User-Agent"]

    @user_agent.setter
    def user_agent(self, value: str) -> None:
        self.default_headers["User-Agent"] = value

    def close(self) -> None:
        self.rest_client.close()


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
    api_client = KubeClient(configuration)
    api_client.user_agent = user_agent(__version__, node)
    return api_client


def user_agent(version: str, node: str | None) -> str:
    """``dracni/<version> (<node>)``, in the shape of Kubernetes' own components' agents."""
    return f"dracni/{version} ({node})" if node else f"dracni/{version}"


def _status_error(status: int, reason_phrase: str, data: bytes) -> ApiError:
    """The error of a non-2xx answer: the Status object's message and reason when it sent one."""
    try:
        body = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict):
        return ApiError(status, str(body.get("message") or reason_phrase), str(body.get("reason") or ""))
    return ApiError(status, f"{status} {reason_phrase}")


def call(
    api_client: Any,
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
    response = send(api_client, method, path, query, body, content_type, urllib3.Timeout(total=REQUEST_TIMEOUT))
    data = response.data  # read by ``send`` already (preload_content): a broken read raised there
    if not 200 <= response.status <= 299:
        raise _status_error(response.status, response.reason or "", data)
    if not data:
        return {}
    try:
        obj: dict[str, Any] = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ApiError(0, f"the API server's answer is not JSON: {exc}") from None
    return obj


def send(
    api_client: Any,
    method: str,
    path: str,
    query: dict[str, str] | None,
    body: dict[str, Any] | None,
    content_type: str,
    timeout: urllib3.Timeout,
    stream: bool = False,
) -> Any:
    """The urllib3 response of one request: the client's host, credentials (refreshed as the
    client refreshes them: ``Configuration.auth_settings``) and connection pool."""
    configuration = api_client.configuration
    headers = dict(api_client.default_headers)
    headers["Accept"] = "application/json"
    params = list((query or {}).items())
    for auth in configuration.auth_settings().values():
        if not auth.get("value"):
            continue
        if auth["in"] == "header":
            headers[auth["key"]] = auth["value"]
        elif auth["in"] == "query":
            params.append((auth["key"], auth["value"]))
    payload = None
    if body is not None:
        headers["Content-Type"] = content_type
        payload = orjson.dumps(body)
    url = configuration.host + path + ("?" + urlencode(params) if params else "")
    extra: dict[str, Any] = {} if configuration.retries is None else {"retries": configuration.retries}
    try:
        return api_client.rest_client.pool_manager.request(
            method,
            url,
            body=payload,
            headers=headers,
            timeout=timeout,
            preload_content=not stream,
            pool_timeout=REQUEST_TIMEOUT,
            **extra,
        )
    except Exception as exc:  # connection refused, timeouts, TLS: the server is unreachable
        raise ApiError(0, f"{type(exc).__name__}: {exc}") from None


def watch(
    api_client: Any, resource: Resource, resource_version: str, timeout_seconds: int, query: dict[str, str]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Events after ``resource_version``; ``ApiError(410)`` when it is too old (re-list).

    The answer is a stream of JSON lines ``{"type", "object"}``; an ERROR event carries a
    Status, raised as an ``ApiError`` with its code.  The server ends the stream after
    ``timeout_seconds``; the client gives it ``REQUEST_TIMEOUT`` more of silence.
    """
    params = query | {
        "watch": "true",
        "resourceVersion": resource_version,
        "timeoutSeconds": str(timeout_seconds),
        "allowWatchBookmarks": "true",
    }
    timeout = urllib3.Timeout(connect=REQUEST_TIMEOUT, read=timeout_seconds + REQUEST_TIMEOUT)
    response = send(api_client, "GET", resource.path(), params, None, "", timeout, stream=True)
    try:
        if not 200 <= response.status <= 299:
            raise _status_error(response.status, response.reason or "", response.read())
        pending = b""
        for chunk in response.stream(amt=None, decode_content=False):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    yield _watch_event(line)
        if pending.strip():
            yield _watch_event(pending)
    except ApiError:
        raise
    except Exception as exc:
        raise ApiError(0, f"watch failed: {type(exc).__name__}: {exc}") from None
    finally:  # closed first: a stream left unread must not go back to the pool as it is
        response.close()
        response.release_conn()


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
