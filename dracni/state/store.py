"""The on-node state directory shared by the CNI plugin and the kubelet plugin service.

Layout (schema: ``spec/state-records.schema.json``)::

    <root>/state.lock                     flock(2) guarding every write
    <root>/claims/<claimUID>.json         PreparedClaim: what prepare resolved for a claim
    <root>/pods/uid_<podUID>.json         PodIndex: claim UIDs of a pod, O(1) by pod UID
    <root>/pods/name_<ns>_<name>.json     PodIndex: the same, by namespace/name
    <root>/attachments/<net>+<cid>+<if>.json  Attachment: all that DEL/CHECK/GC need
    <root>/outbox/<claimUID>.json         StatusOutbox: status.devices facts to publish
    <root>/cache/plugin-versions.json     delegate VERSION answers, keyed by binary identity
    <root>/quarantine/<dir>+<stem>.<time>.json  a record that could not be read, moved aside

``StateDir`` reads, puts and removes each kind of record; how a record file is read, written
atomically under the state lock, batched and quarantined is its base, ``files.py``.  What the
status outbox's facts mean and how they change is ``facts.py``, which reads and writes the
outbox through ``read_outbox``/``put_outbox``/``remove_outbox`` here.

This module sits on the CNI hot path: it imports only ``os`` and ``json`` (and ``fcntl`` for
the lock, when a write needs it).
"""

from __future__ import annotations

import os

from . import records as R
from .files import FILE_MODE, RecordFiles
from .files import LOCK_TIMEOUT as LOCK_TIMEOUT
from .files import BadRecord as BadRecord
from .files import StateError as StateError
from .records import SCHEMA_VERSION as SCHEMA_VERSION
from .records import attachment_key, claim_pod_keys, pod_index_keys

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~7 ms to import; annotations are strings (PEP 563)
    from collections.abc import Mapping

    from .records import JSON, Attachment, PodIndex, PreparedClaim, StatusOutbox


