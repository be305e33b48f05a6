"""The policy cases of issue 22 (a tenant never impersonates anyone), part of the one table of
tests/policy_cases.py (which appends them to ``CASES``): tuning sysctls within Kubernetes' safe set
or the administrator's ``allowedSysctls`` (rule sysctls, both engines), and a claim's own static
IPAM never handing out its subnet's network or broadcast address or a gateway it names (rule
addressOwnership: address arithmetic, the node's alone)."""

from __future__ import annotations

from typing import Any

from tests.policy_cases import HOST_LOCAL, PolicyCase, attach, plugin

STATIC = {
    "type": "static",
    "addresses": [{"address": "10.20.0.5/24", "gateway": "10.20.0.1"}],
    "routes": [{"dst": "0.0.0.0/0", "gw": "10.20.0.10"}],
}


def conflist(*plugins: dict[str, Any]) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "own", "plugins": list(plugins)}


IDENTITY_CASES = [
    # -- tuning sysctls (rule sysctls): Kubernetes' safe set, '/' or '.', plus allowedSysctls -----------
    PolicyCase(
        "full-sysctl-safe",
        attach(config=plugin("tuning", sysctl={"net.ipv4.tcp_syncookies": "1", "net/ipv4/ip_local_port_range": "1 2"})),
        mode="full",
    ),
    PolicyCase(
        "full-sysctl-forwarding",
        attach(config=plugin("tuning", sysctl={"net.ipv4.ip_forward": "1"})),
        ('parameters.config.sysctl["net.ipv4.ip_forward"]', "sysctls"),
        mode="full",
    ),
    PolicyCase(
        "full-sysctl-slashes",
        attach(config=plugin("tuning", sysctl={"net/ipv4/conf/net1/proxy_arp": "1"})),
        ('parameters.config.sysctl["net/ipv4/conf/net1/proxy_arp"]', "sysctls"),
        mode="full",
    ),
    PolicyCase(
        "full-sysctl-in-a-conflist",
        attach(
            config=conflist(
                {"type": "macvlan", "ipam": HOST_LOCAL},
                {"type": "tuning", "sysctl": {"net.ipv6.conf.net1.accept_ra": "2"}},
            )
        ),
        ('parameters.config.plugins[1].sysctl["net.ipv6.conf.net1.accept_ra"]', "sysctls"),
        mode="full",
    ),
    PolicyCase(
        "full-sysctl-allowed-by-the-administrator",
        attach(config=plugin("tuning", sysctl={"net.ipv4.conf.net1.arp_ignore": "1"})),
        mode="full",
        allowed_sysctls=("net.ipv4.conf.net1.arp_ignore",),
    ),
    PolicyCase(
        "full-sysctl-allowed-written-with-slashes",
        attach(config=plugin("tuning", sysctl={"net/ipv4/conf/net1/arp_ignore": "1"})),
        mode="full",
        allowed_sysctls=("net.ipv4.conf.net1.arp_ignore",),
    ),
    PolicyCase(
        "full-sysctl-another-than-allowed",
        attach(config=plugin("tuning", sysctl={"net.ipv4.conf.net1.arp_announce": "1"})),
        ('parameters.config.sysctl["net.ipv4.conf.net1.arp_announce"]', "sysctls"),
        mode="full",
        allowed_sysctls=("net.ipv4.conf.net1.arp_ignore",),
    ),
    PolicyCase(
        "full-sysctl-a-prefix-of-allowed",
        attach(config=plugin("tuning", sysctl={"net.ipv4.conf.net1": "1"})),
        ('parameters.config.sysctl["net.ipv4.conf.net1"]', "sysctls"),
        mode="full",
        allowed_sysctls=("net.ipv4.conf.net1.arp_ignore",),
    ),
    PolicyCase(
        "full-sysctl-on-another-plugin",
        attach(config=plugin("macvlan", sysctl={"net.ipv4.ip_forward": "1"}, ipam=HOST_LOCAL)),
        mode="full",
    ),
    # -- a claim's own static IPAM hands out only what its subnet owns (rule addressOwnership) ------
    PolicyCase(
        "full-static-free-address",
        attach(config=plugin("macvlan", ipam=STATIC)),
        mode="full",
    ),
    PolicyCase(
        "full-static-network-address",
        attach(config=plugin("macvlan", ipam={**STATIC, "addresses": [{"address": "10.20.0.0/24"}]})),
        ("parameters.config.ipam.addresses[0].address", "addressOwnership"),
        mode="full",
        node_only=True,
    ),
    PolicyCase(
        "full-static-broadcast-address",
        attach(
            config=plugin(
                "macvlan", ipam={**STATIC, "addresses": [{"address": "10.20.0.5/24"}, {"address": "10.20.0.255/24"}]}
            )
        ),
        ("parameters.config.ipam.addresses[1].address", "addressOwnership"),
        mode="full",
        node_only=True,
    ),
    PolicyCase(
        "full-static-its-own-gateway",
        attach(
            config=plugin(
                "macvlan", ipam={**STATIC, "addresses": [{"address": "10.20.0.9/24", "gateway": "10.20.0.9"}]}
            )
        ),
        ("parameters.config.ipam.addresses[0].address", "addressOwnership"),
        mode="full",
        node_only=True,
    ),
    PolicyCase(
        "full-static-a-route-s-gateway",
        attach(config=plugin("macvlan", ipam={**STATIC, "addresses": [{"address": "10.20.0.10/24"}]})),
        ("parameters.config.ipam.addresses[0].address", "addressOwnership"),
        mode="full",
        node_only=True,
    ),
]
