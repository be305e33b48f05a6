"""NIC discovery (``dracni.inventory.nics``): netlink facts in throwaway network namespaces,
hardware facts from fake sysfs trees laid out like a real PCI NIC, and the eligibility rules.

Safety: every link is made inside network namespaces created here (``ip netns add``) and
deleted afterwards, also on failure; the machine's own links are never touched or read.  The
kernel these run on has no dummy/vlan/ipvlan/bond link types, so veths, bridges and a vxlan
stand in.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dracni.inventory import links as links_mod
from dracni.inventory.nics import (
    DEFAULT_EXCLUDED_KINDS,
    HardwareFacts,
    Nic,
    discover_nics,
    eligible,
    hardware_facts,
    nics_from,
)
from tests.harness import NETNS_RUN, Netns, ip

REPO = Path(__file__).resolve().parents[3]

needs_netns = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None,
    reason="needs root and iproute2 to create network namespaces",
)


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture
def netns():
    """A throwaway netns; yields the Netns (``.path`` is /var/run/netns/<name>)."""
    made: list[Netns] = []

    def make(prefix: str = "dracni-nics") -> Netns:
        ns = Netns(prefix)
        made.append(ns)
        return ns

    try:
        yield make
    finally:
        for ns in made:
            ns.close()
        for ns in made:
            assert not ns.exists(), f"netns {ns.name} left behind"


def _links(ns: Netns) -> dict[str, dict]:
    out = ns.exec("ip", "-j", "-d", "link", "show").stdout
    return {link["ifname"]: link for link in json.loads(out or b"[]")}


def _wait_operstate(ns: Netns, name: str, want: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _links(ns)[name].get("operstate") == want:
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} in {ns.name} never reached operstate {want}")


@pytest.fixture
def lab(netns):
    """A "host" netns and a test netns ``ns`` holding:

    - ``vn0``: a veth created in the host netns and moved into ``ns`` (peer ``vh0`` stays), MTU
      9000, MAC 02:11:22:33:44:55, altname ``vn0-alternate``, both ends up (operstate up);
    - ``br0``: a bridge (up) with ``p0`` enslaved (``p0``/``p1`` a veth pair);
    - ``vx0``: a vxlan, VNI 42;
    - ``d0``/``d1``: a veth pair left down.
    """
    host = netns("dracni-nics-host")
    ns = netns("dracni-nics")
    ip("link", "add", "vh0", "type", "veth", "peer", "name", "vn0", netns=host.name)
    ip("link", "set", "vn0", "netns", ns.name, netns=host.name)
    ip("link", "set", "vn0", "mtu", "9000", "address", "02:11:22:33:44:55", netns=ns.name)
    ip("link", "property", "add", "dev", "vn0", "altname", "vn0-alternate", netns=ns.name)
    ip("link", "set", "vh0", "up", netns=host.name)
    ip("link", "set", "vn0", "up", netns=ns.name)
    ip("link", "add", "br0", "type", "bridge", netns=ns.name)
    ip("link", "add", "p0", "type", "veth", "peer", "name", "p1", netns=ns.name)
    ip("link", "set", "p0", "master", "br0", netns=ns.name)
    ip("link", "set", "br0", "up", netns=ns.name)
    ip("link", "add", "vx0", "type", "vxlan", "id", "42", "dstport", "4789", netns=ns.name)
    ip("link", "add", "d0", "type", "veth", "peer", "name", "d1", netns=ns.name)
    _wait_operstate(ns, "vn0", "UP")
    return host, ns


# -- discovery in a netns -------------------------------------------------------------------------


@needs_netns
def test_discovers_links_with_netlink_facts(lab, tmp_path):
    _, ns = lab
    empty_sysfs = tmp_path / "sys"
    empty_sysfs.mkdir()
    found = {n.name: n for n in discover_nics(netns=ns.path, sysfs_root=str(empty_sysfs))}
    truth = _links(ns)

    assert set(found) == {"lo", "vn0", "br0", "p0", "p1", "vx0", "d0", "d1"} == set(truth)
    for name, nic in found.items():
        assert nic.index == truth[name]["ifindex"], name
        assert nic.mtu == truth[name]["mtu"], name
        assert nic.mac == truth[name]["address"], name

    vn0 = found["vn0"]
    assert vn0.kind == "veth"
    assert vn0.mtu == 9000
    assert vn0.mac == "02:11:22:33:44:55"
    assert vn0.oper_state == "up" and vn0.admin_up
    assert vn0.alt_names == ("vn0-alternate",)
    assert vn0.master is None
    assert vn0.virtual  # a link kind, no sysfs entry
    assert vn0.pci_address is None and vn0.numa_node is None and vn0.speed_mbps is None

    assert found["br0"].kind == "bridge"
    assert found["p0"].master == "br0" and found["p0"].kind == "veth"
    assert found["p1"].master is None
    assert found["vx0"].kind == "vxlan"

    assert found["d0"].oper_state == "down" and not found["d0"].admin_up
    assert found["lo"].kind == "" and found["lo"].is_loopback and found["lo"].virtual

    assert [n.index for n in discover_nics(netns=ns.path, sysfs_root=str(empty_sysfs))] == sorted(
        n.index for n in found.values()
    )


@needs_netns
def test_oper_state_follows_the_link(lab, tmp_path):
    host, ns = lab
    ip("link", "set", "vh0", "down", netns=host.name)
    _wait_operstate(ns, "vn0", "LOWERLAYERDOWN")
    vn0 = {n.name: n for n in discover_nics(netns=ns.path, sysfs_root=str(tmp_path))}["vn0"]
    assert vn0.admin_up and vn0.oper_state == "lowerlayerdown"
    ip("link", "set", "vn0", "down", netns=ns.name)
    vn0 = {n.name: n for n in discover_nics(netns=ns.path, sysfs_root=str(tmp_path))}["vn0"]
    assert not vn0.admin_up and vn0.oper_state == "down"


@needs_netns
def test_carrier_and_link_down_follow_the_link(lab, tmp_path):
    """IFLA_CARRIER is read; ``link_down`` is what the publisher taints: no carrier or an oper
    state of down / lowerlayerdown."""
    host, ns = lab
    vn0 = {n.name: n for n in discover_nics(netns=ns.path, sysfs_root=str(tmp_path))}["vn0"]
    assert vn0.carrier is True and not vn0.link_down
    ip("link", "set", "vh0", "down", netns=host.name)
    _wait_operstate(ns, "vn0", "LOWERLAYERDOWN")
    vn0 = {n.name: n for n in discover_nics(netns=ns.path, sysfs_root=str(tmp_path))}["vn0"]
    assert vn0.carrier is False and vn0.link_down
    ip("link", "set", "vh0", "up", netns=host.name)
    _wait_operstate(ns, "vn0", "UP")
    vn0 = {n.name: n for n in discover_nics(netns=ns.path, sysfs_root=str(tmp_path))}["vn0"]
    assert vn0.carrier is True and not vn0.link_down


@pytest.mark.parametrize(
    "fields,down",
    [
        ({"oper_state": "up", "carrier": True}, False),
        ({"oper_state": "unknown", "carrier": True}, False),  # links that report no state (dummy)
        ({"oper_state": "unknown"}, False),  # nothing known: not tainted
        ({"oper_state": "up", "carrier": False}, True),
        ({"oper_state": "down"}, True),
        ({"oper_state": "lowerlayerdown", "carrier": False}, True),
        ({"oper_state": "notpresent"}, True),
    ],
)
def test_link_down(fields, down):
    assert Nic("eth1", 2, **fields).link_down is down


def test_a_nic_carries_its_links_netlink_facts(tmp_path):
    """Every field a Nic shares with netlink's LinkState comes from the link as it is; the
    master index becomes the master's name."""
    bond = links_mod.LinkState("bond0", 7, admin_up=True, oper_state="up", carrier=True, kind="bond")
    link = links_mod.LinkState(
        "eth3", 9, admin_up=False, oper_state="lowerlayerdown", carrier=None, mac="02:00:00:00:00:09", mtu=9000,
        kind="veth", link_type=1, master_index=7, alt_names=("enp9s0",),
    )  # fmt: skip
    nic = {n.name: n for n in nics_from([link, bond], sysfs_root=str(tmp_path))}["eth3"]
    assert (nic.name, nic.index, nic.mac, nic.mtu, nic.kind) == ("eth3", 9, "02:00:00:00:00:09", 9000, "veth")
    assert (nic.oper_state, nic.admin_up, nic.carrier, nic.link_type) == ("lowerlayerdown", False, None, 1)
    assert (nic.master, nic.alt_names, nic.virtual) == ("bond0", ("enp9s0",), True)


