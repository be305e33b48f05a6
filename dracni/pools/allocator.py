"""Reserve and release pool addresses through the API server, with no coordinator.

Each address in use is one AddressReservation object named after it (``reservations.py``); the
API server's create is the test-and-set.  A node finds a free address without listing anyone's
reservations: it tries the pool's addresses in a probe order seeded by the holder (claim,
request, pod, family), each try one create, until one succeeds.  The order visits every address
once (a stride coprime to the pool's size), so

- a retry of the same claim (kubelet replays prepare; the service restarted half-way) tries the
  same addresses in the same order and meets its own reservation first: the node's ledger knows
  it, and it is reused without a request;
- two nodes allocating at once start at different places and rarely meet;
- the node tries last the addresses it holds itself for other uses (its ledger) and those it
  found taken (``_taken``), so a busy pool costs fewer failed creates per allocation, and the
  node never asks first for an address it knows it holds; they are still tried before the pool
  is called full, so a freed address is never missed.

The ledger is this node's reservations (listed with the ``dracni.io/node`` label at start and at
every reconcile, then kept by our own creates and deletes).  It answers "is this mine" and
"release this claim's" without a request, and costs O(the claim) per prepare, not O(the
node's reservations): it is indexed by claim, and its counts per pool (a metric) are kept as
it changes instead of being recounted.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from .. import metrics
from ..batchwork import BatchWorkers
from .model import AddressPool
from .reservations import Holder, Reservation, moved_to, parse_reservation, reservation_body, reservation_name

log = logging.getLogger(__name__)

#: At most this many creates for one address (a pool of fewer addresses is tried in full, so
#: "full" is then exact).  At 99% occupancy 256 random tries all fail with probability 8%.
MAX_TRIES = 256
#: How long a taken address is tried last.
TAKEN_TTL = 60.0
#: Deletes in flight at once, over all releases (each is a round trip): a release's deletes
#: run at the same time on one pool kept for all releases, not on threads started for each
#: (``batchwork.py``; in a burst of unprepares, one after the other on each caller).
RELEASE_WORKERS = 8


class Taken(Exception):
    """The create found the address reserved already (409 AlreadyExists)."""


class StoreError(Exception):
    """The API server failed a reservation call; ``status`` 0 when it was not reached."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status

    @property
    def uncertain(self) -> bool:
        """The write may have happened all the same (no answer, or a server error)."""
        return self.status == 0 or self.status >= 500


