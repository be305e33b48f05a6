"""CustomResourceDefinitions: an ``apiextensions.k8s.io/v1`` CRD object turned into served
resources, as kube-apiserver's apiextensions-apiserver does
(``staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/customresource_handler.go``:
``crdHandler.ServeHTTP`` routes ``/apis/<group>/<version>/...`` to the CRD serving that version,
``crdHandler.getOrCreateServingInfoFor`` builds one storage per served version).

Per served version (``versions[].served``): a ``Resource`` (names from ``spec.names``; scope
``Namespaced``/``Cluster``; the generic verbs; field selectors ``metadata.name`` and, when
namespaced, ``metadata.namespace``, as ``pkg/registry/customresource/strategy.go``
``objectMetaFieldsSet`` gives; ``metadata.generation`` kept) and a ``Kind`` whose rules are the
custom resource strategy's (``strategy.go``): ``PrepareForCreate`` drops ``status`` when the
status subresource is on, ``PrepareForUpdate`` keeps the stored ``status``; both writes are pruned
and validated against the version's ``openAPIV3Schema`` (crd_schema.py), then the install's
``hook`` (crd_status.Hook) runs.  The ``status`` subresource is crd_status.py's.

Simplified: several served versions share one store and convert with the ``None`` strategy
(``pkg/apiserver/conversion/nop_converter.go``: only ``apiVersion`` changes), but a stored object
and its watch events keep the ``apiVersion`` of the write that stored it; ``selectableFields``,
``scale``, defaults and the CRD objects themselves (``customresourcedefinitions``) are not
served; a CRD is installed by the test (``install_crd``), not ``POST``ed.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import crd_schema
from .crd_status import Hook, set_status, status_ops
from .resources import RESOURCES, Kind, Obj, Resource

if TYPE_CHECKING:
    from .store import Store

_CRUD = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass
class ServedCrd:
    """One installed CRD: its object and a ``Kind`` per served version."""

    crd: Obj
    kinds: dict[str, Kind]
    storage: str
    hook: Hook | None = None
    schemas: dict[str, crd_schema.Schema] = field(default_factory=dict)
    columns: dict[str, list[Obj]] = field(default_factory=dict)

    @property
    def group(self) -> str:
        return str(self.crd["spec"]["group"])

    @property
    def names(self) -> Obj:
        return dict(self.crd["spec"]["names"])

    @property
    def plural(self) -> str:
        return str(self.names["plural"])

    @property
    def resource(self) -> Resource:
        """The storage version's resource (the one the store, the GC and the helpers use)."""
        return self.kinds[self.storage].res

    def served_versions(self) -> list[str]:
        return list(self.kinds)


def _version_priority(version: str) -> tuple[int, int, int]:
    """apimachinery ``version.CompareKubeAwareVersionStrings``: GA, then beta, then alpha, higher
    numbers first (as ``(rank, major, minor)``, smaller sorts first)."""
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0)
    rank = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (rank, -int(m.group(1)), -int(m.group(3) or 0))


def sorted_versions(versions: Iterable[str]) -> list[str]:
    return sorted(versions, key=_version_priority)


def _check(crd: Any) -> None:
    if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
        raise ValueError("not a CustomResourceDefinition object")
    if crd.get("apiVersion") != "apiextensions.k8s.io/v1":
        raise ValueError(f"only apiextensions.k8s.io/v1 CRDs are served, not {crd.get('apiVersion')!r}")
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    for key in ("plural", "kind"):
        if not names.get(key):
            raise ValueError(f"spec.names.{key} is required")
    if crd.get("metadata", {}).get("name") != f"{names['plural']}.{spec.get('group')}":
        raise ValueError("metadata.name must be <spec.names.plural>.<spec.group>")
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        raise ValueError("spec.scope must be Namespaced or Cluster")
    if names["plural"] in RESOURCES:
        raise ValueError(f"the fake serves {names['plural']} already (plurals are unique across the fake)")