@needs_netns
def test_missing_netns_raises_and_is_not_created(tmp_path):
    path = str(NETNS_RUN / f"dracni-nics-absent-{os.getpid()}")
    with pytest.raises(FileNotFoundError):
        discover_nics(netns=path, sysfs_root=str(tmp_path))
    assert not os.path.exists(path)


@needs_netns
def test_flags_zero_never_creates_a_netns():
    """Past discover_nics' existence check, the namespace is opened, never created (O_RDONLY)."""
    path = str(NETNS_RUN / f"dracni-nics-absent2-{os.getpid()}")
    with pytest.raises(OSError):
        links_mod.open_route_socket(path)
    assert not os.path.lexists(path)


@needs_netns
def test_own_netns_with_real_sysfs(lab):
    """``netns=None`` (IPRoute) run inside the test netns by ``ip netns exec``, which mounts a
    sysfs for that namespace: real /sys/class/net entries of veths and bridges say virtual."""
    _, ns = lab
    code = (
        "import json, dataclasses; from dracni.inventory.nics import discover_nics;"
        "print(json.dumps([dataclasses.asdict(n) for n in discover_nics()]))"
    )
    out = ns.exec(sys.executable, "-c", code, env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
    found = {n["name"]: n for n in json.loads(out)}
    assert set(found) == set(_links(ns))
    for name in ("vn0", "br0", "vx0", "lo"):
        assert found[name]["virtual"] is True, name
        assert found[name]["pci_address"] is None, name
    assert found["vn0"]["mtu"] == 9000 and found["p0"]["master"] == "br0"
    # A veth reports a speed in sysfs when up (10000 on current kernels); lo's speed is unreadable.
    assert found["lo"]["speed_mbps"] is None
    assert found["vn0"]["speed_mbps"] is None or found["vn0"]["speed_mbps"] > 0


# -- fake sysfs trees -----------------------------------------------------------------------------


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _symlink(link: Path, target: str) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, link)


