"""CNI spec versions: parsing, exact-match acceptance, negotiation and result conversion.

Conversion rules (docs/contracts.md section 1): the internal form is 1.x; 1.0.0 <-> 1.1.0 changes only
the version string; going to 0.3.0/0.3.1/0.4.0 adds ``ips[].version`` (derived from the address
family) and drops the 1.1-only fields (interfaces socketPath/pciID, routes
mtu/advmss/priority/table/scope); coming up from 0.x drops ``ips[].version``.
"""

from __future__ import annotations

import copy
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dracni.cni.errors import INCOMPATIBLE_VERSION, CNIError
from dracni.cni.versions import (
    LATEST,
    SUPPORTED_VERSIONS,
    at_least,
    best_common_version,
    convert,
    from_current,
    parse_version,
    require_supported,
    to_current,
)

OLD = ["0.3.0", "0.3.1", "0.4.0"]
NEW = ["1.0.0", "1.1.0"]
ALL = OLD + NEW
IFACE_1_1 = ("socketPath", "pciID")
ROUTE_1_1 = ("mtu", "advmss", "priority", "table", "scope")


def current_result(version="1.1.0") -> dict:
    """A 1.x result using every field, the 1.1-only ones included."""
    return {
        "cniVersion": version,
        "interfaces": [
            {
                "name": "net1",
                "mac": "0a:58:0a:00:00:05",
                "mtu": 9000,
                "sandbox": "/var/run/netns/p",
                "socketPath": "/run/vhost/net1.sock",
                "pciID": "0000:3b:00.2",
            },
            {"name": "host-veth", "mac": "0a:58:0a:00:00:06"},
        ],
        "ips": [
            {"address": "10.0.0.5/24", "gateway": "10.0.0.1", "interface": 0},
            {"address": "fd00::5/64", "gateway": "fd00::1", "interface": 0},
            {"address": "::ffff:10.0.0.9/128"},
        ],
        "routes": [
            {
                "dst": "0.0.0.0/0",
                "gw": "10.0.0.1",
                "mtu": 1400,
                "advmss": 1360,
                "priority": 100,
                "table": 10,
                "scope": 0,
            },
            {"dst": "fd00::/8"},
        ],
        "dns": {"nameservers": ["10.96.0.10"], "domain": "cluster.local", "search": ["svc"], "options": ["ndots:5"]},
    }


def old_result(version="0.4.0") -> dict:
    return {
        "cniVersion": version,
        "interfaces": [{"name": "eth0", "mac": "0a:58:0a:00:00:05", "sandbox": "/var/run/netns/p"}],
        "ips": [
            {"version": "4", "address": "10.0.0.5/24", "gateway": "10.0.0.1", "interface": 0},
            {"version": "6", "address": "fd00::5/64", "interface": 0},
        ],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}],
        "dns": {"nameservers": ["10.96.0.10"]},
    }


def normalize(result: dict) -> dict:
    """Absent and empty interfaces/ips/routes lists mean the same."""
    return {k: v for k, v in result.items() if not (k in ("interfaces", "ips", "routes") and v == [])}


def strip_1_1(result: dict) -> dict:
    out = copy.deepcopy(result)
    for iface in out.get("interfaces", []):
        for k in IFACE_1_1:
            iface.pop(k, None)
    for route in out.get("routes", []):
        for k in ROUTE_1_1:
            route.pop(k, None)
    return out


# -- constants, parse_version, at_least ------------------------------------------------------------


def test_supported_versions_and_latest():
    assert SUPPORTED_VERSIONS == ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
    assert LATEST == "1.1.0"


@pytest.mark.parametrize(
    "text,expected", [("0.3.0", (0, 3, 0)), ("1.1.0", (1, 1, 0)), ("10.20.30", (10, 20, 30)), ("01.0.0", (1, 0, 0))]
)
def test_parse_version(text, expected):
    assert parse_version(text) == expected


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "1",
        "1.0",
        "1.0.0.0",
        "a.b.c",
        "1.0.x",
        "1..0",
        " 1.0.0",
        "1.0.0 ",
        "-1.0.0",
        "+1.0.0",
        "v1.0.0",
        "1.0.0-rc1",
        "1,0,0",
        ".1.0",
    ],
)
def test_parse_version_rejects_malformed_strings(bad):
    with pytest.raises(ValueError, match="invalid version"):
        parse_version(bad)


