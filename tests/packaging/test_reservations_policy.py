"""The admission policy packaging/deploy/addressreservations-policy.yaml, run as the API server runs it.

dracni's service account writes AddressReservations (one per address of a pool, issue 21);
the policy holds each node's service to its own node's reservations, named by its pod-bound
token (``authentication.kubernetes.io/node-name``).  Two CEL implementations run it, and nothing
here imports dracni:

- cel-python through ``AdmissionPolicy`` (tests/fakes/apiserver/admission.py, the API server's
  ValidatingAdmissionPolicy plugin modelled), on every case below;
- cel-expr-python (the CEL C++ runtime, with the strings extension the API server's environment
  has) type-checks every expression as the API server does (a validation a bool, a
  messageExpression a string) and evaluates the same cases, with the same answers.
"""

from __future__ import annotations

import copy
import functools
import ipaddress
import re
from typing import Any

import pytest

from tests.fakes.apiserver.admission import AdmissionPolicy, Decision, admission_request
from tests.packaging.manifests import DEPLOY, load_docs, service_account_user

POLICY_FILE = DEPLOY / "addressreservations-policy.yaml"
NAME = "dracni-addressreservations"
DENIED = f"ValidatingAdmissionPolicy '{NAME}' with binding '{NAME}' denied request: "
NODE_KEY = "authentication.kubernetes.io/node-name"
CLAIM = {"namespace": "tenant", "name": "net", "uid": "c-1"}


def encoded(pool: str, address: str) -> str:
    """The name rule of POOLS.md section 2, from Python's ipaddress (not from the policy)."""
    ip = ipaddress.ip_address(address)
    if ip.version == 4:
        return f"{pool}.{ip}"
    text = ip.compressed.replace(":", "-")
    return f"{pool}.v6-{text}{'0' if text.endswith('-') else ''}"


def reservation(
    address: str = "10.10.1.7",
    *,
    node: str = "node-a",
    label: str | None = None,
    pool: str = "lan",
    claim: dict[str, str] | None = None,
    name: str | None = None,
    keep: bool = False,
) -> dict[str, Any]:
    return {
        "apiVersion": "dracni.io/v1alpha1",
        "kind": "AddressReservation",
        "metadata": {
            "name": name if name is not None else encoded(pool, address),
            "labels": {"dracni.io/pool": pool, "dracni.io/node": label if label is not None else node},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": f"uid-{node}"}],
        },
        "spec": {
            "pool": pool,
            "address": address,
            "node": node,
            "claim": dict(claim or CLAIM),
            "request": "net",
            "device": "nics/eth1",
            "keep": keep,
        },
    }


@functools.cache
def policy_docs() -> tuple[dict[str, Any], dict[str, Any]]:
    policy, binding = load_docs(POLICY_FILE)
    return policy, binding


@pytest.fixture(scope="module")
def policy() -> AdmissionPolicy:
    return AdmissionPolicy(*policy_docs())


def request_of(
    obj: dict[str, Any] | None, operation: str, old: dict[str, Any] | None, node: str | None, user: str | None
) -> dict[str, Any]:
    subject = obj if obj is not None else old
    assert subject is not None
    extra = {NODE_KEY: [node]} if node else None
    return admission_request(subject, operation, user=user or service_account_user(), extra=extra)


def admit(
    policy: AdmissionPolicy,
    obj: dict[str, Any] | None,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    *,
    node: str | None = "node-a",
    user: str | None = None,
) -> Decision:
    """The decision for the node's service (``node``: its token's node) writing ``obj``, checked
    to be the same under cel-expr-python."""
    request = request_of(obj, operation, old, node, user)
    decision = policy.admit(obj, operation=operation, old=old, request=request)
    if decision.evaluated:
        allowed, message = cel_cpp_decision(obj, old, request)
        assert allowed == decision.allowed, (allowed, message, decision.message)
        assert allowed or DENIED + message == decision.message
    return decision


def expect_denied(decision: Decision, rule: str, node: str = "node-a") -> str:
    assert not decision.allowed, "admitted"
    assert not decision.errors, f"an evaluation error, not a refusal: {decision.errors}"
    assert decision.reason == "Forbidden" and decision.code == 403
    assert decision.message.startswith(DENIED), decision.message
    message = decision.message.removeprefix(DENIED)
    assert f"(rule {rule}" in message, message
    assert f"node '{node}'" in message, message
    return message


# -- cel-expr-python --------------------------------------------------------------------------------


def cel_cpp() -> Any:
    try:
        from cel_expr_python import cel
        from cel_expr_python.ext import ext_strings
    except ImportError:
        pytest.fail("cel-expr-python missing: pip install -e '.[test]'")
    return cel, ext_strings


def _flat(expression: str) -> str:
    """``variables.x`` -> ``variables_x``: each variable as its own typed identifier."""
    return re.sub(r"\bvariables\.(\w+)", r"variables_\1", expression)


