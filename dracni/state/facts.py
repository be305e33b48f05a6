"""Claim-status facts: what the status outbox holds, how ADD, DEL and unprepare change it.

The CNI plugin does not write ``status.devices`` itself: per claim it keeps the full desired
set of *device facts* in the claim's StatusOutbox record (``outbox/<claimUID>.json``, shape in
``records.py``), and the service's publisher turns them into entries (``status/entries.py``)
and sends them (``status/drain.py``).  This module is the one home of what a fact is and how
facts merge, so the writers (the plugin's intents below, the kubelet plugin's unprepare) and
the readers (entries, drain, the IPAMClaim write-back) agree on it:

- ``entry_key``: the ``status.devices`` entry a fact is about, (pool, device, shareID), with
  an absent shareID spelled ``""`` everywhere (a fact without one and an entry whose shareID
  is ``""`` are the same entry; the API server's ``driver/pool/device[/shareID]`` id agrees);
- ``ClaimRef``: the claim identity records, the outbox and the status sinks name;
- the intents, each one read-modify-write of the outbox under the state lock: ``attached``
  and ``failed`` (ADD), ``detached`` and ``detached_unrecorded`` (DEL), ``unprepared``
  (the claim's unprepare ends its lasting failures), ``published`` (the publisher's mark).

It sits on the CNI hot path: no run-time import beyond ``clock`` (and ``addresses`` when a
persistent attachment is DELed); the shapes are for the type checker only.
"""

from __future__ import annotations

from ..clock import now_rfc3339
from .records import devices_by_claim

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~7 ms to import: the shapes exist for the type checker only
    from collections.abc import Callable, Mapping
    from typing import Any, NotRequired, TypedDict

    from .records import AttachedDevice, Attachment, DeviceFact, StatusOutbox
    from .store import StateDir

    class ClaimRef(TypedDict):
        """A claim as records and status sinks name it."""

        uid: str
        namespace: str
        name: str

    class OutboxClaim(ClaimRef):
        """A claim as an outbox update names it: its identity and the driver of its entries."""

        driver: NotRequired[str | None]

    Change = Callable[[list[DeviceFact]], list[DeviceFact]]
    EntryKey = tuple[str, str, str]


# -- identities ---------------------------------------------------------------------------
def claim_ref(uid: str, namespace: str, name: str) -> ClaimRef:
    return {"uid": uid, "namespace": namespace, "name": name}


def outbox_claim(claim: ClaimRef, driver: str | None) -> OutboxClaim:
    return {"uid": claim["uid"], "namespace": claim["namespace"], "name": claim["name"], "driver": driver}


def entry_key(item: Mapping[str, Any]) -> EntryKey:
    """The ``status.devices`` entry a fact (or an entry) is about: (pool, device, shareID).

    An absent or null shareID is ``""``.  A claim reserved for several pods has one fact per
    pod's attachment under the same key (told apart by ``containerID``); the status entry is
    composed from all of them (``status/entries.py status_devices``).
    """
    return (str(item.get("pool") or ""), str(item.get("device") or ""), str(item.get("shareID") or ""))


def new_outbox(claim: OutboxClaim) -> StatusOutbox:
    return {
        "kind": "StatusOutbox",
        "claim": claim_ref(claim["uid"], claim["namespace"], claim["name"]),
        "driver": claim.get("driver"),
        "seq": 0,
        "publishedSeq": 0,
        "devices": [],
    }


