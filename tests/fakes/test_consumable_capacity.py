"""The fake API server's feature gate DRAConsumableCapacity (KEP-5075), on and off, through the
real kubernetes client: what the server keeps, what it drops silently, what it refuses.

Upstream: resourceslice/strategy.go ``dropDisabledDRAConsumableCapacityFields``,
resourceclaimspec/util.go ``dropDisabledDRAResourceClaimConsumableCapacityFields``,
resourceclaim/strategy.go ``dropDisabledDRAResourceClaimConsumableCapacityStatusFields`` and
validation.go ``validateRequestPolicy`` and its helpers, ``validateUID``.
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException, UnprocessableEntityException

from tests.fakes.apiserver import APPLY_PATCH, ApiStatusError, FakeApiServer
from tests.fakes.apiserver.quantity import QuantityError, canonical, parse
from tests.kubeclient import client_for, serving

GATE = "DRAConsumableCapacity"
NODE = "node-a"
DRIVER = "dracni.io"
NS = "team-1"
SHARE = "8a1c3e54-1f2b-4c3d-9e8f-0123456789ab"
OTHER_SHARE = "9b2d4f65-2a3c-4d4e-8f90-123456789abc"
POD = {"resource": "pods", "name": "pod-1", "uid": "0b6c7bd8-0000-4000-8000-000000000001"}
READY = [
    {
        "type": "Ready",
        "status": "True",
        "reason": "NetworkInterfaceReady",
        "message": "",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }
]
SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"


# -- fixtures and helpers ----------------------------------------------------------------------------
@pytest.fixture
def fake(tmp_path, request):
    """A started fake; ``@pytest.mark.parametrize("fake", [False], indirect=True)`` turns the gate off."""
    enabled = getattr(request, "param", True)
    with serving(tmp_path, namespaces=("default", NS), feature_gates={GATE: enabled}) as server:
        yield server


GATE_OFF = pytest.mark.parametrize("fake", [False], indirect=True, ids=["gate-off"])


def policy(**fields) -> dict:
    return {"default": "1", "validValues": ["1"], **fields}


def shared_device(name: str = "eth1", *, value: str = "8", request_policy: dict | None = None, **extra) -> dict:
    capacity = {"value": value, "requestPolicy": request_policy if request_policy is not None else policy()}
    device = {"name": name, "allowMultipleAllocations": True, "capacity": {f"{DRIVER}/attachments": capacity}}
    device.update(extra)
    return device


def plain_device(name: str = "eth2") -> dict:
    return {"name": name, "capacity": {f"{DRIVER}/attachments": {"value": "1"}}}


def slice_obj(name: str = "s1", devices: list[dict] | None = None) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": devices if devices is not None else [shared_device(), plain_device()],
        },
    }


def raw(api_client: client.ApiClient, method: str, path: str, body, response_type: str):
    """A request with the client's auth and error handling, bypassing its models."""
    params = api_client.param_serialize(
        method=method,
        resource_path=path,
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    resp = api_client.call_api(*params)
    resp.read()
    return api_client.response_deserialize(resp, {"200": response_type, "201": response_type}).data


def capacity_of(obj, device: int = 0) -> dict:
    return obj["spec"]["devices"][device]["capacity"][f"{DRIVER}/attachments"]


def claim_obj(name: str = "c1", *, capacity: bool = False, distinct: bool = False) -> dict:
    exactly: dict = {"deviceClassName": DRIVER}
    if capacity:
        exactly["capacity"] = {"requests": {f"{DRIVER}/attachments": "1"}}
    devices: dict = {
        "requests": [
            {"name": "net", "exactly": exactly},
            {
                "name": "alt",
                "firstAvailable": [
                    {"name": "a", "deviceClassName": DRIVER, **({"capacity": exactly["capacity"]} if capacity else {})}
                ],
            },
        ]
    }
    if distinct:
        devices["constraints"] = [{"requests": ["net", "alt"], "distinctAttribute": f"{DRIVER}/parent"}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"devices": devices},
    }


