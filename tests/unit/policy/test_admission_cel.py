"""The admission policy packaging/deploy/claim-parameters-policy.yaml, run as the API server runs it.

The policy (a ValidatingAdmissionPolicy with CEL) refuses at admission time the ResourceClaims and
ResourceClaimTemplates whose dracni.io parameters the node would refuse at prepare time.  It is
held here to the node's own case table (tests/policy_cases.py, which tests/unit/policy/test_policy.py
holds the node to): every case refused by the node and visible in the object is denied, naming
the node's field and rule; every case the node accepts, or refuses for a reason only it can see
(``node_only``), is admitted.

Two CEL implementations from PyPI run the policy, and nothing here imports dracni:

- cel-python (``celpy``) runs it through ``AdmissionPolicy`` (tests/fakes/apiserver/admission.py,
  also the test API server's admission), a small model of the API server's
  ValidatingAdmissionPolicy plugin (k8s.io/apiserver/pkg/admission/plugin/policy/validating:
  dispatcher.go, validator.go; plugin/cel/composition.go; policy/generic/policy_dispatcher.go):
  the binding's paramRef resolved to ``params`` (missing + parameterNotFoundAction Allow: the
  policy is not run), matchConditions first, variables evaluated lazily by name and exposed as
  ``variables.<name>``, every validation evaluated, a false one denying with its
  messageExpression (else its message), an evaluation error denying under failurePolicy Fail,
  and the first denial's message returned.
- cel-expr-python (Google's CEL C++ runtime) type-checks every expression with each variable
  declared at the type its expression yields, as the API server does (composition.go), so that a
  messageExpression is a string and a validation a bool, and evaluates the case table again:
  like the API server's cel-go (and unlike cel-python) it compares values of different types as
  unequal instead of failing.
"""

from __future__ import annotations

import ast
import copy
import functools
import json
import re
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from celpy import celtypes

from tests.fakes.apiserver.admission import AdmissionPolicy, Decision, admission_request
from tests.policy_cases import CASES, DRACNI, HOST_LOCAL, PolicyCase, attach, plugin

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "packaging" / "deploy"
POLICY_FILE = DEPLOY / "claim-parameters-policy.yaml"
CONFIGMAP_FILE = DEPLOY / "policy-configmap.yaml"
DRIVER = "dracni.io"
NAMESPACE = "dracni-system"
DENIED = "ValidatingAdmissionPolicy 'dracni-claim-parameters' with binding 'dracni-claim-parameters' denied request: "


def load_docs(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [d for d in yaml.safe_load_all(fh) if d is not None]


def policy_docs() -> tuple[dict[str, Any], dict[str, Any]]:
    policy, binding = load_docs(POLICY_FILE)
    return policy, binding


def shipped_configmap() -> dict[str, Any]:
    (configmap,) = load_docs(CONFIGMAP_FILE)
    return configmap


def shipped_types(key: str) -> set[str]:
    return {t.strip() for t in shipped_configmap()["data"][key].split(",") if t.strip()}


@pytest.fixture(scope="module")
def admission() -> AdmissionPolicy:
    return AdmissionPolicy(*policy_docs())


@pytest.fixture(scope="module")
def unbound() -> AdmissionPolicy:
    """The policy under a binding without paramRef: params is null, the CEL's defaults apply."""
    policy, binding = policy_docs()
    binding = copy.deepcopy(binding)
    del binding["spec"]["paramRef"]
    return AdmissionPolicy(policy, binding)


# -- objects --------------------------------------------------------------------------------------------


def opaque(params: Any, driver: str = DRIVER) -> dict[str, Any]:
    return {"requests": ["net"], "opaque": {"driver": driver, "parameters": copy.deepcopy(params)}}


def devices(*configs: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"requests": [{"name": "net", "exactly": {"deviceClassName": DRIVER}}]}
    if configs:
        spec["config"] = list(configs)
    return spec


def claim(*configs: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "net", "namespace": "tenant"},
        "spec": {"devices": devices(*configs)},
    }


def template(*configs: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "net", "namespace": "tenant"},
        "spec": {"spec": {"devices": devices(*configs)}},
    }


WRAP = {
    "ResourceClaim": (claim, "spec.devices.config"),
    "ResourceClaimTemplate": (template, "spec.spec.devices.config"),
}


