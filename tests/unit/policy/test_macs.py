"""MAC ownership (rule macOwnership): Go's ParseMAC spellings, the canonical form in the
prepared record, the I/G and U/L bits, and the administrator's allowedMACPrefixes."""

from __future__ import annotations

import pytest

from dracni.claims.resolve import ClaimError
from dracni.macaddr import canonical_mac, mac_problem, parse_mac, parse_prefix
from dracni.policy.config import TenantPolicy
from tests.policy_cases import CLASS_NETWORK, HOST_LOCAL, attach, plugin
from tests.unit.policy.test_policy import claim, from_claim, from_class, resolve

FULL = TenantPolicy(claim_configs="full")


@pytest.mark.parametrize(
    "text",
    ["02:00:5e:10:00:01", "02-00-5E-10-00-01", "0200.5e10.0001", "02:00:5E:10:00:01", "0200.5E10.0001"],
)
def test_every_parsemac_spelling_has_one_canonical_form(text: str) -> None:
    assert canonical_mac(text) == "02:00:5e:10:00:01"


@pytest.mark.parametrize(
    "text",
    [
        "02:00:5e:10:00",  # 5 bytes
        "02:00-5e:10:00:01",  # mixed separators (ParseMAC: every group ends with s[2])
        "2:00:5e:10:00:01:00",  # a one-digit group
        "0200:5e10:0001",
        "020.05e10.0001.",
        "02:00:5e:10:00:0g",
        " 02:00:5e:10:00:01",
        "02:00:5e:10:00:01 ",
        "\ud800\ud800:00:5e:10:00:01",  # a lone surrogate (never reaches the record)
        "０2:00:5e:10:00:01",  # a non-ASCII digit
        "",
        None,
        17,
    ],
)
def test_what_parsemac_refuses_is_no_mac(text: object) -> None:
    assert canonical_mac(text) is None


def test_parsemac_reads_eui64_but_a_claim_mac_is_six_bytes() -> None:
    eui64 = "02:00:5e:10:00:01:00:02"
    assert parse_mac(eui64) == bytes.fromhex("02005e1000010002")
    assert canonical_mac(eui64) is None


def test_the_bits() -> None:
    assert mac_problem("02:00:5e:10:00:01", []) is None  # locally administered unicast
    assert "multicast" in (mac_problem("03:00:5e:10:00:01", []) or "")
    assert "multicast" in (mac_problem("01:00:5e:00:00:01", ["01:00:5e"]) or "")  # a prefix never allows multicast
    assert "globally administered" in (mac_problem("00:16:3e:00:00:01", []) or "")
    assert mac_problem("00:16:3e:00:00:01", ["00:16:3e"]) is None
    assert "zero" in (mac_problem("00:00:00:00:00:00", ["00"]) or "")


def test_prefixes() -> None:
    assert parse_prefix("00-16-3E") == "00:16:3e"
    assert parse_prefix("00") == "00"
    assert parse_prefix("00:16:3e:00:00:00:00") is None
    assert parse_prefix("0016.3e") is None


def knobs_mac(mac: str) -> dict:
    return from_claim(attach(network="macvlan-eth1", runtimeConfig={"mac": mac}))


def test_profile_mac_is_recorded_in_canonical_form() -> None:
    spec = resolve(claim(from_class(CLASS_NETWORK), knobs_mac("0200.5E10.0001")))["devices"][0]
    assert spec["runtimeConfig"]["mac"] == "02:00:5e:10:00:01"


@pytest.mark.parametrize(
    ("mac", "says"),
    [
        ("00-16-3E-00-00-01", "globally administered"),
        ("0016.3e00.0001", "globally administered"),
        ("33:33:00:00:00:01", "multicast"),
        ("ff:ff:ff:ff:ff:ff", "multicast"),
    ],
)
def test_profile_mac_must_be_unicast_and_local(mac: str, says: str) -> None:
    with pytest.raises(ClaimError) as exc:
        resolve(claim(from_class(CLASS_NETWORK), knobs_mac(mac)))
    assert exc.value.field == "parameters.runtimeConfig.mac"
    assert says in str(exc.value) and "rule macOwnership" in str(exc.value)
    if says == "globally administered":
        assert "allowedMACPrefixes" in str(exc.value)


