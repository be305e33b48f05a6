"""Sticky IPs: a claim that outlives its pods keeps its addresses (claim status or IPAMClaim).

Real parts: the frozen service against the test API server, the fake kubelet over gRPC,
cnitool with Debian's macvlan + host-local in throwaway namespaces.  host-local hands out
addresses round-robin, so without pinning pod B would get the next address, not pod A's.
"""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import prepare_ok
from tests.integration.service import (
    DRIVER,
    FakeKubelet,
    claim_ref,
    create_allocated_claim,
    macvlan_params,
    new_pod_uid,
    our_status,
    wait_for,
)


def reserve_for(api, claim: dict, pod_uid: str, pod_name: str) -> dict:
    """The scheduler reserves the (still allocated) claim for the next pod."""
    api.set_claim_allocation(
        "default",
        claim["metadata"]["name"],
        claim["status"]["allocation"],
        [{"resource": "pods", "name": pod_name, "uid": pod_uid}],
    )
    return api.get_claim("default", claim["metadata"]["name"])


def ready_entry(api, claim: dict) -> dict:
    entries, _ = wait_for(
        lambda: [e for e in our_status(api, claim) if e["conditions"][0]["status"] == "True"],
        2.0,
        "Ready=True status entry",
    )
    return entries[0]


def run_pod(lab, api, kubelet, claim: dict, pod_uid: str, pod_name: str):
    claim = reserve_for(api, claim, pod_uid, pod_name)
    prepare_ok(kubelet, claim)
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid, pod_name=pod_name)
    return claim, pod


def stop_pod(lab, api, kubelet, claim: dict, pod, pod_uid: str, pod_name: str) -> None:
    lab.cnitool("del", pod, pod_uid=pod_uid, pod_name=pod_name)
    assert not kubelet.unprepare([claim_ref(claim)])[claim["metadata"]["uid"]].error


def net1_address(pod) -> str:
    addr = [a for a in pod.links()["net1"]["addr_info"] if a["family"] == "inet"][0]
    return f"{addr['local']}/{addr['prefixlen']}"


def test_without_pinning_host_local_moves_on(lab, api, service, kubelet):
    """The control: a non-persistent claim's next pod gets the next address."""
    claim = create_allocated_claim(api, "plain", new_pod_uid(), macvlan_params(lab))
    uid_a, uid_b = new_pod_uid(), new_pod_uid()
    claim, pod_a = run_pod(lab, api, kubelet, claim, uid_a, "pod-a")
    first = net1_address(pod_a)
    stop_pod(lab, api, kubelet, claim, pod_a, uid_a, "pod-a")
    wait_for(lambda: not our_status(api, claim), 2.0, "entry cleared after DEL")
    claim, pod_b = run_pod(lab, api, kubelet, claim, uid_b, "pod-b")
    assert net1_address(pod_b) != first


@pytest.mark.parametrize("restart_service", [False, True])
def test_status_based_pinning_gives_the_next_pod_the_same_address(lab, api, service, kubelet, restart_service):
    claim = create_allocated_claim(
        api, "sticky", new_pod_uid(), macvlan_params(lab, network="sticky") | {"persistentIPs": True}
    )
    uid_a, uid_b = new_pod_uid(), new_pod_uid()
    claim, pod_a = run_pod(lab, api, kubelet, claim, uid_a, "pod-a")
    address = net1_address(pod_a)
    assert ready_entry(api, claim)["networkData"]["ips"] == [address]

    stop_pod(lab, api, kubelet, claim, pod_a, uid_a, "pod-a")
    entries, _ = wait_for(
        lambda: [e for e in our_status(api, claim) if e["conditions"][0]["reason"] == "Detached"],
        2.0,
        "Detached entry keeping the address",
    )
    assert entries[0]["conditions"][0]["status"] == "False"
    assert entries[0]["networkData"]["ips"] == [address]
    if restart_service:
        service.stop()
        service.start()
        kubelet.close()
        kubelet = FakeKubelet(str(service.registry_dir), driver=DRIVER)
        kubelet.wait_for_plugin(timeout=10)

    claim, pod_b = run_pod(lab, api, kubelet, claim, uid_b, "pod-b")

    assert net1_address(pod_b) == address
    assert ready_entry(api, claim)["networkData"]["ips"] == [address]
    if restart_service:
        kubelet.close()


