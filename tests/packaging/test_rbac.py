"""RBAC: the objects refer to each other, the admission policy binds slice writes to the node
and the driver, and the ClusterRole grants exactly what ``dracni.kube.api.KubeApi`` calls need:
the table in tests/packaging/rbac.py maps each KubeApi method to the permissions it uses,
checked against the method's code, and the ClusterRole's rules must equal the table's union
(no missing, no unused grant). tests/integration/test_rbac.py runs the service against an API
server enforcing the rules."""

from __future__ import annotations

import inspect

from tests.packaging.manifests import DRIVER, deploy_objects, service_account_user
from tests.packaging.rbac import KUBEAPI_PERMISSIONS, clusterrole_permissions, kubeapi_client_calls, needed_permissions


def test_rbac_objects_refer_to_each_other():
    objects = deploy_objects()
    sa, role, binding = objects["ServiceAccount"], objects["ClusterRole"], objects["ClusterRoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}
    ]
    pod = objects["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    assert pod.get("automountServiceAccountToken", True), "the service needs its token"


def test_admission_policy_binds_slice_writes_to_the_node_and_driver():
    objects = deploy_objects()
    policy = objects["ValidatingAdmissionPolicy/dracni-resourceslices"]
    binding = objects["ValidatingAdmissionPolicyBinding/dracni-resourceslices"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["resource.k8s.io"] and rule["resources"] == ["resourceslices"]
    assert sorted(rule["operations"]) == ["CREATE", "DELETE", "UPDATE"]
    # Only dracni's own service account is constrained, and it is named exactly.
    (condition,) = spec["matchConditions"]
    assert f'request.userInfo.username == "{service_account_user()}"' in condition["expression"]
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert "request.userInfo.extra[?'authentication.kubernetes.io/node-name']" in variables["userNodeName"]
    assert "oldObject" in variables["slice"]  # DELETE has no new object
    validations = " ".join(v["expression"] for v in spec["validations"])
    assert "variables.objectNodeName == variables.userNodeName" in validations
    assert f"variables.objectDriver == '{DRIVER}'" in validations
    assert "variables.userNodeName != ''" in validations


def test_every_kubeapi_method_is_in_the_permission_table():
    from dracni.kube.api import KubeApi

    public = {name for name, member in inspect.getmembers(KubeApi, inspect.isfunction) if not name.startswith("_")}
    unknown = public - set(KUBEAPI_PERMISSIONS)
    assert not unknown, (
        f"KubeApi grew {sorted(unknown)}: add what each needs to KUBEAPI_PERMISSIONS "
        "and to packaging/deploy/clusterrole.yaml"
    )
    assert not set(KUBEAPI_PERMISSIONS) - public, "the table names methods KubeApi no longer has"


def test_permission_table_matches_the_client_calls():
    calls = kubeapi_client_calls()
    for method, perms in KUBEAPI_PERMISSIONS.items():
        derived = calls[method]
        assert derived, f"KubeApi.{method} makes no API call the test can see"
        assert derived <= perms, f"KubeApi.{method} calls need {sorted(map(str, derived - perms))}"
        extra = perms - derived
        # Beyond the call itself, only the API server's synthetic driver check of a status write.
        for p in extra:
            assert (p.resource, p.subresource, p.name) == ("resourceclaims", "driver", DRIVER), (
                f"KubeApi.{method}: {p} does not follow from its call"
            )
            writes = {d.verb for d in derived if (d.resource, d.subresource) == ("resourceclaims", "status")}
            assert p.verb in {f"associated-node:{v}" for v in writes}, f"KubeApi.{method}: {p}"


def test_clusterrole_grants_exactly_what_kubeapi_needs():
    granted, needed = clusterrole_permissions(), needed_permissions()
    missing = needed - granted
    unused = granted - needed
    assert not missing, f"not granted: {sorted(map(str, missing))}"
    assert not unused, f"granted but no KubeApi call uses it: {sorted(map(str, unused))}"


def test_events_are_granted_exactly_what_the_recorder_does():
    """Events (issue 12): created, and patched for a series; never read, updated or deleted."""
    granted = {p.verb for p in clusterrole_permissions() if p.resource == "events"}
    assert granted == {"create", "patch"}
