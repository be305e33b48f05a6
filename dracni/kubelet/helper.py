"""Between kubelet's calls and a DRA driver, like upstream's ``kubeletplugin`` helper.

Upstream (``k8s.io/dynamic-resource-allocation/kubeletplugin``, ``draplugin.go``
``nodePluginImplementation.NodePrepareResources``) gets the claims kubelet names, checks each
one against the request, and hands the driver (``DRAPlugin.PrepareResourceClaims``) whole
claim objects; per-claim errors are answered per claim.  This helper does the same without
gRPC and without knowing what the driver does (``kubelet/driver.py`` is the seam), so that the
service (claims from the API server) and ``dracni prepare`` / ``unprepare`` (claims from
manifest files) run the same guards:

- fetch each claim by namespace/name from a claim source, the claims of a batch at the same
  time (each read is an API round trip);
- guards (``kubelet/guards.py``): its UID must be the one kubelet asked for (a claim deleted
  and re-created under the same name is another claim), its devices of this driver must be
  allocated, from this node's pool when the node is known;
- the driver gets the claims that passed, and its answers are made into exactly one per claim
  (``kubelet/answers.py``): a failing claim gets its own error string, the others go on;
- one log line per failed claim, and one call of the observer (metrics, Events) per call,
  with every claim's answer;
- kubelet prepares claims of different pods concurrently, and so does the helper: a claim is
  locked only against another call for the same claim, held until the driver has answered;
- with another instance of the service beside this one (a rolling update), the driver's calls
  hold ``gate`` (``kubelet/instances.py CallGate``): after the claims are read, as upstream
  serializes only after its slow API calls.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from ..batchwork import BatchWorkers
from .answers import call_guarded, prepare_results, split_valid, unprepare_results
from .driver import Claim, ClaimRef, ClaimSource, Driver, Observer, PrepareResult
from .guards import ClaimRefused, check_fetched

log = logging.getLogger(__name__)


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


@dataclass(kw_only=True)
class KubeletPluginHelper:
    """Prepares and unprepares the claims kubelet names through ``driver``; see the module
    docstring.

    ``driver_name`` is the DRA driver name the allocation results must carry; ``node`` None
    (``dracni prepare`` without ``--node``) skips the node-pool check.

    ``report=False`` on a call: the caller reports the answers itself (the CLI prints them, a
    pod joining a shared claim logs with the pod's name), so the helper neither logs failed
    claims nor tells the observer, whose metrics and Events are about kubelet's calls.
    """

    claims: ClaimSource
    driver: Driver
    driver_name: str
    node: str | None
    observer: Observer | None = None
    workers: BatchWorkers = field(default_factory=BatchWorkers)
    #: held around the driver's calls: the instances' ``CallGate.held`` (none by default)
    gate: Callable[[], AbstractContextManager[Any]] = nullcontext
    _locks: ClaimLocks = field(default_factory=ClaimLocks, init=False, repr=False)

    def prepare(self, refs: list[ClaimRef], *, report: bool = True) -> dict[str, PrepareResult]:
        """claim UID -> result, one for every ref."""
        started = time.monotonic()
        valid, invalid = split_valid(refs)
        with self._locks.holding(ref.uid for ref in valid):
            fetched = self.workers.map(self._fetch, valid)
            passed = [(ref, got) for ref, got in zip(valid, fetched, strict=True) if not isinstance(got, str)]
            results = {
                ref.uid: PrepareResult(error=got)
                for ref, got in zip(valid, fetched, strict=True)
                if isinstance(got, str)
            }
            if passed:
                passed_refs = [ref for ref, _ in passed]
                with self.gate():
                    outcomes, error = call_guarded(
                        self.driver.prepare_claims, [claim for _, claim in passed], passed_refs, "prepare", "preparing"
                    )
                results.update(prepare_results(passed_refs, outcomes, error))
        results.update((uid, PrepareResult(error=error)) for uid, error in invalid.items())
        answers = {ref.uid: results[ref.uid] for ref in refs}
        if report:
            self._report("prepare", refs, {uid: a.error for uid, a in answers.items()})
            if self.observer is not None and refs:
                self._observe(self.observer.observe_prepare, refs, answers, started)
        return answers

    def unprepare(self, refs: list[ClaimRef], *, report: bool = True) -> dict[str, str | None]:
        """claim UID -> error (None: done), one for every ref; unknown claims succeed."""
        started = time.monotonic()
        valid, results = split_valid(refs)
        errors: dict[str, str | None] = dict(results)
        if valid:
            with self._locks.holding(ref.uid for ref in valid), self.gate():
                outcomes, error = call_guarded(self.driver.unprepare_claims, valid, valid, "unprepare", "unpreparing")
            errors.update(unprepare_results(valid, outcomes, error))
        answers = {ref.uid: errors[ref.uid] for ref in refs}
        if report:
            self._report("unprepare", refs, answers)
            if self.observer is not None and refs:
                self._observe(self.observer.observe_unprepare, refs, answers, started)
        return answers

    def close(self) -> None:
        """Stop the batch workers (idle ones; a running call finishes)."""
        self.workers.close()

    def _fetch(self, ref: ClaimRef) -> Claim | str:
        """The claim, or why it does not pass the guards."""
        try:
            claim = self.claims.get(ref.namespace, ref.name)
        except Exception as exc:  # e.g. the API server is unreachable: kubelet retries the pod later
            return f"ResourceClaim {ref.namespace}/{ref.name}: cannot read it: {exc}"
        if claim is None:
            return f"ResourceClaim {ref.namespace}/{ref.name} not found"
        try:
            check_fetched(ref, claim, driver=self.driver_name, node=self.node)
        except ClaimRefused as exc:
            return str(exc)
        return claim

    @staticmethod
    def _report(call: str, refs: list[ClaimRef], errors: Mapping[str, str | None]) -> None:
        """The one log line of each failed claim."""
        for ref in {ref.uid: ref for ref in refs}.values():
            if errors.get(ref.uid):
                log.warning(
                    "%s of claim %s/%s (%s) failed: %s", call, ref.namespace, ref.name, ref.uid, errors[ref.uid]
                )

    def _observe(self, observe: Any, refs: list[ClaimRef], answers: Mapping[str, Any], started: float) -> None:
        try:
            observe(refs, answers, time.monotonic() - started)
        except Exception:  # metrics or Events must not fail the call
            log.exception("observing a %s call failed", observe.__name__)
