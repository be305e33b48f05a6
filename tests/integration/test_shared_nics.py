"""Many pods on one NIC (issue 10): 15 pods share eth1 through 15 claims, through the fake
kubelet, the frozen service and Debian's plugins, with the NIC offered as one shared device
(consumable capacity: each allocation has its own shareID) or as slots (one device each)."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.harness import Lab
from tests.integration.conftest import addresses, running_api_server
from tests.integration.service import (
    DRIVER,
    ServiceProcess,
    claim_ref,
    create_allocated_claim,
    macvlan_params,
    new_pod_uid,
    our_status,
    wait_for,
)

PODS = 15
CHOICE = {"apiVersion": "dracni.io/v1alpha1", "kind": "NetworkAttachment", "ifName": "net1"}


def class_network(lab: Lab) -> dict:
    """The administrator's macvlan network: no master, the allocated device binds it."""
    network = macvlan_params(lab, subnet="10.10.0.0/24", network="macvlan")
    del network["config"]["plugins"][0]["master"]
    return network


@pytest.fixture(autouse=True)
def node_conflist(lab):
    """The node's conflist (ptp, then dracni) in every test's lab (conftest: eth1 and eth2)."""
    lab.write_conflist()


def start_service(lab, api, *args: str) -> ServiceProcess:
    service = ServiceProcess(lab, api, extra_args=args)
    service.start()
    return service


def published_devices(api) -> dict[str, dict]:
    return {d["name"]: d for s in api.list_slices() for d in s["spec"]["devices"]}


def share_eth1(lab, api, service, devices: list[tuple[str, str | None]]) -> list[tuple[dict, str, object]]:
    """One claim per (device, shareID), each reserved for its own pod; prepared and ADDed."""
    pods = []
    for index, (device, share_id) in enumerate(devices):
        pod_uid = new_pod_uid()
        claim = create_allocated_claim(
            api, f"net-{index}", pod_uid, CHOICE, source="FromClaim", class_params=class_network(lab),
            device=device, share_id=share_id, pod_name=f"pod-{index}",
        )  # fmt: skip
        pods.append((claim, pod_uid, lab.pod()))
    answers = service.kubelet.prepare([claim_ref(c) for c, _, _ in pods])
    assert not [a.error for a in answers.values() if a.error]
    for _claim, pod_uid, pod in pods:
        lab.cnitool("add", pod, pod_uid=pod_uid)
    return pods


def assert_fifteen_then_fourteen(lab, api, pods, key) -> None:
    ips = [addresses(pod.links(), "net1") for _, _, pod in pods]
    assert all(len(i) == 1 for i in ips) and len({i[0] for i in ips}) == PODS, ips
    for claim, _, _ in pods:
        (entry,) = wait_for(lambda c=claim: our_status(api, c), 2.0, "the claim's status entry")[0]
        assert key(entry) == key(claim["status"]["allocation"]["devices"]["results"][0])
        assert entry["conditions"][0]["status"] == "True"
    first_claim, first_uid, first_pod = pods[0]
    lab.cnitool("del", first_pod, pod_uid=first_uid)
    wait_for(lambda: not our_status(api, first_claim), 2.0, "the first pod's entry to be retracted")
    for claim, _, pod in pods[1:]:
        assert addresses(pod.links(), "net1"), "another pod's DEL took this pod's net1"
        assert our_status(api, claim), "another pod's DEL retracted this claim's entry"
    for _, pod_uid, pod in pods[1:]:
        lab.cnitool("del", pod, pod_uid=pod_uid)


def test_fifteen_pods_share_eth1_through_consumable_capacity(lab, api):
    service = start_service(lab, api)
    try:
        device = published_devices(api)["eth1"]
        assert device["allowMultipleAllocations"] is True
        shares = [("eth1", str(uuid.uuid4())) for _ in range(PODS)]
        pods = share_eth1(lab, api, service, shares)
        assert_fifteen_then_fourteen(lab, api, pods, key=lambda e: (e["device"], e["shareID"]))
    finally:
        service.close()