def make_pci_nic(
    root: Path,
    name: str,
    *,
    pcie_root: str = "pci0000:3a",
    bridge: str = "0000:3a:00.0",
    address: str = "0000:3b:00.0",
    numa: str | None = "1",
    totalvfs: str | None = "64",
    numvfs: str | None = "8",
    speed: str | None = "25000",
    physfn: str | None = None,
    ifindex: int | None = None,
    mac: str | None = None,
    bus_link: bool = True,
    driver: str = "ice",
    vendor: str = "0x8086",
    device: str = "0x159b",
) -> Path:
    """A PCI NIC as Linux lays it out:

    class/net/<name> -> ../../devices/<root>/<bridge>/<address>/net/<name>
    devices/<root>/<bridge>/<address>/{numa_node,sriov_totalvfs,sriov_numvfs,vendor,device,driver,physfn}
    devices/<root>/<bridge>/<address>/net/<name>/{device -> ../../../<address>,speed,ifindex,address}
    bus/pci/devices/<address> -> ../../../devices/<root>/<bridge>/<address>
    """
    pci = root / "devices" / pcie_root / bridge / address
    pci.mkdir(parents=True, exist_ok=True)
    for fname, value in (
        ("numa_node", numa),
        ("sriov_totalvfs", totalvfs),
        ("sriov_numvfs", numvfs),
        ("vendor", vendor),
        ("device", device),
    ):
        if value is not None:
            _write(pci / fname, value)
    (root / "bus" / "pci" / "drivers" / driver).mkdir(parents=True, exist_ok=True)
    if not (pci / "driver").is_symlink():
        _symlink(pci / "driver", f"../../../../bus/pci/drivers/{driver}")
    if physfn is not None:
        _symlink(pci / "physfn", f"../{physfn}")
    netdir = pci / "net" / name
    netdir.mkdir(parents=True)
    _symlink(netdir / "device", f"../../../{address}")
    if speed is not None:
        _write(netdir / "speed", speed)
    if ifindex is not None:
        _write(netdir / "ifindex", str(ifindex))
    if mac is not None:
        _write(netdir / "address", mac)
    _symlink(root / "class" / "net" / name, f"../../devices/{pcie_root}/{bridge}/{address}/net/{name}")
    if bus_link:
        _symlink(root / "bus" / "pci" / "devices" / address, f"../../../devices/{pcie_root}/{bridge}/{address}")
    return pci


