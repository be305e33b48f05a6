"""``events.k8s.io/v1`` Events: create, get, list, watch, patch (strategic merge), delete.

Validation follows kube-apiserver's ``pkg/apis/core/validation/events.go``:
``ValidateEventCreate`` (the strict rules of events.k8s.io/v1 on top of
``legacyValidateEvent``), ``ValidateEventUpdate`` (every identifying field immutable, a changed
series validated again) and ``validateV1EventSeries``.  The events.k8s.io/v1 field names map to
the internal ``core.Event`` as in ``pkg/apis/events/v1/conversion.go``: ``regarding`` is
``involvedObject``, ``note`` is ``message`` (the error paths use the v1 names here).  Test
helper: ``list_events``.
"""

from __future__ import annotations

import re
from typing import Any

from . import field as fe
from .resources import RESOURCES, Kind, Obj
from .store import Store

EVENTS = RESOURCES["events"]

#: pkg/apis/core/validation/events.go constants.
REPORTING_INSTANCE_MAX = 128
ACTION_MAX = 128
REASON_MAX = 128
NOTE_MAX = 1024
#: apimachinery validation.IsQualifiedName: an optional DNS subdomain prefix and a name part.
_QUALIFIED_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)

#: The fields ``ValidateEventUpdate`` keeps immutable (v1 names).
_IMMUTABLE = (
    "regarding", "reason", "note", "deprecatedSource", "deprecatedFirstTimestamp",
    "deprecatedLastTimestamp", "deprecatedCount", "type", "eventTime", "action", "related",
    "reportingController", "reportingInstance",
)  # fmt: skip


def _series_errors(obj: Obj) -> list[str]:
    """``validateV1EventSeries``."""
    series = obj.get("series")
    if series is None:
        return []
    errs = []
    if not isinstance(series, dict) or not isinstance(series.get("count"), int) or series["count"] < 2:
        errs.append(fe.invalid("series.count", "", "should be at least 2"))
    if not isinstance(series, dict) or not series.get("lastObservedTime"):
        errs.append(fe.required("series.lastObservedTime"))
    return errs


def _create_errors(obj: Obj) -> list[str]:
    """``ValidateEventCreate`` for events.k8s.io/v1 (``legacyValidateEvent`` with an eventTime,
    then the strict rules)."""
    errs: list[str] = []
    namespace = (obj.get("metadata") or {}).get("namespace") or ""
    regarding = obj.get("regarding") or {}
    if not regarding.get("namespace") and namespace not in ("default", "kube-system"):
        errs.append(
            fe.invalid("regarding.namespace", regarding.get("namespace") or "", "does not match event.namespace")
        )
    controller = obj.get("reportingController") or ""
    if not controller:
        errs.append(fe.required("reportingController"))
    elif not _QUALIFIED_NAME.match(controller) or len(controller.split("/")[-1]) > 63:
        errs.append(fe.invalid("reportingController", controller, "must be a qualified name"))
    for path, limit in (("reportingInstance", REPORTING_INSTANCE_MAX), ("action", ACTION_MAX), ("reason", REASON_MAX)):
        value = obj.get(path) or ""
        if not value:
            errs.append(fe.required(path))
        elif len(value) > limit:
            errs.append(fe.invalid(path, "", f"can have at most {limit} characters"))
    if len((obj.get("note") or "").encode("utf-8")) > NOTE_MAX:  # Go's len(): bytes
        errs.append(fe.invalid("note", "", f"can have at most {NOTE_MAX} characters"))
    errs += _series_errors(obj)
    if not obj.get("eventTime"):
        errs.append(fe.required("eventTime"))
    if obj.get("type") not in ("Normal", "Warning"):
        errs.append(fe.invalid("type", "", f"has invalid value: {obj.get('type') or ''}"))
    for legacy in ("deprecatedFirstTimestamp", "deprecatedLastTimestamp", "deprecatedCount", "deprecatedSource"):
        if obj.get(legacy):
            errs.append(fe.invalid(legacy, "", "needs to be unset"))
    return errs


def _prepare_create(obj: Obj) -> tuple[Obj, list[str]]:
    return obj, _create_errors(obj)


def _prepare_update(new: Obj, current: Obj) -> tuple[Obj, list[str]]:
    """``ValidateEventUpdate``: identifying fields immutable; a changed series validated."""
    errs = [f"{path}: Invalid value: field is immutable" for path in _IMMUTABLE if new.get(path) != current.get(path)]
    if new.get("series") != current.get("series"):
        errs += _series_errors(new)
    return new, errs


KIND = Kind(EVENTS, _prepare_create, _prepare_update)


class EventHelpers:
    """``FakeApiServer``'s Event helpers (direct, not over HTTP)."""

    _store: Store

    def list_events(self, namespace: str | None = None) -> list[Any]:
        return self._store.copies("events", namespace)
