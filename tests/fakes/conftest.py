"""Fixtures of the test doubles' own tests: the client of the module's ``fake`` API server
(tests/kubeclient.py) and its resource.k8s.io API."""

import pytest
from kubernetes import client

from tests.kubeclient import api_client

__all__ = ["api_client", "rapi"]


@pytest.fixture
def rapi(api_client: client.ApiClient) -> client.ResourceV1Api:
    return client.ResourceV1Api(api_client)
