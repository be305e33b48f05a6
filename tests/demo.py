"""``make demo``: dracni end to end without a cluster.

A "host" network namespace stands in for the node (its NIC ``eth1`` is a veth), a "pod"
namespace for the pod sandbox.  The administrator's DeviceClass defines a macvlan network; a
ResourceClaim of that class, allocated ``eth1``, asks for it as ``net1`` (the default tenant
policy: the claim chooses, the class defines); ``dracni prepare`` records it in the state dir; cnitool (the runtime) runs the node's
conflist — ptp for the primary interface, then dracni — so the pod gets ``eth0`` and ``net1``;
``dracni publish-status`` writes the claim's would-be ``status.devices``.  Then DEL, unprepare,
and a check that nothing is left behind.
"""

from __future__ import annotations

import json
import sys
import uuid

from tests.harness import Lab, attachment_params, claim_manifest, run, write_manifest

POD_UID = str(uuid.uuid4())


def demo_claim(lab: Lab) -> dict:
    # The DeviceClass's network (administrator): no master, the allocated device fills it in.
    plugin = {
        "type": "macvlan",
        "mode": "bridge",
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.10.1.0/24"}]], "dataDir": str(lab.ipam_dir)},
    }
    network = attachment_params([plugin], name="macvlan")
    # The claim's own config (tenant): which network interface name it wants, nothing more.
    choice = {"apiVersion": "dracni.io/v1alpha1", "kind": "NetworkAttachment", "ifName": "net1"}
    return claim_manifest(
        "demo-macvlan",
        pod_uid=POD_UID,
        pod_name="demo",
        devices=[{"request": "macvlan", "pool": "demo-node", "device": "eth1", "params": choice, "class": network}],
        source="FromClaim",
    )


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
        step("node network: ptp (primary) chained with dracni")
        print(json.dumps(lab.write_conflist(), indent=2))

        step("a ResourceClaim of the class's macvlan network, allocated eth1 and reserved for pod 'demo'")
        manifest = write_manifest(lab.claims_dir, demo_claim(lab))
        print(manifest.read_text())

        step("dracni prepare (what NodePrepareResources does on a node)")
        show(lab.dracni("prepare", str(lab.claims_dir), state, f"--nic-netns={lab.host.path}"))

        step("runtime: cnitool add podnet <pod netns>")
        pod = lab.pod("dracni-demo-pod")
        show(lab.cnitool("add", pod, pod_uid=POD_UID))

        step("interfaces in the pod's network namespace")
        show(pod.exec("ip", "-br", "addr", "show"))

        step("dracni publish-status: the claim's status.devices")
        show(lab.dracni("publish-status", str(lab.claims_dir), state))
        status_files = sorted(lab.claims_dir.glob("*.status.json"))
        for f in status_files:
            print(f"--- {f.name}")
            print(json.dumps(json.loads(f.read_text())["status"], indent=2))

        step("dracni inspect")
        show(lab.dracni("inspect", state))

        step("runtime: cnitool del, then unprepare and publish the cleared status")
        lab.cnitool("del", pod, pod_uid=POD_UID)
        show(lab.dracni("publish-status", str(lab.claims_dir), state))
        show(lab.dracni("unprepare", str(lab.claims_dir), state))
        show(pod.exec("ip", "-br", "link", "show"))
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
    sys.exit(main())
