"""This node's ResourceSlices of this driver as the API server last told us (``SliceCache``).

The slice publisher's informer-style view: filled by its LIST and WATCH and by the answers to
its own writes, so a reconcile compares with the server's state without a LIST of its own.
Its own module because the publisher (what to write, and when) is long enough without it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

__all__ = ["SliceCache", "resource_version"]


def resource_version(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _older(candidate: str, current: str) -> bool:
    """Whether resourceVersion ``candidate`` is older than ``current``.  Resource versions are
    opaque, but every Kubernetes storage makes them increasing integers; anything else counts
    as not older."""
    try:
        return int(candidate) < int(current)
    except ValueError:
        return False


class SliceCache:
    """This node's slices of this driver as the API server last told us: name -> object.

    Filled by LIST and WATCH (``SlicePublisher._watch_slices``) and by the answers to our own
    writes (write-through, so a reconcile right after a write compares with what was written,
    not with a watch event still on its way).  An event older than what is held is ignored.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, dict[str, Any]] = {}
        self.synced = threading.Event()
        self.resource_version = ""

    def replace(self, items: Iterable[dict[str, Any]], resource_version: str) -> None:
        with self._lock:
            self._objects = {o["metadata"]["name"]: o for o in items}
            self.resource_version = resource_version
        self.synced.set()

    def put(self, obj: dict[str, Any]) -> bool:
        """Store ``obj`` unless an object newer than it is held; whether it was stored."""
        name = obj["metadata"]["name"]
        with self._lock:
            held = self._objects.get(name)
            if held is not None and _older(resource_version(obj), resource_version(held)):
                return False
            self._objects[name] = obj
            return True

    def remove(self, name: str) -> None:
        with self._lock:
            self._objects.pop(name, None)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return dict(self._objects)
