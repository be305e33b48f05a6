"""The seam between the generic kubelet helper and a DRA driver, as upstream draws it.

Upstream's ``k8s.io/dynamic-resource-allocation/kubeletplugin`` (``draplugin.go``) owns the
sockets, reads the claims kubelet names, checks them and then calls the driver's
``DRAPlugin.PrepareResourceClaims`` / ``UnprepareResourceClaims``, which answer per claim
(``PrepareResult``: devices or an error).  These are the same types for dracni: the helper
(``kubelet/helper.py``) speaks only them, so it knows nothing of networks, policy or the state
dir, and dracni's network driver (``claims/driver.py``) implements ``Driver``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

#: A ResourceClaim as the API serves it (camelCase JSON).
Claim = dict[str, Any]


class ClaimRef(NamedTuple):
    """A claim as kubelet names it in NodePrepareResources / NodeUnprepareResources."""

    namespace: str
    uid: str
    name: str


@dataclass
class PrepareResult:
    """Per-claim answer: the prepared devices (``{request, pool, device, shareID}``) or an error."""

    devices: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


class ClaimSource(Protocol):
    """Where the helper reads claims: the API server (``claims.api_source``) or files
    (``claims.manifests``)."""

    def get(self, namespace: str, name: str) -> Claim | None:
        """The claim, or None when there is none; raises when it cannot be read."""
        ...


class Driver(Protocol):
    """What the helper calls once a batch's claims passed its guards (upstream's ``DRAPlugin``).

    Both calls may run concurrently for different claims (never for the same claim: the helper
    locks each claim) and answer per claim UID; a claim the driver leaves out gets an error.
    """

    def prepare_claims(self, claims: list[Claim]) -> Mapping[str, PrepareResult]:
        """Claim UID -> result for the claims (fetched, UID-checked, allocated to this driver
        from this node's pool)."""
        ...

    def unprepare_claims(self, refs: list[ClaimRef]) -> Mapping[str, str | None]:
        """Claim UID -> error (None: done); a claim never prepared succeeds."""
        ...


class Observer(Protocol):
    """Told once per helper call, with every claim's answer: metrics and Events hang here."""

    def observe_prepare(self, refs: list[ClaimRef], results: Mapping[str, PrepareResult], seconds: float) -> None: ...

    def observe_unprepare(self, refs: list[ClaimRef], errors: Mapping[str, str | None], seconds: float) -> None: ...
