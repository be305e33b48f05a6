"""The service's one door to the Kubernetes API (the kubernetes Python client, dicts in and out).

Objects are handled as plain camelCase dicts, as the API serves them (``_preload_content=False``
skips the client's pydantic models).  Every failure becomes an ``ApiError`` with the HTTP status,
so callers decide on retry without knowing the client library.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .client_modules import import_client

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

client, watch = import_client()  # before any other kubernetes import: see client_modules
from kubernetes.client.exceptions import ApiException  # noqa: E402

APPLY_PATCH = "application/apply-patch+yaml"
IPAMCLAIMS = ("k8s.cni.cncf.io", "v1alpha1", "ipamclaims")
RESERVATIONS = ("dracni.io", "v1alpha1", "addressreservations")
REQUEST_TIMEOUT = 30
#: Connections kept open to the API server (the service's concurrent calls at most).
CONNECTIONS = 32


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


def load_api_client(kubeconfig: str | None = None, node: str | None = None) -> ApiClient:
    """In-cluster config when no kubeconfig is named (the DaemonSet), else the file.

    Every request says it is dracni, which version, on which node (User-Agent), so audit logs
    and API priority and fairness rules can tell dracni's requests apart.
    """
    from .. import __version__

    if kubeconfig:
        configuration = client.Configuration()
        from kubernetes.config.kube_config import load_kube_config  # only with a kubeconfig (tests)

        load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        configuration = client.Configuration()
        from kubernetes.config.incluster_config import load_incluster_config

        load_incluster_config(client_configuration=configuration)
    # Kubelet prepares pods in parallel and the service reads their claims at the same time:
    # keep that many connections (the client's default is 5 per CPU).
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, CONNECTIONS)
    api_client: ApiClient = client.ApiClient(configuration)
    api_client.user_agent = user_agent(__version__, node)
    return api_client


def user_agent(version: str, node: str | None) -> str:
    """``dracni/<version> (<node>)``, in the shape of Kubernetes' own components' agents."""
    return f"dracni/{version} ({node})" if node else f"dracni/{version}"


def _request(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The decoded JSON answer of a client call (None for an empty body)."""
    try:
        resp = fn(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
    except ApiException as exc:
        raise ApiError(exc.status or 0, _message(exc), _reason(exc)) from None
    except ValueError as exc:  # the client refused our body (pydantic): retrying cannot help
        raise ApiError(400, f"invalid request: {exc}") from None
    except Exception as exc:  # connection refused, timeouts, TLS: the server is unreachable
        raise ApiError(0, f"{type(exc).__name__}: {exc}") from None
    return json.loads(resp.data) if resp.data else None


def _message(exc: ApiException) -> str:
    try:
        return json.loads(exc.body or "").get("message") or str(exc.reason)
    except (TypeError, ValueError, AttributeError):
        return f"{exc.status} {exc.reason}"


def _reason(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "").get("reason") or "")
    except (TypeError, ValueError, AttributeError):
        return ""


def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """``_request`` typed for the calls KubeApi makes: each answers with an object."""
    obj: dict[str, Any] = _request(fn, *args, **kwargs)
    return obj


