"""The administrator's address pool: what it hands out, and the errors that name the field."""

from __future__ import annotations

import ipaddress

import pytest

from dracni.params import ParameterError
from dracni.pools.model import check_pool_network, parse_pool


def addresses(pool, family):
    return [str(pool.address(family, i)) for i in range(pool.size(family))]


def test_never_hands_out_network_broadcast_or_default_gateway():
    pool = parse_pool({"name": "lan", "subnets": [{"subnet": "10.10.1.0/29"}]}, "addressPool")
    assert addresses(pool, "ipv4") == ["10.10.1.2", "10.10.1.3", "10.10.1.4", "10.10.1.5", "10.10.1.6"]
    assert pool.families == ("ipv4",)
    assert pool.cidr(ipaddress.ip_address("10.10.1.2")) == "10.10.1.2/29"


def test_explicit_gateway_ranges_and_exclusions():
    pool = parse_pool(
        {
            "name": "lan",
            "subnets": [
                {
                    "subnet": "10.10.1.0/24",
                    "gateway": "10.10.1.254",
                    "ranges": [
                        {"start": "10.10.1.10", "end": "10.10.1.20"},
                        {"start": "10.10.1.250", "end": "10.10.1.255"},
                    ],
                    "exclude": ["10.10.1.12", "10.10.1.16/30"],
                }
            ],
        },
        "addressPool",
    )
    assert addresses(pool, "ipv4") == [
        "10.10.1.10", "10.10.1.11", "10.10.1.13", "10.10.1.14", "10.10.1.15",
        "10.10.1.20", "10.10.1.250", "10.10.1.251", "10.10.1.252", "10.10.1.253",
    ]  # fmt: skip
    assert pool.subnet_of(ipaddress.ip_address("10.10.1.254")) is None  # the gateway
    assert pool.subnet_of(ipaddress.ip_address("10.10.1.1")) is None  # outside the ranges


def test_dual_stack_and_a_large_ipv6_subnet_cost_nothing_to_count():
    pool = parse_pool({"name": "ds", "subnets": [{"subnet": "fd00:10::/64"}, {"subnet": "10.0.0.0/16"}]}, "p")
    assert pool.families == ("ipv4", "ipv6")  # IPv4 first, whatever the order written
    assert pool.size("ipv6") == 2**64 - 2  # no broadcast in IPv6: network and gateway only
    assert str(pool.address("ipv6", 0)) == "fd00:10::2"
    assert str(pool.address("ipv6", 2**64 - 3)) == "fd00:10::ffff:ffff:ffff:ffff"
    assert pool.cidr(ipaddress.ip_address("fd00:10::2")) == "fd00:10::2/64"


def test_several_subnets_of_one_family_are_used_in_order():
    pool = parse_pool({"name": "two", "subnets": [{"subnet": "10.0.0.0/30"}, {"subnet": "10.0.1.0/30"}]}, "p")
    # a /30 keeps one address once its network, gateway and broadcast are taken out
    assert addresses(pool, "ipv4") == ["10.0.0.2", "10.0.1.2"]