def policy_configmap(
    mode: str = "profiles", extra_types: tuple[str, ...] = (), sysctls: tuple[str, ...] = (), **data: str
) -> dict[tuple[str, str], dict[str, Any]]:
    """The ConfigMap dracni-policy: the case's mode, the shipped (default) type lists + extras,
    the sysctls allowed beyond the safe set."""
    settings = {
        "claimConfigs": mode,
        "pluginTypes": ",".join(sorted(shipped_types("pluginTypes") | set(extra_types))),
        "ipamTypes": ",".join(sorted(shipped_types("ipamTypes"))),
        "allowedSysctls": ",".join(sysctls),
        **data,
    }
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "dracni-policy", "namespace": NAMESPACE},
        "data": settings,
    }
    return {(NAMESPACE, "dracni-policy"): configmap}


def expect_denied(decision: Decision, field: str, rule: str | None = None) -> str:
    """The denial names ``field`` (``parameters.<...>``) and, for a policy rule, the rule."""
    assert not decision.allowed, "admitted"
    assert not decision.errors, f"an evaluation error, not a refusal: {decision.errors}"
    assert decision.message.startswith(DENIED), decision.message
    message = decision.message.removeprefix(DENIED)
    assert f"opaque.{field}" in message, message
    after = message.split(f"opaque.{field}", 1)[1]
    assert after.startswith((": ", ".", "[")), f"{field} is not the field named: {message}"
    if rule is not None:
        assert f"(rule {rule}: " in message, message
        assert decision.reason == "Forbidden"
    else:
        assert decision.reason == "Invalid"
    return message


# -- the manifests ------------------------------------------------------------------------------------


def test_manifests_parse_and_refer_to_each_other() -> None:
    policy, binding = policy_docs()
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert (policy["kind"], binding["kind"]) == ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    assert policy["metadata"]["name"] == binding["metadata"]["name"] == "dracni-claim-parameters"
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["resource.k8s.io"] and rule["apiVersions"] == ["*"]
    assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
    assert sorted(rule["resources"]) == ["resourceclaims", "resourceclaimtemplates"]
    assert binding["spec"]["policyName"] == "dracni-claim-parameters"
    assert binding["spec"]["paramRef"] == {
        "name": "dracni-policy",
        "namespace": NAMESPACE,
        "parameterNotFoundAction": "Allow",
    }
    assert binding["spec"]["validationActions"] == ["Deny"]
    configmap = shipped_configmap()
    assert (configmap["metadata"]["name"], configmap["metadata"]["namespace"]) == ("dracni-policy", NAMESPACE)
    assert set(configmap["data"]) == {"claimConfigs", "pluginTypes", "ipamTypes", "allowedSysctls"}
    assert all(isinstance(v, str) for v in configmap["data"].values()), "ConfigMap data are strings"
    names = [v["name"] for v in spec["variables"]]
    assert len(names) == len(set(names))
    for condition in spec["matchConditions"]:  # evaluated before, and without, the variables
        assert "variables." not in condition["expression"], condition["name"]
    for validation in spec["validations"]:
        assert validation["messageExpression"] and validation["message"], validation["expression"]
        assert "\n" not in validation["message"].strip(), "the API server refuses a message with line breaks"


def all_expressions() -> list[tuple[str, str]]:
    spec = policy_docs()[0]["spec"]
    found = [(f"matchConditions.{m['name']}", m["expression"]) for m in spec["matchConditions"]]
    found += [(f"variables.{v['name']}", v["expression"]) for v in spec["variables"]]
    for i, v in enumerate(spec["validations"]):
        found += [(f"validations[{i}].expression", v["expression"])]
        found += [(f"validations[{i}].messageExpression", v["messageExpression"])]
    return found


@pytest.mark.parametrize(("where", "expression"), all_expressions(), ids=[w for w, _ in all_expressions()])
def test_every_expression_compiles(where: str, expression: str) -> None:
    celpy.Environment().compile(expression)


def test_expressions_type_check_as_the_api_server_needs() -> None:
    """Each variable is declared, after the ones before it, at the type its expression yields
    (composition.go: a variable reads only earlier ones); a validation must be a bool, a
    messageExpression a string, a matchCondition a bool (cel/compile.go)."""
    cel = cel_cpp()
    spec = policy_docs()[0]["spec"]
    declared = dict.fromkeys(("object", "oldObject", "params", "request"), cel.Type.DYN)
    for variable in spec["variables"]:
        compiled = cel.NewEnv(variables=declared).compile(_flat(variable["expression"]))
        declared["variables_" + variable["name"]] = compiled.return_type()
    env = cel.NewEnv(variables=declared)
    for condition in spec["matchConditions"]:
        assert env.compile(_flat(condition["expression"])).return_type() == cel.Type.BOOL
    for validation in spec["validations"]:
        assert env.compile(_flat(validation["expression"])).return_type() == cel.Type.BOOL
        assert env.compile(_flat(validation["messageExpression"])).return_type() == cel.Type.STRING
    for name in [v["name"] for v in spec["variables"]]:
        if name.endswith("Errors"):  # lists of messages, read by the messageExpressions
            assert declared["variables_" + name] == cel.Type.List(cel.Type.STRING), name


