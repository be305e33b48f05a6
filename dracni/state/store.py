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

A record that cannot be read (not JSON, a missing key its readers need, an unknown or newer
``schema``) raises ``BadRecord``.  Where a reader must go on without it (CNI DEL, an outbox
update), the record is moved into ``quarantine/`` (``StateDir.quarantine``): kept for the
operator (``dracni inspect`` lists it with its reason), never overwritten, out of every
reader's way.

Records are written atomically (temp file, fsync, rename, fsync of the directory) while the
state lock is held; readers never need the lock because a rename is atomic.  The service
groups the writes of concurrent kubelet calls into one lock hold (``batched()``): every record
is still written to a temp file and fsynced before it is renamed into place, but the fsyncs of
the batch run at the same time, and each directory is fsynced once.  The lock is held
only around record writes, never around delegate execs, so ADD/DEL of different pods do not
wait on each other for longer than a record write.

This module sits on the CNI hot path: it imports only ``os`` and ``json`` (and ``fcntl`` for
the lock, when a write needs it).
"""

from __future__ import annotations

import os

from .. import jsonio
from ..atomicfile import fsync_dir, read_if_exists, write_atomic
from . import records as R
from .records import SCHEMA_VERSION, attachment_key, claim_pod_keys, pod_index_keys

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~7 ms to import; annotations are strings (PEP 563)
    from collections.abc import Callable
    from typing import Any

    from .lock import Held, StateLock
    from .records import JSON, Attachment, DeviceFact, OutboxClaim, PodIndex, PreparedClaim, StatusOutbox

DIR_MODE = 0o700
FILE_MODE = 0o600
#: How long a writer waits for the state lock before giving up (seconds).
LOCK_TIMEOUT = 30.0


class StateError(Exception):
    """The state directory cannot be read or written."""


class BadRecord(StateError):
    """A record file that exists but cannot be read as its kind (``newer``: a newer dracni's)."""

    def __init__(self, message: str, path: str, newer: bool = False) -> None:
        super().__init__(message)
        self.path = path
        self.newer = newer


#: The record kind each directory holds (what ``_read`` checks a record against).
_KINDS = {"claims": R.PREPARED_CLAIM, "pods": R.POD_INDEX, "attachments": R.ATTACHMENT, "outbox": R.STATUS_OUTBOX}
QUARANTINE = "quarantine"


def _safe_component(value: str, what: str) -> str:
    if not value or "/" in value or value in (".", "..") or "\0" in value:
        raise StateError(f"{what} {value!r} cannot name a state record")
    return value


def _decode(data: bytes, path: str, kind: str | None = "") -> Any:
    """A record file's bytes as its record (``kind``: by default, its directory's), else BadRecord."""
    if kind == "":
        kind = _KINDS.get(os.path.basename(os.path.dirname(path)))
    try:
        record = jsonio.loads(data)
    except ValueError as exc:
        raise BadRecord(f"corrupt state record {path}: {exc}", path) from exc
    try:
        return R.check_record(record, path, kind)
    except R.RecordError as exc:
        raise BadRecord(str(exc), path, newer=isinstance(exc, R.NewerRecord)) from exc


class StateDir:
    """Typed access to the records of one state directory."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self._lock: StateLock | None = None  # made on the first write: reads take no lock
        #: path -> new bytes (None: deleted) while a ``batched()`` block defers its writes
        self._pending: dict[str, bytes | None] | None = None
        #: Called as ``(record path, quarantined path, reason)`` after a record was moved aside
        #: (the CNI plugin logs one line; the service counts it).
        self.on_quarantine: Callable[[str, str, str], None] | None = None

    # -- paths ---------------------------------------------------------------------------
    @property
    def ipam_dir(self) -> str:
        """Where the IPAM of claim configs keeps its files (dracni sets their ``dataDir``)."""
        return os.path.join(self.root, "ipam")

    def _path(self, kind: str, stem: str) -> str:
        return os.path.join(self.root, kind, _safe_component(stem, kind[:-1]) + ".json")

    def ensure(self) -> None:
        """Create the directory tree with owner-only permissions."""
        for sub in ("", "claims", "pods", "attachments", "outbox", "cache"):
            path = os.path.join(self.root, sub)
            try:
                os.makedirs(path, mode=DIR_MODE, exist_ok=True)
                os.chmod(path, DIR_MODE)
            except OSError as exc:
                raise StateError(f"cannot create state directory {path}: {exc.strerror}") from exc

    # -- locking -------------------------------------------------------------------------
    def locked(self, timeout: float = LOCK_TIMEOUT) -> Held:
        """``with state.locked():`` holds the state lock (re-entrant within this object)."""
        if self._lock is None:
            from .lock import StateLock  # deferred: a pass-through ADD only reads

            self._lock = StateLock(os.path.join(self.root, "state.lock"), prepare=self.ensure, error=StateError)
        return self._lock.held(timeout)

    def batched(self) -> Batch:
        """``with state.locked(), state.batched():`` stages the block's record writes and
        deletions (reads see them) and applies them on exit; see ``Batch``."""
        return Batch(self)

    # -- low-level record I/O --------------------------------------------------------------
    def _read(self, path: str) -> Any:
        if self._pending is not None and path in self._pending:
            data = self._pending[path]
        else:
            data = read_if_exists(path, StateError)
        if data is None:
            return None
        return _decode(data, path)

    def quarantine(self, path: str) -> str | None:
        """Move the unreadable record at ``path`` into ``quarantine/``, under the state lock.

        Returns where it went; None when, under the lock, it is gone or readable after all (a
        writer replaced it meanwhile).  The file is renamed, never rewritten: a newer dracni's
        record survives intact for the operator (or that newer dracni) to take back.
        """
        import time

        with self.locked():
            try:
                data = read_if_exists(path, StateError)
                if data is None:
                    return None
                _decode(data, path)
                return None
            except BadRecord as exc:
                reason = str(exc)
            directory = os.path.join(self.root, QUARANTINE)
            now = time.time_ns()
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now // 10**9)) + f".{now % 10**9:09d}Z"
            kind = os.path.basename(os.path.dirname(path))
            target = os.path.join(directory, f"{kind}+{os.path.basename(path)[:-5]}.{stamp}.json")
            try:
                os.makedirs(directory, mode=DIR_MODE, exist_ok=True)
                os.rename(path, target)
                fsync_dir(directory)
                fsync_dir(os.path.dirname(path))
            except OSError as exc:
                raise StateError(f"cannot quarantine {path}: {exc.strerror}") from exc
        if self.on_quarantine is not None:
            self.on_quarantine(path, target, reason)
        return target

    def _read_or_quarantine(self, path: str) -> Any:
        """``_read``, but an unreadable record is quarantined and reads as absent."""
        try:
            return self._read(path)
        except BadRecord as exc:
            self.quarantine(exc.path)
            return None

    def quarantine_count(self) -> int:
        """How many records sit in quarantine/ (a directory listing, no reads)."""
        try:
            return sum(1 for n in os.listdir(os.path.join(self.root, QUARANTINE)) if n.endswith(".json"))
        except OSError:
            return 0

    def list_quarantine(self) -> list[tuple[str, str]]:
        """Quarantined records: (file path, why it could not be read), oldest name first."""
        directory = os.path.join(self.root, QUARANTINE)
        try:
            names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StateError(f"cannot list {directory}: {exc.strerror}") from exc
        out = []
        for name in names:
            path = os.path.join(directory, name)
            kind_dir = name.split("+", 1)[0]
            try:
                data = read_if_exists(path, StateError)
                _decode(data or b"", path, _KINDS.get(kind_dir))
                reason = "readable now"
            except StateError as exc:
                reason = str(exc)
            out.append((path, reason))
        return out

    def _write(self, path: str, record: Any, *, sync_dir: bool = True) -> None:
        """Atomically replace ``path`` with ``record``; the caller holds the lock.  ``sync_dir``:
        see ``write_atomic`` (a batch syncs every directory it touches)."""
        assert self._lock is not None and self._lock.is_mine(), "state writes must hold the state lock"
        record["schema"] = SCHEMA_VERSION
        if self._pending is not None:
            self._pending[path] = jsonio.dumps(record, pretty=True)
            return
        try:
            write_atomic(path, jsonio.dumps(record, pretty=True), FILE_MODE, sync_dir=sync_dir)
        except OSError as exc:
            raise StateError(f"cannot write {path}: {exc.strerror}") from exc

    def _delete(self, path: str) -> bool:
        assert self._lock is not None and self._lock.is_mine(), "state writes must hold the state lock"
        if self._pending is not None:
            existed = self._pending[path] is not None if path in self._pending else os.path.exists(path)
            self._pending[path] = None
            return existed
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StateError(f"cannot remove {path}: {exc.strerror}") from exc
        fsync_dir(os.path.dirname(path))
        return True

    def _list(self, kind: str) -> list[str]:
        try:
            names = os.listdir(os.path.join(self.root, kind))
        except FileNotFoundError:
            names = []
        except OSError as exc:
            raise StateError(f"cannot list {self.root}/{kind}: {exc.strerror}") from exc
        stems = {n[:-5] for n in names if n.endswith(".json")}
        if self._pending:
            directory = os.path.join(self.root, kind)
            for path, data in self._pending.items():
                if os.path.dirname(path) == directory:
                    stem = os.path.basename(path)[:-5]
                    (stems.add if data is not None else stems.discard)(stem)
        return sorted(stems)

    # -- prepared claims and the pod index -------------------------------------------------
    def read_claim(self, uid: str) -> PreparedClaim | None:
        record: PreparedClaim | None = self._read(self._path("claims", uid))
        return record

    def list_claims(self, bad: list[BadRecord] | None = None) -> list[PreparedClaim]:
        """Every prepared claim; with ``bad``, unreadable ones are collected there instead of raising."""
        return self._list_records("claims", bad)

    def _list_records(self, kind: str, bad: list[BadRecord] | None, prefix: str | None = None) -> list[Any]:
        stems = [s for s in self._list(kind) if prefix is None or s.startswith(prefix)]
        return self._read_each([self._path(kind, stem) for stem in stems], bad)

    def _read_each(self, paths: list[str], bad: list[BadRecord] | None) -> list[Any]:
        """The records at ``paths`` that exist, in that order; with ``bad``, unreadable ones are
        collected there instead of raising."""
        records = []
        for path in paths:
            try:
                record = self._read(path)
            except BadRecord as exc:
                if bad is None:
                    raise
                bad.append(exc)
                continue
            if record is not None:
                records.append(record)
        return records

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

    def put_claims(self, records: list[PreparedClaim]) -> None:
        """Store prepared claims and index them under every pod they are reserved for.

        One lock hold and one write per pod index file however many claims a pod has
        (kubelet prepares all of a pod's claims in one call).
        """
        with self.locked():
            adds: dict[str, list[str]] = {}
            removes: dict[str, list[str]] = {}
            for record in records:
                # an unreadable old record is moved aside: kubelet's next prepare must not fail forever
                old: PreparedClaim | None = self._read_or_quarantine(self._path("claims", record["uid"]))
                record.setdefault("kind", R.PREPARED_CLAIM)  # type: ignore[typeddict-item]
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
                    self.quarantine(exc.path)  # are found by listing the indexes
                    old, keys = None, self._index_keys_naming(uid)
                removed[uid] = old
                for key in keys:
                    removes.setdefault(key, []).append(uid)
                if old is not None:
                    self._delete(path)
            for key in sorted(removes):
                self._index_update(key, remove=removes[key])
            return removed

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
    def read_outbox(self, claim_uid: str) -> StatusOutbox | None:
        record: StatusOutbox | None = self._read(self._path("outbox", claim_uid))
        return record

    def list_outbox(self, bad: list[BadRecord] | None = None) -> list[StatusOutbox]:
        """Every outbox record; with ``bad``, unreadable ones are collected there instead of raising."""
        return self._list_records("outbox", bad)

    def has_outbox(self, claim_uid: str) -> bool:
        """An outbox record of the claim exists (readable or not: updating it quarantines a bad one)."""
        path = self._path("outbox", claim_uid)
        if self._pending is not None and path in self._pending:
            return self._pending[path] is not None
        return os.path.exists(path)

    def update_outbox(
        self,
        claim: OutboxClaim,
        change: Callable[[list[DeviceFact]], list[DeviceFact]],
        *,
        sync_dir: bool = True,
    ) -> StatusOutbox:
        """Apply ``change`` to the claim's desired status facts and bump its sequence number.

        ``claim`` is ``{"uid", "namespace", "name"}`` (plus ``driver``).  The publisher
        compares ``seq`` with ``publishedSeq`` so a newer state is never overwritten by an
        older one, and an entry survives restarts until it is published.  An unreadable record
        is quarantined and the claim's facts start afresh (the publisher then sends what this
        change leaves).

        ``sync_dir=False`` (the CNI plugin's updates, see ``write_atomic``): a crash may lose
        the update.  It then only concerns attachments the crash ended with their pods; the
        claim's facts converge with the next update (the publisher sends the whole list) and
        the publisher's own writes (``mark_published``) are fully durable.
        """
        with self.locked():
            path = self._path("outbox", claim["uid"])
            record: StatusOutbox = self._read_or_quarantine(path) or R.new_outbox(claim)
            record["devices"] = change(list(record["devices"]))
            record["seq"] += 1
            self._write(path, record, sync_dir=sync_dir)
            return record

    def end_lasting_failures(self, claim_uids: list[str]) -> None:
        """The claims were unprepared: drop the failures their pods' DELs left in the outbox
        (``records.retract_facts``), so that the publisher clears them from the status."""
        with self.locked():
            for uid in claim_uids:
                path = self._path("outbox", uid)
                record: StatusOutbox | None = self._read_or_quarantine(path)
                if record is None or not any(f.get("lasting") for f in record["devices"]):
                    continue
                record["devices"] = R.end_lasting(record["devices"])
                record["seq"] += 1
                self._write(path, record)

    def mark_published(self, claim_uid: str, seq: int) -> bool:
        """Record that ``seq`` reached the status sink; drop the entry when nothing is left.

        Returns False when a newer state arrived meanwhile (it stays pending).
        """
        with self.locked():
            path = self._path("outbox", claim_uid)
            record: StatusOutbox | None = self._read(path)
            if record is None or record["seq"] < seq:
                return False
            record["publishedSeq"] = max(record["publishedSeq"], seq)
            if record["seq"] == record["publishedSeq"] and not record["devices"]:
                self._delete(path)
            else:
                self._write(path, record)
            return record["seq"] == seq

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


class Batch:
    """The record writes of one ``with`` block, applied together (``StateDir.batched()``).

    Inside the block writes and deletions are staged in memory, and reads of the state dir
    object see them.  On a clean exit every new record goes to a temp file; the temp files
    are fsynced at the same time (the file system commits them together), then renamed into
    place, deletions done, and each directory touched fsynced once.  If a temp file cannot be
    written or synced nothing is applied (StateError).  An exception in the block discards
    what it staged.  Only the service uses it (it imports threads); the state lock must be
    held around the block.
    """

    def __init__(self, state: StateDir) -> None:
        self.state = state

    def __enter__(self) -> Batch:
        assert self.state._pending is None, "batches do not nest"
        assert self.state._lock is not None and self.state._lock.is_mine(), "a batch must hold the state lock"
        self.state._pending = {}
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        pending, self.state._pending = self.state._pending or {}, None
        if exc_type is None and pending:
            apply_together(pending)


#: The threads that fsync a batch's files at the same time (made by the first batch: the
#: service's; the CNI plugin never batches).
_SYNC_THREADS = 8
_sync_pool: Any = None


def apply_together(pending: dict[str, bytes | None]) -> None:
    """Write, fsync (in parallel), rename and delete; then fsync each directory once."""
    global _sync_pool
    if _sync_pool is None:
        from concurrent.futures import ThreadPoolExecutor

        _sync_pool = ThreadPoolExecutor(max_workers=_SYNC_THREADS, thread_name_prefix="dracni-fsync")
    pool = _sync_pool
    writes = {path: data for path, data in pending.items() if data is not None}
    temps = {
        path: os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp{os.getpid()}") for path in writes
    }

    def stage(path: str) -> None:
        fd = os.open(temps[path], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
        try:
            view = memoryview(writes[path])
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)

    try:
        list(pool.map(stage, writes))
    except OSError as exc:
        for temp in temps.values():
            try:
                os.unlink(temp)
            except OSError:
                pass
        raise StateError(f"cannot write state records: {exc}") from exc
    try:
        for path in pending:
            if path in temps:
                os.rename(temps[path], path)
            else:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
        list(pool.map(fsync_dir, sorted({os.path.dirname(path) for path in pending})))
    except OSError as exc:
        raise StateError(f"cannot apply state records: {exc}") from exc