@pytest.mark.parametrize("restart_service", [False, True])
def test_ipamclaim_based_pinning(lab, api, service, kubelet, restart_service):
    api.create_ipamclaim("default", "vm-a.net1", network="vm-net", interface="net1")
    params = macvlan_params(lab, network="vm-net") | {"ipamClaim": "vm-a.net1"}
    claim = create_allocated_claim(api, "vm", new_pod_uid(), params)
    uid_a, uid_b = new_pod_uid(), new_pod_uid()
    claim, pod_a = run_pod(lab, api, kubelet, claim, uid_a, "virt-launcher-a")
    address = net1_address(pod_a)

    ipamclaim, _ = wait_for(
        lambda: (lambda o: o if (o.get("status") or {}).get("ips") else None)(
            api.get_ipamclaim("default", "vm-a.net1")
        ),
        2.0,
        "IPAMClaim status.ips",
    )
    assert ipamclaim["status"]["ips"] == [address]
    assert ipamclaim["status"]["ownerPod"] == {"name": "virt-launcher-a"}
    assert any(c["status"] == "True" for c in ipamclaim["status"]["conditions"])

    stop_pod(lab, api, kubelet, claim, pod_a, uid_a, "virt-launcher-a")
    if restart_service:
        service.stop()
        service.start()
        kubelet.close()
        kubelet = FakeKubelet(str(service.registry_dir), driver=DRIVER)
        kubelet.wait_for_plugin(timeout=10)
    claim, pod_b = run_pod(lab, api, kubelet, claim, uid_b, "virt-launcher-b")

    assert net1_address(pod_b) == address
    wait_for(
        lambda: api.get_ipamclaim("default", "vm-a.net1")["status"]["ownerPod"] == {"name": "virt-launcher-b"},
        2.0,
        "IPAMClaim ownerPod updated",
    )
    if restart_service:
        kubelet.close()


def test_conflicting_ipamclaim_fails_clearly_with_ready_false(lab, api, service, kubelet):
    # The IPAMClaim holds an address this network's host-local range cannot grant.
    api.create_ipamclaim("default", "vm-b.net1", network="vm-net", ips=["10.99.9.9/24"])
    claim = create_allocated_claim(api, "vm-b", new_pod_uid(), macvlan_params(lab) | {"ipamClaim": "vm-b.net1"})
    uid = new_pod_uid()
    claim = reserve_for(api, claim, uid, "pod-b")
    prepare_ok(kubelet, claim)
    pod = lab.pod()

    proc = lab.cnitool("add", pod, pod_uid=uid, pod_name="pod-b", check=False)

    assert proc.returncode != 0 and b"10.99.9.9" in proc.stderr
    entries, _ = wait_for(lambda: our_status(api, claim), 2.0, "Ready=False entry")
    condition = entries[0]["conditions"][0]
    assert condition["status"] == "False" and "10.99.9.9" in condition["message"]
    assert api.get_ipamclaim("default", "vm-b.net1")["status"]["ips"] == ["10.99.9.9/24"]  # untouched
    lab.cnitool("del", pod, pod_uid=uid, pod_name="pod-b")


def test_ipam_handing_out_another_address_is_refused(lab, api, service, kubelet):
    """A delegate whose IPAM ignores the request: dracni refuses, never a different address silently."""
    debug = lab.tmp / "noop.json"
    result = {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "net1", "sandbox": "/x"}],
        "ips": [{"address": "10.10.1.77/24", "interface": 0}],
        "dns": {},
    }
    debug.write_text(json.dumps({"ReportResult": json.dumps(result)}))
    api.create_ipamclaim("default", "vm-c.net1", network="noops", ips=["10.10.1.5/24"])
    params = {
        "apiVersion": "dracni.io/v1alpha1",
        "kind": "NetworkAttachment",
        "ipamClaim": "vm-c.net1",
        "config": {
            "cniVersion": "1.0.0",
            "name": "noops",
            "plugins": [{"type": "noop", "debugFile": str(debug), "capabilities": {"ips": True}}],
        },
    }
    claim = create_allocated_claim(api, "vm-c", new_pod_uid(), params)
    uid = new_pod_uid()
    claim = reserve_for(api, claim, uid, "pod-c")
    prepare_ok(kubelet, claim)
    pod = lab.pod()

    proc = lab.cnitool("add", pod, pod_uid=uid, pod_name="pod-c", check=False)

    assert proc.returncode != 0
    assert b"IPAM returned 10.10.1.77/24 but IPAMClaim vm-c.net1 keeps 10.10.1.5/24" in proc.stderr
    received = json.loads(__import__("base64").b64decode(json.loads(debug.read_text())["CmdArgs"]["StdinData"]))
    # It was asked, through args.cni.ips and (declaring the capability) runtimeConfig.ips.
    assert received["args"]["cni"]["ips"] == ["10.10.1.5/24"]
    assert received["runtimeConfig"] == {"ips": ["10.10.1.5/24"]}
    lab.cnitool("del", pod, pod_uid=uid, pod_name="pod-c")


