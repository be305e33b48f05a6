"""The network-status annotation's entries and merge (status/network_status.py), against the
Go type ``NetworkStatus`` of k8snetworkplumbingwg/network-attachment-definition-client
(pkg/apis/k8s.cni.cncf.io/v1/types.go) and what Multus writes (bare IPs)."""

from __future__ import annotations

import json

import pytest

from dracni.status.network_status import (
    UnreadableAnnotation,
    merged,
    network_status_entry,
    owned_prefix,
    pod_entries,
)

#: types.go ``NetworkStatus``: JSON key -> Python type of its Go type.
GO_NETWORK_STATUS = {
    "name": str,
    "interface": str,
    "ips": list,
    "mac": str,
    "mtu": int,
    "default": bool,
    "dns": dict,
    "device-info": dict,
    "gateway": list,
}
GO_DNS = {"nameservers": list, "domain": str, "search": list, "options": list}
GO_DEVICE_INFO = {"type": str, "version": str, "pci": dict}
GO_PCI = {"pci-address", "vhost-net", "rdma-device", "pf-pci-address"}

DEFAULT = {"name": "ovn-kubernetes", "interface": "eth0", "ips": ["10.244.1.5"], "mac": "0a:58:0a:f4:01:05",
           "default": True, "dns": {}}  # fmt: skip
MULTUS = {"name": "tenant/macvlan-conf", "interface": "net9", "ips": ["192.168.9.2"], "default": False, "dns": {}}


def result(*addresses: str, mtu: int | None = 9000, dns: dict | None = None) -> dict:
    iface = {"name": "net1", "mac": "02:00:00:00:00:01", "sandbox": "/var/run/netns/x"}
    if mtu is not None:
        iface["mtu"] = mtu
    return {
        "cniVersion": "1.1.0",
        "interfaces": [{"name": "eth1", "mac": "aa:bb:cc:dd:ee:ff"}, iface],
        "ips": [{"address": a, "interface": 1} for a in addresses] + [{"address": "172.16.0.1/32", "interface": 0}],
        **({"dns": dns} if dns is not None else {}),
    }


def fact(pod: str = "a", *, ready: bool = True, request: str = "net", if_name: str = "net1", **extra) -> dict:
    return {
        "request": request, "pool": "node-a", "device": "eth1", "shareID": None, "ifName": if_name,
        "ready": ready, "result": result("10.0.0.5/24", "FD00::5/64") if ready else None, "error": None,
        "containerID": f"c-{pod}", "podUID": f"uid-{pod}", "podName": pod, "updatedAt": "2026-11-27T00:00:00Z",
        **extra,
    }  # fmt: skip


def check_go_types(entry: dict) -> None:
    for key, value in entry.items():
        assert key in GO_NETWORK_STATUS, f"{key} is no field of NetworkStatus"
        assert isinstance(value, GO_NETWORK_STATUS[key]), key
    for key, value in entry.get("dns", {}).items():
        assert isinstance(value, GO_DNS[key]), key
    info = entry.get("device-info")
    if info:
        assert set(info) <= set(GO_DEVICE_INFO) and set(info["pci"]) <= GO_PCI


def test_an_entry_has_the_go_types_field_names_and_bare_ips():
    dns = {"nameservers": ["10.0.0.53"], "search": ["corp.example"], "domain": "", "options": []}
    entry = network_status_entry({**fact(), "result": result("10.0.0.5/24", "FD00::5/64", dns=dns)}, "tenant", "c")
    check_go_types(entry)
    assert entry == {
        "name": "tenant/c/net",
        "interface": "net1",
        "ips": ["10.0.0.5", "fd00::5"],  # Multus: ipconfig.Address.IP.String(), no prefix
        "mac": "02:00:00:00:00:01",
        "mtu": 9000,
        "default": False,
        "dns": {"nameservers": ["10.0.0.53"], "search": ["corp.example"]},
    }


def test_without_mtu_or_dns_the_entry_says_so_as_go_would():
    entry = network_status_entry({**fact(), "result": result("10.0.0.5/24", mtu=None)}, "tenant", "c")
    assert "mtu" not in entry and entry["dns"] == {}  # a Go struct is never omitted
    check_go_types(entry)


def test_a_passthrough_nic_has_pci_device_info():
    entry = network_status_entry(fact(), "tenant", "c", lambda pool, device: "0000:3b:00.1")
    assert entry["device-info"] == {"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:3b:00.1"}}
    check_go_types(entry)
    assert "device-info" not in network_status_entry(fact(), "tenant", "c", lambda pool, device: None)


def test_only_ready_attachments_give_entries_per_pod():
    facts = [
        fact("a"),
        fact("a", request="storage", if_name="net2"),
        fact("b", ready=False),
        fact("c", detached=True, ready=False),
        {**fact("d"), "podUID": None},
    ]
    got = pod_entries(facts, "tenant", "c")
    assert list(got) == ["uid-a"]
    name, entries = got["uid-a"]
    assert name == "a" and [e["name"] for e in entries] == ["tenant/c/net", "tenant/c/storage"]


def test_the_merge_keeps_the_others_entries_in_place():
    ours = network_status_entry(fact(), "tenant", "c")
    old_ours = {**ours, "ips": ["10.0.0.4"]}
    other_claim = {**ours, "name": "tenant/c2/net", "interface": "net3"}
    current = json.dumps([DEFAULT, old_ours, MULTUS, other_claim])
    value = merged(current, owned_prefix("tenant", "c"), [ours])
    assert value is not None
    assert json.loads(value) == [DEFAULT, MULTUS, other_claim, ours]


def test_removal_leaves_the_others_and_an_empty_list_goes():
    ours = network_status_entry(fact(), "tenant", "c")
    assert json.loads(merged(json.dumps([DEFAULT, ours]), "tenant/c/", []) or "") == [DEFAULT]
    assert merged(json.dumps([ours]), "tenant/c/", []) is None
    assert merged(None, "tenant/c/", []) is None


def test_a_claim_name_that_prefixes_another_is_not_confused():
    ours = network_status_entry(fact(), "tenant", "c")
    longer = {**ours, "name": "tenant/cc/net"}
    assert json.loads(merged(json.dumps([longer, ours]), "tenant/c/", []) or "") == [longer]


@pytest.mark.parametrize("text", ["not json", '{"name": "x"}'])
def test_an_unreadable_annotation_is_not_overwritten(text):
    with pytest.raises(UnreadableAnnotation):
        merged(text, "tenant/c/", [])
