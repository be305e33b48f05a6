"""(h)'s bursts: every pod's kubelet call at once, and what the test API server saw of them.

``burst`` releases one thread per pod through one barrier and times each call; ``claim_gets``
reads the test API server's own timestamps of the burst's claim GETs (``RecordedRequest``'s
``received`` and ``answered``, ``time.perf_counter()`` of this process): when the last was
answered, and how long the server took over each.  (h) prints them beside the p99, so that a
reader can tell the GETs' share of a burst from the service's tail after them.
``service_waits`` reads the same burst from the service's side, out of its ``/metrics`` before
and after (``ServiceProcess.samples``) (the API requests and the state dir's group commits, ``service/observer.py``).
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from tests.integration.service import Sample


def burst(pods, call) -> tuple[list[float], float]:
    """Each pod's ``call`` at once: the seconds each took, and when the barrier let them go."""
    began: list[float] = []
    barrier = threading.Barrier(len(pods), action=lambda: began.append(time.perf_counter()))
    times: list[float] = []
    lock = threading.Lock()

    def one(claims) -> None:
        barrier.wait()
        started = time.perf_counter()
        call(claims, raise_on_error=True)
        with lock:
            times.append(time.perf_counter() - started)

    threads = [threading.Thread(target=one, args=(claims,)) for claims in pods]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(times) == len(pods), "a call of the burst failed"
    return times, began[0]


def claim_gets(api, began: float) -> tuple[float, float]:
    """The burst's claim GETs as the test API server saw them: when the last one was answered
    (ms after the burst began) and how long it took each, median (ms, the set latency in it)."""
    gets = [
        r
        for r in api.requests_to("GET", "/resourceclaims/")
        if r.received >= began and r.answered and r.user_agent and r.user_agent.startswith("dracni/")
    ]
    return (max(r.answered for r in gets) - began) * 1000, statistics.median(
        r.answered - r.received for r in gets
    ) * 1000


class ServiceWaits(NamedTuple):
    """A burst as the service's own metrics saw it (the differences of two scrapes)."""

    claim_get_ms: float  # a claim GET, the wait for a free connection included (mean)
    connection_wait_ms: float  # of every request, the wait for a free connection (mean)
    commit_ms: float  # a call's group commit, the wait for the one ahead included (mean)
    commits: int  # group commits applied
    calls_per_commit: float
    lock_held_ms: float  # the state lock held by the commits, in all


def service_waits(before: dict[Sample, float], after: dict[Sample, float]) -> ServiceWaits:
    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    def mean_ms(name: str, **labels: str) -> float:
        count = delta(name + "_count", **labels)
        return 1000 * delta(name + "_sum", **labels) / count if count else 0.0

    commits = delta("dracni_state_commit_batch_calls_count")
    return ServiceWaits(
        claim_get_ms=mean_ms("dracni_api_request_seconds", verb="GET", resource="resourceclaims"),
        connection_wait_ms=mean_ms("dracni_api_connection_wait_seconds"),
        commit_ms=mean_ms("dracni_state_commit_seconds"),
        commits=round(commits),
        calls_per_commit=delta("dracni_state_commit_batch_calls_sum") / commits if commits else 0.0,
        lock_held_ms=1000 * delta("dracni_state_commit_lock_seconds_sum"),
    )
