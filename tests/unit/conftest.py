"""Shared by the unit tests that talk to the test API server through the real kubernetes client."""

from __future__ import annotations

import pytest
from kubernetes import client

from dracni.kube.api import load_api_client


def client_for(kubeconfig: str) -> client.ApiClient:
    """dracni's own client set-up, failing fast (no retries) when the fake is down."""
    api = load_api_client(kubeconfig)
    api.configuration.retries = 0
    return api


@pytest.fixture
def api_client(fake):
    """A client of the module's ``fake`` API server."""
    api = client_for(fake.kubeconfig_path)
    yield api
    api.close()