def allocation(share_id: str | None = SHARE, consumed: bool = True) -> dict:
    result: dict = {"request": "net", "driver": DRIVER, "pool": NODE, "device": "eth1"}
    if share_id is not None:
        result["shareID"] = share_id
    if consumed:
        result["consumedCapacity"] = {f"{DRIVER}/attachments": "1"}
    return {"devices": {"results": [result]}}


def entry(share_id: str | None = SHARE) -> dict:
    item = {"driver": DRIVER, "pool": NODE, "device": "eth1", "conditions": READY}
    if share_id is not None:
        item["shareID"] = share_id
    return item


def apply_status(rapi, devices: list[dict], name: str = "c1"):
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "status": {"devices": devices},
    }
    return rapi.patch_namespaced_resource_claim_status(
        name, NS, body, field_manager=DRIVER, force=True, _content_type=APPLY_PATCH
    )


def body_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


# -- the gates themselves -------------------------------------------------------------------------------
def test_the_gate_is_on_by_default_and_unknown_gates_are_refused(tmp_path):
    assert FakeApiServer(tmp_path / "a").feature_gates[GATE] is True
    assert FakeApiServer(tmp_path / "b", feature_gates={GATE: False}).feature_gates[GATE] is False
    with pytest.raises(ValueError, match="unrecognized feature gate: DRANoSuchThing"):
        FakeApiServer(tmp_path / "c", feature_gates={"DRANoSuchThing": True})
    fake = FakeApiServer(tmp_path / "d")
    fake.set_feature_gate(GATE, False)
    assert fake.feature_gates[GATE] is False
    with pytest.raises(ValueError):
        fake.set_feature_gate("DRANoSuchThing", False)


# -- ResourceSlices ------------------------------------------------------------------------------------
def test_gate_on_keeps_shared_devices_and_request_policies(fake, rapi):
    created = rapi.create_resource_slice(slice_obj())
    assert fake.requests[-1].status == 201
    device = created.spec.devices[0]
    assert device.allow_multiple_allocations is True
    policy_back = device.capacity[f"{DRIVER}/attachments"].request_policy
    assert policy_back.default == "1" and policy_back.valid_values == ["1"]
    stored = fake.get_slice("s1")
    assert stored["spec"]["devices"][0]["allowMultipleAllocations"] is True
    assert capacity_of(stored)["requestPolicy"] == {"default": "1", "validValues": ["1"]}


@GATE_OFF
def test_gate_off_drops_them_silently_on_create(fake, rapi):
    created = rapi.create_resource_slice(slice_obj())
    assert fake.requests[-1].status == 201
    assert created.spec.devices[0].allow_multiple_allocations is None
    assert created.spec.devices[0].capacity[f"{DRIVER}/attachments"].request_policy is None
    stored = fake.get_slice("s1")
    assert "allowMultipleAllocations" not in stored["spec"]["devices"][0]
    assert capacity_of(stored) == {"value": "8"}  # the capacity itself stays
    assert capacity_of(stored, 1) == {"value": "1"}


@GATE_OFF
def test_gate_off_drops_them_from_the_test_helper_too(fake):
    stored = fake.create_slice(slice_obj())
    assert "allowMultipleAllocations" not in stored["spec"]["devices"][0]
    assert "requestPolicy" not in capacity_of(stored)


@GATE_OFF
def test_gate_off_drops_them_on_update_when_the_old_slice_did_not_use_them(fake, rapi):
    rapi.create_resource_slice(slice_obj(devices=[plain_device("eth1")]))
    current = rapi.read_resource_slice("s1")
    body = client.ApiClient().sanitize_for_serialization(current)
    body["spec"]["devices"] = [shared_device()]
    replaced = raw(rapi.api_client, "PUT", f"{SLICES_PATH}/s1", body, "V1ResourceSlice")
    assert replaced.spec.devices[0].allow_multiple_allocations is None
    assert "requestPolicy" not in capacity_of(fake.get_slice("s1"))


