"""A small structured-merge-diff (``sigs.k8s.io/structured-merge-diff``) for ``status.devices`` of
a ResourceClaim, with the schema the real server generates from the Go types' markers.

Schema (k8s.io/api/resource/v1 ``AllocatedDeviceStatus``): ``status.devices`` is
``+listType=map`` keyed by ``driver, device, pool, shareID``; in an entry ``conditions`` is
``+listType=map`` keyed by ``type`` (``metav1.Condition`` fields are scalars), ``data`` is a
``runtime.RawExtension`` (an untyped atomic value: replaced whole), ``networkData`` is a struct
whose ``interfaceName`` and ``hardwareAddress`` are scalars and whose ``ips`` is
``+listType=atomic``.

What is modelled, with the upstream function for each rule:

- field sets (``typed/tofieldset.go`` ``toFieldSetWalker``): every scalar and atomic value is a
  leaf; a list-map element is a member itself (``"."``); a struct field is a member only when it
  is null or an empty object (``visitMapItems``);
- ``Compare`` (``typed/compare.go``): added, removed, and modified leaves;
- ``Merge`` (``typed/merge.go``): structs field by field, list-maps element by key in
  ``visitListItems``'s order, atomics replaced;
- ``Updater.Apply`` (``merge/update.go``): the applied object's field set becomes the manager's;
  ``prune`` removes what it applied last time and applies no more, unless another manager owns
  it or something under it (``addBackOwnedItems``) or it holds fields the manager never applied
  (``addBackDanglingItems``); then ``update``: other managers' fields that change
  (``Modified ∪ Added``) are conflicts, unless forced, when they lose them; removed fields leave
  every manager's set;
- ``Updater.Update`` (``merge/update.go``): an Update manager owns what it added or modified and
  loses what it removed; other managers lose what it modified or removed.

Paths are tuples of FieldsV1 path elements (``f:name``, ``k:{"type":"Ready"}``), rooted at the
object (``("f:status", "f:devices", 'k:{...}', "f:conditions", ...)``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Path = tuple[str, ...]
#: The "value" of a member that is not a leaf (a list-map element): never compared.
MEMBER = object()


@dataclass(frozen=True)
class Atomic:
    """A scalar or an atomic list/object."""


@dataclass(frozen=True)
class Struct:
    fields: dict[str, Any]


@dataclass(frozen=True)
class ListMap:
    keys: tuple[str, ...]
    element: Struct


@dataclass
class Conflicts(Exception):
    """``merge.Conflicts``: (manager, path) pairs."""

    items: list[tuple[Any, Path]] = field(default_factory=list)


ATOMIC = Atomic()
CONDITION = Struct(
    dict.fromkeys(("type", "status", "observedGeneration", "lastTransitionTime", "reason", "message"), ATOMIC)
)
NETWORK_DATA = Struct({"interfaceName": ATOMIC, "ips": ATOMIC, "hardwareAddress": ATOMIC})
DEVICE_STATUS = Struct(
    {
        "driver": ATOMIC,
        "device": ATOMIC,
        "pool": ATOMIC,
        "shareID": ATOMIC,
        "conditions": ListMap(("type",), CONDITION),
        "data": ATOMIC,
        "networkData": NETWORK_DATA,
    }
)
DEVICE_KEYS = ("driver", "device", "pool", "shareID")
#: The part of a ResourceClaim that status writes go through here.
CLAIM_STATUS = Struct({"status": Struct({"devices": ListMap(DEVICE_KEYS, DEVICE_STATUS)})})


# -- paths -------------------------------------------------------------------------------------------
def key_element(item: dict[str, Any], keys: Iterable[str]) -> str:
    """A list-map element's FieldsV1 path element: ``k:`` and its key fields as JSON, by name."""
    present = {k: item[k] for k in keys if item.get(k) is not None}
    return "k:" + json.dumps(present, separators=(",", ":"), sort_keys=True)


def path_text(path: Path) -> str:
    """``fieldpath.Path.String()``: ``.status.devices[device="d",driver="x",pool="p"].conditions``."""
    out = []
    for element in path:
        if element.startswith("f:"):
            out.append("." + element[2:])
        elif element.startswith("k:"):
            fields = json.loads(element[2:])
            out.append("[" + ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(fields.items())) + "]")
        else:
            out.append(element)
    return "".join(out)


