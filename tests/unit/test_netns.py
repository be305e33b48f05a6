"""dracni/netns.py: work done inside another network namespace, on a thread of its own."""

from __future__ import annotations

import os
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from dracni.netns import in_netns


@pytest.fixture
def netns() -> Iterator[str]:
    """A throwaway namespace with a veth pair ``probe0``/``probe1`` (this kernel may lack dummy), removed whatever happens."""
    name = f"dracni-netns-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(
            ["ip", "-n", name, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1"], check=True
        )
        yield f"/run/netns/{name}"
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def _link_names() -> set[str]:
    import socket

    return {name for _, name in socket.if_nameindex()}


def test_the_work_sees_the_other_namespace_and_the_caller_stays(netns: str) -> None:
    here = _link_names()
    assert "probe0" in in_netns(netns, _link_names)
    assert _link_names() == here  # the calling thread never moved
    assert os.readlink(f"/proc/self/task/{threading.get_native_id()}/ns/net") == os.readlink("/proc/self/ns/net")


def test_what_the_work_raises_reaches_the_caller(netns: str) -> None:
    def fail() -> None:
        raise ValueError("from inside")

    with pytest.raises(ValueError, match="from inside"):
        in_netns(netns, fail)


def test_a_missing_namespace_is_never_created(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-netns"
    with pytest.raises(FileNotFoundError):
        in_netns(str(missing), _link_names)
    assert not missing.exists()


def test_a_file_that_is_no_namespace_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("")
    with pytest.raises(OSError, match="setns"):
        in_netns(str(plain), _link_names)
