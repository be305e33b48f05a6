"""Publish the CNI plugin's status outbox to the API server as soon as it changes.

The CNI plugin renames a new outbox record into ``<state>/outbox/``; inotify wakes the
publisher within milliseconds (no slow poll).  Failures back off exponentially; outbox records
stay on disk until published, so a restart loses nothing, and the seq/publishedSeq pair keeps
an older state from ever overwriting a newer one.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..state.store import StateDir
from ..status.drain import Notes, drain_outbox
from ..status.entries import Entry
from ..status.sink import SinkError, StatusSink

if TYPE_CHECKING:
    from ..state.facts import ClaimRef
    from ..state.records import StatusOutbox
from .. import metrics

log = logging.getLogger(__name__)

RESYNC_SECONDS = 30.0
MIN_BACKOFF = 0.2
MAX_BACKOFF = 10.0
#: After a wake-up, wait this long so a burst of record writes is drained in one pass.
DEBOUNCE_SECONDS = 0.005


class TimedSink:
    """Wraps a sink to count publish latency and failures."""

    def __init__(self, sink: StatusSink) -> None:
        self.sink = sink

    def apply(self, claim: ClaimRef, driver: str, devices: list[Entry]) -> None:
        started = time.monotonic()
        try:
            self.sink.apply(claim, driver, devices)
        except SinkError as exc:
            kind = "forbidden" if exc.forbidden else "retryable" if exc.retryable else "final"
            metrics.PUBLISH_FAILURES.labels(kind=kind).inc()
            raise
        metrics.PUBLISH_SECONDS.observe(time.monotonic() - started)


class StatusPublisher:
    def __init__(
        self,
        state: StateDir,
        sink: StatusSink,
        driver: str,
        annotate: Callable[[StatusOutbox], Notes] | None = None,
        annotate_pods: Callable[[StatusOutbox], None] | None = None,
    ) -> None:
        self.state = state
        self.annotate = annotate
        self.annotate_pods = annotate_pods
        self.sink = TimedSink(sink)
        self.driver = driver
        self.published = 0
        self._refused: set[str] = set()  # claims whose refusal was logged: once each, not per retry

    def run(self, stop: threading.Event) -> None:
        from inotify_simple import INotify, flags

        self.state.ensure()
        notifier = INotify()
        notifier.add_watch(os.path.join(self.state.root, "outbox"), flags.MOVED_TO | flags.CLOSE_WRITE)
        backoff = 0.0
        try:
            while not stop.is_set():
                backoff = self._drain_once(backoff)
                self._wait(notifier, stop, backoff or RESYNC_SECONDS)
        finally:
            notifier.close()

    def _drain_once(self, backoff: float) -> float:
        """One pass over the outbox; returns the backoff before the next try (0: none needed)."""
        try:
            report = drain_outbox(
                self.state, self.sink, driver=self.driver, annotate=self.annotate, annotate_pods=self.annotate_pods
            )
        except Exception as exc:  # the state dir itself failed: keep the service alive, retry
            log.error("status outbox drain failed: %s", exc)
            return min(max(backoff * 2, MIN_BACKOFF), MAX_BACKOFF)
        self.published += report.published
        for uid, error in report.dropped.items():
            log.error("status of claim %s dropped: %s", uid, error)
        for uid, error in report.refused.items():
            log.error("status of claim %s published without what the API server refused: %s", uid, error)
        for uid, error in report.quarantined.items():
            log.warning("status outbox record of claim %s is unreadable: %s", uid, error)
        for uid, error in report.failed.items():
            if uid not in report.forbidden:
                log.warning("status of claim %s not published, will retry: %s", uid, error)
            elif uid not in self._refused:
                self._refused.add(uid)
                log.error("status of claim %s refused by the API server's authorization: %s", uid, error)
        try:
            metrics.OUTBOX_DEPTH.set(len(self.state.pending_outbox(errors={})))
        except Exception:
            pass
        metrics.QUARANTINED.set(self.state.quarantine_count())
        if report.failed:
            return min(max(backoff * 2, MIN_BACKOFF), MAX_BACKOFF)
        return 0.0

    def _wait(self, notifier: Any, stop: threading.Event, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if notifier.read(timeout=int(min(left, 0.25) * 1000)):
                time.sleep(DEBOUNCE_SECONDS)
                notifier.read(timeout=0)
                return
