"""What the fake serves: the API groups, patch content types, and the table of built-in resources
(kind, scope, verbs, field selectors, status subresource), plus ``Kind``, a resource's own rules on
top of the generic verbs.  Custom resources come from installed CRDs instead (crds.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .features import FeatureGates
    from .managed_fields import ManagerId
    from .store import Store

RESOURCE_GROUP = "resource.k8s.io"
RESOURCE_VERSION = "v1"
RESOURCE_API_VERSION = f"{RESOURCE_GROUP}/{RESOURCE_VERSION}"
EVENTS_GROUP = "events.k8s.io"
KUBERNETES_VERSION = {"major": "1", "minor": "34", "gitVersion": "v1.34.0"}

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"

#: A Kubernetes object (or any JSON object) as the fake keeps it.
Obj = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    plural: str
    kind: str
    group: str
    version: str
    namespaced: bool
    field_labels: frozenset[str]
    verbs: tuple[str, ...]
    singular: str
    #: Serves ``{name}/status``.
    status_subresource: bool = False
    #: Keeps ``metadata.generation`` (1 at create, bumped when ``spec`` changes).
    generation: bool = False
    #: A custom resource (no strategic merge patch; crds.py).
    custom: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``resourceclaims.resource.k8s.io`` (``nodes`` for the core group), as in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def group_kind(self) -> str:
        """``ResourceClaim.resource.k8s.io`` (``Node`` for the core group), as in 422 messages."""
        return f"{self.kind}.{self.group}" if self.group else self.kind


_CRUD = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
_READ = ("get", "list", "watch")
RESOURCES: dict[str, Resource] = {
    "resourceclaims": Resource(
        "resourceclaims",
        "ResourceClaim",
        RESOURCE_GROUP,
        RESOURCE_VERSION,
        True,
        frozenset({"metadata.name", "metadata.namespace"}),
        _CRUD,
        "resourceclaim",
        status_subresource=True,
        generation=True,
    ),
    "resourceslices": Resource(
        "resourceslices",
        "ResourceSlice",
        RESOURCE_GROUP,
        RESOURCE_VERSION,
        False,
        frozenset({"metadata.name", "spec.nodeName", "spec.driver"}),
        _CRUD,
        "resourceslice",
        generation=True,
    ),
    "nodes": Resource(
        "nodes", "Node", "", "v1", False, frozenset({"metadata.name", "spec.unschedulable"}), _READ, "node"
    ),
    # Pods: seeded by the test (``add_pod``); read, and updated or patched (core.py ``pod_update``),
    # never created or deleted over HTTP here.  Field labels: pkg/registry/core/pod/strategy.go
    # ToSelectableFields (the ones a node agent uses).
    "pods": Resource(
        "pods",
        "Pod",
        "",
        "v1",
        True,
        frozenset({"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"}),
        (*_READ, "patch", "update"),
        "pod",
    ),
    "namespaces": Resource(
        "namespaces", "Namespace", "", "v1", False, frozenset({"metadata.name", "status.phase"}), _READ, "namespace"
    ),
    # events.k8s.io/v1 Events (pkg/registry/events/event/strategy.go: namespaced, no status).
    "events": Resource(
        "events",
        "Event",
        EVENTS_GROUP,
        "v1",
        True,
        frozenset({"metadata.name", "metadata.namespace"}),
        _CRUD,
        "event",
    ),
}

#: ``(object) -> (object to store, field errors)``: a resource's rules on create.
PrepareCreate = Callable[[Obj], tuple[Obj, list[str]]]
#: ``(new, current) -> (object to store, field errors)``: its rules on an update of the main resource.
PrepareUpdate = Callable[[Obj, Obj], tuple[Obj, list[str]]]


#: ``(new, old or None, gates)``: a strategy's ``dropDisabledFields`` (fields of disabled feature
#: gates removed from ``new`` in place, unless ``old`` uses them), run before the rules above.
DropDisabled = Callable[[Obj, "Obj | None", "FeatureGates"], None]


def _as_is(obj: Obj) -> tuple[Obj, list[str]]:
    return obj, []


def _as_is_update(new: Obj, current: Obj) -> tuple[Obj, list[str]]:
    return new, []


def _drop_nothing(new: Obj, old: Obj | None, gates: FeatureGates) -> None:
    return None


@dataclass(frozen=True)
class StatusOps:
    """The ``status`` subresource's writes: ``PUT``, merge patch, server-side apply."""

    put: Callable[[Store, str, str, Any, ManagerId], Obj]
    patch: Callable[[Store, str, str, Obj, bool, ManagerId], Obj]
    apply: Callable[[Store, str, str, Any, str, bool], Obj]


@dataclass(frozen=True)
class Kind:
    """A resource and its own rules on top of the generic verbs (by default: none)."""

    res: Resource
    prepare_create: PrepareCreate = _as_is
    prepare_update: PrepareUpdate = _as_is_update
    status: StatusOps | None = None
    drop_disabled: DropDisabled = _drop_nothing
