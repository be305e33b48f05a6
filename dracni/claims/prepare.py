"""Prepare and unprepare claims on this node: the logic behind ``dracni prepare`` and the
kubelet's NodePrepareResources / NodeUnprepareResources.

Both are idempotent, as kubelet requires (it replays prepare after a restart, and may
unprepare a claim that was never prepared).  One failing claim gets an error string in its
outcome and does not stop the others: kubelet reports errors per claim.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dracni import jsonio
from dracni.claims.device_metadata import base_request, remove_claim_files
from dracni.claims.resolve import ClaimError, resolve_claim
from dracni.claims.sticky import IpamClaimGetter, pin_addresses
from dracni.kubelet.driver import PrepareResult
from dracni.state import facts
from dracni.state.store import BadRecord, StateDir, StateError

if TYPE_CHECKING:
    from dracni.claims.device_metadata import MetadataWriter
    from dracni.claims.pool_addresses import PoolAddresses
    from dracni.policy.binding import DeviceLookup
    from dracni.policy.config import TenantPolicy
    from dracni.state.records import DeviceSpec, PreparedClaim

log = logging.getLogger(__name__)

#: Record fields that change on every prepare and do not count when comparing records.
_VOLATILE = ("preparedAt", "schema")


@dataclass
class Resolved:
    """One claim resolved for this node: its outcome, and the record to store when it succeeded."""

    key: str
    outcome: PrepareResult
    record: PreparedClaim | None = None


@dataclass(frozen=True, kw_only=True)
class Resolver:
    """How this node resolves claims: the settings ``resolve_claim`` and ``pin_addresses`` take,
    gathered once (by the service, ``dracni prepare``, the network driver) and handed around.

    ``node``, ``policy`` and ``devices``: see ``resolve_claim``; the IPAM of claim configs keeps
    its files in ``state``'s ``ipam/``.  ``ipamclaims`` reads an IPAMClaim (namespace, name) for
    attachments that name one; without it (clusterless use) such an attachment fails to prepare.
    ``pools`` reserves the addresses of networks with an address pool (``claims/pool_addresses.py``);
    without it (clusterless use) such a network fails to prepare.  ``metadata`` writes the
    device metadata files (KEP-5304, ``claims/device_metadata.py``); None: the feature is off.
    """

    state: StateDir
    driver: str
    node: str | None = None
    policy: TenantPolicy | None = None
    devices: DeviceLookup | None = None
    ipamclaims: IpamClaimGetter | None = None
    pools: PoolAddresses | None = None
    metadata: MetadataWriter | None = None

    def resolve(self, claim: dict[str, Any], source: str | None = None) -> Resolved:
        """Resolve one ResourceClaim object into its PreparedClaim record, without the state lock.

        Keyed by claim UID (``<namespace>/<name>`` for a claim without one, which always fails).
        ``source``: the manifest file the claim came from (clusterless use).  Safe to call for
        several claims at once (it reads the API server and netlink, and writes nothing but
        the claim's own device metadata files).
        """
        key = _claim_key(claim)
        try:
            record = resolve_claim(
                claim,
                driver=self.driver,
                node=self.node,
                policy=self.policy,
                devices=self.devices,
                ipam_dir=self.state.ipam_dir,
                source=source,
            )
            pin_addresses(claim, record, driver=self.driver, ipamclaims=self.ipamclaims)
            self._pool_addresses(claim, record)
            cdi_ids = self.metadata.write(claim, record) if self.metadata is not None else {}
        except OSError as exc:
            return Resolved(key, PrepareResult(error=f"cannot write the device metadata: {exc}"))
        except ClaimError as exc:
            return Resolved(key, PrepareResult(error=str(exc)))
        except Exception as exc:  # a bug must not fail the other claims of the call
            log.exception("preparing claim %s failed", key)
            return Resolved(key, PrepareResult(error=f"internal error: {type(exc).__name__}: {exc}"))
        return Resolved(key, PrepareResult(devices=[_device_key(d, cdi_ids) for d in record["devices"]]), record)

    def _pool_addresses(self, claim: dict[str, Any], record: PreparedClaim) -> None:
        if self.pools is not None:
            self.pools.assign(claim, record)
            return
        for device in record["devices"]:
            pool = device.get("addressPool")
            if pool:
                raise ClaimError(
                    f"claim {record['namespace']}/{record['name']}: request {device['request']}: the network's "
                    f"address pool {pool.get('name')} is cluster-wide: its addresses are reserved through the "
                    "API server, by the kubelet plugin service (dracni kubelet-plugin), not by a clusterless prepare"
                )

    def release(self, uids: list[str]) -> None:
        """After the claims' unprepare: give their pool addresses back (persistent ones stay)."""
        if self.pools is not None:
            self.pools.release_claims(uids)


def store_prepared(state: StateDir, resolved: list[Resolved]) -> dict[str, PrepareResult]:
    """Store the records of the resolved claims in one lock hold; claim key -> outcome.

    Re-preparing an unchanged claim leaves its record untouched (``preparedAt`` included).
    """
    outcomes = {r.key: r.outcome for r in resolved}
    records = []
    for r in resolved:
        if r.record is None:
            continue
        problem = _unwritable(r.record)
        if problem:  # fails alone: the batch's other records are written as usual
            log.error("claim %s: cannot record the prepared claim: %s", r.key, problem)
            outcomes[r.key] = PrepareResult(error=f"cannot record the prepared claim: {problem}")
        else:
            records.append(r.record)
    if not records:
        return outcomes
    try:
        with state.locked():  # compare and write as one step, in one lock hold for the batch
            changed = []
            known: dict[str, PreparedClaim | None] = {}  # read once: put_claims needs them too
            for record in records:
                try:
                    old = known[record["uid"]] = state.read_claim(record["uid"])
                    same = _same_record(old, record)
                except BadRecord as exc:
                    if exc.newer:  # a newer dracni's: refused alone, never overwritten (the others go on)
                        outcomes[record["uid"]] = PrepareResult(error=f"cannot record the prepared claim: {exc}")
                        continue
                    same = False  # unreadable: put_claims moves it aside and writes this one
                if not same:
                    changed.append(record)
            state.put_claims(changed, known)
    except StateError as exc:
        for record in records:
            outcomes[record["uid"]] = PrepareResult(error=f"cannot record the prepared claim: {exc}")
    return outcomes


def prepare_claims(
    resolver: Resolver, claims: list[dict[str, Any]], *, sources: dict[str, str | None] | None = None
) -> dict[str, PrepareResult]:
    """Resolve each claim (``Resolver.resolve``) and store the records in ``resolver.state``
    (``store_prepared``).  ``sources`` maps a claim UID to the manifest file it came from
    (clusterless use).
    """
    resolved = [resolver.resolve(claim, (sources or {}).get(_claim_key(claim))) for claim in claims]
    return store_prepared(resolver.state, resolved)


def unprepare_claims(state: StateDir, uids: list[str]) -> dict[str, str | None]:
    """Forget the prepared claims; an unknown UID succeeds.

    Attachment records and the status outbox stay: CNI DEL and the status publisher still
    need them after the claim is unprepared.  The failures failed ADDs left in the claim's
    status end here (``facts.unprepared``), as do the claim's device metadata files (upstream
    ``cleanupClaim``), whatever the current flags say: the record names them.
    """
    try:
        records = state.read_claims(uids, [])  # an unreadable record: no files to name
        state.remove_claims(uids)
        facts.unprepared(state, uids)
    except StateError as exc:
        return {uid: str(exc) for uid in uids}
    errors: dict[str, str | None] = dict.fromkeys(uids)
    for record in records:
        try:
            remove_claim_files(record)
        except OSError as exc:
            errors[record["uid"]] = f"cannot remove the device metadata files: {exc}"
    return errors


def _unwritable(record: PreparedClaim) -> str | None:
    """Why ``record`` cannot be stored as JSON text, or None.  The parameters are checked where
    they enter (``params.check_encodable``); this guards whatever else reaches a record (a
    claim's names, a resolver's bug), so that one such record fails its claim alone instead
    of raising out of the batch's single write."""
    try:
        jsonio.dumps(record)  # compact: the C encoder refuses what the indented writer refuses, 3x faster
    except UnicodeEncodeError as exc:
        return f"it holds text that is not valid Unicode ({exc.reason} at {exc.start})"
    except (TypeError, ValueError, RecursionError) as exc:
        return f"it cannot be written as JSON ({type(exc).__name__}: {exc})"
    return None


def _same_record(old: PreparedClaim | None, new: PreparedClaim) -> bool:
    if old is None:
        return False
    return _stable_fields(old) == _stable_fields(new)


def _stable_fields(record: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in _VOLATILE}


def _device_key(device: DeviceSpec, cdi_ids: dict[str, str]) -> dict[str, Any]:
    """The device as NodePrepareResources names it, with the CDI device of its request's
    metadata file (upstream ``processPreparedClaim``: one per base request)."""
    key: dict[str, Any] = {k: device.get(k) for k in ("request", "pool", "device", "shareID")}
    cdi_id = cdi_ids.get(base_request(device["request"]))
    if cdi_id:
        key["cdiDeviceIDs"] = [cdi_id]
    return key


def _claim_key(claim: object) -> str:
    meta = claim.get("metadata") if isinstance(claim, dict) else None
    if not isinstance(meta, dict):
        return "?"
    return str(meta.get("uid") or f"{meta.get('namespace') or 'default'}/{meta.get('name')}")
