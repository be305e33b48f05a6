"""The object store: objects by (resource, namespace, name), their managed-fields bookkeeping,
one global resourceVersion counter, and the bounded event history that watches replay.

Every write goes through ``Store.put``: it stamps the next resourceVersion, renders
``managedFields`` and records the watch event.  ``compact()`` (or ``history_limit``) drops
history; a watch from before it gets 410 Expired (see ``watch.py``).  Callers hold ``lock`` around
a read-modify-write; ``cond`` (on the same lock) wakes the watches.
"""

from __future__ import annotations

import collections
import copy
import secrets
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .clock import now_rfc3339
from .errors import STALE, already_exists, conflict, not_found
from .features import FeatureGates
from .managed_fields import Bookkeeping, ManagerId, record_update_ownership, same_ownership
from .objects import json_equal
from .resources import RESOURCES, Obj, Resource
from .selectors import Filter

if TYPE_CHECKING:
    from .claim_status import Authorize, Caller
    from .crds import ServedCrd
    from .gc import GarbageCollector

Key = tuple[str, str, str]  # (plural, namespace, name); namespace "" for cluster-scoped resources


@dataclass
class Event:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    resource: str
    obj: Obj
    old: Obj | None


@dataclass(frozen=True)
class RequestContext:
    """What the registry strategies read from a request's ``ctx``."""

    caller: Caller
    authorize: Authorize | None


