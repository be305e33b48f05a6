"""Cluster-wide address pools through the frozen binary: three nodes, one L2 segment, one API
server (issue 21 item 7).

Each node is a netns with its own eth1 on one bridge and its own ``dracni kubelet-plugin``
service with a fake kubelet (tests/multinode.py); the services share one fake API server that
serves the AddressReservation CRD and runs the shipped admission policy, each with a token bound
to its own node.  Claims are allocated each node's eth1 with the class network's pool.  What is
checked: the addresses recorded in the PreparedClaim records (``poolIPs``/``requestedIPs``), the
AddressReservation objects, the addresses on the pods' net1 after a real CNI ADD (cnitool,
macvlan, host-local or static), and pings between pods of different nodes over the segment.
"""

from __future__ import annotations

import ipaddress
import signal
import threading
import uuid
from collections import Counter

import grpc
import pytest

from tests.integration.service import wait_for
from tests.multinode import Cluster, net1_addresses, netns_left, ping, pool_network

pytestmark = pytest.mark.integration


def running(world: Cluster):
    try:
        yield world
        assert not world.api.internal_errors, world.api.internal_errors
    finally:
        names = world.netns_names()
        world.close()
        assert not netns_left(names), netns_left(names)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three nodes, shared by the tests that restart no service (each uses a pool of its own)."""
    yield from running(Cluster(tmp_path_factory.mktemp("multinode")))


@pytest.fixture
def two_nodes(tmp_path):
    """Two nodes of the test's own: a service restarted in a test must not outlive it
    (tests/conftest.py kills what a test leaves running)."""
    yield from running(Cluster(tmp_path, nodes=2))


def bare(cidr: str) -> str:
    return str(ipaddress.ip_interface(cidr).ip)


def assert_distinct(cluster: Cluster, placed: list, pool: str, per_claim: int = 1) -> set[str]:
    """Every claim's addresses (from its record) distinct across the nodes, and the pool's
    reservations exactly those, each held by its claim on its node, owned by its Node."""
    by_address: dict[str, tuple[str, str]] = {}
    for node, claim in placed:
        got = cluster.addresses(node, claim)
        assert len(got) == per_claim, (claim["metadata"]["name"], got)
        for cidr in got:
            address = bare(cidr)
            assert address not in by_address, f"{address} held by {by_address[address]} and {claim['metadata']['name']}"
            by_address[address] = (node.name, claim["metadata"]["name"])
    reservations = cluster.reservations(pool)
    counts = Counter(r["spec"]["address"] for r in reservations)
    assert not [a for a, n in counts.items() if n > 1]
    assert {r["spec"]["address"]: (r["spec"]["node"], r["spec"]["claim"]["name"]) for r in reservations} == by_address
    uids = {n.name: n.uid for n in cluster.nodes}
    for r in reservations:
        assert r["metadata"]["labels"] == {"dracni.io/pool": pool, "dracni.io/node": r["spec"]["node"]}
        (owner,) = r["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Node", r["spec"]["node"], uids[r["spec"]["node"]])
    return set(by_address)


def new_claims(cluster: Cluster, network: dict, prefix: str, per_node: int, nodes=None) -> list:
    nodes = nodes or cluster.nodes
    return [(n, cluster.claim(n, f"{prefix}-{n.index}-{uuid.uuid4().hex[:6]}", network)) for n in nodes
            for _ in range(per_node)]  # fmt: skip


def prepare_ok(cluster: Cluster, placed: list, parallel: int = 12) -> None:
    errors = {uid: e for uid, e in cluster.prepare(placed, parallel).items() if e}
    assert not errors, errors


def unprepare_ok(cluster: Cluster, placed: list) -> None:
    errors = {uid: e for uid, e in cluster.unprepare(placed).items() if e}
    assert not errors, errors


def test_three_nodes_prepare_concurrently_distinct_addresses_pods_ping_and_churn(cluster):
    # 100 addresses (10.10.1.10-.109): after the churn, released addresses must be reused.
    network = pool_network(
        "lan", [{"subnet": "10.10.1.0/24", "ranges": [{"start": "10.10.1.10", "end": "10.10.1.109"}]}],
        data_dir=cluster.ipam_dir,
    )  # fmt: skip
    placed = new_claims(cluster, network, "web", 30)
    prepare_ok(cluster, placed)
    first = assert_distinct(cluster, placed, "lan")
    assert len(first) == 90

    # Two pods on each node get their addresses on net1 and reach pods of the other nodes.
    running = {}
    for node in cluster.nodes:
        for item in [p for p in placed if p[0] is node][:2]:
            running[item[1]["metadata"]["uid"]] = (item, cluster.add_pod(node, item[1]))
    for (node, claim), sandbox in running.values():
        assert net1_addresses(sandbox) == cluster.addresses(node, claim)
    pods = list(running.values())
    for (src_node, _), src in pods:
        for (dst_node, _), dst in pods:
            if dst_node is not src_node:
                assert ping(src, net1_addresses(dst)[0]), f"{src_node.name} -> {dst_node.name}"
    free = next(f"10.10.1.{i}" for i in range(10, 110) if f"10.10.1.{i}" not in first)
    assert not ping(pods[0][1], free, tries=1), "a free address answered: the ping proves nothing"

    # Churn: the pods go (DEL), half the claims are unprepared, as many new ones come.
    for (node, claim), sandbox in running.values():
        cluster.del_pod(node, claim, sandbox)
    leaving = [p for i, p in enumerate(placed) if i % 2 == 0]
    staying = [p for i, p in enumerate(placed) if i % 2 == 1]
    released = {bare(c) for node, claim in leaving for c in cluster.addresses(node, claim)}
    unprepare_ok(cluster, leaving)
    assert {r["spec"]["address"] for r in cluster.reservations("lan")} == first - released
    coming = new_claims(cluster, network, "api", 15)
    prepare_ok(cluster, coming)
    after = assert_distinct(cluster, staying + coming, "lan")
    assert len(after) == 90 and len(after & released) >= 35  # only 10 never-used addresses are left

    unprepare_ok(cluster, staying + coming)
    assert cluster.reservations("lan") == []


def test_a_full_pool_refuses_the_next_claim_with_a_clear_error_and_nothing_else_changes(cluster):
    # A /27: 32 addresses, minus the network, broadcast and gateway (.1): 29 to hand out.
    network = pool_network("small", [{"subnet": "10.10.2.0/27"}], data_dir=cluster.ipam_dir)
    placed = new_claims(cluster, network, "fill", 10)[:29]
    prepare_ok(cluster, placed)
    assert len(assert_distinct(cluster, placed, "small")) == 29
    before = {r["metadata"]["name"]: r["metadata"]["resourceVersion"] for r in cluster.reservations("small")}
    records = {c["metadata"]["uid"]: n.record(c["metadata"]["uid"]) for n, c in placed}

    node = cluster.nodes[2]
    extra = cluster.claim(node, "one-too-many", network)
    error = cluster.prepare([(node, extra)])[extra["metadata"]["uid"]]
    assert "claim default/one-too-many" in error and "address pool small" in error, error
    assert "is full: all 29 IPv4 addresses are reserved" in error, error
    assert node.record(extra["metadata"]["uid"]) is None
    events, _ = wait_for(
        lambda: [
            e
            for e in cluster.api.list_events("default")
            if e["reason"] == "PrepareFailed" and e["regarding"]["name"] == "one-too-many"
        ],  # fmt: skip
        10.0,
        "the PrepareFailed Event",
    )
    assert "address pool small" in events[0]["note"] and events[0]["type"] == "Warning"
    # Nothing else changed: the same reservations, the same records; a pod of a full pool runs.
    assert {r["metadata"]["name"]: r["metadata"]["resourceVersion"] for r in cluster.reservations("small")} == before
    assert {c["metadata"]["uid"]: n.record(c["metadata"]["uid"]) for n, c in placed} == records
    n0, c0 = placed[0]
    sandbox = cluster.add_pod(n0, c0)
    assert net1_addresses(sandbox) == cluster.addresses(n0, c0)
    cluster.del_pod(n0, c0, sandbox)

    # One claim goes: the refused one fits now (kubelet retries).
    unprepare_ok(cluster, placed[:1])
    assert cluster.prepare([(node, extra)])[extra["metadata"]["uid"]] == ""
    unprepare_ok(cluster, placed[1:] + [(node, extra)])
    assert cluster.reservations("small") == []


def test_a_shared_claim_gives_each_pod_its_own_address(cluster):
    """A claim two pods share (kubelet prepares it once; the second pod joins it): each pod's
    attachment gets an address of its own, reserved for that pod, and both go at unprepare."""
    network = pool_network("shared", [{"subnet": "10.10.5.0/24"}], data_dir=cluster.ipam_dir)
    node = cluster.nodes[0]
    claim = cluster.claim(node, "team", network, pod_name="team-a")
    pod_a = claim["status"]["reservedFor"][0]
    pod_b = {"resource": "pods", "name": "team-b", "uid": str(uuid.uuid4())}
    cluster.api.set_claim_allocation("default", "team", claim["status"]["allocation"], [pod_a, pod_b])
    claim = cluster.api.get_claim("default", "team")
    prepare_ok(cluster, [(node, claim)])
    (device,) = node.record(claim["metadata"]["uid"])["devices"]
    by_pod = device["poolIPs"]
    assert set(by_pod) == {pod_a["uid"], pod_b["uid"]} and by_pod[pod_a["uid"]] != by_pod[pod_b["uid"]]
    held = {r["spec"]["address"]: r["spec"]["pod"]["uid"] for r in cluster.reservations("shared")}
    assert held == {bare(by_pod[p["uid"]][0]): p["uid"] for p in (pod_a, pod_b)}

    sandboxes = []
    for pod in (pod_a, pod_b):
        sandbox = node.lab.pod(f"dracni-{node.name}")
        node.lab.cnitool("add", sandbox, pod_uid=pod["uid"], pod_name=pod["name"], namespace="default")
        assert net1_addresses(sandbox) == by_pod[pod["uid"]]
        sandboxes.append((pod, sandbox))
    assert ping(sandboxes[0][1], bare(by_pod[pod_b["uid"]][0]))
    for pod, sandbox in sandboxes:
        node.lab.cnitool("del", sandbox, pod_uid=pod["uid"], pod_name=pod["name"], namespace="default")
        sandbox.close()
        node.lab.pods.remove(sandbox)
    unprepare_ok(cluster, [(node, claim)])
    assert cluster.reservations("shared") == []


def test_a_persistent_claim_keeps_its_address_and_a_claim_pinning_it_is_refused(two_nodes):
    cluster = two_nodes
    network = pool_network("keep", [{"subnet": "10.10.3.0/24"}], data_dir=cluster.ipam_dir, pinnable=True)
    choice = {"apiVersion": "dracni.io/v1alpha1", "kind": "NetworkAttachment", "persistentIPs": True}
    node1, node2 = cluster.nodes[0], cluster.nodes[1]
    cluster.api.add_namespace("team-a")
    holder = cluster.claim(node1, "sticky", choice, namespace="team-a", source="FromClaim", class_params=network)
    prepare_ok(cluster, [(node1, holder)])
    (address,) = cluster.addresses(node1, holder)
    (kept,) = cluster.reservations("keep")
    assert kept["spec"]["keep"] is True and kept["spec"]["claim"]["name"] == "sticky"
    unprepare_ok(cluster, [(node1, holder)])
    assert [r["metadata"]["uid"] for r in cluster.reservations("keep")] == [kept["metadata"]["uid"]]

    pin = {"apiVersion": "dracni.io/v1alpha1", "kind": "NetworkAttachment", "runtimeConfig": {"ips": [address]}}
    thief = cluster.claim(node2, "thief", pin, source="FromClaim", class_params=network)
    error = cluster.prepare([(node2, thief)])[thief["metadata"]["uid"]]
    assert f"address {bare(address)} of pool keep is reserved for claim team-a/sticky" in error, error
    assert node2.record(thief["metadata"]["uid"]) is None
    assert [r["metadata"]["uid"] for r in cluster.reservations("keep")] == [kept["metadata"]["uid"]]

    # The persistent claim's next pod gets its address back: the same reservation.
    prepare_ok(cluster, [(node1, holder)])
    assert cluster.addresses(node1, holder) == [address]
    assert [r["metadata"]["uid"] for r in cluster.reservations("keep")] == [kept["metadata"]["uid"]]
    unprepare_ok(cluster, [(node1, holder)])

    # The claim is deleted while its node's service is down: the service releases the kept
    # reservation when it starts again (its reconcile: the claim is gone).
    node1.service.stop()
    cluster.api.delete_claim("team-a", "sticky")
    cluster.restart(node1)
    wait_for(lambda: not cluster.reservations("keep"), 10.0, "the kept reservation of the deleted claim to go")
    assert cluster.prepare([(node2, thief)])[thief["metadata"]["uid"]] == ""
    assert cluster.addresses(node2, thief) == [address]
    unprepare_ok(cluster, [(node2, thief)])
    assert cluster.reservations("keep") == []


def test_ipv6_and_dual_stack_pools(cluster):
    v6 = pool_network("six", [{"subnet": "fd00:10:6::/64"}], data_dir=cluster.ipam_dir)
    dual = pool_network("dual", [{"subnet": "10.10.4.0/24"}, {"subnet": "fd00:10:4::/64"}], ipam="static")
    only6 = new_claims(cluster, v6, "v6", 3)
    both = new_claims(cluster, dual, "ds", 3)
    prepare_ok(cluster, only6 + both)
    assert all(":" in a for a in assert_distinct(cluster, only6, "six"))
    addresses = assert_distinct(cluster, both, "dual", per_claim=2)
    for node, claim in both:
        v4, v6addr = cluster.addresses(node, claim)
        assert ipaddress.ip_interface(v4).version == 4 and ipaddress.ip_interface(v6addr).version == 6
    assert sum(":" in a for a in addresses) == 9
    for r in cluster.reservations("six"):  # POOLS.md section 2: "v6-" + ":" -> "-" (+ "0" after a trailing ":")
        address = r["spec"]["address"]
        assert address == str(ipaddress.ip_address(address))  # canonical
        encoded = "v6-" + address.replace(":", "-") + ("0" if address.endswith(":") else "")
        assert r["metadata"]["name"] == f"six.{encoded}"

    # One dual-stack pod on each of two nodes: both addresses on net1, reachable over both.
    pods = [((n, c), cluster.add_pod(n, c)) for n, c in (both[0], both[3])]
    for (node, claim), sandbox in pods:
        assert sorted(net1_addresses(sandbox)) == sorted(cluster.addresses(node, claim))
    (_, a), ((_, other), _b) = pods[0], pods[1]
    for target in cluster.addresses(pods[1][0][0], other):
        assert ping(a, target, tries=6), target  # IPv6: the first tries may meet DAD
    for (node, claim), sandbox in pods:
        cluster.del_pod(node, claim, sandbox)
    unprepare_ok(cluster, only6 + both)
    assert cluster.reservations("six") == [] and cluster.reservations("dual") == []


def test_a_service_killed_mid_burst_leaves_no_duplicate_and_no_leak(two_nodes):
    cluster = two_nodes
    network = pool_network("burst", [{"subnet": "10.10.5.0/24"}], data_dir=cluster.ipam_dir)
    node = cluster.nodes[0]
    others = new_claims(cluster, network, "steady", 8, nodes=cluster.nodes[1:])
    burst = new_claims(cluster, network, "burst", 24, nodes=[node])
    outcome: dict[str, str] = {}

    def kubelet_burst() -> None:
        for item in burst:  # kubelet keeps starting pods; the calls fail while the plugin is gone
            try:
                outcome.update(cluster.prepare([item], retry=0))
            except grpc.RpcError as exc:
                outcome[item[1]["metadata"]["uid"]] = f"rpc: {exc.code().name}"

    thread = threading.Thread(target=kubelet_burst)
    thread.start()
    prepare_ok(cluster, others, parallel=4)
    wait_for(lambda: len(outcome) >= 6, 20.0, "a few prepares of the burst")
    node.service.proc.send_signal(signal.SIGKILL)
    node.service.proc.wait()
    thread.join(60)
    assert not thread.is_alive()
    assert any(e for e in outcome.values()), "the kill came after the burst: it tested nothing"

    cluster.restart(node)  # the DaemonSet restarts it; kubelet retries every claim
    prepare_ok(cluster, burst, parallel=6)
    assert_distinct(cluster, burst + others, "burst")
    unprepare_ok(cluster, burst + others)
    assert cluster.reservations("burst") == []


def test_a_deleted_node_s_addresses_become_usable_again(tmp_path):
    with Cluster(tmp_path, nodes=2) as world:
        # Four addresses (10.10.7.10-.13): node-2 takes them all, node-1's claim finds it full.
        network = pool_network(
            "gone", [{"subnet": "10.10.7.0/24", "ranges": [{"start": "10.10.7.10", "end": "10.10.7.13"}]}],
            data_dir=world.ipam_dir,
        )  # fmt: skip
        node1, node2 = world.nodes
        held = new_claims(world, network, "held", 4, nodes=[node2])
        prepare_ok(world, held)
        waiting = world.claim(node1, "waiting", network)
        assert "is full" in world.prepare([(node1, waiting)])[waiting["metadata"]["uid"]]

        world.api.delete_node(node2.name)  # kubectl delete node: the node is gone for good
        wait_for(lambda: not world.reservations("gone"), 10.0, "the garbage collector to delete node-2's reservations")
        assert world.prepare([(node1, waiting)])[waiting["metadata"]["uid"]] == ""
        (r,) = world.reservations("gone")
        assert r["spec"]["node"] == node1.name and r["spec"]["claim"]["name"] == "waiting"
        assert not world.api.internal_errors, world.api.internal_errors
        names = world.netns_names()
    assert not netns_left(names)