def make_virtual_nic(root: Path, name: str, speed: str | None = None) -> None:
    netdir = root / "devices" / "virtual" / "net" / name
    netdir.mkdir(parents=True)
    if speed is not None:
        _write(netdir / "speed", speed)
    _symlink(root / "class" / "net" / name, f"../../devices/virtual/net/{name}")


def test_sysfs_pci_physical_function(tmp_path):
    make_pci_nic(tmp_path, "ens1f0")
    hw = hardware_facts("ens1f0", str(tmp_path))
    assert hw == HardwareFacts(
        speed_mbps=25000,
        pci_address="0000:3b:00.0",
        pcie_root="pci0000:3a",
        numa_node=1,
        sriov_totalvfs=64,
        sriov_numvfs=8,
        sriov_is_vf=False,
        virtual=False,
        driver="ice",
        vendor_id="0x8086",
        device_id="0x159b",
    )


def test_sysfs_pci_virtual_function(tmp_path):
    make_pci_nic(tmp_path, "ens1f0")
    make_pci_nic(
        tmp_path,
        "ens1f0v0",
        address="0000:3b:02.0",
        totalvfs=None,
        numvfs=None,
        physfn="0000:3b:00.0",
        driver="iavf",
        device="0x1889",
        speed="-1",
    )
    hw = hardware_facts("ens1f0v0", str(tmp_path))
    assert hw.sriov_is_vf is True
    assert hw.sriov_totalvfs is None and hw.sriov_numvfs is None
    assert hw.pci_address == "0000:3b:02.0" and hw.pcie_root == "pci0000:3a"
    assert hw.driver == "iavf" and hw.device_id == "0x1889"
    assert hw.speed_mbps is None  # -1: unknown (link down)


def test_sysfs_without_bus_pci_link_uses_the_device_path(tmp_path):
    make_pci_nic(
        tmp_path,
        "ens2f0",
        pcie_root="pci0000:d7",
        bridge="0000:d7:02.0",
        address="0000:d8:00.1",
        numa="3",
        bus_link=False,
    )
    hw = hardware_facts("ens2f0", str(tmp_path))
    assert (hw.pci_address, hw.pcie_root, hw.numa_node) == ("0000:d8:00.1", "pci0000:d7", 3)


@pytest.mark.parametrize(
    "numa,speed,expect_numa,expect_speed",
    [
        ("-1", "-1", None, None),
        (None, None, None, None),  # files absent
        ("garbage", "fast", None, None),  # unparsable
        ("0", "100000", 0, 100000),
    ],
)
def test_sysfs_numa_and_speed_edge_values(tmp_path, numa, speed, expect_numa, expect_speed):
    make_pci_nic(tmp_path, "ens3", numa=numa, speed=speed)
    hw = hardware_facts("ens3", str(tmp_path))
    assert (hw.numa_node, hw.speed_mbps) == (expect_numa, expect_speed)


@pytest.mark.parametrize("numa,expect", [("1", {"int": 1}), ("0", {"int": 0}), ("-1", None), (None, None)])
def test_numa_node_is_published_as_the_standard_attribute(tmp_path, numa, expect):
    """``resource.kubernetes.io/numaNode`` (deviceattribute ``StandardDeviceAttributeNUMANode``,
    an int) from ``device/numa_node``; -1 (no NUMA affinity) and a missing file: omitted."""
    from dracni.inventory.slices import NUMA_NODE, device_for

    make_pci_nic(tmp_path, "ens3", numa=numa)
    hw = hardware_facts("ens3", str(tmp_path))
    attrs = device_for(Nic("ens3", 7, **vars(hw)))["attributes"]
    assert attrs.get(NUMA_NODE) == expect
    assert attrs["resource.kubernetes.io/pciBusID"] == {"string": "0000:3b:00.0"}


def test_sysfs_unreadable_speed(tmp_path):
    """Reading ``speed`` of a down link fails with EINVAL; here the read fails (a directory)."""
    make_pci_nic(tmp_path, "ens4", speed=None)
    (tmp_path / "class" / "net" / "ens4" / "speed").mkdir()
    assert hardware_facts("ens4", str(tmp_path)).speed_mbps is None


def test_sysfs_virtual_and_absent(tmp_path):
    make_virtual_nic(tmp_path, "br0")
    hw = hardware_facts("br0", str(tmp_path))
    assert hw.virtual is True and hw.pci_address is None and hw.pcie_root is None
    assert hardware_facts("nope0", str(tmp_path)) == HardwareFacts()  # virtual=None: unknown


