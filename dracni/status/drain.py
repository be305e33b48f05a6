"""Publish pending StatusOutbox records through a :class:`~dracni.status.sink.StatusSink`.

Each pending record (``seq > publishedSeq``) holds the full desired set of this driver's
device facts for one claim.  They become ``status.devices`` entries, go to the sink in one
call per claim, and the record is then marked published *with the seq that was read*: a
newer state written by the CNI plugin in the meantime keeps the record pending, so the next
drain publishes it.  A claim that fails is reported and stays pending; the others go on.
A failure the sink calls final (the claim is gone or was re-created) is reported as dropped and
marked published, so it is not retried forever.  When the server refuses the entries' content
(a 422 of validation), the entries are sent again one at a time (``publish_per_entry``): an
entry refused alone is replaced by a marker (its Ready condition with the reason
``StatusRefused`` and the server's words, no data), or left out if even that is refused, and
every other entry of the claim still gets published.  An authorization refusal is never final:
it stays pending until the grant is fixed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dracni.apirules.validation import MESSAGE_MAX
from dracni.state.facts import entry_key, published
from dracni.state.store import StateDir, StateError
from dracni.status.entries import READY, Entry, status_devices
from dracni.status.sink import SinkError, StatusSink

if TYPE_CHECKING:
    from dracni.state.records import StatusOutbox

#: A status entry's identity: (pool, device, shareID), as ``state.facts.entry_key`` spells it.
Key = tuple[str, str, str]
#: Extra conditions per status entry, e.g. an IPAMClaim conflict.
Notes = dict[Key, list[dict[str, Any]]]


@dataclass
class DrainReport:
    published: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # claim uid -> error; stays pending
    forbidden: set[str] = field(default_factory=set)  # of ``failed``: refused by authorization
    dropped: dict[str, str] = field(default_factory=dict)  # claim uid -> final error; not retried
    #: claim uid -> where its unreadable outbox record went (quarantine/) and why; not retried
    quarantined: dict[str, str] = field(default_factory=dict)
    #: claim uid -> the entries the server refused (replaced by a marker or left out); the
    #: claim's other entries were published
    refused: dict[str, str] = field(default_factory=dict)


#: The Ready reason of an entry whose content the API server refused (the message says why).
REASON_REFUSED = "StatusRefused"


def refused_marker(entry: Entry, error: str) -> Entry:
    """What stands for ``entry`` once the server refused it: its identity, its Ready status with
    the reason ``StatusRefused`` and the server's message; no data, no networkData."""
    marker: Entry = {k: entry[k] for k in ("driver", "pool", "device", "shareID") if k in entry}
    ready: dict[str, Any] = next((c for c in entry.get("conditions") or [] if c.get("type") == READY), {})
    text = f"the API server refused this entry's status: {error}".encode()[:MESSAGE_MAX].decode("utf-8", "ignore")
    marker["conditions"] = [
        {
            "type": READY,
            "status": ready.get("status") or "Unknown",
            "reason": REASON_REFUSED,
            "message": text,
            "lastTransitionTime": ready.get("lastTransitionTime") or "1970-01-01T00:00:00Z",
        }
    ]
    return marker


def _name(entry: Entry) -> str:
    share = f" share {entry['shareID']}" if entry.get("shareID") else ""
    return f"{entry.get('pool')}/{entry.get('device')}{share}"


