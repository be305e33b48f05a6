"""packaging/deploy/pod-network-status-policy.yaml run by the test API server on Pod patches
(``FakeApiServer(admission=...)``, admission.py; Pod updates: core.py ``pod_update``).

dracni's service may change the ``k8s.v1.cni.cncf.io/network-status`` annotation of the pods
bound to the node its token names, and nothing else of any pod."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubeclient import client_for, serving
from tests.packaging.manifests import DEPLOY, load_docs, service_account_user

KEY = "k8s.v1.cni.cncf.io/network-status"
NAME = "dracni-pod-network-status"
DENIED = f"ValidatingAdmissionPolicy '{NAME}' with binding '{NAME}' denied request: "
MERGE = "application/merge-patch+json"


@pytest.fixture
def fake(tmp_path):
    docs = load_docs(DEPLOY / "pod-network-status-policy.yaml")
    with serving(tmp_path, "node-a", "node-b", admission=docs, user=service_account_user(), node_name="node-a") as f:
        f.add_pod("tenant", "here", node="node-a")
        f.add_pod("tenant", "there", node="node-b")
        yield f


@pytest.fixture
def core(fake):
    api = client_for(fake.kubeconfig_path)
    yield client.CoreV1Api(api)
    api.close()


def patch(core, name: str, body: dict) -> dict:
    resp = core.patch_namespaced_pod(name, "tenant", body, _content_type=MERGE, _preload_content=False)
    return json.loads(resp.data)


def refused(core, name: str, body: dict) -> tuple[int, str]:
    with pytest.raises(ApiException) as info:
        patch(core, name, body)
    return info.value.status, json.loads(info.value.body)["message"]


def annotation(value: str | None) -> dict:
    return {"metadata": {"annotations": {KEY: value}}}


def test_the_own_nodes_pod_annotation_is_written_and_removed(core):
    got = patch(core, "here", annotation('[{"name":"tenant/c/net","default":false}]'))
    assert got["metadata"]["annotations"][KEY] == '[{"name":"tenant/c/net","default":false}]'
    got = patch(core, "here", annotation(None))
    assert KEY not in (got["metadata"].get("annotations") or {})


def test_with_a_stale_resource_version_the_patch_conflicts(core):
    rv = core.read_namespaced_pod("here", "tenant").metadata.resource_version
    patch(core, "here", annotation("[]"))
    body = annotation('[{"name":"x"}]') | {}
    body["metadata"]["resourceVersion"] = rv
    with pytest.raises(ApiException) as info:
        patch(core, "here", body)
    assert info.value.status == 409


def test_another_nodes_pod_is_refused(core):
    code, message = refused(core, "there", annotation("[]"))
    assert code == 403
    assert DENIED + "dracni on node 'node-a' may not update Pod 'tenant/there' of node 'node-b'" in message
    assert "(rule own-node" in message


@pytest.mark.parametrize(
    ("body", "what"),
    [
        ({"metadata": {"labels": {"app": "x"}}}, "its labels, finalizers or owner references"),
        ({"metadata": {"annotations": {"other": "x"}}}, "another annotation"),
        ({"metadata": {"annotations": {KEY: "[]", "other": "x"}}}, "another annotation"),
        ({"spec": {"activeDeadlineSeconds": 5}}, "its spec"),
    ],
)
def test_any_other_field_is_refused(core, body, what):
    code, message = refused(core, "here", body)
    assert code == 403, message
    assert f"Pod 'tenant/here': it changes {what} (rule annotation-only" in message


def test_the_pod_update_rules_come_first(core):
    """A spec change beyond the mutable fields is the pod's own validation's 422."""
    code, message = refused(core, "here", {"spec": {"nodeName": "node-b"}})
    assert code == 422 and "pod updates may not change fields other than" in message


def test_another_user_is_not_matched(fake, tmp_path):
    api = client_for(fake.write_kubeconfig(tmp_path / "other", token=fake.other_token))
    try:
        patch(client.CoreV1Api(api), "there", {"metadata": {"labels": {"app": "x"}}})
    finally:
        api.close()