class KubeApi:
    """The calls dracni's service makes; ``packaging/`` RBAC grants exactly these."""

    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client
        self.resource = client.ResourceV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.events = client.EventsV1Api(api_client)

    # -- resourceclaims: get (the ones kubelet names); status: patch (server-side apply) --------
    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return _call(self.resource.read_namespaced_resource_claim, name, namespace)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

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
        return _call(
            self.resource.patch_namespaced_resource_claim_status,
            name,
            namespace,
            body,
            field_manager=field_manager,
            force=True,
            _content_type=APPLY_PATCH,
        )

    # -- resourceslices: CRUD and watch ----------------------------------------------------------
    def list_slices(self, field_selector: str, resource_version: str = "0") -> tuple[list[dict[str, Any]], str]:
        """The slices matching ``field_selector`` and the list's resourceVersion.

        ``resource_version="0"`` (the default): "any version", served from the API server's watch
        cache, not a quorum read from etcd (what an informer's first LIST asks for); the watch
        that follows from the answer's resourceVersion brings it up to date.
        """
        data = _call(
            self.resource.list_resource_slice, field_selector=field_selector, resource_version=resource_version
        )
        return data.get("items") or [], data.get("metadata", {}).get("resourceVersion", "")

    def watch_slices(
        self, field_selector: str, resource_version: str, timeout_seconds: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(type, object) events after ``resource_version``: ADDED, MODIFIED, DELETED and
        BOOKMARK (the object then carries only ``metadata.resourceVersion``)."""
        yield from self._watch(
            self.resource.list_resource_slice, resource_version, timeout_seconds, field_selector=field_selector
        )

    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        return _call(self.resource.create_resource_slice, body)

    def replace_slice(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return _call(self.resource.replace_resource_slice, name, body)

    def delete_slice(self, name: str) -> None:
        try:
            _call(self.resource.delete_resource_slice, name)
        except ApiError as exc:
            if exc.status != 404:
                raise

    # -- pods: list and watch of this node's pods (field selector spec.nodeName) ---------------
    def list_node_pods(self, node: str) -> tuple[list[dict[str, Any]], str]:
        """This node's pods; ``resourceVersion=0`` lets the API server answer from its watch
        cache instead of etcd."""
        data = _call(
            self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}", resource_version="0"
        )
        return data.get("items") or [], data.get("metadata", {}).get("resourceVersion", "")

    def watch_node_pods(
        self, node: str, resource_version: str, timeout_seconds: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        yield from self._watch(
            self.core.list_pod_for_all_namespaces,
            resource_version,
            timeout_seconds,
            field_selector=f"spec.nodeName={node}",
        )

    # -- pods: get and merge patch of one annotation (network-status) ----------------------------
    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return _call(self.core.read_namespaced_pod, name, namespace)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def patch_pod_annotation(self, namespace: str, name: str, key: str, value: str | None, rv: str) -> dict[str, Any]:
        """A JSON merge patch of one annotation (None: removed) with ``rv`` as precondition
        (409 Conflict when the pod changed since it was read)."""
        body = {"metadata": {"resourceVersion": rv, "annotations": {key: value}}}
        return _call(
            self.core.patch_namespaced_pod, name, namespace, body, _content_type="application/merge-patch+json"
        )

    # -- ipamclaims (k8s.cni.cncf.io/v1alpha1): get; status: update ------------------------------
    def get_ipamclaim(self, namespace: str, name: str) -> dict[str, Any] | None:
        group, version, plural = IPAMCLAIMS
        try:
            return _call(self.custom.get_namespaced_custom_object, group, version, namespace, plural, name)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def replace_ipamclaim_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT the status subresource; the object's resourceVersion is the precondition (409)."""
        group, version, plural = IPAMCLAIMS
        meta = obj["metadata"]
        return _call(
            self.custom.replace_namespaced_custom_object_status,
            group,
            version,
            meta["namespace"],
            plural,
            meta["name"],
            obj,
        )

    # -- addressreservations (dracni.io/v1alpha1, cluster-scoped): create, get, update, delete,
    # and list of this node's (label selector) -------------------------------------------------
    def create_reservation(self, body: dict[str, Any]) -> dict[str, Any]:
        group, version, plural = RESERVATIONS
        return _call(self.custom.create_cluster_custom_object, group, version, plural, body)

    def get_reservation(self, name: str) -> dict[str, Any] | None:
        group, version, plural = RESERVATIONS
        try:
            return _call(self.custom.get_cluster_custom_object, group, version, plural, name)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def replace_reservation(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT; the body's resourceVersion is the precondition (409 Conflict)."""
        group, version, plural = RESERVATIONS
        return _call(self.custom.replace_cluster_custom_object, group, version, plural, name, body)

    def delete_reservation(self, name: str, uid: str) -> None:
        """DELETE with the object's UID as precondition: never another holder's reservation of
        the same address made since; gone already (404) or re-made (409) is not an error."""
        group, version, plural = RESERVATIONS
        options = {"preconditions": {"uid": uid}} if uid else None
        try:
            _call(self.custom.delete_cluster_custom_object, group, version, plural, name, body=options)
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise

    def list_node_reservations(self, label_selector: str) -> list[dict[str, Any]]:
        """The reservations matching ``label_selector`` (``dracni.io/node=<this node>``)."""
        group, version, plural = RESERVATIONS
        data = _call(self.custom.list_cluster_custom_object, group, version, plural, label_selector=label_selector)
        return data.get("items") or []

    # -- events (events.k8s.io/v1): create; patch (a series' count) ------------------------------
    def create_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return _call(self.events.create_namespaced_event, namespace, body)

    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A strategic merge patch (the client's choice for an object body), as client-go's
        ``EventSinkImpl.Patch`` sends for a series."""
        return _call(self.events.patch_namespaced_event, name, namespace, patch)

    # -- nodes: get ----------------------------------------------------------------------------
    def get_node(self, name: str) -> dict[str, Any] | None:
        try:
            return _call(self.core.read_node, name)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    # -- watch plumbing --------------------------------------------------------------------------
    def _watch(
        self, list_fn: Callable[..., Any], resource_version: str, timeout_seconds: int, **kwargs: Any
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Events after ``resource_version``; ``ApiError(410)`` when it is too old (re-list).

        ``return_type="object"``: plain dicts (the client cannot guess the item model of the
        resource.k8s.io lists).  The client turns an ERROR event into an ApiException itself.
        """
        w = watch.Watch(return_type="object")
        try:
            for event in w.stream(
                list_fn,
                resource_version=resource_version,
                timeout_seconds=timeout_seconds,
                allow_watch_bookmarks=True,
                **kwargs,
            ):
                kind, obj = event.get("type"), event.get("raw_object") or event.get("object") or {}
                yield kind, obj
        except ApiException as exc:
            raise ApiError(exc.status or 0, _message(exc)) from None
        except ApiError:
            raise
        except Exception as exc:
            raise ApiError(0, f"watch failed: {type(exc).__name__}: {exc}") from None
        finally:
            w.stop()
