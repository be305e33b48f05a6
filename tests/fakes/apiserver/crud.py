"""The generic verbs on a main resource (not a subresource): create, update (``PUT``), merge
patch, delete (with preconditions and finalizers) and deletecollection.  A resource's own rules
come in through its ``Kind`` (``drop_disabled`` with the store's feature gates, then
``prepare_create``/``prepare_update``); ``metadata.generation`` follows ``spec`` where the
resource keeps one.  Call with ``Store.lock`` held where noted."""

from __future__ import annotations

import copy
from typing import Any

from . import field as fe
from .clock import now_rfc3339
from .errors import bad_request, conflict, invalid, invalid_options, namespace_not_found
from .gc import FOREGROUND_FINALIZER, ORPHAN_FINALIZER
from .managed_fields import ManagerId
from .names import dns_subdomain_errors
from .objects import check_url_names, json_equal, merge_patch, require_object, same_object
from .resources import Kind, Obj, Resource
from .selectors import Filter
from .store import Store, check_preconditions


def admit(store: Store, operation: str, res: Resource, name: str, new: Obj | None, old: Obj | None) -> None:
    """Validating admission (admission.py) of a write made over HTTP, after the object's own
    validation, before it is stored (store.go ``createValidation``/``updateValidation``/
    ``deleteValidation``); the fake's direct helpers are not admitted."""
    context = store.request_context()
    if store.admission is not None and context is not None:
        store.admission(operation, res, name, new, old, context.caller.user, context.caller.extra)


def create(store: Store, kind: Kind, namespace: str, obj: Obj, mid: ManagerId) -> Obj:
    """Validate and store a new object (lock held)."""
    res = kind.res
    meta = obj.setdefault("metadata", {})
    name = meta.get("name") or ""
    if not name and not meta.get("generateName"):
        raise invalid(res, "", [fe.required("metadata.name", "name or generateName is required")])
    if name:
        errs = dns_subdomain_errors("metadata.name", name)
        if errs:
            raise invalid(res, name, errs)
    kind.drop_disabled(obj, None, store.gates)
    obj, errs = kind.prepare_create(obj)
    if errs:
        raise invalid(res, name, errs)
    admit(store, "CREATE", res, name, obj, None)
    return store.create(res, namespace, obj, mid)


def http_create(store: Store, kind: Kind, namespace: str, body: Any, mid: ManagerId) -> Obj:
    """``POST`` on a collection."""
    res = kind.res
    obj = require_object(body, res)
    meta = obj.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise bad_request("metadata must be an object")
    if res.namespaced:
        check_url_names(meta, namespace=namespace)
    with store.lock:
        if res.namespaced and ("namespaces", "", namespace) not in store.objects:
            raise namespace_not_found(namespace)
        return create(store, kind, namespace, obj, mid)


_SYSTEM_METADATA = ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds")


def update(store: Store, kind: Kind, namespace: str, name: str, obj: Obj, mid: ManagerId) -> Obj:
    """Replace metadata and spec; ``status`` and system metadata are kept (lock held)."""
    res = kind.res
    key = (res.plural, namespace, name)
    current = store.require(res, namespace, name)
    meta = obj.setdefault("metadata", {})
    check_preconditions(res, name, current, meta)
    new = copy.deepcopy(obj)
    new_meta = new["metadata"]
    cur_meta = current["metadata"]
    for system in _SYSTEM_METADATA:
        if system in cur_meta:
            new_meta[system] = cur_meta[system]
        else:
            new_meta.pop(system, None)
    new_meta["name"] = name
    if res.namespaced:
        new_meta["namespace"] = namespace
    new_meta.pop("managedFields", None)
    if "status" in current:
        new["status"] = copy.deepcopy(current["status"])
    else:
        new.pop("status", None)
    kind.drop_disabled(new, current, store.gates)
    new, errs = kind.prepare_update(new, current)
    new_meta = new["metadata"]
    if res.generation and not json_equal(new.get("spec"), current.get("spec")):
        new_meta["generation"] = int(cur_meta.get("generation") or 1) + 1
    if errs:
        raise invalid(res, name, errs)
    admit(store, "UPDATE", res, name, new, current)
    if same_object(new, current):
        return copy.deepcopy(current)
    store.book(key).touch(mid, {f"f:{k}": {} for k in new if k not in ("apiVersion", "kind", "metadata", "status")})
    if new_meta.get("deletionTimestamp") and not new_meta.get("finalizers"):
        return store.put(res, namespace, name, new, "DELETED", current)
    return store.put(res, namespace, name, new, "MODIFIED", current)


def http_update(store: Store, kind: Kind, namespace: str, name: str, body: Any, mid: ManagerId) -> Obj:
    """``PUT`` on an object."""
    obj = require_object(body, kind.res)
    check_url_names(obj.get("metadata") or {}, name, namespace if kind.res.namespaced else None)
    with store.lock:
        return update(store, kind, namespace, name, obj, mid)


def patch_object(
    store: Store, kind: Kind, namespace: str, name: str, patch: Obj, strategic: bool, mid: ManagerId
) -> Obj:
    """A merge (or strategic merge) patch on an object: an update of the merged object whose
    resourceVersion precondition is the patch's, if it has one."""
    with store.lock:
        current = store.require(kind.res, namespace, name)
        merged = merge_patch(current, patch, strategic)
        meta = merged.setdefault("metadata", {})
        patch_rv = (patch.get("metadata") or {}).get("resourceVersion")
        meta["resourceVersion"] = patch_rv or current["metadata"]["resourceVersion"]
        return update(store, kind, namespace, name, merged, mid)


