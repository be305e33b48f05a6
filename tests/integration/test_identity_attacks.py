"""A tenant never impersonates anyone on the segment (issue 22, item 8).

Each attack a hostile tenant tried, on a real bridge segment (tests/integration/segment.py: a
switch, a gateway, another host, the node's own address on the parent, two other tenants' pods
attached by legitimate claims), through the frozen binary, cnitool and Debian's plugins.  Every
attack is refused where it should be (``dracni prepare``, or the CNI ADD when only the node can
see the conflict) with a message naming what is wrong; after each refusal the switch's FDB and
the gateway's neighbour table are exactly as before and the attacker's pod has no interface of
the claim.  Legitimate uses on the same segment still work, and the pod reaches the gateway.

The segment is built once per module; each attack runs in its own pod netns, cleaned per test.
Run with ``-s`` to see each refusal's message.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from tests.harness import Lab, Netns, dracni_cli, write_manifest
from tests.integration.conftest import addresses
from tests.integration.segment import (
    GATEWAY_IP,
    GATEWAY_MAC,
    NODE_IN_RANGE_IP,
    NODE_IP,
    OTHER_HOST_IN_RANGE_IP,
    OTHER_HOST_IP,
    PARENT_FDB_MAC,
    RANGE_END,
    RANGE_START,
    SUBNET,
    Segment,
    build,
    ping,
    snapshot,
)
from tests.integration.test_tenant_safety import FULL, choose, class_macvlan, own_config, tenant_claim

#: The two other tenants' pods on the parent: name -> (address, MAC), both theirs by right.
TENANTS = {"tenant-a": ("10.10.1.101", "02:aa:00:00:00:01"), "tenant-b": ("10.10.1.102", "02:aa:00:00:00:02")}
CLAIM_IFNAME = "net1"


def segment_network(lab: Lab) -> dict:
    """The administrator's macvlan network on the segment: host-local hands out RANGE_START..END."""
    network = class_macvlan(lab, SUBNET)
    network["config"]["plugins"][0]["ipam"]["ranges"] = [
        [{"subnet": SUBNET, "rangeStart": RANGE_START, "rangeEnd": RANGE_END, "gateway": GATEWAY_IP}]
    ]
    return network


def prepare(seg: Segment, claim: dict, args: tuple[str, ...] = ()):
    """``dracni prepare`` of this one claim (its own manifest dir: the shared lab keeps others')."""
    directory = seg.lab.tmp / f"claims-{claim['metadata']['uid']}"
    directory.mkdir()
    write_manifest(directory, claim)
    state, nics = f"--state-dir={seg.lab.state_dir}", f"--nic-netns={seg.lab.host.path}"
    return dracni_cli("prepare", str(directory), state, nics, *args, check=False)


def unprepare(seg: Segment, claim: dict) -> None:
    dracni_cli("unprepare", f"--uid={claim['metadata']['uid']}", f"--state-dir={seg.lab.state_dir}")


def tenant_pod(seg: Segment, name: str, address: str, mac: str) -> tuple[Netns, str]:
    """A legitimate tenant's pod on the parent, which then talks to the gateway."""
    pod_uid = str(uuid.uuid4())
    knobs = choose(ifName=CLAIM_IFNAME, runtimeConfig={"mac": mac, "ips": [f"{address}/24"]})
    proc = prepare(seg, tenant_claim(name, pod_uid, knobs, network=segment_network(seg.lab)))
    assert proc.returncode == 0, proc.stderr.decode()
    pod = seg.lab.pod(name)
    seg.lab.cnitool("add", pod, pod_uid=pod_uid)
    ping(pod, GATEWAY_IP)
    return pod, pod_uid


@pytest.fixture(scope="module")
def seg(tmp_path_factory) -> Iterator[Segment]:
    lab = Lab(base=tmp_path_factory.mktemp("segment"), nics=("eth1",))
    try:
        lab.write_conflist()
        segment = build(lab)
        try:
            pods = [tenant_pod(segment, name, *identity) for name, identity in TENANTS.items()]
            yield segment
            for pod, pod_uid in pods:
                lab.cnitool("del", pod, pod_uid=pod_uid, check=False)
        finally:
            segment.close()
    finally:
        lab.close()


