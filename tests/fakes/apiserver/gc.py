"""kube-controller-manager's garbage collector (k8s ``pkg/controller/garbagecollector``), run by
the fake itself, as in a cluster whose controller-manager is up: the ``ownerReference`` cascade.

The dependency graph is keyed by UID, as ``GraphBuilder.uidToNode`` is (graph_builder.go): an
object's dependents are the objects with an ``ownerReferences`` entry whose ``uid`` is its UID.
What the fake models:

- An object is deleted (over HTTP, by a helper, or by its last finalizer going away): each of its
  dependents is an ``attemptToDelete`` item (graph_builder.go ``processGraphChanges``, the
  ``deleteEvent`` case: ``removeNode``, then ``attemptToDelete.Add`` for every dependent).
- ``attemptToDeleteItem`` (garbagecollector.go): an item already being deleted
  (``deletionTimestamp``) is left to finish; otherwise ``classifyReferences`` looks every owner
  reference up live (``isDangling``): the owner's resource from the reference's
  ``apiVersion``/``kind`` (``apiResource``: group and kind; the fake serves one version a group),
  in the dependent's namespace when the owner's resource is namespaced
  (``resourceDefaultNamespace``), by ``name``; not found, or found with another UID, is
  *dangling*, else *solid*.  With a solid owner the item stays and loses its dangling references
  (``GenerateDeleteOwnerRefStrategicMergeBytes``, a MODIFIED event); with none it is deleted with
  the policy its finalizers ask for (``orphan`` -> Orphan, else Background), as a normal delete:
  its own finalizers hold it (``deletionTimestamp``), its DELETED event cascades further.
- A cluster-scoped item that names a namespaced owner is left alone
  (``namespacedOwnerOfClusterScopedObjectErr``: forgotten, never retried); so is an item naming
  an owner kind the fake does not serve (``restMappingError``: upstream retries forever).
- ``propagationPolicy: Orphan`` (or ``orphanDependents: true``): the API server adds the
  ``orphan`` finalizer and sets ``deletionTimestamp`` (apiserver registry/generic/registry/store.go
  ``shouldOrphanDependents``, ``deletionFinalizersForGarbageCollection``,
  ``updateForGracefulDeletionAndFinalizers``: crud.py); the collector sees an object being
  deleted with that finalizer (graph_builder.go ``processTransitions``,
  ``startsWaitingForDependentsOrphaned``) and runs ``attemptToOrphanWorker``: every dependent
  loses its references to the owner's UID (``orphanDependents``), then the ``orphan`` finalizer
  is removed (``removeFinalizer``), which deletes the owner if it had no other finalizer.

Simplified: ``Foreground`` is treated as ``Background`` (no ``foregroundDeletion`` finalizer, no
``blockOwnerDeletion``: the owner goes first, then its dependents); an object created with an
owner reference to an absent owner is not collected at creation (upstream's "virtual" owner node
would get it deleted shortly after); no ``absentOwnerCache``.

The real collector is asynchronous and eventually consistent: it watches through informers and
works its queues in the background.  This one is synchronous, run under the store's lock before
the write that triggered it returns, so every event of the cascade is in the watch history when
the delete answers.  Tests must not rely on timing either way: wait for the events (a watch)
or poll, as against a cluster.
"""

from __future__ import annotations

import collections
import copy
from typing import TYPE_CHECKING, Any

from .errors import ApiStatusError
from .resources import Obj, Resource

if TYPE_CHECKING:
    from .store import Key, Store

#: metav1.FinalizerOrphanDependents.
ORPHAN_FINALIZER = "orphan"
#: metav1.FinalizerDeleteDependents (Foreground); recognised, not enforced.
FOREGROUND_FINALIZER = "foregroundDeletion"


def _group(api_version: str) -> str:
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def owner_resource(ref: dict[str, Any], resources: list[Resource]) -> Resource | None:
    """The resource an owner reference names (``GarbageCollector.apiResource``: the REST mapping
    of its group and kind, custom resources included: the RESTMapper knows served CRDs), None
    when the fake serves no such kind."""
    group, kind = _group(str(ref.get("apiVersion") or "")), ref.get("kind")
    for res in resources:
        if res.group == group and res.kind == kind:
            return res
    return None


def _refs(obj: Obj) -> list[dict[str, Any]]:
    return [r for r in (obj.get("metadata") or {}).get("ownerReferences") or [] if isinstance(r, dict)]


