"""dracni chained after bridge in a real containerd 1.6 CRI: pods started and stopped over gRPC
the way kubelet does, the CNI chain run by containerd's libcni, claims prepared with
``dracni prepare`` for the pod UID the runtime passes in CNI_ARGS (``K8S_POD_UID``)."""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from tests import procs
from tests.containerd.runtime import DRACNI_CONF_FILE, POD_SUBNET, Sandbox, World, shim_socket
from tests.harness import attachment_params, claim_manifest, ip


def macvlan(world: World, subnet: str, master: str = "eth1") -> dict:
    return {
        "type": "macvlan",
        "master": master,
        "mode": "bridge",
        "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]], "dataDir": str(world.node.ipam_dir)},
    }


def claim(
    world: World,
    name: str,
    pod: tuple[str, str],
    *,
    subnet: str,
    if_name: str,
    device: str = "eth1",
    share: bool = False,
    network: str | None = None,
) -> dict:
    """A ResourceClaim allocated ``device`` and reserved for ``pod`` (name, uid): a macvlan
    network on ``device``, named ``network`` (default: after the claim)."""
    params = attachment_params([macvlan(world, subnet, device)], name=network or name, if_name=if_name)
    manifest = claim_manifest(
        name,
        pod_uid=pod[1],
        pod_name=pod[0],
        devices=[{"request": "net", "pool": "node1", "device": device, "params": params}],
    )
    if share:  # consumable capacity: many claims on one NIC, each its own shareID
        manifest["status"]["allocation"]["devices"]["results"][0]["shareID"] = str(uuid.uuid4())
    return manifest


def inet(links: dict, name: str) -> list[str]:
    return [f"{a['local']}/{a['prefixlen']}" for a in links[name].get("addr_info", []) if a["family"] == "inet"]


def reservations(world: World, network: str) -> list[str]:
    """The addresses host-local holds for ``network`` (files named after them)."""
    directory = world.node.ipam_dir / network
    return sorted(p.name for p in directory.iterdir() if p.name[0].isdigit()) if directory.exists() else []


def attachments(world: World) -> list[str]:
    directory = world.node.state_dir / "attachments"
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def node_links(world: World) -> list[str]:
    return [link["ifname"] for link in json.loads(ip("-j", "link", "show", netns=world.node.netns.name).stdout)]


def assert_nothing_left(world: World, networks: list[str]) -> None:
    """After the pods are gone: no sandbox, no host-side veth, no address, no record, no netns."""
    assert world.cri.list_pods() == []
    assert [n for n in node_links(world) if n.startswith("veth")] == []
    for network in ["podnet", *networks]:
        assert reservations(world, network) == [], network
    assert attachments(world) == []
    netns_dir = world.containerd.base / "state" / "io.containerd.grpc.v1.cri" / "netns"
    assert not netns_dir.exists() or list(netns_dir.iterdir()) == []


def primary_ip(world: World, sandbox: Sandbox) -> str:
    status, _ = world.cri.status(sandbox.id)
    assert status.state == 0  # SANDBOX_READY
    assert ipaddress.ip_address(status.network.ip) in ipaddress.ip_network(POD_SUBNET)
    assert list(status.network.additional_ips) == []  # net1's address is the claim's, not the pod's
    return str(status.network.ip)


def remove(world: World, *sandboxes: Sandbox) -> None:
    """kubelet's order: StopPodSandbox (the CNI DEL), then RemovePodSandbox."""
    for sandbox in sandboxes:
        world.cri.stop_pod(sandbox.id)
        world.cri.remove_pod(sandbox.id)


def test_pod_with_one_claim_gets_net1_and_its_status_is_published(world: World, pod_uid: str) -> None:
    world.node.prepare(claim(world, "mv", ("web", pod_uid), subnet="10.10.1.0/24", if_name="net1"))

    sandbox = world.cri.run_pod("web", pod_uid)

    eth0_ip = primary_ip(world, sandbox)  # the CRI status shows bridge's address, not net1's
    links = world.pod_links(sandbox.id)
    assert sorted(links) == ["eth0", "lo", "net1"]
    assert inet(links, "eth0") == [f"{eth0_ip}/16"]
    assert inet(links, "net1") == ["10.10.1.2/24"]
    assert reservations(world, "mv") == ["10.10.1.2"]
    # What containerd's libcni handed dracni: the sandbox's ID and netns, and the pod's identity
    # in CNI_ARGS (containerd 1.6 sandbox_run.go toCNILabels: K8S_POD_NAMESPACE, K8S_POD_NAME,
    # K8S_POD_INFRA_CONTAINER_ID, K8S_POD_UID; libcni adds IgnoreUnknown=1).
    (record_name,) = attachments(world)
    record = json.loads((world.node.state_dir / "attachments" / record_name).read_text())
    assert (record["network"], record["containerID"], record["ifName"]) == ("podnet", sandbox.id, "eth0")
    assert record["netns"] == world.cri.netns_path(sandbox.id) and record["state"] == "ready"
    assert record["pod"] == {"uid": pod_uid, "namespace": "default", "name": "web"}
    assert dict(kv.split("=", 1) for kv in record["cniArgs"].split(";")) == {
        "IgnoreUnknown": "1",
        "K8S_POD_NAMESPACE": "default",
        "K8S_POD_NAME": "web",
        "K8S_POD_INFRA_CONTAINER_ID": sandbox.id,
        "K8S_POD_UID": pod_uid,
    }

    world.node.dracni("publish-status", str(world.node.claims_dir), f"--state-dir={world.node.state_dir}")
    (status_file,) = world.node.claims_dir.glob("*.status.json")
    (entry,) = json.loads(status_file.read_text())["status"]["devices"]
    assert entry["networkData"] == {
        "interfaceName": "net1",
        "ips": ["10.10.1.2/24"],
        "hardwareAddress": links["net1"]["address"],
    }

    remove(world, sandbox)
    assert_nothing_left(world, ["mv"])


