"""ResourceSlice building (``dracni.inventory.slices``): device names, attributes, splitting, ownership,
stable output, comparison and the v1beta1 form.

``validate_slice`` below re-implements, independently of the code under test, the API server's
rules for a resource.k8s.io/v1 ResourceSlice that docs/contracts.md section 4 lists (and
k8s.io/kubernetes pkg/apis/resource/validation spells out): every built slice must pass it, and
it is itself checked against hand-made invalid slices so it cannot pass vacuously.
"""

from __future__ import annotations

import copy
import random
import re
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dracni.apirules.validation import SLICE_MAX_DEVICES_WITH_TAINTS
from dracni.inventory.nics import Nic
from dracni.inventory.slices import (
    API_VERSION,
    LABEL_DRIVER,
    LABEL_NODE,
    LINK_DOWN,
    LINK_GONE,
    MAX_NUMA_NODES,
    NUMA_NODE,
    PCI_BUS_ID,
    PCIE_ROOT,
    build_slices,
    device_for,
    device_name,
    label_value,
    link_taint,
    slice_name,
    slices_equal,
    unique_device_names,
)

# -- an independent validator ---------------------------------------------------------------------

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
    r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$"
)
INT64 = (-(2**63), 2**63 - 1)


def is_dns_label(v) -> bool:
    return isinstance(v, str) and len(v) <= 63 and bool(DNS_LABEL.match(v))


def is_dns_subdomain(v) -> bool:
    return isinstance(v, str) and 0 < len(v) <= 253 and all(DNS_LABEL.match(p) for p in v.split("."))


def qualified_name_errors(name: str) -> list[str]:
    parts = name.split("/")
    if len(parts) == 1:
        domain, ident = None, parts[0]
    elif len(parts) == 2:
        domain, ident = parts
    else:
        return [f"{name}: more than one slash"]
    errs = []
    if domain is not None and not (len(domain) <= 63 and is_dns_subdomain(domain)):
        errs.append(f"{name}: domain not a DNS subdomain <= 63")
    if not (0 < len(ident) <= 32 and C_IDENTIFIER.match(ident)):
        errs.append(f"{name}: not a C identifier <= 32")
    return errs


def label_errors(labels: dict) -> list[str]:
    errs = []
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if prefix and not is_dns_subdomain(prefix):
            errs.append(f"label key {key}: bad prefix")
        if not (len(name) <= 63 and LABEL_NAME.match(name)):
            errs.append(f"label key {key}: bad name")
        if not (isinstance(value, str) and len(value) <= 63 and LABEL_VALUE.match(value)):
            errs.append(f"label {key}: bad value {value!r}")
    return errs


def attribute_errors(key: str, value) -> list[str]:
    errs = qualified_name_errors(key)
    if not isinstance(value, dict) or len(value) != 1:
        return errs + [f"{key}: exactly one of int/bool/string/version required, got {value!r}"]
    ((kind, v),) = value.items()
    if kind == "int":
        if isinstance(v, bool) or not isinstance(v, int) or not INT64[0] <= v <= INT64[1]:
            errs.append(f"{key}: int value {v!r}")
    elif kind == "bool":
        if not isinstance(v, bool):
            errs.append(f"{key}: bool value {v!r}")
    elif kind == "string":
        if not isinstance(v, str) or len(v.encode()) > 64:
            errs.append(f"{key}: string value {v!r} not a string <= 64 bytes")
    elif kind == "version":
        if not isinstance(v, str) or len(v) > 64 or not SEMVER.match(v):
            errs.append(f"{key}: version value {v!r}")
    else:
        errs.append(f"{key}: unknown value type {kind}")
    return errs