@functools.cache
def cel_cpp_policy() -> tuple[Any, list[tuple[str, Any]], list[tuple[Any, Any]], list[Any]]:
    """The policy compiled by cel-expr-python, each variable declared at the type its expression
    yields (composition.go): (cel, variables, validations (expression, message), matchConditions)."""
    cel, ext_strings = cel_cpp()
    spec = policy_docs()[0]["spec"]
    declared = dict.fromkeys(("object", "oldObject", "params", "request"), cel.Type.DYN)

    def env() -> Any:
        return cel.NewEnv(variables=declared, extensions=[ext_strings.ExtStrings()])

    variables = []
    for variable in spec["variables"]:
        compiled = env().compile(_flat(variable["expression"]))
        declared["variables_" + variable["name"]] = compiled.return_type()
        variables.append((variable["name"], compiled))
    final = env()
    validations = []
    for v in spec["validations"]:
        expression = final.compile(_flat(v["expression"]))
        assert expression.return_type() == cel.Type.BOOL, v["expression"]
        message = final.compile(_flat(v["messageExpression"])) if v.get("messageExpression") else None
        assert message is None or message.return_type() == cel.Type.STRING, v["messageExpression"]
        validations.append((expression, message))
    conditions = [final.compile(m["expression"]) for m in spec["matchConditions"]]
    assert all(c.return_type() == cel.Type.BOOL for c in conditions)
    return cel, variables, validations, conditions


def cel_cpp_decision(
    obj: dict[str, Any] | None, old: dict[str, Any] | None, request: dict[str, Any]
) -> tuple[bool, str]:
    """The validations evaluated by cel-expr-python, the variables computed eagerly, in order."""
    cel, variables, validations, _ = cel_cpp_policy()
    data: dict[str, Any] = {"object": obj, "oldObject": old, "params": None, "request": request}
    for name, compiled in variables:
        value = compiled.eval(data=data)
        assert value.type() != cel.Type.ERROR, f"variables.{name}: {value.value()}"
        data["variables_" + name] = value.plain_value()
    for (expression, message), validation in zip(validations, policy_docs()[0]["spec"]["validations"], strict=True):
        result = expression.eval(data=data)
        assert result.type() == cel.Type.BOOL, result.value()
        if not result.plain_value():
            return False, message.eval(data=data).plain_value() if message else validation["message"]
    return True, ""


def test_every_expression_type_checks_as_the_api_server_needs() -> None:
    cel_cpp_policy()


# -- the manifests ------------------------------------------------------------------------------------


def test_policy_and_binding() -> None:
    policy, binding = policy_docs()
    assert (policy["kind"], binding["kind"]) == ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    assert policy["metadata"]["name"] == binding["metadata"]["name"] == NAME
    assert binding["spec"] == {"policyName": NAME, "validationActions": ["Deny"]}
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["dracni.io"] and rule["resources"] == ["addressreservations"]
    assert sorted(rule["operations"]) == ["CREATE", "DELETE", "UPDATE"]
    (condition,) = spec["matchConditions"]
    assert condition["expression"].strip() == f'request.userInfo.username == "{service_account_user()}"'
    for validation in spec["validations"]:
        assert validation["reason"] == "Forbidden"
        assert "\n" not in validation["message"].strip(), "the API server refuses a message with line breaks"
        assert re.search(r"\(rule [a-z-]+\)", validation["message"]), validation["message"]


# -- CREATE -----------------------------------------------------------------------------------------


def test_a_node_creates_its_own_reservations(policy: AdmissionPolicy) -> None:
    for address in ("10.10.1.7", "fd00:10:1::7", "fd00::", "::", "2001:db8::1:0:0:1"):
        decision = admit(policy, reservation(address))
        assert decision.allowed and decision.evaluated, decision.message


def test_a_node_cannot_create_another_nodes_reservation(policy: AdmissionPolicy) -> None:
    message = expect_denied(admit(policy, reservation(node="node-b")), "own-node")
    assert "for node 'node-b'" in message and "may not create AddressReservation 'lan.10.10.1.7'" in message


def test_a_node_cannot_create_one_labelled_for_another_node(policy: AdmissionPolicy) -> None:
    message = expect_denied(admit(policy, reservation(label="node-b")), "node-label")
    assert "dracni.io/node='node-b'" in message
    unlabelled = reservation()
    del unlabelled["metadata"]["labels"]
    expect_denied(admit(policy, unlabelled), "node-label")


def test_a_token_without_a_node_is_refused(policy: AdmissionPolicy) -> None:
    decision = admit(policy, reservation(), node=None)
    assert not decision.allowed and not decision.errors and decision.code == 403
    assert "(rule node-token)" in decision.message


