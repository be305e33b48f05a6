"""ADD's VLAN check (rule sharedParent): a vlan delegate never makes a VLAN ID already in use on
its parent, by the node's own VLAN links or by another live dracni attachment."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from dracni.cni import vlanguard
from dracni.cni.errors import INVALID_CONFIG, CNIError
from dracni.state.store import StateDir
from tests.harness import REPO
from tests.unit.cni.test_identity import attachment
from tests.unit.cni.test_identity import device as macvlan_device


def device(ifname: str, vid: int, master: str = "eth1", **extra: Any) -> dict[str, Any]:
    """A device record (test_identity's) whose one delegate is a vlan on ``master``."""
    dev = macvlan_device(ifname, None, master)
    conf: dict[str, Any] = {"type": "vlan", "name": "n", "master": master, "vlanId": vid, **extra}
    dev["delegates"] = [{"type": "vlan", "cniVersion": "1.0.0", "config": conf, "added": False, "result": None}]
    return dev


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    return StateDir(str(tmp_path / "state"))


def test_another_attachment_s_vlan_on_the_same_parent_is_refused_naming_it(state: StateDir) -> None:
    state.put_attachment(attachment("first", device("net1", 100)))
    mine = device("net2", 100)
    with pytest.raises(CNIError) as exc:
        vlanguard.check_vlans(state, attachment("second", mine), mine)
    assert exc.value.code == INVALID_CONFIG
    assert exc.value.msg.startswith(
        "config.plugins[0].vlanId: VLAN 100 on parent eth1 is in use by container first's interface net1 "
        "(another dracni attachment) (rule sharedParent: "
    )


@pytest.mark.parametrize(
    ("other", "mine"),
    [
        (attachment("first", device("net1", 100)), device("net2", 101)),  # another ID
        (attachment("first", device("net1", 100, master="eth2")), device("net2", 100)),  # another parent
        (attachment("first", device("net1", 100), state="failed"), device("net2", 100)),  # rolled back
        (attachment("first", device("net1", 100, linkInContainer=True)), device("net2", 100)),  # pod's parent
    ],
)
def test_a_free_vlan_passes(state: StateDir, other: dict[str, Any], mine: dict[str, Any]) -> None:
    state.put_attachment(other)
    vlanguard.check_vlans(state, attachment("second", mine), mine)


def test_the_attachment_itself_is_not_its_own_rival(state: StateDir) -> None:
    mine = device("net1", 100)
    record = attachment("same", mine, state="adding")
    state.put_attachment(record)  # the write-ahead record of this very ADD
    vlanguard.check_vlans(state, record, mine)


def test_the_node_s_vlan_table_is_read_in_the_kernel_s_format(tmp_path: Path) -> None:
    # net/8021q/vlanproc.c vlan_proc_show / vlan_seq_show: two header lines, then "%-15s| %d  | %s".
    table = tmp_path / "config"
    table.write_text(
        "VLAN Dev name\t | VLAN ID\nName-Type: VLAN_NAME_TYPE_RAW_PLUS_VID_NO_PAD\n"
        "eth1.100       | 100  | eth1\nuplink         | 7  | bond0\n"
    )
    assert vlanguard._node_vlans(str(table)) == {
        ("eth1", 100): "the node's link eth1.100",
        ("bond0", 7): "the node's link uplink",
    }
    assert vlanguard._node_vlans(str(tmp_path / "absent")) == {}


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


def test_a_vlan_link_of_the_node_on_the_parent_is_refused() -> None:
    """In a throwaway netns: parent p0 (a veth) carries p0.100; a vlan delegate 100 on p0 is refused."""
    ns = f"vg{uuid.uuid4().hex[:8]}"
    assert _ip("netns", "add", ns).returncode == 0
    try:
        assert _ip("-n", ns, "link", "add", "p0", "type", "veth", "peer", "name", "p1").returncode == 0
        made = _ip("-n", ns, "link", "add", "link", "p0", "name", "p0.100", "type", "vlan", "id", "100")
        if made.returncode != 0:
            pytest.skip(f"this kernel cannot make VLAN links (8021q not loaded or built): {made.stderr.strip()}")
        probe = (
            "import sys, tempfile\n"
            "from dracni.cni import vlanguard\nfrom dracni.state.store import StateDir\n"
            "from tests.unit.cni.test_vlanguard import attachment, device\n"
            "state = StateDir(tempfile.mkdtemp())\n"
            "for vid in (100, 101):\n"
            "    mine = device('net1', vid, master='p0')\n"
            "    try:\n        vlanguard.check_vlans(state, attachment('c', mine), mine)\n        print('ok')\n"
            "    except Exception as exc:\n        print(exc.msg)\n"
        )
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        out = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout.splitlines()
        assert out[0].startswith(
            "config.plugins[0].vlanId: VLAN 100 on parent p0 is in use by the node's link p0.100 (rule sharedParent: "
        )
        assert out[1] == "ok"
    finally:
        _ip("netns", "del", ns)