def validate_slice(obj: dict) -> list[str]:
    """Every way ``obj`` breaks the v1 ResourceSlice rules we rely on; [] when valid."""
    errs: list[str] = []
    if obj.get("apiVersion") != "resource.k8s.io/v1":
        errs.append("apiVersion")
    if obj.get("kind") != "ResourceSlice":
        errs.append("kind")
    meta = obj.get("metadata") or {}
    name, gen_name = meta.get("name"), meta.get("generateName")
    if not name and not gen_name:
        errs.append("metadata: name or generateName required")
    if name and not is_dns_subdomain(name):
        errs.append(f"metadata.name {name!r}: not a DNS subdomain <= 253")
    errs += label_errors(meta.get("labels") or {})
    for ref in meta.get("ownerReferences") or []:
        if not (ref.get("apiVersion") and ref.get("kind") and ref.get("name") and ref.get("uid")):
            errs.append(f"ownerReference incomplete: {ref}")
    spec = obj.get("spec") or {}
    driver = spec.get("driver")
    if not (isinstance(driver, str) and len(driver) <= 63 and is_dns_subdomain(driver)):
        errs.append(f"spec.driver {driver!r}")
    pool = spec.get("pool") or {}
    pool_name = pool.get("name")
    if not (
        isinstance(pool_name, str)
        and 0 < len(pool_name) <= 253
        and all(is_dns_subdomain(p) for p in pool_name.split("/"))
    ):
        errs.append(f"spec.pool.name {pool_name!r}")
    gen, count = pool.get("generation"), pool.get("resourceSliceCount")
    if isinstance(gen, bool) or not isinstance(gen, int) or gen < 0:
        errs.append(f"spec.pool.generation {gen!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
        errs.append(f"spec.pool.resourceSliceCount {count!r}")
    selection = [k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k)]
    if len(selection) != 1:
        errs.append(f"exactly one node selection field required, got {selection}")
    if "nodeName" in spec and not is_dns_subdomain(spec["nodeName"]):
        errs.append("spec.nodeName")
    devices = spec.get("devices") or []
    if len(devices) > 128:
        errs.append(f"{len(devices)} devices > 128")
    seen = set()
    for device in devices:
        dname = device.get("name")
        if not is_dns_label(dname):
            errs.append(f"device name {dname!r}: not a DNS label")
        if dname in seen:
            errs.append(f"device name {dname!r}: duplicate")
        seen.add(dname)
        if "basic" in device:
            errs.append(f"device {dname}: v1beta1 'basic' in a v1 slice")
        attrs, capacity = device.get("attributes") or {}, device.get("capacity") or {}
        if len(attrs) + len(capacity) > 32:
            errs.append(f"device {dname}: {len(attrs) + len(capacity)} attributes+capacities > 32")
        for key, value in attrs.items():
            errs += [f"device {dname}: {e}" for e in attribute_errors(key, value)]
    return errs


def test_validator_catches_violations():
    good = build_slices(
        driver="dracni.io",
        node_name="n1",
        node_uid=None,
        nics=[Nic("eth0", 2, mac="02:00:00:00:00:01", mtu=1500)],
        generation=1,
    )[0]
    assert validate_slice(good) == []

    def broken(mutate):
        s = copy.deepcopy(good)
        mutate(s)
        return validate_slice(s)

    dev = lambda s: s["spec"]["devices"][0]  # noqa: E731
    attrs = lambda s: dev(s)["attributes"]  # noqa: E731
    assert broken(lambda s: dev(s).update(name="Eth0"))
    assert broken(lambda s: dev(s).update(name="eth0-"))
    assert broken(lambda s: dev(s).update(name="x" * 64))
    assert broken(lambda s: s["spec"]["devices"].append(copy.deepcopy(dev(s))))
    assert broken(lambda s: attrs(s).update({"dracni.io/x": {"string": "a", "int": 1}}))
    assert broken(lambda s: attrs(s).update({"dracni.io/x": {}}))
    assert broken(lambda s: attrs(s).update({"dracni.io/x": {"string": "é" * 33}}))
    assert broken(lambda s: attrs(s).update({"dracni.io/x": {"int": True}}))
    assert broken(lambda s: attrs(s).update({"dracni.io/x": {"int": 2**63}}))
    assert broken(lambda s: attrs(s).update({"dracni.io/x": {"version": "1.0"}}))
    assert broken(lambda s: attrs(s).update({"dracni.io/x": {"bool": "true"}}))
    assert broken(lambda s: attrs(s).update({"dracni.io/" + "a" * 33: {"bool": True}}))
    assert broken(lambda s: attrs(s).update({"dracni.io/if-name": {"bool": True}}))
    assert broken(lambda s: attrs(s).update({"a/b/c": {"bool": True}}))
    assert broken(lambda s: attrs(s).update({"Dracni.IO/x": {"bool": True}}))
    assert broken(lambda s: attrs(s).update({f"dracni.io/a{i}": {"int": i} for i in range(30)}))
    assert broken(lambda s: s["spec"].update(devices=[{"name": f"d{i}"} for i in range(129)]))
    assert broken(lambda s: s["spec"]["pool"].update(resourceSliceCount=0))
    assert broken(lambda s: s["spec"]["pool"].update(generation=-1))
    assert broken(lambda s: s["spec"].update(allNodes=True))
    assert broken(lambda s: s["spec"].update(driver="Dracni.io"))
    assert broken(lambda s: s["metadata"].update(name="a_b"))
    assert broken(lambda s: s["metadata"]["labels"].update({LABEL_NODE: "x" * 64}))
    assert broken(lambda s: s.update(apiVersion="resource.k8s.io/v1beta1"))
    assert validate_slice(to_v1beta1(good))  # v1beta1 shape is not a v1 slice


