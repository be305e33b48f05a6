"""Between kubelet's calls and the driver's work, like upstream's ``kubeletplugin`` helper.

Upstream (``k8s.io/dynamic-resource-allocation/kubeletplugin``, ``draplugin.go``
``nodePluginImplementation.NodePrepareResources``) gets the claims kubelet names, checks each
one's UID against the request, and hands the driver whole claim objects; per-claim errors
are answered per claim.  This helper does the same for dracni, without gRPC, so that the
service (claims from the API server) and ``dracni prepare`` (claims from manifest files) run
the same guards:

- fetch the claim by namespace/name from a claim source;
- its UID must be the one kubelet asked for (a claim deleted and re-created under the same
  name is another claim);
- this driver's devices must be allocated from this node's pool (when the node is known);
- one failing claim gets its own error string; the others go on;
- kubelet prepares claims of different pods concurrently, and so does the helper: a claim is
  locked only against another call for the same claim, the claims of one batch are read and
  resolved at the same time (each read is an API round trip), and only the state-dir write of
  the batch holds the state lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from ..claims.prepare import PrepareOutcome, Resolved, resolve_for_node, store_prepared, unprepare_claims
from ..claims.sticky import IpamClaimGetter
from ..state.store import StateDir, StateError
from .commits import GroupCommit

if TYPE_CHECKING:
    from ..policy.binding import DeviceLookup
    from ..policy.config import TenantPolicy


T = TypeVar("T")

#: Claims read and resolved at the same time, at most, over all calls (kubelet sends a pod's
#: claims of one driver in one batch, and prepares pods in parallel).
BATCH_WORKERS = 32


class ClaimLocks:
    """One lock per claim UID, held while a call works on that claim.

    Kubelet never prepares and unprepares one claim at the same time, but a slow call it gave
    up on can still be running when it retries; the lock keeps the two apart.  Locks are taken
    in sorted order, so two batches sharing claims cannot deadlock, and dropped when unused.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextmanager
    def holding(self, uids: Iterable[str]) -> Iterator[None]:
        """Hold the locks of all ``uids`` for the ``with`` block."""
        held: list[str] = []
        try:
            for uid in sorted(set(uids)):
                lock = self._enter(uid)
                try:
                    lock.acquire()
                except BaseException:
                    self._leave(uid, locked=False)
                    raise
                held.append(uid)
            yield
        finally:
            for uid in reversed(held):
                self._leave(uid, locked=True)

    def _enter(self, uid: str) -> threading.Lock:
        with self._mutex:
            lock, users = self._locks.get(uid) or (threading.Lock(), 0)
            self._locks[uid] = (lock, users + 1)
            return lock

    def _leave(self, uid: str, *, locked: bool) -> None:
        with self._mutex:
            lock, users = self._locks[uid]
            if locked:
                lock.release()
            if users == 1:
                del self._locks[uid]
            else:
                self._locks[uid] = (lock, users - 1)


class ClaimRef(NamedTuple):
    """A claim as kubelet names it in NodePrepareResources / NodeUnprepareResources."""

    namespace: str
    uid: str
    name: str


class ClaimSource(Protocol):
    """Where claims come from: the API server (``claims.api_source``) or files (``claims.manifests``)."""

    def get(self, namespace: str, name: str, known_pods: set[str] | None = None) -> dict[str, Any] | None:
        """The claim, or None when there is none.  ``known_pods``: the pods it was prepared for."""
        ...

    def path_of(self, namespace: str, name: str) -> str | None:
        """The manifest file the claim came from (recorded with the prepared claim), or None."""
        ...