# -- the attacks -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attack:
    """One hostile claim: its parameters (from the segment's facts), the tenant policy it runs
    under, where it must be refused and a substring of the message (``{parent_mac}``,
    ``{other_host_mac}`` filled in from the segment)."""

    id: str
    params: Callable[[Segment], dict]
    where: str  # "prepare" or "ADD"
    expect: str
    rule: str | None  # the dracni rule the message names (None: a delegate refuses)
    full: bool = False  # claimConfigs: full (the tenant brings its whole CNI config)

    def claim(self, seg: Segment, pod_uid: str) -> dict:
        params = self.params(seg)
        if self.full:
            return tenant_claim(self.id, pod_uid, params)
        return tenant_claim(self.id, pod_uid, params, network=segment_network(seg.lab))


def mac(value: Callable[[Segment], str] | str) -> Callable[[Segment], dict]:
    """A profile claim asking for ``runtimeConfig.mac``."""
    return lambda seg: choose(ifName=CLAIM_IFNAME, runtimeConfig={"mac": value(seg) if callable(value) else value})


def ips(address: str) -> Callable[[Segment], dict]:
    """A profile claim pinning ``runtimeConfig.ips``."""
    return lambda seg: choose(ifName=CLAIM_IFNAME, runtimeConfig={"ips": [address]})


def full(*after: dict, **macvlan) -> Callable[[Segment], dict]:
    """A full claim config: a macvlan (bound to the allocated parent) with ``after`` chained."""
    ipam = {"type": "host-local", "ranges": [[{"subnet": SUBNET, "rangeStart": "10.10.1.210"}]]}
    plugin = {"type": "macvlan", "mode": "bridge", "ipam": ipam, **macvlan}
    return lambda seg: own_config(plugin, *after, if_name=CLAIM_IFNAME)


def tuning(**settings) -> dict:
    return {"type": "tuning", **settings}


GLOBAL = "is globally administered"
SYSCTLS = (
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.forwarding",
    "net.ipv6.conf.all.accept_ra",
    "net.ipv4.conf.all.proxy_arp",
)
SHARED = "the parent of node1/eth1 (offered as shared)"
REFUSED_AT_PREPARE = [
    # the default policy: the shipped macvlan class grants the mac and ips capabilities
    Attack("gateway-mac-colon", mac(GATEWAY_MAC), "prepare", f"runtimeConfig.mac: {GATEWAY_MAC} {GLOBAL}", "macOwnership"),
    Attack("gateway-mac-dash", mac("00-16-3E-0A-0B-01"), "prepare", f"{GATEWAY_MAC} {GLOBAL}", "macOwnership"),
    Attack("gateway-mac-dotted", mac("0016.3e0a.0b01"), "prepare", f"{GATEWAY_MAC} {GLOBAL}", "macOwnership"),
    Attack("multicast-mac", mac("01:00:5e:00:00:01"), "prepare", "01:00:5e:00:00:01 is a multicast address", "macOwnership"),
    Attack("gateway-ip", ips(f"{GATEWAY_IP}/24"), "prepare", f"{GATEWAY_IP} is the network's gateway of {SUBNET}", "addressOwnership"),
    Attack("network-address", ips("10.10.1.0/24"), "prepare", f"10.10.1.0 is the network address of {SUBNET}", "addressOwnership"),
    Attack("broadcast-address", ips("10.10.1.255/24"), "prepare", f"10.10.1.255 is the broadcast address of {SUBNET}", "addressOwnership"),
    Attack("outside-the-subnet", ips("192.168.9.9/24"), "prepare", '"192.168.9.9/24" is outside network "macvlan"', "networkRanges"),
    # in the subnet, outside the range the class's host-local hands out (the hosts' addresses)
    Attack("outside-the-range", ips("10.10.1.50/24"), "prepare", f'10.10.1.50 is outside the addresses network "macvlan" hands out ({RANGE_START}-{RANGE_END})', "networkRanges"),
    Attack("node-address", ips(f"{NODE_IP}/24"), "prepare", f"{NODE_IP} is outside the addresses network", "networkRanges"),
    Attack("other-host-address", ips(f"{OTHER_HOST_IP}/24"), "prepare", f"{OTHER_HOST_IP} is outside the addresses network", "networkRanges"),
    Attack("ifname-escape", lambda seg: choose(ifName="net\x1b[7m"), "prepare", 'parameters.ifName: "net\\u001b[7m" holds a character Linux tools mishandle', "ifNameCharacters"),
    # claimConfigs: full (the tenant's own CNI config, bound to the allocated parent)
    *(
        Attack(f"sysctl-{key}", full(tuning(sysctl={key: "1"})), "prepare", f'"{key}" is not a sysctl claims may set', "sysctls", full=True)
        for key in SYSCTLS
    ),
    Attack("macvlan-passthru", full(mode="passthru"), "prepare", f"plugins[0].mode: passthru takes over {SHARED}", "sharedParent", full=True),
    Attack("tuning-promisc", full(tuning(promisc=True)), "prepare", f"raises the promisc counter of {SHARED}", "sharedParent", full=True),
    Attack("tuning-allmulti", full(tuning(allmulti=True)), "prepare", f"raises the allmulti counter of {SHARED}", "sharedParent", full=True),
    Attack("tuning-gateway-mac", full(tuning(mac=GATEWAY_MAC)), "prepare", f"plugins[1].mac: {GATEWAY_MAC} {GLOBAL}", "macOwnership", full=True),
]  # fmt: skip

