"""``make bench`` (g) and (h): the kubelet plugin service's load on the API server and its
behaviour under a burst, with the frozen bundle against the test API server.

(g) 20 services as 20 nodes against one API server, 200 pod starts on node 1 (claim allocated
    and reserved, pod bound, NodePrepareResources, CNI ADD, status visible; then DEL and
    NodeUnprepareResources): API requests per pod start by node 1, and what the other 19 nodes
    asked and were sent about claims meanwhile (goal: nothing); then as many pod starts on a
    network with an address pool (issue 21: the reservation's create and delete; goal <= 5).
(h) 100 pods x 2 claims prepared at once through the fake kubelet, the API server answering
    each request after 20 ms: prepare and unprepare p50/p99 for one pod alone and in the burst
    (goal: burst p99 within 8x one pod alone, 3x beyond), the service's CPU per claim in the
    burst of prepares (goal: <= 1.0 ms) and its context switches per claim (the thread
    hand-overs behind much of that CPU), its resident memory idle and at its peak (goals:
    <= 80 MiB idle, <= 100 MiB at peak); the same bursts again on a network with an address pool
    (a /22), in the same run against the same service.  Where a burst's time goes: when the test
    API server answered the burst's last claim GET and how long it took over each (its own
    timestamps, ``RecordedRequest.received``/``answered``), so the p99 splits into the GETs and the
    service's tail after them; and the CPU the service and the bench's own process (the test API
    server and the kubelet's threads share it) used in the burst, against the machine's CPUs; and
    the same burst by the service's own metrics, scraped before and after it (``bench_burst.py
    service_waits``): a claim GET with its wait for a free connection, a call's group commit with
    the one ahead of it, the commits' count and size and how long they held the state lock.
    Each figure is the median of 5 bursts (``BENCH_BURSTS``).  Beside the p99, the floor under
    it: the test API server alone answering the burst's claim GETs, without dracni
    (``tests/tools/bench_api_floor.py``).
    The service runs as the DaemonSet's pod does: in-cluster configuration, HTTPS
    (``tests/integration/in_cluster.py``); a kubeconfig would load the client's ``ApiClient``,
    pydantic and its auth providers (``kube_config.py`` imports them), about 15 MiB a pod never
    carries.

(h)'s service keeps its state dir on a journaled ext4 made for the run on a loop device
(``node_disk``), as a node's /var/lib is: this machine's own disk is ext4 without a journal, where
creating a file scans every inode deleted in the last 1 to 6 minutes (fs/ext4/ialloc.c
``recently_deleted``: RECENTCY_MIN 60 s, RECENTCY_DIRTY 300 s more while the inode table block is
dirty; journaled file systems skip the check), so after the bench's earlier phases removed their
files each claim record cost up to 0.7 ms of kernel CPU for that scan alone, more the longer the
machine ran.  Without loop devices the bench's temp dir is used, and the line says so.

Run from ``tests/tools/bench.py`` inside its throwaway host netns (``BENCH_HOST_NETNS``).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from dracni.kube.transport import CONNECTIONS
from tests.harness import Lab
from tests.tools.bench_burst import ServiceWaits, burst, claim_gets, service_waits
from tests.tools.bench_process import context_switches, cpu_ms, reference_loop_ms, rss_mib

NODES = 20
POD_STARTS = int(os.environ.get("BENCH_POD_STARTS", "200"))
BURST_PODS = 100
LATENCY = float(os.environ.get("BENCH_API_LATENCY", "0.020"))


def percentile_ms(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] * 1000


def _node_of(user_agent: str | None) -> str:
    """``dracni/<version> (<node>)`` -> ``<node>``."""
    agent = user_agent or ""
    return agent[agent.find("(") + 1 : agent.rfind(")")] if "(" in agent else "?"


RESOURCES = ("resourceclaims", "resourceslices", "pods", "nodes", "ipamclaims", "addressreservations")


def _what(request) -> str:
    """``GET resourceclaims``, ``PATCH resourceclaims/status``, ``WATCH pods``, ..."""
    segments = request.path.strip("/").split("/")
    plural = next((s for s in segments if s in RESOURCES), request.path)
    if segments[-1] == "status":
        plural += "/status"
    return f"{'WATCH' if request.watch else request.method} {plural}"


def pool_params(lab: Lab, *, master: str, subnet: str, network: str, pool: str) -> dict:
    """A DeviceClass network (macvlan, host-local over ``subnet``) naming the address pool ``pool``
    of that subnet: the service reserves each attachment's address at prepare time."""
    from tests.integration.service import macvlan_params

    return macvlan_params(lab, master=master, subnet=subnet, network=network) | {
        "addressPool": {"name": pool, "subnets": [{"subnet": subnet}]}
    }


