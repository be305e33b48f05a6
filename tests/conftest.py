"""Process hygiene of every test (issue 8): what a test starts, the test stops.

- After each test, once its fixtures are torn down, the processes it started that still run
  are killed, whether the test passed or failed: a service, a lock holder, a watch.
- A dracni process (the frozen bundle or a copy of it, anything run from ``DRACNI_BINARY``,
  a ``dracni kubelet-plugin``) that outlived its test, or that is alive when the session
  ends, fails the run (exit status 1, the processes listed) and is killed.

"Started by this session" means a descendant of this pytest process, or a process whose
environment carries this session's mark (``procs.SESSION_MARK``): a process whose parent died
is re-parented away from pytest, but keeps the environment it started with.  Other sessions on
the machine (other checkouts, other people's runs) have neither, and are left alone.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import procs

REPO = Path(__file__).resolve().parents[1]

#: gRPC core's fork handlers (on by default) make a child forked while an earlier test's gRPC
#: threads still live abort before its exec (SIGABRT: "exit code -6" from a delegate).  This
#: process forks delegates as the CNI plugin does (tests/unit/cni) after other tests ran gRPC
#: clients and servers in it.  The CNI plugin never loads gRPC and the service never forks
#: (tests/integration/test_link_watch.py), so only the test process turns them off, before any
#: test imports grpc; the service is started without it (tests/integration/service.py).
GRPC_FORK_SUPPORT = "GRPC_ENABLE_FORK_SUPPORT"
os.environ.setdefault(GRPC_FORK_SUPPORT, "false")
LEFTOVERS = pytest.StashKey[list[tuple[str, procs.Proc, bool]]]()  # (test, process, dracni?)


def pytest_configure(config: pytest.Config) -> None:
    os.environ[procs.SESSION_MARK] = f"{os.getpid()}-{uuid.uuid4().hex}"
    config.stash[LEFTOVERS] = []


def _binaries() -> set[str]:
    paths = [REPO / "dist" / "dracni" / "dracni"]
    if os.environ.get("DRACNI_BINARY"):
        paths.append(Path(os.environ["DRACNI_BINARY"]))
    return {os.path.realpath(p) for p in paths}


def _ours(since: int, exclude: set[tuple[int, int]]) -> list[procs.Proc]:
    """Live processes this session started (see the module docstring), minus ``exclude``."""
    table = procs.snapshot()
    me, mark = os.getpid(), os.environ[procs.SESSION_MARK]
    found = {p.pid: p for p in procs.descendants(me, table)}
    for proc in table.values():  # orphans: started since ``since``, with our mark
        if proc.pid not in found and proc.pid != me and proc.start >= since and procs.has_mark(proc.pid, mark):
            found[proc.pid] = proc
    return [p for p in found.values() if p.state != "Z" and (p.pid, p.start) not in exclude]


def _sweep(config: pytest.Config, where: str, since: int, exclude: set[tuple[int, int]]) -> None:
    """Kill what is left, and remember it: dracni processes fail the run, others are listed."""
    left = _ours(since, exclude)
    if left:
        binaries = _binaries()
        config.stash[LEFTOVERS].extend((where, p, procs.is_dracni(p, binaries)) for p in left)
        procs.kill(left)


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    since = procs.now_ticks() - 1
    before = {(p.pid, p.start) for p in _ours(since, set())}
    yield
    _sweep(request.config, request.node.nodeid, since, before)


@pytest.hookimpl(trylast=True)  # after the session's own fixtures are torn down
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _sweep(session.config, "the end of the session", 0, set())
    leftovers = session.config.stash[LEFTOVERS]
    dracni = [(where, proc) for where, proc, is_dracni in leftovers if is_dracni]
    others = [(where, proc) for where, proc, is_dracni in leftovers if not is_dracni]
    lines = []
    if dracni:
        lines.append(f"FAILED: {len(dracni)} dracni process(es) outlived their test (killed now):")
        lines += [f"  after {where}: {proc.describe()}" for where, proc in dracni]
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if others:
        lines.append(f"{len(others)} other process(es) outlived their test (killed now):")
        lines += [f"  after {where}: {proc.describe()}" for where, proc in others]
    if not lines:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        print("\n".join(lines))
        return
    reporter.write("\n")
    reporter.write_sep("=", "processes left running", red=bool(dracni), yellow=not dracni)
    for line in lines:
        reporter.write_line(line)