def test_missing_ipamclaim_is_a_clear_prepare_error(lab, api, service, kubelet):
    claim = create_allocated_claim(api, "vm-d", new_pod_uid(), macvlan_params(lab) | {"ipamClaim": "nope"})
    error = kubelet.prepare([claim_ref(claim)])[claim["metadata"]["uid"]].error
    assert "IPAMClaim default/nope not found" in error
    events, _ = wait_for(
        lambda: [e for e in api.list_events("default") if e["reason"] == "PrepareFailed"], 5.0, "PrepareFailed Event"
    )
    assert events[0]["regarding"]["kind"] == "ResourceClaim" and events[0]["regarding"]["name"] == "vm-d"
    assert "IPAMClaim default/nope not found" in events[0]["note"]


def test_template_generated_claim_never_pins(lab, api, service, kubelet):
    # What the resourceclaim controller sets on a claim it generates from a pod's template.
    claim = create_allocated_claim(
        api,
        "pod-x-net",
        new_pod_uid(),
        macvlan_params(lab) | {"persistentIPs": True},
        annotations={"resource.kubernetes.io/pod-claim-name": "net"},
    )
    uid_a, uid_b = new_pod_uid(), new_pod_uid()
    claim, pod_a = run_pod(lab, api, kubelet, claim, uid_a, "pod-x")
    first = net1_address(pod_a)
    ready_entry(api, claim)
    stop_pod(lab, api, kubelet, claim, pod_a, uid_a, "pod-x")
    wait_for(lambda: not our_status(api, claim), 2.0, "entry cleared (no Detached entry) after DEL")
    prepared = (
        json.loads((lab.state_dir / "claims" / f"{claim['metadata']['uid']}.json").read_text())
        if (lab.state_dir / "claims" / f"{claim['metadata']['uid']}.json").exists()
        else None
    )
    assert prepared is None  # unprepared
    claim, pod_b = run_pod(lab, api, kubelet, claim, uid_b, "pod-y")
    record = json.loads((lab.state_dir / "claims" / f"{claim['metadata']['uid']}.json").read_text())
    assert record["devices"][0]["requestedIPs"] == [] and record["devices"][0]["persistentIPs"] is False
    assert net1_address(pod_b) != first


def test_an_ipamclaim_in_non_canonical_ipv6_form_gets_its_owner_and_condition(lab, api, service, kubelet):
    """Issue 12 item 8: FD00:78:7:0:0:0:0:20/64 is fd00:78:7::20/64; the write-back must see that."""
    api.create_ipamclaim("default", "vm6.net1", network="vm6", ips=["FD00:78:7:0:0:0:0:20/64"])
    params = macvlan_params(lab, network="vm6", subnet="fd00:78:7::/64") | {"ipamClaim": "vm6.net1"}
    claim = create_allocated_claim(api, "vm6", new_pod_uid(), params)
    uid = new_pod_uid()
    claim, pod = run_pod(lab, api, kubelet, claim, uid, "virt-launcher-6")

    assert ready_entry(api, claim)["networkData"]["ips"] == ["fd00:78:7::20/64"]
    ipamclaim, _ = wait_for(
        lambda: (lambda o: o if (o.get("status") or {}).get("ownerPod") else None)(
            api.get_ipamclaim("default", "vm6.net1")
        ),
        2.0,
        "IPAMClaim ownerPod",
    )
    assert ipamclaim["status"]["ownerPod"] == {"name": "virt-launcher-6"}
    assert any(c["type"] == "IPsAllocated" and c["status"] == "True" for c in ipamclaim["status"]["conditions"])
    assert [c["type"] for c in ready_entry(api, claim)["conditions"]] == ["Ready"]
    lab.cnitool("del", pod, pod_uid=uid, pod_name="virt-launcher-6")


