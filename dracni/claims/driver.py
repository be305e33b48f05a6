"""dracni's network driver: what the generic kubelet helper calls (``kubelet.driver.Driver``).

The helper (``kubelet/helper.py``) has read each claim and checked it is the one kubelet named,
allocated to this driver from this node's pool.  The driver does dracni's part, the upstream
``PrepareResourceClaims`` / ``UnprepareResourceClaims`` of a network driver: resolve each claim
into its PreparedClaim record under the tenant policy (``claims/prepare.py Resolver``:
parameters, the NIC behind the allocated device, sticky addresses from IPAMClaims), the claims
of a batch at the same time, then write the records to the state dir through the group commit
(``claims/commits.py``), where the CNI plugin finds them.  Its configuration (the ``Resolver``:
policy, device lookup, IPAMClaim reader, state dir) lives here, not in the helper.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from ..batchwork import BatchWorkers
from ..kubelet.driver import Claim, ClaimRef, ClaimSource, Observer, PrepareResult
from ..kubelet.helper import KubeletPluginHelper
from ..state.store import StateError
from .commits import CommitObserver, GroupCommit
from .prepare import Resolved, Resolver, store_prepared, unprepare_claims


@dataclass(kw_only=True)
class NetworkDriver:
    """Prepares claims into ``resolver.state``; see the module docstring.

    ``resolver``: how claims are resolved (driver name, node, tenant policy, device lookup,
    IPAMClaim reader).  ``source_path(namespace, name)``: the manifest file a claim came from,
    recorded with it (clusterless use).  ``commit_observer``: told of every group commit (the
    service's metrics).
    """

    resolver: Resolver
    source_path: Callable[[str, str], str | None] | None = None
    workers: BatchWorkers = field(default_factory=BatchWorkers)
    commit_observer: CommitObserver | None = None
    _commits: GroupCommit = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._commits = GroupCommit(self.resolver.state, self.commit_observer)

    def prepare_claims(self, claims: list[Claim]) -> dict[str, PrepareResult]:
        """Claim UID -> result; the batch's records are written in one group commit."""
        resolved = self.workers.map(self._resolve, claims)
        try:
            return self._commits.run(lambda state: store_prepared(state, resolved))
        except StateError as exc:
            return {
                r.key: r.outcome
                if r.record is None
                else PrepareResult(error=f"cannot record the prepared claim: {exc}")
                for r in resolved
            }

    def unprepare_claims(self, refs: list[ClaimRef]) -> dict[str, str | None]:
        """Claim UID -> error (None: done); unknown claims succeed."""
        uids = [ref.uid for ref in refs]
        try:
            errors = self._commits.run(lambda state: unprepare_claims(state, uids))
        except StateError as exc:
            return dict.fromkeys(uids, str(exc))
        # After the records are gone (outside the state lock: these are API calls); a failed
        # release is retried by the service's reconcile, never by failing the unprepare.
        self.resolver.release([uid for uid, error in errors.items() if error is None])
        return errors

    def _resolve(self, claim: Claim) -> Resolved:
        meta = claim.get("metadata") or {}
        where = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        source = self.source_path(*where) if self.source_path else None
        return self.resolver.resolve(claim, source)


def network_plugin(
    resolver: Resolver,
    *,
    claims: ClaimSource,
    source_path: Callable[[str, str], str | None] | None = None,
    observer: Observer | None = None,
    commit_observer: CommitObserver | None = None,
    gate: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> tuple[KubeletPluginHelper, NetworkDriver]:
    """The helper in front of dracni's network driver, sharing one pool of batch workers: what
    the service, ``dracni prepare`` and ``dracni unprepare`` run.  The helper checks claims
    against the resolver's driver name and node; ``gate`` serializes the driver's calls with
    another instance's (``kubelet/instances.py``); ``observer`` and ``commit_observer`` are
    told of every call and every group commit."""
    workers = BatchWorkers()
    network = NetworkDriver(
        resolver=resolver, source_path=source_path, workers=workers, commit_observer=commit_observer
    )
    helper = KubeletPluginHelper(
        claims=claims,
        driver=network,
        driver_name=resolver.driver,
        node=resolver.node,
        observer=observer,
        workers=workers,
        gate=gate,
    )
    return helper, network
