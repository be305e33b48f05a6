"""Two instances of the service side by side on one node: a rolling update with no prepare gap.

Upstream's kubelet plugin helper (``k8s.io/dynamic-resource-allocation/kubeletplugin``,
``draplugin.go``, option ``RollingUpdate(podUID)``, kubelet 1.33+) lets a DaemonSet surge: the
new pod starts while the old one still serves, each instance under socket names of its own
(``kubelet/sockets.py``), and kubelet calls the newest registered one, falling back to the
other when it goes (pkg/kubelet/pluginmanager/pluginwatcher/README.md, "Seamless Upgrade").
Both instances share the state dir and the plugin data dir; what keeps them from stepping on
each other lives here, all of it advisory file locks (``flock(2)``) in the plugin data dir, which
the kernel releases when a process dies, however it dies:

- ``CallGate`` (``serialize.lock``, upstream's name): prepare and unprepare of one instance
  never overlap those of the other.  Upstream serializes every call; dracni keeps its calls
  concurrent (and the group commit of records) within an instance, and holds the file lock
  while any call of the instance is in flight.
- ``Leadership`` (``leader.lock``): exactly one instance at a time does the node's singleton
  work: publishing ResourceSlices, draining the status outbox, reconciling address
  reservations, following pods that join shared claims.  The other waits for the lock and takes
  over when the holder exits; the outbox and the reservations are on disk and in the API, so
  nothing is lost in between.
- ``InstanceMarks`` (``instances/<id>``): an instance marks itself once kubelet has registered
  it.  A stopping instance whose successor's registration socket already exists waits (up to
  ``HANDOVER_SECONDS``) for that mark before it takes its own sockets down, so kubelet always
  has one registered instance to call.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import threading
import time
from collections.abc import Iterator

log = logging.getLogger(__name__)

SERIALIZE_LOCK = "serialize.lock"
LEADER_LOCK = "leader.lock"
MARKS_DIR = "instances"
#: How often a waiting instance tries the leader lock (the handover's longest pause).
LEADER_POLL_SECONDS = 0.25
#: How long a stopping instance waits for its successor to be registered.
HANDOVER_SECONDS = 10.0
#: An instance ID goes into file names: the pod UID's characters only.
_INSTANCE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}$")


def check_instance_id(instance: str) -> None:
    """Raise ValueError unless ``instance`` can name sockets and marks (a pod UID can)."""
    if not _INSTANCE_ID.match(instance):
        raise ValueError(
            f"instance ID {instance!r}: use the pod's UID (letters, digits and '-', at most 63 characters)"
        )


def _open_lock(path: str) -> int:
    os.makedirs(os.path.dirname(path), mode=0o750, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


class CallGate:
    """Held (``with gate.held():``) by every prepare and unprepare of this instance; the file
    lock is taken by the first call in flight and let go by the last, so this instance's calls
    run concurrently and never beside the other instance's."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, SERIALIZE_LOCK)
        self._fd: int | None = None
        self._count = threading.Lock()  # guards _users and the lock state
        self._taking = threading.Lock()  # one thread blocks in flock for all
        self._users = 0

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self._enter()
        try:
            yield
        finally:
            self._leave()

    def _enter(self) -> None:
        with self._count:
            if self._users:
                self._users += 1
                return
        with self._taking:
            with self._count:
                if self._users:  # another thread took it meanwhile
                    self._users += 1
                    return
            if self._fd is None:
                self._fd = _open_lock(self.path)
            fcntl.flock(self._fd, fcntl.LOCK_EX)  # blocks while the other instance has calls in flight
            with self._count:
                self._users = 1

    def _leave(self) -> None:
        with self._count:
            self._users -= 1
            if self._users == 0 and self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        with self._count:
            if self._fd is not None and self._users == 0:
                os.close(self._fd)
                self._fd = None


class Leadership:
    """The node's singleton work belongs to whoever holds ``leader.lock``; ``acquire`` waits
    for it (or the stop), ``held`` says whether this instance has it, ``release`` lets it go."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, LEADER_LOCK)
        self._fd: int | None = None
        self._held = threading.Event()

    def held(self) -> bool:
        return self._held.is_set()

    def acquire(self, stop: threading.Event) -> bool:
        """Block until this instance leads (True) or ``stop`` is set (False)."""
        if self._fd is None:
            self._fd = _open_lock(self.path)
        waited = False
        while not stop.is_set():
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not waited:
                    log.info("another instance of this driver leads on this node: waiting to take over")
                    waited = True
                stop.wait(LEADER_POLL_SECONDS)
                continue
            self._held.set()
            if waited:
                log.info("took over the node's ResourceSlices, claim status and address reservations")
            return True
        return False

    def release(self) -> None:
        self._held.clear()
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


class InstanceMarks:
    """``<data_dir>/instances/<id>``: this instance is registered with kubelet."""

    def __init__(self, data_dir: str, instance: str, registry_dir: str, driver: str) -> None:
        self.dir = os.path.join(data_dir, MARKS_DIR)
        self.instance = instance
        self.registry_dir = registry_dir
        self.driver = driver

    def mark_registered(self) -> None:
        os.makedirs(self.dir, mode=0o750, exist_ok=True)
        with open(os.path.join(self.dir, self.instance), "w", encoding="ascii") as mark:
            mark.write(f"{os.getpid()}\n")

    def unmark(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.dir, self.instance))

    def successors(self) -> list[str]:
        """Other instances of this driver whose registration sockets exist."""
        prefix, suffix = f"{self.driver}-", "-reg.sock"
        try:
            names = os.listdir(self.registry_dir)
        except OSError:
            return []
        found = [n[len(prefix) : -len(suffix)] for n in names if n.startswith(prefix) and n.endswith(suffix)]
        return [i for i in found if i and i != self.instance and _INSTANCE_ID.match(i)]

    def wait_for_successor(self, timeout: float = HANDOVER_SECONDS) -> str | None:
        """When another instance is starting, wait until kubelet has registered it (its mark),
        at most ``timeout`` seconds; its ID, or None (no successor, or it did not register)."""
        starting = self.successors()
        if not starting:
            return None
        deadline = time.monotonic() + timeout
        while True:
            for other in self.successors():
                if os.path.exists(os.path.join(self.dir, other)):
                    log.info("instance %s is registered with kubelet: handing over to it", other)
                    return other
            if time.monotonic() >= deadline:
                log.warning(
                    "instance %s did not register with kubelet within %.0f s; stopping anyway",
                    ", ".join(starting),
                    timeout,
                )
                return None
            time.sleep(0.1)