class ReservationStore(Protocol):
    """The API calls the allocator makes (``kube/reservations.py`` is the real one)."""

    def create(self, body: dict[str, Any]) -> dict[str, Any]: ...  # Taken, StoreError
    def get(self, name: str) -> dict[str, Any] | None: ...
    def replace(self, name: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def delete(self, name: str, uid: str) -> None: ...  # gone already: no error
    def list_node(self, node: str) -> list[dict[str, Any]]: ...


class AllocationError(Exception):
    """An address could not be reserved; the message says why and what to do."""


class PoolFull(AllocationError):
    pass


@dataclass(frozen=True)
class Pick:
    """Where to look for an address: the pool, the family, and the seed of the probe order."""

    pool: AddressPool
    family: str
    seed: str


class PoolAllocator:
    """One node's reservations; thread-safe (claims of a batch are prepared in parallel)."""

    def __init__(self, store: ReservationStore, node: str, node_uid: Callable[[], str | None]) -> None:
        self.store = store
        self.node = node
        self.node_uid = node_uid
        self._releases = BatchWorkers(max_workers=RELEASE_WORKERS, name="dracni-release")
        self._ledger: dict[str, Reservation] = {}
        #: the ledger by claim UID (claim UID -> name -> reservation)
        self._by_claim: dict[str, dict[str, Reservation]] = {}
        #: how many of the ledger's reservations each (pool, family) has; a pool this node
        #: counted once stays, at 0 when its last reservation is gone
        self._counts: dict[tuple[str, str], int] = {}
        #: when each ledger entry was made or learned (a counter), so that a reload keeps what
        #: was made while the list was on its way
        self._stamps: dict[str, int] = {}
        self._clock = 0
        self._loaded = False
        self._taken: dict[str, float] = {}
        self._lock = threading.Lock()

    # -- the ledger ---------------------------------------------------------------------------
    def load(self) -> list[Reservation]:
        """Read this node's reservations from the API server (a label-selected list) into the
        ledger; what this node reserved while the list was on its way stays."""
        with self._lock:
            started = self._clock
        found = [r for r in map(parse_reservation, self.store.list_node(self.node)) if r is not None]
        mine = [r for r in found if r.node == self.node]
        with self._lock:
            recent = {n: r for n, r in self._ledger.items() if self._stamps.get(n, 0) > started}
            ledger = {r.name: r for r in mine} | recent
            self._ledger, self._by_claim = {}, {}
            self._counts = dict.fromkeys(self._counts, 0)
            for r in ledger.values():
                self._put(r)
            self._stamps = {n: s for n, s in self._stamps.items() if n in self._ledger}
            self._loaded = True
            counted = list(self._counts)
        self._publish(counted)
        return mine

    def ensure_loaded(self) -> None:
        """The ledger must be read before any allocation: without it a claim's own reservations
        look taken, and a re-prepare would reserve new ones."""
        with self._lock:
            if self._loaded:
                return
        try:
            self.load()
        except StoreError as exc:
            raise AllocationError(f"cannot read this node's address reservations: {exc}") from None

    def held(self) -> list[Reservation]:
        with self._lock:
            return list(self._ledger.values())

    def held_by_claim(self, claim_uid: str) -> list[Reservation]:
        with self._lock:
            return list(self._by_claim.get(claim_uid, {}).values())

    # -- reserve ---------------------------------------------------------------------------------
    def reserve_free(self, pick: Pick, holder: Holder) -> Reservation:
        """A free address of ``pick.family`` for ``holder``: its own if it has one already."""
        pool = pick.pool
        with self._lock:
            for r in self._by_claim.get(holder.claim_uid, {}).values():
                if r.pool == pool.name and r.holder.same_use(holder) and r.family == pick.family:
                    return r
        size = pool.size(pick.family)
        metrics.POOL_SIZE.labels(pool.name, pick.family).set(size)
        tries = min(size, MAX_TRIES)
        later: list[int] = []
        for index in _probe_order(size, pick.seed, tries):
            ip = pool.address(pick.family, index)
            if self._known_taken(reservation_name(pool.name, ip)):
                later.append(index)
                continue
            got = self._try_create(pool, ip, holder)
            if got is not None:
                return got
        for index in later:
            got = self._try_create(pool, pool.address(pick.family, index), holder)
            if got is not None:
                return got
        metrics.POOL_EXHAUSTED.labels(pool.name).inc()
        family = "IPv4" if pick.family == "ipv4" else "IPv6"
        if tries == size:
            raise PoolFull(
                f"address pool {pool.name} ({pool.describe()}) is full: all {size} {family} addresses are reserved"
            )
        raise PoolFull(
            f"address pool {pool.name} ({pool.describe()}) is (nearly) full: {tries} of its {size} {family} "
            "addresses tried, all reserved"
        )

    def reserve_pinned(self, pool: AddressPool, ip: Any, holder: Holder) -> Reservation:
        """``ip`` for ``holder``; taken by another claim: ``AllocationError`` naming it."""
        name = reservation_name(pool.name, ip)
        with self._lock:
            mine = self._ledger.get(name)
        if mine is not None and mine.holder.claim_uid == holder.claim_uid:
            return mine
        for _ in range(3):
            got = self._try_create(pool, ip, holder)
            if got is not None:
                return got
            obj = self._get_object(name)
            current = parse_reservation(obj) if obj is not None else None
            if obj is None or current is None:
                continue  # released in between: create again
            if current.holder.claim_uid != holder.claim_uid:
                raise AllocationError(
                    f"address {ip} of pool {pool.name} is reserved for claim {current.holder.label()} "
                    f"(on node {current.node or '?'}); choose another address or delete that claim"
                )
            return self._adopt(current, obj)
        raise AllocationError(f"address {ip} of pool {pool.name}: its reservation keeps changing; retrying later")

    # -- release ---------------------------------------------------------------------------------
    def release(self, reservations: list[Reservation]) -> list[str]:
        """Delete the reservations, at the same time (each is a round trip); returns the problems
        (the reconcile retries those)."""
        if not reservations:
            return []
        outcomes = self._releases.map(self._delete, reservations)
        self._publish({(r.pool, r.family) for r in reservations})
        return [problem for problem in outcomes if problem]

    def close(self) -> None:
        """Stop the idle release threads (a release running finishes; a later one starts new ones)."""
        self._releases.close()

    def _delete(self, r: Reservation) -> str | None:
        try:
            self.store.delete(r.name, r.uid)
        except StoreError as exc:
            return f"releasing {r.address} of pool {r.pool}: {exc}"
        with self._lock:
            self._drop(r.name)
            self._stamps.pop(r.name, None)
            self._taken.pop(r.name, None)
        return None

    # -- internals -------------------------------------------------------------------------------
    def _try_create(self, pool: AddressPool, ip: Any, holder: Holder) -> Reservation | None:
        """The reservation made, or None when the address is taken (by anyone: the caller asks)."""
        try:
            body = reservation_body(pool.name, ip, self.node, self.node_uid(), holder)
        except StoreError as exc:
            raise AllocationError(f"cannot reserve {ip} of pool {pool.name}: {exc}") from None
        name = body["metadata"]["name"]
        try:
            created = parse_reservation(self.store.create(body))
        except Taken:
            with self._lock:
                self._taken[name] = time.monotonic() + TAKEN_TTL
            return None
        except StoreError as exc:
            if exc.uncertain:  # it may exist all the same: if it is ours, keep it
                current = self._get_quietly(name)
                if current is not None and current.holder.same_use(holder) and current.node == self.node:
                    return self._remember(current)
            raise AllocationError(f"cannot reserve {ip} of pool {pool.name}: {exc}") from None
        if created is None:
            raise AllocationError(
                f"cannot reserve {ip} of pool {pool.name}: the API server's answer is not a reservation"
            )
        return self._remember(created)

    def _adopt(self, current: Reservation, obj: dict[str, Any]) -> Reservation:
        """The claim's own reservation (``obj`` as read), made on another node (or lost from the
        ledger): ours now.  The update carries ``obj``'s resourceVersion: a change meanwhile is a
        conflict, never overwritten."""
        if current.node == self.node:
            return self._remember(current)
        try:
            moved = parse_reservation(self.store.replace(current.name, moved_to(obj, self.node, self.node_uid())))
        except StoreError as exc:
            raise AllocationError(
                f"cannot take over the reservation of {current.address} (pool {current.pool}): {exc}"
            ) from None
        if moved is None:
            raise AllocationError(f"cannot take over the reservation of {current.address}: unreadable answer")
        log.info(
            "took over %s of pool %s for claim %s from node %s",
            moved.address,
            moved.pool,
            moved.holder.label(),
            current.node,
        )
        return self._remember(moved)

    def _get_object(self, name: str) -> dict[str, Any] | None:
        try:
            return self.store.get(name)
        except StoreError as exc:
            raise AllocationError(f"cannot read reservation {name}: {exc}") from None

    def _get_quietly(self, name: str) -> Reservation | None:
        try:
            obj = self._get_object(name)
        except AllocationError:
            return None
        return parse_reservation(obj) if obj is not None else None

    def _remember(self, r: Reservation) -> Reservation:
        with self._lock:
            self._clock += 1
            self._stamps[r.name] = self._clock
            old = self._put(r)
            self._taken.pop(r.name, None)
        self._publish({(r.pool, r.family)} | ({(old.pool, old.family)} if old else set()))
        return r

    def _known_taken(self, name: str) -> bool:
        """Held by this node (its ledger: ``reserve_free`` has returned the holder's own
        already, so for another use), or found taken by a create in the last ``TAKEN_TTL``."""
        with self._lock:
            if name in self._ledger:
                return True
            expiry = self._taken.get(name)
            if expiry is None:
                return False
            if expiry < time.monotonic():
                del self._taken[name]
                return False
            return True

    def _put(self, r: Reservation) -> Reservation | None:
        """``r`` into the ledger (in the place of an entry of the same name), its index and
        counts, under the lock; returns the entry it replaced."""
        old = self._ledger.get(r.name)
        if old is not None:
            self._unindex(old)
        self._ledger[r.name] = r
        self._by_claim.setdefault(r.holder.claim_uid, {})[r.name] = r
        key = (r.pool, r.family)
        self._counts[key] = self._counts.get(key, 0) + 1
        return old

    def _drop(self, name: str) -> None:
        """The entry ``name`` out of the ledger, its index and counts, under the lock."""
        old = self._ledger.pop(name, None)
        if old is not None:
            self._unindex(old)

    def _unindex(self, r: Reservation) -> None:
        mine = self._by_claim.get(r.holder.claim_uid, {})
        mine.pop(r.name, None)
        if not mine:
            self._by_claim.pop(r.holder.claim_uid, None)
        self._counts[(r.pool, r.family)] -= 1

    def _publish(self, keys: Iterable[tuple[str, str]]) -> None:
        """The reserved-addresses gauge of each (pool, family) in ``keys``, as counted now."""
        with self._lock:
            counts = [(key, self._counts.get(key, 0)) for key in keys]
        for (pool, family), count in counts:
            metrics.POOL_RESERVED.labels(pool, family).set(count)


def _probe_order(size: int, seed: str, tries: int) -> Iterator[int]:
    """``tries`` distinct indexes of ``range(size)``, in an order fixed by ``seed``."""
    digest = hashlib.blake2b(seed.encode(), digest_size=32).digest()
    start = int.from_bytes(digest[:16], "big") % size
    stride = 1 + int.from_bytes(digest[16:], "big") % max(size - 1, 1)
    while math.gcd(stride, size) != 1:
        stride += 1
    for i in range(tries):
        yield (start + i * stride) % size