# -- ToFieldSet ---------------------------------------------------------------------------------------
def field_set(value: Any, schema: Any, prefix: Path = ()) -> dict[Path, Any]:
    """``TypedValue.ToFieldSet`` with each leaf's value (``MEMBER`` for list-map elements)."""
    out: dict[Path, Any] = {}
    _walk(value, schema, prefix, out)
    return out


def _walk(value: Any, schema: Any, path: Path, out: dict[Path, Any]) -> None:
    if isinstance(schema, Struct):
        if not isinstance(value, dict):
            out[path] = value
            return
        for name, child in value.items():
            sub = path + (f"f:{name}",)
            child_schema = schema.fields.get(name, ATOMIC)
            if child is None or (isinstance(child, dict) and not child and not isinstance(child_schema, Atomic)):
                out[sub] = child
            else:
                _walk(child, child_schema, sub, out)
    elif isinstance(schema, ListMap):
        if not isinstance(value, list):
            out[path] = value
            return
        for item in value:
            if not isinstance(item, dict):
                continue
            sub = path + (key_element(item, schema.keys),)
            out[sub] = MEMBER
            _walk(item, schema.element, sub, out)
    else:
        out[path] = value


def compare(old: dict[Path, Any], new: dict[Path, Any]) -> tuple[set[Path], set[Path], set[Path]]:
    """``TypedValue.Compare``: (added, removed, modified)."""
    added = set(new) - set(old)
    removed = set(old) - set(new)
    modified = {
        p
        for p in set(old) & set(new)
        if old[p] is not MEMBER and json.dumps(old[p], sort_keys=True) != json.dumps(new[p], sort_keys=True)
    }
    return added, removed, modified


# -- Merge ----------------------------------------------------------------------------------------------
def merge(live: Any, config: Any, schema: Any) -> Any:
    """``TypedValue.Merge``: ``config`` over ``live``."""
    if isinstance(schema, Struct) and isinstance(live, dict) and isinstance(config, dict):
        out = copy.deepcopy(live)
        for name, value in config.items():
            child = schema.fields.get(name, ATOMIC)
            out[name] = merge(live[name], value, child) if name in live else copy.deepcopy(value)
        return out
    if isinstance(schema, ListMap) and isinstance(live, list) and isinstance(config, list):
        return _merge_list(live, config, schema)
    return copy.deepcopy(config)


def _merge_list(live: list[Any], config: list[Any], schema: ListMap) -> list[Any]:
    """``mergingWalker.visitListItems``: live-only items keep their place, config items come in
    config order, shared items in config order among themselves."""
    lhs = {key_element(i, schema.keys): i for i in live if isinstance(i, dict)}
    rhs = {key_element(i, schema.keys): i for i in config if isinstance(i, dict)}
    lhs_order, rhs_order = list(lhs), list(rhs)
    shared = [pe for pe in rhs_order if pe in lhs]
    next_shared = shared.pop(0) if shared else None
    out: list[Any] = []
    li = ri = 0
    while li < len(lhs_order) or ri < len(rhs_order):
        if li < len(lhs_order) and ri < len(rhs_order):
            pe = lhs_order[li]
            if pe == rhs_order[ri]:
                out.append(merge(lhs[pe], rhs[pe], schema.element))
                li, ri = li + 1, ri + 1
                next_shared = shared.pop(0) if shared else None
                continue
            if pe in rhs and next_shared is not None and next_shared != pe:
                li += 1  # a shared item, merged when its turn comes on the config side
                continue
        if li < len(lhs_order):
            pe = lhs_order[li]
            if pe not in rhs:
                out.append(copy.deepcopy(lhs[pe]))
                li += 1
                continue
        if ri < len(rhs_order):
            pe = rhs_order[ri]
            out.append(merge(lhs[pe], rhs[pe], schema.element) if pe in lhs else copy.deepcopy(rhs[pe]))
            ri += 1
            if next_shared is not None and next_shared == pe:
                next_shared = shared.pop(0) if shared else None
    return out