def publish_per_entry(sink: StatusSink, claim: Any, driver: str, entries: list[Entry]) -> str:
    """Publish ``entries`` one more at a time after the server refused them together.

    Each step applies the entries kept so far plus the next one; an entry refused alone is
    tried as its ``refused_marker``, then left out.  Returns what was refused (empty: none was,
    alone).  A failure other than a refusal (the server went away) propagates: the record stays
    pending and the next drain starts over with the whole set.
    """
    kept: list[Entry] = []
    refused: list[str] = []
    written = False  # whether the server holds exactly ``kept`` now
    for entry in entries:
        error = ""
        written = False
        for attempt in ("as it is", "replaced by a marker"):
            candidate = entry if not error else refused_marker(entry, error)
            try:
                sink.apply(claim, driver, [*kept, candidate])
            except SinkError as exc:
                if not exc.refused:
                    raise
                error = error or str(exc)
                continue
            kept.append(candidate)
            written = True
            if error:
                refused.append(f"{_name(entry)} {attempt}: {error}")
            break
        else:
            refused.append(f"{_name(entry)} left out: {error}")
    if not written:  # the last entry was left out, or each one: the kept ones replace the old
        sink.apply(claim, driver, kept)
    return "; ".join(refused)


def _pending(state: StateDir, report: DrainReport) -> list[StatusOutbox]:
    """Pending outbox records; an unreadable record is quarantined and reported instead of
    failing them all."""
    try:
        return state.pending_outbox(errors=report.failed, quarantined=report.quarantined)
    except StateError as exc:  # the outbox directory itself cannot be listed
        report.failed["*"] = str(exc)
        return []


def with_notes(entries: list[Entry], notes: Notes) -> list[Entry]:
    """``entries`` with the noted conditions added (after Ready, replacing one of their type)."""
    out = []
    for entry in entries:
        extra = notes.get(entry_key(entry)) or []
        if extra:
            types = {c["type"] for c in extra}
            kept = [c for c in entry.get("conditions") or [] if c.get("type") not in types]
            entry = {**entry, "conditions": kept + extra}
        out.append(entry)
    return out


def claim_entries(record: StatusOutbox | None, *, driver: str, notes: Notes | None = None) -> list[Entry]:
    """The entries to publish for a claim: its facts' entries with the notes."""
    entries = status_devices(record, driver=driver) if record is not None else []
    return with_notes(entries, notes or {})


def drain_outbox(
    state: StateDir,
    sink: StatusSink,
    *,
    driver: str,
    annotate: Callable[[StatusOutbox], Notes] | None = None,
    annotate_pods: Callable[[StatusOutbox], None] | None = None,
) -> DrainReport:
    """Publish every pending outbox record once; see the module docstring.

    ``annotate(record)`` runs before a claim's status goes out (the IPAMClaim write-back) and
    returns conditions to add to its entries; a retryable SinkError from it is reported after
    the status went out, so the record stays pending and is tried again.  ``annotate_pods(record)``
    (the pods' network-status annotation, ``kube/pod_network_status.py``) runs next, before the
    status, so a claim gone (a final status failure) still clears its pods' entries; a retryable
    SinkError from it likewise keeps the record pending.
    """
    report = DrainReport()
    for record in _pending(state, report):
        claim = record.get("claim") or {}
        uid = claim.get("uid") or "?"
        final_error = None
        try:
            notes: Notes = {}
            retry_later: SinkError | None = None
            if annotate is not None:
                try:
                    notes = annotate(record)
                except SinkError as exc:
                    if not exc.retryable:
                        raise
                    retry_later = exc
            if annotate_pods is not None:
                try:
                    annotate_pods(record)
                except SinkError as exc:
                    if not exc.retryable:
                        raise
                    retry_later = retry_later or exc
            entries = claim_entries(record, driver=driver, notes=notes)
            try:
                sink.apply(claim, driver, entries)
            except SinkError as exc:
                if not exc.refused or not entries:
                    raise
                refused = publish_per_entry(sink, claim, driver, entries) or f"refused as a whole: {exc}"
                report.refused[uid] = refused
            if retry_later is not None:
                raise retry_later
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
            published(state, uid, record.get("seq"))
        except StateError as exc:
            report.failed[uid] = f"sent, but not recorded as sent: {exc}"
            continue
        if final_error is None:
            report.published += 1
        else:
            report.dropped[uid] = final_error
    return report
