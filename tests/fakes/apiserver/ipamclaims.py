"""``k8s.cni.cncf.io/v1alpha1`` IPAMClaims, a namespaced custom resource served only while its
CRD is installed: the generic verbs with pruning and the CRD schema (``ipamclaim_schema.py``),
``status`` dropped on create and kept by main-resource writes, and the ``status`` subresource:
``PUT`` (resourceVersion precondition), merge patch, and server-side apply with ownership of the
top-level status fields.  Test helpers: ``create_ipamclaim``, ``get_ipamclaim``,
``list_ipamclaims``, ``set_ipamclaim_status``, ``delete_ipamclaim``,
``install_ipamclaims``/``uninstall_ipamclaims``."""

from __future__ import annotations

import copy
from typing import Any

from . import field as fe
from . import ipamclaim_schema as schema
from .apply import apply_fields, check_applied_object
from .core import ensure_namespace
from .errors import already_exists, bad_request, invalid
from .managed_fields import Bookkeeping, ManagerId
from .names import dns_subdomain_errors
from .objects import check_url_names, json_equal, merge_patch, require_object
from .resources import IPAM_API_VERSION, RESOURCES, Kind, Obj, StatusOps
from .store import Store, check_preconditions

IPAMCLAIMS = RESOURCES["ipamclaims"]


# -- the main resource ------------------------------------------------------------------------
def _prepare_create(obj: Obj) -> tuple[Obj, list[str]]:
    obj = schema.prune(obj)
    obj.pop("status", None)  # a CRD with a status subresource: create drops status
    return obj, schema.validate(obj)


def _prepare_update(new: Obj, current: Obj) -> tuple[Obj, list[str]]:
    new = schema.prune(new)
    return new, schema.validate({k: v for k, v in new.items() if k != "status"})


# -- the status subresource -------------------------------------------------------------------
def _commit_status(store: Store, namespace: str, name: str, current: Obj, status: Obj, book: Bookkeeping) -> Obj:
    """Validate the new status, drop status managers left owning nothing, store it (unless
    nothing changed)."""
    errs = schema.validate({"status": status}) if status else []
    if errs:
        raise invalid(IPAMCLAIMS, name, errs)
    for mid in [m for m in book.managers if m[2] == "status"]:
        if not any(mid in owners for owners in book.status_fields.values()) and not book.managers[mid]["fields"]:
            book.managers.pop(mid, None)
    return store.commit_status(IPAMCLAIMS, namespace, name, current, status, book)


def _status_update(store: Store, namespace: str, name: str, current: Obj, status: Any, mid: ManagerId) -> Obj:
    """An Update operation on the status: ``mid`` owns the top-level fields it changed."""
    if status is None:
        status = {}
    if not isinstance(status, dict):
        raise invalid(IPAMCLAIMS, name, [schema.type_error("status", status, "object")])
    status = schema.prune_status(status)
    old = current.get("status") or {}
    book = copy.deepcopy(store.books.get(("ipamclaims", namespace, name)) or Bookkeeping())
    for fname in set(old) | set(status):
        if fname not in status:
            book.status_fields.pop(fname, None)
        elif fname not in old or not json_equal(old[fname], status[fname]):
            book.status_fields[fname] = {mid}
    book.touch(mid)
    return _commit_status(store, namespace, name, current, status, book)


def put_status(store: Store, namespace: str, name: str, body: Any, mid: ManagerId) -> Obj:
    """``PUT .../ipamclaims/{name}/status``: the body's ``status`` replaces the stored one (absent
    clears it); metadata and spec changes in the body are ignored; resourceVersion precondition."""
    obj = require_object(body, IPAMCLAIMS)
    meta = obj.get("metadata") or {}
    check_url_names(meta, name, namespace)
    with store.lock:
        current = store.require(IPAMCLAIMS, namespace, name)
        check_preconditions(IPAMCLAIMS, name, current, meta)
        status = obj.get("status")
        return _status_update(
            store, namespace, name, current, copy.deepcopy(status) if isinstance(status, dict) else status, mid
        )


def patch_status(store: Store, namespace: str, name: str, patch: Obj, strategic: bool, mid: ManagerId) -> Obj:
    """Merge patch on ``.../status``: applied to the whole object, only ``status`` is kept
    (``strategic`` never comes: custom resources have no strategic merge patch)."""
    with store.lock:
        current = store.require(IPAMCLAIMS, namespace, name)
        check_preconditions(IPAMCLAIMS, name, current, patch.get("metadata") or {})
        merged = merge_patch(current, patch)
        return _status_update(store, namespace, name, current, merged.get("status"), mid)


def apply_status(store: Store, namespace: str, name: str, body: Any, manager: str, force: bool) -> Obj:
    """Server-side apply on ``ipamclaims/{name}/status``, kept simple: each top-level status field
    in the body (``ips``, ``ownerPod``, ``conditions``) replaces the stored one and is owned by
    ``manager``; changing a field another manager owns is a 409 conflict unless ``force``; a
    field the manager applied before and omits now is released, and removed if nobody owns it."""
    meta = check_applied_object(IPAMCLAIMS, IPAM_API_VERSION, body, name)
    status = body.get("status")
    if status is None:
        status = {}
    if not isinstance(status, dict):
        raise bad_request(".status: expected map, got " + type(status).__name__)
    applied = schema.prune_status(status)
    mid: ManagerId = (manager, "Apply", "status")
    with store.lock:
        current = store.require(IPAMCLAIMS, namespace, name)
        check_preconditions(IPAMCLAIMS, name, current, meta)
        book = copy.deepcopy(store.books.get(("ipamclaims", namespace, name)) or Bookkeeping())
        new_status = copy.deepcopy(current.get("status") or {})
        apply_fields(book, new_status, applied, mid, force, IPAM_API_VERSION)
        book.touch(mid)
        return _commit_status(store, namespace, name, current, new_status, book)


