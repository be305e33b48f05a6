"""The CRD tests' shared fixtures: one test API server per module serving ``CRD`` and
``WIDGETS`` (tests/fakes/crd_examples.py), emptied of custom objects after each test."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.fakes.crd_examples import CRD, PLURAL, WIDGETS
from tests.kubeclient import serving


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("crds"), "node-1", "node-2", crds=[CRD, WIDGETS]) as server:
        yield server


@pytest.fixture
def custom(api_client) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


@pytest.fixture(autouse=True)
def _clean(fake):
    """Each test starts without custom objects (the server is the module's)."""
    yield
    for plural in (PLURAL, "widgets"):
        for obj in fake.list_custom_objects(plural):
            fake._store.remove(plural, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
