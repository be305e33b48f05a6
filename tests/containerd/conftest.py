"""The containerd suite's fixtures: one node and one containerd per test, torn down even on failure.

A machine that cannot run containerd pods skips the suite with the reason (never silently).
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.containerd.runtime import World, missing_tools


@pytest.fixture(scope="session")
def _runtime_available() -> None:
    reason = missing_tools()
    if reason:
        pytest.skip(f"containerd suite: {reason}")


def _world(install: bool) -> Iterator[World]:
    base = Path(tempfile.mkdtemp(prefix="dracni-ctrd-"))
    try:
        world = World(base, install=install)
        try:
            yield world
        finally:
            world.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def world(_runtime_available: None) -> Iterator[World]:
    """containerd on a node whose conflist chains dracni after bridge (``dracni install``)."""
    yield from _world(install=True)


@pytest.fixture
def bare_world(_runtime_available: None) -> Iterator[World]:
    """containerd on a node with the primary conflist only: dracni not installed yet."""
    yield from _world(install=False)


@pytest.fixture
def pod_uid() -> str:
    return str(uuid.uuid4())
