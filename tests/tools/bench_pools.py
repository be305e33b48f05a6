"""``make bench`` (j) and (k): what an address pool costs in API requests, and the measurement
behind issue 21's design choice.  ``BENCH_ONLY=pools`` runs these alone.

(j) dracni's allocator (``PoolAllocator`` through ``ApiReservations``, the real kubernetes client
    over HTTP to the test API server): requests per allocation, average and max, with the pool
    0%, 50% and 90% full of reservations held by other nodes (objects created directly); "cold"
    is a service just started (a new allocator per allocation), "warm" one allocator that has
    met the taken addresses before.  Each allocation is released again, so the fill stays put.
(k) the same workloads under both designs (``tests/tools/bench_blocks.py`` models the other:
    node-owned blocks as Calico's IPAM), each on a fresh test API server, counted from its
    request log: 3 nodes allocating concurrently; 100 allocations at once on one node at 20 ms
    API latency; a /27 filled across 3 nodes (handed out before the first refusal, and in all);
    then one node lost (its Node deleted: what becomes usable without a controller); a pool 90%
    full.  Printed as one table.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from dracni.kube.api import KubeApi, load_api_client
from dracni.kube.reservations import ApiReservations, NodeUid
from dracni.pools.allocator import Pick, PoolAllocator, PoolFull
from dracni.pools.model import parse_pool
from dracni.pools.reservations import Holder, Reservation, reservation_body
from tests.fakes.apiserver import FakeApiServer
from tests.harness import REPO
from tests.tools.bench_blocks import BLOCK_CRD, BlockNode, BlockPool

CRD_FILE = REPO / "spec" / "crds" / "addressreservations.dracni.io.yaml"
LATENCY = 0.020
NODES = ("node-1", "node-2", "node-3")
#: allocations measured per figure of (j) and of the 90% row of (k)
SAMPLES = 100


def reservation_crd() -> dict[str, Any]:
    with open(CRD_FILE, encoding="utf-8") as fh:
        return next(d for d in yaml.safe_load_all(fh) if d)


def node_of(user_agent: str | None) -> str:
    """``dracni/<version> (<node>)`` -> ``<node>``."""
    agent = user_agent or ""
    return agent[agent.find("(") + 1 : agent.rfind(")")] if "(" in agent else "?"


def server(base: Path, name: str) -> FakeApiServer:
    api = FakeApiServer(base / name, crds=[reservation_crd(), BLOCK_CRD]).start()
    for node in (*NODES, "filler"):
        api.add_node(node)
    return api


def count(api: FakeApiServer, node: str, status: int | None = None) -> int:
    return sum(1 for r in api.requests_to() if node_of(r.user_agent) == node and (status is None or r.status == status))


class ReservationNode:
    """One node's side of dracni's design: its ``PoolAllocator``, as the service builds it."""

    def __init__(self, api: FakeApiServer, node: str, pool_spec: dict[str, Any]) -> None:
        self.client = load_api_client(api.kubeconfig_path, node)
        self.kube = KubeApi(self.client)
        self.pool = parse_pool(pool_spec, "addressPool")
        self.node_uid = NodeUid(self.kube, node)
        self.allocator = PoolAllocator(ApiReservations(self.kube), node, self.node_uid)
        self._held: dict[str, Reservation] = {}
        self._lock = threading.Lock()

    def fresh(self) -> None:
        """A service just started: a new allocator (the Node's UID read already)."""
        self.allocator = PoolAllocator(ApiReservations(self.kube), self.allocator.node, self.node_uid)

    def allocate(self, holder: str) -> str | None:
        self.allocator.ensure_loaded()
        who = Holder(namespace="bench", claim=holder, claim_uid=str(uuid.uuid4()), request="net", device="lan/eth1")
        try:
            got = self.allocator.reserve_free(Pick(self.pool, "ipv4", f"{who.claim_uid}/net/lan/eth1//ipv4"), who)
        except PoolFull:
            return None
        with self._lock:
            self._held[str(got.ip)] = got
        return str(got.ip)

    def release(self, address: str) -> None:
        with self._lock:
            held = self._held.pop(address)
        assert not self.allocator.release([held])

    def close(self) -> None:
        self.client.close()


def measured(api: FakeApiServer, node: str, call: Callable[[], Any]) -> tuple[Any, int]:
    """``call()``'s result and the requests ``node`` made during it (the node's calls are serial)."""
    before = count(api, node)
    got = call()
    return got, count(api, node) - before


# -- (j) ------------------------------------------------------------------------------------------
def allocation_cost(base: Path) -> None:
    spec = {"name": "lan", "subnets": [{"subnet": "10.20.0.0/24"}]}
    print("(j) dracni's allocator, requests per allocation (/24 pool, 253 addresses; fill by other nodes):")
    for level in (0.0, 0.5, 0.9):
        api = server(base, f"j-{int(level * 100)}")
        filler = ReservationNode(api, "filler", spec)
        try:
            size = filler.pool.size("ipv4")
            taken = random.Random(21).sample(range(size), round(level * size))
            for k, index in enumerate(taken):
                node = NODES[1 + k % 2]
                who = Holder(namespace="other", claim=f"c{k}", claim_uid=f"u{k}", request="net", device="lan/eth1")
                body = reservation_body("lan", filler.pool.address("ipv4", index), node, None, who)
                filler.kube.create_reservation(body)
            me = ReservationNode(api, "node-1", spec)
            me.node_uid()
            figures = []
            for mode in ("cold", "warm"):
                costs = []
                for i in range(SAMPLES):
                    if mode == "cold":
                        me.fresh()
                        me.allocator.ensure_loaded()
                    got, n = measured(api, "node-1", lambda i=i, me=me: me.allocate(f"j{i}"))
                    assert got is not None
                    costs.append(n)
                    me.release(got)
                figures.append(f"{mode} {statistics.mean(costs):.2f} (max {max(costs)})")
            print(f"    {int(level * 100):3d}% full: {', '.join(figures)}")
            me.close()
        finally:
            filler.close()
            api.close()


# -- (k) ------------------------------------------------------------------------------------------
DESIGNS = ("reservations", "blocks, borrowing", "blocks, strict")


def nodes_of(api: FakeApiServer, design: str, cidr: str, block: int) -> dict[str, Any]:
    if design == "reservations":
        spec = {"name": "lan", "subnets": [{"subnet": cidr}]}
        return {n: ReservationNode(api, n, spec) for n in NODES}
    pool = BlockPool("lan", cidr, block, borrow=design == "blocks, borrowing")
    return {n: BlockNode(pool, n, api.kubeconfig_path) for n in NODES}


def cost_line(costs: list[int]) -> str:
    return f"{statistics.mean(costs):.2f} ({max(costs)})" if costs else "-"


def concurrent(api: FakeApiServer, nodes: dict[str, Any], per_node: int = 30) -> dict[str, str]:
    costs: list[int] = []
    got: list[str | None] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(nodes))

    def run(name: str) -> None:
        barrier.wait()
        for i in range(per_node):
            address, n = measured(api, name, lambda i=i: nodes[name].allocate(f"{name}-{i}"))
            with lock:
                costs.append(n)
                got.append(address)

    threads = [threading.Thread(target=run, args=(n,)) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    handed = [a for a in got if a]
    return {
        "3 nodes x 30 at once: req/alloc avg (max)": cost_line(costs),
        "   409 answers; distinct": f"{count_409(api)}; {len(set(handed))}/{len(got)}",
    }


def burst(api: FakeApiServer, nodes: dict[str, Any], pods: int = 100, workers: int = 32) -> dict[str, str]:
    """``pods`` allocations on one node at once, ``workers`` at a time (the service's gRPC workers)."""
    node = nodes["node-1"]
    node.allocate("warm-up")  # the node's list (and Node UID) read before the burst
    before = count(api, "node-1")
    times: list[float] = []

    def one(i: int) -> None:
        started = time.perf_counter()
        assert node.allocate(f"b{i}") is not None
        times.append(time.perf_counter() - started)

    api.latency = LATENCY
    try:
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(one, range(pods)))
        wall = time.perf_counter() - started
    finally:
        api.latency = 0.0
    times.sort()
    return {
        f"{pods} at once on 1 node, {LATENCY * 1000:.0f} ms latency: wall ms": f"{wall * 1000:.0f}",
        "   per allocation p50 / p99 ms": f"{times[len(times) // 2] * 1000:.0f} / {times[-1 - len(times) // 100] * 1000:.0f}",
        "   req/alloc; 409 answers": f"{(count(api, 'node-1') - before) / pods:.2f}; {count_409(api)}",
    }


