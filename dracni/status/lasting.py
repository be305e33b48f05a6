"""Failure status that lasts: a failed ADD's ``Ready=False`` entry outlives the teardown DEL.

The runtime DELs a failed ADD within tens of milliseconds, and that DEL retracts the failed
attachment's facts from the outbox: published as they are, the claim's entry would vanish
before anyone could read why the pod has no interface.  The service therefore remembers, per
claim and per (pool, device, shareID), the last failure entry it published and keeps
publishing it while the outbox has nothing newer to say about that device than "gone" or
"Detached".  The next Ready=True entry for the device replaces it; the claim's unprepare
(``forget``) or its deletion ends it.

The memory lives in the service process: a failure whose ADD and DEL both happened while the
service was down (or between two drains) is never seen, and a restart forgets what it held.
"""

from __future__ import annotations

import threading

from dracni.status.entries import READY, REASON_NOT_READY, Entry

TYPE_CHECKING = False
if TYPE_CHECKING:
    from dracni.state.records import ClaimRef

Key = tuple[str, str, str]


def entry_key(entry: Entry) -> Key:
    return (str(entry.get("pool") or ""), str(entry.get("device") or ""), str(entry.get("shareID") or ""))


def _ready_condition(entry: Entry) -> dict[str, str]:
    for condition in entry.get("conditions") or []:
        if condition.get("type") == READY:
            return dict(condition)
    return {}


def is_failure(entry: Entry) -> bool:
    """An entry saying an ADD failed (not a Detached one, which is no error)."""
    condition = _ready_condition(entry)
    return condition.get("status") == "False" and condition.get("reason") == REASON_NOT_READY


def is_ready(entry: Entry) -> bool:
    return _ready_condition(entry).get("status") == "True"


class LastingFailures:
    """Per claim: the failure entries to keep publishing (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, dict[Key, Entry]] = {}
        self._claims: dict[str, ClaimRef] = {}

    def compose(self, claim: ClaimRef, entries: list[Entry]) -> list[Entry]:
        """The entries to publish: ``entries`` plus the remembered failures they do not
        supersede.  A failure entry is remembered; a Ready=True one ends the memory of its
        device; a Detached one (the DEL of that failed ADD) does not."""
        uid = claim["uid"]
        with self._lock:
            kept = self._kept.setdefault(uid, {})
            by_key = {entry_key(e): e for e in entries}
            for key, entry in by_key.items():
                if is_failure(entry):
                    kept[key] = entry
                elif is_ready(entry):
                    kept.pop(key, None)
            for key, entry in kept.items():
                if key not in by_key or not is_ready(by_key[key]):
                    by_key[key] = entry
            if kept:
                self._claims[uid] = claim
            else:
                self._kept.pop(uid, None)
                self._claims.pop(uid, None)
            return [by_key[k] for k in sorted(by_key)]

    def forget(self, uid: str) -> ClaimRef | None:
        """Drop a claim's kept failures (unprepared, or gone); the claim if it had any."""
        with self._lock:
            self._kept.pop(uid, None)
            return self._claims.pop(uid, None)

    def holds(self, uid: str) -> bool:
        with self._lock:
            return bool(self._kept.get(uid))
