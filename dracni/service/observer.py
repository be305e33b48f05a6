"""What the service reports about each kubelet call: the kubelet helper's observer.

The helper (``kubelet/helper.py``) calls its observer once per NodePrepareResources /
NodeUnprepareResources, with every claim's answer; the service counts the claims by result
(``dracni_prepare_claims_total``, ``dracni_unprepare_claims_total``), times the calls
(``dracni/metrics.py``) and puts a ``PrepareFailed`` Warning Event on each claim that failed
to prepare (``service/events.py``).
Logging each failure is the helper's job, not this one's.

Where a slow call's time went is measured beside it: every API request (``observe_request``,
the API client's ``on_request``) and every group commit of the state dir (``CommitMetrics``),
so that an operator can tell a loaded API server, too few connections to it, and a slow disk
apart (``make bench`` (h) prints the same figures for its burst).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..metrics import (
    API_CONNECTION_WAIT_SECONDS,
    API_REQUEST_SECONDS,
    COMMIT_BATCH_CALLS,
    COMMIT_LOCK_SECONDS,
    COMMIT_SECONDS,
    PREPARE_SECONDS,
    PREPARES,
    UNPREPARE_SECONDS,
    UNPREPARES,
)

if TYPE_CHECKING:
    from ..kubelet.driver import ClaimRef, PrepareResult
    from .events import ServiceEvents


class ServiceObserver:
    """``kubelet.driver.Observer``: metrics for every call, Events for failed prepares."""

    def __init__(self, events: ServiceEvents | None = None) -> None:
        self.events = events

    def observe_prepare(self, refs: list[ClaimRef], results: Mapping[str, PrepareResult], seconds: float) -> None:
        for result in results.values():
            PREPARES.labels(result="error" if result.error else "ok").inc()
        PREPARE_SECONDS.observe(seconds)
        if self.events is not None:
            self.events.prepare_failures(refs, results)

    def observe_unprepare(self, refs: list[ClaimRef], errors: Mapping[str, str | None], seconds: float) -> None:
        for error in errors.values():
            UNPREPARES.labels(result="error" if error else "ok").inc()
        UNPREPARE_SECONDS.observe(seconds)


def observe_request(verb: str, resource: str, waited: float, seconds: float) -> None:
    """``KubeClient.on_request``: ``dracni_api_request_seconds``, and the part of it spent
    waiting for a free connection in ``dracni_api_connection_wait_seconds`` (0 but in a burst)."""
    API_REQUEST_SECONDS.labels(verb, resource).observe(seconds)
    API_CONNECTION_WAIT_SECONDS.observe(waited)


class CommitMetrics:
    """``claims.commits.CommitObserver``: the state dir's group commits as metrics."""

    def observe_batch(self, calls: int, held: float) -> None:
        COMMIT_BATCH_CALLS.observe(calls)
        COMMIT_LOCK_SECONDS.observe(held)

    def observe_commit(self, seconds: float) -> None:
        COMMIT_SECONDS.observe(seconds)
