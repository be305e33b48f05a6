"""Write an attachment's addresses into its IPAMClaim, from the claim's attachment history.

OVN-Kubernetes semantics: an IPAMClaim that already holds other addresses than the IPAM
returned is an error, never silently overwritten.  Addresses are compared in canonical form
(``FD00:78:7:0:0:0:0:20/64`` is ``fd00:78:7::20/64``).

The source is every fact of the claim's outbox that proves a successful ADD: a ready
attachment, or a persistent attachment already DELed (its Detached fact keeps the addresses
it had), so an ADD and DEL that both happened while the service was down still fill the
IPAMClaim, and the next pod does not get other addresses that would then become the sticky
ones.  A problem with the IPAMClaim (it holds other addresses, or is gone) becomes a condition
on the device's status entry (``IPAMClaimSynced=False``, ``sync`` returns them), and is
reported to ``on_problem`` (an Event).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..addresses import canonical_interface_address
from ..clock import normalize_time, now_rfc3339
from ..state.facts import entry_key
from ..status.entries import fact_ips
from ..status.sink import SinkError
from .api import ApiError, KubeApi

if TYPE_CHECKING:
    from ..state.records import DeviceFact, StatusOutbox
    from ..status.drain import Notes

CONDITION_TYPE = "IPsAllocated"
CONDITION_REASON = "SuccessfulAllocation"
#: The condition dracni adds to a claim's status entry when the IPAMClaim cannot be written.
SYNC_CONDITION = "IPAMClaimSynced"
REASON_CONFLICT = "IPAMClaimConflict"
REASON_MISSING = "IPAMClaimNotFound"
REASON_REFUSED = "IPAMClaimRefused"


class IpamClaimProblem(Exception):
    """The IPAMClaim cannot take the attachment's addresses; ``reason`` is stable."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def canonical_set(values: list[Any]) -> set[str]:
    """Addresses in canonical CIDR form; an unparsable one stays as it is (so it differs)."""
    return {canonical_interface_address(v) or str(v) for v in values}


def _source_facts(outbox: StatusOutbox) -> dict[str, DeviceFact]:
    """Per IPAMClaim name, the fact whose addresses it should hold: the earliest ready
    attachment (the one the status entry shows), else the latest Detached one."""
    chosen: dict[str, DeviceFact] = {}
    facts = [f for f in outbox.get("devices") or [] if isinstance(f, dict) and f.get("ipamClaim")]
    ready = sorted((f for f in facts if f.get("ready")), key=lambda f: str(f.get("updatedAt") or ""))
    detached = sorted(
        (f for f in facts if f.get("detached") and f.get("keptIPs")),
        key=lambda f: str(f.get("updatedAt") or ""),
        reverse=True,
    )
    for fact in ready + detached:
        chosen.setdefault(str(fact["ipamClaim"]), fact)
    return chosen


class IpamClaimWriter:
    def __init__(self, api: KubeApi, on_problem: Callable[[StatusOutbox, DeviceFact, str, str], None] | None = None):
        self.api = api
        self.on_problem = on_problem

    def sync(self, outbox: StatusOutbox) -> Notes:
        """Record the addresses of the claim's attachments in the IPAMClaims they name.

        Returns the ``IPAMClaimSynced=False`` conditions of the entries whose IPAMClaim could
        not be written; raises a retryable SinkError when the API server failed.
        """
        namespace = outbox["claim"]["namespace"]
        notes: Notes = {}
        for name, fact in sorted(_source_facts(outbox).items()):
            try:
                self._write(namespace, name, fact_ips(fact), fact.get("podName"))
            except IpamClaimProblem as problem:
                key = entry_key(fact)
                notes[key] = [
                    {
                        "type": SYNC_CONDITION,
                        "status": "False",
                        "reason": problem.reason,
                        "message": str(problem),
                        "lastTransitionTime": normalize_time(fact.get("updatedAt")),
                    }
                ]
                if self.on_problem is not None:
                    self.on_problem(outbox, fact, problem.reason, str(problem))
        return notes

    def _write(self, namespace: str, name: str, ips: list[str], pod_name: str | None) -> None:
        where = f"IPAMClaim {namespace}/{name}"
        try:
            obj = self.api.get_ipamclaim(namespace, name)
            if obj is None:
                raise IpamClaimProblem(
                    REASON_MISSING, f"{where} no longer exists: addresses {', '.join(ips)} not recorded"
                )
            status = dict(obj.get("status") or {})
            held = status.get("ips") or []
            if held and canonical_set(held) != canonical_set(ips):
                raise IpamClaimProblem(
                    REASON_CONFLICT,
                    f"{where} holds {', '.join(held)} but the pod got {', '.join(ips) or 'nothing'}: "
                    "the IPAMClaim was changed after prepare; it is left as it is",
                )
            desired = {
                **status,
                # keep the IPAMClaim's own spelling when it already holds these addresses
                "ips": held or ips,
                "ownerPod": {"name": pod_name or ""},
                "conditions": _conditions(status.get("conditions") or [], ips),
            }
            if desired == status:
                return
            self.api.replace_ipamclaim_status({**obj, "status": desired})
        except ApiError as exc:
            if not exc.retryable:  # 403, 422: shown on the entry; the claim status still goes out
                raise IpamClaimProblem(REASON_REFUSED, f"{where}: the API server refused the update: {exc}") from None
            raise SinkError(f"{where}: {exc}", retryable=True) from None


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
