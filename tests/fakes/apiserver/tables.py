"""``meta.k8s.io/v1`` Tables of custom resources, which ``kubectl get`` asks for with
``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` (server-side printing).

Upstream: ``staging/src/k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor/
tableconvertor.go`` ``New`` (a ``Name`` column, then one per ``additionalPrinterColumns`` entry;
a CRD version without any gets ``Age`` on ``.metadata.creationTimestamp``: apiextensions
``helpers.go`` ``serveDefaultColumnsIfEmpty``, its description shortened here) and ``convertor.ConvertToTable`` (one row per object; a cell is the
first result of the column's JSONPath, nil when there is none; ``cellForJSONValue`` types it:
``integer``, ``number``, ``boolean``, ``string`` (printed as client-go jsonpath prints), ``date``
as ``metatable.ConvertToHumanReadableDateType``, i.e. apimachinery ``duration.HumanDuration`` of
the age: ``5s``, ``3m20s``, ``4h``).  Each row carries the object as ``includeObject`` asks
(apiserver ``endpoints/handlers/response.go`` ``asTable``: ``Metadata`` by default, a
``PartialObjectMetadata``; ``Object``; ``None``).

JSONPath: the simple paths printer columns use (``.spec.pool``, ``.items[0].x``,
``.status.conditions[?(@.type=="Ready")].status``); anything else is an empty cell.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from .clock import parse_rfc3339
from .errors import bad_request
from .resources import Obj

_NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, although some "
    "resources may allow a client to request the generation of an appropriate name automatically. "
    "Name is primarily intended for creation idempotence and configuration definition. Cannot be "
    "updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_AGE = {
    "name": "Age",
    "type": "date",
    "jsonPath": ".metadata.creationTimestamp",
    "description": "CreationTimestamp is a timestamp representing the server time when this object was created.",
}


def wants_table(accept: str | None) -> bool:
    """Whether the first media type of ``Accept`` that the fake can answer is a v1 Table."""
    for media in (accept or "").split(","):
        params = dict(p.strip().partition("=")[::2] for p in media.split(";")[1:])
        if params.get("as") == "Table":
            if params.get("g") == "meta.k8s.io" and params.get("v") in ("v1", "v1beta1"):
                return True
            continue
        if media.split(";")[0].strip() in ("application/json", "*/*", ""):
            return False
    return False


def human_duration(seconds: float) -> str:
    """apimachinery ``util/duration.HumanDuration``."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


_STEP = re.compile(r"\.([A-Za-z0-9_-]+)|\[(\d+)\]|\[\?\(@\.([A-Za-z0-9_.-]+)\s*==\s*[\"']([^\"']*)[\"']\)\]")


def find(obj: Any, path: str) -> list[Any]:
    """The results of a simple JSONPath (``{...}`` braces optional)."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    values = [obj]
    pos = 0
    while pos < len(path):
        m = _STEP.match(path, pos)
        if m is None:
            return []
        pos = m.end()
        out: list[Any] = []
        for value in values:
            if m.group(1) is not None and isinstance(value, dict) and m.group(1) in value:
                out.append(value[m.group(1)])
            elif m.group(2) is not None and isinstance(value, list) and int(m.group(2)) < len(value):
                out.append(value[int(m.group(2))])
            elif m.group(3) is not None and isinstance(value, list):
                for item in value:
                    got = find(item, "." + m.group(3))
                    if got and str(got[0]) == m.group(4):
                        out.append(item)
        values = out
    return values


def _cell(column_type: str, value: Any) -> Any:
    """tableconvertor.go ``cellForJSONValue`` (``string`` as jsonpath prints it)."""
    if value is None:
        return None
    if column_type == "string":
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    if column_type == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if column_type == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if column_type == "boolean" and isinstance(value, bool):
        return value
    if column_type == "date" and isinstance(value, str):
        moment = parse_rfc3339(value)
        if moment is None:
            return "<invalid>"
        return human_duration((datetime.now(UTC) - moment).total_seconds())
    return None


def columns_of(printer_columns: list[Obj]) -> list[Obj]:
    """The CRD version's printer columns, ``Age`` when it declares none."""
    return printer_columns or [_AGE]


def _row_object(obj: Obj, include: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata") or {}}


def table(items: list[Obj], printer_columns: list[Obj], resource_version: str, query: dict[str, str]) -> Obj:
    """The Table of ``items`` (objects with apiVersion and kind)."""
    include = query.get("includeObject") or "Metadata"
    if include not in ("None", "Metadata", "Object"):
        raise bad_request(f'includeObject: Unsupported value: "{include}"')
    columns = columns_of(printer_columns)
    definitions = [
        {"name": "Name", "type": "string", "format": "name", "description": _NAME_DESCRIPTION, "priority": 0}
    ]
    for column in columns:
        definitions.append(
            {
                "name": column["name"],
                "type": column["type"],
                "format": column.get("format", ""),
                "description": column.get("description", ""),
                "priority": int(column.get("priority", 0)),
            }
        )
    rows = []
    for obj in items:
        cells: list[Any] = [(obj.get("metadata") or {}).get("name", "")]
        for column in columns:
            results = find(obj, column["jsonPath"])
            cells.append(_cell(column["type"], results[0]) if results else None)
        row: Obj = {"cells": cells}
        embedded = _row_object(obj, include)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    out: Obj = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": resource_version}}
    if query.get("noHeaders") not in ("true", "1"):
        out["columnDefinitions"] = definitions
    out["rows"] = rows
    return out