def test_a_slice_that_uses_them_keeps_them_after_the_gate_goes_off(fake, rapi):
    rapi.create_resource_slice(slice_obj())
    fake.set_feature_gate(GATE, False)  # a downgrade: the stored slice uses the feature
    current = rapi.read_resource_slice("s1")
    current.spec.devices.append(client.V1Device.from_dict(shared_device("eth3")))
    replaced = rapi.replace_resource_slice("s1", current)
    assert [d.allow_multiple_allocations for d in replaced.spec.devices] == [True, None, True]
    assert capacity_of(fake.get_slice("s1"), 2)["requestPolicy"] == {"default": "1", "validValues": ["1"]}


def test_once_the_gate_is_back_on_an_update_may_add_them(fake, rapi):
    """In use means in use in the stored object, and only matters while the gate is off."""
    fake.set_feature_gate(GATE, False)
    rapi.create_resource_slice(slice_obj())
    fake.set_feature_gate(GATE, True)
    current = rapi.read_resource_slice("s1")
    body = client.ApiClient().sanitize_for_serialization(current)
    body["spec"]["devices"] = [shared_device()]
    replaced = raw(rapi.api_client, "PUT", f"{SLICES_PATH}/s1", body, "V1ResourceSlice")
    assert replaced.spec.devices[0].allow_multiple_allocations is True  # the gate is on again


def test_allow_multiple_allocations_false_counts_as_in_use(fake, rapi):
    rapi.create_resource_slice(slice_obj(devices=[{"name": "eth1", "allowMultipleAllocations": False}]))
    fake.set_feature_gate(GATE, False)
    current = rapi.read_resource_slice("s1")
    current.spec.devices = [client.V1Device.from_dict(shared_device())]
    replaced = rapi.replace_resource_slice("s1", current)
    assert replaced.spec.devices[0].allow_multiple_allocations is True


def test_quantities_come_back_in_canonical_form(fake, rapi):
    request_policy = {"default": "1000", "validRange": {"min": "1000", "max": "2048000", "step": "1000"}}
    rapi.create_resource_slice(slice_obj(devices=[shared_device(value="2048000", request_policy=request_policy)]))
    stored = capacity_of(fake.get_slice("s1"))
    assert stored == {
        "value": "2048k",
        "requestPolicy": {"default": "1k", "validRange": {"min": "1k", "max": "2048k", "step": "1k"}},
    }
    assert capacity_of(fake.create_slice(slice_obj("s2", [plain_device("x")]))) == {"value": "1"}
    assert capacity_of(fake.create_slice(slice_obj("s3", [shared_device(value="1.5Gi")]))) == {
        "value": "1536Mi",
        "requestPolicy": {"default": "1", "validValues": ["1"]},
    }


def test_an_unparsable_quantity_is_400(fake, api_client):
    body = slice_obj(devices=[shared_device(request_policy=policy(validValues=["1", "two"]))])
    with pytest.raises(ApiException) as info:
        raw(api_client, "POST", SLICES_PATH, body, "V1ResourceSlice")
    assert info.value.status == 400
    assert body_of(info.value)["message"].startswith(
        'ResourceSlice in version "v1" cannot be handled as a ResourceSlice: quantities must match'
    )
    assert fake.list_slices() == []


ATT = f"spec.devices[0].capacity[{DRIVER}/attachments]"