def to_v1beta1(resource_slice: dict) -> dict:
    """``resource_slice`` in the resource.k8s.io/v1beta1 form: each device's fields but ``name``
    under ``basic`` (a form ``slices_equal`` accepts when reading slices back)."""
    out = copy.deepcopy(resource_slice)
    out["apiVersion"] = "resource.k8s.io/v1beta1"
    out["spec"]["devices"] = [
        {"name": d["name"], "basic": {k: v for k, v in d.items() if k != "name"}} for d in out["spec"]["devices"]
    ]
    return out


# -- device names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ifname,expected",
    [
        ("eth0", "eth0"),
        ("ens1f0np0", "ens1f0np0"),
        ("Eth0", "eth0"),
        ("eth0.100", "eth0-100"),
        ("eth_0", "eth-0"),
        ("enp0s31f6", "enp0s31f6"),
        ("-wan-", "wan"),
        ("__", "nic"),
        ("wlp2s0@if3", "wlp2s0-if3"),
        ("x" * 80, "x" * 63),
        ("a" * 62 + ".b", "a" * 62),
        ("éth0", "th0"),
    ],
)
def test_device_name_sanitizes(ifname, expected):
    assert device_name(ifname) == expected
    assert is_dns_label(device_name(ifname))


def test_collisions_are_resolved_deterministically():
    names = ["eth_0", "eth.0", "eth-0", "ETH-0", "eth0"]
    result = unique_device_names(names)
    assert result["eth-0"] == "eth-0"  # the one whose name is already the label keeps it
    assert result["eth0"] == "eth0"
    suffixed = {result[n] for n in ("eth_0", "eth.0", "ETH-0")}
    assert len(suffixed) == 3 and all(re.fullmatch(r"eth-0-[0-9a-f]{6}", s) for s in suffixed)
    assert len(set(result.values())) == len(names)
    for _ in range(10):  # order of the input does not matter
        shuffled = names[:]
        random.shuffle(shuffled)
        assert unique_device_names(shuffled) == result
    # no exact owner: every member is suffixed
    only_lossy = unique_device_names(["eth_0", "eth.0"])
    assert all(v.startswith("eth-0-") for v in only_lossy.values()) and len(set(only_lossy.values())) == 2
    # a lone lossy name keeps its plain label
    assert unique_device_names(["eth_0"]) == {"eth_0": "eth-0"}


def test_suffixed_name_colliding_with_a_real_name():
    lossy = "eth_0"
    first = unique_device_names([lossy, "eth.0"])[lossy]
    # an interface literally named like the suffixed label
    result = unique_device_names([lossy, "eth.0", first])
    assert result[first] == first
    assert result[lossy] != first and is_dns_label(result[lossy])
    assert len(set(result.values())) == 3


def test_long_colliding_names_stay_dns_labels():
    names = ["A" * 70, "a" * 70, "a" * 63 + "_x"]
    result = unique_device_names(names)
    assert len(set(result.values())) == 3
    assert all(is_dns_label(v) for v in result.values())


def test_duplicate_interface_names_rejected():
    with pytest.raises(ValueError, match="eth0"):
        unique_device_names(["eth0", "eth0"])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(alphabet=st.sampled_from("abAB01._-@:éx"), min_size=1, max_size=20), unique=True, max_size=12),
    st.randoms(),
)
def test_unique_names_property(names, rnd):
    result = unique_device_names(names)
    assert set(result) == set(names)
    assert len(set(result.values())) == len(names)
    assert all(is_dns_label(v) for v in result.values())
    shuffled = names[:]
    rnd.shuffle(shuffled)
    assert unique_device_names(shuffled) == result


