"""The fake API server's ResourceSlice device taints (KEP-5055, gate DRADeviceTaints), through the
real kubernetes client (dracni's ``KubeApi``: plain dicts over HTTP).

Upstream: pkg/apis/resource/v1/defaults.go ``SetDefaults_DeviceTaint``;
pkg/registry/resource/resourceslice/strategy.go ``dropDisabledDRADeviceTaintsFields``,
``draDeviceTaintsFeatureInUse``; pkg/apis/resource/validation/validation.go
``validateResourceSliceSpec`` (``haveDeviceTaints``, 64 devices), ``validateDevice`` (taints
checked when changed, ``DeviceTaintsMaxLength``), ``validateDeviceTaint``.
"""

from __future__ import annotations

import re

import pytest

from dracni.kube.api import ApiError, KubeApi
from tests.fakes.apiserver import FakeApiServer
from tests.kubeclient import serving

GATE = "DRADeviceTaints"
NODE = "node-a"
DRIVER = "dracni.io"
TAINT = {"key": "dracni.io/link", "value": "down", "effect": "NoSchedule", "timeAdded": "2026-01-02T03:04:05Z"}


@pytest.fixture
def fake(tmp_path, request):
    """A started fake; ``@pytest.mark.parametrize("fake", [False], indirect=True)`` turns the gate off."""
    with serving(tmp_path, feature_gates={GATE: getattr(request, "param", True)}) as server:
        yield server


GATE_OFF = pytest.mark.parametrize("fake", [False], indirect=True, ids=["gate-off"])


@pytest.fixture
def api(api_client) -> KubeApi:
    return KubeApi(api_client)


def device(name: str, *taints: dict) -> dict:
    return {"name": name, **({"taints": [dict(t) for t in taints]} if taints else {})}


def slice_obj(devices: list[dict], name: str = "s1") -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def test_the_gate_is_on_by_default_as_from_1_36(tmp_path):
    assert FakeApiServer(tmp_path / "a").feature_gates[GATE] is True


def test_taints_are_kept_with_the_gate_on(fake, api):
    created = api.create_slice(slice_obj([device("eth1", TAINT), device("eth2")]))
    assert created["spec"]["devices"][0]["taints"] == [TAINT]
    assert "taints" not in created["spec"]["devices"][1]


def test_time_added_is_defaulted_to_the_write_time(fake, api):
    """``SetDefaults_DeviceTaint``: now, in seconds, where the writer left it out."""
    untimed = {k: v for k, v in TAINT.items() if k != "timeAdded"}
    created = api.create_slice(slice_obj([device("eth1", untimed)]))
    (taint,) = created["spec"]["devices"][0]["taints"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", taint["timeAdded"]), taint


@GATE_OFF
def test_gate_off_drops_taints_silently(fake, api):
    created = api.create_slice(slice_obj([device("eth1", TAINT)]))
    assert fake.requests[-1].status == 201
    assert "taints" not in created["spec"]["devices"][0]
    assert "taints" not in fake.get_slice("s1")["spec"]["devices"][0]
    created["spec"]["devices"][0]["taints"] = [TAINT]
    updated = api.replace_slice("s1", created)
    assert "taints" not in updated["spec"]["devices"][0]


def test_gate_off_keeps_the_taints_of_a_slice_that_already_has_them(fake, api):
    """``draDeviceTaintsFeatureInUse``: a server downgraded under a tainted slice keeps them."""
    created = api.create_slice(slice_obj([device("eth1", TAINT), device("eth2")]))
    fake.set_feature_gate(GATE, False)
    created["spec"]["devices"][1]["taints"] = [dict(TAINT, value="gone")]
    updated = api.replace_slice("s1", created)
    assert [d.get("taints") for d in updated["spec"]["devices"]] == [[TAINT], [dict(TAINT, value="gone")]]


@pytest.mark.parametrize(
    ("taint", "expected"),
    [
        ({**TAINT, "effect": "PreferNoSchedule"},
         'spec.devices[0].taints[0].effect: Unsupported value: "PreferNoSchedule": supported values: '
         '"NoExecute", "NoSchedule", "None"'),
        ({**TAINT, "effect": ""}, "spec.devices[0].taints[0].effect: Required value"),
        ({**TAINT, "key": ""}, 'spec.devices[0].taints[0].key: Invalid value: "": name part must be non-empty'),
        ({**TAINT, "key": "dracni.io/-link"}, 'spec.devices[0].taints[0].key: Invalid value: "dracni.io/-link": '
         "name part must consist of alphanumeric characters"),
        ({**TAINT, "key": "Bad_Prefix/link"}, 'spec.devices[0].taints[0].key: Invalid value: "Bad_Prefix/link": '
         "prefix part a lowercase RFC 1123 subdomain"),
        ({**TAINT, "value": "not ok"}, 'spec.devices[0].taints[0].value: Invalid value: "not ok": '
         "a valid label must be an empty string"),
        ({**TAINT, "value": "v" * 64}, "spec.devices[0].taints[0].value: Invalid value: "
         '"' + "v" * 64 + '": must be no more than 63 characters'),
    ],
)  # fmt: skip
def test_invalid_taints_are_refused(fake, api, taint, expected):
    with pytest.raises(ApiError) as info:
        api.create_slice(slice_obj([device("eth1", taint)]))
    assert info.value.status == 422
    assert expected in str(info.value), str(info.value)
    assert fake.list_slices() == []


def test_at_most_16_taints_per_device(fake, api):
    taints = [dict(TAINT, key=f"dracni.io/t{i}") for i in range(17)]
    with pytest.raises(ApiError) as info:
        api.create_slice(slice_obj([device("eth1", *taints)]))
    assert info.value.status == 422 and "spec.devices[0].taints: Too many: 17: must have at most 16 items" in str(
        info.value
    )
    api.create_slice(slice_obj([device("eth1", *taints[:16])]))


def test_a_slice_with_taints_holds_at_most_64_devices(fake, api):
    many = [device(f"eth{i}") for i in range(100)]
    api.create_slice(slice_obj(many))  # 128 without taints
    tainted = [device("eth0", TAINT)] + many[1:65]
    with pytest.raises(ApiError) as info:
        api.create_slice(slice_obj(tainted, name="s2"))
    assert info.value.status == 422 and "spec.devices: Too many: 65: must have at most 64 items" in str(info.value)
    api.create_slice(slice_obj(tainted[:64], name="s2"))


def test_unchanged_taints_are_not_validated_again(fake, api):
    """``validateDevice`` skips a device's taints when they equal the old device's: an effect this
    server does not know, stored by a newer one, does not block other updates."""
    created = api.create_slice(slice_obj([device("eth1", TAINT)]))
    fake._store.objects[("resourceslices", "", "s1")]["spec"]["devices"][0]["taints"][0]["effect"] = "Future"
    current = fake.get_slice("s1")
    current["spec"]["devices"].append(device("eth2"))
    assert len(api.replace_slice("s1", current)["spec"]["devices"]) == 2
    current = fake.get_slice("s1")
    current["spec"]["devices"][0]["taints"].append(dict(TAINT, key="dracni.io/other"))
    with pytest.raises(ApiError) as info:
        api.replace_slice("s1", current)
    assert 'taints[0].effect: Unsupported value: "Future"' in str(info.value)
    assert created["metadata"]["name"] == "s1"
