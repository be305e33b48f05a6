"""The network-status annotation end to end (issue 24 item 3): the frozen service with
``--network-status-annotation``, the fake kubelet, cnitool ADD and DEL with Debian's plugins; the
test API server runs packaging/deploy/pod-network-status-policy.yaml for the service's
pod-bound token of NODE, as a cluster would."""

from __future__ import annotations

import json

import pytest
import yaml
from kubernetes import client

from tests.harness import REPO
from tests.integration.conftest import prepare_ok
from tests.integration.service import (
    NODE,
    ServiceProcess,
    create_allocated_claim,
    macvlan_params,
    new_pod_uid,
    our_status,
    wait_for,
)
from tests.kubeclient import client_for
from tests.packaging.manifests import DEPLOY, load_docs, service_account_user

KEY = "k8s.v1.cni.cncf.io/network-status"
DEFAULT = {"name": "kindnet", "interface": "eth0", "ips": ["10.244.0.7"], "mac": "0a:58:0a:f4:00:07",
           "default": True, "dns": {}}  # fmt: skip


@pytest.fixture
def api(tmp_path):
    from tests.fakes.apiserver import FakeApiServer

    server = FakeApiServer(
        tmp_path / "apiserver",
        ipamclaims=True,
        crds=[yaml.safe_load((REPO / "spec" / "crds" / "addressreservations.dracni.io.yaml").read_text())],
        user=service_account_user(),
        node_name=NODE,
        admission=load_docs(DEPLOY / "pod-network-status-policy.yaml"),
    ).start()
    server.add_node(NODE)
    try:
        yield server
        assert not server.internal_errors
    finally:
        server.close()


@pytest.fixture
def service(lab, api):
    lab.write_conflist()
    svc = ServiceProcess(lab, api, extra_args=("--network-status-annotation",))
    try:
        svc.start()
        yield svc
    finally:
        svc.close()


def annotation(core: client.CoreV1Api) -> list[dict] | None:
    value = (core.read_namespaced_pod("demo", "default").metadata.annotations or {}).get(KEY)
    return None if value is None else json.loads(value)


def test_add_writes_the_entry_beside_the_default_one_and_del_removes_it(lab, api, service):
    pod_uid = new_pod_uid()
    claim = create_allocated_claim(api, "mv", pod_uid, macvlan_params(lab))
    api.add_pod("default", "demo", node=NODE, claims={"net": "mv"}, uid=pod_uid)
    other = client_for(api.write_kubeconfig(lab.tmp / "kubeconfig-cni", token=api.other_token))
    core = client.CoreV1Api(other)
    try:  # the default network's entry, as the primary CNI's agent (another user) wrote it
        core.patch_namespaced_pod(
            "demo", "default", {"metadata": {"annotations": {KEY: json.dumps([DEFAULT])}}},
            _content_type="application/merge-patch+json",
        )  # fmt: skip
        prepare_ok(service.kubelet, claim)
        pod = lab.pod()
        lab.cnitool("add", pod, pod_uid=pod_uid)
        wait_for(lambda: len(annotation(core) or []) == 2, 2.0, "dracni's network-status entry after ADD")
        mac = pod.links()["net1"]["address"]
        assert annotation(core) == [
            DEFAULT,
            {"name": "default/mv/net", "interface": "net1", "ips": ["10.10.1.2"], "mac": mac,
             "default": False, "dns": {}},
        ]  # fmt: skip
        # The same drain sends the claim's status right after the pods' annotation
        # (status/drain.py drain_outbox): it may still be on its way when the annotation is seen.
        wait_for(lambda: our_status(api, claim), 2.0, "the claim's status after ADD")
        patches = api.requests_to("PATCH", "/pods/demo")
        assert {r.user for r in patches} == {api.other_user, service_account_user()}  # the VAP admitted ours

        lab.cnitool("del", pod, pod_uid=pod_uid)
        wait_for(lambda: annotation(core) == [DEFAULT], 2.0, "dracni's entry removed after DEL")
    finally:
        other.close()
