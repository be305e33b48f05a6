"""The ``status`` subresource of a custom resource whose CRD declares ``subresources.status``:
``PUT`` (resourceVersion precondition; only the body's ``status`` is taken), merge patch, and
server-side apply kept simple (ownership of the top-level status fields).

Upstream: ``staging/src/k8s.io/apiextensions-apiserver/pkg/registry/customresource/strategy.go``
``statusStrategy.PrepareForUpdate`` (everything but ``status`` comes from the stored object),
``statusStrategy.ValidateUpdate`` (the schema's ``status``), and the generic registry's
update/patch handlers (``apiserver/pkg/endpoints/handlers/patch.go``).  Each served version gets
its own ``StatusOps`` bound to its resource and schema (``status_ops``)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from . import crd_schema
from .apply import apply_fields, check_applied_object
from .errors import bad_request, invalid
from .managed_fields import Bookkeeping, ManagerId
from .objects import check_url_names, json_equal, merge_patch, require_object
from .resources import Obj, Resource, StatusOps
from .store import Store, check_preconditions

#: ``(object or {"status": ...}) -> field errors``: a CRD's rules the fake cannot read from its
#: schema (CEL ``x-kubernetes-validations``, or a test suite's stricter rule), run after it.
Hook = Callable[[Obj], list[str]]


def status_ops(res: Resource, schema: crd_schema.Schema, hook: Hook | None) -> StatusOps:
    """The status writes of one served version."""
    status_schema = (schema.get("properties") or {}).get("status") or {}

    def prune_status(status: Any) -> Any:
        return crd_schema.prune(status, status_schema, root=False)[0]

    def commit(store: Store, namespace: str, name: str, current: Obj, status: Obj | None, book: Bookkeeping) -> Obj:
        """Validate the new status (None: cleared, not validated), drop status managers left
        owning nothing, store it (unless nothing changed; an empty status is stored as none)."""
        errs = crd_schema.validate(status, status_schema, "status") if status is not None else []
        errs += crd_schema.transition_errors(status, current.get("status"), status_schema, "status")
        if status is not None and hook is not None:
            errs += hook({"status": status})
        if errs:
            raise invalid(res, name, errs)
        for mid in [m for m in book.managers if m[2] == "status"]:
            if not any(mid in owners for owners in book.status_fields.values()) and not book.managers[mid]["fields"]:
                book.managers.pop(mid, None)
        return store.commit_status(res, namespace, name, current, status or {}, book)

    def update(store: Store, namespace: str, name: str, current: Obj, status: Any, mid: ManagerId) -> Obj:
        """An Update operation on the status (None clears it): ``mid`` owns the top-level fields
        it changed."""
        if status is not None and not isinstance(status, dict):
            raise invalid(res, name, [crd_schema.type_error("status", status, "object")])
        if status is not None:
            status = prune_status(status)
        old = current.get("status") or {}
        new = status or {}
        book = copy.deepcopy(store.books.get((res.plural, namespace, name)) or Bookkeeping())
        for fname in set(old) | set(new):
            if fname not in new:
                book.status_fields.pop(fname, None)
            elif fname not in old or not json_equal(old[fname], new[fname]):
                book.status_fields[fname] = {mid}
        book.touch(mid)
        return commit(store, namespace, name, current, status, book)

    def put(store: Store, namespace: str, name: str, body: Any, mid: ManagerId) -> Obj:
        obj = require_object(body, res)
        meta = obj.get("metadata") or {}
        check_url_names(meta, name, namespace if res.namespaced else None)
        with store.lock:
            current = store.require(res, namespace, name)
            check_preconditions(res, name, current, meta)
            status = obj.get("status")
            return update(store, namespace, name, current, copy.deepcopy(status), mid)

    def patch(store: Store, namespace: str, name: str, body: Obj, strategic: bool, mid: ManagerId) -> Obj:
        """Merge patch applied to the whole object, only ``status`` kept (``strategic`` never
        comes: custom resources have no strategic merge patch, routes.py answers 415)."""
        with store.lock:
            current = store.require(res, namespace, name)
            check_preconditions(res, name, current, body.get("metadata") or {})
            merged = merge_patch(current, body)
            return update(store, namespace, name, current, merged.get("status"), mid)

    def apply(store: Store, namespace: str, name: str, body: Any, manager: str, force: bool) -> Obj:
        """Server-side apply, kept simple: each top-level status field in the body replaces the
        stored one and is owned by ``manager``; changing a field another manager owns is a 409
        conflict unless ``force``; a field the manager applied before and omits now is released,
        and removed if nobody owns it."""
        meta = check_applied_object(res, res.api_version, body, name)
        status = body.get("status")
        if status is None:
            status = {}
        if not isinstance(status, dict):
            raise bad_request(".status: expected map, got " + type(status).__name__)
        applied = prune_status(status)
        mid: ManagerId = (manager, "Apply", "status")
        with store.lock:
            current = store.require(res, namespace, name)
            check_preconditions(res, name, current, meta)
            book = copy.deepcopy(store.books.get((res.plural, namespace, name)) or Bookkeeping())
            new_status = copy.deepcopy(current.get("status") or {})
            apply_fields(book, new_status, applied, mid, force, res.api_version)
            book.touch(mid)
            return commit(store, namespace, name, current, new_status, book)

    return StatusOps(put, patch, apply)


def set_status(
    ops: StatusOps, store: Store, res: Resource, namespace: str, name: str, status: Obj | None, manager: str
) -> Obj:
    """Another controller's status ``PUT``, for the test helpers (no resourceVersion check)."""
    body: Obj = {"apiVersion": res.api_version, "kind": res.kind, "metadata": {"name": name}}
    if status is not None:
        body["status"] = status
    return ops.put(store, namespace, name, body, (manager, "Update", "status"))