def test_add_and_del_while_the_service_is_down_still_fill_the_ipamclaim(lab, api, service, kubelet):
    """The service catches up from the Detached fact: the next pod gets the same address."""
    api.create_ipamclaim("default", "vm-e.net1", network="vm-e", interface="net1")
    params = macvlan_params(lab, network="vm-e") | {"ipamClaim": "vm-e.net1"}
    claim = create_allocated_claim(api, "vm-e", new_pod_uid(), params)
    uid_a, uid_b = new_pod_uid(), new_pod_uid()
    claim = reserve_for(api, claim, uid_a, "pod-a")
    prepare_ok(kubelet, claim)
    service.stop()
    pod_a = lab.pod()
    lab.cnitool("add", pod_a, pod_uid=uid_a, pod_name="pod-a")
    address = net1_address(pod_a)
    lab.cnitool("del", pod_a, pod_uid=uid_a, pod_name="pod-a")
    service.start()
    kubelet.close()
    kubelet = FakeKubelet(str(service.registry_dir), driver=DRIVER)
    kubelet.wait_for_plugin(timeout=10)
    try:
        ipamclaim, _ = wait_for(
            lambda: (lambda o: o if (o.get("status") or {}).get("ips") else None)(
                api.get_ipamclaim("default", "vm-e.net1")
            ),
            5.0,
            "IPAMClaim status.ips from the Detached fact",
        )
        assert ipamclaim["status"]["ips"] == [address]
        assert ipamclaim["status"]["ownerPod"] == {"name": "pod-a"}
        assert not kubelet.unprepare([claim_ref(claim)])[claim["metadata"]["uid"]].error
        claim, pod_b = run_pod(lab, api, kubelet, claim, uid_b, "pod-b")
        assert net1_address(pod_b) == address
        lab.cnitool("del", pod_b, pod_uid=uid_b, pod_name="pod-b")
    finally:
        kubelet.close()


def test_an_ipamclaim_changed_after_prepare_shows_in_the_claim_status(lab, api, service, kubelet):
    """Issue 12 item 8: the conflict is a condition of the claim's entry, not only a log line."""
    api.create_ipamclaim("default", "vm-f.net1", network="vm-f", interface="net1")
    params = macvlan_params(lab, network="vm-f") | {"ipamClaim": "vm-f.net1"}
    claim = create_allocated_claim(api, "vm-f", new_pod_uid(), params)
    uid = new_pod_uid()
    claim = reserve_for(api, claim, uid, "pod-f")
    prepare_ok(kubelet, claim)
    api.set_ipamclaim_status("default", "vm-f.net1", {"ips": ["10.10.1.250/24"]})  # someone else, after prepare
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=uid, pod_name="pod-f")
    address = net1_address(pod)

    entries, _ = wait_for(
        lambda: [e for e in our_status(api, claim) if len(e["conditions"]) == 2], 2.0, "IPAMClaimSynced condition"
    )
    ready, synced = entries[0]["conditions"]
    assert (ready["type"], ready["status"]) == ("Ready", "True")
    assert (synced["type"], synced["status"], synced["reason"]) == ("IPAMClaimSynced", "False", "IPAMClaimConflict")
    assert f"holds 10.10.1.250/24 but the pod got {address}" in synced["message"]
    assert api.get_ipamclaim("default", "vm-f.net1")["status"]["ips"] == ["10.10.1.250/24"]  # left as it is
    events, _ = wait_for(
        lambda: [e for e in api.list_events("default") if e["reason"] == "IPAMClaimConflict"], 5.0, "conflict Event"
    )
    assert {e["regarding"]["kind"] for e in events} <= {"Pod", "ResourceClaim"}
    assert all("holds 10.10.1.250/24" in e["note"] and e["type"] == "Warning" for e in events)
    lab.cnitool("del", pod, pod_uid=uid, pod_name="pod-f")
