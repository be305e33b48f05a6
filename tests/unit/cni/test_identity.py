"""ADD's identity checks (rules macOwnership, addressOwnership): the MACs and addresses the
delegates are sent, the parent they sit on, and what is already in use there (other attachments'
records, the parent's own MAC and addresses, its neighbours and FDB entries)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dracni import netlink
from dracni.cni import identity
from dracni.cni.errors import INVALID_CONFIG, CNIError
from dracni.state.store import StateDir


def device(ifname: str, mac: str | None, master: str = "eth1", result_mac: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"type": "macvlan", "name": "n", "master": master}
    if mac is not None:
        conf["runtimeConfig"] = {"mac": mac}
    result = None
    if result_mac is not None:
        result = {"interfaces": [{"name": ifname, "mac": result_mac, "sandbox": "/var/run/netns/x"}]}
    return {
        "claim": {"uid": "u", "namespace": "t", "name": "c"},
        "request": "net",
        "pool": "p",
        "device": master,
        "shareID": None,
        "ifName": ifname,
        "driver": "dracni.io",
        "delegates": [{"type": "macvlan", "cniVersion": "1.0.0", "config": conf, "added": False, "result": None}],
        "result": result,
        "error": None,
        "persistentIPs": False,
        "ipamClaim": None,
        "requestedIPs": [],
    }


def attachment(container: str, *devices: dict[str, Any], state: str = "ready") -> dict[str, Any]:
    return {
        "kind": "Attachment",
        "network": "cbr0",
        "containerID": container,
        "ifName": "eth0",
        "netns": "/var/run/netns/x",
        "cniArgs": "",
        "cniVersion": "1.0.0",
        "pod": {"uid": "pod", "namespace": "t", "name": "p"},
        "state": state,
        "error": None,
        "updatedAt": "2026-01-01T00:00:00Z",
        "devices": list(devices),
    }


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    return StateDir(str(tmp_path / "state"))


def test_requested_macs_in_every_place_a_delegate_reads_one() -> None:
    dev = device("net1", "02-00-00-00-00-01")
    dev["delegates"][0]["config"]["args"] = {"cni": {"mac": "0200.0000.0002"}}
    dev["delegates"].append({"type": "tuning", "cniVersion": "1.0.0", "config": {"mac": "02:00:00:00:00:03"}})
    assert identity.requested_macs(dev["delegates"]) == [
        ("config.plugins[0].runtimeConfig.mac", "02:00:00:00:00:01"),
        ("config.plugins[0].args.cni.mac", "02:00:00:00:00:02"),
        ("config.plugins[1].mac", "02:00:00:00:00:03"),
    ]
    assert identity.parent_of(dev["delegates"]) == "eth1"


def test_another_attachments_mac_on_the_same_parent_is_refused(state: StateDir) -> None:
    state.put_attachment(attachment("other", device("net1", None, result_mac="02:00:00:00:00:0A")))
    mine = device("net1", "02-00-00-00-00-0a")
    with pytest.raises(CNIError) as exc:
        identity.check_device(state, attachment("mine", mine), mine)
    assert exc.value.code == INVALID_CONFIG
    assert "config.plugins[0].runtimeConfig.mac: 02:00:00:00:00:0a is the MAC of container other's" in exc.value.msg
    assert "rule macOwnership" in exc.value.msg


def test_an_attachment_still_adding_holds_the_mac_it_asked_for(state: StateDir) -> None:
    state.put_attachment(attachment("other", device("net1", "02:00:00:00:00:0b"), state="adding"))
    mine = device("net1", "02:00:00:00:00:0b")
    with pytest.raises(CNIError, match="rule macOwnership"):
        identity.check_device(state, attachment("mine", mine), mine)


def test_other_parents_rolled_back_attachments_and_the_record_itself_do_not_count(state: StateDir) -> None:
    state.put_attachment(attachment("a", device("net1", None, master="eth2", result_mac="02:00:00:00:00:0c")))
    state.put_attachment(attachment("b", device("net1", "02:00:00:00:00:0c"), state="failed"))
    mine = device("net1", "02:00:00:00:00:0c")
    record = attachment("mine", mine)
    state.put_attachment(record, ahead=True)  # the write-ahead record
    identity.check_device(state, record, mine)


def test_two_devices_of_one_pod_on_one_parent_need_two_macs(state: StateDir) -> None:
    first, second = device("net1", "02:00:00:00:00:0d"), device("net2", "02:00:00:00:00:0d")
    with pytest.raises(CNIError, match="this pod's interface net1"):
        identity.check_device(state, attachment("mine", first, second), second)


def test_the_parents_own_mac(state: StateDir, monkeypatch: pytest.MonkeyPatch) -> None:
    assert identity._link_mac("lo") == "00:00:00:00:00:00"  # SIOCGIFHWADDR in this netns
    assert identity._link_mac("no-such-link0") is None
    monkeypatch.setattr(identity, "_link_mac", lambda name: "02:00:00:00:00:e1" if name == "eth1" else None)
    mine = device("net1", "02:00:00:00:00:E1")
    with pytest.raises(CNIError, match="is the MAC of parent eth1"):
        identity.check_device(state, attachment("mine", mine), mine)


def segment(monkeypatch: pytest.MonkeyPatch, **tables: list[Any]) -> None:
    """The parent eth1's kernel tables as ``dracni.netlink`` would read them (index 7)."""
    monkeypatch.setattr(netlink, "link_index", lambda name: 7 if name == "eth1" else None)
    for name in ("addresses", "neighbours", "fdb"):
        rows = tables.get(name, [])
        monkeypatch.setattr(netlink, name, lambda index, rows=rows: [r for r in rows if r.ifindex == index])
    monkeypatch.setattr(identity, "_link_mac", lambda name: None)


