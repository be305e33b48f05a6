"""Pool addresses for prepared claims: what each device of a claim gets, and when it gives it back.

The rules (docs/architecture.md, "Address pools"):

- every device of a claim on a pool network gets its own address of each family the pool
  serves; a claim shared by several pods gets one per (device, pod), recorded in the device's
  ``poolIPs`` by pod UID, so that each pod's interface has an address of its own;
- a pinned address (``persistentIPs``' status, an IPAMClaim, the tenant's ``runtimeConfig.ips``)
  is reserved as it is, for the claim: one held by another claim is refused, naming it; the
  device's ``requestedIPs`` then carries it (and a free address of each family it does not cover);
- a persistent claim's reservations are kept (``keep``) when it is unprepared, and go when the
  claim is gone (``reconcile``); the others go with the claim's unprepare, or, for the pods of a
  shared claim no longer in ``status.reservedFor``, when the claim is prepared again;
- a claim whose allocation fails gives back what this prepare reserved for it and nothing else.

All of it happens at prepare time, in the service: the CNI plugin only reads the record.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..params import ParameterError
from ..pools.allocator import AllocationError, Pick, PoolAllocator
from ..pools.model import AddressPool, parse_pool
from ..pools.reservations import Holder, Reservation
from .resolve import ClaimError

if TYPE_CHECKING:
    from ..state.records import DeviceSpec, PreparedClaim
    from ..state.store import StateDir

log = logging.getLogger(__name__)

#: ``(namespace, name) -> claim object or None``: is a kept reservation's claim still there.
ClaimGetter = Callable[[str, str], "dict[str, Any] | None"]
#: Seconds after its assignment a claim still counts as being prepared: its record is stored
#: after ``assign`` returns (same NodePrepareResources call, which kubelet gives up on after 45 s),
#: and the reconcile must not release the addresses of a record on its way.
RECORD_GRACE = 120.0


class PoolAddresses:
    """Assigns and releases the pool addresses of this node's claims; see the module docstring."""

    def __init__(self, allocator: PoolAllocator) -> None:
        self.allocator = allocator
        self._in_flight: dict[str, int] = {}
        #: claim UID -> when its last ``assign`` ended (``RECORD_GRACE``)
        self._assigned: dict[str, float] = {}
        self._lock = threading.Lock()

    # -- prepare ---------------------------------------------------------------------------------
    def assign(self, claim: dict[str, Any], record: PreparedClaim) -> None:
        """Reserve the addresses of ``record``'s pool devices and write them into it."""
        uid = record["uid"]
        if not any(d.get("addressPool") for d in record["devices"]):
            self._release_unused(uid, [])
            return
        with self._preparing(uid):
            try:
                self.allocator.ensure_loaded()
            except AllocationError as exc:
                raise ClaimError(f"claim {record['namespace']}/{record['name']}: {exc}") from None
            before = {r.name for r in self.allocator.held_by_claim(uid)}
            used: list[Reservation] = []
            try:
                for device in record["devices"]:
                    if device.get("addressPool"):
                        used.extend(self._assign_device(record, device))
            except (AllocationError, ClaimError) as exc:
                made = [r for r in self.allocator.held_by_claim(uid) if r.name not in before]
                for problem in self.allocator.release(made):
                    log.warning("claim %s/%s: %s", record["namespace"], record["name"], problem)
                if isinstance(exc, ClaimError):
                    raise
                raise ClaimError(f"claim {record['namespace']}/{record['name']}: {exc}") from None
            self._release_unused(uid, used)

    def _assign_device(self, record: PreparedClaim, device: DeviceSpec) -> list[Reservation]:
        where = f"claim {record['namespace']}/{record['name']}: request {device['request']}"
        try:
            pool = parse_pool(device["addressPool"], "addressPool")
        except ParameterError as exc:  # resolve checked it already: only a changed class gets here
            raise ClaimError(f"{where}: the DeviceClass's config: parameters.{exc}") from None
        pinned = _pinned(device, pool, where)
        persistent = bool(device.get("persistentIPs") or device.get("ipamClaim"))
        base = Holder(
            namespace=record["namespace"],
            claim=record["name"],
            claim_uid=record["uid"],
            request=device["request"],
            device=f"{device['pool']}/{device['device']}",
            keep=persistent,
            ipam_claim=device.get("ipamClaim"),
        )
        if pinned or persistent:  # the claim's addresses, whichever pod uses them
            got = [self.allocator.reserve_pinned(pool, ip, base) for ip in pinned]
            covered = {_family_of(ip) for ip in pinned}
            got += [self._free(pool, family, base) for family in pool.families if family not in covered]
            device["requestedIPs"] = list(
                dict.fromkeys(_cidrs(device, pinned, pool) + [pool.cidr(r.ip) for r in got[len(pinned) :]])
            )
            device["poolIPs"] = {}
            return got
        got, by_pod = [], {}
        for pod in record["pods"]:
            holder = dataclasses.replace(base, pod_uid=pod["uid"], pod_name=pod["name"])
            mine = [self._free(pool, family, holder) for family in pool.families]
            by_pod[pod["uid"]] = [pool.cidr(r.ip) for r in mine]
            got += mine
        device["poolIPs"] = by_pod
        return got

    def _free(self, pool: AddressPool, family: str, holder: Holder) -> Reservation:
        seed = "/".join((holder.claim_uid, holder.request, holder.device, holder.pod_uid or "", family))
        return self.allocator.reserve_free(Pick(pool, family, seed), holder)

    def _release_unused(self, uid: str, used: list[Reservation]) -> None:
        keep = {r.name for r in used}
        stale = [r for r in self.allocator.held_by_claim(uid) if r.name not in keep]
        for problem in self.allocator.release(stale):
            log.warning("%s (the reconcile retries)", problem)

    # -- unprepare and reconcile ------------------------------------------------------------------
    def release_claims(self, uids: list[str]) -> None:
        """Give back the unprepared claims' addresses, but a persistent claim's (kept)."""
        with self._lock:
            for uid in uids:
                self._assigned.pop(uid, None)
        gone = [r for uid in uids for r in self.allocator.held_by_claim(uid) if not r.holder.keep]
        for problem in self.allocator.release(gone):
            log.warning("%s (the reconcile retries)", problem)

    def reconcile(self, state: StateDir, get_claim: ClaimGetter, *, at_start: bool = False) -> int:
        """Bring this node's reservations in line with its prepared claims; returns how many
        were released.  Reads this node's reservations (one label-selected list) and, for each
        kept one, its claim (one GET): the load of this node's own claims, never the cluster's.

        Released: a kept reservation whose claim is gone (or is another claim of the same name),
        or, kept for ``persistentIPs`` (no IPAMClaim), whose claim is no longer allocated the
        device (deallocation clears the status entry that made the address sticky: the claim's
        next allocation gets a new one); and one not kept whose claim is not prepared here (its
        unprepare's release failed, or the service died between a create and the record).
        ``at_start`` (the service has just started: the node may have been down) also checks the
        claims prepared here, once: a claim deleted meanwhile had no pod left (a claim in use
        cannot be deleted), so its addresses go.
        Claims being prepared right now are left alone.
        """
        listed = self.allocator.load()
        prepared = {c["uid"] for c in state.list_claims()}
        claims: dict[tuple[str, str], dict[str, Any] | None] = {}  # one GET per claim
        gone = []
        for r in listed:
            uid = r.holder.claim_uid
            if self._is_preparing(uid) or (uid in prepared and not at_start):
                continue
            if not r.holder.keep and uid not in prepared:
                gone.append(r)
                continue
            key = (r.holder.namespace, r.holder.claim)
            if key not in claims:
                claims[key] = get_claim(*key)
            claim = claims[key]
            meta = (claim or {}).get("metadata") or {}
            deallocated = r.holder.keep and not r.holder.ipam_claim and not _allocated(claim or {}, r.holder.device)
            if claim is None or meta.get("uid") != uid or deallocated:
                gone.append(r)
        # nor those whose record is on its way (assigned, not stored yet when the list was read)
        gone = [r for r in gone if not self._record_on_its_way(r.holder.claim_uid, prepared)]
        problems = self.allocator.release(gone)
        for problem in problems:
            log.warning("%s (retried at the next reconcile)", problem)
        for r in gone:
            log.info(
                "released %s of pool %s: claim %s is not prepared here any more", r.address, r.pool, r.holder.label()
            )
        return len(gone) - len(problems)

    @contextmanager
    def _preparing(self, uid: str) -> Iterator[None]:
        with self._lock:
            self._in_flight[uid] = self._in_flight.get(uid, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight[uid] -= 1
                if not self._in_flight[uid]:
                    del self._in_flight[uid]
                self._assigned[uid] = time.monotonic()

    def _is_preparing(self, uid: str) -> bool:
        with self._lock:
            return uid in self._in_flight

    def _record_on_its_way(self, uid: str, prepared: set[str]) -> bool:
        """Assigned less than ``RECORD_GRACE`` ago and not recorded yet: ``assign`` has returned
        and the record is being stored (the reconcile may have listed the reservations first)."""
        with self._lock:
            now = time.monotonic()
            for done in [u for u, at in self._assigned.items() if now - at >= RECORD_GRACE]:
                del self._assigned[done]
            return uid in self._assigned and uid not in prepared


def _allocated(claim: dict[str, Any], device: str) -> bool:
    """Whether the claim's allocation still holds ``device`` (``<pool>/<device>``)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return any(f"{r.get('pool')}/{r.get('device')}" == device for r in results if isinstance(r, dict))


def _family_of(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    return "ipv4" if ip.version == 4 else "ipv6"


def _pinned(device: DeviceSpec, pool: AddressPool, where: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The addresses the device must get (sticky ones, the tenant's runtimeConfig.ips), each
    checked against the pool: one the pool never hands out is refused."""
    texts = list(device.get("requestedIPs") or [])
    asked = (device.get("runtimeConfig") or {}).get("ips")
    if isinstance(asked, list):
        texts += [t for t in asked if isinstance(t, str)]
    out = []
    for text in texts:
        try:
            ip = ipaddress.ip_interface(text).ip
        except ValueError:
            raise ClaimError(f"{where}: {text!r} is not an address in CIDR form") from None
        if pool.subnet_of(ip) is None:
            raise ClaimError(
                f"{where}: address {ip} is not one address pool {pool.name} hands out ({pool.describe()}; "
                "never its network, broadcast, gateway or excluded addresses)"
            )
        if ip not in out:
            out.append(ip)
    return out


def _cidrs(device: DeviceSpec, pinned: list[Any], pool: AddressPool) -> list[str]:
    """The pinned addresses as CIDRs: a sticky one as it was recorded, a new one in the pool's prefix."""
    given = {ipaddress.ip_interface(t).ip: t for t in device.get("requestedIPs") or []}
    return [given.get(ip) or pool.cidr(ip) for ip in pinned]