def _pod_starts(api, lab: Lab, service, params: dict, numbers: range) -> None:
    """(g)'s pod starts on node-1, one after the other, each to its end (see the docstring)."""
    from tests.integration.service import claim_ref, create_allocated_claim, our_status, wait_for
    from tests.tools.bench import PREV_RESULT, cni_env, timed

    pod = lab.pod(f"dracni-bench-g{numbers.start}")
    conf = {"cniVersion": "1.0.0", "name": "podnet", "type": "dracni", "stateDir": str(lab.state_dir)}
    for i in numbers:
        pod_uid = f"cccccccc-0000-4000-8000-{i:012d}"
        claim = create_allocated_claim(api, f"g-{i}", pod_uid, params, device="eth9", pod_name=f"g-{i}", node="node-1")
        api.add_pod("default", f"g-{i}", node="node-1", claims={"net": f"g-{i}"}, uid=pod_uid)
        service.kubelet.prepare([claim_ref(claim)], raise_on_error=True)
        env = cni_env(lab, "ADD", pod.path, f"g{i}", pod_uid=pod_uid)
        timed([str(lab.bin_dir / "dracni")], env, json.dumps(conf | {"prevResult": PREV_RESULT}).encode())
        wait_for(lambda claim=claim: our_status(api, claim), 10.0, "status after ADD", interval=0.005)
        timed([str(lab.bin_dir / "dracni")], dict(env, CNI_COMMAND="DEL"), json.dumps(conf).encode())
        wait_for(lambda claim=claim: not our_status(api, claim), 10.0, "status cleared", interval=0.005)
        service.kubelet.unprepare([claim_ref(claim)], raise_on_error=True)
        api.delete_pod("default", f"g-{i}")


def api_load_bench(base: str) -> None:
    """(g): see the module docstring."""
    from tests.integration.service import FakeApiServer, ServiceProcess, macvlan_params
    from tests.tools.bench_pools import reservation_crd

    api = FakeApiServer(Path(base) / "apiserver-g", crds=[reservation_crd()]).start()
    labs: list[Lab] = []
    services: list[ServiceProcess] = []
    try:
        for n in range(1, NODES + 1):
            node = f"node-{n}"
            api.add_node(node)
            host = os.environ["BENCH_HOST_NETNS"] if n == 1 else None
            lab = Lab(base=Path(base) / f"g-{node}", nics=("eth9",) if n == 1 else ("eth1",), host_name=host)
            labs.append(lab)
            service = ServiceProcess(lab, api, node=node)
            services.append(service)
            service.start()
        lab, service = labs[0], services[0]
        plain = macvlan_params(lab, master="eth9", subnet="10.90.0.0/16", network="bench-g")
        pooled = pool_params(lab, master="eth9", subnet="10.92.0.0/16", network="bench-g-pool", pool="bench-g")
        time.sleep(1.0)  # let start-up traffic (slice publishing, watches) settle
        for label, params, first in (("", plain, 0), (" with an address pool", pooled, POD_STARTS)):
            api.reset_requests()
            events_before = len(api.events())
            _pod_starts(api, lab, service, params, range(first, first + POD_STARTS))
            requests = api.requests_to()
            by_node: Counter[str] = Counter()
            kinds: Counter[str] = Counter()
            for r in requests:
                by_node[_node_of(r.user_agent)] += 1
                if _node_of(r.user_agent) == "node-1":
                    kinds[_what(r)] += 1
            per_start = by_node["node-1"] / POD_STARTS
            if not first:
                print(f"(g) {NODES} nodes, {POD_STARTS} pod starts on node-1 (prepare, ADD, status, DEL, unprepare):")
                print(f"    node-1 API requests per pod start: {per_start:.2f}  ({dict(sorted(kinds.items()))})")
            else:
                # not per pod: the service's own reservations listed (first use, then each reconcile)
                # and its Node's UID read once
                upkeep = kinds["GET addressreservations"] + kinds["GET nodes"]
                per_pod = (by_node["node-1"] - upkeep) / POD_STARTS
                print(
                    f"    the same{label}: {per_pod:.2f}   goal <= 5  {'OK' if per_pod <= 5 else 'MISSED'}  "
                    f"(+ {upkeep} in all not per pod: this node's reservations listed, its Node read; "
                    f"{dict(sorted(kinds.items()))})"
                )
            others = [r for r in requests if _node_of(r.user_agent) not in ("node-1", "?")]
            others_claims = [r for r in others if "resourceclaims" in r.path]
            claim_watches = [r for r in requests if r.watch and "resourceclaims" in r.path]
            claim_events = [
                e for e in api.events()[events_before:] if (e.get("object") or {}).get("kind") == "ResourceClaim"
            ]
            print(
                f"    the other {NODES - 1} nodes: {len(others)} requests in all, {len(others_claims)} about claims; "
                f"claim watches open: {len(claim_watches)}, so 0 of the {len(claim_events)} claim changes were "
                f"delivered to them   goal 0  {'OK' if not claim_watches and not others_claims else 'MISSED'}"
            )
    finally:
        for service in services:
            service.close()
        api.close()
        for lab in labs:
            lab.close()


