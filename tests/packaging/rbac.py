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


# kubernetes client method prefix -> RBAC verb (CustomObjectsApi says get_, the typed APIs read_).
_CLIENT_VERBS = (
    ("read_", "get"),
    ("get_", "get"),
    ("list_", "list"),
    ("create_", "create"),
    ("replace_", "update"),
    ("patch_", "patch"),
    ("delete_collection_", "deletecollection"),
    ("delete_", "delete"),
)


# KubeApi attribute holding a typed kubernetes client API object -> its API group.
_CLIENT_GROUPS = {"resource": RESOURCE, "core": CORE, "events": EVENTS}


# ... and the one holding a CustomObjectsApi, whose calls name (group, version, plural) as arguments.
_CUSTOM = "custom"


def permission_of_client_call(
    attribute: str, method: str, watch: bool, custom: tuple[str, str, str] | None = None
) -> Permission:
    """``self.resource.patch_namespaced_resource_claim_status`` -> patch resourceclaims/status;
    ``self.custom.replace_namespaced_custom_object_status`` with ``custom`` = (group, version,
    plural) -> update <plural>/status; ``self.custom.create_cluster_custom_object`` (a
    cluster-scoped custom resource) -> create <plural>."""
    for prefix, verb in _CLIENT_VERBS:  # noqa: B007 (verb is read after the break)
        if method.startswith(prefix):
            rest = method[len(prefix) :]
            break
    else:
        raise AssertionError(f"unknown kubernetes client method {method}")
    if watch:
        assert verb == "list", f"a watch goes through a list function, not {method}"
        verb = "watch"
    rest = rest.removeprefix("namespaced_").removesuffix("_for_all_namespaces")
    if attribute == _CUSTOM:  # CustomObjectsApi: get_cluster_custom_object for a cluster-scoped one
        rest = rest.removeprefix("cluster_")
    subresource = ""
    if rest.endswith("_status"):
        rest, subresource = rest.removesuffix("_status"), "status"
    if attribute == _CUSTOM:
        assert rest == "custom_object" and custom, f"cannot tell what {method} touches"
        return Permission(custom[0], custom[2], subresource, verb)
    return Permission(_CLIENT_GROUPS[attribute], rest.replace("_", "") + "s", subresource, verb)


def _custom_resource(fn: ast.FunctionDef, module) -> tuple[str, str, str] | None:
    """The (group, version, plural) a KubeApi method unpacks from a module constant, e.g.
    ``group, version, plural = IPAMCLAIMS``."""
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Name)
            and isinstance(node.targets[0], ast.Tuple)
            and [getattr(e, "id", None) for e in node.targets[0].elts] == ["group", "version", "plural"]
        ):
            return tuple(getattr(module, node.value.id))
    return None


def kubeapi_client_calls() -> dict[str, set[Permission]]:
    """For each public KubeApi method, the permissions its kubernetes client calls need (from
    the source: ``_call(self.<api>.<fn>, ...)`` and ``self._watch(self.<api>.<fn>, ...)``)."""
    from dracni.kube import api

    tree = ast.parse(inspect.getsource(api))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KubeApi"]
    found: dict[str, set[Permission]] = {}
    for fn in cls.body:
        if not isinstance(fn, ast.FunctionDef) or fn.name.startswith("_"):
            continue
        perms: set[Permission] = set()
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            callee = node.func
            is_call = isinstance(callee, ast.Name) and callee.id == "_call"
            is_watch = isinstance(callee, ast.Attribute) and callee.attr == "_watch"
            if not (is_call or is_watch):
                continue
            target = node.args[0]
            assert (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Attribute)
                and target.value.attr in (*_CLIENT_GROUPS, _CUSTOM)
            ), f"KubeApi.{fn.name}: unexpected call target"
            perms.add(permission_of_client_call(target.value.attr, target.attr, is_watch, _custom_resource(fn, api)))
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