#: metav1.DeletionPropagation values.
PROPAGATION_POLICIES = ("Foreground", "Background", "Orphan")


def delete_options(body: Any, query: dict[str, str] | None = None) -> Obj:
    """The request's ``DeleteOptions``: its body when it has one, else its query parameters
    (apiserver endpoints/handlers/delete.go ``DeleteResource``), validated as
    apimachinery meta/v1/validation ``ValidateDeleteOptions`` does (422)."""
    if isinstance(body, dict) and body:
        options = dict(body)
    else:
        options = {}
        query = query or {}
        if "propagationPolicy" in query:
            options["propagationPolicy"] = query["propagationPolicy"]
        if "orphanDependents" in query:
            if query["orphanDependents"] not in ("true", "false", "1", "0"):
                raise bad_request(f"invalid orphanDependents: {query['orphanDependents']!r}")
            options["orphanDependents"] = query["orphanDependents"] in ("true", "1")
    policy = options.get("propagationPolicy")
    if options.get("orphanDependents") is not None and policy is not None:
        raise invalid_options(
            "DeleteOptions",
            fe.invalid("propagationPolicy", policy, "orphanDependents and deletionPropagation cannot be both set"),
        )
    if policy is not None and policy not in PROPAGATION_POLICIES:
        raise invalid_options(
            "DeleteOptions", fe.not_supported("propagationPolicy", policy, [*PROPAGATION_POLICIES, "nil"])
        )
    return options


def _should_orphan(finalizers: list[str], options: Obj) -> bool:
    """apiserver registry/generic/registry/store.go ``shouldOrphanDependents``: the option, else
    the object's ``orphan`` finalizer, else the resource's default (``DeleteDependents`` for every
    resource the fake serves)."""
    if options.get("orphanDependents") is not None:
        return bool(options["orphanDependents"])
    if options.get("propagationPolicy") is not None:
        return options["propagationPolicy"] == "Orphan"
    return ORPHAN_FINALIZER in finalizers


def _finalizers_for_gc(finalizers: list[str], options: Obj) -> list[str]:
    """store.go ``deletionFinalizersForGarbageCollection``: both GC finalizers removed, ``orphan``
    added back when dependents are to be orphaned.  Simplified: ``Foreground`` gets no
    ``foregroundDeletion`` finalizer (the fake's collector cascades in the background)."""
    kept = [f for f in finalizers if f not in (ORPHAN_FINALIZER, FOREGROUND_FINALIZER)]
    return kept + [ORPHAN_FINALIZER] if _should_orphan(finalizers, options) else kept


def delete(
    store: Store, res: Resource, namespace: str, name: str, body: Any, query: dict[str, str] | None = None
) -> Obj:
    """``DELETE``: with ``preconditions`` and a propagation policy (``DeleteOptions``); an object
    with finalizers, the GC's ``orphan`` included, only gets a deletionTimestamp (store.go
    ``Delete``, ``updateForGracefulDeletionAndFinalizers``).  Its dependents are the garbage
    collector's (gc.py), which the DELETED or MODIFIED write sets off."""
    options = delete_options(body, query)
    with store.lock:
        current = store.require(res, namespace, name)
        preconditions = options.get("preconditions")
        if isinstance(preconditions, dict) and preconditions:
            cur_meta = current["metadata"]
            if preconditions.get("uid") and preconditions["uid"] != cur_meta.get("uid"):
                raise conflict(
                    res,
                    name,
                    f"Precondition failed: UID in precondition: {preconditions['uid']}, "
                    f"UID in object meta: {cur_meta.get('uid')}",
                )
            if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != cur_meta.get(
                "resourceVersion"
            ):
                raise conflict(
                    res,
                    name,
                    f"Precondition failed: ResourceVersion in precondition: "
                    f"{preconditions['resourceVersion']}, ResourceVersion in object meta: "
                    f"{cur_meta.get('resourceVersion')}",
                )
        admit(store, "DELETE", res, name, None, current)
        finalizers = _finalizers_for_gc(list(current["metadata"].get("finalizers") or []), options)
        if finalizers:
            new = copy.deepcopy(current)
            new["metadata"]["finalizers"] = finalizers
            if not new["metadata"].get("deletionTimestamp"):
                new["metadata"]["deletionTimestamp"] = now_rfc3339()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
            if same_object(new, current):
                return copy.deepcopy(current)
            return store.put(res, namespace, name, new, "MODIFIED", current)
        return store.put(res, namespace, name, copy.deepcopy(current), "DELETED", current)


def delete_collection(store: Store, flt: Filter, body: Any = None, query: dict[str, str] | None = None) -> Obj:
    """``DELETE`` on a collection: each selected object as by ``delete`` (with the request's
    ``DeleteOptions``), skipping those gone meanwhile (the garbage collector's cascade: store.go
    ``DeleteCollection`` ignores NotFound); the list of them."""
    options = delete_options(body, query)
    with store.lock:
        deleted = [
            delete(store, flt.res, ns, name, options)
            for (plural, ns, name), _ in store.matching(flt)
            if (plural, ns, name) in store.objects
        ]
        return store.list_object(flt.res, deleted)
