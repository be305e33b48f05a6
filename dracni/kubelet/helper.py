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
- calls are serialized: kubelet may prepare claims of different pods concurrently.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from ..claims.prepare import PrepareOutcome, prepare_claims, unprepare_claims
from ..claims.sticky import IpamClaimGetter
from ..state.store import StateDir

if TYPE_CHECKING:
    from ..policy.binding import DeviceLookup
    from ..policy.config import TenantPolicy


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
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def prepare(self, refs: list[ClaimRef]) -> dict[str, PrepareOutcome]:
        """claim UID -> outcome, one for every ref."""
        with self._lock:
            outcomes: dict[str, PrepareOutcome] = {}
            fetched = []
            origins: dict[str, str | None] = {}
            for ref in refs:
                claim, error = self._fetch(ref)
                if claim is None:
                    outcomes[ref.uid] = PrepareOutcome(error=error)
                    continue
                fetched.append(claim)
                origins[ref.uid] = self.claims.path_of(ref.namespace, ref.name)
            outcomes.update(
                prepare_claims(
                    self.state,
                    fetched,
                    driver=self.driver,
                    node=self.node,
                    policy=self.policy,
                    devices=self.devices,
                    ipamclaims=self.ipamclaims,
                    sources=origins,
                )
            )
        return outcomes

    def unprepare(self, refs: list[ClaimRef]) -> dict[str, str | None]:
        """claim UID -> error (None: done); unknown claims succeed."""
        with self._lock:
            return unprepare_claims(self.state, [ref.uid for ref in refs])

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
