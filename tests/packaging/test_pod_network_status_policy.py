"""packaging/deploy/pod-network-status-policy.yaml type-checks as the API server needs it: every
expression compiled by cel-expr-python (the CEL C++ runtime), a validation a bool, a
messageExpression a string.  Its decisions are run by the test API server in
tests/fakes/test_pod_network_status_admission.py and tests/integration/test_network_status_annotation.py."""

from __future__ import annotations

import re

from tests.packaging.manifests import DEPLOY, deploy_objects, load_docs, service_account_user

NAME = "dracni-pod-network-status"


def test_every_expression_type_checks() -> None:
    from cel_expr_python import cel
    from cel_expr_python.ext import ext_strings

    spec = load_docs(DEPLOY / "pod-network-status-policy.yaml")[0]["spec"]
    declared = dict.fromkeys(("object", "oldObject", "params", "request"), cel.Type.DYN)

    def compiled(expression: str):
        env = cel.NewEnv(variables=declared, extensions=[ext_strings.ExtStrings()])
        return env.compile(re.sub(r"\bvariables\.(\w+)", r"variables_\1", expression))

    for variable in spec["variables"]:
        declared["variables_" + variable["name"]] = compiled(variable["expression"]).return_type()
    for validation in spec["validations"]:
        assert compiled(validation["expression"]).return_type() == cel.Type.BOOL
        if validation.get("messageExpression"):
            assert compiled(validation["messageExpression"]).return_type() == cel.Type.STRING
    for condition in spec["matchConditions"]:
        assert compiled(condition["expression"]).return_type() == cel.Type.BOOL


def test_the_policy_is_deployed_for_the_service_account_on_pod_updates_only() -> None:
    objects = deploy_objects()
    policy = objects[f"ValidatingAdmissionPolicy/{NAME}"]
    binding = objects[f"ValidatingAdmissionPolicyBinding/{NAME}"]
    assert binding["spec"] == {"policyName": NAME, "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}
    ]
    assert f'"{service_account_user()}"' in policy["spec"]["matchConditions"][0]["expression"]
