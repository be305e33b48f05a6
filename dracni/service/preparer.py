"""NodePrepareResources / NodeUnprepareResources: claims from the API into the state dir."""

from __future__ import annotations

import logging
import threading
import time

from ..claims.prepare import PrepareOutcome, prepare_claims, unprepare_claims
from ..state.store import StateDir
from . import metrics

log = logging.getLogger(__name__)


class Preparer:
    """Serializes prepare/unprepare (kubelet may call for different pods concurrently)."""

    def __init__(self, *, state: StateDir, claims, driver: str, node: str,
                 allowed_types: frozenset[str] | None = None, ipamclaims=None) -> None:
        self.state = state
        self.claims = claims  # anything with get(namespace, name) -> dict | None (ClaimCache)
        self.driver = driver
        self.node = node
        self.allowed_types = allowed_types
        self.ipamclaims = ipamclaims  # (namespace, name) -> IPAMClaim dict | None
        self._lock = threading.Lock()

    def prepare(self, refs: list) -> dict[str, PrepareOutcome]:
        started = time.monotonic()
        with self._lock:
            outcomes: dict[str, PrepareOutcome] = {}
            fetched = []
            for ref in refs:
                claim, error = self._fetch(ref)
                if error:
                    outcomes[ref.uid] = PrepareOutcome(error=error)
                else:
                    fetched.append(claim)
            outcomes.update(prepare_claims(self.state, fetched, driver=self.driver, node=self.node,
                                           allowed_types=self.allowed_types, ipamclaims=self.ipamclaims))
        for uid, outcome in outcomes.items():
            metrics.PREPARES.labels(result="error" if outcome.error else "ok").inc()
            if outcome.error:
                log.warning("prepare of claim %s failed: %s", uid, outcome.error)
        metrics.PREPARE_SECONDS.observe(time.monotonic() - started)
        return outcomes

    def _fetch(self, ref) -> tuple[dict | None, str | None]:
        where = f"ResourceClaim {ref.namespace}/{ref.name}"
        prepared = self.state.read_claim(ref.uid)
        known_pods = {p["uid"] for p in prepared["pods"]} if prepared else None
        try:
            claim = self.claims.get(ref.namespace, ref.name, known_pods)
        except Exception as exc:  # the API server is unreachable: kubelet retries the pod later
            return None, f"{where}: cannot read it from the API server: {exc}"
        if claim is None:
            return None, f"{where} not found"
        uid = (claim.get("metadata") or {}).get("uid")
        if uid != ref.uid:
            return None, (f"{where} has UID {uid}, kubelet asked for {ref.uid}: "
                          "the claim was deleted and re-created; kubelet will retry with the new one")
        foreign = [r for r in _our_results(claim, self.driver) if r.get("pool") != self.node]
        if foreign:
            return None, (f"{where}: device {foreign[0].get('device')} is allocated from pool "
                          f"{foreign[0].get('pool')}, not from this node {self.node}")
        return claim, None

    def unprepare(self, refs: list) -> dict[str, str | None]:
        started = time.monotonic()
        with self._lock:
            results = unprepare_claims(self.state, [ref.uid for ref in refs])
        for error in results.values():
            metrics.UNPREPARES.labels(result="error" if error else "ok").inc()
        metrics.UNPREPARE_SECONDS.observe(time.monotonic() - started)
        return results


def _our_results(claim: dict, driver: str) -> list[dict]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [r for r in (allocation.get("devices") or {}).get("results") or [] if r.get("driver") == driver]