def fill_and_lose(api: FakeApiServer, nodes: dict[str, Any], usable: int) -> dict[str, str]:
    """Round-robin until every node refused; then node-3's Node is deleted (its pods with it)."""
    handed: dict[str, list[str]] = {n: [] for n in nodes}
    first_refusal = None
    active = list(nodes)
    i = 0
    costs, refusals = [], []
    while active:
        name = active[i % len(active)]
        address, n = measured(api, name, lambda name=name, i=i: nodes[name].allocate(f"f{i}"))
        (costs if address else refusals).append(n)
        if address is None:
            first_refusal = first_refusal if first_refusal is not None else sum(map(len, handed.values()))
            active.remove(name)
        else:
            handed[name].append(address)
        i += 1
    total = sum(map(len, handed.values()))
    wide = sum(1 for r in api.requests_to() if "pool=" in r.query.get("labelSelector", ""))
    lost = len(handed["node-3"])
    api.delete_node("node-3")  # the garbage collector follows ownerReferences to it
    again = 0
    active = ["node-1", "node-2"]
    while active:
        name = active[again % len(active)]
        if nodes[name].allocate(f"g{again}") is None:
            active.remove(name)
        else:
            again += 1
    return {
        f"/27 ({usable} usable) across 3 nodes: first refusal after": str(first_refusal),
        "   handed out in all": str(total),
        "   req/alloc avg (max); req/refusal avg": f"{cost_line(costs)}; {statistics.mean(refusals):.1f}",
        "   cluster-wide lists": str(wide),
        "node-3 lost: of its addresses, usable again": f"{again} of {lost}",
    }