REFUSED_AT_ADD = [
    Attack("parent-mac", mac(lambda seg: seg.parent_mac.upper()), "ADD", "{parent_mac} is the MAC of parent eth1", "macOwnership"),
    Attack("other-tenant-mac", mac(TENANTS["tenant-b"][1]), "ADD", f"{TENANTS['tenant-b'][1]} is the MAC of container", "macOwnership"),
    Attack("other-host-mac", mac(lambda seg: seg.other_host_mac), "ADD", "{other_host_mac} is the MAC of neighbour 10.10.1.", "macOwnership"),
]  # fmt: skip

# -- refused at ADD once the node's view of the segment is checked (issue 22, items 1-3) ----------
#: What only the node sees, inside the network's range (segment.py: an administrator's overlap
#: or a host configured by hand): the node's own second address on the parent, the other
#: host's second address (a neighbour), another tenant's address, a MAC the node programmed on
#: the parent.  IPv6 neighbours and a VLAN in use are tested in test_address_ownership.py,
#: test_mac_ownership.py and test_vlan_in_use.py (this kernel has no VLAN support: it skips).
NODE_VIEW_ATTACKS = [
    Attack("node-address-in-range", ips(f"{NODE_IN_RANGE_IP}/24"), "ADD", f"{NODE_IN_RANGE_IP} is the node's address on parent eth1", "addressOwnership"),
    Attack("neighbour-address", ips(f"{OTHER_HOST_IN_RANGE_IP}/24"), "ADD", f"{OTHER_HOST_IN_RANGE_IP} is the address of neighbour {{other_host_mac}} on parent eth1", "addressOwnership"),
    Attack("other-tenant-address", ips(f"{TENANTS['tenant-a'][0]}/24"), "ADD", f"{TENANTS['tenant-a'][0]} is the address of container", "addressOwnership"),
    Attack("parent-fdb-mac", mac(PARENT_FDB_MAC), "ADD", f"{PARENT_FDB_MAC} is an FDB entry of parent eth1", "macOwnership"),
]  # fmt: skip

ATTACKS = REFUSED_AT_PREPARE + REFUSED_AT_ADD + NODE_VIEW_ATTACKS


def facts(seg: Segment) -> dict[str, str]:
    return {"parent_mac": seg.parent_mac, "other_host_mac": seg.other_host_mac}


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.id for a in ATTACKS])
def test_the_attack_is_refused_and_the_segment_unchanged(seg, attack: Attack):
    pod_uid = str(uuid.uuid4())
    claim = attack.claim(seg, pod_uid)
    before = snapshot(seg)
    pod = seg.lab.pod("dracni-attacker")
    try:
        proc = prepare(seg, claim, FULL if attack.full else ())
        if attack.where == "prepare":
            message = proc.stderr.decode().strip()
            assert proc.returncode == 1, message
            seg.lab.cnitool("add", pod, pod_uid=pod_uid)  # nothing recorded: the primary network only
        else:
            assert proc.returncode == 0, proc.stderr.decode()
            add = seg.lab.cnitool("add", pod, pod_uid=pod_uid, check=False)
            message = (add.stdout + add.stderr).decode().strip()
            assert add.returncode != 0, message
        print(f"{attack.id}: refused at {attack.where}: {message}")
        assert attack.expect.format(**facts(seg)) in message, message
        assert attack.rule is None or f"(rule {attack.rule}: " in message, message
        assert set(pod.links()) <= {"lo", "eth0"}, "the attacker's pod got an interface of the claim"
        assert snapshot(seg) == before
    finally:
        seg.lab.cnitool("del", pod, pod_uid=pod_uid, check=False)
        unprepare(seg, claim)
        pod.close()