@pytest.mark.parametrize(
    ("device", "field", "fragment"),
    [
        (
            {**shared_device(), "allowMultipleAllocations": False},
            f"{ATT}.requestPolicy",
            "Forbidden: allowMultipleAllocations must be true",
        ),
        (
            {k: v for k, v in shared_device().items() if k != "allowMultipleAllocations"},
            f"{ATT}.requestPolicy",
            "Forbidden: allowMultipleAllocations must be true",
        ),
        (
            shared_device(request_policy=policy(validRange={"min": "1"})),
            f"{ATT}.requestPolicy",
            'Forbidden: exactly one policy can be specified, cannot specify "validValues" and "validRange"',
        ),
        (
            shared_device(request_policy={"validValues": ["1"]}),
            f"{ATT}.requestPolicy.default",
            "Required value: required when validValues is defined",
        ),
        (
            shared_device(request_policy={"validRange": {"min": "1"}}),
            f"{ATT}.requestPolicy.default",
            "Required value: required when validRange is defined",
        ),
        (
            shared_device(request_policy=policy(validValues=["2", "1"])),
            f"{ATT}.requestPolicy.validValues[1]",
            'Invalid value: "1": values must be sorted in ascending order',
        ),
        (
            shared_device(request_policy=policy(validValues=["1", "1"])),
            f"{ATT}.requestPolicy.validValues[1]",
            'Duplicate value: "1"',
        ),
        (
            shared_device(request_policy=policy(validValues=[str(i) for i in range(1, 12)])),
            f"{ATT}.requestPolicy.validValues",
            "Too many: 11: must have at most 10 items",
        ),
        (
            shared_device(request_policy=policy(default="3", validValues=["1", "2"])),
            f"{ATT}.requestPolicy.validValues",
            'Invalid value: "3": default value is not valid according to the requestPolicy',
        ),
        (
            shared_device(request_policy=policy(validValues=["1", "16"])),
            f"{ATT}.requestPolicy.validValues[1]",
            'Invalid value: "16": option is larger than capacity value: 8',
        ),
        (
            shared_device(request_policy={"default": "1", "validRange": {"max": "4"}}),
            f"{ATT}.requestPolicy.validRange.min",
            "Required value: required when validRange is defined",
        ),
        (
            shared_device(request_policy={"default": "2", "validRange": {"min": "4", "max": "2"}}),
            f"{ATT}.requestPolicy.validRange.max",
            'Invalid value: "4": min is larger than max: 2',
        ),
        (
            shared_device(request_policy={"default": "1", "validRange": {"min": "2"}}),
            f"{ATT}.requestPolicy.validRange.min",
            'Invalid value: "1": default is less than min: 2',
        ),
        (
            shared_device(request_policy={"default": "1", "validRange": {"min": "1", "max": "16"}}),
            f"{ATT}.requestPolicy.validRange.max",
            'Invalid value: "16": max is larger than capacity value: 8',
        ),
        (
            shared_device(request_policy={"default": "2", "validRange": {"min": "1", "step": "2"}}),
            f"{ATT}.requestPolicy.validRange.step",
            'Invalid value: "2": value is not a multiple of a given step (2) from (1)',
        ),
        (
            shared_device(request_policy={"default": "1", "validRange": {"min": "1", "step": "8"}}),
            f"{ATT}.requestPolicy.validRange.step",
            'Invalid value: "8": one step 9 is larger than capacity value: 8',
        ),
    ],
)
def test_an_invalid_request_policy_is_422_naming_the_field(fake, api_client, device, field, fragment):
    body = slice_obj(devices=[device])
    with pytest.raises(UnprocessableEntityException) as info:
        raw(api_client, "POST", SLICES_PATH, body, "V1ResourceSlice")
    status = body_of(info.value)
    assert status["message"].startswith('ResourceSlice.resource.k8s.io "s1" is invalid: ')
    assert f"{field}: {fragment}" in status["message"], status["message"]
    assert any(c["field"] == field for c in status["details"]["causes"]), status
    assert fake.list_slices() == []


@GATE_OFF
def test_gate_off_drops_an_invalid_request_policy_instead_of_refusing_it(fake, api_client):
    body = slice_obj(devices=[shared_device(request_policy=policy(validValues=["2", "1"]))])
    created = raw(api_client, "POST", SLICES_PATH, body, "V1ResourceSlice")
    assert fake.requests[-1].status == 201
    assert created.spec.devices[0].capacity[f"{DRIVER}/attachments"].request_policy is None