def cel_cpp() -> Any:
    try:
        from cel_expr_python import cel
    except ImportError:
        pytest.fail("cel-expr-python missing: pip install -e '.[test]'")
    return cel


def _flat(expression: str) -> str:
    """``variables.x`` -> ``variables_x``: each variable as its own typed identifier."""
    return re.sub(r"\bvariables\.(\w+)", r"variables_\1", expression)


# Extension functions and syntax of the API server's CEL that cel-python does not run; the
# policy keeps to standard CEL.
NON_STANDARD = re.compile(
    r"\.\?|\[\?|\borValue\(|\boptional\.|\bcel\.bind\(|\.(split|join|replace|trim|lowerAscii|upperAscii|indexOf|"
    r"lastIndexOf|substring|charAt|format|quote|reverse|find|findAll|sort|isSorted|sum|min|max|distinct|"
    r"flatten|slice|transformList|transformMap)\(|\b(url|quantity|ip|cidr|semver|authorizer|sets)\b"
)


@pytest.mark.parametrize(("where", "expression"), all_expressions(), ids=[w for w, _ in all_expressions()])
def test_only_standard_cel(where: str, expression: str) -> None:
    code = re.sub(r'"(\\.|[^"\\])*"', '""', expression)  # not inside string literals
    found = NON_STANDARD.search(code)
    assert found is None, f"{where}: {found.group(0)!r} is not standard CEL"


def test_aggregate_literals_are_homogeneous() -> None:
    """The API server checks that the values of a list or map literal have one type
    (cel.ValidateHomogeneousAggregateLiterals): a record mixing types wraps each value in dyn()."""
    for where, expression in all_expressions():
        tree = celpy.Environment().compile(expression)
        for node in tree.iter_subtrees():
            if node.data == "map_lit" and node.children and node.children[0] is not None:
                values = node.children[0].children[1::2]
            elif node.data == "list_lit" and node.children and node.children[0] is not None:
                values = node.children[0].children
            else:
                continue
            kinds = {_literal_kind(v) for v in values}
            assert len(values) < 2 or (len(kinds) == 1 and "?" not in kinds), f"{where}: mixed literal {kinds}"


def _literal_kind(expr: Any) -> str:
    """string, int, dyn (a dyn() call) or ? (anything else) for a literal's element."""
    node = expr
    while hasattr(node, "children") and len(node.children) == 1 and hasattr(node.children[0], "data"):
        node = node.children[0]
    if node.data == "addition":  # a concatenation counts as its leftmost operand
        return _literal_kind(node.children[0])
    if node.data == "addition_add":
        return _literal_kind(node.children[0])
    if node.data == "literal":
        token = str(node.children[0])
        return "string" if token[:1] in "\"'" else "int" if token.isdigit() else "?"
    if node.data == "ident_arg" and str(node.children[0]) == "dyn":
        return "dyn"
    return "?"


# -- the node's case table ---------------------------------------------------------------------------


def case_ids(case: PolicyCase) -> str:
    return case.id


@pytest.mark.parametrize("kind", sorted(WRAP))
@pytest.mark.parametrize("case", CASES, ids=case_ids)
def test_policy_case(admission: AdmissionPolicy, case: PolicyCase, kind: str) -> None:
    wrap, where = WRAP[kind]
    decision = admission.admit(
        wrap(opaque(case.params)), configmaps=policy_configmap(case.mode, case.extra_types, case.allowed_sysctls)
    )
    if case.refused is None or case.node_only:
        assert decision.allowed, decision.message
        assert decision.evaluated
        return
    field, rule = case.refused
    message = expect_denied(decision, field, None if rule == "schema" else rule)
    assert message.startswith(f"{where}[0].opaque.{field}"), message


PROFILE_CASES = [c for c in CASES if c.mode == "profiles" and not c.extra_types]


@pytest.mark.parametrize("case", PROFILE_CASES, ids=case_ids)
def test_profile_case_with_the_defaults(unbound: AdmissionPolicy, case: PolicyCase) -> None:
    """No params (a binding without paramRef): the defaults of dracni/policy/config.py."""
    decision = unbound.admit(claim(opaque(case.params)))
    if case.refused is None or case.node_only:
        assert decision.allowed, decision.message
        return
    field, rule = case.refused
    expect_denied(decision, field, None if rule == "schema" else rule)