def test_fifteen_pods_share_eth1_through_slots(lab, api):
    service = start_service(lab, api, "--nic-sharing=eth1=slots")
    try:
        devices = published_devices(api)
        assert {f"eth1-slot-{i}" for i in range(16)} <= set(devices)
        assert devices["eth1-slot-3"]["attributes"][f"{DRIVER}/parent"] == {"string": "eth1"}
        pods = share_eth1(lab, api, service, [(f"eth1-slot-{i}", None) for i in range(PODS)])
        assert_fifteen_then_fourteen(lab, api, pods, key=lambda e: (e["device"], e.get("shareID")))
    finally:
        service.close()


def test_host_device_on_a_shared_nic_is_refused_and_the_nic_stays(lab, api):
    service = start_service(lab, api)
    try:
        network = {"apiVersion": "dracni.io/v1alpha1", "kind": "NetworkAttachment", "config": {
            "cniVersion": "1.0.0", "name": "passthrough", "plugins": [{"type": "host-device"}]}}  # fmt: skip
        claim = create_allocated_claim(api, "whole", new_pod_uid(), network, device="eth1", share_id=str(uuid.uuid4()))
        error = service.kubelet.prepare([claim_ref(claim)])[claim["metadata"]["uid"]].error
        assert "host-device moves the whole NIC" in error and "(rule exclusiveDevice: " in error
        assert "--nic-sharing eth1=exclusive" in error
        assert "eth1" in lab.host.links()
    finally:
        service.close()


def test_host_device_on_an_exclusive_nic_works(lab, api, pod_uid=None):
    service = start_service(lab, api, "--nic-sharing=eth2=exclusive")
    try:
        assert "allowMultipleAllocations" not in published_devices(api)["eth2"]
        network = {"apiVersion": "dracni.io/v1alpha1", "kind": "NetworkAttachment", "ifName": "data0", "config": {
            "cniVersion": "1.0.0", "name": "passthrough", "plugins": [{"type": "host-device"}]}}  # fmt: skip
        pod_uid = new_pod_uid()
        claim = create_allocated_claim(api, "whole", pod_uid, network, device="eth2")
        assert not service.kubelet.prepare([claim_ref(claim)])[claim["metadata"]["uid"]].error
        pod = lab.pod()
        lab.cnitool("add", pod, pod_uid=pod_uid)
        assert "data0" in pod.links() and "eth2" not in lab.host.links()
        lab.cnitool("del", pod, pod_uid=pod_uid)
        assert "eth2" in lab.host.links()
    finally:
        service.close()


def test_dracni_inventory_shows_each_mode(lab):
    """What the node offers, without a cluster: the service's code and options."""
    import yaml

    def inventory(*args: str) -> dict[str, dict]:
        proc = lab.dracni(
            "inventory",
            f"--nic-netns={lab.host.path}",
            "--nic-include=eth1",
            "--nic-include=eth2",
            "--node-name=n1",
            *args,
        )
        (piece,) = list(yaml.safe_load_all(proc.stdout))
        assert piece["kind"] == "ResourceSlice" and piece["spec"]["nodeName"] == "n1"
        return {d["name"]: d for d in piece["spec"]["devices"]}

    shared = inventory("--nic-sharing=eth2=exclusive")
    assert shared["eth1"]["allowMultipleAllocations"] is True
    assert shared["eth1"]["capacity"][f"{DRIVER}/attachments"]["requestPolicy"] == {
        "default": "1",
        "validValues": ["1"],
    }
    assert shared["eth2"]["attributes"][f"{DRIVER}/sharing"] == {"string": "exclusive"}
    assert "allowMultipleAllocations" not in shared["eth2"]

    slots = inventory("--nic-sharing=eth2=exclusive", "--without-consumable-capacity", "--nic-slots=4")
    assert sorted(slots) == ["eth1-slot-0", "eth1-slot-1", "eth1-slot-2", "eth1-slot-3", "eth2"]

    exclusive = inventory("--nic-sharing=*=exclusive")
    assert sorted(exclusive) == ["eth1", "eth2"] and not any("capacity" in d for d in exclusive.values())

    bad = lab.dracni("inventory", "--nic-sharing=eth1", check=False)
    assert bad.returncode == 1 and b"write GLOB=MODE" in bad.stderr