def ninety(api: FakeApiServer, nodes: dict[str, Any], usable: int) -> dict[str, str]:
    target = round(0.9 * usable)
    active, held, i = list(nodes), 0, 0
    while held < target and active:
        name = active[i % len(active)]
        if nodes[name].allocate(f"n{i}") is None:
            active.remove(name)
        else:
            held += 1
        i += 1
    api.reset_requests()
    costs, refused = [], 0
    for k in range(SAMPLES):
        address, n = measured(api, "node-1", lambda k=k: nodes["node-1"].allocate(f"m{k}"))
        costs.append(n)
        if address is None:
            refused += 1
        else:
            nodes["node-1"].release(address)
    lists = sum(1 for r in api.requests_to() if r.method == "GET" and "labelSelector" in r.query)
    return {
        f"{held}/{usable} full ({100 * held // usable}%): node-1's req/alloc avg (max)": cost_line(costs),
        "   refused; 409 answers; lists": f"{refused}; {count_409(api)}; {lists}",
    }


def count_409(api: FakeApiServer) -> int:
    return sum(1 for r in api.requests_to() if r.status == 409)


def design_table(base: Path) -> None:
    rows: dict[str, dict[str, str]] = {}
    for d, design in enumerate(DESIGNS):
        for scenario, cidr, block, run in (
            ("c", "10.30.0.0/24", 64, lambda api, nodes: concurrent(api, nodes)),
            ("b", "10.30.0.0/24", 64, lambda api, nodes: burst(api, nodes)),
            ("f", "10.30.0.0/27", 8, lambda api, nodes: fill_and_lose(api, nodes, 29)),
            ("n", "10.30.0.0/24", 64, lambda api, nodes: ninety(api, nodes, 253)),
        ):
            api = server(base, f"k-{d}-{scenario}")
            nodes = nodes_of(api, design, cidr, block)
            try:
                api.reset_requests()
                for row, value in run(api, nodes).items():
                    rows.setdefault(row, {})[design] = value
            finally:
                for node in nodes.values():
                    node.close()
                api.close()
    print("(k) reservations (dracni: one object per address, atomic create) against node-owned blocks")
    print("    (Calico's model: blocks of 64, of 8 in the /27; borrowing = StrictAffinity off):")
    width = max(map(len, rows)) + 2
    print("    " + " " * width + "".join(f"{d:>20s}" for d in DESIGNS))
    for row, values in rows.items():
        print("    " + row.ljust(width) + "".join(f"{values.get(d, '-'):>20s}" for d in DESIGNS))


def pools_bench(base: str) -> None:
    """(j) and (k)."""
    allocation_cost(Path(base))
    design_table(Path(base))