# -- facts --------------------------------------------------------------------------------
def device_fact(record: Attachment, dev: AttachedDevice) -> DeviceFact:
    """What the claim status should say about ``dev`` after this ADD (ready or failed)."""
    pod = record.get("pod") or {}
    fact: DeviceFact = {
        "request": dev["request"],
        "pool": dev["pool"],
        "device": dev["device"],
        "shareID": dev.get("shareID"),
        "ifName": dev["ifName"],
        "ready": record["state"] == "ready" and dev.get("error") is None,
        "result": dev.get("result"),
        "error": dev.get("error"),
        "containerID": record["containerID"],
        "podUID": pod.get("uid"),
        "podName": pod.get("name"),
        "updatedAt": record["updatedAt"],
    }
    if dev.get("persistentIPs"):
        fact["ipamClaim"] = dev.get("ipamClaim")
        fact["keptIPs"] = list(dev.get("requestedIPs") or [])
    return fact


def detached_fact(record: Attachment, dev: AttachedDevice, kept_ips: list[str], updated_at: str) -> DeviceFact:
    """A persistent attachment after DEL: Ready=False (Detached), its addresses kept."""
    fact = device_fact(record, dev)
    fact["ready"] = False
    fact["detached"] = True
    fact["result"] = None
    fact["error"] = None
    fact["updatedAt"] = updated_at
    fact["keptIPs"] = kept_ips
    return fact


def is_failure(fact: DeviceFact) -> bool:
    """A fact saying an ADD failed (a Detached one is no failure)."""
    return not fact.get("ready") and not fact.get("detached")


# -- merges (pure) ------------------------------------------------------------------------
def upsert_facts(old: list[DeviceFact], new: list[DeviceFact]) -> list[DeviceFact]:
    """After an ADD: ``new`` replace the same container's facts for their devices, and the
    Detached facts and lasting failures earlier pods left there; other pods' attachments stay."""
    containers = {(entry_key(f), f.get("containerID")) for f in new}
    keys = {entry_key(f) for f in new}

    def superseded(fact: DeviceFact) -> bool:
        return (entry_key(fact), fact.get("containerID")) in containers or (
            entry_key(fact) in keys and bool(fact.get("detached") or fact.get("lasting"))
        )

    return [f for f in old if not superseded(f)] + new


def retract_facts(old: list[DeviceFact], container_id: str, kept: list[DeviceFact]) -> list[DeviceFact]:
    """After DEL: drop the container's facts, except its failures.

    A failed ADD's facts *last* (marked ``lasting``): the runtime DELs a failed ADD within
    milliseconds, and the claim status must go on saying why the pod has no interface until the
    next ADD of that device or the claim's unprepare (``end_lasting``).  One lasting failure per
    device: a newer one replaces an older one.  A ``kept`` (Detached) fact takes its device's
    place only when no other pod is still attached to that device and the ADD did not fail.
    """
    failed: list[DeviceFact] = []
    for fact in old:
        if fact.get("containerID") == container_id and is_failure(fact):
            lasting: DeviceFact = {**fact, "lasting": True}
            failed.append(lasting)
    failed_keys = {entry_key(f) for f in failed}
    remaining = [
        f
        for f in old
        if f.get("containerID") != container_id and not (f.get("lasting") and entry_key(f) in failed_keys)
    ]
    live = {entry_key(f) for f in remaining if not f.get("detached") and not f.get("lasting")}
    kept = [k for k in kept if entry_key(k) not in live and entry_key(k) not in failed_keys]
    keys = {entry_key(k) for k in kept}
    return [f for f in remaining if entry_key(f) not in keys] + failed + kept


def end_lasting(old: list[DeviceFact]) -> list[DeviceFact]:
    """The claim was unprepared: the failures its pods left go."""
    return [f for f in old if not f.get("lasting")]