def test_ipv4_and_ipv6_neighbours_macs_are_refused(state: StateDir, monkeypatch: pytest.MonkeyPatch) -> None:
    segment(
        monkeypatch,
        neighbours=[
            netlink.Neighbour("10.0.0.1", "02:42:ac:11:00:01", 7, 0x80),
            netlink.Neighbour("fd00::1", "02:42:ac:11:00:61", 7, 0x80),
            netlink.Neighbour("10.0.0.2", "02:42:ac:11:00:02", 8, 0x80),
        ],
    )
    for mac, ip in (("02:42:ac:11:00:01", "10.0.0.1"), ("02:42:ac:11:00:61", "fd00::1")):
        mine = device("net1", mac)
        with pytest.raises(CNIError, match=f"{mac} is the MAC of neighbour {ip} on parent eth1"):
            identity.check_device(state, attachment("mine", mine), mine)
    mine = device("net1", "02:42:ac:11:00:02")  # another link's neighbour
    identity.check_device(state, attachment("mine", mine), mine)


def test_the_parents_unicast_fdb_entries_are_refused(state: StateDir, monkeypatch: pytest.MonkeyPatch) -> None:
    segment(monkeypatch, fdb=[netlink.FdbEntry("02:00:00:00:0f:01", 7, 0), netlink.FdbEntry("33:33:00:00:00:01", 7, 0)])
    mine = device("net1", "02:00:00:00:0f:01")
    with pytest.raises(CNIError) as exc:
        identity.check_device(state, attachment("mine", mine), mine)
    assert exc.value.msg.startswith(
        "config.plugins[0].runtimeConfig.mac: 02:00:00:00:0f:01 is an FDB entry of parent eth1 (rule macOwnership"
    )


def with_ips(dev: dict[str, Any], *ips: str, where: str = "runtimeConfig") -> dict[str, Any]:
    conf = dev["delegates"][0]["config"]
    if where == "runtimeConfig":
        conf.setdefault("runtimeConfig", {})["ips"] = list(ips)
    elif where == "args":
        conf["args"] = {"cni": {"ips": list(ips)}}
    else:
        conf["ipam"] = {"type": "static", "addresses": [{"address": ip} for ip in ips]}
    return dev


