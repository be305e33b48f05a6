"""The AddressReservation object (``spec/crds/addressreservations.dracni.io.yaml``): one per
address in use, named after its pool and address, so that the API server's create is the one
atomic test-and-set of the whole cluster (as Kubernetes' own IPAddress objects for Service IPs,
KEP-1880, and whereabouts' OverlappingRangeIPReservation): two nodes asking for the same address
at once both send a create, one gets 201, the other 409 AlreadyExists.

The object is cluster-scoped (names are unique across the cluster only there) and owned by the
Node that holds it, so the garbage collector deletes a lost node's reservations with its Node
object.  Labels ``dracni.io/node`` and ``dracni.io/pool`` let a node list its own reservations
(a label selector: never the cluster's).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

GROUP = "dracni.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "AddressReservation"
PLURAL = "addressreservations"
NODE_LABEL = "dracni.io/node"
POOL_LABEL = "dracni.io/pool"


def reservation_name(pool: str, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """``<pool>.<address>``: IPv4 dotted as is; IPv6 ``v6-`` + its compressed form with ``:`` as
    ``-`` (a trailing ``:`` gets a ``0``, the same address), so every name is a DNS subdomain."""
    if address.version == 4:
        return f"{pool}.{address}"
    text = address.compressed
    if text.endswith(":"):
        text += "0"
    return f"{pool}.v6-{text.replace(':', '-')}"


@dataclass(frozen=True)
class Holder:
    """Who a reservation is for: the claim (the owner of record), its request and device, and the
    pod of a shared claim the address serves (None: the claim's, for every pod)."""

    namespace: str
    claim: str
    claim_uid: str
    request: str
    device: str
    pod_uid: str | None = None
    pod_name: str | None = None
    keep: bool = False
    #: The IPAMClaim that keeps the address (``keep``: kept while the claim exists, not only
    #: while it is allocated the device).
    ipam_claim: str | None = None

    def label(self) -> str:
        return f"{self.namespace}/{self.claim}"

    def same_use(self, other: Holder) -> bool:
        """The same claim, request, device and pod: the reservation is already this one's."""
        return (self.claim_uid, self.request, self.device, self.pod_uid) == (
            other.claim_uid,
            other.request,
            other.device,
            other.pod_uid,
        )


@dataclass(frozen=True)
class Reservation:
    """A reservation as the API server holds it.  ``ip`` is its address parsed once, when the
    object was read: the ledger counts its reservations by family, and parsing an address takes
    longer than the count."""

    name: str
    uid: str
    pool: str
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address
    node: str
    holder: Holder
    resource_version: str = ""

    @property
    def address(self) -> str:
        """The address in its canonical text form (messages, logs)."""
        return str(self.ip)

    @property
    def family(self) -> str:
        return "ipv4" if self.ip.version == 4 else "ipv6"


def reservation_body(
    pool: str,
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
    node: str,
    node_uid: str | None,
    holder: Holder,
) -> dict[str, Any]:
    """The object to create for ``holder`` on ``node``."""
    spec: dict[str, Any] = {
        "pool": pool,
        "address": str(address),
        "node": node,
        "claim": {"namespace": holder.namespace, "name": holder.claim, "uid": holder.claim_uid},
        "request": holder.request,
        "device": holder.device,
        "keep": holder.keep,
    }
    if holder.ipam_claim:
        spec["ipamClaim"] = holder.ipam_claim
    if holder.pod_uid:
        spec["pod"] = {"namespace": holder.namespace, "name": holder.pod_name or "", "uid": holder.pod_uid}
    metadata: dict[str, Any] = {
        "name": reservation_name(pool, address),
        "labels": {NODE_LABEL: node, POOL_LABEL: pool},
    }
    if node_uid:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def moved_to(obj: dict[str, Any], node: str, node_uid: str | None) -> dict[str, Any]:
    """``obj`` taken over by ``node`` (a kept reservation whose claim's pod now runs there)."""
    meta = dict(obj.get("metadata") or {})
    meta["labels"] = {**(meta.get("labels") or {}), NODE_LABEL: node}
    owners = [r for r in meta.get("ownerReferences") or [] if r.get("kind") != "Node"]
    if node_uid:
        owners.append({"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid})
    meta["ownerReferences"] = owners
    return {**obj, "metadata": meta, "spec": {**(obj.get("spec") or {}), "node": node}}


def parse_reservation(obj: dict[str, Any]) -> Reservation | None:
    """The reservation in an API object, or None when the object is not one we can read."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    claim, pod = spec.get("claim") or {}, spec.get("pod") or {}
    try:
        holder = Holder(
            namespace=str(claim["namespace"]),
            claim=str(claim["name"]),
            claim_uid=str(claim["uid"]),
            request=str(spec.get("request") or ""),
            device=str(spec.get("device") or ""),
            pod_uid=pod.get("uid") or None,
            pod_name=pod.get("name") or None,
            keep=bool(spec.get("keep")),
            ipam_claim=spec.get("ipamClaim") or None,
        )
        return Reservation(
            name=str(meta["name"]),
            uid=str(meta.get("uid") or ""),
            pool=str(spec["pool"]),
            ip=ipaddress.ip_address(spec["address"]),
            node=str(spec.get("node") or ""),
            holder=holder,
            resource_version=str(meta.get("resourceVersion") or ""),
        )
    except (KeyError, TypeError, ValueError):
        return None