def test_profile_mac_that_is_not_a_mac_names_the_field() -> None:
    with pytest.raises(ClaimError) as exc:
        resolve(claim(from_class(CLASS_NETWORK), knobs_mac("02:00:00:00:zz:01")))
    assert exc.value.field == "parameters.runtimeConfig.mac"
    assert "not a 6-byte MAC address" in str(exc.value)
    # text that is not Unicode at all is refused where it enters, before any MAC rule
    with pytest.raises(ClaimError) as exc:
        resolve(claim(from_class(CLASS_NETWORK), knobs_mac("\ud800")))
    assert exc.value.field == "parameters.runtimeConfig.mac"
    assert "lone surrogate" in str(exc.value)


def test_the_administrator_allows_a_vendor_prefix_per_network() -> None:
    network = {**CLASS_NETWORK, "allowedMACPrefixes": ["00-16-3E"]}
    spec = resolve(claim(from_class(network), knobs_mac("00:16:3E:00:00:01")))["devices"][0]
    assert spec["runtimeConfig"]["mac"] == "00:16:3e:00:00:01"
    with pytest.raises(ClaimError, match=r"this network allows 00:16:3e"):
        resolve(claim(from_class(network), knobs_mac("00:50:56:00:00:01")))


def test_a_claim_cannot_allow_prefixes() -> None:
    own = attach(network="macvlan-eth1", allowedMACPrefixes=["00:16:3e"])
    with pytest.raises(ClaimError) as exc:
        resolve(claim(from_class(CLASS_NETWORK), from_claim(own)))
    assert exc.value.field == "parameters.allowedMACPrefixes" and "rule macOwnership" in str(exc.value)
    with pytest.raises(ClaimError, match="rule macOwnership"):
        resolve(claim(from_claim(attach(config=plugin("macvlan", ipam=HOST_LOCAL), allowedMACPrefixes=["00"]))), FULL)


def test_a_class_config_mac_is_the_administrators() -> None:
    network = {**CLASS_NETWORK, "runtimeConfig": {"mac": "00:16:3e:00:00:09"}}
    spec = resolve(claim(from_class(network)))["devices"][0]
    assert spec["runtimeConfig"]["mac"] == "00:16:3e:00:00:09"


def test_full_config_macs_are_checked_and_normalised() -> None:
    chain = {
        "cniVersion": "1.0.0",
        "name": "own",
        "plugins": [
            {"type": "macvlan", "mac": "0200.0000.0007", "ipam": HOST_LOCAL},
            {"type": "tuning", "mac": "02-00-00-00-00-08", "args": {"cni": {"mac": "02:00:00:00:00:0A"}}},
        ],
    }
    own = attach(config=chain, runtimeConfig={"mac": "02-00-00-00-00-09"})
    spec = resolve(
        claim(from_claim(own)), TenantPolicy(claim_configs="full", plugin_types=frozenset({"macvlan", "tuning"}))
    )["devices"][0]
    plugins = spec["config"]["plugins"]
    assert plugins[0]["mac"] == "02:00:00:00:00:07"
    assert plugins[1]["mac"] == "02:00:00:00:00:08"
    assert plugins[1]["args"]["cni"]["mac"] == "02:00:00:00:00:0a"
    assert spec["runtimeConfig"]["mac"] == "02:00:00:00:00:09"


def test_a_declared_mac_capability_is_no_mac() -> None:
    """``capabilities: {"mac": true}`` says the plugin takes a MAC from the runtime: it is not one."""
    own = attach(
        config=plugin("macvlan", ipam=HOST_LOCAL, capabilities={"mac": True}),
        runtimeConfig={"mac": "02:00:00:00:00:0b"},
    )
    spec = resolve(claim(from_claim(own)), FULL)["devices"][0]
    assert spec["config"]["plugins"][0]["capabilities"] == {"mac": True}
    assert spec["runtimeConfig"]["mac"] == "02:00:00:00:00:0b"


@pytest.mark.parametrize(
    ("own", "field"),
    [
        (attach(config=plugin("tuning", mac="00:11:22:33:44:55")), "parameters.config.mac"),
        (attach(config=plugin("tuning", args={"cni": {"mac": "01:00:5e:00:00:01"}})), "parameters.config.args.cni.mac"),
        (
            attach(config=plugin("macvlan", ipam=HOST_LOCAL), runtimeConfig={"mac": "00-11-22-33-44-55"}),
            "parameters.runtimeConfig.mac",
        ),
    ],
)
def test_full_config_vendor_or_group_macs_are_refused(own: dict, field: str) -> None:
    policy = TenantPolicy(claim_configs="full", plugin_types=frozenset({"macvlan", "tuning"}))
    with pytest.raises(ClaimError) as exc:
        resolve(claim(from_claim(own)), policy)
    assert exc.value.field == field and "rule macOwnership" in str(exc.value)
