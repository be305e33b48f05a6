"""``kube/transport.py`` over HTTPS, as every request of a real cluster is: the kubeconfig's CA
(kubectl's ``certificate-authority-data``) verifies the server, another CA is refused with
libcurl's word and nothing sent, ``insecure-skip-tls-verify`` skips the check, and a watch
streams over TLS, and the connections after the first resume its TLS session."""

from __future__ import annotations

import base64
import threading
import time
from pathlib import Path

import pytest
import yaml

from dracni.inventory.nics import Nic
from dracni.inventory.slices import build_slices
from dracni.kube.api import ApiError, KubeApi, load_api_client
from tests.fakes.apiserver import FakeApiServer
from tests.fakes.apiserver.tls import ServingCert
from tests.kubeclient import serving

NODE = "node-a"
DRIVER = "dracni.io"


@pytest.fixture
def fake(tmp_path):
    with serving(tmp_path, NODE, tls=True) as server:
        yield server


def kubeconfig_with(fake: FakeApiServer, path, cluster: dict) -> str:
    config = yaml.safe_load(Path(fake.kubeconfig_path).read_text())
    config["clusters"][0]["cluster"] = {"server": fake.url} | cluster
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_the_kubeconfigs_ca_verifies_the_server(fake):
    api = KubeApi(load_api_client(fake.kubeconfig_path, NODE))
    assert fake.url.startswith("https://127.0.0.1:")
    assert api.get_node(NODE)["metadata"]["name"] == NODE
    assert fake.requests_to("GET", f"/nodes/{NODE}")[-1].user == fake.user  # the token went along


def test_a_server_another_ca_signed_is_refused_and_nothing_is_sent(fake, tmp_path):
    (tmp_path / "other").mkdir()
    other = ServingCert.make(str(tmp_path / "other"))
    with open(other.ca, "rb") as fh:
        data = base64.b64encode(fh.read()).decode()
    path = kubeconfig_with(fake, tmp_path / "wrong-ca", {"certificate-authority-data": data})
    fake.reset_requests()
    with pytest.raises(ApiError) as refused:
        KubeApi(load_api_client(path, NODE)).get_node(NODE)
    assert refused.value.status == 0 and refused.value.retryable
    assert "cannot reach the API server" in str(refused.value) and "certificate" in str(refused.value)
    assert not fake.requests


def test_insecure_skip_tls_verify_skips_the_check(fake, tmp_path):
    path = kubeconfig_with(fake, tmp_path / "insecure", {"insecure-skip-tls-verify": True})
    assert KubeApi(load_api_client(path, NODE)).get_node(NODE)["metadata"]["name"] == NODE


def test_a_watch_streams_over_tls(fake):
    api = KubeApi(load_api_client(fake.kubeconfig_path, NODE))
    selector = f"spec.nodeName={NODE},spec.driver={DRIVER}"
    _, rv = api.list_slices(selector)
    (body,) = build_slices(driver=DRIVER, node_name=NODE, node_uid=None, nics=[Nic("eth1", 2)], generation=1)
    api.create_slice(body)
    stream = api.watch_slices(selector, rv, timeout_seconds=30)
    kind, obj = next(stream)
    stream.close()
    assert kind == "ADDED" and obj["spec"]["nodeName"] == NODE


def test_a_connection_the_api_server_closed_while_idle_is_replaced(fake):
    """kube-apiserver closes a connection idle for 90 s (``IdleTimeout``): the client's next
    request opens a new one and succeeds, as after a burst of pod starts the connections it
    opened are closed one by one."""
    fake.idle_timeout = 0.3
    api = KubeApi(load_api_client(fake.kubeconfig_path, NODE))
    assert api.get_node(NODE)["metadata"]["name"] == NODE
    assert fake.open_connections == 1  # kept open after the request
    deadline = time.monotonic() + 5
    while fake.open_connections and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake.open_connections == 0  # the server closed it
    fake.reset_requests()
    assert api.get_node(NODE)["metadata"]["name"] == NODE
    assert [r.status for r in fake.requests_to("GET", f"/nodes/{NODE}")] == [200]
    assert fake.open_connections == 1


def test_a_second_connection_resumes_the_first_ones_tls_session(fake):
    """Two requests at once need two connections; the second one's handshake resumes the session
    of the first connection's (a ticket the server issued), not a full handshake: in a burst of
    pod starts after 90 s idle, each new connection costs the client less CPU that way."""
    api = KubeApi(load_api_client(fake.kubeconfig_path, NODE))
    assert api.get_node(NODE)["metadata"]["name"] == NODE  # the first connection: a full handshake
    fake.latency = 0.5  # the next two requests are out at once: a second connection is opened
    threads = [threading.Thread(target=api.get_node, args=(NODE,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r.status for r in fake.requests_to("GET", f"/nodes/{NODE}")] == [200, 200, 200]
    assert fake.tls_handshakes == [False, True]