def test_pod_without_claims_passes_through(world: World) -> None:
    sandbox = world.cri.run_pod("plain")

    eth0_ip = primary_ip(world, sandbox)
    links = world.pod_links(sandbox.id)
    assert sorted(links) == ["eth0", "lo"]
    assert inet(links, "eth0") == [f"{eth0_ip}/16"]
    assert attachments(world) == []
    assert f"ADD {sandbox.id} podnet: no prepared claims for this pod: pass-through" in world.node.read_log()

    remove(world, sandbox)
    assert_nothing_left(world, [])


def test_pod_with_two_claims_gets_both_interfaces(world: World, pod_uid: str) -> None:
    world.node.prepare(
        claim(world, "a-mv", ("two", pod_uid), subnet="10.10.1.0/24", if_name="net1"),
        claim(world, "b-mv", ("two", pod_uid), subnet="10.10.2.0/24", if_name="net2", device="eth2"),
    )

    sandbox = world.cri.run_pod("two", pod_uid)

    primary_ip(world, sandbox)
    links = world.pod_links(sandbox.id)
    assert sorted(links) == ["eth0", "lo", "net1", "net2"]
    assert inet(links, "net1") == ["10.10.1.2/24"] and inet(links, "net2") == ["10.10.2.2/24"]

    remove(world, sandbox)
    assert_nothing_left(world, ["a-mv", "b-mv"])


def test_failing_delegate_fails_the_sandbox_leaks_nothing_and_a_retry_works(world: World, pod_uid: str) -> None:
    # The claim's device is eth3, which the node does not have (yet): macvlan's ADD fails.
    world.node.prepare(claim(world, "mv", ("flaky", pod_uid), subnet="10.10.1.0/24", if_name="net1", device="eth3"))

    with pytest.raises(grpc.RpcError) as failed:
        world.cri.run_pod("flaky", pod_uid)

    message = failed.value.details()  # libcni's wrapping of dracni's error, as kubelet would see it
    expected = 'plugin type="dracni" failed (add): claim default/mv request net (net1): delegate macvlan ADD failed'
    assert expected in message, message
    # containerd tore the sandbox down (DEL of the whole chain): nothing of it is left.
    assert_nothing_left(world, ["mv"])

    ip("link", "add", "eth3", "type", "veth", "peer", "name", "eth3p", netns=world.node.netns.name)
    ip("link", "set", "eth3", "up", netns=world.node.netns.name)
    sandbox = world.cri.run_pod("flaky", pod_uid)  # kubelet's retry: a new sandbox, attempt 0 again

    assert inet(world.pod_links(sandbox.id), "net1") == ["10.10.1.2/24"]
    remove(world, sandbox)
    assert_nothing_left(world, ["mv"])


PODS = 20