def test_full_cases_need_the_configmap(unbound: AdmissionPolicy) -> None:
    """Without params the policy is the default one: a claim config of its own is refused."""
    (case,) = [c for c in CASES if c.id == "full-macvlan"]
    expect_denied(unbound.admit(claim(opaque(case.params))), "parameters.config", "claimConfigs")


@functools.cache
def cel_cpp_policy() -> tuple[list[tuple[str, Any]], list[tuple[Any, Any]]]:
    """The policy compiled by cel-expr-python: (variables in order, validations)."""
    cel = cel_cpp()
    spec = policy_docs()[0]["spec"]
    declared = dict.fromkeys(("object", "oldObject", "params", "request"), cel.Type.DYN)
    variables = []
    for variable in spec["variables"]:
        compiled = cel.NewEnv(variables=declared).compile(_flat(variable["expression"]))
        declared["variables_" + variable["name"]] = compiled.return_type()
        variables.append((variable["name"], compiled))
    env = cel.NewEnv(variables=declared)
    validations = [
        (env.compile(_flat(v["expression"])), env.compile(_flat(v["messageExpression"]))) for v in spec["validations"]
    ]
    return variables, validations


def cel_cpp_decision(obj: dict[str, Any], params: Any) -> tuple[bool, str]:
    """The validations evaluated by cel-expr-python, the variables computed in order (eagerly)."""
    cel = cel_cpp()
    variables, validations = cel_cpp_policy()
    data: dict[str, Any] = {
        "object": obj,
        "oldObject": None,
        "params": params,
        "request": admission_request(obj, "CREATE"),
    }
    for name, compiled in variables:
        value = compiled.eval(data=data)
        assert value.type() != cel.Type.ERROR, f"variables.{name}: {value.value()}"
        data["variables_" + name] = value.plain_value()
    for expression, message in validations:
        result = expression.eval(data=data)
        assert result.type() == cel.Type.BOOL, result.value()
        if not result.plain_value():
            return False, message.eval(data=data).plain_value()
    return True, ""


def test_cel_cpp_gives_the_same_answers(admission: AdmissionPolicy) -> None:
    for case in CASES:
        configmaps = policy_configmap(case.mode, case.extra_types, case.allowed_sysctls)
        (params,) = configmaps.values()
        obj = claim(opaque(case.params))
        allowed, message = cel_cpp_decision(obj, params)
        expected = admission.admit(obj, configmaps=configmaps)
        assert allowed == expected.allowed, case.id
        assert DENIED + message == expected.message or allowed, case.id


# -- what the policy leaves alone ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(WRAP))
def test_objects_without_dracni_configs_are_admitted(admission: AdmissionPolicy, kind: str) -> None:
    wrap, _ = WRAP[kind]
    for obj in (wrap(), wrap(opaque({"anything": True}, driver="gpu.example.com"))):
        decision = admission.admit(obj, configmaps=policy_configmap())
        assert decision.allowed and decision.evaluated, decision.message
    bare = wrap()
    spec = bare["spec"]["spec"] if kind == "ResourceClaimTemplate" else bare["spec"]
    spec["devices"] = {}
    assert admission.admit(bare, configmaps=policy_configmap()).allowed


def test_other_drivers_configs_are_ignored(admission: AdmissionPolicy) -> None:
    other = opaque({"config": {"type": "bridge", "logFile": "/etc/passwd"}, "whatever": 1}, driver="other.example.com")
    good = opaque(attach(network="macvlan-eth1"))
    assert admission.admit(claim(other, good), configmaps=policy_configmap()).allowed
    bad = opaque(attach(ifName="net/1"))
    message = expect_denied(
        admission.admit(claim(other, good, bad), configmaps=policy_configmap()), "parameters.ifName"
    )
    assert message.startswith("spec.devices.config[2].opaque.parameters.ifName"), message


def test_delete_is_not_matched(admission: AdmissionPolicy) -> None:
    obj = claim(opaque(attach(ifName="net/1")))
    assert not admission.admit(obj, operation="DELETE", configmaps=policy_configmap()).evaluated


def test_update_is_checked_only_when_the_spec_changes(admission: AdmissionPolicy) -> None:
    """An existing claim whose parameters a changed policy refuses can still lose its finalizers."""
    old = claim(opaque(attach(config=plugin("bridge"))))
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    decision = admission.admit(new, operation="UPDATE", old=old, configmaps=policy_configmap())
    assert decision.allowed and not decision.evaluated
    changed = claim(opaque(attach(ifName="net/1")))
    decision = admission.admit(changed, operation="UPDATE", old=old, configmaps=policy_configmap())
    expect_denied(decision, "parameters.ifName")


