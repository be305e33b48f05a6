"""``BENCH_ONLY=profile make bench``: where (h)'s burst spends the service's CPU and memory,
per claim, so that the next person can repeat the measurement behind issue 25.

The service runs from the source tree under ``tests/tools/profiled_service.py`` (yappi for CPU,
tracemalloc for memory), against the same test API server and kubelet calls as (h): 100 pods x
2 claims prepared at once, then unprepared, at 20 ms API latency, on a plain network and then,
as (h), on a network with an address pool (a service of its own for each).  One burst is
profiled for CPU, another for memory (the two profilers would distort each other).  Printed:

- CPU: each area's own time (yappi's ``tottime``, CPU clock, all threads) in ms per claim,
  scaled to the process's CPU time measured from /proc over the same burst (the profiler's
  overhead inflates every figure alike), and the 15 functions that cost the most;
- memory: what the burst left allocated per area (a cache that grows with requests shows up
  here) and tracemalloc's peak during it.

Profilers slow everything down: read the shares, not the wall times.
"""

from __future__ import annotations

import json
import os
import pstats
import signal
import sys
import time
from collections import Counter
from pathlib import Path

from tests.harness import REPO
from tests.tools.bench_kubelet import KubeletCalls

#: (area, path fragments of the files whose code counts to it), first match wins.
AREAS = (
    ("kubernetes client: models and validation", ("/kubernetes/", "/pydantic", "/typing_extensions")),
    (
        "HTTP: dracni/kube/transport, pycurl, urllib3, sockets",
        ("/kube/transport.py", "pycurl", "/urllib3/", "/http/", "/socket.py", "/ssl.py", "/email/"),
    ),
    ("gRPC and protobuf", ("/grpc/", "/google/protobuf/", "grpc._cython")),
    ("JSON (json, orjson, dracni/jsonio)", ("/json/", "orjson", "dracni/jsonio")),
    ("parameter schema (jsonschema, dracni/params)", ("/jsonschema", "/referencing/", "/rpds", "dracni/params")),
    ("logging", ("/logging/", "dracni/logtext", "dracni/service/logs")),
    ("state dir (dracni/state, atomicfile)", ("dracni/state/", "dracni/atomicfile")),
    ("address pools (dracni/pools, claims/pool_addresses)", ("dracni/pools/", "dracni/claims/pool_addresses")),
    ("kubelet helper and gRPC side (dracni/kubelet)", ("dracni/kubelet/",)),
    ("claims, policy, inventory (dracni)", ("dracni/",)),
)


OTHER = "other (threads' start, the interpreter)"


def area_of(path: str) -> str:
    for area, fragments in AREAS:
        if any(f in path for f in fragments):
            return area
    return OTHER


def _signal_and_wait(pid: int, signum: int, marker: Path, timeout: float = 120.0) -> None:
    marker.unlink(missing_ok=True)
    os.kill(pid, signum)
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"the profiled service wrote no {marker.name} in {timeout:.0f} s")
        time.sleep(0.05)


def _burst_both(kubelet: KubeletCalls, pods) -> None:
    kubelet.calls("NodePrepareResources", pods, at_once=True)
    kubelet.calls("NodeUnprepareResources", pods, at_once=True)


def _own_time_by_area(stats: pstats.Stats) -> Counter[str]:
    """Each area's own CPU time; the standard library's and builtins' time goes to the areas
    that called them, in proportion to the time spent from each caller (up the call graph
    until an area's code is met)."""
    table = stats.stats  # type: ignore[attr-defined]
    by_area: Counter[str] = Counter()
    pending: Counter[tuple[str, int, str]] = Counter()
    for func, (_cc, _nc, tottime, _cum, _callers) in table.items():
        area = area_of(func[0])
        if area == OTHER:
            pending[func] += tottime
        else:
            by_area[area] += tottime
    for _ in range(50):  # deep enough for any stdlib chain; what is left stays "other"
        if not pending:
            break
        passed: Counter[tuple[str, int, str]] = Counter()
        for func, seconds in pending.items():
            callers = table[func][4]
            weights = {caller: max(t[3], 1e-12) for caller, t in callers.items() if caller in table}
            if not weights:
                by_area[OTHER] += seconds
                continue
            total = sum(weights.values())
            for caller, weight in weights.items():
                share = seconds * weight / total
                area = area_of(caller[0])
                if area == OTHER:
                    passed[caller] += share
                else:
                    by_area[area] += share
        pending = passed
    by_area[OTHER] += sum(pending.values())
    return by_area