# -- prune ----------------------------------------------------------------------------------------------
def _named_members(paths: set[Path]) -> set[Path]:
    """``Set.EnsureNamedFieldsAreMembers``: struct fields on the way to a path are members too
    (the schema here has no maps, whose keys would not be)."""
    out = set(paths)
    for p in paths:
        for n in range(1, len(p)):
            if p[n - 1].startswith("f:"):
                out.add(p[:n])
    return out


def prune(value: Any, schema: Any, removable: set[Path], keep: set[Path], path: Path = ()) -> Any:
    """Remove from ``value`` each path of ``removable`` that neither is nor contains a path of
    ``keep`` (owned by someone) nor holds a field outside ``removable`` (dangling); key fields of a
    kept list-map element stay.  Returns the pruned value (None: remove it)."""

    def kept_below(p: Path) -> bool:
        return any(k[: len(p)] == p for k in keep)

    if isinstance(schema, Struct) and isinstance(value, dict):
        out = {}
        for name, child in value.items():
            sub = path + (f"f:{name}",)
            child_schema = schema.fields.get(name, ATOMIC)
            if isinstance(child_schema, Atomic) or not isinstance(child, (dict, list)) or not child:
                if sub in removable and not kept_below(sub):
                    continue
                out[name] = child
                continue
            pruned = prune(child, child_schema, removable, keep, sub)
            if pruned in (None, {}, []) and sub in removable and not kept_below(sub):
                continue
            out[name] = pruned if pruned not in (None,) else child
        return out
    if isinstance(schema, ListMap) and isinstance(value, list):
        items = []
        for item in value:
            if not isinstance(item, dict):
                items.append(item)
                continue
            sub = path + (key_element(item, schema.keys),)
            pruned = prune(item, schema.element, removable, keep, sub)
            leftover = {k: v for k, v in pruned.items() if k not in schema.keys}
            if sub in removable and not kept_below(sub) and not leftover:
                continue
            for k in schema.keys:  # an element keeps its key
                if k in item:
                    pruned[k] = item[k]
            items.append(pruned)
        return items
    return value


# -- Updater ----------------------------------------------------------------------------------------------
def _update(
    live_fs: dict[Path, Any], new_fs: dict[Path, Any], managers: dict[Any, set[Path]], me: Any, force: bool
) -> tuple[set[Path], set[Path], set[Path]]:
    """``Updater.update``: conflicts with other managers (raised unless ``force``), which lose the
    conflicting and the removed fields."""
    added, removed, modified = compare(live_fs, new_fs)
    changed = added | modified
    conflicts = [(other, p) for other, owned in managers.items() if other != me for p in sorted(owned & changed)]
    if conflicts and not force:
        raise Conflicts(conflicts)
    for other in list(managers):
        if other == me:
            continue
        managers[other] -= changed | removed
        if not managers[other]:
            del managers[other]
    return added, removed, modified


def apply(live: Any, config: Any, schema: Any, managers: dict[Any, set[Path]], me: Any, force: bool) -> Any:
    """``Updater.Apply``: the new object; ``managers`` updated in place (``Conflicts`` unless ``force``)."""
    last = managers.get(me, set())
    applied = set(field_set(config, schema))
    merged = merge(live, config, schema)
    managers[me] = applied
    if last:
        owned = set().union(*managers.values())
        removable = _named_members(last) - owned
        merged = prune(merged, schema, removable, owned)
    _update(field_set(live, schema), field_set(merged, schema), managers, me, force)
    if not managers.get(me):
        managers.pop(me, None)
    return merged


def update(live: Any, new: Any, schema: Any, managers: dict[Any, set[Path]], me: Any) -> None:
    """``Updater.Update``: ownership after a non-apply write of ``new`` over ``live``."""
    added, removed, modified = _update(field_set(live, schema), field_set(new, schema), managers, me, True)
    owned = (managers.get(me, set()) - removed) | modified | added
    if owned:
        managers[me] = owned
    else:
        managers.pop(me, None)


def fields_v1(paths: Iterable[Path]) -> dict[str, Any]:
    """A field set as FieldsV1 JSON: a member with children gets ``"."``."""
    root: dict[str, Any] = {}
    for path in sorted(paths):
        node = root
        for element in path:
            node = node.setdefault(element, {})
        if path and path[-1].startswith("k:"):
            node["."] = {}
    return root
