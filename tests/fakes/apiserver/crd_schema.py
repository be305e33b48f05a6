"""A custom resource's structural schema at work: pruning and OpenAPI validation, as
kube-apiserver's apiextensions-apiserver runs them on every write of a custom resource.

- Pruning (``staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning/algorithm.go``
  ``Prune``/``prune``): at the resource root ``apiVersion``, ``kind`` and ``metadata`` are kept
  (``metadata`` is ObjectMeta, left alone here); inside an object, a field the schema's
  ``properties`` do not name is dropped unless ``x-kubernetes-preserve-unknown-fields: true``;
  ``additionalProperties`` schemas apply to every value; arrays prune each item against
  ``items``; ``x-kubernetes-embedded-resource`` objects keep ``apiVersion``/``kind``/``metadata``.
  Then nulls of non-nullable fields go (``schema/defaulting/prunenulls.go``
  ``PruneNonNullableNullsWithoutDefaults``).  ``prune`` returns the dropped paths too: the CRD
  handler reports them as unknown fields (``fieldValidation``: ``Warn`` headers, ``Strict`` 400).
- Validation: kube-openapi's ``pkg/validation/validate`` ``SchemaValidator`` (type, then string,
  format, number, slice, enum and object validators) with apiextensions' translation of its
  errors into ``field.Error``s (``pkg/apiserver/validation/validation.go``
  ``ValidateCustomResource``): ``Required value``, ``Unsupported value`` (enum),
  ``Too long`` (maxLength), ``Too many`` (maxItems), else ``Invalid value`` with kube-openapi's
  text (``<path> in body should match '<pattern>'``, ``... must be of type string: "integer"``,
  ``... should be at least 1 chars long``, ``... should be greater than or equal to 0``).

Order: upstream checks ``required`` first (in the schema's order), then the properties in Go map
order, which is random; the fake fixes one order, required names then property names each in
reverse alphabetical order (what the IPAMClaim tests were written against).

CEL ``x-kubernetes-validations``: only the immutability transition rule ``self == oldSelf`` is
evaluated (``transition_errors``: on an update, where the old object has the field too, as
``pkg/apiserver/schema/cel/validation.go`` ``Validator.Validate`` runs transition rules; a failure
is ``field.Invalid(path, <schema type>, message)``, the message ``failed rule: <rule>`` when the
rule has none, ``ruleMessageOrDefault``).  Other CEL rules are not run: a CRD's install may bring a
Python hook instead (crd_status.Hook).

Not modelled: ``x-kubernetes-list-type`` uniqueness, ``allOf``/``anyOf``/``oneOf``/``not``,
``min/maxProperties``, ``multipleOf``, defaults (``default`` is not applied), ratcheting.
"""

from __future__ import annotations

import ipaddress
import json
import re
import uuid
from typing import Any

from . import field as fe
from .clock import parse_rfc3339

Schema = dict[str, Any]

#: JSON Schema type names of Python's JSON values (bool before int: a bool is an int).
_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)
_ROOT_FIELDS = ("apiVersion", "kind", "metadata")


def json_type(value: Any) -> str:
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), "null")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# -- pruning ----------------------------------------------------------------------------------------
def prune(obj: Any, schema: Schema, root: bool = True) -> tuple[Any, list[str]]:
    """``obj`` pruned (a new value) and the paths of the unknown fields dropped."""
    dropped: list[str] = []
    value = _prune(obj, schema, "", root, dropped)
    return _prune_nulls(value, schema), dropped