@pytest.mark.parametrize(
    ("pool", "field", "words"),
    [
        ([], "addressPool", "must be an object"),
        ({"name": "Lan", "subnets": [{"subnet": "10.0.0.0/24"}]}, "addressPool.name", "DNS label"),
        ({"name": "x" * 41, "subnets": [{"subnet": "10.0.0.0/24"}]}, "addressPool.name", "at most 40"),
        ({"name": "lan", "subnets": []}, "addressPool.subnets", "1 to 8"),
        ({"name": "lan", "subnets": [{"subnet": "10.0.0.1/24"}]}, "addressPool.subnets[0].subnet", "CIDR"),
        ({"name": "lan", "subnets": [{"subnet": "10.0.0.0/31"}]}, "addressPool.subnets[0].subnet", "too small"),
        ({"name": "lan", "subnets": [{"subnet": "10.0.0.0/24", "gateway": "10.0.1.1"}]}, "addressPool.subnets[0].gateway", "not in"),
        (
            {"name": "lan", "subnets": [{"subnet": "10.0.0.0/24", "ranges": [{"start": "10.0.0.9", "end": "10.0.0.3"}]}]},
            "addressPool.subnets[0].ranges[0].end",
            "comes before",
        ),
        ({"name": "lan", "subnets": [{"subnet": "10.0.0.0/24", "exclude": ["10.9.0.0/24"]}]}, "addressPool.subnets[0].exclude[0]", "not inside"),
        ({"name": "lan", "subnets": [{"subnet": "10.0.0.0/24"}, {"subnet": "10.0.0.128/25"}]}, "addressPool.subnets[1].subnet", "overlaps"),
        ({"name": "lan", "subnets": [{"subnet": "10.0.0.0/24", "rangez": []}]}, "addressPool.subnets[0].rangez", "unknown field"),
        ({"name": "lan", "subnets": [{"subnet": "10.0.0.0/30", "exclude": ["10.0.0.0/30"]}]}, "addressPool.subnets[0]", "no address"),
    ],
)  # fmt: skip
def test_a_bad_pool_names_its_field(pool, field, words):
    with pytest.raises(ParameterError) as caught:
        parse_pool(pool, "addressPool")
    assert caught.value.field == field
    assert words in caught.value.reason


def test_a_pool_parsed_lately_is_the_same_pool_and_a_refusal_names_each_caller_s_field():
    """The last pools parsed are kept by their exact JSON text (a DeviceClass's pool comes with
    every claim of the class, checked then assigned); a bad one is refused each time, with the
    field of that call, and a pool differing in one value is parsed apart."""
    value = {"name": "kept", "subnets": [{"subnet": "10.8.0.0/24", "exclude": ["10.8.0.9"]}]}
    first = parse_pool(value, "addressPool")
    again = parse_pool(
        {"name": "kept", "subnets": [{"subnet": "10.8.0.0/24", "exclude": ["10.8.0.9"]}]}, "p.addressPool"
    )
    assert again is first
    other = parse_pool(
        {"name": "kept", "subnets": [{"subnet": "10.8.0.0/24", "exclude": ["10.8.0.10"]}]}, "addressPool"
    )
    assert other is not first and addresses(other, "ipv4") != addresses(first, "ipv4")
    bad = {"name": "kept", "subnets": [{"subnet": "10.8.0.0/24", "gateway": "10.9.0.1"}]}
    for field in ("addressPool", "config[1].parameters.addressPool"):
        with pytest.raises(ParameterError) as caught:
            parse_pool(bad, field)
        assert caught.value.field == f"{field}.subnets[0].gateway"


def test_the_pools_kept_are_bounded():
    from dracni.pools.model import PARSED_POOLS_CACHED, _parsed

    for i in range(PARSED_POOLS_CACHED + 10):
        parse_pool({"name": f"p{i}", "subnets": [{"subnet": "10.7.0.0/24"}]}, "addressPool")
    assert len(_parsed) == PARSED_POOLS_CACHED


def network(ipam):
    return {
        "addressPool": {"name": "lan", "subnets": [{"subnet": "10.0.0.0/24"}]},
        "config": {"name": "n", "plugins": [{"type": "macvlan", **({"ipam": ipam} if ipam else {})}]},
    }


@pytest.mark.parametrize("ipam", [{"type": "host-local", "ranges": [[{"subnet": "10.0.0.0/24"}]]}, {"type": "static"}])
def test_a_pool_network_needs_an_ipam_that_takes_requested_addresses(ipam):
    assert check_pool_network(network(ipam), "parameters").name == "lan"


@pytest.mark.parametrize("ipam", [None, {"type": "dhcp"}])
def test_a_pool_network_without_such_an_ipam_is_refused(ipam):
    with pytest.raises(ParameterError) as caught:
        check_pool_network(network(ipam), "parameters")
    assert caught.value.field == "parameters.addressPool"
    assert "host-local or static" in caught.value.reason