def test_a_valid_range_policy_is_accepted(fake, rapi):
    request_policy = {"default": "2", "validRange": {"min": "2", "max": "8", "step": "2"}}
    created = rapi.create_resource_slice(slice_obj(devices=[shared_device(request_policy=request_policy)]))
    assert created.spec.devices[0].capacity[f"{DRIVER}/attachments"].request_policy.valid_range.step == "2"


# -- ResourceClaim spec --------------------------------------------------------------------------------
def test_gate_on_keeps_claim_capacity_requests_and_distinct_attribute(fake, rapi):
    created = rapi.create_namespaced_resource_claim(NS, claim_obj(capacity=True, distinct=True))
    assert created.spec.devices.requests[0].exactly.capacity.requests == {f"{DRIVER}/attachments": "1"}
    assert created.spec.devices.requests[1].first_available[0].capacity.requests == {f"{DRIVER}/attachments": "1"}
    assert created.spec.devices.constraints[0].distinct_attribute == f"{DRIVER}/parent"


@GATE_OFF
def test_gate_off_drops_claim_capacity_requests_and_distinct_attribute(fake, rapi):
    created = rapi.create_namespaced_resource_claim(NS, claim_obj(capacity=True, distinct=True))
    assert fake.requests[-1].status == 201
    assert created.spec.devices.requests[0].exactly.capacity is None
    assert created.spec.devices.requests[1].first_available[0].capacity is None
    assert created.spec.devices.constraints[0].distinct_attribute is None
    assert fake.create_claim(claim_obj("c2", capacity=True))["spec"]["devices"]["requests"][0]["exactly"] == {
        "deviceClassName": DRIVER
    }


# -- ResourceClaim status ------------------------------------------------------------------------------
def test_gate_on_keeps_share_ids_and_consumed_capacity(fake, rapi):
    fake.create_claim(claim_obj(capacity=True))
    allocated = fake.set_claim_allocation(NS, "c1", allocation(), [POD])
    result = allocated["status"]["allocation"]["devices"]["results"][0]
    assert result["shareID"] == SHARE and result["consumedCapacity"] == {f"{DRIVER}/attachments": "1"}
    claim = apply_status(rapi, [entry()])
    assert claim.status.devices[0].share_id == SHARE
    assert claim.status.allocation.devices.results[0].share_id == SHARE


@GATE_OFF
def test_gate_off_drops_share_ids_from_the_schedulers_write_and_the_drivers(fake, rapi):
    fake.create_claim(claim_obj())
    allocated = fake.set_claim_allocation(NS, "c1", allocation(), [POD])
    assert allocated["status"]["allocation"]["devices"]["results"][0] == {
        "request": "net",
        "driver": DRIVER,
        "pool": NODE,
        "device": "eth1",
    }
    claim = apply_status(rapi, [entry()])  # accepted: the entry loses its shareID like the result did
    assert claim.status.devices[0].share_id is None
    assert "shareID" not in fake.get_claim(NS, "c1")["status"]["devices"][0]


@GATE_OFF
def test_gate_off_keeps_share_ids_of_a_claim_that_already_uses_them(fake, rapi):
    fake.set_feature_gate(GATE, True)
    fake.create_claim(claim_obj())
    fake.set_claim_allocation(NS, "c1", allocation(), [POD])
    fake.set_feature_gate(GATE, False)  # the allocation was made before the downgrade
    claim = apply_status(rapi, [entry()])
    assert claim.status.devices[0].share_id == SHARE


@GATE_OFF
def test_gate_off_keeps_share_ids_when_the_spec_uses_capacity(fake, rapi):
    fake.set_feature_gate(GATE, True)
    fake.create_claim(claim_obj(capacity=True))
    fake.set_feature_gate(GATE, False)
    allocated = fake.set_claim_allocation(NS, "c1", allocation(), [POD])
    assert allocated["status"]["allocation"]["devices"]["results"][0]["shareID"] == SHARE