class StateDir(RecordFiles):
    """Typed access to the records of one state directory."""

    @property
    def ipam_dir(self) -> str:
        """Where the IPAM of claim configs keeps its files (dracni sets their ``dataDir``)."""
        return os.path.join(self.root, "ipam")

    # -- prepared claims and the pod index -------------------------------------------------
    def read_claim(self, uid: str) -> PreparedClaim | None:
        record: PreparedClaim | None = self._read(self._path("claims", uid))
        return record

    def list_claims(self, bad: list[BadRecord] | None = None) -> list[PreparedClaim]:
        """Every prepared claim; with ``bad``, unreadable ones are collected there instead of raising."""
        return self._list_records("claims", bad)

    def pod_claim_uids(self, pod_uid: str | None, namespace: str | None, name: str | None) -> list[str]:
        """Claim UIDs prepared for a pod; the name is consulted only when the UID is unknown."""
        keys = pod_index_keys(pod_uid, namespace, name)
        if pod_uid:
            keys = keys[:1]
        for key in keys:
            index = self._read(self._path("pods", key))
            if index is not None:
                return list(index.get("claims", []))
        return []

    def pod_claims(self, pod_uid: str | None, namespace: str | None, name: str | None) -> list[PreparedClaim]:
        return self.read_claims(self.pod_claim_uids(pod_uid, namespace, name))

    def read_claims(self, uids: list[str], bad: list[BadRecord] | None = None) -> list[PreparedClaim]:
        """The prepared claims of ``uids`` that exist, in that order; with ``bad``, unreadable
        ones are collected there instead of raising."""
        records: list[PreparedClaim] = self._read_each([self._path("claims", uid) for uid in uids], bad)
        return records

    def put_claim(self, record: PreparedClaim) -> None:
        self.put_claims([record])

    def put_claims(self, records: list[PreparedClaim], known: Mapping[str, PreparedClaim | None] | None = None) -> None:
        """Store prepared claims and index them under every pod they are reserved for.

        One lock hold and one write per pod index file however many claims a pod has
        (kubelet prepares all of a pod's claims in one call).  ``known``: the records of these
        UIDs as the caller read them in the same lock hold (None: none there), not read again.
        """
        with self.locked():
            adds: dict[str, list[str]] = {}
            removes: dict[str, list[str]] = {}
            for record in records:
                # an unreadable old record is moved aside: kubelet's next prepare must not fail forever
                old: PreparedClaim | None
                try:
                    if known is not None and record["uid"] in known:
                        old = known[record["uid"]]
                    else:
                        old = self._read(self._path("claims", record["uid"]))
                except BadRecord as exc:
                    if exc.newer:  # a newer dracni's: never overwritten
                        raise
                    old = None
                    self._set_aside(exc, "prepare")
                record.setdefault("kind", R.PREPARED_CLAIM)  # type: ignore[typeddict-item]
                if old is not None:
                    R.keep_unknown(old, record)  # a newer release's optional fields survive
                self._write(self._path("claims", record["uid"]), record)
                new_keys = claim_pod_keys(record)
                for key in new_keys:
                    adds.setdefault(key, []).append(record["uid"])
                for key in (claim_pod_keys(old) if old else set()) - new_keys:
                    removes.setdefault(key, []).append(record["uid"])
            for key in sorted(set(adds) | set(removes)):
                self._index_update(key, add=adds.get(key, []), remove=removes.get(key, []))

    def remove_claim(self, uid: str) -> PreparedClaim | None:
        """Forget a prepared claim (attachments stay: DEL may still come)."""
        return self.remove_claims([uid]).get(uid)

    def remove_claims(self, uids: list[str]) -> dict[str, PreparedClaim | None]:
        with self.locked():
            removed: dict[str, PreparedClaim | None] = {}
            removes: dict[str, list[str]] = {}
            for uid in uids:
                path = self._path("claims", uid)
                try:
                    old: PreparedClaim | None = self._read(path)
                    keys = claim_pod_keys(old) if old else set()
                except BadRecord as exc:  # moved aside, so that unprepare never sticks; its pods
                    self._set_aside(exc, "unprepare")  # are found by listing the indexes
                    old, keys = None, self._index_keys_naming(uid)
                removed[uid] = old
                for key in keys:
                    removes.setdefault(key, []).append(uid)
                if old is not None:
                    self._delete(path)
            for key in sorted(removes):
                self._index_update(key, remove=removes[key])
            return removed

    def _set_aside(self, exc: BadRecord, by: str) -> None:
        """Quarantine a prepared claim's record that ``by`` must go on without, and say so: the
        CNI plugin's ``on_quarantine`` logs it; elsewhere (the service) one warning line here."""
        target = self.quarantine(exc.path)
        if target is not None and self.on_quarantine is None:
            import logging  # deferred: the CNI hot path never gets here

            logging.getLogger(__name__).warning("%s moved an unreadable state record aside to %s: %s", by, target, exc)

    def _index_keys_naming(self, uid: str) -> set[str]:
        """The pod indexes that list claim ``uid`` (a directory scan: only for a claim whose own
        record, which names its pods, is unreadable)."""
        keys = set()
        for stem in self._list("pods"):
            try:
                index = self._read(self._path("pods", stem))
            except BadRecord:
                continue
            if index is not None and uid in index.get("claims", []):
                keys.add(stem)
        return keys

    def _index_update(
        self, key: str, add: tuple[str, ...] | list[str] = (), remove: tuple[str, ...] | list[str] = ()
    ) -> None:
        path = self._path("pods", key)
        index: PodIndex = self._read(path) or R.new_pod_index()
        claims: list[str] = [uid for uid in index["claims"] if uid not in remove]
        claims += [uid for uid in add if uid not in claims]
        if claims == index["claims"] and os.path.exists(path):
            return
        index["claims"] = claims
        if claims:
            self._write(path, index)
        else:
            self._delete(path)

    # -- attachments ---------------------------------------------------------------------
    def read_attachment(self, network: str, container_id: str, ifname: str) -> Attachment | None:
        record: Attachment | None = self._read(self._path("attachments", attachment_key(network, container_id, ifname)))
        return record

    def list_attachments(self, network: str | None = None, bad: list[BadRecord] | None = None) -> list[Attachment]:
        """Attachments (of ``network``); with ``bad``, unreadable ones are collected there."""
        return self._list_records("attachments", bad, None if network is None else network + "+")

    def put_attachment(self, record: Attachment, *, ahead: bool = False) -> None:
        """Write an attachment record.  ``ahead`` (ADD's write-ahead): a record already there
        that a newer dracni wrote is never overwritten (BadRecord with ``newer``); an
        unreadable one is quarantined first.

        Only the write-ahead is made durable with its directory's fsync (before the first
        delegate runs, DEL must find the record even after a crash).  Every later write of the
        attachment (ready, failed, what an incomplete DEL released) replaces it atomically but
        may be lost in a crash, leaving an earlier version, which is a safe answer: DEL of an
        ``adding`` record stops leftovers and DELs every device, and DELs of devices already
        released are no-ops.  That saves the ADD an fsync (each 0.5-3 ms here).
        """
        record.setdefault("kind", R.ATTACHMENT)  # type: ignore[typeddict-item]
        path = self._path("attachments", attachment_key(record["network"], record["containerID"], record["ifName"]))
        with self.locked():
            if ahead and os.path.exists(path):
                try:
                    self._read(path)
                except BadRecord as exc:
                    if exc.newer:
                        raise
                    self.quarantine(path)
            self._write(path, record, sync_dir=ahead)

    def remove_attachment(self, network: str, container_id: str, ifname: str) -> bool:
        with self.locked():
            return self._delete(self._path("attachments", attachment_key(network, container_id, ifname)))

    # -- status outbox -------------------------------------------------------------------
    def read_outbox(self, claim_uid: str, *, quarantine: bool = False) -> StatusOutbox | None:
        """The claim's outbox record; ``quarantine``: an unreadable one is moved aside and
        reads as absent (an update starts the claim's facts afresh)."""
        path = self._path("outbox", claim_uid)
        record: StatusOutbox | None = self._read_or_quarantine(path) if quarantine else self._read(path)
        return record

    def list_outbox(self, bad: list[BadRecord] | None = None) -> list[StatusOutbox]:
        """Every outbox record; with ``bad``, unreadable ones are collected there instead of raising."""
        return self._list_records("outbox", bad)

    def has_outbox(self, claim_uid: str) -> bool:
        """An outbox record of the claim exists (readable or not: updating it quarantines a bad one)."""
        return self._exists(self._path("outbox", claim_uid))

    def put_outbox(self, record: StatusOutbox, *, sync_dir: bool = True) -> None:
        """Write a claim's outbox record (``sync_dir``: see ``write_atomic``)."""
        with self.locked():
            self._write(self._path("outbox", record["claim"]["uid"]), record, sync_dir=sync_dir)

    def remove_outbox(self, claim_uid: str) -> bool:
        with self.locked():
            return self._delete(self._path("outbox", claim_uid))

    def pending_outbox(
        self, errors: dict[str, str] | None = None, quarantined: dict[str, str] | None = None
    ) -> list[StatusOutbox]:
        """Records whose newest state is not yet published.

        With ``errors``, an unreadable record is reported there (uid -> message) instead of
        failing the whole listing, so one corrupt file does not hold back every claim.  With
        ``quarantined``, an unreadable record is moved into quarantine/ and reported there
        (uid -> where it went and why): it would never become readable by waiting.
        """
        pending = []
        for uid in self._list("outbox"):
            try:
                record = self.read_outbox(uid)
            except BadRecord as exc:
                if quarantined is not None:
                    target = self.quarantine(exc.path)
                    if target is not None:
                        quarantined[uid] = f"moved aside to {target}: {exc}"
                    continue
                if errors is None:
                    raise
                errors[uid] = str(exc)
                continue
            except StateError as exc:
                if errors is None:
                    raise
                errors[uid] = str(exc)
                continue
            if record is not None and R.is_pending(record):
                pending.append(record)
        return pending

    # -- small caches ----------------------------------------------------------------------
    def read_cache(self, name: str) -> JSON:
        try:
            return self._read(self._path("cache", name)) or {}
        except StateError:
            return {}

    def write_cache(self, name: str, record: JSON) -> None:
        with self.locked():
            self._write(self._path("cache", name), record)

    # -- health --------------------------------------------------------------------------
    def check_usable(self) -> None:
        """Raise StateError unless records can be written here (used by CNI STATUS)."""
        self.ensure()
        with self.locked(timeout=5.0):
            probe = os.path.join(self.root, "cache", ".status-probe")
            try:
                fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
                os.write(fd, b"ok")
                os.close(fd)
                os.unlink(probe)
            except OSError as exc:
                raise StateError(f"state directory {self.root} is not writable: {exc.strerror}") from exc