def test_twenty_pods_started_concurrently(world: World) -> None:
    pods = [(f"burst-{k}", str(uuid.uuid4())) for k in range(PODS)]
    # Half the pods have a claim (on the shared eth1, one shareID each), half pass through.
    claimed = pods[: PODS // 2]
    world.node.prepare(
        *(
            claim(world, f"c{k}", pod, subnet="10.10.0.0/16", if_name="net1", share=True, network="shared")
            for k, pod in enumerate(claimed)
        )
    )

    with ThreadPoolExecutor(PODS) as pool:
        sandboxes = list(pool.map(lambda pod: world.cri.run_pod(*pod), pods))

    primaries, secondaries = set(), set()
    for sandbox in sandboxes:
        primaries.add(primary_ip(world, sandbox))
        links = world.pod_links(sandbox.id)
        if (sandbox.name, sandbox.uid) in claimed:
            assert sorted(links) == ["eth0", "lo", "net1"], sandbox.name
            secondaries.update(inet(links, "net1"))
        else:
            assert sorted(links) == ["eth0", "lo"], sandbox.name
    assert len(primaries) == PODS and len(secondaries) == len(claimed)
    assert len(attachments(world)) == len(claimed)

    with ThreadPoolExecutor(PODS) as pool:
        list(pool.map(lambda sandbox: remove(world, sandbox), sandboxes))
    assert_nothing_left(world, ["shared"])


def test_containerd_restarted_between_run_and_stop(world: World, pod_uid: str) -> None:
    world.node.prepare(claim(world, "mv", ("restart", pod_uid), subnet="10.10.1.0/24", if_name="net1"))
    sandbox = world.cri.run_pod("restart", pod_uid)
    assert "net1" in world.pod_links(sandbox.id)

    containerd = world.containerd
    assert containerd is not None
    containerd.stop_daemon()  # the shim and the pause process keep running
    containerd.start()

    (listed,) = world.cri.list_pods()
    assert listed.id == sandbox.id and listed.state == 0
    assert inet(world.pod_links(sandbox.id), "net1") == ["10.10.1.2/24"]
    remove(world, sandbox)
    assert_nothing_left(world, ["mv"])


def test_stop_and_remove_two_dels_leave_nothing_behind(world: World, pod_uid: str) -> None:
    world.node.prepare(claim(world, "mv", ("twice", pod_uid), subnet="10.10.1.0/24", if_name="net1"))
    sandbox = world.cri.run_pod("twice", pod_uid)
    netns = world.cri.netns_path(sandbox.id)

    world.cri.stop_pod(sandbox.id)  # the first DEL: dracni undoes net1
    assert reservations(world, "mv") == [] and attachments(world) == []
    world.cri.remove_pod(sandbox.id)  # containerd 1.6 tears the network down once more

    dels: dict[str, list[str]] = {}  # dracni's log lines of each DEL exec, by process id
    for line in world.node.read_log().splitlines():
        if (found := re.search(rf"dracni\[(\d+)\] DEL {sandbox.id} ", line)) is not None:
            dels.setdefault(found.group(1), []).append(line)
    assert len(dels) == 2, dels
    # Both DELs reach macvlan (the claim is still prepared: DEL stays idempotent without a record).
    for lines in dels.values():
        assert any("delegate macvlan DEL ifname=net1 exit=0" in line for line in lines), lines
    assert_nothing_left(world, ["mv"])
    assert not Path(netns).exists()


def test_install_while_containerd_runs_puts_dracni_in_the_chain(bare_world: World, pod_uid: str) -> None:
    world = bare_world
    world.node.prepare(claim(world, "mv", ("late", pod_uid), subnet="10.10.1.0/24", if_name="net1"))
    before = world.cri.run_pod("late", pod_uid)
    assert sorted(world.pod_links(before.id)) == ["eth0", "lo"]  # bridge alone: the claim is not seen
    remove(world, before)

    world.node.install()
    assert (world.node.conf_dir / DRACNI_CONF_FILE).exists()

    # containerd reloads its CNI config on an fsnotify event: the next pod goes through dracni.
    deadline = time.monotonic() + 10
    while "net1" not in (links := world.pod_links((after := world.cri.run_pod("late", pod_uid)).id)):
        assert time.monotonic() < deadline, f"containerd still runs bridge alone 10 s after install: {sorted(links)}"
        remove(world, after)
        time.sleep(0.1)
    assert inet(links, "net1") == ["10.10.1.2/24"]
    remove(world, after)
    assert_nothing_left(world, ["mv"])


def test_teardown_with_pods_running_leaves_no_process_mount_or_socket(_runtime_available: None) -> None:
    """What the fixtures do when a test fails midway: containerd, shims, pause processes,
    rootfs and netns mounts, shim sockets, the node's netns: all gone."""
    base = Path(tempfile.mkdtemp(prefix="dracni-ctrd-"))
    try:
        world = World(base, nics=())
        try:
            world.cri.run_pod("left-a")
            world.cri.run_pod("left-b")
            assert world.containerd is not None
            shims = world.containerd._shims()
            sockets = [s for s in (shim_socket(p.argv) for p in shims) if s is not None]
            assert len(sockets) == 2 and all(s.exists() for s in sockets)
            netns = world.node.netns
        finally:
            world.close()  # no StopPodSandbox: the shims are killed
        assert not any(procs.alive(p) for p in shims)
        assert not any(s.exists() for s in sockets)
        assert not netns.exists()
        prefix = str(base.resolve()) + "/"
        assert [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if prefix in line] == []
    finally:
        shutil.rmtree(base, ignore_errors=True)
