"""``make demo``, part two: two nodes share one network, and its addresses, through a pool.

Two "nodes" (network namespaces, each with its own ``eth1`` on one bridge: one L2 segment) run
the frozen ``dracni kubelet-plugin`` against one test API server that serves the
AddressReservation CRD and runs the shipped admission policy (tests/multinode.py).  The
administrator's macvlan network names the address pool ``lan``; two pods on each node get a claim
of it.  Each node's service reserves its pods' addresses at prepare time (one AddressReservation
object per address), so the four pods get four distinct addresses: host-local only records what
the pool chose.  The pods ping each other across the nodes over net1.  Then DEL and unprepare give the
addresses back, and nothing is left: no reservation, no namespace, no temp dir.
"""

from __future__ import annotations

import json

from tests.multinode import Cluster, net1_addresses, netns_left, ping, pool_network

PODS_PER_NODE = 2


def step(text: str) -> None:
    print(f"\n\033[1m==> {text}\033[0m", flush=True)


def main() -> int:
    cluster = Cluster(nodes=2)
    names: list[str] = []
    ok = False
    try:
        names = cluster.netns_names()
        step("two nodes on one L2 segment, one API server with the AddressReservation CRD")
        for node in cluster.nodes:
            print(f"{node.name}: netns {node.lab.host.name}, eth1 on bridge br0 of {cluster.segment.name}")

        step("the administrator's DeviceClass network: macvlan, its addresses from the pool 'lan'")
        network = pool_network(
            "lan", [{"subnet": "10.10.1.0/24", "ranges": [{"start": "10.10.1.10", "end": "10.10.1.200"}]}],
            data_dir=cluster.ipam_dir,
        )  # fmt: skip
        print(json.dumps(network, indent=2))

        step(f"{PODS_PER_NODE} pods on each node, one claim each; both nodes' kubelets prepare them at once")
        placed = [
            (node, cluster.claim(node, f"web-{node.index}{letter}", network))
            for node in cluster.nodes
            for letter in "ab"[:PODS_PER_NODE]
        ]
        errors = {uid: e for uid, e in cluster.prepare(placed).items() if e}
        if errors:
            print(f"prepare failed: {errors}")
            return 1
        for node, claim in placed:
            print(f"{node.name}: claim {claim['metadata']['name']}: {', '.join(cluster.addresses(node, claim))}")

        step("kubectl get addressreservations")
        print(cluster.table())

        step("runtime: cnitool add on each node: each pod's net1 has its reserved address")
        sandboxes = [(node, claim, cluster.add_pod(node, claim)) for node, claim in placed]
        for node, claim, sandbox in sandboxes:
            print(f"{node.name}: pod {cluster.pod_of(claim)[0]}: net1 {', '.join(net1_addresses(sandbox))}")
        addresses = [a for _, _, s in sandboxes for a in net1_addresses(s)]
        distinct = len(set(addresses)) == len(addresses)
        print(f"distinct addresses: {distinct}")

        step("ping across the nodes over net1")
        pings = []
        for src_node, src_claim, src in sandboxes:
            for dst_node, dst_claim, dst in sandboxes:
                if dst_node is src_node:
                    continue
                target = net1_addresses(dst)[0]
                answered = ping(src, target)
                pings.append(answered)
                print(
                    f"{cluster.pod_of(src_claim)[0]} ({src_node.name}) -> {cluster.pod_of(dst_claim)[0]} "
                    f"({dst_node.name}) {target}: {'answered' if answered else 'NO ANSWER'}"
                )

        step("teardown: cnitool del, unprepare: the addresses go back to the pool")
        for node, claim, sandbox in sandboxes:
            cluster.del_pod(node, claim, sandbox)
        errors = {uid: e for uid, e in cluster.unprepare(placed).items() if e}
        left = cluster.reservations()
        print(cluster.table() if left else "No resources found")
        records = [r["name"] for node in cluster.nodes for r in node.records()]
        print(f"prepared claims left: {records or 'none'}")
        ok = distinct and all(pings) and not errors and not left and not records
    finally:
        tmp = cluster.tmp
        cluster.close()
    still = netns_left(names)
    step("cleanup")
    print(f"namespaces left: {still or 'none'}; temp dir removed: {not tmp.exists()}")
    return 0 if ok and not still and not tmp.exists() else 1