# -- devices --------------------------------------------------------------------------------------

PF = Nic(
    name="ens1f0",
    index=4,
    mac="3c:fd:fe:00:00:01",
    mtu=9000,
    kind="",
    oper_state="up",
    admin_up=True,
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
VETH = Nic(
    name="veth1", index=9, mac="02:00:00:00:00:09", mtu=1500, kind="veth", oper_state="down", virtual=True, master="br0"
)


def test_device_for_physical_nic():
    d = device_for(PF)
    assert d["name"] == "ens1f0"
    a = d["attributes"]
    assert a == {
        "dracni.io/ifName": {"string": "ens1f0"},
        "dracni.io/mac": {"string": "3c:fd:fe:00:00:01"},
        "dracni.io/mtu": {"int": 9000},
        "dracni.io/kind": {"string": ""},
        "dracni.io/virtual": {"bool": False},
        "dracni.io/sriovVF": {"bool": False},
        "dracni.io/speedMbps": {"int": 25000},
        "dracni.io/numaNode": {"int": 1},
        "dracni.io/sriovTotalVFs": {"int": 64},
        "dracni.io/sriovNumVFs": {"int": 8},
        "dracni.io/kernelDriver": {"string": "ice"},
        "dracni.io/pciVendor": {"string": "0x8086"},
        "dracni.io/pciDevice": {"string": "0x159b"},
        PCI_BUS_ID: {"string": "0000:3b:00.0"},
        PCIE_ROOT: {"string": "pci0000:3a"},
        NUMA_NODE: {"int": 1},
    }
    assert all(attribute_errors(k, v) == [] for k, v in a.items())


def test_device_for_virtual_nic_omits_unknowns():
    a = device_for(VETH)["attributes"]
    assert a["dracni.io/kind"] == {"string": "veth"}
    assert a["dracni.io/virtual"] == {"bool": True}
    assert a["dracni.io/master"] == {"string": "br0"}
    assert "dracni.io/state" not in a and "dracni.io/adminUp" not in a  # the link state is a taint
    for absent in ("speedMbps", "numaNode", "sriovTotalVFs", "sriovNumVFs", "kernelDriver"):
        assert f"dracni.io/{absent}" not in a
    assert PCI_BUS_ID not in a and PCIE_ROOT not in a and NUMA_NODE not in a
    assert "dracni.io/mac" not in device_for(Nic("tun0", 3, kind="tun"))["attributes"]


def test_standard_numa_node_is_a_scalar_within_the_helpers_range():
    """``numa_linux.go GetNUMANodeAttribute``: node numbers 0..1023 only, scalar form (no gate
    needed; the list form would be dropped and refused by a 1.36/1.37 server, gate off)."""
    assert device_for(replace(PF, numa_node=0))["attributes"][NUMA_NODE] == {"int": 0}
    assert device_for(replace(PF, numa_node=MAX_NUMA_NODES - 1))["attributes"][NUMA_NODE] == {"int": 1023}
    beyond = device_for(replace(PF, numa_node=MAX_NUMA_NODES))["attributes"]
    assert NUMA_NODE not in beyond and beyond["dracni.io/numaNode"] == {"int": 1024}


def test_device_for_uses_the_driver_domain_and_given_name():
    d = device_for(PF, domain="net.example.com", name="custom")
    assert d["name"] == "custom"
    assert "net.example.com/ifName" in d["attributes"]
    assert PCI_BUS_ID in d["attributes"]
    assert not [k for k in d["attributes"] if k.startswith("dracni.io/")]


def test_string_values_are_capped_at_64_bytes():
    a = device_for(Nic("x0", 1, kind="k" * 100, driver="é" * 40))["attributes"]
    assert a["dracni.io/kind"] == {"string": "k" * 64}
    assert len(a["dracni.io/kernelDriver"]["string"].encode()) <= 64
    assert a["dracni.io/kernelDriver"]["string"] == "é" * 32


def test_every_attribute_name_is_valid_and_count_limited():
    a = device_for(PF, domain="a" * 63)["attributes"]
    assert len(a) <= 32
    for key, value in a.items():
        assert attribute_errors(key, value) == []


# -- slices ---------------------------------------------------------------------------------------


def many_nics(n: int) -> list[Nic]:
    return [
        Nic(name=f"ens{i}", index=i + 2, mac=f"02:00:00:00:{i // 256:02x}:{i % 256:02x}", mtu=1500) for i in range(n)
    ]


def test_single_slice_shape():
    uid = "0b4f3c2e-6a0d-4f57-9d4e-3d2b1a0c9e8f"
    (s,) = build_slices(driver="dracni.io", node_name="worker-1.example", node_uid=uid, nics=[PF, VETH], generation=7)
    assert validate_slice(s) == []
    assert s["apiVersion"] == API_VERSION and s["kind"] == "ResourceSlice"
    assert s["metadata"]["name"] == "worker-1.example-dracni-io-0"
    assert s["metadata"]["labels"] == {LABEL_DRIVER: "dracni.io", LABEL_NODE: "worker-1.example"}
    assert s["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "worker-1.example", "uid": uid, "controller": True}
    ]
    spec = s["spec"]
    assert spec["driver"] == "dracni.io" and spec["nodeName"] == "worker-1.example"
    assert spec["pool"] == {"name": "worker-1.example", "generation": 7, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == ["ens1f0", "veth1"]


def test_no_owner_reference_without_node_uid():
    (s,) = build_slices(driver="dracni.io", node_name="n1", node_uid=None, nics=[PF], generation=0)
    assert "ownerReferences" not in s["metadata"]
    (s,) = build_slices(driver="dracni.io", node_name="n1", node_uid="", nics=[PF], generation=0)
    assert "ownerReferences" not in s["metadata"]


def test_more_than_128_nics_split_into_slices():
    nics = many_nics(300)
    slices = build_slices(driver="dracni.io", node_name="n1", node_uid="u-1", nics=nics, generation=3)
    assert [len(s["spec"]["devices"]) for s in slices] == [128, 128, 44]
    assert {s["spec"]["pool"]["generation"] for s in slices} == {3}
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {3}
    assert {s["spec"]["pool"]["name"] for s in slices} == {"n1"}
    assert [s["metadata"]["name"] for s in slices] == ["n1-dracni-io-0", "n1-dracni-io-1", "n1-dracni-io-2"]
    names = [d["name"] for s in slices for d in s["spec"]["devices"]]
    assert names == sorted(names) and len(set(names)) == 300
    for s in slices:
        assert validate_slice(s) == []


@pytest.mark.parametrize(
    "n,max_devices,sizes",
    [
        (128, 128, [128]),
        (129, 128, [128, 1]),
        (10, 3, [3, 3, 3, 1]),
        (1, 1, [1]),
        (0, 128, [0]),
    ],
)
def test_slice_counts(n, max_devices, sizes):
    slices = build_slices(
        driver="dracni.io", node_name="n1", node_uid=None, nics=many_nics(n), generation=0, max_devices=max_devices
    )
    assert [len(s["spec"]["devices"]) for s in slices] == sizes
    assert all(s["spec"]["pool"]["resourceSliceCount"] == len(sizes) for s in slices)
    assert all(validate_slice(s) == [] for s in slices)


def test_output_is_stable_under_input_order():
    nics = many_nics(200) + [PF, VETH, Nic("eth_0", 900), Nic("eth.0", 901), Nic("eth-0", 902)]
    first = build_slices(driver="dracni.io", node_name="n1", node_uid="u", nics=nics, generation=1)
    for seed in range(5):
        shuffled = nics[:]
        random.Random(seed).shuffle(shuffled)
        assert build_slices(driver="dracni.io", node_name="n1", node_uid="u", nics=shuffled, generation=1) == first


def test_colliding_interface_names_in_a_slice():
    nics = [Nic("eth_0", 2), Nic("eth.0", 3), Nic("eth-0", 4), Nic("Eth-0", 5)]
    (s,) = build_slices(driver="dracni.io", node_name="n1", node_uid=None, nics=nics, generation=0)
    assert validate_slice(s) == []
    by_if = {d["attributes"]["dracni.io/ifName"]["string"]: d["name"] for d in s["spec"]["devices"]}
    assert by_if["eth-0"] == "eth-0"
    assert len(set(by_if.values())) == 4


def test_custom_driver_name():
    slices = build_slices(driver="net.example.com", node_name="n1", node_uid=None, nics=[PF], generation=0)
    assert validate_slice(slices[0]) == []
    assert slices[0]["metadata"]["name"] == "n1-net-example-com-0"
    assert "net.example.com/ifName" in slices[0]["spec"]["devices"][0]["attributes"]


def test_long_node_names():
    long_a = ("a" * 60 + ".") * 4 + "x" * 8  # 252 characters, a valid node name
    long_b = ("a" * 60 + ".") * 4 + "y" * 8
    assert len(long_a) == 252
    na, nb = slice_name(long_a, "dracni.io", 0), slice_name(long_b, "dracni.io", 0)
    assert is_dns_subdomain(na) and is_dns_subdomain(nb) and na != nb
    assert na.endswith("-dracni-io-0")
    (s,) = build_slices(driver="dracni.io", node_name=long_a, node_uid=None, nics=[PF], generation=0)
    assert validate_slice(s) == []
    assert s["spec"]["nodeName"] == long_a == s["spec"]["pool"]["name"]
    assert s["metadata"]["labels"][LABEL_NODE] == label_value(long_a) != label_value(long_b)


def test_label_value():
    assert label_value("node-1") == "node-1"
    for v in ("x" * 64, "a.b-", "é", "-x", "a" * 300):
        out = label_value(v)
        assert len(out) <= 63 and LABEL_VALUE.match(out), v


@pytest.mark.parametrize(
    "kwargs",
    [
        {"driver": "Dracni.io"},
        {"driver": "dracni_io"},
        {"driver": "a" * 64},
        {"driver": ""},
        {"node_name": "Node1"},
        {"node_name": ""},
        {"node_name": "a" * 254},
        {"generation": -1},
        {"generation": 1.5},
        {"generation": True},
        {"max_devices": 0},
        {"max_devices": 129},
        {"nics": [Nic("eth0", 1), Nic("eth0", 2)]},
    ],
)
def test_invalid_arguments(kwargs):
    args = {"driver": "dracni.io", "node_name": "n1", "node_uid": None, "nics": [PF], "generation": 0}
    args.update(kwargs)
    with pytest.raises(ValueError):
        build_slices(**args)


# -- comparison -----------------------------------------------------------------------------------


def _built(nics=(PF, VETH), generation=1, **kw):
    return build_slices(driver="dracni.io", node_name="n1", node_uid="u", nics=list(nics), generation=generation, **kw)


def test_slices_equal_ignores_generation_metadata_and_order():
    desired = _built(generation=2)[0]
    existing = copy.deepcopy(_built(generation=1)[0])
    existing["metadata"].update(resourceVersion="42", uid="x", labels={})
    existing["spec"]["devices"].reverse()
    assert slices_equal(desired, existing)
    assert slices_equal(desired, existing["spec"])  # a bare spec works too


def test_slices_equal_tolerates_client_nones_and_v1beta1():
    desired = _built()[0]
    client_form = copy.deepcopy(desired)
    client_form["spec"].update(nodeSelector=None, allNodes=None, sharedCounters=None, perDeviceNodeSelection=None)
    for d in client_form["spec"]["devices"]:
        d.update(capacity=None, taints=None, consumesCounters=None)
        for value in d["attributes"].values():
            for kind in ("int", "bool", "string", "version"):
                value.setdefault(kind, None)
    assert slices_equal(desired, client_form)
    assert slices_equal(desired, to_v1beta1(desired))


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: s["spec"]["devices"][0]["attributes"].update({"dracni.io/mtu": {"int": 1400}}),
        lambda s: s["spec"]["devices"][0]["attributes"].pop("dracni.io/mac"),
        lambda s: s["spec"]["devices"][0]["attributes"].update({"dracni.io/mtu": {"string": "9000"}}),
        lambda s: s["spec"]["devices"].pop(),
        lambda s: s["spec"]["devices"][0].update(name="other"),
        lambda s: s["spec"]["pool"].update(resourceSliceCount=2),
        lambda s: s["spec"]["pool"].update(name="n2"),
        lambda s: s["spec"].update(nodeName="n2"),
        lambda s: s["spec"].update(driver="other.io"),
        lambda s: s["spec"].update(allNodes=True),
    ],
)
def test_slices_equal_sees_real_changes(mutate):
    desired = _built()[0]
    existing = copy.deepcopy(desired)
    mutate(existing)
    assert not slices_equal(desired, existing)