@pytest.mark.parametrize("bad", [None, 1, 1.0, (1, 0, 0), ["1", "0", "0"], b"1.0.0", {"v": "1.0.0"}])
def test_parse_version_rejects_non_strings(bad):
    with pytest.raises(ValueError, match="must be a string"):
        parse_version(bad)


def test_at_least_orders_numerically():
    assert at_least("0.4.0", "0.4.0")
    assert at_least("1.0.0", "0.4.0")
    assert not at_least("0.3.1", "0.4.0")
    assert at_least("0.10.0", "0.9.0")  # numeric, not lexicographic
    assert not at_least("1.0.0", "1.1.0")


def test_supported_versions_are_sorted():
    assert sorted(SUPPORTED_VERSIONS, key=parse_version) == list(SUPPORTED_VERSIONS)


# -- require_supported: exact match only -------------------------------------------------------------


@pytest.mark.parametrize("version", ALL)
def test_require_supported_accepts_exact_versions(version):
    assert require_supported(version) == version


@pytest.mark.parametrize(
    "bad",
    [
        "1.0",
        "1",
        "1.1",
        "0.4",
        "1.0.0 ",
        " 1.0.0",
        "v1.0.0",
        "1.0.0.0",
        "01.0.0",
        "0.1.0",
        "0.2.0",
        "1.2.0",
        "2.0.0",
        "",
        "1.0.0\n",
        None,
        1,
        1.0,
        ["1.0.0"],
        {"cniVersion": "1.0.0"},
    ],
)
def test_require_supported_rejects_anything_else_with_code_1(bad):
    with pytest.raises(CNIError) as info:
        require_supported(bad)
    assert info.value.code == INCOMPATIBLE_VERSION == 1
    assert "cniVersion" in info.value.msg and repr(bad) in info.value.msg
    assert all(v in info.value.details for v in ALL)


def test_require_supported_names_the_field():
    with pytest.raises(CNIError) as info:
        require_supported("0.2.0", "prevResult.cniVersion")
    assert info.value.msg.startswith("incompatible CNI versions: prevResult.cniVersion '0.2.0'")


# -- best_common_version --------------------------------------------------------------------------------


DEBIAN_BOOKWORM_PLUGIN = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"]


@pytest.mark.parametrize(
    "theirs,cap,expected",
    [
        (DEBIAN_BOOKWORM_PLUGIN, "1.1.0", "1.0.0"),
        (DEBIAN_BOOKWORM_PLUGIN, "0.4.0", "0.4.0"),
        (DEBIAN_BOOKWORM_PLUGIN, "0.3.1", "0.3.1"),
        (DEBIAN_BOOKWORM_PLUGIN, "0.3.0", "0.3.0"),
        (ALL, "1.1.0", "1.1.0"),
        (list(reversed(ALL)), "1.1.0", "1.1.0"),  # order does not matter
        (["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"], "1.0.0", "1.0.0"),
        (["0.4.0", "1.1.0"], "1.0.0", "0.4.0"),  # never above the cap
        (["1.1.0"], "1.0.0", None),
        (["0.1.0", "0.2.0"], "1.1.0", None),  # nothing in common
        ([], "1.1.0", None),
        (["1.0", "x", "", "1.0.0.0", "0.4.0"], "1.1.0", "0.4.0"),  # garbage ignored
        (["2.0.0", "1.2.0"], "1.1.0", None),  # newer than us
        (["1.0.0", "1.0.0"], "1.1.0", "1.0.0"),
    ],
)
def test_best_common_version(theirs, cap, expected):
    assert best_common_version(theirs, cap) == expected


def test_best_common_version_default_cap_is_latest():
    assert best_common_version(["1.1.0", "1.0.0"]) == "1.1.0"


def test_best_common_version_ignores_non_string_entries():
    assert best_common_version([1, None, "0.3.1"], "1.1.0") == "0.3.1"  # type: ignore[list-item]