def _prune(value: Any, schema: Schema, path: str, root: bool, dropped: list[str]) -> Any:
    if isinstance(value, list):
        items = schema.get("items") or {}
        return [_prune(v, items, f"{path}[{i}]", False, dropped) for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    keep_meta = root or schema.get("x-kubernetes-embedded-resource")
    properties = schema.get("properties")
    additional = schema.get("additionalProperties")
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
    out: dict[str, Any] = {}
    for key, item in value.items():
        here = _join(path, key)
        if keep_meta and key in _ROOT_FIELDS:
            out[key] = item
        elif properties is not None and key in properties:
            out[key] = _prune(item, properties[key], here, False, dropped)
        elif isinstance(additional, dict):
            out[key] = _prune(item, additional, here, False, dropped)
        elif preserve or additional is True:
            out[key] = item
        else:
            dropped.append(here)
    return out


def _prune_nulls(value: Any, schema: Schema) -> Any:
    """prunenulls.go: a null where the schema is not ``nullable`` (and has no default) goes."""
    if isinstance(value, list):
        items = schema.get("items") or {}
        return [_prune_nulls(v, items) for v in value]
    if not isinstance(value, dict):
        return value
    properties = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    out = {}
    for key, item in value.items():
        sub = properties.get(key) if key in properties else additional if isinstance(additional, dict) else None
        if item is None and sub is not None and not sub.get("nullable") and "default" not in sub:
            continue
        out[key] = _prune_nulls(item, sub) if sub is not None else item
    return out


# -- validation -------------------------------------------------------------------------------------
def _in_body(path: str, text: str) -> str:
    return f"{path} in body {text}"


def type_error(path: str, value: Any, expected: str) -> str:
    """kube-openapi ``errors.InvalidType``: ``spec.network: Invalid value: "integer":
    spec.network in body must be of type string: "integer"``."""
    got = json_type(value)
    return fe.invalid(path, got, _in_body(path, f"must be of type {expected}: {json.dumps(got)}"))


def _type_ok(value: Any, expected: str) -> bool:
    got = json_type(value)
    return got == expected or (expected == "number" and got == "integer")


def _format_ok(fmt: str, value: str) -> bool:
    """The formats kube-openapi's ``strfmt`` registry knows that are cheap to check; others pass."""
    try:
        if fmt == "date-time":
            return parse_rfc3339(value) is not None
        if fmt == "date":
            return re.fullmatch(r"\d{4}-\d{2}-\d{2}", value) is not None
        if fmt == "ipv4":
            ipaddress.IPv4Address(value)
        elif fmt == "ipv6":
            ipaddress.IPv6Address(value)
        elif fmt == "cidr":
            ipaddress.ip_network(value, strict=False)
            return "/" in value
        elif fmt == "uuid":
            uuid.UUID(value)
    except ValueError:
        return False
    return True


def _number(value: float) -> str:
    """Go's ``%v`` of a float64 bound: ``0``, ``1.5``."""
    return str(int(value)) if float(value).is_integer() else str(value)


def _string_errors(path: str, value: str, schema: Schema) -> list[str]:
    """kube-openapi ``stringValidator.Validate`` (maxLength, minLength, pattern: the first that
    fails is the only error), then ``formatValidator.Validate``."""
    errs: list[str] = []
    pattern = schema.get("pattern")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errs.append(fe.too_long(path, schema["maxLength"]))
    elif "minLength" in schema and len(value) < schema["minLength"]:
        errs.append(fe.invalid(path, value, _in_body(path, f"should be at least {schema['minLength']} chars long")))
    elif pattern is not None and not re.search(pattern, value):
        errs.append(fe.invalid(path, value, _in_body(path, f"should match '{pattern}'")))
    fmt = schema.get("format")
    if fmt and not _format_ok(fmt, value):
        errs.append(fe.invalid(path, value, _in_body(path, f"must be of type {fmt}: {json.dumps(value)}")))
    return errs


def _number_errors(path: str, value: float, schema: Schema) -> list[str]:
    """kube-openapi ``numberValidator.Validate``: maximum, then minimum (the first failing)."""
    errs: list[str] = []
    if "maximum" in schema:
        top, exclusive = schema["maximum"], schema.get("exclusiveMaximum")
        if value > top or (exclusive and value == top):
            rel = "less than" if exclusive else "less than or equal to"
            return [fe.invalid(path, value, _in_body(path, f"should be {rel} {_number(top)}"))]
    if "minimum" in schema:
        low, exclusive = schema["minimum"], schema.get("exclusiveMinimum")
        if value < low or (exclusive and value == low):
            rel = "greater than" if exclusive else "greater than or equal to"
            errs.append(fe.invalid(path, value, _in_body(path, f"should be {rel} {_number(low)}")))
    return errs


def validate(value: Any, schema: Schema, path: str = "") -> list[str]:
    """The field errors of ``value`` (already pruned) against ``schema``, at ``path``."""
    if value is None:
        if schema.get("nullable"):
            return []
        expected = schema.get("type")
        return [type_error(path, value, expected)] if expected else []
    expected = schema.get("type")
    if expected and not _type_ok(value, expected):
        return [type_error(path, value, expected)]
    errs: list[str] = []
    if isinstance(value, str):
        errs += _string_errors(path, value, schema)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        errs += _number_errors(path, value, schema)
    elif isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errs.append(fe.too_many(path, len(value), schema["maxItems"]))
        if "minItems" in schema and len(value) < schema["minItems"]:
            errs.append(fe.invalid(path, value, _in_body(path, f"should have at least {schema['minItems']} items")))
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                errs += validate(item, items, f"{path}[{index}]")
    if "enum" in schema and value not in schema["enum"]:
        errs.append(
            fe.not_supported(path, value, [json.dumps(v) if not isinstance(v, str) else v for v in schema["enum"]])
        )
    if isinstance(value, dict):
        errs += _object_errors(path, value, schema)
    return errs


def _object_errors(path: str, value: dict[str, Any], schema: Schema) -> list[str]:
    """kube-openapi ``objectValidator.Validate``: required names, then each property present."""
    errs = [
        fe.required(_join(path, name))
        for name in sorted(schema.get("required") or (), reverse=True)
        if name not in value
    ]
    properties = schema.get("properties") or {}
    for name in sorted(properties, reverse=True):
        if name in value and not (not path and name == "metadata"):
            errs += validate(value[name], properties[name], _join(path, name))
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict):
        for name in sorted(value, reverse=True):
            if name not in properties:
                errs += validate(value[name], additional, _join(path, name))
    return errs


def _is_immutability(rule: Any) -> bool:
    return isinstance(rule, dict) and "".join(str(rule.get("rule", "")).split()) == "self==oldSelf"


def transition_errors(new: Any, old: Any, schema: Schema, path: str = "") -> list[str]:
    """The ``self == oldSelf`` rules that ``new`` breaks against ``old`` (both present)."""
    if new is None or old is None:
        return []
    errs = [
        fe.invalid(path, schema.get("type", "object"), rule.get("message") or f"failed rule: {rule['rule'].strip()}")
        for rule in schema.get("x-kubernetes-validations") or ()
        if _is_immutability(rule) and new != old
    ]
    if isinstance(new, dict) and isinstance(old, dict):
        for name, sub in sorted((schema.get("properties") or {}).items(), reverse=True):
            if not path and name == "metadata":
                continue
            errs += transition_errors(new.get(name), old.get(name), sub, _join(path, name))
    return errs
