"""Address ownership at ADD (rule addressOwnership, issue 22): a tenant's pinned address is never
one the node sees in use on the parent's segment.  Through the frozen binary, cnitool and
Debian's macvlan + host-local, in throwaway namespaces (the lab's host netns is the node, eth1
the allocated parent): the node's own address on eth1 and a neighbour's (a permanent ARP entry
on eth1) are refused, and the pod keeps no interface; a free in-range address works, and so
does a persistent claim's own address while a stale neighbour entry for it remains.
"""

from __future__ import annotations

import pytest

from tests.harness import Lab
from tests.integration.service import create_allocated_claim, macvlan_params, new_pod_uid
from tests.integration.test_mac_ownership import refused_at_add as refused
from tests.integration.test_sticky_ips import net1_address, ready_entry, run_pod, stop_pod
from tests.integration.test_tenant_safety import choose, class_macvlan, tenant_claim


@pytest.fixture
def segment(lab: Lab) -> Lab:
    """The node's address 10.10.1.250 on eth1 and a neighbour 10.10.1.77 (another host) there."""
    lab.write_conflist()
    lab.host.exec("ip", "addr", "add", "10.10.1.250/24", "dev", "eth1")
    lab.host.exec("ip", "neigh", "add", "10.10.1.77", "lladdr", "02:00:00:00:77:77", "dev", "eth1", "nud", "permanent")
    return lab


def pinned(address: str) -> dict:
    return choose(ifName="data1", runtimeConfig={"ips": [address]})


def refused_at_add(lab: Lab, pod_uid: str, why: str) -> str:
    """ADD fails naming rule addressOwnership and ``why``; the pod keeps no interface of the claim."""
    return refused(lab, pod_uid, why, rule="addressOwnership")


def test_the_nodes_own_address_on_the_parent_is_refused_at_add(segment, pod_uid):
    segment.prepare(tenant_claim("node", pod_uid, pinned("10.10.1.250/24"), network=class_macvlan(segment)))
    refused_at_add(segment, pod_uid, "runtimeConfig.ips[0]: 10.10.1.250 is the node's address on parent eth1")


def test_a_neighbours_address_is_refused_at_add(segment, pod_uid):
    segment.prepare(tenant_claim("neigh", pod_uid, pinned("10.10.1.77/24"), network=class_macvlan(segment)))
    refused_at_add(
        segment,
        pod_uid,
        "runtimeConfig.ips[0]: 10.10.1.77 is the address of neighbour 02:00:00:00:77:77 on parent eth1",
    )


def test_a_free_in_range_address_works(segment, pod_uid):
    segment.prepare(tenant_claim("free", pod_uid, pinned("10.10.1.42/24"), network=class_macvlan(segment)))
    pod = segment.pod()
    segment.cnitool("add", pod, pod_uid=pod_uid)
    assert [a["local"] for a in pod.links()["data1"]["addr_info"] if a["family"] == "inet"] == ["10.10.1.42"]
    segment.cnitool("del", pod, pod_uid=pod_uid)


def test_a_claims_own_sticky_address_works_despite_a_stale_neighbour_entry(lab, api, service, kubelet):
    claim = create_allocated_claim(
        api, "sticky", new_pod_uid(), macvlan_params(lab, network="sticky") | {"persistentIPs": True}
    )
    uid_a, uid_b = new_pod_uid(), new_pod_uid()
    claim, pod_a = run_pod(lab, api, kubelet, claim, uid_a, "pod-a")
    address = net1_address(pod_a)
    mac = pod_a.links()["net1"]["address"]
    stop_pod(lab, api, kubelet, claim, pod_a, uid_a, "pod-a")
    # The node still remembers pod A's address on the segment (e.g. from talking to it).
    lab.host.exec("ip", "neigh", "replace", address.split("/")[0], "lladdr", mac, "dev", "eth1", "nud", "permanent")
    claim, pod_b = run_pod(lab, api, kubelet, claim, uid_b, "pod-b")
    assert net1_address(pod_b) == address
    assert ready_entry(api, claim)["networkData"]["ips"] == [address]