@pytest.fixture
def api_without_consumable_capacity(tmp_path):
    """An API server of 1.34/1.35: DRAConsumableCapacity off, its fields dropped silently."""
    with running_api_server(tmp_path, {"DRAConsumableCapacity": False}) as server:
        yield server


def test_without_the_gate_shared_nics_become_slots_once(lab, api_without_consumable_capacity):
    api = api_without_consumable_capacity
    service = start_service(lab, api, "--nic-sharing=eth2=exclusive")
    try:
        devices = wait_for(
            lambda: (d := published_devices(api)) and "eth1-slot-0" in d and d, 5.0, "eth1 offered as slots"
        )[0]
        assert {f"eth1-slot-{i}" for i in range(16)} <= set(devices) and "eth1" not in devices
        assert "eth2" in devices and not any("allowMultipleAllocations" in d for d in devices.values())
        assert "DRAConsumableCapacity is off" in service.log()
        writes = len(api.requests_to("PUT", "/resourceslices")) + len(api.requests_to("POST", "/resourceslices"))
        service_log = service.log()
        # the slices settle: no write loop on a slice the server keeps changing (resync and
        # netlink events find nothing to change)
        time.sleep(3)
        after = len(api.requests_to("PUT", "/resourceslices")) + len(api.requests_to("POST", "/resourceslices"))
        assert after == writes, service.log()[len(service_log) :]
        # and a pod gets a slot: the claims of a 1.35 cluster carry no shareID
        pods = share_eth1(lab, api, service, [("eth1-slot-0", None), ("eth1-slot-1", None)])
        assert all(addresses(pod.links(), "net1") for _, _, pod in pods)
        for _, pod_uid, pod in pods:
            lab.cnitool("del", pod, pod_uid=pod_uid)
    finally:
        service.close()


def test_one_claim_two_pods_keeps_its_entry_until_the_last_detaches(lab):
    """A claim reserved for pods A and B: each gets its own net1; the claim's one status entry
    shows A's interface with both addresses, B's DEL leaves A's, A's DEL retracts it."""
    import json

    from tests.harness import claim_manifest

    a_uid, b_uid = new_pod_uid(), new_pod_uid()
    network = class_network(lab)
    network["config"]["plugins"][0]["master"] = "eth1"
    claim = claim_manifest(
        "two-pods", pod_uid=a_uid, pod_name="a", more_pods=(("b", b_uid),),
        devices=[{"request": "net", "pool": "node1", "device": "eth1", "params": network}],
    )  # fmt: skip
    lab.prepare(claim)
    pod_a, pod_b = lab.pod(), lab.pod()
    lab.cnitool("add", pod_a, pod_uid=a_uid, pod_name="a")
    lab.cnitool("add", pod_b, pod_uid=b_uid, pod_name="b")
    ip_a, ip_b = addresses(pod_a.links(), "net1")[0], addresses(pod_b.links(), "net1")[0]
    assert ip_a != ip_b

    def entry() -> dict | None:
        lab.dracni("publish-status", str(lab.claims_dir), f"--state-dir={lab.state_dir}")
        files = sorted(lab.claims_dir.glob("*.status.json"))
        devices = json.loads(files[0].read_text())["status"]["devices"] if files else []
        assert len(devices) <= 1
        return devices[0] if devices else None

    both = entry()
    assert both["networkData"]["ips"] == [ip_a, ip_b]
    assert both["networkData"]["hardwareAddress"] == pod_a.links()["net1"]["address"]
    assert both["conditions"][0]["status"] == "True"
    lab.cnitool("del", pod_b, pod_uid=b_uid, pod_name="b")
    only_a = entry()
    assert only_a["networkData"]["ips"] == [ip_a] and only_a["conditions"][0]["status"] == "True"
    lab.cnitool("del", pod_a, pod_uid=a_uid, pod_name="a")
    assert entry() is None