# -- the outbox read-modify-write -----------------------------------------------------------
def update_outbox(state: StateDir, claim: OutboxClaim, change: Change, *, sync_dir: bool = True) -> StatusOutbox:
    """Apply ``change`` to the claim's desired status facts and bump its sequence number.

    The publisher compares ``seq`` with ``publishedSeq`` so a newer state is never overwritten
    by an older one, and an entry survives restarts until it is published.  An unreadable
    record is quarantined and the claim's facts start afresh (the publisher then sends what
    this change leaves).

    ``sync_dir=False`` (the CNI plugin's ADD, see ``write_atomic``): a crash may lose the
    update.  It then only concerns attachments the crash ended with their pods; the claim's
    facts converge with the next update (the publisher sends the whole list) and the
    publisher's own writes (``published``) are fully durable.
    """
    with state.locked():
        record = state.read_outbox(claim["uid"], quarantine=True) or new_outbox(claim)
        record["devices"] = change(list(record["devices"]))
        record["seq"] += 1
        state.put_outbox(record, sync_dir=sync_dir)
        return record


def attached(state: StateDir, record: Attachment) -> None:
    """After a successful ADD: upsert one fact per device into
    each claim's outbox.  Not made durable: a crash may lose it (see ``update_outbox``)."""
    for devices in devices_by_claim(record).values():
        facts = [device_fact(record, dev) for dev in devices]
        claim = outbox_claim(devices[0]["claim"], devices[0].get("driver"))
        # the lambda is called at once (B023)
        update_outbox(state, claim, lambda old: upsert_facts(old, facts), sync_dir=False)  # noqa: B023


def failed(state: StateDir, record: Attachment) -> None:
    """After a failed ADD was rolled back: its facts say Ready=False with the CNI error (and
    last past the runtime's DEL, see ``retract_facts``)."""
    attached(state, record)


def detached(state: StateDir, record: Attachment) -> None:
    """After DEL (or GC) of ``record``: its facts go, but a persistent attachment's addresses
    stay, Detached, and a failed ADD's facts last (``retract_facts``)."""
    cid = record["containerID"]
    for claim_uid, devices in devices_by_claim(record).items():
        kept_facts = []
        for dev in devices:
            if not dev.get("persistentIPs"):
                continue
            from ..addresses import result_addresses  # deferred: only persistent attachments need it

            kept = result_addresses(dev.get("result")) or list(dev.get("requestedIPs") or [])
            if kept:
                kept_facts.append(detached_fact(record, dev, kept, now_rfc3339()))
        if not state.has_outbox(claim_uid) and not kept_facts:
            continue
        claim = outbox_claim(devices[0]["claim"], devices[0].get("driver"))
        update_outbox(state, claim, lambda old: retract_facts(old, cid, kept_facts))  # noqa: B023 (called at once)


def detached_unrecorded(state: StateDir, claim_uids: set[str] | list[str], container_id: str) -> None:
    """DEL without an attachment record (state dir wiped): the container's facts go from the
    outboxes of ``claim_uids`` that have one."""
    for claim_uid in claim_uids:
        if state.has_outbox(claim_uid):
            claim = outbox_claim(claim_ref(claim_uid, "", ""), None)
            update_outbox(state, claim, lambda facts: retract_facts(facts, container_id, []))


def unprepared(state: StateDir, claim_uids: list[str]) -> None:
    """The claims were unprepared: drop the failures their pods' DELs left in the outbox
    (``retract_facts``), so that the publisher clears them from the status."""
    with state.locked():
        for uid in claim_uids:
            record = state.read_outbox(uid, quarantine=True)
            if record is None or not any(f.get("lasting") for f in record["devices"]):
                continue
            record["devices"] = end_lasting(record["devices"])
            record["seq"] += 1
            state.put_outbox(record)


def published(state: StateDir, claim_uid: str, seq: int) -> bool:
    """Record that ``seq`` reached the status sink; drop the record when nothing is left.

    Returns False when a newer state arrived meanwhile (it stays pending).
    """
    with state.locked():
        record = state.read_outbox(claim_uid)
        if record is None or record["seq"] < seq:
            return False
        record["publishedSeq"] = max(record["publishedSeq"], seq)
        if record["seq"] == record["publishedSeq"] and not record["devices"]:
            state.remove_outbox(claim_uid)
        else:
            state.put_outbox(record)
        return record["seq"] == seq
