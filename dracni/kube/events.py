"""Warning Events (``events.k8s.io/v1``) the service records, deduplicated and rate-limited.

Modelled on client-go's ``tools/events`` (event_broadcaster.go, event_recorder.go):

- ``recorderImpl.makeEvent``: name ``<regarding name>.<hex nanoseconds>``, the regarding
  object's namespace (``default`` when it has none), ``eventTime`` in microseconds,
  ``reportingController`` (the driver) and ``reportingInstance`` (``<controller>-<node>``);
- ``getKey`` / ``recordToSink``: events that agree in type, action, reason, reporting
  controller and instance, regarding and related object are *isomorphic* (the note is not part
  of the key).  The first one is created; the second turns it into a series (count 2) and is
  sent as a patch; later ones only count, in memory;
- ``refreshExistingEventSeries`` (every ``REFRESH_SECONDS``) patches every series with its
  count, and ``finishSeries`` (every ``FINISH_SECONDS``) writes the final count of a series
  quiet for that long and forgets it (a singleton is forgotten after that long);
- ``recordEvent``: a patch of a series whose Event is gone (404) creates it again; a refusal
  (4xx) is dropped; an unreachable server is retried ``MAX_TRIES`` times.

On top, client-go's legacy ``record.EventCorrelator`` spam filter: per regarding object a
token bucket of ``SPAM_BURST`` events refilled one per ``SPAM_REFILL_SECONDS``, so one broken
pod cannot flood the API server with distinct events.  Recording never blocks the caller: a
bounded queue (``MAX_QUEUED``, dropping when full like ``watch.DropIfChannelFull``) feeds one
thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .api import ApiError, KubeApi

log = logging.getLogger(__name__)

WARNING = "Warning"
MAX_TRIES = 12
RETRY_SECONDS = 10.0
FINISH_SECONDS = 6 * 60.0
REFRESH_SECONDS = 30 * 60.0
MAX_QUEUED = 1000
SPAM_BURST = 25
SPAM_REFILL_SECONDS = 300.0
NOTE_MAX = 1024  # pkg/apis/core/validation/events.go NoteLengthLimit

ObjectRef = dict[str, str]


def pod_ref(namespace: str, name: str, uid: str | None = None) -> ObjectRef:
    return {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name} | ({"uid": uid} if uid else {})


def claim_ref(namespace: str, name: str, uid: str | None = None) -> ObjectRef:
    ref = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "namespace": namespace, "name": name}
    return ref | ({"uid": uid} if uid else {})


def _fit_note(note: str) -> str:
    """At most ``NOTE_MAX`` bytes (Go's ``len`` of the string), cut on a character boundary."""
    raw = note.encode("utf-8")
    if len(raw) <= NOTE_MAX:
        return note
    return raw[: NOTE_MAX - 3].decode("utf-8", "ignore") + "..."


def _micro_time(when: float) -> str:
    """``metav1.MicroTime``: RFC 3339 with microseconds, UTC."""
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _key(ev: dict[str, Any]) -> tuple[Any, ...]:
    """client-go ``getKey``: what makes two events isomorphic (not the note)."""

    def ref(r: Any) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((r or {}).items()))

    return (
        ev["type"],
        ev["action"],
        ev["reason"],
        ev["reportingController"],
        ev["reportingInstance"],
        ref(ev["regarding"]),
        ref(ev.get("related")),
    )


@dataclass
class _Cached:
    event: dict[str, Any]
    created_at: float
    count: int = 1
    last_observed: float = 0.0
    sent_count: int = 1  # the count the API server has


@dataclass
class _Bucket:
    tokens: float
    updated: float


