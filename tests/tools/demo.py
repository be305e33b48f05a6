"""``make demo``: dracni end to end without a cluster.

A "host" network namespace stands in for the node (its NIC ``eth1`` is a veth), "pod"
namespaces for three pod sandboxes.  The administrator's DeviceClass defines a macvlan network;
three ResourceClaims of that class, each allocated the shared ``eth1`` with its own shareID,
ask for it as ``net1`` (the default tenant policy: the claim chooses, the class defines);
``dracni prepare`` records them in the state dir; cnitool (the runtime) runs the node's
conflist — ptp for the primary interface, then dracni — so the pod gets ``eth0`` and ``net1``;
``dracni publish-status`` writes the claim's would-be ``status.devices``.  Then DEL, unprepare,
and a check that nothing is left behind.

Part two (tests/tools/demo_pools.py): two nodes on one L2 segment share one network whose
addresses come from a cluster-wide pool: distinct addresses, their reservations, a ping across
the nodes, and nothing left after the teardown.
"""

from __future__ import annotations

import json
import sys
import uuid

from tests.harness import Lab, attachment_params, claim_manifest, run, write_manifest

PODS = ("demo-a", "demo-b", "demo-c")  # three pods sharing the node's eth1


def demo_claim(lab: Lab, pod: str, pod_uid: str) -> dict:
    # The DeviceClass's network (administrator): no master, the allocated device fills it in.
    plugin = {
        "type": "macvlan",
        "mode": "bridge",
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.10.1.0/24"}]], "dataDir": str(lab.ipam_dir)},
    }
    network = attachment_params([plugin], name="macvlan")
    # The claim's own config (tenant): which network interface name it wants, nothing more.
    choice = {"apiVersion": "dracni.io/v1alpha1", "kind": "NetworkAttachment", "ifName": "net1"}
    claim = claim_manifest(
        f"{pod}-net",
        pod_uid=pod_uid,
        pod_name=pod,
        devices=[{"request": "macvlan", "pool": "demo-node", "device": "eth1", "params": choice, "class": network}],
        source="FromClaim",
    )
    # eth1 is offered for sharing (consumable capacity): each allocation carries its own shareID.
    claim["status"]["allocation"]["devices"]["results"][0]["shareID"] = str(uuid.uuid4())
    return claim


def step(text: str) -> None:
    print(f"\n\033[1m==> {text}\033[0m", flush=True)


def show(proc) -> None:
    out = (proc.stdout or b"").decode().rstrip()
    if out:
        print(out)


def main() -> int:
    lab = Lab()
    try:
        state = f"--state-dir={lab.state_dir}"
        nics = f"--nic-netns={lab.host.path}"
        step("node network: ptp (primary) chained with dracni")
        print(json.dumps(lab.write_conflist(), indent=2))

        step("dracni inventory: the node's eth1, offered to many claims (consumable capacity)")
        show(lab.dracni("inventory", nics, "--nic-include=eth1", "--node-name=demo-node"))

        step("three ResourceClaims of the class's macvlan network, each allocated eth1 with its own shareID")
        uids = {pod: str(uuid.uuid4()) for pod in PODS}
        for pod in PODS:
            manifest = write_manifest(lab.claims_dir, demo_claim(lab, pod, uids[pod]))
        print(manifest.read_text())

        step("dracni prepare (what NodePrepareResources does on a node)")
        show(lab.dracni("prepare", str(lab.claims_dir), state, nics))

        step("runtime: cnitool add podnet <pod netns>, for each of the three pods")
        sandboxes = {pod: lab.pod(f"dracni-{pod}") for pod in PODS}
        for pod in PODS:
            lab.cnitool("add", sandboxes[pod], pod_uid=uids[pod], pod_name=pod)
            print(f"{pod}: {sandboxes[pod].exec('ip', '-br', 'addr', 'show', 'net1').stdout.decode().strip()}")

        step("dracni publish-status: each claim's status.devices entry, keyed by its shareID")
        show(lab.dracni("publish-status", str(lab.claims_dir), state))
        for f in sorted(lab.claims_dir.glob("*.status.json")):
            (entry,) = json.loads(f.read_text())["status"]["devices"]
            print(f"{f.name}: device={entry['device']} shareID={entry['shareID']} {json.dumps(entry['networkData'])}")

        step("dracni inspect")
        show(lab.dracni("inspect", state))

        step("runtime: cnitool del of demo-a: the other two keep their net1")
        lab.cnitool("del", sandboxes["demo-a"], pod_uid=uids["demo-a"], pod_name="demo-a")
        for pod in PODS:
            has_net1 = any(w.startswith(b"net1") for w in sandboxes[pod].exec("ip", "-br", "link").stdout.split())
            print(f"{pod}: {'net1 still there' if has_net1 else 'no net1'}")

        step("the rest: del, publish the cleared status, unprepare")
        for pod in PODS[1:]:
            lab.cnitool("del", sandboxes[pod], pod_uid=uids[pod], pod_name=pod)
        show(lab.dracni("publish-status", str(lab.claims_dir), state))
        show(lab.dracni("unprepare", str(lab.claims_dir), state))
        left = sorted(p.name for p in lab.claims_dir.glob("*.status.json"))
        print(f"status files left: {left or 'none'}")
        records = sorted(
            str(p.relative_to(lab.state_dir)) for p in lab.state_dir.rglob("*.json") if not p.match("cache/*")
        )
        print(f"state records left: {records or 'none'}")
        ok = not left and not records
    finally:
        pod_names = [ns.name for ns in lab.pods] + [lab.host.name]
        lab.close()
    netns_left = [n for n in run(["ip", "netns", "list"]).stdout.decode().split() if n in pod_names]
    step("cleanup")
    print(f"namespaces left: {netns_left or 'none'}; temp dir removed: {not lab.tmp.exists()}")
    return 0 if ok and not netns_left and not lab.tmp.exists() else 1


if __name__ == "__main__":
    from tests.tools import demo_pools

    first = main()
    sys.exit(demo_pools.main() or first)