KIND = Kind(IPAMCLAIMS, _prepare_create, _prepare_update, StatusOps(put_status, patch_status, apply_status))


class IpamClaimHelpers:
    """``FakeApiServer``'s IPAMClaim helpers (direct, not over HTTP) and the CRD switch."""

    _store: Store
    _ipamclaims: bool

    @property
    def ipamclaims_installed(self) -> bool:
        """Whether the IPAMClaim CRD is served (discovery and ``/apis/k8s.cni.cncf.io/v1alpha1``)."""
        return self._ipamclaims

    def install_ipamclaims(self) -> None:
        """Start serving the IPAMClaim CRD (as if ``spec/crds/ipamclaims.k8s.cni.cncf.io.yaml`` was applied)."""
        with self._store.lock:
            self._ipamclaims = True

    def uninstall_ipamclaims(self) -> int:
        """Stop serving the CRD; its objects go away (DELETED events), as when a CRD is deleted."""
        with self._store.lock:
            self._ipamclaims = False
            victims = [(ns, name) for (r, ns, name) in sorted(self._store.objects) if r == "ipamclaims"]
            for namespace, name in victims:
                self._store.remove("ipamclaims", namespace, name)
            return len(victims)

    def create_ipamclaim(
        self,
        namespace: str,
        name: str,
        network: str,
        interface: str | None = None,
        ips: list[str] | None = None,
        *,
        owner_pod: str | None = None,
        conditions: list[Obj] | None = None,
        labels: dict[str, str] | None = None,
        owner_references: list[Obj] | None = None,
        manager: str = "virt-controller",
    ) -> Obj:
        """Store an IPAMClaim as KubeVirt creates one; creates its namespace; ADDED event.

        ``ips``/``owner_pod``/``conditions`` pre-fill ``status`` (as if the IPAM plugin had already
        written it) in the same event.  Validated like an API write (``ApiStatusError`` 422), except
        that ``interface=None`` leaves ``spec.interface`` out, which the upstream CRD would reject.
        Needs the CRD installed (``ipamclaims=True``/``install_ipamclaims()``).
        """
        if not self._ipamclaims:
            raise RuntimeError(
                "the IPAMClaim CRD is not installed: FakeApiServer(ipamclaims=True) or install_ipamclaims()"
            )
        spec: dict[str, Any] = {"network": network}
        if interface is not None:
            spec["interface"] = interface
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if labels:
            meta["labels"] = dict(labels)
        if owner_references:
            meta["ownerReferences"] = copy.deepcopy(owner_references)
        obj: Obj = {"apiVersion": IPAM_API_VERSION, "kind": IPAMCLAIMS.kind, "metadata": meta, "spec": spec}
        status: dict[str, Any] = {}
        if ips is not None or owner_pod is not None or conditions is not None:
            status["ips"] = list(ips or [])
        if owner_pod is not None:
            status["ownerPod"] = {"name": owner_pod}
        if conditions is not None:
            status["conditions"] = copy.deepcopy(conditions)
        if status:
            obj["status"] = status
        obj = schema.prune(obj)
        errs = dns_subdomain_errors("metadata.name", name) if name else [fe.required("metadata.name")]
        errs += schema.validate(obj, require_interface=interface is not None)
        if errs:
            raise invalid(IPAMCLAIMS, name, errs)
        with self._store.lock:
            ensure_namespace(self._store, namespace)
            key = ("ipamclaims", namespace, name)
            if key in self._store.objects:
                raise already_exists(IPAMCLAIMS, name)
            self._store.book(key).status_fields = {f: {(manager, "Update", "status")} for f in status}
            return self._store.create(IPAMCLAIMS, namespace, obj, (manager, "Update", ""))

    def get_ipamclaim(self, namespace: str, name: str) -> Obj | None:
        return self._store.copy_of("ipamclaims", namespace, name)

    def list_ipamclaims(self, namespace: str | None = None) -> list[Obj]:
        return self._store.copies("ipamclaims", namespace)

    def set_ipamclaim_status(
        self, namespace: str, name: str, status: Obj | None, *, manager: str = "ovnkube-controller"
    ) -> Obj:
        """Replace ``status`` as another controller's status ``PUT`` would (validated; MODIFIED event
        unless nothing changed); ``None`` clears it."""
        with self._store.lock:
            current = self._store.require(IPAMCLAIMS, namespace, name)
            return _status_update(
                self._store, namespace, name, current, copy.deepcopy(status or {}), (manager, "Update", "status")
            )

    def delete_ipamclaim(self, namespace: str, name: str) -> Obj | None:
        """Remove an IPAMClaim now (finalizers ignored); DELETED event.  None when it was not there."""
        return self._store.remove("ipamclaims", namespace, name)
