"""Claim parameters a tenant might write, and what the tenant policy answers: one table for the
node-side engine (tests/unit/policy/test_policy.py) and the admission policy's CEL
(tests/unit/policy/test_admission_cel.py), so the two cannot drift apart.

Every case is a claim's own config (``source: FromClaim``) for request ``net``, allocated the
device ``eth1`` of a node that also has ``uplink0``.  Under ``mode="profiles"`` the DeviceClass
defines the network ``macvlan-eth1`` (CLASS_NETWORK: macvlan, host-local 10.10.1.0/24,
capabilities mac and ips); under ``mode="full"`` it defines none (where it does, a claim's own
network is refused: rule classPrecedence, tested on its own).
``refused`` is ``(field, rule)`` or None; ``node_only`` marks what CEL cannot see (the
allocated device, the class's networks, keys nested deeper than a plugin's ipam): the
admission policy admits those and the node refuses them at prepare time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DRACNI = "dracni.io/v1alpha1"
CNI_DRA = "cni.networking.x-k8s.io/v1alpha1"

CLASS_NETWORK = {
    "apiVersion": DRACNI,
    "kind": "NetworkAttachment",
    "config": {
        "cniVersion": "1.0.0",
        "name": "macvlan-eth1",
        "plugins": [
            {
                "type": "macvlan",
                "mode": "bridge",
                "capabilities": {"mac": True, "ips": True},
                "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.10.1.0/24"}]]},
            }
        ],
    },
}

HOST_LOCAL = {"type": "host-local", "ranges": [[{"subnet": "10.20.0.0/24"}]]}


@dataclass(frozen=True)
class PolicyCase:
    id: str
    params: dict[str, Any]
    refused: tuple[str, str] | None = None  # (field, rule name or "schema")
    mode: str = "profiles"  # the policy's claimConfigs
    node_only: bool = False
    extra_types: tuple[str, ...] = field(default=())  # pluginTypes the administrator added
    allowed_sysctls: tuple[str, ...] = field(default=())  # allowedSysctls the administrator set


def attach(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": DRACNI, "kind": "NetworkAttachment", **fields}


def plugin(kind: str, **fields: Any) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "own", "type": kind, **fields}


CASES = [
    # -- profiles (the default): a network of the class, chosen by name ---------------------
    PolicyCase("profile-class-default", attach(ifName="net1")),
    PolicyCase("profile-by-name", attach(network="macvlan-eth1", ifName="net1")),
    PolicyCase(
        "profile-mac-and-ips",
        attach(network="macvlan-eth1", runtimeConfig={"mac": "02:00:00:00:00:01", "ips": ["10.10.1.5/24"]}),
    ),
    PolicyCase("profile-mac-dashes", attach(network="macvlan-eth1", runtimeConfig={"mac": "02-00-00-00-00-0A"})),
    PolicyCase("profile-mac-dotted", attach(runtimeConfig={"mac": "0200.0000.000a"})),
    PolicyCase(
        "profile-mac-multicast",
        attach(runtimeConfig={"mac": "01:00:5e:00:00:01"}),
        ("parameters.runtimeConfig.mac", "macOwnership"),
    ),
    PolicyCase(
        "profile-mac-not-a-mac",
        attach(runtimeConfig={"mac": "02:00:00:00:00"}),
        ("parameters.runtimeConfig.mac", "macOwnership"),
    ),
    PolicyCase(
        "profile-mac-not-a-string",
        attach(runtimeConfig={"mac": 2}),
        ("parameters.runtimeConfig.mac", "macOwnership"),
    ),
    PolicyCase(
        "profile-mac-vendor",  # the class may allow its prefix (allowedMACPrefixes): the node's to judge
        attach(runtimeConfig={"mac": "00-16-3E-00-00-01"}),
        ("parameters.runtimeConfig.mac", "macOwnership"),
        node_only=True,
    ),
    PolicyCase(
        "profile-own-mac-prefixes",
        attach(allowedMACPrefixes=["00:16:3e"]),
        ("parameters.allowedMACPrefixes", "macOwnership"),
    ),
    PolicyCase("profile-sticky", attach(persistentIPs=True, ipamClaim="net-ips")),
    PolicyCase(
        "profile-own-address-pool",
        attach(addressPool={"name": "mine", "subnets": [{"subnet": "10.10.1.0/24"}]}),
        ("parameters.addressPool", "addressPools"),
    ),
    PolicyCase(
        "profile-ips-outside-ranges",
        attach(runtimeConfig={"ips": ["192.168.7.5/24"]}),
        ("parameters.runtimeConfig.ips[0]", "networkRanges"),
        node_only=True,
    ),
    PolicyCase(
        "profile-unknown-network",
        attach(network="storage"),
        ("parameters.network", "schema"),
        node_only=True,
    ),
    PolicyCase(
        "profile-port-mappings",
        attach(runtimeConfig={"portMappings": [{"hostPort": 10250, "containerPort": 80, "protocol": "tcp"}]}),
        ("parameters.runtimeConfig.portMappings", "runtimeKeys"),
    ),
    PolicyCase(
        "profile-capabilities",
        attach(capabilities={"portMappings": True}),
        ("parameters.capabilities", "claimConfigs"),
    ),
    PolicyCase(
        "profile-own-config",
        attach(config=plugin("macvlan", ipam=HOST_LOCAL)),
        ("parameters.config", "claimConfigs"),
    ),
    PolicyCase(
        "profile-cni-dra-form",
        {
            "apiVersion": CNI_DRA,
            "kind": "CNI",
            "ifName": "net1",
            "config": {"name": "x", "plugins": [{"type": "macvlan"}]},
        },
        ("parameters.config", "claimConfigs"),
    ),
    PolicyCase(
        "network-and-config",
        attach(network="macvlan-eth1", config=plugin("macvlan")),
        ("parameters.network", "schema"),
    ),
    PolicyCase("bad-network-name", attach(network="no spaces"), ("parameters.network", "schema")),
    PolicyCase("bad-ifname", attach(ifName="net/1"), ("parameters.ifName", "schema")),
    PolicyCase("long-ifname", attach(ifName="a-very-long-name0"), ("parameters.ifName", "schema")),
    PolicyCase("ifname-escape", attach(ifName="net\x1b[7m"), ("parameters.ifName", "ifNameCharacters")),
    PolicyCase("ifname-percent", attach(ifName="net%d"), ("parameters.ifName", "ifNameCharacters")),
    PolicyCase("ifname-quote", attach(ifName='net"1'), ("parameters.ifName", "ifNameCharacters")),
    PolicyCase("ifname-backslash", attach(ifName="net\\1"), ("parameters.ifName", "ifNameCharacters")),
    PolicyCase("ifname-non-ascii", attach(ifName="netë"), ("parameters.ifName", "ifNameCharacters")),
    PolicyCase(
        "ifname-cni-form-delete",
        {
            "apiVersion": CNI_DRA,
            "kind": "CNI",
            "ifName": "net\x7f",
            "config": {"name": "own", "plugins": [plugin("macvlan", mode="bridge", ipam=HOST_LOCAL)]},
        },
        ("parameters.ifName", "ifNameCharacters"),
        mode="full",
    ),
    PolicyCase("ifname-punctuation", attach(ifName="net-1_a.b@c+"), None),
    PolicyCase("unknown-field", attach(ifname="net1"), ("parameters.ifname", "schema")),
    PolicyCase(
        "bad-api-version", {"apiVersion": "v1", "kind": "NetworkAttachment"}, ("parameters.apiVersion", "schema")
    ),
    # -- full claim configs, opted into by the administrator --------------------------------
    PolicyCase(
        "full-mac-local",
        attach(
            config=plugin("macvlan", mac="0200.0000.0005", ipam=HOST_LOCAL), runtimeConfig={"mac": "06:00:00:00:00:05"}
        ),
        mode="full",
    ),
    PolicyCase(
        "full-runtime-mac-vendor",
        attach(config=plugin("macvlan", ipam=HOST_LOCAL), runtimeConfig={"mac": "00-11-22-33-44-55"}),
        ("parameters.runtimeConfig.mac", "macOwnership"),
        mode="full",
    ),
    PolicyCase(
        "full-plugin-mac-vendor",
        attach(config=plugin("macvlan", mac="0011.2233.4455", ipam=HOST_LOCAL)),
        ("parameters.config.mac", "macOwnership"),
        mode="full",
    ),
    PolicyCase(
        "full-conflist-mac-multicast",
        attach(
            config={
                "cniVersion": "1.0.0",
                "name": "own",
                "plugins": [{"type": "macvlan", "ipam": HOST_LOCAL}, {"type": "tuning", "mac": "33:33:00:00:00:01"}],
            }
        ),
        ("parameters.config.plugins[1].mac", "macOwnership"),
        mode="full",
    ),
    PolicyCase(
        "full-macvlan", attach(ifName="net1", config=plugin("macvlan", mode="bridge", ipam=HOST_LOCAL)), mode="full"
    ),
    PolicyCase(
        "full-own-address-pool",
        attach(
            config=plugin("macvlan", mode="bridge", ipam=HOST_LOCAL),
            addressPool={"name": "mine", "subnets": [{"subnet": "10.20.0.0/24"}]},
        ),
        ("parameters.addressPool", "addressPools"),
        mode="full",
    ),
    PolicyCase(
        "full-conflist-with-tuning",
        attach(
            config={
                "cniVersion": "1.0.0",
                "name": "own",
                "plugins": [{"type": "ipvlan", "ipam": {"type": "static"}}, {"type": "tuning", "mtu": 1400}],
            },
            runtimeConfig={"ips": ["10.30.0.2/24"]},
        ),
        mode="full",
    ),
    PolicyCase(
        "full-nested-dracni",
        attach(config=plugin("dracni", logFile="/tmp/victim", stateDir="/etc/hostname/\nssh-rsa AAAA x\n")),
        ("parameters.config.type", "noSelfDelegate"),
        mode="full",
    ),
    PolicyCase(
        "full-ipam-dracni",
        attach(config=plugin("macvlan", ipam={"type": "dracni", "logFile": "/tmp/victim"})),
        ("parameters.config.ipam.type", "noSelfDelegate"),
        mode="full",
    ),
    PolicyCase(
        "full-main-plugin-as-ipam",
        attach(config=plugin("host-device", ipam={"type": "host-device"})),
        ("parameters.config.ipam.type", "ipamIsNotMain"),
        mode="full",
    ),
    PolicyCase(
        "full-portmap",
        attach(
            config={
                "cniVersion": "1.0.0",
                "name": "own",
                "plugins": [
                    {"type": "macvlan", "ipam": HOST_LOCAL},
                    {"type": "portmap", "capabilities": {"portMappings": True}},
                ],
            },
            runtimeConfig={"portMappings": [{"hostPort": 10250, "containerPort": 80, "protocol": "tcp"}]},
        ),
        ("parameters.config.plugins[1].type", "pluginTypes"),
        mode="full",
    ),
    PolicyCase(
        "full-bridge",
        attach(config=plugin("bridge", bridge="cni0", ipam=HOST_LOCAL)),
        ("parameters.config.type", "pluginTypes"),
        mode="full",
    ),
    PolicyCase(
        "full-ipam-not-allowed",
        attach(config=plugin("macvlan", ipam={"type": "whereabouts", "range": "10.40.0.0/24"})),
        ("parameters.config.ipam.type", "ipamTypes"),
        mode="full",
    ),
    PolicyCase(
        "full-host-local-data-dir",
        attach(config=plugin("macvlan", ipam={**HOST_LOCAL, "dataDir": "/etc/evil"})),
        ("parameters.config.ipam.dataDir", "nodePaths"),
        mode="full",
    ),
    PolicyCase(
        "full-log-file",
        attach(config=plugin("macvlan", logFile="/root/.ssh/authorized_keys", ipam=HOST_LOCAL)),
        ("parameters.config.logFile", "nodePaths"),
        mode="full",
    ),
    PolicyCase(
        "full-deep-path",
        attach(
            config=plugin("macvlan", ipam={**HOST_LOCAL, "extra": {"socketPath": "/run/containerd/containerd.sock"}})
        ),
        ("parameters.config.ipam.extra.socketPath", "nodePaths"),
        mode="full",
        node_only=True,
    ),
    PolicyCase(
        "full-runtime-config-in-plugin",
        attach(config=plugin("macvlan", runtimeConfig={"portMappings": []}, ipam=HOST_LOCAL)),
        ("parameters.config.runtimeConfig", "runtimeKeys"),
        mode="full",
    ),
    PolicyCase(
        "full-port-mappings",
        attach(
            config=plugin("macvlan", ipam=HOST_LOCAL),
            runtimeConfig={"portMappings": [{"hostPort": 10250, "containerPort": 80, "protocol": "tcp"}]},
        ),
        ("parameters.runtimeConfig.portMappings", "runtimeKeys"),
        mode="full",
    ),
    PolicyCase(
        "full-port-mappings-with-portmap-allowed",
        attach(
            config={
                "cniVersion": "1.0.0",
                "name": "own",
                "plugins": [
                    {"type": "macvlan", "ipam": HOST_LOCAL},
                    {"type": "portmap", "capabilities": {"portMappings": True}},
                ],
            },
            runtimeConfig={"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]},
        ),
        mode="full",
        extra_types=("portmap",),
    ),
    PolicyCase(
        "full-master-other-nic",
        attach(config=plugin("macvlan", master="uplink0", ipam=HOST_LOCAL)),
        ("parameters.config.master", "deviceBinding"),
        mode="full",
        node_only=True,
    ),
    PolicyCase(
        "full-host-device-other-nic",
        attach(config=plugin("host-device", device="uplink0", ipam=HOST_LOCAL)),
        ("parameters.config.device", "deviceBinding"),
        mode="full",
        node_only=True,
    ),
    PolicyCase(
        "full-master-in-capitals",
        attach(config=plugin("macvlan", MASTER="uplink0", ipam=HOST_LOCAL)),
        ("parameters.config.MASTER", "keyCase"),
        mode="full",
        node_only=True,
    ),
    PolicyCase(
        "full-master-twice",
        attach(config=plugin("macvlan", master="eth1", Master="uplink0", ipam=HOST_LOCAL)),
        ("parameters.config.Master", "keyCase"),
        mode="full",
        node_only=True,
    ),
    PolicyCase(
        "full-ipam-type-in-capitals",
        attach(config=plugin("macvlan", ipam={**HOST_LOCAL, "TYPE": "host-device"})),
        ("parameters.config.ipam.TYPE", "keyCase"),
        mode="full",
        node_only=True,
    ),
    PolicyCase(
        "full-data-dir-in-capitals",
        attach(config=plugin("macvlan", ipam={**HOST_LOCAL, "DataDir": "/etc"})),
        ("parameters.config.ipam.DataDir", "nodePaths"),
        mode="full",
        node_only=True,
    ),
    PolicyCase(
        "full-capabilities-not-an-object",
        attach(config=plugin("macvlan", capabilities=[], ipam=HOST_LOCAL)),
        ("parameters.config.capabilities", "schema"),
        mode="full",
        node_only=True,
    ),
    PolicyCase(
        "full-master-allocated-nic",
        attach(config=plugin("macvlan", master="eth1", ipam=HOST_LOCAL)),
        mode="full",
    ),
]

# The identity cases (issue 22) stand in their own module, built on the helpers above.
from tests.policy_cases_identity import IDENTITY_CASES  # noqa: E402

CASES += IDENTITY_CASES