@pytest.mark.parametrize(
    ("address", "wrong"),
    [
        ("10.10.1.7", "lan.10.10.1.8"),
        ("10.10.1.7", "other.10.10.1.7"),
        ("10.10.1.7", "lan-10.10.1.7"),
        ("fd00:10:1::7", "lan.fd00-10-1--7"),
        ("fd00:10:1::7", "lan.v6-fd00-10-1-0-0-0-0-7"),
        ("fd00::", "lan.v6-fd00--"),
    ],
)
def test_a_name_not_matching_pool_and_address_is_denied(policy: AdmissionPolicy, address: str, wrong: str) -> None:
    message = expect_denied(admit(policy, reservation(address, name=wrong)), "name")
    assert f"its name must be '{encoded('lan', address)}'" in message


def test_the_policy_encodes_names_as_the_design_says(policy: AdmissionPolicy) -> None:
    """POOLS.md section 2's examples, and the encoding of Python's ipaddress, are what the CEL
    expects (the name is unique per address: the policy computes it from spec.address)."""
    assert encoded("lan", "10.10.1.7") == "lan.10.10.1.7"
    assert encoded("lan", "fd00:10:1::7") == "lan.v6-fd00-10-1--7"
    assert encoded("lan", "fd00::") == "lan.v6-fd00--0"
    for address in ("::1", "::", "fe80::1:2", "2001:db8:0:0:1::", "1:2:3:4:5:6:7:8"):
        canonical = str(ipaddress.ip_address(address))
        assert admit(policy, reservation(canonical)).allowed, canonical
        name = encoded("lan", canonical)
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", name), name


# -- UPDATE -----------------------------------------------------------------------------------------


def test_a_node_updates_its_own_reservation(policy: AdmissionPolicy) -> None:
    old = reservation()
    new = copy.deepcopy(old)
    new["spec"]["pod"] = {"namespace": "tenant", "name": "p", "uid": "p-1"}
    assert admit(policy, new, "UPDATE", old).allowed


def test_a_node_cannot_update_another_nodes_reservation(policy: AdmissionPolicy) -> None:
    old = reservation(node="node-b")
    new = copy.deepcopy(old)
    new["spec"]["keep"] = True
    message = expect_denied(admit(policy, new, "UPDATE", old), "own-node")
    assert "for node 'node-b'" in message


def test_a_node_adopts_a_reservation_of_the_same_claim(policy: AdmissionPolicy) -> None:
    """A kept reservation whose claim moved to node-a: node-a takes it over (spec.node, label)."""
    old = reservation(node="node-b", keep=True)
    new = reservation(node="node-a", keep=True)
    assert admit(policy, new, "UPDATE", old).allowed
    half = reservation(node="node-a", label="node-b", keep=True)  # spec.node moved, not the label
    expect_denied(admit(policy, half, "UPDATE", old), "node-label")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("pool", "other"),
        ("address", "10.10.1.8"),
        ("claim", {"namespace": "tenant", "name": "net", "uid": "c-2"}),
        ("claim", {"namespace": "thief", "name": "net", "uid": "c-1"}),
    ],
)
def test_pool_address_and_claim_cannot_change(policy: AdmissionPolicy, field: str, value: Any) -> None:
    for old_node in ("node-a", "node-b"):  # neither on its own reservation nor taking another's
        old = reservation(node=old_node)
        new = copy.deepcopy(old)
        new["spec"][field] = value
        new["spec"]["node"] = new["metadata"]["labels"]["dracni.io/node"] = "node-a"
        message = expect_denied(admit(policy, new, "UPDATE", old), "immutable")
        assert f"it changes spec.{field}" in message and f"of node '{old_node}'" in message


# -- DELETE -----------------------------------------------------------------------------------------


def test_a_node_deletes_only_its_own_reservations(policy: AdmissionPolicy) -> None:
    assert admit(policy, None, "DELETE", reservation()).allowed
    message = expect_denied(admit(policy, None, "DELETE", reservation(node="node-b")), "own-node")
    assert "may not delete AddressReservation 'lan.10.10.1.7' of node 'node-b'" in message


def test_delete_ignores_the_label_and_name(policy: AdmissionPolicy) -> None:
    """What the node's list finds (by its label) it may delete, even a misnamed leftover."""
    old = reservation(name="lan.misnamed", label="node-b")
    assert admit(policy, None, "DELETE", old).allowed


# -- who is matched ---------------------------------------------------------------------------------


def test_other_users_are_not_matched(policy: AdmissionPolicy) -> None:
    other = "system:serviceaccount:dracni-system:other"
    for decision in (
        admit(policy, reservation(node="node-b"), user=other),
        admit(policy, None, "DELETE", reservation(node="node-b"), user=other, node=None),
        admit(policy, reservation(name="anything"), user="kubernetes-admin", node=None),
    ):
        assert decision.allowed and not decision.evaluated


def test_other_resources_are_not_matched(policy: AdmissionPolicy) -> None:
    obj = reservation(node="node-b")
    request = admission_request(obj, "CREATE", plural="ipaddresses", user=service_account_user())
    assert not policy.matches(request)
