"""The API server as a claim source: a watch-backed cache of ResourceClaims, with a GET on a miss.

Kubelet asks to prepare a claim right after the scheduler allocated it and reserved it for the
pod being started, so the watch may not have delivered that version yet.  A stale copy would
record the previous pod and the CNI plugin would not find the new one's claims.  So the cache
answers only when its copy is reserved for exactly the pods the caller already prepared (the
replay after a kubelet restart, kubelet's retries); a first prepare reads the claim from the
API server.  The watch is re-listed on 410 Gone and whenever the stream ends, as
``kubernetes.watch.Watch`` leaves to its caller.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..kube.api import ApiError, KubeApi

log = logging.getLogger(__name__)

#: A ResourceClaim as the API serves it (camelCase JSON).
Claim = dict[str, Any]

WATCH_TIMEOUT = 300
MAX_BACKOFF = 30.0


def _key(obj: Claim) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


def is_ready_for_prepare(claim: Claim) -> bool:
    status = claim.get("status") or {}
    return bool(status.get("allocation")) and bool(status.get("reservedFor"))


def reserved_pod_uids(claim: Claim) -> set[str]:
    return {r.get("uid") for r in (claim.get("status") or {}).get("reservedFor") or [] if r.get("resource") == "pods"}


class ClaimCache:
    def __init__(self, api: KubeApi, *, watch_timeout: int = WATCH_TIMEOUT) -> None:
        self.api = api
        self.watch_timeout = watch_timeout
        self._claims: dict[tuple[str, str], Claim] = {}
        self._lock = threading.Lock()
        self.synced = threading.Event()
        self.hits = 0
        self.misses = 0

    # -- reads -----------------------------------------------------------------------------
    def get(self, namespace: str, name: str, known_pods: set[str] | None = None) -> Claim | None:
        """The claim: from the cache when its copy is reserved for exactly ``known_pods``
        (the pods already prepared), else from the API."""
        with self._lock:
            cached = self._claims.get((namespace, name))
        if (
            cached is not None
            and known_pods
            and is_ready_for_prepare(cached)
            and reserved_pod_uids(cached) == known_pods
        ):
            self.hits += 1
            return cached
        self.misses += 1
        fresh = self.api.get_claim(namespace, name)
        if fresh is not None:
            self._store(fresh)
        return fresh

    def path_of(self, namespace: str, name: str) -> str | None:
        """Claims from the API server come from no file."""
        return None

    def __len__(self) -> int:
        with self._lock:
            return len(self._claims)

    # -- the list+watch loop -----------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        backoff = 0.5
        while not stop.is_set():
            try:
                resource_version = self._relist()
                backoff = 0.5
                self._watch(resource_version, stop)
            except ApiError as exc:
                if exc.status == 410:
                    log.info("claim watch expired (410): re-listing")
                    continue
                log.warning("claim list/watch failed: %s; retrying in %.1fs", exc, backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    def _relist(self) -> str:
        items, resource_version = self.api.list_claims()
        with self._lock:
            self._claims = {_key(c): c for c in items}
        self.synced.set()
        return resource_version

    def _watch(self, resource_version: str, stop: threading.Event) -> None:
        for kind, obj in self.api.watch_claims(resource_version, self.watch_timeout):
            if stop.is_set():
                return
            if kind in ("ADDED", "MODIFIED"):
                self._store(obj)
            elif kind == "DELETED":
                with self._lock:
                    self._claims.pop(_key(obj), None)

    def _store(self, obj: Claim) -> None:
        """Keep the newer of two copies (resourceVersions compare as integers on kube-apiserver)."""
        key = _key(obj)
        with self._lock:
            old = self._claims.get(key)
            if old is None or _rv(obj) >= _rv(old) or _uid(obj) != _uid(old):
                self._claims[key] = obj


def _rv(obj: Claim) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _uid(obj: Claim) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))