def test_slices_equal_after_nic_change():
    before = _built(nics=[PF, VETH])[0]
    jumbo = Nic(**{**VETH.__dict__, "mtu": 9000})
    assert not slices_equal(_built(nics=[PF, jumbo])[0], before)
    assert slices_equal(_built(nics=[VETH, PF], generation=9)[0], before)


def test_the_link_state_alone_does_not_change_the_slice():
    """A flapping link must not rewrite the slice: its state is a taint (publisher), not an
    attribute."""
    before = _built(nics=[PF, VETH])[0]
    for changed in ({"oper_state": "up", "admin_up": True}, {"carrier": False}, {"oper_state": "lowerlayerdown"}):
        assert slices_equal(_built(nics=[PF, Nic(**{**VETH.__dict__, **changed})])[0], before)


# -- taints ---------------------------------------------------------------------------------------


def test_link_taints_go_on_every_device_of_their_nic():
    from dracni.inventory.sharing import parse_sharing

    taint = link_taint("dracni.io", LINK_DOWN, "NoSchedule", "2026-01-02T03:04:05Z")
    assert taint == {
        "key": "dracni.io/link",
        "value": "down",
        "effect": "NoSchedule",
        "timeAdded": "2026-01-02T03:04:05Z",
    }
    (exclusive,) = build_slices(
        driver="dracni.io", node_name="n1", node_uid=None, nics=[PF, VETH], generation=1,
        taints={"veth1": [taint]}, max_devices=SLICE_MAX_DEVICES_WITH_TAINTS,
    )  # fmt: skip
    by_name = {d["name"]: d for d in exclusive["spec"]["devices"]}
    assert by_name["veth1"]["taints"] == [taint] and "taints" not in by_name["ens1f0"]
    sharing = parse_sharing(["veth1=slots"], slots=3, max_attachments=8)
    (slots,) = build_slices(
        driver="dracni.io", node_name="n1", node_uid=None, nics=[PF, VETH], generation=1, sharing=sharing,
        taints={"veth1": [taint]}, max_devices=SLICE_MAX_DEVICES_WITH_TAINTS,
    )  # fmt: skip
    tainted = sorted(d["name"] for d in slots["spec"]["devices"] if d.get("taints"))
    assert tainted == ["veth1-slot-0", "veth1-slot-1", "veth1-slot-2"]
    assert not slices_equal(exclusive, _built(nics=[PF, VETH])[0])  # a taint is content


