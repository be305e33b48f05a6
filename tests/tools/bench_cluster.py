"""``make bench`` (g): the kubelet plugin service's load on the API server, with the frozen
bundle against the test API server.

(g) 20 services as 20 nodes against one API server, 200 pod starts on node 1 (claim allocated
    and reserved, pod bound, NodePrepareResources, CNI ADD, status visible; then DEL and
    NodeUnprepareResources): API requests per pod start by node 1, and what the other 19 nodes
    asked and were sent about claims meanwhile (goal: nothing); then as many pod starts on a
    network with an address pool (issue 21: the reservation's create and delete; goal <= 5).

Run from ``tests/tools/bench.py`` inside its throwaway host netns (``BENCH_HOST_NETNS``).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

from tests.harness import Lab

NODES = 20
POD_STARTS = int(os.environ.get("BENCH_POD_STARTS", "200"))


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
