"""Two dracni gRPC servers of one driver side by side (per-instance sockets), registered with the
fake kubelet that models 1.33+ (tests/fakes/kubelet/draplugins.py): the newest serves, a
stopping instance lets its in-flight call finish before its registration goes (kubelet would
cancel it), the other instance's sockets are never touched, and calls fall back to it."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time

import pytest

from dracni.kubelet.server import DRAPluginServer
from tests.fakes.kubelet import FakeKubelet
from tests.unit.kubelet.test_kubelet_grpc import good_prepare, good_unprepare

DRIVER = "dracni.io"
UID_A = "0a0a0a0a-0000-4000-8000-00000000000a"
UID_B = "0b0b0b0b-0000-4000-8000-00000000000b"
CLAIM = ("default", "uid-1", "claim-1")


@pytest.fixture
def world():
    root = tempfile.mkdtemp(dir="/tmp", prefix="dra-ru-")
    servers: list[DRAPluginServer] = []
    kubelet = FakeKubelet(os.path.join(root, "registry"), driver=DRIVER)

    def serve(instance: str, prepare=good_prepare) -> DRAPluginServer:
        server = DRAPluginServer(
            driver=DRIVER,
            plugins_dir=os.path.join(root, "plugins"),
            registry_dir=os.path.join(root, "registry"),
            prepare=prepare,
            unprepare=good_unprepare,
            instance=instance,
        )
        servers.append(server)
        server.start()
        kubelet.wait_for_plugin(timeout=10)
        return server

    try:
        yield kubelet, serve
    finally:
        for server in servers:
            server.stop(grace=0)
        kubelet.close()
        shutil.rmtree(root, ignore_errors=True)


def test_both_instances_register_under_their_own_sockets_and_the_newest_serves(world):
    kubelet, serve = world
    a = serve(UID_A)
    b = serve(UID_B)
    assert os.path.basename(a.registration_socket) == f"{DRIVER}-{UID_A}-reg.sock"
    assert os.path.basename(b.dra_socket) == f"dra-{UID_B}.sock"
    assert a.registered and b.registered
    kubelet.prepare([CLAIM], raise_on_error=True)
    assert kubelet.endpoints_served() == [b.dra_socket]


def test_a_stopping_instance_finishes_its_call_then_kubelet_falls_back_to_the_other(world):
    kubelet, serve = world
    entered, release = threading.Event(), threading.Event()

    def slow_prepare(claims):
        entered.set()
        assert release.wait(10)
        return good_prepare(claims)

    a = serve(UID_A)
    b = serve(UID_B, prepare=slow_prepare)
    answer: list[dict] = []
    call = threading.Thread(target=lambda: answer.append(kubelet.prepare([CLAIM], raise_on_error=True)))
    call.start()
    assert entered.wait(10)
    stopping = threading.Thread(target=b.stop, kwargs={"grace": 10})
    stopping.start()
    time.sleep(0.3)
    assert os.path.exists(b.registration_socket), "the registration went while a call was in flight"
    release.set()
    call.join(10)
    stopping.join(10)
    assert answer and not answer[0]["uid-1"].error, answer  # the call was answered, not cancelled
    assert not os.path.exists(b.registration_socket) and not os.path.exists(b.dra_socket)
    assert os.path.exists(a.registration_socket) and os.path.exists(a.dra_socket)  # A's are A's
    kubelet.manager.reconcile()  # the plugin watcher sees b's socket gone
    kubelet.prepare([CLAIM], raise_on_error=True)
    assert kubelet.endpoints_served() == [b.dra_socket, a.dra_socket]


def test_a_restarted_instance_replaces_only_its_own_stale_socket(world):
    kubelet, serve = world
    a = serve(UID_A)
    stale = a.registration_socket.replace(UID_A, UID_B)
    with open(stale, "w"):
        pass  # what a killed B left
    b = serve(UID_B)  # B's container restarted: its own name, replaced
    assert os.path.exists(a.registration_socket) and b.running