def _claims(api, params: dict, prefix: str) -> list[list[tuple[str, str, str]]]:
    """(h)'s pods: ``BURST_PODS`` pods of 2 claims each on the network ``params``."""
    from tests.integration.service import claim_ref, create_allocated_claim

    return [
        [
            claim_ref(
                create_allocated_claim(
                    api, f"{prefix}-{p}-{c}", f"dddddddd-0000-4000-8000-{p:012d}", params, pod_name=f"{prefix}-{p}"
                )
            )
            for c in range(2)
        ]
        for p in range(BURST_PODS)
    ]


def _alone(kubelet, claims) -> tuple[list[float], list[float]]:
    """One pod's prepare and unprepare, each alone, 10 times: the two lists of seconds."""
    single_prepare, single_unprepare = [], []
    for _ in range(10):
        started = time.perf_counter()
        kubelet.prepare(claims, raise_on_error=True)
        single_prepare.append(time.perf_counter() - started)
        started = time.perf_counter()
        kubelet.unprepare(claims, raise_on_error=True)
        single_unprepare.append(time.perf_counter() - started)
    return single_prepare, single_unprepare


class _Burst(NamedTuple):
    """One burst of prepares and the burst of unprepares after it."""

    prepares: list[float]  # seconds, one per pod
    unprepares: list[float]
    service_cpu: float  # ms, in the prepares
    wall: float  # ms, the prepares
    switches: list[int]  # voluntary, involuntary
    gets: tuple[float, float]  # claim_gets: the last answered (ms after the start), ms per GET
    bench_cpu: float  # ms, this process in the prepares
    waits: ServiceWaits


#: Bursts run, one after the other, for each figure of (h); the median one is reported
#: (``BENCH_BURSTS``: more, for comparing two builds on this VM, whose speed wanders).
BURSTS = int(os.environ.get("BENCH_BURSTS", "5"))