@dataclass
class EventRecorder:
    """``warn(...)`` from any thread; ``run(stop)`` on one thread writes the Events."""

    api: KubeApi
    controller: str
    instance: str
    clock: Callable[[], float] = time.time
    retry_seconds: float = RETRY_SECONDS
    _queue: queue.Queue[dict[str, Any]] = field(default_factory=lambda: queue.Queue(MAX_QUEUED))
    _cache: dict[tuple[Any, ...], _Cached] = field(default_factory=dict)
    _buckets: dict[tuple[tuple[str, str], ...], _Bucket] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    dropped: int = 0

    def warn(self, regarding: ObjectRef, reason: str, action: str, note: str, related: ObjectRef | None = None) -> None:
        """Record a Warning Event about ``regarding`` (client-go ``recorderImpl.Eventf``)."""
        now = self.clock()
        namespace = regarding.get("namespace") or "default"
        event: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": f"{regarding['name']}.{time.time_ns():x}", "namespace": namespace},
            "eventTime": _micro_time(now),
            "reportingController": self.controller,
            "reportingInstance": self.instance[:128],
            "action": action,
            "reason": reason,
            "regarding": regarding,
            "note": _fit_note(note),
            "type": WARNING,
        }
        if related is not None:
            event["related"] = related
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.dropped += 1

    # -- the writer thread --------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        last_refresh = last_finish = self.clock()
        while not stop.is_set():
            try:
                event = self._queue.get(timeout=0.25)
            except queue.Empty:
                event = None
            if event is not None:
                self.record(event)
            now = self.clock()
            if now - last_finish >= FINISH_SECONDS:
                self.finish_series()
                last_finish = now
            if now - last_refresh >= REFRESH_SECONDS:
                self.refresh_series()
                last_refresh = now

    def drain(self) -> None:
        """Write everything queued now (the writer thread's work, for a caller that waits)."""
        while True:
            try:
                event = self._queue.get_nowait()
            except queue.Empty:
                return
            self.record(event)

    def record(self, event: dict[str, Any]) -> None:
        """client-go ``recordToSink``, with the correlator's spam filter for new events."""
        now = self.clock()
        key = _key(event)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                cached.count += 1
                cached.last_observed = now
                if cached.count > 2:
                    return  # counted; written by refresh_series / finish_series
                to_send: dict[str, Any] | None = self._with_series(cached)
            else:
                if not self._allow(event["regarding"], now):
                    self.dropped += 1
                    return
                self._cache[key] = cached = _Cached(event, now, last_observed=now)
                to_send = None
        if to_send is None:
            self._send_create(event)
        else:
            self._send_series(cached, to_send)

    def _allow(self, regarding: ObjectRef, now: float) -> bool:
        """``record.EventCorrelator``'s spam filter: a token bucket per regarding object."""
        ref = tuple(sorted(regarding.items()))
        bucket = self._buckets.get(ref)
        if bucket is None:
            bucket = self._buckets[ref] = _Bucket(SPAM_BURST, now)
        bucket.tokens = min(SPAM_BURST, bucket.tokens + (now - bucket.updated) / SPAM_REFILL_SECONDS)
        bucket.updated = now
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True

    @staticmethod
    def _with_series(cached: _Cached) -> dict[str, Any]:
        return {
            **cached.event,
            "series": {"count": cached.count, "lastObservedTime": _micro_time(cached.last_observed)},
        }

    def refresh_series(self) -> None:
        """client-go ``refreshExistingEventSeries``: every series gets its current count."""
        with self._lock:
            series = [(c, self._with_series(c)) for c in self._cache.values() if c.count >= 2]
        for cached, event in series:
            self._send_series(cached, event)

    def finish_series(self, now: float | None = None) -> None:
        """client-go ``finishSeries``: a series quiet for ``FINISH_SECONDS`` gets its final
        count and is forgotten; a singleton that old is forgotten."""
        now = self.clock() if now is None else now
        with self._lock:
            done = [
                (k, c)
                for k, c in self._cache.items()
                if (c.last_observed if c.count >= 2 else c.created_at) < now - FINISH_SECONDS
            ]
            for k, _ in done:
                del self._cache[k]
        for _, cached in done:
            if cached.count >= 2 and cached.count != cached.sent_count:
                self._send_series(cached, self._with_series(cached))

    def _send_create(self, event: dict[str, Any]) -> None:
        self._attempt(lambda: self.api.create_event(event["metadata"]["namespace"], event), event)

    def _send_series(self, cached: _Cached, event: dict[str, Any]) -> None:
        meta = event["metadata"]

        def write() -> None:
            try:
                self.api.patch_event(meta["namespace"], meta["name"], {"series": event["series"]})
            except ApiError as exc:
                if exc.status != 404:
                    raise
                # client-go recordEvent: the Event is gone; create it again, series and all.
                self.api.create_event(meta["namespace"], event)
            cached.sent_count = event["series"]["count"]

        self._attempt(write, event)

    def _attempt(self, write: Callable[[], object], event: dict[str, Any]) -> None:
        """client-go ``attemptRecording``: retry while the server is unreachable; a refusal is final."""
        for attempt in range(MAX_TRIES):
            try:
                write()
                return
            except ApiError as exc:
                if exc.status != 0 and not exc.status >= 500 and exc.status != 429:
                    log.error("event %s refused (not retried): %s", event["reason"], exc)
                    return
                if attempt + 1 < MAX_TRIES:
                    time.sleep(self.retry_seconds)
        log.error("event %s not written: retry limit exceeded", event["reason"])
