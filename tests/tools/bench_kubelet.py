"""(h)'s kubelet calls, sent from a process of their own, as a node's kubelet sends them.

Kubelet is a process apart from the test API server and from the plugin.  (h) used to send its
bursts from the bench's own process, one thread a call, so the calls shared one interpreter
lock with the test API server: the bench's process used 140-150 ms of CPU in a burst of
prepares, against 80-90 ms for the test API server alone now.  Sending the calls as futures
from one thread (kubelet's calls are goroutines, not threads) costs this process 20 ms of CPU
a burst, against 40-50 ms with a thread a call: less of the 2-core VM taken from the service.
Measured in turn on the same build, rounds of 5 bursts: the burst's p99 was 8.6-8.9x one pod
alone with the calls in the bench's process, 8.1-8.8x from this process (threads or futures
alike): within this VM's noise, but no longer the bench's own contention.

``KubeletCalls`` runs ``python -m tests.tools.bench_kubelet <endpoint> <service>``: a gRPC
channel of its own to the plugin's DRA socket (one connection, as kubelet's ``DRAPlugin`` keeps
one), the messages of the fake kubelet's protos (``tests/fakes/kubelet/protos.py``).  It reads
one JSON request a line on stdin and answers one JSON line on stdout:

- ``{"method": "NodePrepareResources", "pods": [[[ns, uid, name], ...], ...], "at_once": true}``:
  every pod's call in flight at once, else one after the other;
- the answer: ``{"seconds": [...], "began": t}``, each call's time and when the first was sent
  (``time.perf_counter()``: CLOCK_MONOTONIC, the clock of the test API server's timestamps in
  the bench's process), or ``{"error": "..."}`` when a call failed, left a claim out or
  answered one with an error.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from functools import partial
from typing import Any

ClaimTuple = tuple[str, str, str]  # namespace, uid, name, as kubelet names a claim
CALL_TIMEOUT = 60.0  # seconds: a burst's calls wait for each other, far longer than one alone
METHODS = ("NodePrepareResources", "NodeUnprepareResources")


class KubeletCalls:
    """The child process that sends (h)'s calls; stopped by ``close`` (or the ``with`` block)."""

    def __init__(self, endpoint: str, service: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.tools.bench_kubelet", endpoint, service],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self.proc.stdout.readline() if self.proc.stdout else ""
        if ready.strip() != "ready":
            self.close()
            raise RuntimeError(f"the kubelet calls' process did not start: {ready!r}")

    def calls(self, method: str, pods: list[list[ClaimTuple]], *, at_once: bool) -> tuple[list[float], float]:
        """Each pod's ``method`` call (at once or in turn): the seconds each took, and when the
        first began."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"method": method, "pods": pods, "at_once": at_once}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the kubelet calls' process ended (exit {self.proc.wait()})")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["seconds"], answer["began"]

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()

    def __enter__(self) -> KubeletCalls:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _request(api: Any, method: str, claims: list[ClaimTuple]) -> Any:
    return getattr(api, method + "Request")(
        claims=[api.Claim(namespace=ns, uid=uid, name=name) for ns, uid, name in claims]
    )


def _check(claims: list[ClaimTuple], answer: Any) -> None:
    """Raise when the answer left a claim out or failed one (kubelet fails the pod then)."""
    for ns, uid, name in claims:
        if uid not in answer.claims:
            raise RuntimeError(f"no answer for claim {ns}/{name}")
        if answer.claims[uid].error:
            raise RuntimeError(f"claim {ns}/{name}: {answer.claims[uid].error}")


def _in_turn(api: Any, method: str, stub: Any, pods: list[list[ClaimTuple]]) -> tuple[list[float], float]:
    """Each pod's call after the one before: the seconds each took, and when the first was sent."""
    seconds, began = [], time.perf_counter()
    for claims in pods:
        started = time.perf_counter()
        _check(claims, stub(_request(api, method, claims), timeout=CALL_TIMEOUT))
        seconds.append(time.perf_counter() - started)
    return seconds, began


def _at_once(api: Any, method: str, stub: Any, pods: list[list[ClaimTuple]]) -> tuple[list[float], float]:
    """Every pod's call in flight at once, sent from this one thread as futures (kubelet's calls
    are goroutines; a thread a call cost this process 40-50 ms of CPU a burst, measured): the
    seconds each took, to the callback that saw it end, and when the first was sent."""
    requests = [_request(api, method, claims) for claims in pods]
    ended: dict[int, float] = {}
    all_done = threading.Event()
    lock = threading.Lock()

    def done(index: int, _future: Any) -> None:
        with lock:
            ended[index] = time.perf_counter()
            if len(ended) == len(requests):
                all_done.set()

    began = time.perf_counter()
    sent, futures = [], []
    for index, request in enumerate(requests):
        sent.append(time.perf_counter())
        future = stub.future(request, timeout=CALL_TIMEOUT)
        future.add_done_callback(partial(done, index))
        futures.append(future)
    all_done.wait(CALL_TIMEOUT + 10)
    for claims, future in zip(pods, futures, strict=True):
        _check(claims, future.result(timeout=0))  # a call that failed or never ended raises here
    return [ended[i] - sent[i] for i in range(len(requests))], began


def _main(endpoint: str, service: str) -> None:
    import grpc

    from tests.fakes.kubelet.protos import APIS

    api = APIS.dra[service]
    with grpc.insecure_channel("unix:" + endpoint) as channel:
        stubs = {method: api.unary(channel, "DRAPlugin", method) for method in METHODS}
        print("ready", flush=True)
        for line in sys.stdin:
            request = json.loads(line)
            send = _at_once if request["at_once"] else _in_turn
            try:
                seconds, began = send(api, request["method"], stubs[request["method"]], request["pods"])
                reply: dict[str, Any] = {"seconds": seconds, "began": began}
            except Exception as exc:  # a failed call or claim: the bench stops with it
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    _main(*sys.argv[1:3])
