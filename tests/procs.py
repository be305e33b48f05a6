"""The machine's processes as /proc shows them: what the tests started and what outlived them.

Used by tests/conftest.py (no process outlives its test, nor a dracni process the session)
and by tests/integration/service.py (what the service left in its process group).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
#: Set in the environment of the test session: every process it starts inherits it, and keeps
#: it in /proc/<pid>/environ even when its parent dies and it is re-parented away from pytest.
SESSION_MARK = "PYTEST_DRACNI_SESSION"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    state: str  # "R", "S", "Z", ...
    start: int  # clock ticks after boot

    @property
    def argv(self) -> tuple[str, ...]:
        try:
            raw = (PROC / str(self.pid) / "cmdline").read_bytes()
        except OSError:
            return ()
        return tuple(a for a in raw.decode(errors="replace").split("\0") if a)

    @property
    def exe(self) -> str:
        """The executable's path; "" when unreadable (a zombie, a kernel thread)."""
        try:
            return os.readlink(PROC / str(self.pid) / "exe")
        except OSError:
            return ""

    def describe(self) -> str:
        command = " ".join(self.argv) or f"[{self.exe}]"
        return f"pid {self.pid} (parent {self.ppid}, state {self.state}): {command[:400]}"


def read(pid: int) -> Proc | None:
    """The process ``pid``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()  # the command name may hold spaces and ")"
    return Proc(pid=pid, ppid=int(fields[1]), pgid=int(fields[2]), state=fields[0].decode(), start=int(fields[19]))


def snapshot() -> dict[int, Proc]:
    procs = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (proc := read(int(entry))) is not None:
            procs[proc.pid] = proc
    return procs


def now_ticks() -> int:
    """The clock of ``Proc.start``: ticks since boot."""
    return int(float((PROC / "uptime").read_text().split()[0]) * CLOCK_TICKS)


def descendants(root: int, procs: dict[int, Proc]) -> list[Proc]:
    children: dict[int, list[Proc]] = {}
    for proc in procs.values():
        children.setdefault(proc.ppid, []).append(proc)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def has_mark(pid: int, mark: str) -> bool:
    """Whether the process started with ``SESSION_MARK=mark`` in its environment."""
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return f"{SESSION_MARK}={mark}".encode() in environ.split(b"\0")


def is_dracni(proc: Proc, binaries: Iterable[str]) -> bool:
    """The frozen bundle (any copy: ``install`` makes some), or a ``dracni kubelet-plugin``."""
    exe, argv = proc.exe, proc.argv
    if exe and exe in set(binaries):
        return True
    if argv and os.path.basename(argv[0]) == "dracni":
        return True
    return "kubelet-plugin" in argv and any("dracni" in a for a in argv[:3])


def alive(proc: Proc) -> bool:
    now = read(proc.pid)
    return now is not None and now.start == proc.start and now.state != "Z"


def kill(procs: Iterable[Proc], timeout: float = 5.0) -> list[Proc]:
    """SIGKILL ``procs``; returns those still alive after ``timeout`` (none, unless stuck in the kernel)."""
    procs = [p for p in procs if alive(p)]
    for proc in procs:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while (procs := [p for p in procs if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    return procs
