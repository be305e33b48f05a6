"""Record files of the state directory: where they live, how they are read, written and set aside.

``StateDir`` (``store.py``) is the typed, per-kind view of the state directory; this is its
base, which knows records only as files of a kind's directory (``claims/``, ``pods/``,
``attachments/``, ``outbox/``, ``cache/``; see ``store.py`` for the layout).

A record that cannot be read (not JSON, a missing key its readers need, an unknown or newer
``schema``) raises ``BadRecord``.  Where a reader must go on without it (CNI DEL, an outbox
update), the record is moved into ``quarantine/`` (``RecordFiles.quarantine``): kept for the
operator (``dracni inspect`` lists it with its reason), never overwritten, out of every
reader's way.

Records are written atomically (temp file, fsync, rename, fsync of the directory) while the
state lock is held; readers never need the lock because a rename is atomic.  The service
groups the writes of concurrent kubelet calls into one lock hold (``batched()``, the engine is
``batch.py``): while a batch is open, writes and deletions are staged in ``_pending`` and
reads see them, and a record missing from its directory's listing (taken once per batch) is
known absent without being opened.  The lock is held only around record writes, never around
delegate execs, so ADD/DEL of different pods do not wait on each other for longer than a
record write.

This module sits on the CNI hot path: it imports only ``os`` and ``json`` (and ``fcntl`` for
the lock, when a write needs it).  Records are indented JSON with sorted keys
(``encode_record``).
"""

from __future__ import annotations

import os
import stat
import sys

from .. import jsonio
from ..atomicfile import fsync_dir, read_if_exists, write_atomic
from . import records as R
from .records import SCHEMA_VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~7 ms to import; annotations are strings (PEP 563)
    from collections.abc import Callable
    from typing import Any

    from .batch import Batch
    from .lock import Held, StateLock

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


def encode_record(record: Any) -> bytes:
    """A record's file content: indented, keys sorted (``json.dumps(indent=2, sort_keys=True,
    ensure_ascii=False)``).

    In a process that has orjson loaded already (the service: the API's JSON), orjson writes
    it, ~10x faster than ``jsonio``'s pure-Python indenting (which was a tenth of a prepare's
    CPU); the CNI plugin does not import orjson for one record.  The bytes are the same, but
    for a float's exponent (``1e16`` against ``1e+16``: the same number to every reader);
    what orjson does not take on (an integer beyond 64 bits, a key that is not a string,
    deep nesting, a type other than the JSON ones) goes to ``jsonio``, which words the
    refusal as ``json`` does.  A record never holds NaN or Infinity (its readers refuse them,
    the API server never serves them), which orjson would write as ``null``.
    """
    orjson = sys.modules.get("orjson")
    if orjson is not None:
        # A dataclass, datetime or subclass of a JSON type raises, as in ``json``, instead of
        # being converted.
        option = (
            orjson.OPT_INDENT_2
            | orjson.OPT_SORT_KEYS
            | orjson.OPT_PASSTHROUGH_DATACLASS
            | orjson.OPT_PASSTHROUGH_DATETIME
            | orjson.OPT_PASSTHROUGH_SUBCLASS
        )
        try:
            data: bytes = orjson.dumps(record, option=option)
            return data
        except orjson.JSONEncodeError:
            pass
    return jsonio.dumps(record, pretty=True)


class RecordFiles:
    """The record files of one state directory (``StateDir`` adds the per-kind access)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self._lock: StateLock | None = None  # made on the first write: reads take no lock
        #: path -> new bytes (None: deleted) while a ``batched()`` block defers its writes
        self._pending: dict[str, bytes | None] | None = None
        #: directory -> the names in it, listed once per ``batched()`` block (under the lock)
        self._listed: dict[str, frozenset[str]] | None = None
        #: Called as ``(record path, quarantined path, reason)`` after a record was moved aside
        #: (the CNI plugin logs one line; the service counts it).
        self.on_quarantine: Callable[[str, str, str], None] | None = None

    # -- paths ---------------------------------------------------------------------------
    def _path(self, kind: str, stem: str) -> str:
        return os.path.join(self.root, kind, _safe_component(stem, kind[:-1]) + ".json")

    def ensure(self) -> None:
        """Create the directory tree with owner-only permissions (before every lock hold: the
        tree may have been removed meanwhile).  A directory already there with those
        permissions costs one stat and is not touched: a chmod of each directory at every hold
        would rewrite six inodes for nothing."""
        for sub in ("", "claims", "pods", "attachments", "outbox", "cache"):
            path = os.path.join(self.root, sub)
            try:
                st = os.stat(path)
                if stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == DIR_MODE:
                    continue
            except OSError:
                pass
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
        from .batch import Batch  # deferred: only the service batches (it imports threads)

        return Batch(self)

    # -- low-level record I/O --------------------------------------------------------------
    def _read(self, path: str) -> Any:
        if self._pending is not None and path in self._pending:
            data = self._pending[path]
        elif self._known_absent(path):
            return None
        else:
            data = read_if_exists(path, StateError)
        if data is None:
            return None
        return _decode(data, path)

    def _exists(self, path: str) -> bool:
        """The record is there: staged by the open batch, else on disk."""
        if self._pending is not None and path in self._pending:
            return self._pending[path] is not None
        return not self._known_absent(path) and os.path.exists(path)

    def _known_absent(self, path: str) -> bool:
        """Inside a batch: ``path`` is not in its directory's listing, so it need not be opened.

        A burst of first prepares reads a record and a pod index for each claim that are not
        there yet; every failed open would hand the interpreter lock to another thread and wait
        to get it back (see ``batch.py``).  One listing per directory and batch replaces them.
        It stays true for the whole batch: every writer holds the state lock, and this batch's
        own writes and deletions are in ``_pending``, consulted first.
        """
        listed = self._listed
        if listed is None:
            return False
        directory, name = os.path.split(path)
        names = listed.get(directory)
        if names is None:
            try:
                names = frozenset(os.listdir(directory))
            except FileNotFoundError:
                names = frozenset()
            except OSError:  # unreadable: no shortcut, the read says what is wrong
                return False
            listed[directory] = names
        return name not in names

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
        try:
            data = encode_record(record)
        except (TypeError, ValueError) as exc:  # e.g. a lone surrogate: a StateError, never a crash
            raise StateError(f"cannot write {path}: the record is not JSON text ({exc})") from None
        if self._pending is not None:
            self._pending[path] = data
            return
        try:
            write_atomic(path, data, FILE_MODE, sync_dir=sync_dir)
        except OSError as exc:
            raise StateError(f"cannot write {path}: {exc.strerror}") from exc

    def _delete(self, path: str) -> bool:
        assert self._lock is not None and self._lock.is_mine(), "state writes must hold the state lock"
        if self._pending is not None:
            existed = self._exists(path)
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
