"""``KubeClient.on_request``: every API request but a watch is told to the service's metrics,
with the time it waited for a free connection (``kube/transport.py``, ``service/observer.py``)."""

from __future__ import annotations

import threading
import time

import pytest

from dracni.kube.api import ApiError, KubeApi, KubeClient, load_api_client
from tests.kubeclient import serving

NODE = "node-a"


@pytest.fixture
def fake(tmp_path):
    with serving(tmp_path, NODE) as server:
        yield server


def observed_api(fake, connections: int | None = None) -> tuple[KubeApi, list[tuple[str, str, float, float]]]:
    configuration = load_api_client(fake.kubeconfig_path).configuration
    if connections is not None:
        configuration.connection_pool_maxsize = connections
    client = KubeClient(configuration)
    seen: list[tuple[str, str, float, float]] = []
    client.on_request = lambda verb, resource, waited, seconds: seen.append((verb, resource, waited, seconds))
    return KubeApi(client), seen


def test_each_request_is_observed_by_verb_and_resource_failed_ones_too(fake):
    api, seen = observed_api(fake)
    try:
        assert api.get_claim("default", "absent") is None  # a 404: observed all the same
        with pytest.raises(ApiError):
            api.apply_claim_status("default", "absent", [], field_manager="dracni.io")
    finally:
        api.api_client.close()
    assert [(verb, resource) for verb, resource, _, _ in seen] == [
        ("GET", "resourceclaims"),
        ("PATCH", "resourceclaims/status"),
    ]
    assert all(0 <= waited <= seconds for _, _, waited, seconds in seen)


def test_the_wait_for_a_free_connection_is_observed_apart(fake):
    """One connection, held by the test for 0.5 s after the GET behind it began: the GET waits
    about that long, and says so in ``waited`` (its ``seconds`` include the wait)."""
    api, seen = observed_api(fake, connections=1)
    got: list[object] = []
    calling = threading.Event()

    def read() -> None:
        calling.set()
        got.append(api.get_claim("default", "absent"))

    try:
        with api.api_client.handle():
            reader = threading.Thread(target=read)
            reader.start()
            assert calling.wait(10)
            time.sleep(0.5)
        reader.join(10)
    finally:
        api.api_client.close()
    assert got == [None]
    ((verb, resource, waited, seconds),) = seen
    assert (verb, resource) == ("GET", "resourceclaims")
    assert 0.25 <= waited <= seconds
