"""The service's one door to the Kubernetes API: every call it makes (``KubeApi``), on the
client's configuration, over libcurl (``kube/transport.py`` says why not its generated API
classes nor its urllib3 transport).

Each request names its resource (``Resource``: group, version, plural) and HTTP verb, so the
RBAC the ClusterRole must grant follows from this module's code (tests/packaging/rbac.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from . import transport
from .transport import ApiError as ApiError
from .transport import KubeClient as KubeClient
from .transport import Resource
from .transport import load_api_client as load_api_client
from .transport import user_agent as user_agent

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
#: What the client sends for a patch of an object body (kube-apiserver's default for a typed
#: object, client-go ``EventSinkImpl.Patch``'s choice for an Event series).
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", namespaced=True)
SLICES = Resource("resource.k8s.io", "v1", "resourceslices", namespaced=False)
PODS = Resource("", "v1", "pods", namespaced=True)
NODES = Resource("", "v1", "nodes", namespaced=False)
EVENTS = Resource("events.k8s.io", "v1", "events", namespaced=True)
IPAMCLAIMS = Resource("k8s.cni.cncf.io", "v1alpha1", "ipamclaims", namespaced=True)
RESERVATIONS = Resource("dracni.io", "v1alpha1", "addressreservations", namespaced=False)


class KubeApi:
    """The calls dracni's service makes; ``packaging/`` RBAC grants exactly these."""

    def __init__(self, api_client: Any) -> None:
        """``api_client``: a ``KubeClient`` (``load_api_client``), or the client's ``ApiClient``
        (tests), whose configuration and User-Agent a ``KubeClient`` then takes."""
        if not isinstance(api_client, KubeClient):
            api_client = KubeClient(api_client.configuration, api_client.user_agent)
        self.api_client: KubeClient = api_client

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

    def _call(self, method: str, resource: Resource, **options: Any) -> dict[str, Any]:
        """One request (``transport.call``'s options: namespace, name, subresource, query, body,
        content_type); its answer decoded (``{}`` for an empty one)."""
        return transport.call(self.api_client, method, resource, **options)

    def _watch(
        self, resource: Resource, resource_version: str, timeout_seconds: int, query: dict[str, str]
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Events after ``resource_version``; ``ApiError(410)`` when it is too old (re-list)."""
        yield from transport.watch(self.api_client, resource, resource_version, timeout_seconds, query)
