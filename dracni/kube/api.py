"""The service's one door to the Kubernetes API: the kubernetes Python client's configuration
and transport, with the requests built here (dicts in and out).

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

Each request names its resource (``Resource``: group, version, plural) and HTTP verb, so the
RBAC the ClusterRole must grant follows from this module's code (tests/packaging/rbac.py).
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

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
#: What the client sends for a patch of an object body (kube-apiserver's default for a typed
#: object, client-go ``EventSinkImpl.Patch``'s choice for an Event series).
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
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


CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", namespaced=True)
SLICES = Resource("resource.k8s.io", "v1", "resourceslices", namespaced=False)
PODS = Resource("", "v1", "pods", namespaced=True)
NODES = Resource("", "v1", "nodes", namespaced=False)
EVENTS = Resource("events.k8s.io", "v1", "events", namespaced=True)
IPAMCLAIMS = Resource("k8s.cni.cncf.io", "v1alpha1", "ipamclaims", namespaced=True)
RESERVATIONS = Resource("dracni.io", "v1alpha1", "addressreservations", namespaced=False)


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


class KubeApi:
    """The calls dracni's service makes; ``packaging/`` RBAC grants exactly these."""

    def __init__(self, api_client: Any) -> None:
        """``api_client``: a ``KubeClient`` (``load_api_client``) or the client's ``ApiClient``."""
        self.api_client = api_client

    # -- resourceclaims: get (the ones kubelet names); status: patch (server-side apply) --------
    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_or_none(CLAIMS, namespace, name)

    def apply_claim_status(
        self, namespace: str, name: str, devices: list[dict[str, Any]], field_manager: str, uid: str | None = None
    ) -> dict[str, Any]:
        """Server-side apply of this driver's ``status.devices`` entries (force: we own them).

        A merge or strategic patch would replace the whole list and wipe other drivers' entries.
        ``uid`` is a precondition: a claim deleted and re-created under the same name is another
        claim, and the server refuses (409) to give it the old one's status.
        """
        metadata = {"name": name, "namespace": namespace} | ({"uid": uid} if uid else {})
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": metadata,
            "status": {"devices": devices},
        }
        return self._call(
            "PATCH",
            CLAIMS,
            namespace=namespace,
            name=name,
            subresource="status",
            query={"fieldManager": field_manager, "force": "true"},
            body=body,
            content_type=APPLY_PATCH,
        )

    # -- resourceslices: CRUD and watch ----------------------------------------------------------
    def list_slices(self, field_selector: str, resource_version: str = "0") -> tuple[list[dict[str, Any]], str]:
        """The slices matching ``field_selector`` and the list's resourceVersion.

        ``resource_version="0"`` (the default): "any version", served from the API server's watch
        cache, not a quorum read from etcd (what an informer's first LIST asks for); the watch
        that follows from the answer's resourceVersion brings it up to date.
        """
        data = self._call("GET", SLICES, query={"fieldSelector": field_selector, "resourceVersion": resource_version})
        return data.get("items") or [], data.get("metadata", {}).get("resourceVersion", "")

    def watch_slices(
        self, field_selector: str, resource_version: str, timeout_seconds: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(type, object) events after ``resource_version``: ADDED, MODIFIED, DELETED and
        BOOKMARK (the object then carries only ``metadata.resourceVersion``)."""
        yield from self._watch(SLICES, resource_version, timeout_seconds, {"fieldSelector": field_selector})

    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", SLICES, body=body)

    def replace_slice(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("PUT", SLICES, name=name, body=body)

    def delete_slice(self, name: str) -> None:
        try:
            self._call("DELETE", SLICES, name=name)
        except ApiError as exc:
            if exc.status != 404:
                raise

    # -- pods: list and watch of this node's pods (field selector spec.nodeName) ---------------
    def list_node_pods(self, node: str) -> tuple[list[dict[str, Any]], str]:
        """This node's pods; ``resourceVersion=0`` lets the API server answer from its watch
        cache instead of etcd."""
        data = self._call("GET", PODS, query={"fieldSelector": f"spec.nodeName={node}", "resourceVersion": "0"})
        return data.get("items") or [], data.get("metadata", {}).get("resourceVersion", "")

    def watch_node_pods(
        self, node: str, resource_version: str, timeout_seconds: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        yield from self._watch(PODS, resource_version, timeout_seconds, {"fieldSelector": f"spec.nodeName={node}"})

    # -- pods: get and merge patch of one annotation (network-status) ----------------------------
    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_or_none(PODS, namespace, name)

    def patch_pod_annotation(self, namespace: str, name: str, key: str, value: str | None, rv: str) -> dict[str, Any]:
        """A JSON merge patch of one annotation (None: removed) with ``rv`` as precondition
        (409 Conflict when the pod changed since it was read)."""
        body = {"metadata": {"resourceVersion": rv, "annotations": {key: value}}}
        return self._call("PATCH", PODS, namespace=namespace, name=name, body=body, content_type=MERGE_PATCH)

    # -- ipamclaims (k8s.cni.cncf.io/v1alpha1): get; status: update ------------------------------
    def get_ipamclaim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_or_none(IPAMCLAIMS, namespace, name)

    def replace_ipamclaim_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT the status subresource; the object's resourceVersion is the precondition (409)."""
        meta = obj["metadata"]
        return self._call(
            "PUT", IPAMCLAIMS, namespace=meta["namespace"], name=meta["name"], subresource="status", body=obj
        )

    # -- addressreservations (dracni.io/v1alpha1, cluster-scoped): create, get, update, delete,
    # and list of this node's (label selector) -------------------------------------------------
    def create_reservation(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", RESERVATIONS, body=body)

    def get_reservation(self, name: str) -> dict[str, Any] | None:
        return self._get_or_none(RESERVATIONS, None, name)

    def replace_reservation(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT; the body's resourceVersion is the precondition (409 Conflict)."""
        return self._call("PUT", RESERVATIONS, name=name, body=body)

    def delete_reservation(self, name: str, uid: str) -> None:
        """DELETE with the object's UID as precondition: never another holder's reservation of
        the same address made since; gone already (404) or re-made (409) is not an error."""
        options = {"preconditions": {"uid": uid}} if uid else None
        try:
            self._call("DELETE", RESERVATIONS, name=name, body=options)
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise

    def list_node_reservations(self, label_selector: str) -> list[dict[str, Any]]:
        """The reservations matching ``label_selector`` (``dracni.io/node=<this node>``)."""
        data = self._call("GET", RESERVATIONS, query={"labelSelector": label_selector})
        return data.get("items") or []

    # -- events (events.k8s.io/v1): create; patch (a series' count) ------------------------------
    def create_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", EVENTS, namespace=namespace, body=body)

    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A strategic merge patch, as client-go's ``EventSinkImpl.Patch`` sends for a series."""
        return self._call(
            "PATCH", EVENTS, namespace=namespace, name=name, body=patch, content_type=STRATEGIC_MERGE_PATCH
        )

    # -- nodes: get ----------------------------------------------------------------------------
    def get_node(self, name: str) -> dict[str, Any] | None:
        return self._get_or_none(NODES, None, name)

    # -- the requests ----------------------------------------------------------------------------
    def _get_or_none(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self._call("GET", resource, namespace=namespace, name=name)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def _call(
        self,
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
        response = self._send(method, path, query, body, content_type, urllib3.Timeout(total=REQUEST_TIMEOUT))
        try:
            data = response.data
        except Exception as exc:  # the connection broke while the answer was read
            raise ApiError(0, f"{type(exc).__name__}: {exc}") from None
        if not 200 <= response.status <= 299:
            raise _status_error(response.status, response.reason or "", data)
        if not data:
            return {}
        try:
            obj: dict[str, Any] = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ApiError(0, f"the API server's answer is not JSON: {exc}") from None
        return obj

    def _send(
        self,
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
        api_client = self.api_client
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

    def _watch(
        self, resource: Resource, resource_version: str, timeout_seconds: int, query: dict[str, str]
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
        response = self._send("GET", resource.path(), params, None, "", timeout, stream=True)
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