def test_a_missing_configmap_means_the_policy_does_not_run(admission: AdmissionPolicy) -> None:
    """parameterNotFoundAction: Allow (policy_dispatcher.go CollectParams): no params, no evaluation.
    The node still refuses what the policy would have (its defaults are the safe ones)."""
    decision = admission.admit(claim(opaque(attach(config=plugin("bridge")))), configmaps={})
    assert decision.allowed and not decision.evaluated


# -- the settings -------------------------------------------------------------------------------------------


def test_type_lists_may_hold_spaces_and_line_breaks(admission: AdmissionPolicy) -> None:
    """The node splits on commas and line breaks and strips each name (config.split_types)."""
    spaced = policy_configmap("full", pluginTypes=" macvlan,\n  tuning , my.plugin\n", ipamTypes="static,\n dhcp")
    conflist = {"cniVersion": "1.0.0", "name": "own", "plugins": [{"type": "macvlan", "ipam": {"type": "dhcp"}}]}
    assert admission.admit(claim(opaque(attach(config=conflist))), configmaps=spaced).allowed
    conflist["plugins"].append({"type": "tuning"})
    conflist["plugins"].append({"type": "my.plugin"})
    assert admission.admit(claim(opaque(attach(config=conflist))), configmaps=spaced).allowed
    for refused in ("vlan", "mac", "macvlan,tuning", "tuning ", "my"):
        conflist["plugins"][1] = {"type": refused}
        decision = admission.admit(claim(opaque(attach(config=conflist))), configmaps=spaced)
        expect_denied(decision, "parameters.config.plugins[1].type", "pluginTypes")
    conflist["plugins"] = [{"type": "macvlan", "ipam": {"type": "host-local"}}]
    decision = admission.admit(claim(opaque(attach(config=conflist))), configmaps=spaced)
    expect_denied(decision, "parameters.config.plugins[0].ipam.type", "ipamTypes")
    empty = policy_configmap("full", pluginTypes="")
    expect_denied(
        admission.admit(claim(opaque(attach(config=plugin("macvlan")))), configmaps=empty),
        "parameters.config.type",
        "pluginTypes",
    )


def test_claim_configs_setting(admission: AdmissionPolicy) -> None:
    own = claim(opaque(attach(config=plugin("macvlan", ipam=HOST_LOCAL))))
    assert admission.admit(own, configmaps=policy_configmap(" full\n")).allowed
    for mode in ("profiles", "everything", "", "FULL"):
        expect_denied(admission.admit(own, configmaps=policy_configmap(mode)), "parameters.config", "claimConfigs")
    missing = policy_configmap()
    del missing[(NAMESPACE, "dracni-policy")]["data"]["claimConfigs"]
    expect_denied(admission.admit(own, configmaps=missing), "parameters.config", "claimConfigs")


def test_port_mappings_follow_portmap(admission: AdmissionPolicy) -> None:
    with_portmap = policy_configmap("full", ("portmap",))
    without = policy_configmap("full")
    for value, refused in (
        (True, True),
        (1, True),
        ("yes", True),
        ([1], True),
        (False, False),
        (0, False),
        ("", False),
    ):
        params = attach(config=plugin("macvlan", capabilities={"portMappings": value}))
        decision = admission.admit(claim(opaque(params)), configmaps=without)
        if refused:
            expect_denied(decision, "parameters.config.capabilities.portMappings", "runtimeKeys")
        else:
            assert decision.allowed, decision.message
        assert admission.admit(claim(opaque(params)), configmaps=with_portmap).allowed
    params = attach(config=plugin("macvlan"), capabilities={"portMappings": True})
    decision = admission.admit(claim(opaque(params)), configmaps=without)
    expect_denied(decision, "parameters.capabilities.portMappings", "runtimeKeys")
    assert admission.admit(claim(opaque(params)), configmaps=with_portmap).allowed


# -- odd parameters: a refusal naming the field, never an evaluation error -----------------------------------

