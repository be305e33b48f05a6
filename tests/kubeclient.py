"""Shared by the tests that talk to the test API server through the real kubernetes client
(the unit tests of the adapters and the test doubles' own tests): ``serving``, ``client_for``
and the ``api_client`` fixture, which the ``conftest.py`` of tests/unit and tests/fakes offer."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dracni.kube.api import load_api_client
from tests.fakes.apiserver import FakeApiServer


@contextmanager
def serving(tmp_path: Path, *nodes: str, **options: Any) -> Iterator[FakeApiServer]:
    """A test API server (``FakeApiServer`` options) with ``nodes``; it must end the test
    without an internal error."""
    server = FakeApiServer(tmp_path / "api", **options).start()
    for node in nodes:
        server.add_node(node)
    try:
        yield server
        assert not server.internal_errors
    finally:
        server.close()


def client_for(kubeconfig: str) -> client.ApiClient:
    """The kubernetes client's ``ApiClient`` (its generated API classes run on it) with dracni's
    own set-up (``load_api_client``: configuration, User-Agent), failing fast (no retries) when
    the fake is down.  ``dracni.kube.api.KubeApi`` runs on it too."""
    ours = load_api_client(kubeconfig)
    ours.configuration.retries = 0
    api = client.ApiClient(ours.configuration)
    api.user_agent = ours.user_agent
    ours.close()
    return api


@pytest.fixture
def api_client(fake):
    """A client of the module's ``fake`` API server."""
    api = client_for(fake.kubeconfig_path)
    yield api
    api.close()
