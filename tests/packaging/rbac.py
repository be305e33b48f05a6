"""The ClusterRole against KubeApi: the permissions each method of ``dracni.kube.api.KubeApi``
needs, derived from its client calls, and the ones the ClusterRole grants (also used by
tests/integration/test_rbac.py)."""

from __future__ import annotations

import ast
import inspect
from typing import NamedTuple

from tests.packaging.manifests import DEPLOY, DRIVER, load_one


class Permission(NamedTuple):
    group: str
    resource: str
    subresource: str
    verb: str
    name: str | None = None  # resourceNames entry, None = any name

    def __str__(self) -> str:
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        named = f" [{self.name}]" if self.name else ""
        return f"{self.verb} {self.group or 'core'}/{what}{named}"


RESOURCE = "resource.k8s.io"


CORE = ""


IPAM = "k8s.cni.cncf.io"


EVENTS = "events.k8s.io"


DRACNI = "dracni.io"


# What each KubeApi method needs.  The first permission(s) follow from the client call (checked
# against the code below); the synthetic ``resourceclaims/driver`` one is what kube-apiserver
# 1.36+ (DRAResourceClaimGranularStatusAuthorization) checks in addition when status.devices
# changes: "associated-node:" + the request's verb, named after the driver, for a caller whose
# pod-bound token names the node the claim is allocated to.  A server-side apply is a PATCH, so
# "associated-node:patch" only (dracni never PUTs status).
KUBEAPI_PERMISSIONS: dict[str, set[Permission]] = {
    "get_claim": {Permission(RESOURCE, "resourceclaims", "", "get")},
    "apply_claim_status": {
        Permission(RESOURCE, "resourceclaims", "status", "patch"),
        Permission(RESOURCE, "resourceclaims", "driver", "associated-node:patch", DRIVER),
    },
    "list_slices": {Permission(RESOURCE, "resourceslices", "", "list")},
    "watch_slices": {Permission(RESOURCE, "resourceslices", "", "watch")},
    "create_slice": {Permission(RESOURCE, "resourceslices", "", "create")},
    "replace_slice": {Permission(RESOURCE, "resourceslices", "", "update")},
    "delete_slice": {Permission(RESOURCE, "resourceslices", "", "delete")},
    "get_ipamclaim": {Permission(IPAM, "ipamclaims", "", "get")},
    "replace_ipamclaim_status": {Permission(IPAM, "ipamclaims", "status", "update")},
    "get_node": {Permission(CORE, "nodes", "", "get")},
    "create_event": {Permission(EVENTS, "events", "", "create")},
    "patch_event": {Permission(EVENTS, "events", "", "patch")},
    "list_node_pods": {Permission(CORE, "pods", "", "list")},
    # Address pools (issue 21): AddressReservations, cluster-scoped custom resources.
    "create_reservation": {Permission(DRACNI, "addressreservations", "", "create")},
    "get_reservation": {Permission(DRACNI, "addressreservations", "", "get")},
    "replace_reservation": {Permission(DRACNI, "addressreservations", "", "update")},
    "delete_reservation": {Permission(DRACNI, "addressreservations", "", "delete")},
    "list_node_reservations": {Permission(DRACNI, "addressreservations", "", "list")},
    "watch_node_pods": {Permission(CORE, "pods", "", "watch")},
    # The network-status annotation (issue 24): a pod of this node's attachments, read and patched.
    "get_pod": {Permission(CORE, "pods", "", "get")},
    "patch_pod_annotation": {Permission(CORE, "pods", "", "patch")},
}


# HTTP verb of a request -> RBAC verb, for a request naming one object and for a collection
# (kube-apiserver's RequestInfoFactory.NewRequestInfo, staging/src/k8s.io/apiserver/pkg/endpoints/
# request/requestinfo.go: GET of a name is "get", of a collection "list", "watch" with ?watch=true;
# DELETE of a collection is "deletecollection").
_HTTP_VERBS = {
    "GET": ("get", "list"),
    "POST": ("create", "create"),
    "PUT": ("update", "update"),
    "PATCH": ("patch", "patch"),
    "DELETE": ("delete", "deletecollection"),
}


def permission_of_request(method: str, resource, named: bool, subresource: str, watch: bool) -> Permission:
    """What one of ``KubeApi``'s requests needs: ``("GET", CLAIMS, named=True, "", False)`` -> get
    resource.k8s.io/resourceclaims; a watch -> watch of the collection."""
    if watch:
        assert method == "GET" and not named, "a watch is a GET of a collection"
        verb = "watch"
    else:
        verb = _HTTP_VERBS[method][0 if named else 1]
    return Permission(resource.group, resource.plural, subresource, verb)


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def kubeapi_client_calls() -> dict[str, set[Permission]]:
    """For each public KubeApi method, the permissions its requests need, from the source:
    ``self._call("<HTTP verb>", <Resource>, name=..., subresource=...)``,
    ``self._get_or_none(<Resource>, namespace, name)`` (a get) and ``self._watch(<Resource>, ...)``."""
    from dracni.kube import api

    tree = ast.parse(inspect.getsource(api))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KubeApi"]
    found: dict[str, set[Permission]] = {}
    for fn in cls.body:
        if not isinstance(fn, ast.FunctionDef) or fn.name.startswith("_"):
            continue
        perms: set[Permission] = set()
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
                continue
            kind = node.func.attr
            if kind not in ("_call", "_get_or_none", "_watch"):
                continue
            if kind == "_call":
                method_node, resource_node = node.args[0], node.args[1]
                assert isinstance(method_node, ast.Constant), f"KubeApi.{fn.name}: the HTTP verb is not a literal"
                method = method_node.value
                named = _keyword(node, "name") is not None
                sub = _keyword(node, "subresource")
                subresource = sub.value if isinstance(sub, ast.Constant) else ""
            else:
                method, resource_node, named, subresource = "GET", node.args[0], kind == "_get_or_none", ""
            assert isinstance(resource_node, ast.Name), f"KubeApi.{fn.name}: the resource is not a module constant"
            resource = getattr(api, resource_node.id)
            perms.add(permission_of_request(method, resource, named, subresource, kind == "_watch"))
        found[fn.name] = perms
    return found


def clusterrole_permissions(role: dict | None = None) -> set[Permission]:
    """The ClusterRole's rules, expanded: one Permission per group x resource x verb x name."""
    role = role or load_one(DEPLOY / "clusterrole.yaml")
    granted: set[Permission] = set()
    for rule in role["rules"]:
        assert not rule.get("nonResourceURLs"), "the service calls no non-resource URL"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert "*" not in (group, resource), "no wildcards"
                base, _, sub = resource.partition("/")
                for verb in rule["verbs"]:
                    assert verb != "*", "no wildcard verbs"
                    for name in rule.get("resourceNames") or [None]:
                        granted.add(Permission(group, base, sub, verb, name))
    return granted


def needed_permissions() -> set[Permission]:
    return set().union(*KUBEAPI_PERMISSIONS.values())
