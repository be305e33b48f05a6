"""(h)'s bursts: every pod's kubelet call at once, and what the test API server saw of them.

``burst`` releases one thread per pod through one barrier and times each call; ``claim_gets``
reads the test API server's own timestamps of the burst's claim GETs (``RecordedRequest``'s
``received`` and ``answered``, ``time.perf_counter()`` of this process): when the last was
answered, and how long the server took over each.  (h) prints them beside the p99, so that a
reader can tell the GETs' share of a burst from the service's tail after them.
"""

from __future__ import annotations

import statistics
import threading
import time


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
        if r.received >= began and r.answered and not r.watch and r.user_agent and r.user_agent.startswith("dracni/")
    ]
    return (max(r.answered for r in gets) - began) * 1000, statistics.median(
        r.answered - r.received for r in gets
    ) * 1000
