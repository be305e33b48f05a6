"""ADD's MAC check (rule macOwnership): the MACs the delegates are sent, the parent they sit
on, and the MACs already in use there (other attachments' records, the parent's own)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dracni.cni import macguard
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
    assert macguard.requested_macs(dev["delegates"]) == [
        ("config.plugins[0].runtimeConfig.mac", "02:00:00:00:00:01"),
        ("config.plugins[0].args.cni.mac", "02:00:00:00:00:02"),
        ("config.plugins[1].mac", "02:00:00:00:00:03"),
    ]
    assert macguard.parent_of(dev["delegates"]) == "eth1"


def test_another_attachments_mac_on_the_same_parent_is_refused(state: StateDir) -> None:
    state.put_attachment(attachment("other", device("net1", None, result_mac="02:00:00:00:00:0A")))
    mine = device("net1", "02-00-00-00-00-0a")
    with pytest.raises(CNIError) as exc:
        macguard.check_device(state, attachment("mine", mine), mine)
    assert exc.value.code == INVALID_CONFIG
    assert "config.plugins[0].runtimeConfig.mac: 02:00:00:00:00:0a is the MAC of container other's" in exc.value.msg
    assert "rule macOwnership" in exc.value.msg


def test_an_attachment_still_adding_holds_the_mac_it_asked_for(state: StateDir) -> None:
    state.put_attachment(attachment("other", device("net1", "02:00:00:00:00:0b"), state="adding"))
    mine = device("net1", "02:00:00:00:00:0b")
    with pytest.raises(CNIError, match="rule macOwnership"):
        macguard.check_device(state, attachment("mine", mine), mine)


def test_other_parents_rolled_back_attachments_and_the_record_itself_do_not_count(state: StateDir) -> None:
    state.put_attachment(attachment("a", device("net1", None, master="eth2", result_mac="02:00:00:00:00:0c")))
    state.put_attachment(attachment("b", device("net1", "02:00:00:00:00:0c"), state="failed"))
    mine = device("net1", "02:00:00:00:00:0c")
    record = attachment("mine", mine)
    state.put_attachment(record, ahead=True)  # the write-ahead record
    macguard.check_device(state, record, mine)


def test_two_devices_of_one_pod_on_one_parent_need_two_macs(state: StateDir) -> None:
    first, second = device("net1", "02:00:00:00:00:0d"), device("net2", "02:00:00:00:00:0d")
    with pytest.raises(CNIError, match="this pod's interface net1"):
        macguard.check_device(state, attachment("mine", first, second), second)


def test_the_parents_own_mac(state: StateDir, monkeypatch: pytest.MonkeyPatch) -> None:
    assert macguard._link_mac("lo") == "00:00:00:00:00:00"  # SIOCGIFHWADDR in this netns
    assert macguard._link_mac("no-such-link0") is None
    monkeypatch.setattr(macguard, "_link_mac", lambda name: "02:00:00:00:00:e1" if name == "eth1" else None)
    mine = device("net1", "02:00:00:00:00:E1")
    with pytest.raises(CNIError, match="is the MAC of parent eth1"):
        macguard.check_device(state, attachment("mine", mine), mine)


def test_neighbours_come_from_the_arp_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = tmp_path / "arp"
    table.write_text(
        "IP address       HW type     Flags       HW address            Mask     Device\n"
        "10.0.0.1         0x1         0x2         02:42:ac:11:00:01     *        eth1\n"
        "10.0.0.9         0x1         0x0         00:00:00:00:00:00     *        eth1\n"
        "10.0.0.2         0x1         0x2         02:42:ac:11:00:02     *        eth2\n"
    )
    monkeypatch.setattr(macguard, "ARP_TABLE", str(table))
    assert macguard._neighbours("eth1") == [("02:42:ac:11:00:01", "10.0.0.1")]
