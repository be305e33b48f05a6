"""The test API server's admission (``FakeApiServer(admission=[...])``, admission.py): the
policies run on HTTP creates, updates and deletes with the caller's name and token ``extra``,
and a denial is answered as kube-apiserver's validating/dispatcher.go does (403 for reason
Forbidden, 422 for Invalid, ``<resource> "<name>" is forbidden: ValidatingAdmissionPolicy ...``).

The policy here is a small one on ResourceSlices (a resource the fake serves) in standard CEL:
dracni-resourceslices itself uses CEL optionals, which cel-python does not parse.
tests/packaging/test_reservations_policy.py runs the AddressReservation policy through the same
model."""

from __future__ import annotations

import copy
import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubeclient import client_for, serving

NODE_KEY = "authentication.kubernetes.io/node-name"
USER = "system:serviceaccount:kube-system:dracni"

POLICY = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "own-slices"},
    "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": ["resource.k8s.io"],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE", "DELETE"],
                    "resources": ["resourceslices"],
                }
            ]
        },
        "matchConditions": [{"name": "is-dracni", "expression": f'request.userInfo.username == "{USER}"'}],
        "variables": [
            {
                "name": "node",
                "expression": f"has(request.userInfo.extra) && '{NODE_KEY}' in request.userInfo.extra ? "
                f"request.userInfo.extra['{NODE_KEY}'][0] : ''",
            },
            {"name": "slice", "expression": 'request.operation == "DELETE" ? oldObject : object'},
        ],
        "validations": [
            {
                "expression": "variables.slice.spec.nodeName == variables.node",
                "messageExpression": '"node \'" + variables.node + "\' may not write slices of node \'" + '
                'variables.slice.spec.nodeName + "\'"',
                "reason": "Forbidden",
            },
            {"expression": "size(variables.slice.spec.devices) <= 1", "message": "one device at most"},
        ],
    },
}
BINDING = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicyBinding",
    "metadata": {"name": "own-slices-binding"},
    "spec": {"policyName": "own-slices", "validationActions": ["Deny"]},
}
DENIED = "ValidatingAdmissionPolicy 'own-slices' with binding 'own-slices-binding' denied request: "


def slice_obj(name: str, node: str, devices: int = 1) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "dracni.io",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"eth{i}"} for i in range(devices)],
        },
    }


@pytest.fixture
def fake(tmp_path):
    with serving(tmp_path, "node-a", "node-b", admission=[POLICY, BINDING], node_name="node-a") as server:
        yield server


@pytest.fixture
def rapi(fake):
    api = client_for(fake.kubeconfig_path)
    yield client.ResourceV1Api(api)
    api.close()


def refused(call, *args) -> tuple[int, dict]:
    with pytest.raises(ApiException) as info:
        call(*args)
    return info.value.status, json.loads(info.value.body)


def test_a_node_writes_its_own_slices(fake, rapi):
    rapi.create_resource_slice(slice_obj("a", "node-a"))
    got = rapi.read_resource_slice("a")
    got.spec.pool.generation = 2
    rapi.replace_resource_slice("a", got)
    rapi.delete_resource_slice("a")
    assert fake.list_slices() == []


def test_a_denial_is_answered_as_the_api_server_does(fake, rapi):
    code, status = refused(rapi.create_resource_slice, slice_obj("b", "node-b"))
    message = DENIED + "node 'node-a' may not write slices of node 'node-b'"
    assert code == 403
    assert status["reason"] == "Forbidden" and status["code"] == 403
    assert status["message"] == f'resourceslices.resource.k8s.io "b" is forbidden: {message}'
    assert status["details"] == {
        "name": "b",
        "group": "resource.k8s.io",
        "kind": "resourceslices",
        "causes": [{"message": message}],
    }
    assert fake.list_slices() == []


def test_a_validation_without_reason_is_422_invalid(fake, rapi):
    code, status = refused(rapi.create_resource_slice, slice_obj("a", "node-a", devices=2))
    assert (code, status["reason"]) == (422, "Invalid")
    assert status["message"].endswith(DENIED + "one device at most")


def test_update_and_delete_of_another_nodes_slice_are_refused(fake, rapi):
    fake.create_slice(slice_obj("b", "node-b"))  # a direct helper: not admitted
    got = rapi.read_resource_slice("b")
    got.spec.pool.generation = 2
    assert refused(rapi.replace_resource_slice, "b", got)[0] == 403
    assert refused(rapi.delete_resource_slice, "b")[0] == 403
    assert [s["metadata"]["name"] for s in fake.list_slices()] == ["b"]


def test_another_user_is_not_matched(fake):
    api = client_for(fake.other_kubeconfig_path)
    try:
        client.ResourceV1Api(api).create_resource_slice(slice_obj("b", "node-b"))
    finally:
        api.close()
    assert [s["metadata"]["name"] for s in fake.list_slices()] == ["b"]


def test_a_token_without_a_node(fake, rapi):
    fake.user_extra.clear()
    assert refused(rapi.create_resource_slice, slice_obj("a", "node-a"))[0] == 403
    fake.user_extra[USER] = {NODE_KEY: ["node-b"]}
    rapi.create_resource_slice(slice_obj("b", "node-b"))


def test_without_admission_nothing_is_checked(tmp_path):
    with serving(tmp_path, node_name="node-a") as server:
        api = client_for(server.kubeconfig_path)
        try:
            client.ResourceV1Api(api).create_resource_slice(slice_obj("b", "node-b"))
        finally:
            api.close()


def test_admission_takes_only_policies_and_bindings(tmp_path):
    from tests.fakes.apiserver import FakeApiServer

    with pytest.raises(ValueError, match="ConfigMap"):
        FakeApiServer(tmp_path / "x", admission=[POLICY, {"kind": "ConfigMap", "metadata": {"name": "c"}}])
    unbound = copy.deepcopy(POLICY)
    server = FakeApiServer(tmp_path / "y", admission=[unbound])
    assert server._store.admission is not None and not server._store.admission.policies
    server.close()


def test_each_token_of_one_user_names_its_own_node(fake, tmp_path):
    """A DaemonSet's pods share one service account; each pod-bound token names its node
    (``add_token(node_name=...)``), ahead of the user's own ``user_extra``."""
    token = fake.add_token(node_name="node-b")
    api = client_for(fake.write_kubeconfig(tmp_path / "kubeconfig-b", token=token))
    try:
        other = client.ResourceV1Api(api)
        other.create_resource_slice(slice_obj("b", "node-b"))
        code, status = refused(other.create_resource_slice, slice_obj("a", "node-a"))
        assert code == 403 and status["message"].endswith(
            DENIED + "node 'node-b' may not write slices of node 'node-a'"
        )
    finally:
        api.close()
    assert [s["metadata"]["name"] for s in fake.list_slices()] == ["b"]
    assert {r.user for r in fake.requests if r.method == "POST"} == {USER}