class GarbageCollector:
    """The collector of one ``Store``: ``observe(etype, res, obj)`` is its informer (called by
    ``Store.put`` for every write, lock held); the work it queues runs before ``observe``
    returns to the outermost write."""

    def __init__(self, store: Store) -> None:
        self.store = store
        #: ``("delete", uid)``: the dependents of a deleted object to attempt; ``("orphan", key)``:
        #: an object being deleted with the ``orphan`` finalizer.
        self._queue: collections.deque[tuple[str, Any]] = collections.deque()
        self._working = False

    # -- the graph builder ----------------------------------------------------------------------------
    def observe(self, etype: str, res: Resource, obj: Obj) -> None:
        """graph_builder.go ``processGraphChanges``: queue the work a change calls for."""
        meta = obj.get("metadata") or {}
        if etype == "DELETED":
            if meta.get("uid"):
                self._queue.append(("delete", meta["uid"]))
        elif meta.get("deletionTimestamp") and ORPHAN_FINALIZER in (meta.get("finalizers") or []):
            # processTransitions: startsWaitingForDependentsOrphaned -> attemptToOrphan.
            self._queue.append(("orphan", (res.plural, meta.get("namespace") or "", meta.get("name"))))
        if self._working or not self._queue:
            return
        self._working = True
        try:
            while self._queue:
                work, arg = self._queue.popleft()
                try:
                    if work == "delete":
                        for key in self.dependents(arg):
                            self.attempt_to_delete(key)
                    else:
                        self.attempt_to_orphan(arg)
                except ApiStatusError:
                    # Upstream requeues the item; the write that set the collector off is
                    # somebody else's and never fails because of it.
                    continue
        finally:
            self._working = False

    def dependents(self, uid: str) -> list[Key]:
        """The objects with an owner reference to ``uid`` (the node's ``dependents``)."""
        return [key for key, obj in sorted(self.store.objects.items()) if any(r.get("uid") == uid for r in _refs(obj))]

    # -- attemptToDeleteItem -----------------------------------------------------------------------
    def is_dangling(self, ref: dict[str, Any], item: Obj, item_res: Resource) -> bool | None:
        """garbagecollector.go ``isDangling``: True (absent, or another UID), False (solid), None
        when the reference cannot be resolved (unknown kind; a cluster-scoped item with a
        namespaced owner)."""
        res = owner_resource(ref, self.store.resources())
        if res is None:
            return None
        if res.namespaced and not item_res.namespaced:
            return None  # namespacedOwnerOfClusterScopedObjectErr
        namespace = ((item.get("metadata") or {}).get("namespace") or "") if res.namespaced else ""
        owner = self.store.objects.get((res.plural, namespace, str(ref.get("name") or "")))
        return owner is None or owner["metadata"].get("uid") != ref.get("uid")

    def attempt_to_delete(self, key: Key) -> None:
        """garbagecollector.go ``attemptToDeleteItem`` (without the foreground cases)."""
        from .crud import delete  # imported here: crud imports this module

        item = self.store.objects.get(key)
        if item is None:
            return
        meta = item["metadata"]
        if meta.get("deletionTimestamp"):
            return  # "being deleted" is a one-way trip: its final deletion cascades
        refs = _refs(item)
        if not refs:
            return
        res = self.store.resource(key[0])
        solid, dangling = [], []
        for ref in refs:
            verdict = self.is_dangling(ref, item, res)
            if verdict is None:
                return  # upstream: an error, the item is not collected
            (dangling if verdict else solid).append(ref)
        if solid:
            if dangling:
                self.remove_owner_refs(key, {r.get("uid") for r in dangling})
            return
        policy = "Orphan" if ORPHAN_FINALIZER in (meta.get("finalizers") or []) else "Background"
        delete(self.store, res, key[1], key[2], {"propagationPolicy": policy, "preconditions": {"uid": meta["uid"]}})

    # -- attemptToOrphanWorker --------------------------------------------------------------------
    def attempt_to_orphan(self, key: Key) -> None:
        """garbagecollector.go ``attemptToOrphanWorker``: ``orphanDependents``, then
        ``removeFinalizer(owner, "orphan")``."""
        owner = self.store.objects.get(key)
        if owner is None:
            return
        meta = owner["metadata"]
        if not meta.get("deletionTimestamp") or ORPHAN_FINALIZER not in (meta.get("finalizers") or []):
            return
        for dependent in self.dependents(meta["uid"]):
            self.remove_owner_refs(dependent, {meta["uid"]})
        owner = self.store.objects.get(key)
        if owner is None:
            return
        new = copy.deepcopy(owner)
        new_meta = new["metadata"]
        new_meta["finalizers"] = [f for f in new_meta.get("finalizers") or [] if f != ORPHAN_FINALIZER]
        if not new_meta["finalizers"]:
            new_meta.pop("finalizers")
            self.store.put(self.store.resource(key[0]), key[1], key[2], new, "DELETED", owner)
        else:
            self.store.put(self.store.resource(key[0]), key[1], key[2], new, "MODIFIED", owner)

    def remove_owner_refs(self, key: Key, uids: set[Any]) -> None:
        """``GenerateDeleteOwnerRefStrategicMergeBytes``: the patch that drops the owner
        references with these UIDs (``$deleteFromPrimitiveList``-free: by ``uid``, the list's
        merge key); an empty list goes away."""
        current = self.store.objects.get(key)
        if current is None:
            return
        kept = [r for r in _refs(current) if r.get("uid") not in uids]
        if len(kept) == len(_refs(current)):
            return
        new = copy.deepcopy(current)
        if kept:
            new["metadata"]["ownerReferences"] = kept
        else:
            new["metadata"].pop("ownerReferences", None)
        self.store.put(self.store.resource(key[0]), key[1], key[2], new, "MODIFIED", current)