# -- to_current --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", OLD)
def test_to_current_from_0x_drops_ip_versions(version):
    old = old_result(version)
    before = copy.deepcopy(old)
    cur = to_current(old)
    assert old == before  # input untouched
    assert cur["cniVersion"] in NEW  # the internal form is 1.x
    assert cur["ips"] == [
        {"address": "10.0.0.5/24", "gateway": "10.0.0.1", "interface": 0},
        {"address": "fd00::5/64", "interface": 0},
    ]
    assert cur["interfaces"] == old["interfaces"] and cur["routes"] == old["routes"] and cur["dns"] == old["dns"]


@pytest.mark.parametrize("version", NEW)
def test_to_current_from_1x_changes_nothing_but_the_version(version):
    res = current_result(version)
    cur = to_current(res)
    assert cur["cniVersion"] in NEW
    assert dict(cur, cniVersion=version) == res


def test_to_current_uses_the_explicit_version_over_the_results():
    res = dict(old_result("0.4.0"), cniVersion="1.0.0")
    assert all("version" not in ip for ip in to_current(res, "0.4.0")["ips"])
    assert all("version" in ip for ip in to_current(res)["ips"])  # 1.0.0 leaves ips alone


def test_to_current_without_version_assumes_latest():
    cur = to_current({"ips": [{"address": "10.0.0.5/24", "version": "4"}]})
    assert cur["cniVersion"] in NEW
    assert cur["ips"] == [{"address": "10.0.0.5/24", "version": "4"}]  # treated as 1.x: left alone


def test_to_current_of_0x_result_without_ips():
    cur = to_current({"cniVersion": "0.4.0", "dns": {}})
    assert cur["cniVersion"] in NEW
    assert normalize(cur) == {"cniVersion": cur["cniVersion"], "dns": {}}


@pytest.mark.parametrize("bad", ["0.2.0", "1.0", "2.0.0"])
def test_to_current_rejects_unsupported_versions_with_code_1(bad):
    with pytest.raises(CNIError) as info:
        to_current({"cniVersion": bad})
    assert info.value.code == INCOMPATIBLE_VERSION
    assert repr(bad) in info.value.msg


# -- from_current ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", OLD)
def test_from_current_to_0x(version):
    cur = current_result()
    before = copy.deepcopy(cur)
    out = from_current(cur, version)
    assert cur == before  # input untouched
    assert out["cniVersion"] == version
    assert out["interfaces"] == [
        {"name": "net1", "mac": "0a:58:0a:00:00:05", "mtu": 9000, "sandbox": "/var/run/netns/p"},
        {"name": "host-veth", "mac": "0a:58:0a:00:00:06"},
    ]
    assert out["ips"] == [
        {"address": "10.0.0.5/24", "gateway": "10.0.0.1", "interface": 0, "version": "4"},
        {"address": "fd00::5/64", "gateway": "fd00::1", "interface": 0, "version": "6"},
        {"address": "::ffff:10.0.0.9/128", "version": "6"},
    ]
    assert out["routes"] == [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}, {"dst": "fd00::/8"}]
    assert out["dns"] == cur["dns"]


@pytest.mark.parametrize("version", NEW)
def test_from_current_to_1x_changes_only_the_version(version):
    cur = current_result()
    assert from_current(cur, version) == dict(cur, cniVersion=version)


@pytest.mark.parametrize("version", OLD)
def test_from_current_to_0x_omits_empty_lists_and_keeps_other_keys(version):
    out = from_current({"cniVersion": LATEST, "interfaces": [], "dns": {}, "x-extra": 1}, version)
    assert out == {"cniVersion": version, "dns": {}, "x-extra": 1}


@pytest.mark.parametrize("version", OLD)
def test_from_current_derives_ip_version_from_the_address(version):
    cur = {
        "cniVersion": LATEST,
        "ips": [{"address": "fd00::1/64", "version": "4"}, {"address": "192.168.0.1/32", "version": "6"}],
    }
    assert [ip["version"] for ip in from_current(cur, version)["ips"]] == ["6", "4"]


# -- convert: every pair ---------------------------------------------------------------------------------


