"""Sticky addresses: which IPs a persistent attachment must get again.

Two sources, decided at prepare time (the CNI plugin makes no API call):

- ``persistentIPs: true``: the addresses in this driver's ``status.devices`` entry of the claim
  (DEL leaves them there, marked Detached), so the next pod of the same claim gets them back.
- ``ipamClaim: <name>``: the ``status.ips`` of that IPAMClaim (k8s.cni.cncf.io/v1alpha1) in
  the claim's namespace; it wins over the claim status when both are set.

A claim generated from a ResourceClaimTemplate belongs to one pod and dies with it: it never
pins, whatever its parameters say.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..addresses import canonical_interface_address
from .resolve import ClaimError

if TYPE_CHECKING:
    from ..state.records import DeviceSpec, PreparedClaim

log = logging.getLogger(__name__)

#: Set by the resourceclaim controller on claims it generates from a pod's template.
TEMPLATE_ANNOTATION = "resource.kubernetes.io/pod-claim-name"

IpamClaimGetter = Callable[[str, str], "dict[str, Any] | None"]


def from_template(claim: dict[str, Any]) -> bool:
    meta = claim.get("metadata") or {}
    if TEMPLATE_ANNOTATION in (meta.get("annotations") or {}):
        return True
    return any(ref.get("kind") == "Pod" and ref.get("controller") for ref in meta.get("ownerReferences") or [])


def canonical_ips(values: list[Any], where: str) -> list[str]:
    """CIDR strings in the API's canonical form (as status.devices holds them), de-duplicated;
    anything else is a ClaimError."""
    out: list[str] = []
    for value in values or []:
        text = canonical_interface_address(value)
        if text is None:
            raise ClaimError(f"{where}: {value!r} is not an address in CIDR form")
        if text not in out:
            out.append(text)
    return out


def pin_addresses(
    claim: dict[str, Any], record: PreparedClaim, *, driver: str, ipamclaims: IpamClaimGetter | None
) -> None:
    """Set ``requestedIPs`` on every device of a PreparedClaim record (``[]`` = no pinning)."""
    meta = claim.get("metadata") or {}
    namespace, name = meta.get("namespace", "default"), meta.get("name", "")
    template = from_template(claim)
    for device in record["devices"]:
        device["requestedIPs"] = []
        if not (device.get("persistentIPs") or device.get("ipamClaim")):
            continue
        where = f"claim {namespace}/{name}: request {device['request']}"
        if template:
            log.info("%s: generated from a ResourceClaimTemplate: persistentIPs/ipamClaim ignored", where)
            device["persistentIPs"] = False
            device["ipamClaim"] = None
            continue
        ipamclaim = device.get("ipamClaim")
        if ipamclaim:
            device["requestedIPs"] = _from_ipamclaim(namespace, ipamclaim, ipamclaims, where)
        else:
            device["requestedIPs"] = _from_status(claim, device, driver, where)


def _from_ipamclaim(namespace: str, ipamclaim: str, ipamclaims: IpamClaimGetter | None, where: str) -> list[str]:
    if ipamclaims is None:
        raise ClaimError(f"{where}: parameters.ipamClaim needs the API server: use the kubelet plugin service")
    try:
        obj = ipamclaims(namespace, ipamclaim)
    except Exception as exc:
        raise ClaimError(f"{where}: cannot read IPAMClaim {namespace}/{ipamclaim}: {exc}") from None
    if obj is None:
        raise ClaimError(
            f"{where}: IPAMClaim {namespace}/{ipamclaim} not found: create it "
            f"(k8s.cni.cncf.io/v1alpha1) or remove parameters.ipamClaim"
        )
    return canonical_ips((obj.get("status") or {}).get("ips") or [], f"IPAMClaim {namespace}/{ipamclaim} status.ips")


def _from_status(claim: dict[str, Any], device: DeviceSpec, driver: str, where: str) -> list[str]:
    for entry in (claim.get("status") or {}).get("devices") or []:
        if (entry.get("driver"), entry.get("pool"), entry.get("device"), entry.get("shareID") or None) == (
            driver,
            device["pool"],
            device["device"],
            device.get("shareID"),
        ):
            return canonical_ips((entry.get("networkData") or {}).get("ips") or [], f"{where}: status.devices")
    return []