@dataclass(kw_only=True)
class KubeletPluginHelper:
    """Prepares and unprepares the claims kubelet names; see the module docstring.

    ``node`` None (``dracni prepare`` without ``--node``) skips the node check; ``policy`` is
    the tenant policy (None: the safe defaults) and ``devices`` finds the NIC behind an
    allocated device; without ``ipamclaims`` an attachment naming an IPAMClaim fails to prepare.
    """

    state: StateDir
    claims: ClaimSource
    driver: str
    node: str | None
    policy: TenantPolicy | None = None
    devices: DeviceLookup | None = None
    ipamclaims: IpamClaimGetter | None = None
    _locks: ClaimLocks = field(default_factory=ClaimLocks, init=False, repr=False)
    _commits: GroupCommit = field(init=False, repr=False)
    _pool: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)
    _pool_mutex: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self._commits = GroupCommit(self.state)

    def prepare(self, refs: list[ClaimRef]) -> dict[str, PrepareOutcome]:
        """claim UID -> outcome, one for every ref."""
        with self._locks.holding(ref.uid for ref in refs):
            resolved = self._each(self._resolve, refs)
            try:
                return self._commits.run(lambda state: store_prepared(state, resolved))
            except StateError as exc:
                return {
                    r.key: r.outcome
                    if r.record is None
                    else PrepareOutcome(error=f"cannot record the prepared claim: {exc}")
                    for r in resolved
                }

    def unprepare(self, refs: list[ClaimRef]) -> dict[str, str | None]:
        """claim UID -> error (None: done); unknown claims succeed."""
        uids = [ref.uid for ref in refs]
        with self._locks.holding(uids):
            try:
                return self._commits.run(lambda state: unprepare_claims(state, uids))
            except StateError as exc:
                return dict.fromkeys(uids, str(exc))

    def close(self) -> None:
        """Stop the batch workers (idle ones; a running call finishes)."""
        with self._pool_mutex:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def _each(self, work: Callable[[ClaimRef], T], refs: list[ClaimRef]) -> list[T]:
        """``work`` for every ref, at the same time when there are several; results in order."""
        if len(refs) <= 1:
            return [work(ref) for ref in refs]
        with self._pool_mutex:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=BATCH_WORKERS, thread_name_prefix="dracni-claim")
            pool = self._pool
        return list(pool.map(work, refs))

    def _resolve(self, ref: ClaimRef) -> Resolved:
        claim, error = self._fetch(ref)
        if claim is None:
            return Resolved(ref.uid, PrepareOutcome(error=error))
        return resolve_for_node(
            claim,
            state=self.state,
            driver=self.driver,
            node=self.node,
            policy=self.policy,
            devices=self.devices,
            source=self.claims.path_of(ref.namespace, ref.name),
            ipamclaims=self.ipamclaims,
        )

    def _fetch(self, ref: ClaimRef) -> tuple[dict[str, Any] | None, str]:
        where = f"ResourceClaim {ref.namespace}/{ref.name}"
        prepared = self.state.read_claim(ref.uid)
        known_pods = {p["uid"] for p in prepared["pods"]} if prepared else None
        try:
            claim = self.claims.get(ref.namespace, ref.name, known_pods)
        except Exception as exc:  # e.g. the API server is unreachable: kubelet retries the pod later
            return None, f"{where}: cannot read it: {exc}"
        if claim is None:
            return None, f"{where} not found"
        uid = (claim.get("metadata") or {}).get("uid")
        if uid != ref.uid:
            return None, (
                f"{where} has UID {uid}, kubelet asked for {ref.uid}: "
                "the claim was deleted and re-created; kubelet will retry with the new one"
            )
        if self.node is not None:
            foreign = [r for r in _our_results(claim, self.driver) if r.get("pool") != self.node]
            if foreign:
                return None, (
                    f"{where}: device {foreign[0].get('device')} is allocated from pool "
                    f"{foreign[0].get('pool')}, not from this node {self.node}"
                )
        return claim, ""


def _our_results(claim: dict[str, Any], driver: str) -> list[dict[str, Any]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [r for r in (allocation.get("devices") or {}).get("results") or [] if r.get("driver") == driver]
