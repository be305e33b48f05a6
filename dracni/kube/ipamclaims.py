"""Write an attachment's addresses into its IPAMClaim after a successful ADD.

OVN-Kubernetes semantics: an IPAMClaim that already holds other addresses than the IPAM
returned is an error, never silently overwritten.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..clock import now_rfc3339
from ..status.entries import fact_ips
from ..status.sink import SinkError
from .api import ApiError, KubeApi

if TYPE_CHECKING:
    from ..state.records import StatusOutbox

CONDITION_TYPE = "IPsAllocated"
CONDITION_REASON = "SuccessfulAllocation"


class IpamClaimWriter:
    def __init__(self, api: KubeApi) -> None:
        self.api = api

    def sync(self, outbox: StatusOutbox) -> None:
        """For every ready attachment of the claim that names an IPAMClaim, record its addresses."""
        namespace = outbox["claim"]["namespace"]
        for fact in outbox.get("devices") or []:
            ipamclaim = fact.get("ipamClaim")
            if ipamclaim and fact.get("ready"):
                ips = fact_ips(fact)
                self._write(namespace, ipamclaim, ips, fact.get("podName"))

    def _write(self, namespace: str, name: str, ips: list[str], pod_name: str | None) -> None:
        where = f"IPAMClaim {namespace}/{name}"
        try:
            obj = self.api.get_ipamclaim(namespace, name)
            if obj is None:
                raise SinkError(f"{where} no longer exists", retryable=False)
            status = dict(obj.get("status") or {})
            held = status.get("ips") or []
            if held and sorted(held) != sorted(ips):
                raise SinkError(
                    f"{where} holds {', '.join(held)} but the IPAM returned {', '.join(ips) or 'nothing'}",
                    retryable=False,
                )
            desired = {
                **status,
                "ips": ips,
                "ownerPod": {"name": pod_name or ""},
                "conditions": _conditions(status.get("conditions") or [], ips),
            }
            if desired == status:
                return
            self.api.replace_ipamclaim_status({**obj, "status": desired})
        except ApiError as exc:
            raise SinkError(f"{where}: {exc}", retryable=exc.retryable) from None


def _conditions(existing: list[dict[str, Any]], ips: list[str]) -> list[dict[str, Any]]:
    others = [c for c in existing if c.get("type") != CONDITION_TYPE]
    old = next((c for c in existing if c.get("type") == CONDITION_TYPE), None)
    message = f"addresses {', '.join(ips)} allocated by dracni"
    if old and old.get("status") == "True" and old.get("message") == message:
        return others + [old]
    return others + [
        {
            "type": CONDITION_TYPE,
            "status": "True",
            "reason": CONDITION_REASON,
            "message": message,
            "lastTransitionTime": now_rfc3339(),
        }
    ]