def test_sysfs_virtio_nic(tmp_path):
    """A VM's virtio NIC: the device is virtioN under the virtio PCI function."""
    pci = tmp_path / "devices" / "pci0000:00" / "0000:00:03.0"
    _write(pci / "numa_node", "-1")
    _write(pci / "vendor", "0x1af4")
    netdir = pci / "virtio2" / "net" / "eth0"
    netdir.mkdir(parents=True)
    _symlink(netdir / "device", "../../../virtio2")
    _write(netdir / "speed", "-1")
    (tmp_path / "bus" / "virtio" / "drivers" / "virtio_net").mkdir(parents=True)
    _symlink(pci / "virtio2" / "driver", "../../../../bus/virtio/drivers/virtio_net")
    _symlink(tmp_path / "class" / "net" / "eth0", "../../devices/pci0000:00/0000:00:03.0/virtio2/net/eth0")
    hw = hardware_facts("eth0", str(tmp_path))
    assert hw.pci_address == "0000:00:03.0" and hw.pcie_root == "pci0000:00"
    assert hw.numa_node is None and hw.virtual is False and hw.driver == "virtio_net"
    assert hw.vendor_id == "0x1af4" and hw.sriov_totalvfs is None


def test_sysfs_usb_nic_has_no_pci_address(tmp_path):
    usb = tmp_path / "devices" / "pci0000:00" / "0000:00:14.0" / "usb1" / "1-1" / "1-1:1.0"
    netdir = usb / "net" / "enx00e04c680001"
    netdir.mkdir(parents=True)
    _symlink(netdir / "device", "../../../1-1:1.0")
    _symlink(
        tmp_path / "class" / "net" / "enx00e04c680001",
        "../../devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/net/enx00e04c680001",
    )
    hw = hardware_facts("enx00e04c680001", str(tmp_path))
    assert hw.virtual is False and hw.pci_address is None and hw.pcie_root is None


def test_sysfs_entry_of_another_link_is_ignored(tmp_path):
    """ifindex or MAC disagreeing with netlink: the entry belongs to another namespace's link."""
    make_pci_nic(tmp_path, "ens1f0", ifindex=7, mac="3c:fd:fe:00:00:01")
    assert hardware_facts("ens1f0", str(tmp_path), ifindex=7, mac="3C:FD:FE:00:00:01").pci_address == "0000:3b:00.0"
    assert hardware_facts("ens1f0", str(tmp_path), ifindex=8, mac="3c:fd:fe:00:00:01") == HardwareFacts()
    assert hardware_facts("ens1f0", str(tmp_path), ifindex=7, mac="02:00:00:00:00:09") == HardwareFacts()


def test_netlink_parent_device_names_the_pci_function(tmp_path):
    """No usable class/net entry (a NIC moved into a pod netns): IFLA_PARENT_DEV_NAME plus
    /sys/bus/pci/devices give the PCI facts."""
    make_pci_nic(tmp_path, "ens1f0", ifindex=7)
    hw = hardware_facts("net1", str(tmp_path), ifindex=3, parent_dev="0000:3b:00.0", parent_bus="pci")
    assert hw.pci_address == "0000:3b:00.0" and hw.pcie_root == "pci0000:3a"
    assert hw.numa_node == 1 and hw.sriov_totalvfs == 64 and hw.virtual is False
    assert hw.speed_mbps is None  # speed lives in the (unusable) class entry
    assert hardware_facts("net1", str(tmp_path), parent_dev="virtio2", parent_bus="virtio") == HardwareFacts()


@needs_netns
def test_discovery_merges_fake_sysfs(lab, tmp_path):
    """A veth named like a PCI NIC, in a netns, against a fake tree whose ifindex/address match:
    its hardware facts come from the tree; a same-named entry with another ifindex is ignored."""
    host, ns = lab
    ip("link", "add", "ens1f0", "type", "veth", "peer", "name", "ens1f0p", netns=host.name)
    ip("link", "set", "ens1f0", "netns", ns.name, netns=host.name)
    ip("link", "add", "ens1f1", "type", "veth", "peer", "name", "ens1f1p", netns=ns.name)
    links = _links(ns)
    make_pci_nic(tmp_path, "ens1f0", ifindex=links["ens1f0"]["ifindex"], mac=links["ens1f0"]["address"])
    make_pci_nic(tmp_path, "ens1f1", address="0000:3b:00.1", ifindex=links["ens1f1"]["ifindex"] + 100)

    found = {n.name: n for n in discover_nics(netns=ns.path, sysfs_root=str(tmp_path))}
    pf = found["ens1f0"]
    assert pf.kind == "veth"  # netlink's view
    assert (pf.pci_address, pf.pcie_root, pf.numa_node, pf.sriov_totalvfs, pf.speed_mbps) == (
        "0000:3b:00.0",
        "pci0000:3a",
        1,
        64,
        25000,
    )
    assert pf.virtual is False and pf.driver == "ice" and not pf.sriov_is_vf
    other = found["ens1f1"]
    assert other.pci_address is None and other.virtual is True