def cpu_report(stats_file: Path, cpu_ms: float, claims: int) -> None:
    stats = pstats.Stats(str(stats_file))
    by_area = _own_time_by_area(stats)
    by_function: Counter[str] = Counter()
    for (path, line, name), (_cc, _nc, tottime, _cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        short = path.split("site-packages/")[-1].split(str(REPO) + "/")[-1]
        by_function[f"{name} ({short}:{line})"] += tottime
    total = sum(by_area.values())
    scale = cpu_ms / total if total else 0.0
    print(
        f"    CPU by area (the stdlib's and builtins' time counted to their callers), ms per claim; "
        f"the service used {cpu_ms / claims:.2f} ms per claim in this profiled burst:"
    )
    for area, seconds in by_area.most_common():
        print(f"      {seconds * scale / claims:6.3f}  {100 * seconds / total:4.1f}%  {area}")
    print("    the 15 costliest functions (own time), ms per claim:")
    for function, seconds in by_function.most_common(15):
        print(f"      {seconds * scale / claims:6.3f}  {function}")


def alloc_report(report_file: Path, claims: int) -> None:
    report = json.loads(report_file.read_text())
    by_area: Counter[str] = Counter()
    blocks: Counter[str] = Counter()
    for entry in report["by_file"]:
        by_area[area_of(entry["file"])] += entry["size_diff"]
        blocks[area_of(entry["file"])] += entry["count_diff"]
    print(
        f"    memory: tracemalloc's peak in the burst {report['peak_bytes'] / 2**20:.1f} MiB; left allocated after it "
        f"(bytes and blocks per claim; a cache growing with requests shows here):"
    )
    for area, size in sorted(by_area.items(), key=lambda kv: -abs(kv[1])):
        if size or blocks[area]:
            print(f"      {size / claims:8.0f} B {blocks[area] / claims:6.1f} blocks  {area}")


def profile_bench(base: str) -> None:
    """See the module docstring; the state dir on (h)'s journaled ext4 (``bench_burst.node_disk``)."""
    from tests.tools.bench_burst import node_disk

    with node_disk(Path(base) / "profile-disk") as (disk, what):
        print(f"(h) profiled, the state dir on {what}:")
        _profile_bench(base, disk)


def _profile_bench(base: str, disk: Path) -> None:
    for pooled in (False, True):
        _profile_network(base, disk, pooled)


def _profile_network(base: str, disk: Path, pooled: bool) -> None:
    from tests.integration.service import macvlan_params
    from tests.tools.bench_burst import BURST_PODS, BurstRig, _alone, _claims
    from tests.tools.bench_cluster import pool_params
    from tests.tools.bench_process import cpu_ms

    name = "pool" if pooled else "plain"
    out = Path(base) / f"profile-{name}"
    out.mkdir(parents=True)
    rig = BurstRig(Path(base) / f"apiserver-profile-{name}", disk / f"profile-lab-{name}")  # as (h)
    saved = os.environ.get("DRACNI_PROFILE_DIR")
    os.environ["DRACNI_PROFILE_DIR"] = str(out)
    try:
        if pooled:  # as (h)'s: a /22
            params = pool_params(rig.lab, master="eth1", subnet="10.95.0.0/22", network="bench-pp", pool="bench-p")
        else:
            params = macvlan_params(rig.lab, master="eth1", subnet="10.94.0.0/16", network="bench-p")
        pods = _claims(rig.api, params, "p")
        service, kubelet = rig.start(program=(sys.executable, "-m", "tests.tools.profiled_service"))
        _alone(kubelet, pods[0])
        _burst_both(kubelet, pods)  # warm: threads started, lazy imports done
        claims = 2 * BURST_PODS
        network = "a network with an address pool (a /22)" if pooled else "a plain network"
        print(
            f"    {BURST_PODS} pods x 2 claims on {network} prepared at once and unprepared, "
            "the service from the source tree:"
        )
        pid = service.proc.pid
        _signal_and_wait(pid, signal.SIGUSR1, out / "cpu.started")
        before = cpu_ms(pid)
        _burst_both(kubelet, pods)
        spent = cpu_ms(pid) - before
        _signal_and_wait(pid, signal.SIGUSR1, out / "cpu.done")
        cpu_report(out / "cpu.pstat", spent, claims)
        _signal_and_wait(pid, signal.SIGUSR2, out / "alloc.started")
        _burst_both(kubelet, pods)
        _signal_and_wait(pid, signal.SIGUSR2, out / "alloc.done")
        alloc_report(out / "alloc.json", claims)
    finally:
        if saved is None:
            os.environ.pop("DRACNI_PROFILE_DIR", None)
        else:
            os.environ["DRACNI_PROFILE_DIR"] = saved
        rig.close()
