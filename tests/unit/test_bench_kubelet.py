"""``make bench`` (h)'s kubelet calls (``tests/tools/bench_kubelet.py``) send what they claim to:
a burst's calls all in flight at once, the others one after the other, a claim's error raised.
Against a DRA server made here from the fake kubelet's protos; correctness only, no timing."""

from __future__ import annotations

import threading
from concurrent import futures

import grpc
import pytest

from tests.fakes.kubelet.protos import APIS
from tests.tools.bench_kubelet import KubeletCalls

SERVICE = "v1.DRAPlugin"
PODS = 5


class DraServer:
    """NodePrepareResources and NodeUnprepareResources on a unix socket: each answer waits until
    ``together`` calls are in (a barrier: a burst sent one call at a time would time out), every
    claim succeeds but one named ``bad``."""

    def __init__(self, socket: str, together: int) -> None:
        api = APIS.dra[SERVICE]
        self.barrier = threading.Barrier(together, timeout=10)
        self.lock = threading.Lock()
        self.in_flight = self.most_in_flight = 0
        handlers = {
            method: grpc.unary_unary_rpc_method_handler(
                self._answer(api, method),
                request_deserializer=getattr(api, method + "Request").FromString,
                response_serializer=lambda message: message.SerializeToString(),
            )
            for method in ("NodePrepareResources", "NodeUnprepareResources")
        }
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2 * PODS))
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(api.package + ".DRAPlugin", handlers),)
        )
        self.server.add_insecure_port("unix:" + socket)
        self.server.start()

    def _answer(self, api, method: str):
        single = "NodePrepareResourceResponse" if method == "NodePrepareResources" else "NodeUnprepareResourceResponse"

        def answer(request, _context):
            with self.lock:
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
            try:
                self.barrier.wait()
            finally:
                with self.lock:
                    self.in_flight -= 1
            response = getattr(api, method + "Response")()
            for claim in request.claims:
                response.claims[claim.uid].CopyFrom(
                    getattr(api, single)(error="refused" if claim.name == "bad" else "")
                )
            return response

        return answer

    def stop(self) -> None:
        self.server.stop(grace=None).wait(5)


def pods(bad: bool = False) -> list[list[tuple[str, str, str]]]:
    return [
        [("ns", f"uid-{p}-{c}", "bad" if bad and p == PODS - 1 and c == 1 else f"claim-{p}-{c}") for c in range(2)]
        for p in range(PODS)
    ]


@pytest.fixture
def socket(tmp_path):
    return str(tmp_path / "dra.sock")


def test_a_burst_has_every_call_in_flight_at_once(socket):
    server = DraServer(socket, together=PODS)
    try:
        with KubeletCalls(socket, SERVICE) as kubelet:
            seconds, began = kubelet.calls("NodePrepareResources", pods(), at_once=True)
            assert len(seconds) == PODS and all(s > 0 for s in seconds) and began > 0
            kubelet.calls("NodeUnprepareResources", pods(), at_once=True)
        assert server.most_in_flight == PODS
    finally:
        server.stop()


def test_calls_in_turn_go_one_after_the_other(socket):
    server = DraServer(socket, together=1)
    try:
        with KubeletCalls(socket, SERVICE) as kubelet:
            seconds, _ = kubelet.calls("NodePrepareResources", pods(), at_once=False)
            assert len(seconds) == PODS
        assert server.most_in_flight == 1
    finally:
        server.stop()


@pytest.mark.parametrize("at_once", [True, False])
def test_a_claim_answered_with_an_error_fails_the_calls(socket, at_once):
    server = DraServer(socket, together=PODS if at_once else 1)
    try:
        with KubeletCalls(socket, SERVICE) as kubelet:
            with pytest.raises(RuntimeError, match="claim ns/bad: refused"):
                kubelet.calls("NodePrepareResources", pods(bad=True), at_once=at_once)
            kubelet.calls("NodePrepareResources", pods(), at_once=at_once)  # the process goes on
    finally:
        server.stop()