# -- legitimate uses on the same segment -------------------------------------------------------------


@pytest.mark.parametrize(
    "runtime_config",
    [
        {"mac": "02:bb:00:00:00:01"},
        {"ips": ["10.10.1.150/24"]},
        {"mac": "02-BB-00-00-00-02", "ips": ["10.10.1.151/24"]},
    ],
    ids=["local-mac", "free-address", "both"],
)
def test_legitimate_identities_work_and_reach_the_gateway(seg, runtime_config):
    pod_uid = str(uuid.uuid4())
    claim = tenant_claim(
        "legit", pod_uid, choose(ifName=CLAIM_IFNAME, runtimeConfig=runtime_config), network=segment_network(seg.lab)
    )
    pod = seg.lab.pod("dracni-legit")
    try:
        proc = prepare(seg, claim)
        assert proc.returncode == 0, proc.stderr.decode()
        seg.lab.cnitool("add", pod, pod_uid=pod_uid)
        link = pod.links()[CLAIM_IFNAME]
        [address] = addresses(pod.links(), CLAIM_IFNAME)
        if "mac" in runtime_config:
            assert link["address"] == runtime_config["mac"].lower().replace("-", ":")
        if "ips" in runtime_config:
            assert [address] == runtime_config["ips"]
        ping(pod, GATEWAY_IP)
        after = snapshot(seg)
        # The segment now knows the pod by its own identity, at the node's port.
        assert after["gateway neighbours"][address.split("/")[0]] == link["address"]
        assert after["fdb"][link["address"]] == "eth1p"
    finally:
        seg.lab.cnitool("del", pod, pod_uid=pod_uid, check=False)
        unprepare(seg, claim)
        pod.close()


def test_the_segment_knows_everyone_by_their_own_identity(seg):
    """The control for the snapshots: each party at its own port, each address at its own MAC."""
    state = snapshot(seg)
    assert state["gateway neighbours"][OTHER_HOST_IP] == seg.other_host_mac
    assert state["fdb"][GATEWAY_MAC] == "gwp" and state["fdb"][seg.other_host_mac] == "ohp"
    assert state["fdb"][seg.parent_mac] == "eth1p" and state["gateway neighbours"][NODE_IP] == seg.parent_mac
    for address, tenant_mac in TENANTS.values():
        assert state["gateway neighbours"][address] == tenant_mac
        assert state["fdb"][tenant_mac] == "eth1p"


def test_the_snapshot_sees_a_theft(seg):
    """The control for every refusal above: a macvlan made by hand on the parent with the other
    host's MAC (what the attacks would have got) moves that MAC to the node's port and puts a
    new address on it in the gateway's table; the segment is then given back its own view."""
    before = snapshot(seg)
    thief = seg.lab.pod("dracni-thief")
    try:
        seg.lab.host.exec("ip", "link", "add", "thief", "link", "eth1", "type", "macvlan", "mode", "bridge")
        seg.lab.host.exec("ip", "link", "set", "thief", "address", seg.other_host_mac, "netns", thief.name)
        thief.exec("ip", "addr", "add", "10.10.1.199/24", "dev", "thief")
        thief.exec("ip", "link", "set", "thief", "up")
        ping(thief, GATEWAY_IP)
        stolen = snapshot(seg)
        assert stolen["fdb"][seg.other_host_mac] == "eth1p"
        assert stolen["gateway neighbours"]["10.10.1.199"] == seg.other_host_mac
    finally:
        thief.close()
        seg.gateway.exec("ip", "neigh", "del", "10.10.1.199", "dev", "gw0", check=False)
        ping(seg.other_host, GATEWAY_IP)  # the switch learns the MAC back at its own port
    assert snapshot(seg) == before
