"""The health port under hostNetwork is a port of the node: two instances of a rolling update
both listen on it (SO_REUSEPORT), and a single instance keeps it to itself."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from dracni.service.health_server import HealthServer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_instances_share_the_port_and_either_answers():
    port = _free_port()
    old = HealthServer(f"127.0.0.1:{port}", lambda: (True, "old"), share_port=True)
    new = HealthServer(f"127.0.0.1:{port}", lambda: (True, "new"), share_port=True)
    for server in (old, new):
        server.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            assert answer.status == 200 and answer.read().decode().strip() in ("old", "new")
    finally:
        old.stop()
        new.stop()


def test_without_sharing_a_second_server_cannot_bind_the_port():
    port = _free_port()
    first = HealthServer(f"127.0.0.1:{port}", lambda: (True, "ok"))
    first.start()
    try:
        with pytest.raises(OSError):
            HealthServer(f"127.0.0.1:{port}", lambda: (True, "ok"))
    finally:
        first.stop()
