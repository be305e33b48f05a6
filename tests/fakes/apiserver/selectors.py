"""List and watch filters: label selectors (``=``, ``!=``, ``in``, ``notin``, exists), field
selectors (only the field labels each resource supports, else 400) and the namespace."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .errors import bad_request
from .resources import Resource

LabelRequirement = tuple[str, str, Any]  # (key, operator, value or set of values)
FieldRequirement = tuple[str, str, str]  # (label, "=" or "!=", value)


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


_LABEL_KEY = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def parse_label_selector(text: str) -> list[LabelRequirement]:
    requirements: list[LabelRequirement] = []
    for term in _split_top_level(text or ""):
        m = re.fullmatch(r"(\S+)\s+(in|notin)\s+\((.*)\)", term)
        if m:
            values = {v.strip() for v in m.group(3).split(",") if v.strip()}
            requirements.append((m.group(1), m.group(2), values))
            continue
        m = re.fullmatch(r"(\S+?)\s*(==|!=|=)\s*(\S*)", term)
        if m:
            op = {"==": "=", "=": "=", "!=": "!="}[m.group(2)]
            requirements.append((m.group(1), op, m.group(3)))
            continue
        if term.startswith("!") and _LABEL_KEY.match(term[1:].strip()):
            requirements.append((term[1:].strip(), "!exists", None))
            continue
        if _LABEL_KEY.match(term):
            requirements.append((term, "exists", None))
            continue
        raise bad_request(f"unable to parse requirement: found '{term}', expected: in, notin, =, ==, !=, gt, lt")
    return requirements


def labels_match(labels: dict[str, str], requirements: list[LabelRequirement]) -> bool:
    for key, op, value in requirements:
        present = key in labels
        actual = labels.get(key)
        if op == "=" and not (present and actual == value):
            return False
        if op == "!=" and present and actual == value:
            return False
        if op == "in" and not (present and actual in value):
            return False
        if op == "notin" and present and actual in value:
            return False
        if op == "exists" and not present:
            return False
        if op == "!exists" and present:
            return False
    return True


def parse_field_selector(res: Resource, text: str) -> list[FieldRequirement]:
    requirements = []
    for term in _split_top_level(text or ""):
        m = re.fullmatch(r"([^=!]+?)\s*(==|!=|=)\s*(.*)", term)
        if not m:
            raise bad_request(f"invalid field selector: '{term}'")
        key, op, value = m.group(1).strip(), m.group(2), m.group(3).strip()
        if key not in res.field_labels:
            raise bad_request(f"field label not supported: {key}")
        requirements.append((key, "!=" if op == "!=" else "=", value))
    return requirements


def field_value(obj: dict[str, Any], label: str) -> str:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    if label == "metadata.name":
        return meta.get("name") or ""
    if label == "metadata.namespace":
        return meta.get("namespace") or ""
    if label == "spec.nodeName":
        return spec.get("nodeName") or ""
    if label == "spec.driver":
        return spec.get("driver") or ""
    if label == "spec.unschedulable":
        return "true" if spec.get("unschedulable") else "false"
    if label == "status.phase":
        return (obj.get("status") or {}).get("phase") or ""
    return ""


def fields_match(obj: dict[str, Any], requirements: list[FieldRequirement]) -> bool:
    for label, op, value in requirements:
        actual = field_value(obj, label)
        if (op == "=") != (actual == value):
            return False
    return True


@dataclass
class Filter:
    """What one list, watch or deletecollection selects."""

    res: Resource
    namespace: str | None
    labels: list[LabelRequirement]
    fields: list[FieldRequirement]

    @classmethod
    def from_query(cls, res: Resource, namespace: str | None, query: dict[str, str]) -> Filter:
        # Listing in a namespace that does not exist is an empty list, as on the real server.
        return cls(
            res,
            namespace,
            parse_label_selector(query.get("labelSelector", "")),
            parse_field_selector(res, query.get("fieldSelector", "")),
        )

    def matches(self, obj: dict[str, Any] | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return labels_match(meta.get("labels") or {}, self.labels) and fields_match(obj, self.fields)
