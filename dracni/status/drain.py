"""Publish pending StatusOutbox records through a :class:`~dracni.status.sink.StatusSink`.

Each pending record (``seq > publishedSeq``) holds the full desired set of this driver's
device facts for one claim.  They become ``status.devices`` entries, go to the sink in one
call per claim, and the record is then marked published *with the seq that was read*: a
newer state written by the CNI plugin in the meantime keeps the record pending, so the next
drain publishes it.  A claim that fails is reported and stays pending; the others go on.
A failure the sink calls final (the claim is gone or was re-created, or the server refuses the
entries as invalid) is reported as dropped and marked published, so it is not retried forever.
An authorization refusal is never final: it stays pending until the grant is fixed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dracni.state.store import StateDir, StateError
from dracni.status.entries import status_devices
from dracni.status.sink import SinkError, StatusSink

if TYPE_CHECKING:
    from dracni.state.records import StatusOutbox


@dataclass
class DrainReport:
    published: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # claim uid -> error; stays pending
    forbidden: set[str] = field(default_factory=set)  # of ``failed``: refused by authorization
    dropped: dict[str, str] = field(default_factory=dict)  # claim uid -> final error; not retried
    #: claim uid -> where its unreadable outbox record went (quarantine/) and why; not retried
    quarantined: dict[str, str] = field(default_factory=dict)


def _pending(state: StateDir, report: DrainReport) -> list[StatusOutbox]:
    """Pending outbox records; an unreadable record is quarantined and reported instead of
    failing them all."""
    try:
        return state.pending_outbox(errors=report.failed, quarantined=report.quarantined)
    except StateError as exc:  # the outbox directory itself cannot be listed
        report.failed["*"] = str(exc)
        return []


def drain_outbox(
    state: StateDir, sink: StatusSink, *, driver: str, on_published: Callable[[StatusOutbox], None] | None = None
) -> DrainReport:
    """Publish every pending outbox record once; see the module docstring.

    ``on_published(record)`` runs after a claim's status went out and before the record is
    marked published (IPAMClaim updates); it may raise SinkError like the sink.
    """
    report = DrainReport()
    for record in _pending(state, report):
        claim = record.get("claim") or {}
        uid = claim.get("uid") or "?"
        final_error = None
        try:
            sink.apply(claim, driver, status_devices(record, driver=driver))
            if on_published is not None:
                on_published(record)
        except SinkError as exc:
            if exc.retryable:
                report.failed[uid] = str(exc)
                if exc.forbidden:
                    report.forbidden.add(uid)
                continue
            final_error = str(exc)
        except Exception as exc:  # a malformed record or a sink bug must not stop the others
            report.failed[uid] = f"{type(exc).__name__}: {exc}"
            continue
        try:
            state.mark_published(uid, record.get("seq"))
        except StateError as exc:
            report.failed[uid] = f"sent, but not recorded as sent: {exc}"
            continue
        if final_error is None:
            report.published += 1
        else:
            report.dropped[uid] = final_error
    return report
