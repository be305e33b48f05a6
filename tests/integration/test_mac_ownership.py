"""MAC ownership (rule macOwnership, issue 22): a tenant's interface never takes the identity of
a NIC on the segment.  Through the frozen binary, cnitool and Debian's plugins, in throwaway
network namespaces (the lab's host netns is the node, eth1 the allocated parent): a locally
administered MAC in any spelling works; a vendor MAC is refused at prepare unless the class
allows its prefix; the parent's own MAC and another attachment's are refused at ADD.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness import Lab
from tests.integration.test_tenant_safety import assert_refused, choose, class_macvlan, tenant_claim


@pytest.fixture
def lab(tmp_path: Path):
    world = Lab(base=tmp_path, nics=("eth1", "eth2", "uplink0"))
    try:
        world.write_conflist()
        yield world
    finally:
        world.close()


def with_mac(mac: str, ifname: str = "data1") -> dict:
    return choose(ifName=ifname, runtimeConfig={"mac": mac})


def recorded_mac(lab: Lab) -> list[str]:
    return sorted(
        d["runtimeConfig"]["mac"]
        for path in (lab.state_dir / "claims").glob("*.json")
        for d in json.loads(path.read_text())["devices"]
    )


def test_a_locally_administered_mac_in_any_spelling_works(lab, pod_uid):
    lab.prepare(tenant_claim("local", pod_uid, with_mac("0200.5E00.AA01"), network=class_macvlan(lab)))
    assert recorded_mac(lab) == ["02:00:5e:00:aa:01"]  # the canonical form
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    assert pod.links()["data1"]["address"] == "02:00:5e:00:aa:01"
    lab.cnitool("del", pod, pod_uid=pod_uid)


@pytest.mark.parametrize("mac", ["00:16:3e:12:34:56", "00-16-3E-12-34-56", "0016.3e12.3456"])
def test_a_vendor_mac_is_refused_in_every_spelling(lab, pod_uid, mac):
    claim = tenant_claim("vendor", pod_uid, with_mac(mac), network=class_macvlan(lab))
    message = assert_refused(lab, pod_uid, claim, "parameters.runtimeConfig.mac", "macOwnership")
    assert "00:16:3e:12:34:56 is globally administered" in message
    assert "allowedMACPrefixes" in message  # the knob that would allow it


def test_a_multicast_mac_is_refused(lab, pod_uid):
    claim = tenant_claim("group", pod_uid, with_mac("33:33:00:00:00:01"), network=class_macvlan(lab))
    message = assert_refused(lab, pod_uid, claim, "parameters.runtimeConfig.mac", "macOwnership")
    assert "multicast" in message


def test_the_class_allows_a_vendor_prefix(lab, pod_uid):
    network = {**class_macvlan(lab), "allowedMACPrefixes": ["00:16:3E"]}
    lab.prepare(tenant_claim("allowed", pod_uid, with_mac("00-16-3e-12-34-56"), network=network))
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    assert pod.links()["data1"]["address"] == "00:16:3e:12:34:56"
    lab.cnitool("del", pod, pod_uid=pod_uid)


def refused_at_add(lab: Lab, pod_uid: str, why: str, rule: str = "macOwnership") -> str:
    """ADD fails naming ``rule`` and ``why``; the pod keeps no interface of the claim."""
    pod = lab.pod()
    proc = lab.cnitool("add", pod, pod_uid=pod_uid, check=False)
    answer = (proc.stdout + proc.stderr).decode()
    assert proc.returncode != 0, answer
    assert f"rule {rule}" in answer and why in answer, answer
    assert "data1" not in pod.links() and "data2" not in pod.links()
    lab.cnitool("del", pod, pod_uid=pod_uid)
    print(f"refused at ADD: {answer.strip()}")
    return answer


def test_the_parents_own_mac_is_refused_at_add(lab, pod_uid):
    parent = lab.host.links()["eth1"]["address"]  # a veth's random MAC: locally administered
    lab.prepare(tenant_claim("parent", pod_uid, with_mac(parent.upper()), network=class_macvlan(lab)))
    refused_at_add(lab, pod_uid, f"runtimeConfig.mac: {parent} is the MAC of parent eth1")


def test_another_attachments_mac_on_the_parent_is_refused_at_add(lab, pod_uid):
    first = lab.pod()
    lab.prepare(tenant_claim("first", pod_uid, with_mac("02:00:00:00:bb:01"), network=class_macvlan(lab)))
    lab.cnitool("add", first, pod_uid=pod_uid)
    other_pod = "0c5e0000-0000-4000-8000-000000000002"
    lab.prepare(tenant_claim("second", other_pod, with_mac("02-00-00-00-BB-01", "data2"), network=class_macvlan(lab)))
    refused_at_add(lab, other_pod, "is the MAC of container")
    lab.cnitool("del", first, pod_uid=pod_uid)


def test_an_ipv6_neighbours_mac_is_refused_at_add(lab, pod_uid):
    lab.host.exec(
        "ip", "-6", "neigh", "add", "fd10::77", "lladdr", "02:00:00:00:66:77", "dev", "eth1", "nud", "permanent"
    )
    lab.prepare(tenant_claim("nd", pod_uid, with_mac("02-00-00-00-66-77"), network=class_macvlan(lab)))
    refused_at_add(lab, pod_uid, "runtimeConfig.mac: 02:00:00:00:66:77 is the MAC of neighbour fd10::77 on parent eth1")


def test_an_fdb_entry_of_the_parent_is_refused_at_add(lab, pod_uid):
    lab.host.exec("bridge", "fdb", "add", "02:00:00:00:fd:01", "dev", "eth1", "self", "permanent")
    lab.prepare(tenant_claim("fdb", pod_uid, with_mac("02:00:00:00:FD:01"), network=class_macvlan(lab)))
    refused_at_add(lab, pod_uid, "runtimeConfig.mac: 02:00:00:00:fd:01 is an FDB entry of parent eth1")