def test_link_taints_are_valid_device_taints():
    """Key a label name (``<driver>/link``), value a label value, effect NoSchedule or NoExecute."""
    for effect in ("NoSchedule", "NoExecute"):
        for value in (LINK_DOWN, LINK_GONE):
            taint = link_taint("a" * 63, value, effect, "2026-01-02T03:04:05Z")
            prefix, name = taint["key"].split("/")
            assert is_dns_subdomain(prefix) and LABEL_NAME.match(name) and len(name) <= 63
            assert LABEL_VALUE.match(taint["value"])
    with pytest.raises(ValueError, match="taint effect"):
        link_taint("dracni.io", LINK_DOWN, "None", "2026-01-02T03:04:05Z")


def test_a_slice_with_taints_holds_at_most_64_devices():
    taint = link_taint("dracni.io", LINK_GONE, "NoSchedule", "2026-01-02T03:04:05Z")
    with pytest.raises(ValueError, match="at most 64"):
        build_slices(driver="dracni.io", node_name="n1", node_uid=None, nics=many_nics(3), generation=1,
                     taints={"ens0": [taint]})  # fmt: skip
    built = build_slices(
        driver="dracni.io", node_name="n1", node_uid=None, nics=many_nics(100), generation=1,
        taints={"ens0": [taint]}, max_devices=SLICE_MAX_DEVICES_WITH_TAINTS,
    )  # fmt: skip
    assert [len(s["spec"]["devices"]) for s in built] == [64, 36]
