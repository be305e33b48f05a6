"""The API server's ValidatingAdmissionPolicy plugin, modelled on cel-python (``celpy``).

kube-apiserver runs each ValidatingAdmissionPolicy with its binding on every matching write,
after the object's own validation (k8s.io/apiserver/pkg/registry/generic/registry/store.go:
``Create`` calls ``rest.BeforeCreate``, then ``createValidation``).  This model does what
k8s.io/apiserver/pkg/admission/plugin/policy/validating does, in this order:

- matching (policy/matching/matching.go ``Matcher.Matches``): the request's group, version,
  operation and resource against ``matchConstraints.resourceRules``;
- params (policy/generic/policy_dispatcher.go ``CollectParams``): the binding's ``paramRef``
  resolved to ``params``; missing + ``parameterNotFoundAction: Allow``: the policy is not run;
- ``matchConditions`` first (matchconditions/matcher.go ``Match``): one false skips the policy,
  an error denies under failurePolicy Fail;
- variables evaluated lazily by name, exposed as ``variables.<name>`` (plugin/cel/composition.go
  ``CompositedCompiler``, ``lazyVariable``);
- every validation evaluated (validating/validator.go ``Validate``); a false one denies with its
  ``messageExpression`` (a string without line breaks, at most 5 KiB), else its ``message``,
  else ``failed expression: ...``, with its ``reason`` (default ``Invalid``); an evaluation
  error denies under failurePolicy Fail;
- the first denial answered (validating/dispatcher.go ``Dispatch``): ``admission.NewForbidden``
  with the message ``ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied
  request: <message>``, then its reason and code replaced (``reasonToCode``: Forbidden 403,
  Unauthorized 401, RequestEntityTooLarge 413, anything else 422).

The API server's CEL environment (k8s.io/apiserver/pkg/cel/environment/base.go) adds libraries to
standard CEL; the one function of them a policy here uses is modelled: the strings extension's
``<string>.replace(old, new[, n])`` (github.com/google/cel-go ext/strings.go).

cel-python 0.5.0 returns a plain Python ``str``/``list`` from ``+``, without CEL's methods (a
concatenated string then has no ``contains``); ``_plus`` keeps CEL's types.

Only the FakeApiServer constructed with ``admission=`` imports this module (celpy is a test
dependency, not one of the fake's core).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import celpy
from celpy import celtypes
from celpy.evaluation import CELEvalError

MAX_MESSAGE_BYTES = 5 * 1024  # k8s.io/apiserver/pkg/apis/cel: MaxEvaluatedMessageExpressionSizeBytes

#: kind -> resource (plural) of the objects the policies here are run on.
PLURALS = {
    "ResourceClaim": "resourceclaims",
    "ResourceClaimTemplate": "resourceclaimtemplates",
    "AddressReservation": "addressreservations",
    "Pod": "pods",
}


def _plus(left: Any, right: Any) -> Any:
    if isinstance(left, str) and isinstance(right, str):
        return celtypes.StringType(str.__add__(left, right))
    if isinstance(left, list) and isinstance(right, list):
        return celtypes.ListType(list.__add__(left, right))
    return operator.add(left, right)


def _replace(text: Any, old: Any, new: Any, count: Any = -1) -> Any:
    """cel-go ext/strings.go ``replace``: every occurrence (or the first ``count``; negative: all)."""
    if not all(isinstance(v, str) for v in (text, old, new)):
        raise CELEvalError("no such overload: replace")
    return celtypes.StringType(str.replace(text, old, new, int(count)))


class EvalError(Exception):
    """A CEL evaluation error (the API server's failurePolicy decides what it means)."""


@dataclass
class Decision:
    allowed: bool
    message: str = ""
    reason: str = ""
    evaluated: bool = True  # False: the policy did not run (no match, or no params with Allow)
    errors: list[str] = field(default_factory=list)  # evaluation errors among the denials

    @property
    def code(self) -> int:
        """The HTTP status of a denial (validating/dispatcher.go ``reasonToCode``)."""
        return {"Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413}.get(self.reason, 422)


class AdmissionPolicy:
    """One ValidatingAdmissionPolicy and its binding, compiled with cel-python."""

    def __init__(self, policy: dict[str, Any], binding: dict[str, Any]) -> None:
        self.policy, self.binding = policy, binding
        spec = policy["spec"]
        assert binding["spec"]["policyName"] == policy["metadata"]["name"]
        self.env = celpy.Environment()
        self.match_conditions = [(m["name"], self.compile(m["expression"])) for m in spec.get("matchConditions", [])]
        self.variables = {v["name"]: self.compile(v["expression"]) for v in spec.get("variables", [])}
        self.validations = [
            (
                self.compile(v["expression"]),
                self.compile(v["messageExpression"]) if v.get("messageExpression") else None,
                v,
            )
            for v in spec["validations"]
        ]

    def compile(self, expression: str) -> Any:
        return self.env.program(self.env.compile(expression), functions={"_+_": _plus, "replace": _replace})

    # -- matching (policy/matching) and params (generic.CollectParams) --
    def matches(self, request: dict[str, Any]) -> bool:
        for rule in self.policy["spec"]["matchConstraints"]["resourceRules"]:
            if (
                request["resource"]["group"] in rule["apiGroups"]
                and ("*" in rule["apiVersions"] or request["resource"]["version"] in rule["apiVersions"])
                and request["operation"] in rule["operations"]
                and request["resource"]["resource"] in rule["resources"]
            ):
                return True
        return False

    def params(self, configmaps: dict[tuple[str, str], dict[str, Any]]) -> tuple[bool, dict[str, Any] | None]:
        """(found, params): a binding without paramRef runs with null params."""
        ref = self.binding["spec"].get("paramRef")
        if ref is None:
            return True, None
        found = configmaps.get((ref["namespace"], ref["name"]))
        if found is None:
            return False, None
        return True, found

    # -- evaluation (validating/validator.go, cel/composition.go) --
    def admit(
        self,
        obj: dict[str, Any] | None,
        *,
        operation: str = "CREATE",
        old: dict[str, Any] | None = None,
        configmaps: dict[tuple[str, str], dict[str, Any]] | None = None,
        request: dict[str, Any] | None = None,
    ) -> Decision:
        """The decision on a write: ``obj`` the new object (None for DELETE), ``old`` the stored
        one (UPDATE, DELETE); ``request`` (default: ``admission_request``) the request variable."""
        if request is None:
            subject = obj if obj is not None else old
            assert subject is not None, "a request needs an object or an old object"
            request = admission_request(subject, operation)
        if not self.matches(request):
            return Decision(True, evaluated=False)
        found, params = self.params(configmaps or {})
        if not found:
            action = self.binding["spec"]["paramRef"].get("parameterNotFoundAction", "Deny")
            if action == "Allow":  # no params: the binding is not evaluated at all
                return Decision(True, evaluated=False)
            return self.deny("no params found for policy binding with `Deny` parameterNotFoundAction", error=True)
        activation = self.activation(obj, old, params, request)
        falsy, errors = False, []
        for name, program in self.match_conditions:
            try:
                if not self.run(program, activation):
                    falsy = True
            except EvalError as exc:
                errors.append(f"matchCondition {name}: {exc}")
        if falsy:
            return Decision(True, evaluated=False)
        if errors:
            return self.deny(errors[0], error=True)
        results = []
        for program, _, _ in self.validations:
            try:
                results.append(bool(self.run(program, activation)))
            except EvalError as exc:
                results.append(exc)
        messages = self.activation(obj, old, params, request)  # messages: a new variable context
        for result, (_, message_program, validation) in zip(results, self.validations, strict=True):
            if isinstance(result, EvalError):
                return self.deny(str(result), error=True)
            if result:
                continue
            message = ""
            if message_program is not None:
                try:
                    value = self.run(message_program, messages)
                except EvalError:
                    value = None
                if isinstance(value, str):
                    message = value.strip()
                    if len(message.encode()) > MAX_MESSAGE_BYTES or "\n" in message:
                        message = ""
            if not message:
                message = (validation.get("message") or "").strip()
            if not message:
                message = f"failed expression: {validation['expression'].strip()}"
            return self.deny(message, reason=validation.get("reason", "Invalid"))
        return Decision(True)

    def activation(
        self, obj: dict[str, Any] | None, old: dict[str, Any] | None, params: Any, request: dict[str, Any]
    ) -> dict[str, Any]:
        activation: dict[str, Any] = {
            "object": celpy.json_to_cel(obj),
            "oldObject": celpy.json_to_cel(old),
            "params": celpy.json_to_cel(params),
            "request": celpy.json_to_cel(request),
        }
        activation["variables"] = LazyVariables(self, activation)
        return activation

    def run(self, program: Any, activation: dict[str, Any]) -> Any:
        try:
            value = program.evaluate(activation)
        except CELEvalError as exc:
            raise EvalError(str(exc)) from None
        if isinstance(value, CELEvalError):
            raise EvalError(str(value))
        return value

    def deny(self, message: str, *, reason: str = "", error: bool = False) -> Decision:
        name, binding = self.policy["metadata"]["name"], self.binding["metadata"]["name"]
        text = f"ValidatingAdmissionPolicy '{name}' with binding '{binding}' denied request: {message}"
        return Decision(False, text, reason or "Invalid", errors=[message] if error else [])


class LazyVariables(celtypes.MapType):
    """``variables``: each one evaluated on first use (by name), then kept for the rest of the pass."""

    def __init__(self, policy: AdmissionPolicy, activation: dict[str, Any]) -> None:
        super().__init__()
        self._policy, self._activation = policy, activation

    def __missing__(self, name: str) -> Any:
        program = self._policy.variables[name]  # KeyError: no such variable
        try:
            value = program.evaluate(self._activation)
        except CELEvalError as exc:
            value = exc
        dict.__setitem__(self, name, value)
        return value


def admission_request(
    obj: dict[str, Any],
    operation: str,
    *,
    plural: str | None = None,
    user: str = "tenant",
    extra: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """The ``request`` variable (validating/validator.go ``Validate`` via
    cel.CreateAdmissionRequest) for a write of ``obj`` (the old object for DELETE) by ``user``
    whose token carries ``extra``.  ``extra`` is omitted when empty (``omitempty``)."""
    group, _, version = obj["apiVersion"].rpartition("/")
    resource = plural or PLURALS[obj["kind"]]
    meta = obj.get("metadata", {})
    user_info: dict[str, Any] = {"username": user}
    if extra:
        user_info["extra"] = {k: list(v) for k, v in extra.items()}
    return {
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": obj["kind"]},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": meta.get("name", ""),
        "namespace": meta.get("namespace", ""),
        "operation": operation,
        "userInfo": user_info,
        "dryRun": False,
    }


# -- the test API server's admission (FakeApiServer(admission=[...])) ------------------------------


class AdmissionChain:
    """The ValidatingAdmissionPolicies of ``FakeApiServer(admission=[policy, binding, ...])``,
    each paired with the bindings naming it (``spec.policyName``; a policy without a binding does
    nothing, as upstream).  crud.py calls it on every create, update and delete made over HTTP,
    after the object's own validation and before it is stored (registry/generic/registry/store.go
    ``Create``/``Update``/``Delete`` call ``createValidation``/``updateValidation``/
    ``deleteValidation`` there), with the caller of the request (name and token ``extra``).
    Params (``paramRef``) are not served: a binding with one finds none."""

    def __init__(self, documents: list[dict[str, Any]]) -> None:
        policies = {d["metadata"]["name"]: d for d in documents if d["kind"] == "ValidatingAdmissionPolicy"}
        bindings = [d for d in documents if d["kind"] == "ValidatingAdmissionPolicyBinding"]
        unknown = [
            d["kind"]
            for d in documents
            if d["kind"] not in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
        ]
        if unknown:
            raise ValueError(f"admission= takes ValidatingAdmissionPolicies and bindings, not {unknown}")
        self.policies = [
            AdmissionPolicy(policies[b["spec"]["policyName"]], b)
            for b in bindings
            if b["spec"]["policyName"] in policies
        ]

    def __call__(
        self,
        operation: str,
        resource: Any,
        name: str,
        new: dict[str, Any] | None,
        old: dict[str, Any] | None,
        user: str,
        extra: dict[str, list[str]],
    ) -> None:
        """Raise the first denial as the API server answers it (``ApiStatusError``)."""
        from .errors import ApiStatusError

        subject = new if new is not None else old
        assert subject is not None
        request = admission_request(subject, operation, plural=resource.plural, user=user, extra=extra)
        request["name"] = name
        for policy in self.policies:
            if "Deny" not in policy.binding["spec"].get("validationActions", ["Deny"]):
                continue  # Warn and Audit only report (dispatcher.go); not modelled further
            decision = policy.admit(new, operation=operation, old=old, request=request)
            if decision.allowed:
                continue
            # validating/dispatcher.go Dispatch: admission.NewForbidden (admission/errors.go) is
            # apierrors.NewForbidden(resource, name, err): '<resource>.<group> "<name>" is
            # forbidden: <message>', details {name, group, kind: the resource}; then the
            # validation's reason and reasonToCode's code, and the message added as a cause.
            qualified = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
            text = (
                f'{qualified} "{name}" is forbidden: {decision.message}'
                if name
                else f"{qualified} is forbidden: {decision.message}"
            )
            details: dict[str, Any] = {"name": name} if name else {}
            if resource.group:
                details["group"] = resource.group
            details["kind"] = resource.plural
            details["causes"] = [{"message": decision.message}]
            raise ApiStatusError(decision.code, decision.reason, text, details)