def _report(
    service, kubelet, api, pods, alone: tuple[list[float], list[float]], title: str, floor: float | None = None
) -> None:
    """``BURSTS`` bursts of prepares, each followed by one of unprepares; the medians of their
    figures (this 2-core VM's timings wander by a third from one burst to the next)."""
    one_p, one_u = (statistics.median(samples) * 1000 for samples in alone)
    one_p99, one_u99 = (percentile_ms(samples, 0.99) for samples in alone)
    runs: list[_Burst] = []
    for _ in range(BURSTS):
        metrics_before = service.samples()
        switches_before = context_switches(service.proc.pid)
        cpu_before, wall_before = cpu_ms(service.proc.pid), time.perf_counter()
        bench_cpu_before = cpu_ms(os.getpid())
        prepares, began = burst(pods, kubelet.prepare)
        bench_cpu = cpu_ms(os.getpid()) - bench_cpu_before
        gets = claim_gets(api, began)
        cpu_prepare = cpu_ms(service.proc.pid) - cpu_before
        wall_prepare = (time.perf_counter() - wall_before) * 1000
        switches = [b - a for a, b in zip(switches_before, context_switches(service.proc.pid), strict=True)]
        waits = service_waits(metrics_before, service.samples())
        unprepares, _ = burst(pods, kubelet.unprepare)
        runs.append(_Burst(prepares, unprepares, cpu_prepare, wall_prepare, switches, gets, bench_cpu, waits))

    def median_of(figure) -> float:
        return statistics.median(figure(run) for run in runs)

    p50_p = median_of(lambda r: percentile_ms(r.prepares, 0.5))
    p99_p = median_of(lambda r: percentile_ms(r.prepares, 0.99))
    p50_u = median_of(lambda r: percentile_ms(r.unprepares, 0.5))
    p99_u = median_of(lambda r: percentile_ms(r.unprepares, 0.99))
    per_claim = [run.service_cpu / (2 * BURST_PODS) for run in runs]
    cpu = statistics.median(per_claim)
    print(title)
    print(
        f"    one pod alone: prepare p50 {one_p:6.1f} ms p99 {one_p99:6.1f} ms; unprepare p50 {one_u:5.1f} ms p99 {one_u99:5.1f} ms"
    )
    print(
        f"    burst prepare   p50 {p50_p:7.1f} ms  p99 {p99_p:7.1f} ms; p99/alone {p99_p / one_p:5.1f}x   "
        f"goal <= 8x {'OK' if p99_p <= 8 * one_p else 'MISSED'} (beyond it <= 3x {'OK' if p99_p <= 3 * one_p else 'MISSED'})"
    )
    if floor is not None:
        print(
            f"    the test API server alone answers the burst's {2 * BURST_PODS} claim GETs over {CONNECTIONS} connections in "
            f"{floor:.0f} ms = {floor / one_p:.1f}x one pod alone (no dracni: the burst's floor, tests/tools/bench_api_floor.py)"
        )
    gets_end, get_ms = median_of(lambda r: r.gets[0]), median_of(lambda r: r.gets[1])
    tail = median_of(lambda r: percentile_ms(r.prepares, 0.99) - r.gets[0])
    print(
        f"    the burst's claim GETs as the test API server saw them: the last answered {gets_end:.0f} ms after the "
        f"burst began, {tail:.0f} ms before the p99 call ended (the service's tail: resolve, commit, answer); "
        f"each took it {get_ms:.1f} ms (p50; {LATENCY * 1000:.0f} ms of it the set latency)"
    )
    print(
        f"    the same burst by the service's own metrics (dracni_api_*, dracni_state_commit_*): a claim GET took it "
        f"{median_of(lambda r: r.waits.claim_get_ms):.1f} ms, {median_of(lambda r: r.waits.connection_wait_ms):.1f} ms "
        f"of a request waiting for one of its {CONNECTIONS} connections; a call's group commit "
        f"{median_of(lambda r: r.waits.commit_ms):.1f} ms, the one ahead included, in "
        f"{median_of(lambda r: r.waits.commits):.0f} commits of {median_of(lambda r: r.waits.calls_per_commit):.1f} "
        f"calls, which held the state lock {median_of(lambda r: r.waits.lock_held_ms):.0f} ms of the burst"
    )
    wall, service_cpu, bench_cpu = (
        median_of(lambda r: r.wall),
        median_of(lambda r: r.service_cpu),
        median_of(lambda r: r.bench_cpu),
    )
    print(
        f"    CPU in the burst of prepares: the service {service_cpu:.0f} ms, the bench's own process (the test "
        f"API server, the kubelet's threads) {bench_cpu:.0f} ms, in {wall:.0f} ms: "
        f"{(service_cpu + bench_cpu) / wall:.2f} of the {os.cpu_count()} CPUs busy with them"
    )
    print(f"    burst unprepare p50 {p50_u:7.1f} ms  p99 {p99_u:7.1f} ms; p99/alone {p99_u / one_u:5.1f}x")
    print(
        f"    CPU per claim in the burst of prepares: {cpu:.2f} ms   goal <= 1.0  {'OK' if cpu <= 1.0 else 'MISSED'}  "
        f"(the {BURSTS} bursts: {', '.join(f'{c:.2f}' for c in per_claim)}; a burst took "
        f"{median_of(lambda r: r.wall):.0f} ms)"
    )
    claims = 2 * BURST_PODS
    print(
        f"    context switches per claim in the burst of prepares: {median_of(lambda r: r.switches[0]) / claims:.1f} "
        f"voluntary, {median_of(lambda r: r.switches[1]) / claims:.1f} involuntary (thread hand-overs and I/O waits)"
    )


