"""``k8s.cni.cncf.io/v1alpha1`` IPAMClaims: upstream's CRD (ipamclaim_schema.py reads it from
``spec/crds``) served through the generic CRD path (crds.py: the verbs, pruning, the schema, the
``status`` subresource with its simple server-side apply), plus the fake's one extra rule
(``ipamclaim_schema.check_ips``).  Only while installed: ``FakeApiServer(ipamclaims=True)`` or
``install_ipamclaims()``; without it the group is absent and its paths answer 404, as on a cluster
without OVN-Kubernetes or KubeVirt's ipam-extensions.

Test helpers: ``create_ipamclaim``, ``get_ipamclaim``, ``list_ipamclaims``,
``set_ipamclaim_status``, ``delete_ipamclaim``, ``install_ipamclaims``/``uninstall_ipamclaims``."""

from __future__ import annotations

import copy
from typing import Any

from . import crd_schema
from . import field as fe
from . import ipamclaim_schema as schema
from .core import ensure_namespace
from .crds import CrdHelpers
from .errors import already_exists, invalid
from .names import dns_subdomain_errors
from .resources import Obj
from .store import Store

PLURAL = "ipamclaims"
CRD_NAME = schema.CRD["metadata"]["name"]


class IpamClaimHelpers(CrdHelpers):
    """``FakeApiServer``'s IPAMClaim helpers (direct, not over HTTP) and the CRD switch."""

    _store: Store

    @property
    def ipamclaims_installed(self) -> bool:
        """Whether the IPAMClaim CRD is served (discovery and ``/apis/k8s.cni.cncf.io/v1alpha1``)."""
        return PLURAL in self._store.crds

    def install_ipamclaims(self) -> None:
        """Start serving the IPAMClaim CRD (``spec/crds/ipamclaims.k8s.cni.cncf.io.yaml`` applied)."""
        self.install_crd(schema.CRD, hook=schema.check_ips)

    def uninstall_ipamclaims(self) -> int:
        """Stop serving the CRD; its objects go away (DELETED events), as when a CRD is deleted."""
        return self.uninstall_crd(CRD_NAME)

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
        served = self._store.crds.get(PLURAL)
        if served is None:
            raise RuntimeError(
                "the IPAMClaim CRD is not installed: FakeApiServer(ipamclaims=True) or install_ipamclaims()"
            )
        res = served.resource
        spec: dict[str, Any] = {"network": network}
        if interface is not None:
            spec["interface"] = interface
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if labels:
            meta["labels"] = dict(labels)
        if owner_references:
            meta["ownerReferences"] = copy.deepcopy(owner_references)
        obj: Obj = {"apiVersion": res.api_version, "kind": res.kind, "metadata": meta, "spec": spec}
        status: dict[str, Any] = {}
        if ips is not None or owner_pod is not None or conditions is not None:
            status["ips"] = list(ips or [])
        if owner_pod is not None:
            status["ownerPod"] = {"name": owner_pod}
        if conditions is not None:
            status["conditions"] = copy.deepcopy(conditions)
        if status:
            obj["status"] = status
        obj = crd_schema.prune(obj, served.schemas[served.storage])[0]
        errs = dns_subdomain_errors("metadata.name", name) if name else [fe.required("metadata.name")]
        errs += crd_schema.validate(obj, served.schemas[served.storage]) + schema.check_ips(obj)
        if interface is None:
            errs = [e for e in errs if e != fe.required("spec.interface")]
        if errs:
            raise invalid(res, name, errs)
        with self._store.lock:
            ensure_namespace(self._store, namespace)
            key = (PLURAL, namespace, name)
            if key in self._store.objects:
                raise already_exists(res, name)
            self._store.book(key).status_fields = {f: {(manager, "Update", "status")} for f in status}
            return self._store.create(res, namespace, obj, (manager, "Update", ""))

    def get_ipamclaim(self, namespace: str, name: str) -> Obj | None:
        return self._store.copy_of(PLURAL, namespace, name)

    def list_ipamclaims(self, namespace: str | None = None) -> list[Obj]:
        return self._store.copies(PLURAL, namespace)

    def set_ipamclaim_status(
        self, namespace: str, name: str, status: Obj | None, *, manager: str = "ovnkube-controller"
    ) -> Obj:
        """Replace ``status`` as another controller's status ``PUT`` would (validated; MODIFIED event
        unless nothing changed); ``None`` clears it."""
        return self.set_custom_status(PLURAL, name, status, namespace, manager=manager)

    def delete_ipamclaim(self, namespace: str, name: str) -> Obj | None:
        """Remove an IPAMClaim now (finalizers ignored); DELETED event.  None when it was not there."""
        return self._store.remove(PLURAL, namespace, name)