def _strategy(res: Resource, schema: crd_schema.Schema, status_on: bool, hook: Hook | None) -> tuple[Any, Any]:
    """strategy.go ``PrepareForCreate``/``PrepareForUpdate`` + ``Validate``/``ValidateUpdate``."""

    def checked(obj: Obj) -> list[str]:
        errs = crd_schema.validate(obj, schema)
        return errs + (hook(obj) if hook is not None else [])

    def prepare_create(obj: Obj) -> tuple[Obj, list[str]]:
        obj = crd_schema.prune(obj, schema)[0]
        if status_on:
            obj.pop("status", None)
        return obj, checked(obj)

    def prepare_update(new: Obj, current: Obj) -> tuple[Obj, list[str]]:
        # crud.update has put the stored status back; it is not validated again (as ratcheting
        # would let an unchanged field pass).
        new = crd_schema.prune(new, schema)[0]
        main = {k: v for k, v in new.items() if k != "status"}
        stored = {k: v for k, v in current.items() if k != "status"}
        return new, checked(main) + crd_schema.transition_errors(main, stored, schema)

    return prepare_create, prepare_update


def build(crd: Obj, hook: Hook | None = None) -> ServedCrd:
    """The served form of a CRD object (``ValueError`` when the fake cannot serve it)."""
    _check(crd)
    crd = copy.deepcopy(crd)
    spec = crd["spec"]
    names = spec["names"]
    kinds: dict[str, Kind] = {}
    schemas: dict[str, crd_schema.Schema] = {}
    columns: dict[str, list[Obj]] = {}
    storage = ""
    for version in spec.get("versions") or []:
        if version.get("storage"):
            storage = version["name"]
        if not version.get("served"):
            continue
        schema = ((version.get("schema") or {}).get("openAPIV3Schema")) or {"type": "object"}
        status_on = "status" in (version.get("subresources") or {})
        namespaced = spec["scope"] == "Namespaced"
        res = Resource(
            names["plural"],
            names["kind"],
            spec["group"],
            version["name"],
            namespaced,
            frozenset({"metadata.name", "metadata.namespace"} if namespaced else {"metadata.name"}),
            _CRUD,
            names.get("singular") or names["kind"].lower(),
            status_subresource=status_on,
            generation=True,
            custom=True,
        )
        create, update = _strategy(res, schema, status_on, hook)
        kinds[version["name"]] = Kind(res, create, update, status_ops(res, schema, hook) if status_on else None)
        schemas[version["name"]] = schema
        columns[version["name"]] = list(version.get("additionalPrinterColumns") or [])
    if not kinds:
        raise ValueError("the CRD serves no version")
    if storage not in kinds:
        storage = next(iter(kinds))
    return ServedCrd(crd, kinds, storage, hook, schemas, columns)


class CrdHelpers:
    """``FakeApiServer``'s CRD switch and direct helpers (no HTTP; each write is an event)."""

    _store: Store

    def install_crd(self, crd: Obj, *, hook: Hook | None = None) -> ServedCrd:
        """Serve a CRD (as if it was applied and became Established): its group appears in
        discovery and its paths answer.  Installing it again replaces its definition (objects
        stay).  ``hook``: rules the fake cannot read from the schema (crd_status.Hook)."""
        served = build(crd, hook)
        with self._store.lock:
            self._store.crds[served.plural] = served
        return served

    def uninstall_crd(self, name: str) -> int:
        """Stop serving a CRD (``<plural>.<group>``); its objects go away (DELETED events), as
        when a CRD is deleted; how many went."""
        with self._store.lock:
            plural = next((p for p, s in self._store.crds.items() if s.crd["metadata"]["name"] == name), None)
            if plural is None:
                return 0
            victims = [(ns, n) for (r, ns, n) in sorted(self._store.objects) if r == plural]
            for namespace, obj_name in victims:
                self._store.remove(plural, namespace, obj_name)
            del self._store.crds[plural]
            return len(victims)

    @property
    def crds(self) -> list[Obj]:
        """The installed CRD objects."""
        with self._store.lock:
            return [copy.deepcopy(s.crd) for s in self._store.crds.values()]

    def get_custom_object(self, plural: str, name: str, namespace: str = "") -> Obj | None:
        return self._store.copy_of(plural, namespace, name)

    def list_custom_objects(self, plural: str, namespace: str | None = None) -> list[Obj]:
        return self._store.copies(plural, namespace)

    def set_custom_status(
        self, plural: str, name: str, status: Obj | None, namespace: str = "", *, manager: str = "controller"
    ) -> Obj:
        """Replace ``status`` as another controller's status ``PUT`` would (validated)."""
        served = self._store.crds[plural]
        ops = served.kinds[served.storage].status
        if ops is None:
            raise ValueError(f"{plural} has no status subresource")
        return set_status(ops, self._store, served.resource, namespace, name, status, manager)