def test_entries_for_two_shares_of_one_device(fake, rapi):
    fake.create_claim(claim_obj())
    results = allocation()["devices"]["results"] + [dict(allocation(OTHER_SHARE)["devices"]["results"][0])]
    fake.set_claim_allocation(NS, "c1", {"devices": {"results": results}}, [POD])
    claim = apply_status(rapi, [entry(), entry(OTHER_SHARE)])
    assert sorted(d.share_id for d in claim.status.devices) == sorted([SHARE, OTHER_SHARE])
    with pytest.raises(UnprocessableEntityException) as info:
        apply_status(rapi, [entry("5c3e5f76-3b4d-4e5f-9a01-23456789abcd")])
    assert "must be an allocated device in the claim" in body_of(info.value)["message"]


@pytest.mark.parametrize(
    ("share_id", "detail"),
    [
        ("not-a-uuid", "error validating uid: invalid UUID length: 10"),
        (SHARE.upper(), "uid must be in RFC 4122 normalized form"),
        (SHARE.replace("-", ""), "uid must be in RFC 4122 normalized form"),
        ("{" + SHARE + "]", "error validating uid: invalid bracketed UUID format"),
        (SHARE[:-1] + "g", "error validating uid: invalid UUID format"),
    ],
)
def test_a_new_allocation_needs_uuid_share_ids(fake, rapi, share_id, detail):
    fake.create_claim(claim_obj())
    with pytest.raises(ApiStatusError) as info:
        fake.set_claim_allocation(NS, "c1", allocation(share_id), [POD])
    assert info.value.code == 422
    field = "status.allocation.devices.results[0].shareID"
    assert f"{field}: Invalid value: {json.dumps(share_id)}: {detail}" in info.value.message
    assert "status" not in fake.get_claim(NS, "c1")
    # The same through the API: a status PUT that allocates.
    current = client.ApiClient().sanitize_for_serialization(rapi.read_namespaced_resource_claim("c1", NS))
    current["status"] = {"allocation": allocation(share_id)}
    with pytest.raises(UnprocessableEntityException) as http_info:
        raw(
            rapi.api_client,
            "PUT",
            f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/c1/status",
            current,
            "V1ResourceClaim",
        )
    assert any(c["field"] == field for c in body_of(http_info.value)["details"]["causes"])


@GATE_OFF
def test_gate_off_drops_an_invalid_share_id_before_validation(fake):
    fake.create_claim(claim_obj())
    allocated = fake.set_claim_allocation(NS, "c1", allocation("not-a-uuid"), [POD])
    assert "shareID" not in allocated["status"]["allocation"]["devices"]["results"][0]


def test_an_api_client_of_a_gate_off_server(tmp_path):
    """The same ``FakeApiServer`` a test builds by hand, as the lead's service tests do."""
    with FakeApiServer(tmp_path / "apiserver", feature_gates={GATE: False}) as fake:
        api = client_for(fake.kubeconfig_path)
        try:
            created = client.ResourceV1Api(api).create_resource_slice(slice_obj())
        finally:
            api.close()
        assert created.spec.devices[0].allow_multiple_allocations is None


@pytest.mark.parametrize(
    ("text", "canonical_form"),
    [
        ("1.5", "1500m"),  # quantity.go's own examples
        ("1.5Gi", "1536Mi"),
        ("1000", "1k"),
        ("1024", "1024"),
        ("1Ki", "1Ki"),
        ("0.5Ki", "512"),
        ("1e3", "1e3"),
        ("5e-2", "50e-3"),
        ("0.1m", "100u"),
        ("1000m", "1"),
        ("-1.5", "-1500m"),
        ("0", "0"),
    ],
)
def test_quantity_round_trip(text, canonical_form):
    assert canonical(parse(text)) == canonical_form


@pytest.mark.parametrize("text", ["", "1x", "Mi", "1.5.5", "1Mi5"])
def test_quantity_refusals(text):
    with pytest.raises(QuantityError):
        parse(text)
