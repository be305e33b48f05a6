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
from .errors import bad_request, conflict, invalid, namespace_not_found
from .managed_fields import ManagerId
from .names import dns_subdomain_errors
from .objects import check_url_names, json_equal, merge_patch, require_object, same_object
from .resources import Kind, Obj, Resource
from .selectors import Filter
from .store import Store, check_preconditions


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


def delete(store: Store, res: Resource, namespace: str, name: str, body: Any) -> Obj:
    """``DELETE``: with ``preconditions``; an object with finalizers only gets a deletionTimestamp."""
    with store.lock:
        current = store.require(res, namespace, name)
        preconditions = (body or {}).get("preconditions") if isinstance(body, dict) else None
        if preconditions:
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
        if current["metadata"].get("finalizers"):
            if current["metadata"].get("deletionTimestamp"):
                return copy.deepcopy(current)
            new = copy.deepcopy(current)
            new["metadata"]["deletionTimestamp"] = now_rfc3339()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            return store.put(res, namespace, name, new, "MODIFIED", current)
        return store.put(res, namespace, name, copy.deepcopy(current), "DELETED", current)


def delete_collection(store: Store, flt: Filter) -> Obj:
    """``DELETE`` on a collection: each selected object as by ``delete``; the list of them."""
    with store.lock:
        deleted = [delete(store, flt.res, ns, name, None) for (_, ns, name), _ in store.matching(flt)]
        return store.list_object(flt.res, deleted)
