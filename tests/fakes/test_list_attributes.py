"""The fake API server's list-type device attributes (KEP-5491, gate DRAListTypeAttributes),
through the real kubernetes client (dracni's ``KubeApi``: plain dicts over HTTP); and that the
slices dracni builds are accepted with the gate on and off (what a 1.34-1.37 server accepts).

Upstream: pkg/registry/resource/resourceslice/strategy.go
``dropDisableDRAListTypeAttributesFields``, ``draListTypeAttributesFeatureInUse``;
pkg/apis/resource/validation/validation.go ``validateDeviceAttribute``, ``validateDevice``
(``numEntriesDeviceAttribute``, ``ResourceSliceMaxAttributeValuesPerDevice`` = 48);
pkg/features/versioned_kube_features.go ``DRAListTypeAttributes`` (alpha, off, 1.36 and 1.37).
"""

from __future__ import annotations

import pytest

from dracni.inventory.nics import Nic
from dracni.inventory.slices import NUMA_NODE, build_slices
from dracni.kube.api import ApiError, KubeApi
from tests.fakes import test_device_taints as taint_tests
from tests.fakes.apiserver import FakeApiServer
from tests.kubeclient import serving

GATE = "DRAListTypeAttributes"
NODE = taint_tests.NODE
DRIVER = taint_tests.DRIVER


@pytest.fixture
def fake(tmp_path, request):
    """A started fake; ``@GATE_ON`` turns the gate on (it is off by default)."""
    with serving(tmp_path, feature_gates={GATE: getattr(request, "param", False)}) as server:
        yield server


GATE_ON = pytest.mark.parametrize("fake", [True], indirect=True, ids=["gate-on"])
BOTH = pytest.mark.parametrize("fake", [False, True], indirect=True, ids=["gate-off", "gate-on"])


@pytest.fixture
def api(api_client) -> KubeApi:
    return KubeApi(api_client)


def slice_obj(attributes: dict, name: str = "s1") -> dict:
    """One device, ``eth1``, with ``attributes`` (the taint tests' slice of node-a)."""
    return taint_tests.slice_obj([{"name": "eth1", "attributes": attributes}], name)


def refused(api: KubeApi, attributes: dict) -> str:
    with pytest.raises(ApiError) as info:
        api.create_slice(slice_obj(attributes))
    assert info.value.status == 422
    return str(info.value)


def test_the_gate_is_off_by_default_as_in_1_36_and_1_37(tmp_path):
    assert FakeApiServer(tmp_path / "a").feature_gates[GATE] is False


def test_gate_off_drops_a_list_and_refuses_the_attribute_left_without_a_value(fake, api):
    """What a 1.36/1.37 server with the default gates answers a driver publishing
    ``numaNode`` in list form (``numa_linux.go GetNUMANodeAttributeByPCIBusID``'s warning)."""
    message = refused(api, {NUMA_NODE: {"ints": [0, 1]}})
    assert f"spec.devices[0].attributes[{NUMA_NODE}]" in message
    assert "exactly one value must be specified" in message
    assert fake.list_slices() == []


def test_gate_off_drops_a_list_beside_a_scalar_silently(fake, api):
    created = api.create_slice(slice_obj({NUMA_NODE: {"int": 0, "ints": [0, 1]}}))
    assert created["spec"]["devices"][0]["attributes"][NUMA_NODE] == {"int": 0}


@GATE_ON
def test_gate_on_keeps_lists(fake, api):
    attributes = {
        NUMA_NODE: {"ints": [0, 1]},
        "dracni.io/roots": {"strings": ["pci0000:00", "pci0000:80"]},
        "dracni.io/flags": {"bools": [True]},
        "dracni.io/fw": {"versions": ["1.2.3"]},
    }
    created = api.create_slice(slice_obj(attributes))
    assert created["spec"]["devices"][0]["attributes"] == attributes


@GATE_ON
@pytest.mark.parametrize(
    ("attribute", "expected"),
    [
        ({"ints": []}, "ints: Invalid value: []: must not be empty if specified"),
        ({"int": 0, "ints": [0]}, "exactly one value must be specified"),
        ({"ints": [0], "strings": ["a"]}, "exactly one value must be specified"),
        ({"strings": ["x" * 65]}, "strings[0]: Too long: must have at most 64 bytes"),
        ({"versions": ["v1"]}, 'versions[0]: Invalid value: "v1": must be a string compatible with semver.org'),
    ],
)
def test_gate_on_validates_lists(fake, api, attribute, expected):
    assert expected in refused(api, {"dracni.io/a": attribute})


@GATE_ON
def test_at_most_48_attribute_values_per_device(fake, api):
    """Each list item counts as one value, each scalar as one (``numEntriesDeviceAttribute``)."""
    ok = {"dracni.io/a": {"ints": list(range(40))}, **{f"dracni.io/s{i}": {"int": i} for i in range(8)}}
    api.create_slice(slice_obj(ok, name="ok"))
    message = refused(api, {**ok, "dracni.io/s8": {"int": 8}})
    assert "spec.devices[0]: Invalid value: 49: the total number of attribute values must not exceed 48" in message


def test_gate_off_keeps_the_lists_of_a_slice_that_already_has_them(fake, api):
    """``draListTypeAttributesFeatureInUse``: a server downgraded under such a slice keeps them."""
    fake.set_feature_gate(GATE, True)
    created = api.create_slice(slice_obj({NUMA_NODE: {"ints": [0, 1]}}))
    fake.set_feature_gate(GATE, False)
    created["spec"]["devices"][0]["attributes"]["dracni.io/roots"] = {"strings": ["pci0000:00"]}
    updated = api.replace_slice("s1", created)
    assert updated["spec"]["devices"][0]["attributes"]["dracni.io/roots"] == {"strings": ["pci0000:00"]}


@BOTH
def test_the_slices_dracni_builds_are_accepted_with_the_gate_on_and_off(fake, api):
    """dracni publishes ``numaNode`` as a scalar: valid for every server from 1.34 to 1.37,
    whatever its ``DRAListTypeAttributes``."""
    nics = [
        Nic(name="ens1f0", index=4, mac="3c:fd:fe:00:00:01", pci_address="0000:3b:00.0", numa_node=1),
        Nic(name="ens2f0", index=5, mac="3c:fd:fe:00:00:02", pci_address="0000:af:00.0", numa_node=0),
    ]
    (slice_,) = build_slices(driver=DRIVER, node_name=NODE, node_uid=None, nics=nics, generation=1)
    created = api.create_slice(slice_)
    assert [d["attributes"][NUMA_NODE] for d in created["spec"]["devices"]] == [{"int": 1}, {"int": 0}]