def test_requested_addresses_in_every_place_a_delegate_reads_one() -> None:
    dev = with_ips(device("net1", None), "10.0.0.5/24", "fd00:0::5/64")
    dev["delegates"][0]["config"]["args"] = {"cni": {"ips": ["10.0.0.6"]}}
    dev["delegates"].append(
        {"type": "x", "cniVersion": "1.0.0", "config": {"ipam": {"addresses": [{"address": "10.0.0.7/24"}, "bad"]}}}
    )
    assert identity.requested_addresses(dev["delegates"]) == [
        ("config.plugins[0].runtimeConfig.ips[0]", "10.0.0.5"),
        ("config.plugins[0].runtimeConfig.ips[1]", "fd00::5"),
        ("config.plugins[0].args.cni.ips[0]", "10.0.0.6"),
        ("config.plugins[1].ipam.addresses[0].address", "10.0.0.7"),
    ]


@pytest.mark.parametrize("where", ["runtimeConfig", "args", "static"])
def test_the_nodes_own_address_on_the_parent_is_refused(
    state: StateDir, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    segment(monkeypatch, addresses=[netlink.Address("10.0.0.254", 24, 7), netlink.Address("fd00::fe", 64, 7)])
    for ip in ("10.0.0.254/24", "fd00:0:0::fe/64"):
        mine = with_ips(device("net1", None), ip, where=where)
        with pytest.raises(CNIError) as exc:
            identity.check_device(state, attachment("mine", mine), mine)
        assert exc.value.code == INVALID_CONFIG
        assert "is the node's address on parent eth1 (rule addressOwnership" in exc.value.msg
        assert exc.value.msg.startswith("config.plugins[0].")


def test_another_attachments_address_and_this_pods_other_device_are_refused(
    state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    segment(monkeypatch)
    other = device("net1", None)
    other["result"] = {"ips": [{"address": "10.0.0.5/24"}]}
    state.put_attachment(attachment("other", other))
    state.put_attachment(
        attachment("gone", with_ips(device("net1", None), "10.0.0.6/24")),
    )
    state.put_attachment(attachment("failed", with_ips(device("net1", None), "10.0.0.7/24"), state="failed"))
    mine = with_ips(device("net1", None), "10.0.0.5/24")
    with pytest.raises(CNIError, match="10.0.0.5 is the address of container other's interface net1 on parent eth1"):
        identity.check_device(state, attachment("mine", mine), mine)
    mine = with_ips(device("net2", None), "10.0.0.6/24")
    with pytest.raises(CNIError, match="is the address of container gone's"):  # still adding: what it asked for
        identity.check_device(state, attachment("mine", mine), mine)
    first, second = with_ips(device("net1", None), "10.0.0.8/24"), with_ips(device("net2", None), "10.0.0.8/24")
    with pytest.raises(CNIError, match="is the address of this pod's interface net1"):
        identity.check_device(state, attachment("mine", first, second), second)
    mine = with_ips(device("net1", None), "10.0.0.7/24")  # rolled back: free again
    identity.check_device(state, attachment("mine", mine), mine)


def test_a_neighbours_address_is_refused_unless_the_claim_keeps_it(
    state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    segment(monkeypatch, neighbours=[netlink.Neighbour("fd00::9", "02:42:ac:11:00:09", 7, 0x80)])
    mine = with_ips(device("net1", None), "fd00::9/64")
    with pytest.raises(CNIError) as exc:
        identity.check_device(state, attachment("mine", mine), mine)
    assert exc.value.msg.startswith(
        "config.plugins[0].runtimeConfig.ips[0]: fd00::9 is the address of neighbour 02:42:ac:11:00:09 on parent eth1 "
        "(rule addressOwnership"
    )
    mine["requestedIPs"] = ["fd00:0::9/64"]  # its reservation or status: a stale entry of its last pod
    identity.check_device(state, attachment("mine", mine), mine)


def test_nothing_requested_reads_no_kernel_table(state: StateDir, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object) -> None:
        raise AssertionError("netlink read")

    monkeypatch.setattr(netlink, "link_index", boom)
    mine = device("net1", None)
    identity.check_device(state, attachment("mine", mine), mine)