@contextmanager
def node_disk(base: Path, size_mib: int = 512) -> Iterator[tuple[Path, str]]:
    """A directory on a fresh journaled ext4 (a sparse image under ``base``, loop-mounted), and
    what it is; without loop devices or mkfs, ``base`` itself.  Unmounted and removed after."""
    image, mount = base / "node-disk.img", base / "node-disk"
    mount.mkdir(parents=True)
    try:
        with open(image, "wb") as f:
            f.truncate(size_mib << 20)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True, timeout=120)
        subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = exc.stderr.decode(errors="replace").strip() if isinstance(exc, subprocess.CalledProcessError) else exc
        image.unlink(missing_ok=True)
        yield base, f"the bench's temp dir (no journaled ext4 on a loop device: {detail})"
        return
    try:
        yield mount, "a journaled ext4 on a loop device, as a node's /var/lib"
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True, timeout=60)
        image.unlink(missing_ok=True)
        shutil.rmtree(mount, ignore_errors=True)


def burst_bench(base: str) -> None:
    """(h): see the module docstring."""
    print(f"(h) this machine now: a fixed Python loop takes {reference_loop_ms():.0f} ms of CPU (read (h) against it)")
    with node_disk(Path(base) / "h-disk") as (disk, what):
        _burst_bench(base, disk, what)


def _burst_bench(base: str, disk: Path, disk_what: str) -> None:
    from tests.integration.service import FakeApiServer, ServiceProcess, macvlan_params
    from tests.tools.bench_api_floor import floor_ms
    from tests.tools.bench_pools import reservation_crd

    api = FakeApiServer(Path(base) / "apiserver-h", crds=[reservation_crd()], tls=True).start()
    api.add_node("node-a")
    lab = Lab(base=disk / "h", nics=("eth1",))
    service = None
    try:
        plain = _claims(api, macvlan_params(lab, master="eth1", subnet="10.91.0.0/16", network="bench-h"), "h")
        pooled = _claims(
            api, pool_params(lab, master="eth1", subnet="10.93.0.0/22", network="bench-hp", pool="bench-h"), "hp"
        )
        service = ServiceProcess(lab, api, in_cluster=True)
        service.start()
        kubelet = service.kubelet
        api.latency = LATENCY
        alone = _alone(kubelet, plain[0])
        time.sleep(2.0)
        idle_rss, _ = rss_mib(service.proc.pid)
        claim_paths = [
            f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}" for pod in plain for ns, _, name in pod
        ]
        floor = floor_ms(api.url, api.ca_path, api.add_token("bench-floor"), claim_paths, CONNECTIONS)
        title = (
            f"(h) {BURST_PODS} pods x 2 claims at once, {LATENCY * 1000:.0f} ms API latency, in-cluster config over "
            f"HTTPS as the DaemonSet; the state dir on {disk_what}:"
        )
        _report(service, kubelet, api, plain, alone, title, floor)
        _, peak_rss = rss_mib(service.proc.pid)
        print(
            f"    service RSS: idle {idle_rss:.1f} MiB (goal <= 80 {'OK' if idle_rss <= 80 else 'MISSED'}), "
            f"peak {peak_rss:.1f} MiB (goal <= 100 {'OK' if peak_rss <= 100 else 'MISSED'})"
        )
        alone = _alone(kubelet, pooled[0])
        reserved_before = len(api.requests_to("POST", "addressreservations"))
        _report(
            service,
            kubelet,
            api,
            pooled,
            alone,
            "    the same on a network with an address pool (a /22, 1021 addresses):",
        )
        creates = len(api.requests_to("POST", "addressreservations")) - reserved_before
        left = len(api.list_custom_objects("addressreservations"))
        _, peak_rss = rss_mib(service.proc.pid)
        print(
            f"    reservation creates in the {BURSTS} bursts: {creates} for {BURSTS * 2 * BURST_PODS} claims; left after the unprepares: "
            f"{left}; service RSS peak {peak_rss:.1f} MiB"
        )
    finally:
        api.latency = 0.0
        if service:
            service.close()
        api.close()
        lab.close()