# fmt: off
ODD = [
    # (id, params, mode, expected field, rule or None)
    ("not-an-object", "net1", "profiles", "parameters", None),
    ("a-list", [], "profiles", "parameters", None),
    ("no-api-version", {"kind": "NetworkAttachment"}, "profiles", "parameters.apiVersion", None),
    ("no-kind", {"apiVersion": DRACNI}, "profiles", "parameters.kind", None),
    ("api-version-number", {"apiVersion": 1, "kind": "NetworkAttachment"}, "profiles", "parameters.apiVersion", None),
    ("wrong-kind", {"apiVersion": DRACNI, "kind": "CNI"}, "profiles", "parameters.kind", None),
    ("if-name-number", attach(ifName=5), "profiles", "parameters.ifName", None),
    ("if-name-empty", attach(ifName=""), "profiles", "parameters.ifName", None),
    ("if-name-dot", attach(ifName=".."), "profiles", "parameters.ifName", None),
    ("if-name-space", attach(ifName="net 1"), "profiles", "parameters.ifName", None),
    ("if-name-nbsp", attach(ifName="net\u00a01"), "profiles", "parameters.ifName", None),
    ("if-name-bytes", attach(ifName="ééééééééé"), "profiles", "parameters.ifName", None),
    ("network-number", attach(network=7), "profiles", "parameters.network", None),
    ("network-newline", attach(network="net\n"), "profiles", "parameters.network", None),
    ("runtime-config-list", attach(runtimeConfig=[]), "profiles", "parameters.runtimeConfig", None),
    ("capabilities-list", attach(capabilities=["mac"]), "profiles", "parameters.capabilities", None),
    ("capability-string", attach(capabilities={"mac": "yes"}), "profiles", "parameters.capabilities.mac", None),
    ("persistent-ips-string", attach(persistentIPs="yes"), "profiles", "parameters.persistentIPs", None),
    ("ipam-claim-upper", attach(ipamClaim="Net_IPs"), "profiles", "parameters.ipamClaim", None),
    ("config-null", attach(config=None), "full", "parameters.config", None),
    ("config-list", attach(config=[]), "full", "parameters.config", None),
    ("config-no-type", attach(config={"name": "x"}), "full", "parameters.config.type", None),
    ("config-type-number", attach(config={"type": 5}), "full", "parameters.config.type", None),
    ("config-type-slash", attach(config={"type": "../bin/sh"}), "full", "parameters.config.type", None),
    ("config-type-as-name", attach(config={"type": "mac vlan"}), "full", "parameters.config.type", None),
    ("config-bad-name", attach(config=plugin("macvlan", name="a b")), "full", "parameters.config.name", None),
    ("config-cni-version", attach(config=plugin("macvlan", cniVersion="9.9")), "full", "parameters.config.cniVersion", None),
    ("conflist-no-name", attach(config={"plugins": [{"type": "macvlan"}]}), "full", "parameters.config.name", None),
    ("plugins-string", attach(config={"name": "x", "plugins": "macvlan"}), "full", "parameters.config.plugins", None),
    ("plugins-empty", attach(config={"name": "x", "plugins": []}), "full", "parameters.config.plugins", None),
    ("plugin-number", attach(config={"name": "x", "plugins": [{"type": "macvlan"}, 5]}), "full", "parameters.config.plugins[1]", None),
    ("plugin-no-type", attach(config={"name": "x", "plugins": [{"mode": "l2"}]}), "full", "parameters.config.plugins[0].type", None),
    ("cni-form-no-ifname", {"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI", "config": {"name": "x", "plugins": [{"type": "macvlan"}]}}, "full", "parameters.ifName", None),
    ("cni-form-null-ifname", {"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": None, "config": {"name": "x", "plugins": [{"type": "macvlan"}]}}, "full", "parameters.ifName", None),
    ("cni-form-extra", {"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "n", "network": "x"}, "full", "parameters.network", None),
    ("cni-form-string-config", {"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "n", "config": "{}"}, "full", "parameters.config", None),
    ("ipam-type-empty", attach(config=plugin("macvlan", ipam={"type": ""})), "full", "parameters.config.ipam.type", "ipamTypes"),
    ("profile-runtime-bandwidth", attach(runtimeConfig={"bandwidth": {}}), "full", "parameters.runtimeConfig.bandwidth", "runtimeKeys"),
    ("profile-empty-capabilities-ok", attach(capabilities={}), "profiles", None, None),
    ("json-string-under-profiles", attach(config='{"type": "bridge"}'), "profiles", "parameters.config", "claimConfigs"),
    ("json-string-under-full", attach(config='{"type": "bridge", "logFile": "/x"}'), "full", None, None),
    ("ipam-not-an-object", attach(config=plugin("macvlan", ipam="host-local")), "full", None, None),
    ("plugin-capabilities-not-an-object", attach(config=plugin("macvlan", capabilities=[])), "full", None, None),
]
# fmt: on


@pytest.mark.parametrize(("params", "mode", "field", "rule"), [o[1:] for o in ODD], ids=[o[0] for o in ODD])
def test_odd_parameters(
    admission: AdmissionPolicy, params: Any, mode: str, field: str | None, rule: str | None
) -> None:
    decision = admission.admit(claim(opaque(params)), configmaps=policy_configmap(mode))
    if field is None:
        assert decision.allowed, decision.message
    else:
        expect_denied(decision, field, rule)


def test_values_with_line_breaks_are_not_shown(admission: AdmissionPolicy) -> None:
    """The API server drops a message holding a line break (validator.go): values that hold one
    are not quoted in it, and a key that holds one leaves the static message."""
    decision = admission.admit(claim(opaque(attach(config=plugin("brid\nge")))), configmaps=policy_configmap("full"))
    message = expect_denied(decision, "parameters.config.type", "pluginTypes")
    assert "the value is not allowed" in message
    spaced = policy_configmap("full", pluginTypes="macvlan\nipvlan")
    decision = admission.admit(claim(opaque(attach(config=plugin("bridge")))), configmaps=spaced)
    message = expect_denied(decision, "parameters.config.type", "pluginTypes")
    assert "(allowed: the pluginTypes of ConfigMap dracni-system/dracni-policy)" in message
    decision = admission.admit(claim(opaque(attach(**{"if\nName": "x"}))), configmaps=policy_configmap())
    assert not decision.allowed and not decision.errors
    (static,) = [
        v["message"].strip() for v in policy_docs()[0]["spec"]["validations"] if "schemaErrors" in v["expression"]
    ]
    assert decision.message == DENIED + static


# -- limits: bounded lists keep the cost bounded ---------------------------------------------------------------


def test_at_most_16_dracni_configs(admission: AdmissionPolicy) -> None:
    configs = [opaque(attach(network="macvlan-eth1")) for _ in range(16)]
    assert admission.admit(claim(*configs), configmaps=policy_configmap()).allowed
    decision = admission.admit(claim(*configs, opaque(attach())), configmaps=policy_configmap())
    assert not decision.allowed and not decision.errors
    assert "17 configs of driver dracni.io" in decision.message and "at most 16" in decision.message


def test_at_most_32_plugins_per_config(admission: AdmissionPolicy) -> None:
    conflist = {"cniVersion": "1.0.0", "name": "own", "plugins": [{"type": "tuning"}] * 32}
    assert admission.admit(claim(opaque(attach(config=conflist))), configmaps=policy_configmap("full")).allowed
    conflist["plugins"] = conflist["plugins"] + [{"type": "tuning"}]
    decision = admission.admit(claim(opaque(attach(config=conflist))), configmaps=policy_configmap("full"))
    message = expect_denied(decision, "parameters.config.plugins")
    assert "lists 33 plugins" in message and "at most 32" in message
    conflist["plugins"] = [{"type": "tuning"}] * 31 + [{"type": "bridge"}]
    decision = admission.admit(claim(opaque(attach(config=conflist))), configmaps=policy_configmap("full"))
    expect_denied(decision, "parameters.config.plugins[31].type", "pluginTypes")


def test_a_large_object_is_checked_without_error(admission: AdmissionPolicy) -> None:
    """16 configs of 32 plugins each, every plugin with a forbidden key: denied, not failed
    (cel-expr-python; cel-python on a quarter of it, it is slow)."""
    plugins = [{"type": "macvlan", "ipam": {"type": "host-local", "dataDir": "/x"}} for _ in range(32)]
    conflist = {"cniVersion": "1.0.0", "name": "own", "plugins": plugins}
    configs = [opaque(attach(config=conflist)) for _ in range(16)]
    assert len(json.dumps(configs[0]["opaque"]["parameters"])) < 10 * 1024, "the API server's limit per config"
    (params,) = policy_configmap("full").values()
    allowed, message = cel_cpp_decision(claim(*configs), params)
    assert not allowed and message.startswith("spec.devices.config[0].opaque.parameters.config.plugins[0].ipam.dataDir")
    quarter = [opaque(attach(config={**conflist, "plugins": plugins[:8]})) for _ in range(8)]
    decision = admission.admit(claim(*quarter), configmaps=policy_configmap("full"))
    expect_denied(decision, "parameters.config.plugins[0].ipam.dataDir", "nodePaths")


# -- the node's settings, rules and defaults, read from its source (not imported) -----------------------------


def source_constants(path: Path) -> dict[str, Any]:
    """Module-level constants of a dracni source file: literals, frozenset(literal), names of
    earlier string constants; read with ast, so that nothing of dracni is imported."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: dict[str, Any] = {}

    def value(node: ast.expr) -> Any:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "frozenset":
            return frozenset(value(node.args[0])) if node.args else frozenset()
        if isinstance(node, ast.Name) and node.id in found:
            return found[node.id]
        if isinstance(node, ast.Set):
            return {value(e) for e in node.elts}
        if isinstance(node, ast.Dict):
            return {value(k): value(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
        return ast.literal_eval(node)

    for statement in tree.body:
        target = None
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, node = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            target, node = statement.target, statement.value
        if isinstance(target, ast.Name) and target.id.isupper():
            try:
                found[target.id] = value(node)
            except (ValueError, TypeError, KeyError):
                continue
    return found


def policy_variable(admission: AdmissionPolicy, name: str, params: Any = None) -> Any:
    """A variable's value (as Python values) for an empty claim."""
    activation = admission.activation(claim(), None, params, admission_request(claim(), "CREATE"))
    return plain(admission.run(admission.variables[name], activation))


def plain(value: Any) -> Any:
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    return value


def test_the_cel_keeps_the_node_engines_lists(admission: AdmissionPolicy) -> None:
    config = source_constants(ROOT / "dracni" / "policy" / "config.py")
    tenant = source_constants(ROOT / "dracni" / "policy" / "tenant.py")
    rules = source_constants(ROOT / "dracni" / "policy" / "rules.py")["RULES"]
    # The defaults: in the CEL (params absent) and in the shipped ConfigMap.
    assert set(policy_variable(admission, "pluginTypes").split(",")) == set(config["DEFAULT_PLUGIN_TYPES"])
    assert set(policy_variable(admission, "ipamTypes").split(",")) == set(config["DEFAULT_IPAM_TYPES"])
    assert policy_variable(admission, "full") is False and config["PROFILES"] == "profiles"
    assert shipped_types("pluginTypes") == set(config["DEFAULT_PLUGIN_TYPES"])
    assert shipped_types("ipamTypes") == set(config["DEFAULT_IPAM_TYPES"])
    assert shipped_configmap()["data"]["claimConfigs"] == config["PROFILES"]
    assert set(shipped_configmap()["data"]) == {
        config["KEY_CLAIM_CONFIGS"],
        config["KEY_PLUGIN_TYPES"],
        config["KEY_IPAM_TYPES"],
        config["KEY_ALLOWED_SYSCTLS"],
    }
    assert shipped_configmap()["data"]["allowedSysctls"] == "" and policy_variable(admission, "allowedSysctls") == ""
    # Kubernetes' safe sysctls, as patterns taking '/' or '.' between the parts of a name.
    patterns = policy_variable(admission, "safeSysctls")
    assert patterns == sorted("^" + name.replace(".", "[./]") + "$" for name in config["SAFE_SYSCTLS"])
    # The fixed lists.
    assert set(policy_variable(admission, "mainPlugins")) == set(config["MAIN_PLUGIN_TYPES"])
    assert config["SELF_TYPE"] == "dracni"
    forbidden = policy_variable(admission, "forbiddenKeys")
    assert {k for k, r in forbidden.items() if r == "nodePaths"} == set(tenant["NODE_PATH_KEYS"])
    assert {k for k, r in forbidden.items() if r == "runtimeKeys"} == set(tenant["RUNTIME_SET_KEYS"])
    assert set(policy_variable(admission, "claimRuntimeKeys")) == set(tenant["CLAIM_RUNTIME_KEYS"])
    assert set(policy_variable(admission, "profileRuntimeKeys")) == set(tenant["PROFILE_RUNTIME_KEYS"])
    assert tenant["PORT_MAPPINGS"] == "portMappings"
    # The rules' texts: every refusal of the CEL ends as the node's does.
    why = policy_variable(admission, "why")
    assert why == {name: rules[name] for name in why}
    rule_names = {rule for case in CASES if case.refused and not case.node_only for _, rule in [case.refused]}
    assert rule_names - {"schema"} <= set(why)


def test_the_example_templates_are_admitted(admission: AdmissionPolicy) -> None:
    examples = sorted((DEPLOY / "examples").glob("*.yaml"))
    templates = [d for p in examples for d in load_docs(p) if d["kind"] == "ResourceClaimTemplate"]
    assert templates
    for obj in templates:
        decision = admission.admit(obj, configmaps={(NAMESPACE, "dracni-policy"): shipped_configmap()})
        assert decision.allowed and decision.evaluated, f"{obj['metadata']['name']}: {decision.message}"