# -- eligibility ----------------------------------------------------------------------------------


def nic(name: str, kind: str = "", **kw) -> Nic:
    return Nic(name=name, index=kw.pop("index", 10), kind=kind, **kw)


LO = nic("lo", link_type=772, virtual=True, index=1)
PHYS = nic("ens1f0", pci_address="0000:3b:00.0")
PHYS2 = nic("ens1f1", pci_address="0000:3b:00.1")
VF = nic("ens1f0v3", sriov_is_vf=True)


@pytest.mark.parametrize(
    "kind", ["veth", "bridge", "tun", "macvlan", "macvtap", "ipvlan", "vlan", "vxlan", "geneve", "ipip", "sit", "ifb"]
)
def test_default_excludes_kinds(kind):
    assert kind in DEFAULT_EXCLUDED_KINDS
    assert not eligible(nic("x0", kind))


def test_defaults():
    assert not eligible(LO)
    assert eligible(PHYS) and eligible(VF)
    assert eligible(nic("bond0", "bond")) and eligible(nic("team0", "team"))
    assert not eligible(nic("ens2", master="bond0"))  # a bond slave
    assert not eligible(PHYS, dracni_created={"ens1f0"})
    assert eligible(PHYS, None, None)


def test_include_globs_filter():
    inc = ["ens1f*"]
    assert eligible(PHYS, inc) and eligible(PHYS2, inc) and eligible(VF, inc)
    assert not eligible(nic("eth0"), inc)
    assert not eligible(nic("ens1fx", "veth"), inc)  # a glob does not lift the default exclusion
    assert eligible(PHYS, ["eth[0-9]", "ens1f[0]"]) and not eligible(PHYS2, ["ens1f[0]"])
    assert eligible(PHYS, ["*"]) and not eligible(LO, ["*"]) and not eligible(nic("v", "veth"), ["*"])


def test_literal_include_overrides_defaults():
    assert eligible(nic("br0", "bridge"), ["br0"])
    assert eligible(nic("vx0", "vxlan"), ["ens*", "vx0"])
    assert eligible(nic("ens2", master="br0"), ["ens2"])
    assert not eligible(nic("br1", "bridge"), ["br0"])
    # never a link dracni made itself
    assert not eligible(nic("net1", "macvlan"), ["net1"], dracni_created={"net1"})


def test_exclude_wins():
    assert not eligible(PHYS2, exclude=["ens1f1"])
    assert eligible(PHYS, exclude=["ens1f1"])
    assert not eligible(PHYS, ["ens1f0"], ["ens1f?"])
    assert not eligible(nic("br0", "bridge"), ["br0"], ["br*"])
    assert eligible(PHYS, [], [])  # empty lists: no filter


def test_pyroute2_stays_out_of_other_modules():
    """Importing the CNI and state packages (and slices) must not import pyroute2."""
    code = (
        "import sys; import dracni.cni.main, dracni.state.store, dracni.inventory.slices, dracni.inventory.nics;"
        "print('pyroute2' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=str(REPO),
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.stdout.strip() == "False"


@needs_netns
def test_discovered_nics_make_valid_slices(lab):
    from dracni.inventory.slices import build_slices
    from tests.unit.inventory.test_slices import validate_slice

    _, ns = lab
    found = discover_nics(netns=ns.path, sysfs_root="/nonexistent-sysfs")
    slices = build_slices(driver="dracni.io", node_name="node-a", node_uid=None, nics=found, generation=0)
    for s in slices:
        assert validate_slice(s) == []
    names = [d["name"] for s in slices for d in s["spec"]["devices"]]
    assert sorted(names) == sorted(n.name for n in found)
