"""Under claimConfigs: full, a claim's own config cannot change what others on its NIC share
(rule sharedParent), and its tuning sysctls stay within Kubernetes' safe set (rule sysctls)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dracni.params import ParameterError, validate_parameters
from dracni.policy.binding import DeviceFacts, bind_to_device
from dracni.policy.config import SAFE_SYSCTLS, TenantPolicy, load_policy
from dracni.policy.tenant import check_claim_config

FULL = TenantPolicy(claim_configs="full")


def own(*plugins: dict) -> dict:
    return validate_parameters(
        {
            "apiVersion": "dracni.io/v1alpha1",
            "kind": "NetworkAttachment",
            "config": {"name": "own", "plugins": list(plugins)},
        }
    )


def bind(params: dict, *, shared: bool = False, sharing: str = "exclusive") -> None:
    bind_to_device(
        params,
        pool="node1",
        device="eth1",
        shared=shared,
        tenant=True,
        lookup=lambda pool, device: DeviceFacts("eth1", None, None, sharing),
        where="parameters",
    )


@pytest.mark.parametrize(
    ("plugin", "field"),
    [
        ({"type": "macvlan", "mode": "passthru"}, "parameters.config.plugins[0].mode"),
        ({"type": "ipvlan", "mode": "l3"}, "parameters.config.plugins[0].type"),
        ({"type": "ipvlan"}, "parameters.config.plugins[0].type"),
    ],
)
@pytest.mark.parametrize(("shared", "sharing"), [(True, "exclusive"), (False, "shared"), (False, "slots")])
def test_what_the_kernel_keeps_per_parent_is_refused_on_a_shared_nic(plugin, field, shared, sharing):
    with pytest.raises(ParameterError) as caught:
        bind(own(plugin), shared=shared, sharing=sharing)
    assert caught.value.field == field
    assert "(rule sharedParent: " in caught.value.reason


@pytest.mark.parametrize("flag", ["promisc", "allmulti"])
def test_tuning_cannot_raise_the_shared_parent_s_flags(flag):
    params = own({"type": "macvlan", "mode": "bridge"}, {"type": "tuning", flag: True})
    with pytest.raises(ParameterError) as caught:
        bind(params, sharing="shared")
    assert caught.value.field == f"parameters.config.plugins[1].{flag}"
    assert f"raises the {flag} counter of the parent of node1/eth1" in caught.value.reason


def test_on_a_nic_of_its_own_the_claim_may():
    bind(own({"type": "macvlan", "mode": "passthru"}, {"type": "tuning", "promisc": True}))
    bind(own({"type": "ipvlan", "mode": "l3"}))
    bind(own({"type": "macvlan", "mode": "bridge"}, {"type": "tuning", "promisc": False}), sharing="shared")


@pytest.mark.parametrize(
    "key",
    [
        "net.ipv4.ip_forward",
        "net.ipv4.conf.all.forwarding",
        "net.ipv6.conf.net1.accept_ra",
        "net/ipv4/conf/net1/proxy_arp",
    ],
)
def test_tuning_sysctls_outside_the_safe_set_are_refused(key):
    params = own({"type": "macvlan"}, {"type": "tuning", "sysctl": {key: "1"}})
    with pytest.raises(ParameterError) as caught:
        check_claim_config(params, FULL, "parameters")
    assert caught.value.field.startswith("parameters.config.plugins[1].sysctl[")
    assert "(rule sysctls: " in caught.value.reason


def test_the_safe_set_is_allowed_and_the_administrator_adds_keys(tmp_path: Path):
    safe = own({"type": "macvlan"}, {"type": "tuning", "sysctl": dict.fromkeys(SAFE_SYSCTLS, "1")})
    check_claim_config(safe, FULL, "parameters")
    path = tmp_path / "policy.yaml"
    path.write_text("claimConfigs: full\nallowedSysctls: [net.ipv4.conf.net1.arp_ignore]\n")
    policy = load_policy(str(path))
    check_claim_config(own({"type": "tuning", "sysctl": {"net.ipv4.conf.net1.arp_ignore": "1"}}), policy, "parameters")
    assert "allowedSysctls=net.ipv4.conf.net1.arp_ignore" in policy.describe()


# -- addresses the segment's infrastructure owns (rule addressOwnership) ----------------------------


def class_network(ipam: dict) -> dict:
    return validate_parameters(
        {
            "apiVersion": "dracni.io/v1alpha1",
            "kind": "NetworkAttachment",
            "config": {"name": "lan", "plugins": [{"type": "macvlan", "capabilities": {"ips": True}, "ipam": ipam}]},
        }
    )


def choose(ip: str) -> dict:
    return validate_parameters(
        {"apiVersion": "dracni.io/v1alpha1", "kind": "NetworkAttachment", "runtimeConfig": {"ips": [ip]}}
    )


HOST_LOCAL = {"type": "host-local", "ranges": [[{"subnet": "10.10.1.0/24"}]]}
WITH_GATEWAY = {"type": "host-local", "ranges": [[{"subnet": "10.10.1.0/24", "gateway": "10.10.1.254"}]]}
STATIC = {
    "type": "static",
    "addresses": [{"address": "10.20.0.5/24", "gateway": "10.20.0.9"}],
    "routes": [{"dst": "0.0.0.0/0", "gw": "10.20.0.10"}],
}


@pytest.mark.parametrize(
    ("ipam", "ip", "what"),
    [
        (HOST_LOCAL, "10.10.1.0/24", "the network address of 10.10.1.0/24"),
        (HOST_LOCAL, "10.10.1.255/24", "the broadcast address of 10.10.1.0/24"),
        (HOST_LOCAL, "10.10.1.1/24", "the network's gateway"),  # host-local's default gateway
        (WITH_GATEWAY, "10.10.1.254/24", "the network's gateway"),
        (STATIC, "10.20.0.9/24", "the network's gateway"),
        (STATIC, "10.20.0.10/24", "the network's gateway"),
    ],
)
def test_a_claim_never_takes_the_segment_s_infrastructure_addresses(ipam, ip, what):
    from dracni.policy.tenant import apply_profile

    with pytest.raises(ParameterError) as caught:
        apply_profile(class_network(ipam), choose(ip), "parameters")
    assert caught.value.field == "parameters.runtimeConfig.ips[0]"
    assert what in caught.value.reason and "(rule addressOwnership: " in caught.value.reason


def test_a_free_address_in_range_is_still_granted():
    from dracni.policy.tenant import apply_profile

    apply_profile(class_network(WITH_GATEWAY), choose("10.10.1.1/24"), "parameters")  # .1 is no gateway here
    apply_profile(class_network(HOST_LOCAL), choose("10.10.1.7/24"), "parameters")


# -- a tenant's own VLAN (rule sharedParent; which IDs are free is ADD's, dracni/cni/vlanguard.py) -----


@pytest.mark.parametrize("vid", [0, 4095, -1, "100", True])
def test_a_vlan_id_outside_1_to_4094_is_refused(vid):
    with pytest.raises(ParameterError) as caught:
        bind(own({"type": "vlan", "vlanId": vid}))
    assert caught.value.field == "parameters.config.plugins[0].vlanId"
    assert f"{vid!r} is no VLAN ID of 1..4094" in caught.value.reason
    assert "(rule sharedParent: " in caught.value.reason


def test_on_a_shared_nic_a_vlan_names_its_id():
    with pytest.raises(ParameterError) as caught:
        bind(own({"type": "vlan"}), sharing="shared")
    assert caught.value.field == "parameters.config.plugins[0].vlanId"
    assert "needs a vlanId of 1..4094" in caught.value.reason
    bind(own({"type": "vlan", "vlanId": 100}), sharing="shared")
    bind(own({"type": "vlan", "vlanId": 4094}), shared=True)


# -- a claim's own static IPAM (rule addressOwnership) ---------------------------------------------------


@pytest.mark.parametrize(
    ("address", "index", "what"),
    [
        ("10.20.0.0/24", 0, "10.20.0.0 is the network address of 10.20.0.0/24"),
        ("10.20.0.255/24", 0, "10.20.0.255 is the broadcast address of 10.20.0.0/24"),
        ("10.20.0.9/24", 0, "10.20.0.9 is the network's gateway"),
        ("10.20.0.10/24", 0, "10.20.0.10 is the network's gateway"),
        ("fd00::/64", 0, "fd00:: is the network address of fd00::/64"),
    ],
)
def test_a_claim_s_own_static_ipam_never_hands_out_the_infrastructure_s_addresses(address, index, what):
    ipam = {**STATIC, "addresses": [{"address": address, "gateway": "10.20.0.9"}]}
    with pytest.raises(ParameterError) as caught:
        check_claim_config(own({"type": "macvlan", "ipam": ipam}), FULL, "parameters")
    assert caught.value.field == f"parameters.config.plugins[0].ipam.addresses[{index}].address"
    assert what in caught.value.reason and "(rule addressOwnership: " in caught.value.reason


def test_a_claim_s_own_static_ipam_may_use_a_free_address():
    check_claim_config(own({"type": "macvlan", "ipam": STATIC}), FULL, "parameters")
    ipv6 = {"type": "static", "addresses": [{"address": "fd00::ff/64"}]}  # IPv6 has no broadcast address
    check_claim_config(own({"type": "macvlan", "ipam": ipv6}), FULL, "parameters")