@pytest.mark.parametrize("src,dst", list(itertools.product(ALL, ALL)))
def test_convert_between_every_pair(src, dst):
    res = current_result(src) if src in NEW else old_result(src)
    out = convert(res, dst)
    assert out["cniVersion"] == dst
    has_ip_version = ["version" in ip for ip in out["ips"]]
    assert has_ip_version == [dst in OLD] * len(out["ips"])
    keeps_1_1 = src in NEW and dst in NEW
    assert any(k in out["interfaces"][0] for k in IFACE_1_1) == keeps_1_1
    assert any(k in out["routes"][0] for k in ROUTE_1_1) == keeps_1_1
    assert out["dns"] == res["dns"]
    assert [ip["address"] for ip in out["ips"]] == [ip["address"] for ip in res["ips"]]


@pytest.mark.parametrize("a,b", list(itertools.product(NEW, NEW)))
def test_round_trip_within_1x_is_lossless(a, b):
    res = current_result(a)
    assert convert(convert(res, b), a) == res


@pytest.mark.parametrize("a,b", list(itertools.product(OLD, ALL)))
def test_round_trip_from_0x_is_lossless(a, b):
    res = old_result(a)
    assert convert(convert(res, b), a) == res


@pytest.mark.parametrize("a,b", list(itertools.product(NEW, OLD)))
def test_round_trip_1x_through_0x_loses_only_the_1_1_fields(a, b):
    res = current_result(a)
    assert convert(convert(res, b), a) == strip_1_1(res)


# -- property: conversions on generated results ------------------------------------------------------------

_ipv4 = st.tuples(*[st.integers(0, 255)] * 4, st.integers(0, 32)).map(lambda t: "%d.%d.%d.%d/%d" % t)
_ipv6 = st.tuples(st.integers(0, 0xFFFF), st.integers(0, 0xFFFF), st.integers(0, 128)).map(
    lambda t: "fd%02x:%x::%x/%d" % (t[0] & 0xFF, t[1], t[0], t[2])
)
_name = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=15)
_ip = st.fixed_dictionaries(
    {"address": st.one_of(_ipv4, _ipv6)},
    optional={"gateway": st.one_of(_ipv4, _ipv6).map(lambda a: a.split("/")[0]), "interface": st.integers(0, 3)},
)
_iface = st.fixed_dictionaries(
    {"name": _name},
    optional={
        "mac": st.just("0a:58:0a:00:00:05"),
        "mtu": st.integers(68, 9000),
        "sandbox": st.just("/var/run/netns/p"),
        "socketPath": st.just("/run/x.sock"),
        "pciID": st.just("0000:00:1f.6"),
    },
)
_route = st.fixed_dictionaries(
    {"dst": st.one_of(_ipv4, _ipv6)},
    optional={
        "gw": st.just("10.0.0.1"),
        "mtu": st.integers(68, 9000),
        "advmss": st.integers(0, 9000),
        "priority": st.integers(0, 1000),
        "table": st.integers(0, 255),
        "scope": st.integers(0, 255),
    },
)
_results = st.fixed_dictionaries(
    {"cniVersion": st.sampled_from(NEW)},
    optional={
        "interfaces": st.lists(_iface, min_size=1, max_size=3),
        "ips": st.lists(_ip, min_size=1, max_size=3),
        "routes": st.lists(_route, min_size=1, max_size=3),
        "dns": st.fixed_dictionaries({}, optional={"nameservers": st.lists(_ipv4, max_size=2)}),
    },
)


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(res=_results, old=st.sampled_from(OLD), new=st.sampled_from(NEW))
def test_conversion_properties(res, old, new):
    down = convert(res, old)
    assert down["cniVersion"] == old
    for ip, src in zip(down.get("ips", []), res.get("ips", []), strict=True):
        assert ip == dict(src, version="6" if ":" in src["address"] else "4")
    assert normalize(convert(down, new)) == dict(strip_1_1(res), cniVersion=new)
    assert convert(convert(res, "1.0.0" if new == "1.1.0" else "1.1.0"), new) == dict(res, cniVersion=new)
    assert convert(down, old) == down  # 0.x -> 0.x is stable
