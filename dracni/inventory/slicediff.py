"""When two ResourceSlices publish the same thing (``slices_equal``), for the slice publisher's
"is there anything to write" question.  Pure: no API calls.

The API server answers in its own form: the Python client fills absent fields with None, old
versions nest a device's fields under ``basic`` (v1beta1), and the writer bumps
``pool.generation`` on every update.  None of that is a difference.
"""

from __future__ import annotations

from typing import Any

__all__ = ["slice_content", "slices_equal"]


def _prune(value: Any) -> Any:
    """Drop None values and empty maps/lists, recursively (the API omits them; the Python client
    returns them as None)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            v = _prune(v)
            if v is None or v == {} or v == []:
                continue
            out[k] = v
        return out
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def _normal_device(device: dict[str, Any]) -> dict[str, Any]:
    device = dict(device)
    basic = device.pop("basic", None)  # v1beta1 form
    if isinstance(basic, dict):
        device.update(basic)
    pruned: dict[str, Any] = _prune(device)
    return pruned


def _normal_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec", obj) if isinstance(obj, dict) else {}
    spec = dict(spec or {})
    pool = dict(spec.pop("pool", None) or {})
    pool.pop("generation", None)
    devices = [_normal_device(d) for d in (spec.pop("devices", None) or [])]
    devices.sort(key=lambda d: str(d.get("name", "")))
    out: dict[str, Any] = _prune(spec)
    out["pool"] = _prune(pool)
    out["devices"] = devices
    return out


def slice_content(obj: dict[str, Any]) -> dict[str, Any]:
    """What ``slices_equal`` compares: the spec without ``pool.generation``, devices sorted by
    name, empty values dropped (for remembering what was sent and what the server kept)."""
    return _normal_spec(obj)


def slices_equal(desired: dict[str, Any], existing: dict[str, Any]) -> bool:
    """Whether ``existing`` (a ResourceSlice object or its spec, as read back from the API, v1 or
    v1beta1 device form) already publishes what ``desired`` says.

    Compares the spec: driver, nodeName (and any other node selection field), pool name and
    resourceSliceCount, and the devices as a set keyed by name (attributes compared exactly).
    ``pool.generation`` is ignored (the writer bumps it whenever it updates), as are metadata,
    None values and empty maps/lists.
    """
    return _normal_spec(desired) == _normal_spec(existing)