class Store:
    def __init__(self, history_limit: int, gates: FeatureGates | None = None) -> None:
        self.history_limit = history_limit
        #: The server's feature gates, which the resources' rules consult.
        self.gates = gates or FeatureGates()
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.rv = 0
        self.objects: dict[Key, Obj] = {}
        self.books: dict[Key, Bookkeeping] = {}
        self.history: collections.deque[Event] = collections.deque()
        self.history_rvs: collections.deque[int] = collections.deque()
        self.compacted_rv = 0  # watches must start at or after this resourceVersion
        self.epoch = 0  # bumped when the server goes down: running watches end
        #: The request being served on this thread (``RequestContext``; kube-apiserver's ``ctx``):
        #: its caller and the server's authorizer, which strategies consult.  Unset for the
        #: fake's direct helpers, which stand for a privileged loopback client.
        self.local = threading.local()
        #: The garbage collector (gc.py), told of every write; None: no controller-manager.
        self.collector: GarbageCollector | None = None
        #: Admission (admission.py ``AdmissionChain``; ``FakeApiServer(admission=...)``), asked by
        #: crud.py before an HTTP create, update or delete is stored; None: no admission policies.
        self.admission: Callable[..., None] | None = None
        #: The installed CustomResourceDefinitions by plural (crds.py).
        self.crds: dict[str, ServedCrd] = {}

    def resource(self, plural: str) -> Resource:
        """A served resource by plural: a built-in one, else an installed CRD's storage version."""
        res = RESOURCES.get(plural)
        return res if res is not None else self.crds[plural].resource

    def resources(self) -> list[Resource]:
        """Every resource served now (built-in, then the CRDs' storage versions)."""
        return [*RESOURCES.values(), *(served.resource for served in self.crds.values())]

    def request_context(self) -> RequestContext | None:
        return getattr(self.local, "context", None)

    # -- reads --------------------------------------------------------------------------------------
    def require(self, res: Resource, namespace: str, name: str) -> Obj:
        """The stored object itself (lock held), or 404."""
        obj = self.objects.get((res.plural, namespace, name))
        if obj is None:
            raise not_found(res, name)
        return obj

    def copy_of(self, plural: str, namespace: str, name: str) -> Obj | None:
        with self.lock:
            obj = self.objects.get((plural, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def copies(self, plural: str, namespace: str | None = None) -> list[Obj]:
        """Copies of a resource's objects (of one namespace when given), by namespace and name."""
        with self.lock:
            return [
                copy.deepcopy(o)
                for (r, ns, _), o in sorted(self.objects.items())
                if r == plural and (namespace is None or ns == namespace)
            ]

    def matching(self, flt: Filter) -> list[tuple[Key, Obj]]:
        """The stored objects ``flt`` selects (lock held), by namespace and name."""
        return [
            (key, obj) for key, obj in sorted(self.objects.items()) if key[0] == flt.res.plural and flt.matches(obj)
        ]

    def list_object(self, res: Resource, items: list[Obj]) -> Obj:
        """A ``<Kind>List`` at the current resourceVersion; items come without kind/apiVersion,
        like the real server's."""
        bare = []
        for item in items:
            item = copy.deepcopy(item)
            item.pop("kind", None)
            item.pop("apiVersion", None)
            bare.append(item)
        return {
            "kind": f"{res.kind}List",
            "apiVersion": res.api_version,
            "metadata": {"resourceVersion": str(self.rv)},
            "items": bare,
        }

    def events(self) -> list[dict[str, Any]]:
        with self.lock:
            return [{"type": e.type, "resource": e.resource, "object": copy.deepcopy(e.obj)} for e in self.history]

    # -- writes (lock held) -------------------------------------------------------------------------
    def book(self, key: Key) -> Bookkeeping:
        return self.books.setdefault(key, Bookkeeping())

    def put(self, res: Resource, namespace: str, name: str, obj: Obj, etype: str, old: Obj | None) -> Obj:
        """Persist ``obj`` with a new resourceVersion and record the watch event."""
        self.rv += 1
        obj["apiVersion"] = res.api_version
        obj["kind"] = res.kind
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.rv)
        key = (res.plural, namespace, name)
        book = self.books.get(key)
        if book is not None:
            rendered = book.render(res.api_version)
            if rendered:
                meta["managedFields"] = rendered
            else:
                meta.pop("managedFields", None)
        if etype == "DELETED":
            self.objects.pop(key, None)
            self.books.pop(key, None)
        else:
            self.objects[key] = obj
        self._record_event(
            Event(self.rv, etype, res.plural, copy.deepcopy(obj), copy.deepcopy(old) if old is not None else None)
        )
        result = copy.deepcopy(obj)
        if self.collector is not None:
            self.collector.observe(etype, res, result)
        return result

    def _record_event(self, event: Event) -> None:
        self.history.append(event)
        self.history_rvs.append(event.rv)
        while len(self.history) > max(self.history_limit, 0):
            dropped = self.history.popleft()
            self.history_rvs.popleft()
            self.compacted_rv = max(self.compacted_rv, dropped.rv)
        self.cond.notify_all()

    def create(self, res: Resource, namespace: str, obj: Obj, mid: ManagerId, keep_uid: bool = False) -> Obj:
        """Store a new object (409 when it exists): system metadata set, ``mid`` owns its fields."""
        meta = obj.setdefault("metadata", {})
        name = meta.get("name")
        if not name and meta.get("generateName"):
            name = meta["generateName"] + "".join(secrets.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
            meta["name"] = name
        if (res.plural, namespace, name) in self.objects:
            raise already_exists(res, name)
        if res.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not (keep_uid and meta.get("uid")):
            meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        for transient in (
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "selfLink",
        ):
            meta.pop(transient, None)
        if res.generation:
            meta["generation"] = 1
        book = self.book((res.plural, namespace, name))
        touched: dict[str, Any] = {f"f:{k}": {} for k in obj if k not in ("apiVersion", "kind", "metadata", "status")}
        if meta.get("labels"):
            touched["f:metadata"] = {"f:labels": {f"f:{k}": {} for k in meta["labels"]}}
        book.touch(mid, touched or {"f:metadata": {}})
        devices = (obj.get("status") or {}).get("devices") if isinstance(obj.get("status"), dict) else None
        if isinstance(devices, list):
            record_update_ownership(book, [], devices, mid)
        return self.put(res, namespace, name, obj, "ADDED", None)

    def remove(self, plural: str, namespace: str, name: str) -> Obj | None:
        """Delete now (finalizers ignored); the DELETED object, None when it was not there."""
        with self.lock:
            old = self.objects.get((plural, namespace, name))
            if old is None:
                return None
            return self.put(self.resource(plural), namespace, name, copy.deepcopy(old), "DELETED", old)

    def commit_status(
        self, res: Resource, namespace: str, name: str, current: Obj, status: Obj, book: Bookkeeping
    ) -> Obj:
        """Store a validated new ``status`` (empty: none) with its bookkeeping, unless neither the
        status nor the ownership changes (then no new resourceVersion, no event)."""
        key = (res.plural, namespace, name)
        if json_equal(status or None, current.get("status")) and same_ownership(
            self.books.get(key), book, res.api_version
        ):
            return copy.deepcopy(current)
        new = copy.deepcopy(current)
        if status:
            new["status"] = status
        else:
            new.pop("status", None)
        self.books[key] = book
        return self.put(res, namespace, name, new, "MODIFIED", current)

    def compact(self) -> str:
        with self.cond:
            self.history.clear()
            self.history_rvs.clear()
            self.compacted_rv = self.rv
            self.cond.notify_all()
            return str(self.rv)


def check_preconditions(res: Resource, name: str, current: Obj, meta: dict[str, Any]) -> None:
    """A write's ``metadata.uid``/``resourceVersion``, when given, must be the stored ones (409)."""
    cur_meta = current["metadata"]
    uid = meta.get("uid")
    if uid and uid != cur_meta.get("uid"):
        raise conflict(
            res, name, f"Precondition failed: UID in precondition: {uid}, UID in object meta: {cur_meta.get('uid')}"
        )
    rv = meta.get("resourceVersion")
    if rv and rv != cur_meta.get("resourceVersion"):
        raise conflict(res, name, STALE)
