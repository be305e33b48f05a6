"""Core ``v1`` Nodes, Namespaces and Pods, seeded by the test (``add_namespace``,
``add_node``/``get_node``/``delete_node``, ``add_pod``/``delete_pod``).  Over HTTP Nodes and
Namespaces are read-only (get, list, watch); Pods also take updates and patches (a node agent's
annotation), under the pod update rules modelled in ``pod_update``."""

from __future__ import annotations

import copy
from typing import Any

from . import field as fe
from .clock import now_rfc3339
from .resources import RESOURCES, Kind, Obj
from .store import Store

#: pkg/apis/core/validation/validation.go ``ValidatePodUpdate``: what an update may change in spec.
_MUTABLE_SPEC = (
    "spec.containers[*].image, spec.initContainers[*].image, spec.activeDeadlineSeconds, "
    "spec.tolerations (only additions to existing tolerations), spec.terminationGracePeriodSeconds"
)
#: staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go ``TotalAnnotationSizeLimitB``.
ANNOTATIONS_LIMIT = 256 * 1024


def _spec_without_mutable(spec: Any) -> Any:
    """``spec`` with the fields ``ValidatePodUpdate`` lets an update change blanked out."""
    spec = copy.deepcopy(spec) if isinstance(spec, dict) else {}
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            if isinstance(container, dict):
                container.pop("image", None)
    for key in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"):
        spec.pop(key, None)
    return spec


def pod_update(new: Obj, current: Obj) -> tuple[Obj, list[str]]:
    """A Pod update's own rules: ``ValidatePodUpdate`` (validation.go) refuses a spec change beyond
    the mutable fields, and ``ValidateAnnotations`` (objectmeta.go) annotations over 256 KiB (keys
    and values summed)."""
    errs: list[str] = []
    if _spec_without_mutable(new.get("spec")) != _spec_without_mutable(current.get("spec")):
        errs.append(fe.forbidden("spec", f"pod updates may not change fields other than {_MUTABLE_SPEC}"))
    annotations = (new.get("metadata") or {}).get("annotations") or {}
    size = sum(len(k) + len(str(v)) for k, v in annotations.items())
    if size > ANNOTATIONS_LIMIT:
        errs.append(fe.too_long("metadata.annotations", ANNOTATIONS_LIMIT))
    return new, errs


NODES = Kind(RESOURCES["nodes"])
NAMESPACES = Kind(RESOURCES["namespaces"])
PODS = Kind(RESOURCES["pods"], prepare_update=pod_update)


def ensure_namespace(store: Store, name: str, labels: dict[str, str] | None = None) -> Obj:
    """The namespace ``name``, created (Active) when it is not there yet."""
    with store.lock:
        existing = store.objects.get(("namespaces", "", name))
        if existing is not None:
            return copy.deepcopy(existing)
        obj = {
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **(labels or {})}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }
        return store.create(NAMESPACES.res, "", obj, ("kube-apiserver", "Update", ""))


class NodesAndNamespaces:
    """``FakeApiServer``'s helpers for Nodes and Namespaces."""

    _store: Store

    def add_namespace(self, name: str, labels: dict[str, str] | None = None) -> Obj:
        return ensure_namespace(self._store, name, labels)

    def add_node(self, name: str, labels: dict[str, str] | None = None, uid: str | None = None) -> Obj:
        """A Node as a kubelet registers it (``kubernetes.io/hostname`` label, Ready)."""
        metadata: dict[str, Any] = {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})},
        }
        obj = {
            "metadata": metadata,
            "spec": {},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": now_rfc3339(),
                        "lastTransitionTime": now_rfc3339(),
                    }
                ]
            },
        }
        if uid:
            metadata["uid"] = uid
        with self._store.lock:
            return self._store.create(NODES.res, "", obj, ("kubelet", "Update", ""), keep_uid=True)

    def get_node(self, name: str) -> Obj | None:
        return self._store.copy_of("nodes", "", name)

    def delete_node(self, name: str) -> Obj | None:
        return self._store.remove("nodes", "", name)

    def add_pod(
        self, namespace: str, name: str, *, node: str, claims: dict[str, str] | None = None, uid: str | None = None
    ) -> Obj:
        """A Pod as the scheduler leaves it: bound to ``node`` (``spec.nodeName``), naming
        ``claims`` (pod claim name -> ResourceClaim name, ``spec.resourceClaims[].resourceClaimName``).
        ``uid``: the pod's UID (a test that reserves a claim for the pod before binding it)."""
        ensure_namespace(self._store, namespace)
        obj = {
            "metadata": {"name": name, "namespace": namespace, **({"uid": uid} if uid else {})},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "main", "image": "busybox"}],
                "resourceClaims": [{"name": k, "resourceClaimName": v} for k, v in (claims or {}).items()],
            },
            "status": {"phase": "Pending"},
        }
        with self._store.lock:
            return self._store.create(PODS.res, namespace, obj, ("kube-scheduler", "Update", ""), keep_uid=bool(uid))

    def delete_pod(self, namespace: str, name: str) -> Obj | None:
        return self._store.remove("pods", namespace, name)
