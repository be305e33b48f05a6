"""The checks a claim passes before any driver sees it, as upstream's helper makes them.

Kubelet names a claim by namespace, name and UID; what the helper reads under that name must
be the claim kubelet meant, allocated, with devices of this driver, from this node's pool
(``draplugin.go`` ``NodePrepareResources``).  The allocation checks are also what a driver
checks when it is handed a claim by other means (``claims/resolve.py`` uses them), so their
messages exist once.
"""

from __future__ import annotations

from typing import Any

from .driver import Claim, ClaimRef


class ClaimRefused(ValueError):
    """A claim that cannot be prepared as it is; the message says what to fix."""


def claim_label(claim: Claim) -> str:
    """``claim <namespace>/<name>``, as every per-claim message starts."""
    meta = _mapping(claim.get("metadata"))
    return f"claim {meta.get('namespace') or 'default'}/{meta.get('name')}"


def driver_allocation(claim: Claim, driver: str, label: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The claim's allocation and its results of ``driver``; ClaimRefused when it has none,
    or one of them lacks its request, pool or device."""
    allocation = _mapping(claim.get("status")).get("allocation")
    if not isinstance(allocation, dict) or not allocation:
        raise ClaimRefused(
            f"{label}: not allocated (status.allocation is missing); the scheduler allocates a "
            "claim when a pod using it is scheduled (a clusterless manifest must carry status.allocation)"
        )
    results = _mapping(allocation.get("devices")).get("results") or []
    ours = [r for r in results if isinstance(r, dict) and r.get("driver") == driver]
    if not ours:
        others = sorted({str(r.get("driver")) for r in results if isinstance(r, dict)})
        seen = f" (it has devices of: {', '.join(others)})" if others else ""
        raise ClaimRefused(
            f"{label}: no device of driver {driver} in status.allocation.devices.results{seen}; "
            f"request a device of a DeviceClass that selects driver {driver}"
        )
    for result in ours:
        missing = [k for k in ("request", "pool", "device") if not _non_empty_str(result.get(k))]
        if missing:
            raise ClaimRefused(f"{label}: an allocation result of driver {driver} has no {', '.join(missing)}")
    return allocation, ours


def check_fetched(ref: ClaimRef, claim: Claim, *, driver: str, node: str | None) -> None:
    """ClaimRefused unless ``claim`` (read under ``ref``'s name) is the one kubelet asked for,
    with devices of ``driver`` allocated from ``node``'s pool (None: any pool)."""
    where = f"ResourceClaim {ref.namespace}/{ref.name}"
    uid = _mapping(claim.get("metadata")).get("uid")
    if uid != ref.uid:
        raise ClaimRefused(
            f"{where} has UID {uid}, kubelet asked for {ref.uid}: "
            "the claim was deleted and re-created; kubelet will retry with the new one"
        )
    if node is not None:
        allocation = _mapping(_mapping(claim.get("status")).get("allocation"))
        results = _mapping(allocation.get("devices")).get("results") or []
        foreign = [r for r in results if isinstance(r, dict) and r.get("driver") == driver and r.get("pool") != node]
        if foreign:
            raise ClaimRefused(
                f"{where}: device {foreign[0].get('device')} is allocated from pool "
                f"{foreign[0].get('pool')}, not from this node {node}"
            )
    driver_allocation(claim, driver, claim_label(claim))


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _non_empty_str(value: Any) -> bool:
    return isinstance(value, str) and bool(value)
