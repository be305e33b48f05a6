"""The test API server's claim status strategy, server-side apply inside ``status.devices`` and
field validation, each against the upstream behaviour it transcribes (named per test), driven
through the real kubernetes client.

Upstream: pkg/registry/resource/resourceclaim/strategy.go (``resourceclaimStatusStrategy``),
pkg/registry/resource/utils.go (``AuthorizedForDeviceStatus``, ``AuthorizedForBinding``),
pkg/apis/resource/validation/validation.go (``validateResourceClaimStatusUpdate``,
``validateDeviceStatus``, ``validateNetworkDeviceData``, ``validateRawExtension``,
``validateSet``), apimachinery ``metav1validation.ValidateConditions``,
``validation.IsValidInterfaceAddress``, ``field.Error``; structured-merge-diff ``Updater.Apply``;
apiserver handlers' ``fieldValidation``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException, ConflictException, UnprocessableEntityException

from tests.fakes.apiserver import APPLY_PATCH, MERGE_PATCH, FakeApiServer, RequestAttributes
from tests.kubeclient import client_for, serving

NODE = "node-a"
DRIVER = "a.dracni.io"
OTHER = "b.example.com"
NS = "team-1"
T0 = "2025-01-01T00:00:00Z"
ONE_NODE = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}


def condition(ctype: str, status: str = "True", reason: str = "Ok", message: str = "") -> dict:
    return {"type": ctype, "status": status, "reason": reason, "message": message, "lastTransitionTime": T0}


def entry(driver: str = DRIVER, device: str = "eth1", **fields) -> dict:
    return {"driver": driver, "pool": NODE, "device": device, **fields}


@pytest.fixture
def fake(tmp_path):
    with serving(tmp_path, node_name=NODE) as server:
        yield server


@pytest.fixture
def other_rapi(fake):
    api = client_for(fake.other_kubeconfig_path)
    yield client.ResourceV1Api(api)
    api.close()


def allocated(fake: FakeApiServer, name: str = "c1", selector: dict | None = ONE_NODE) -> dict:
    fake.create_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"devices": {"requests": [{"name": "net", "exactly": {"deviceClassName": "x"}}]}},
        }
    )
    results = [
        {"request": "net", "driver": d, "pool": NODE, "device": n} for d, n in ((DRIVER, "eth1"), (OTHER, "eth2"))
    ]
    allocation: dict = {"devices": {"results": results}}
    if selector is not None:
        allocation["nodeSelector"] = selector
    return fake.set_claim_allocation(NS, name, allocation, [{"resource": "pods", "name": "p", "uid": "pod-uid-1"}])


def apply(rapi, manager: str, devices: list[dict], name: str = "c1", force: bool = True):
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "status": {"devices": devices},
    }
    return rapi.patch_namespaced_resource_claim_status(
        name, NS, body, field_manager=manager, force=force, _content_type=APPLY_PATCH
    )


def devices_of(fake: FakeApiServer, name: str = "c1") -> list[dict]:
    return (fake.get_claim(NS, name).get("status") or {}).get("devices") or []


def body_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


# -- structured-merge-diff inside an entry (Updater.Apply over the AllocatedDeviceStatus schema) ------
def test_conditions_merge_by_type_and_another_managers_condition_is_kept(fake, rapi):
    """``conditions`` is listType=map keyed by type: each manager owns its own types."""
    allocated(fake)
    apply(rapi, DRIVER, [entry(conditions=[condition("Ready")])])
    apply(rapi, "health-monitor", [entry(conditions=[condition("LinkUp")])])
    assert [c["type"] for c in devices_of(fake)[0]["conditions"]] == ["Ready", "LinkUp"]
    # The driver re-applies its condition with a new status: LinkUp stays.
    apply(rapi, DRIVER, [entry(conditions=[condition("Ready", "False", "Detached")])])
    assert {c["type"]: c["status"] for c in devices_of(fake)[0]["conditions"]} == {"Ready": "False", "LinkUp": "True"}
    # The driver stops applying Ready: only its own condition goes (prune, addBackOwnedItems).
    apply(rapi, DRIVER, [entry()])
    assert [c["type"] for c in devices_of(fake)[0]["conditions"]] == ["LinkUp"]
    fields = {m["manager"]: m["fieldsV1"] for m in fake.get_claim(NS, "c1")["metadata"]["managedFields"]}
    key = f'k:{{"device":"eth1","driver":"{DRIVER}","pool":"{NODE}"}}'
    assert fields["health-monitor"]["f:status"]["f:devices"][key]["f:conditions"] == {
        'k:{"type":"LinkUp"}': {
            ".": {},
            "f:lastTransitionTime": {},
            "f:message": {},
            "f:reason": {},
            "f:status": {},
            "f:type": {},
        }
    }


def test_a_condition_of_another_manager_conflicts_unless_forced(fake, rapi):
    allocated(fake)
    apply(rapi, "health-monitor", [entry(conditions=[condition("LinkUp")])])
    with pytest.raises(ConflictException) as info:
        apply(rapi, DRIVER, [entry(conditions=[condition("LinkUp", "False", "Down")])], force=False)
    message = body_of(info.value)["message"]
    assert message.startswith(
        'Apply failed with 2 conflicts: conflicts with "health-monitor" with subresource "status":'
    )
    assert f'.status.devices[device="eth1",driver="{DRIVER}",pool="{NODE}"].conditions[type="LinkUp"].status' in message
    assert '.conditions[type="LinkUp"].reason' in message
    # The same values are no conflict: both own them.
    apply(rapi, DRIVER, [entry(conditions=[condition("LinkUp")])], force=False)


def test_network_data_merges_per_field_and_ips_is_atomic(fake, rapi):
    """``networkData`` is a struct (per-field ownership); ``ips`` is listType=atomic."""
    allocated(fake)
    apply(rapi, DRIVER, [entry(networkData={"interfaceName": "net1", "ips": ["10.0.0.5/24", "fd00::5/64"]})])
    apply(rapi, "mac-writer", [entry(networkData={"hardwareAddress": "0a:58:0a:00:00:05"})])
    assert devices_of(fake)[0]["networkData"] == {
        "interfaceName": "net1",
        "ips": ["10.0.0.5/24", "fd00::5/64"],
        "hardwareAddress": "0a:58:0a:00:00:05",
    }
    # An atomic list is replaced whole, never merged item by item.
    apply(rapi, DRIVER, [entry(networkData={"interfaceName": "net1", "ips": ["10.0.0.6/24"]})])
    assert devices_of(fake)[0]["networkData"]["ips"] == ["10.0.0.6/24"]
    # Another manager changing one ip conflicts on the whole list.
    with pytest.raises(ConflictException) as info:
        apply(rapi, "mac-writer", [entry(networkData={"ips": ["10.0.0.7/24"]})], force=False)
    assert body_of(info.value)["details"]["causes"][0]["field"].endswith(".networkData.ips")


def test_data_is_atomic(fake, rapi):
    """``data`` is a RawExtension: replaced whole (its old keys do not survive a re-apply)."""
    allocated(fake)
    apply(rapi, DRIVER, [entry(data={"a": 1, "b": 2})])
    apply(rapi, DRIVER, [entry(data={"c": 3})])
    assert devices_of(fake)[0]["data"] == {"c": 3}


def test_undeclared_fields_in_an_apply_body_are_a_400(fake, rapi):
    """structured-merge-diff cannot type the patch: "field not declared in schema"."""
    allocated(fake)
    with pytest.raises(ApiException) as info:
        apply(rapi, DRIVER, [entry(conditions=[condition("Ready") | {"severity": "low"}])])
    assert info.value.status == 400
    assert body_of(info.value)["message"] == (
        "failed to create typed patch object (resource.k8s.io/v1, Kind=ResourceClaim): "
        f'.status.devices[device="eth1",driver="{DRIVER}",pool="{NODE}"].conditions[type="Ready"].severity: '
        "field not declared in schema"
    )


# -- the status strategy's PrepareForUpdate -----------------------------------------------------------
def test_device_status_is_dropped_while_its_gate_is_off_unless_in_use(fake, rapi):
    """``dropDisabledDRAResourceClaimDeviceStatusFields``: silently, the write succeeds."""
    allocated(fake)
    allocated(fake, "c2")
    apply(rapi, DRIVER, [entry(conditions=[condition("Ready")])], name="c2")
    fake.set_feature_gate("DRAResourceClaimDeviceStatus", False)
    answer = apply(rapi, DRIVER, [entry(conditions=[condition("Ready")])])
    assert answer.status.devices is None and devices_of(fake) == []
    # A claim that has entries already keeps taking them (the gate's "in use" rule).
    apply(rapi, DRIVER, [entry(conditions=[condition("Ready", "False", "Down")])], name="c2")
    assert devices_of(fake, "c2")[0]["conditions"][0]["status"] == "False"


def test_deallocation_drops_the_entries_of_deallocated_devices(fake, api_client):
    """``dropDeallocatedStatusDevices``: a status write removing the allocation removes them."""
    allocated(fake)
    rapi = client.ResourceV1Api(api_client)
    apply(rapi, DRIVER, [entry(conditions=[condition("Ready")])])
    rapi.patch_namespaced_resource_claim_status(
        "c1", NS, {"status": {"allocation": None, "reservedFor": None}}, _content_type=MERGE_PATCH
    )
    assert "status" not in fake.get_claim(NS, "c1")


# -- ValidateUpdate: the granular authorization (1.36) --------------------------------------------------
class Grants:
    def __init__(self, *granted: str) -> None:
        self.granted = set(granted)
        self.asked: list[str] = []

    def __call__(self, attrs: RequestAttributes) -> bool:
        if attrs.subresource not in ("driver", "binding"):
            return True
        asked = f"{attrs.verb} {attrs.subresource} {attrs.namespace}/{attrs.name}"
        self.asked.append(asked)
        return asked in self.granted


def test_changing_a_drivers_entries_needs_the_driver_verb_else_422_forbidden(fake, rapi):
    """``AuthorizedForDeviceStatus``: associated-node:<verb> first (the token's node is the
    allocation's), then arbitrary-node:<verb>; refused with field.Forbidden (422)."""
    allocated(fake)
    fake.authorizer = Grants()
    with pytest.raises(UnprocessableEntityException) as info:
        apply(rapi, DRIVER, [entry(conditions=[condition("Ready")])])
    body = body_of(info.value)
    assert body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["reason"] == "FieldValueForbidden"
    assert body["details"]["causes"][0]["field"] == "status.devices"
    assert body["message"] == (
        'ResourceClaim.resource.k8s.io "c1" is invalid: status.devices: Forbidden: changing status.devices '
        'requires resource="resourceclaims/driver", verb="[associated-node:patch arbitrary-node:patch]" '
        f'permission: resourceclaims.resource.k8s.io "{DRIVER}" is forbidden: User "{fake.user}" cannot '
        'associated-node:patch resource "resourceclaims/driver" in API group "resource.k8s.io" in the '
        f'namespace "{NS}"'
    )
    assert fake.authorizer.asked == [
        f"associated-node:patch driver {NS}/{DRIVER}",
        f"arbitrary-node:patch driver {NS}/{DRIVER}",
    ]
    fake.authorizer.granted.add(f"associated-node:patch driver {NS}/{DRIVER}")
    apply(rapi, DRIVER, [entry(conditions=[condition("Ready")])])
    assert devices_of(fake)[0]["conditions"][0]["type"] == "Ready"


def test_only_drivers_whose_entries_change_are_checked(fake, rapi, other_rapi):
    """``getModifiedDrivers``: an unchanged driver is not asked about; a no-op write is not checked."""
    allocated(fake)
    apply(other_rapi, OTHER, [entry(OTHER, "eth2", conditions=[condition("Ready")])])
    fake.authorizer = Grants(f"associated-node:patch driver {NS}/{DRIVER}")
    apply(rapi, DRIVER, [entry(conditions=[condition("Ready")])])
    assert fake.authorizer.asked == [f"associated-node:patch driver {NS}/{DRIVER}"]
    fake.authorizer.granted.clear()
    fake.authorizer.asked.clear()
    apply(rapi, DRIVER, [entry(conditions=[condition("Ready")])])  # the same again: nothing changes
    assert fake.authorizer.asked == []


def test_an_allocation_not_bound_to_one_node_needs_arbitrary_node(fake, rapi):
    """``nodeNameFromAllocation``: a selector by label names no node, so associated-node is not
    even asked."""
    by_label = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]}
    allocated(fake, selector=by_label)
    fake.authorizer = Grants(f"associated-node:patch driver {NS}/{DRIVER}")
    with pytest.raises(UnprocessableEntityException) as info:
        apply(rapi, DRIVER, [entry()])
    assert 'verb="[arbitrary-node:patch]"' in body_of(info.value)["message"]
    assert fake.authorizer.asked == [f"arbitrary-node:patch driver {NS}/{DRIVER}"]
    fake.authorizer.granted.add(f"arbitrary-node:patch driver {NS}/{DRIVER}")
    apply(rapi, DRIVER, [entry()])


def test_a_token_without_the_node_name_extra_is_not_associated(fake, rapi):
    """``saAssociatedWithAllocatedNode``: exactly one node-name extra, equal to the allocation's."""
    allocated(fake)
    fake.user_extra.clear()
    fake.authorizer = Grants(f"associated-node:patch driver {NS}/{DRIVER}")
    with pytest.raises(UnprocessableEntityException):
        apply(rapi, DRIVER, [entry()])


def test_changing_the_allocation_needs_the_binding_verb(fake, api_client):
    """``AuthorizedForBinding``: the request verb on resourceclaims/binding, cluster-wide."""
    allocated(fake)
    fake.authorizer = Grants()
    rapi = client.ResourceV1Api(api_client)
    with pytest.raises(UnprocessableEntityException) as info:
        rapi.patch_namespaced_resource_claim_status(
            "c1", NS, {"status": {"allocation": None, "reservedFor": None}}, _content_type=MERGE_PATCH
        )
    assert (
        'changing status.allocation or status.reservedFor requires resource="resourceclaims/binding", verb="patch"'
        in (body_of(info.value)["message"])
    )
    assert fake.authorizer.asked == ["patch binding /"]


def test_before_1_36_only_the_front_door_is_checked(fake, rapi):
    allocated(fake)
    fake.set_feature_gate("DRAResourceClaimGranularStatusAuthorization", False)
    fake.authorizer = Grants()
    apply(rapi, DRIVER, [entry()])
    assert fake.authorizer.asked == []


# -- validateResourceClaimStatusUpdate ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("device", "error"),
    [
        (
            entry(device="eth9"),
            # structured.SharedDeviceID is a fmt.Stringer: field.ErrorBody prints it unquoted.
            f"status.devices[0]: Invalid value: {DRIVER}/{NODE}/eth9: must be an allocated device in the claim",
        ),
        (
            entry(conditions=[condition("Ready"), condition("Ready")]),
            'status.devices[0].conditions[1].type: Duplicate value: "Ready"',
        ),
        (
            entry(conditions=[condition("Ready", reason="not valid!")]),
            'status.devices[0].conditions[0].reason: Invalid value: "not valid!": a condition reason must start '
            "with alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and "
            "must end with an alphanumeric character or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName',  or "
            "'ReasonA,ReasonB',  or 'ReasonA:ReasonB', regex used for validation is "
            "'[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')",
        ),
        (
            entry(conditions=[condition("Ready", status="Maybe")]),
            'status.devices[0].conditions[0].status: Unsupported value: "Maybe": supported values: "False", '
            '"True", "Unknown"',
        ),
        (
            entry(conditions=[condition(f"C{i}") for i in range(9)]),
            "status.devices[0].conditions: Too many: 9: must have at most 8 items",
        ),
        (entry(data={"x": "y" * 10240}), "status.devices[0].data: Too long: must have at most 10240 bytes"),
        (
            entry(data=["not", "an", "object"]),
            'status.devices[0].data: Invalid value: "<value omitted>": must be a valid JSON object',
        ),
        (
            entry(networkData={"ips": ["10.0.0.5"]}),
            'status.devices[0].networkData.ips[0]: Invalid value: "10.0.0.5": must be a valid address in CIDR '
            "form, (e.g. 10.9.8.7/24 or 2001:db8::1/64)",
        ),
        (
            entry(networkData={"ips": ["fd00:0::5/64"]}),
            'status.devices[0].networkData.ips[0]: Invalid value: "fd00:0::5/64": must be in canonical form ("fd00::5/64")',
        ),
        (
            entry(networkData={"ips": ["10.0.0.5/24", "10.0.0.5/24"]}),
            'status.devices[0].networkData.ips[1]: Duplicate value: "10.0.0.5/24"',
        ),
        (
            entry(networkData={"ips": [f"10.0.0.{i}/24" for i in range(17)]}),
            "status.devices[0].networkData.ips: Too many: 17: must have at most 16 items",
        ),
        (
            entry(networkData={"interfaceName": "n" * 257}),
            "status.devices[0].networkData.interfaceName: Too long: must have at most 256 bytes",
        ),
    ],
    ids=[
        "not-allocated",
        "duplicate-condition",
        "reason-format",
        "condition-status",
        "too-many-conditions",
        "data-size",
        "data-object",
        "ip-not-cidr",
        "ip-not-canonical",
        "ip-duplicate",
        "too-many-ips",
        "interface-name",
    ],
)
def test_status_validation_is_upstreams(fake, rapi, device, error):
    allocated(fake)
    with pytest.raises(UnprocessableEntityException) as info:
        apply(rapi, DRIVER, [device])
    assert body_of(info.value)["message"] == f'ResourceClaim.resource.k8s.io "c1" is invalid: {error}'


def test_a_leading_zero_ipv4_is_sloppy_parsed_then_not_canonical(fake, rapi):
    """``ParseCIDRSloppy`` accepts 010.0.0.5; the canonical check refuses it."""
    allocated(fake)
    with pytest.raises(UnprocessableEntityException) as info:
        apply(rapi, DRIVER, [entry(networkData={"ips": ["010.0.0.5/24"]})])
    assert 'must be in canonical form ("10.0.0.5/24")' in body_of(info.value)["message"]


# -- field validation of JSON bodies (apiserver handlers) -------------------------------------------
# The kubernetes client 37.x refuses unknown fields in typed bodies itself (pydantic, extra
# forbidden), so these requests are made with urllib: the server side is what is tested here.
def send(fake: FakeApiServer, method: str, path: str, body: dict, query: str = "") -> tuple[int, dict, list[str]]:
    request = urllib.request.Request(
        f"{fake.url}{path}{'?' + query if query else ''}",
        data=json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"Bearer {fake.token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read()), response.headers.get_all("Warning") or []
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), err.headers.get_all("Warning") or []


SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def slice_body(**device_extra) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s1"},
        "spec": {
            "driver": DRIVER,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "eth1", **device_extra}],
            "shinyNewField": True,
        },
    }


def test_unknown_fields_are_dropped_with_a_warning_by_default(fake):
    code, _, warnings = send(fake, "POST", SLICES, slice_body(speed="fast"))
    assert code == 201
    assert warnings == [
        '299 - "unknown field \\"spec.devices[0].speed\\""',
        '299 - "unknown field \\"spec.shinyNewField\\""',
    ]
    stored = fake.get_slice("s1")
    assert "shinyNewField" not in stored["spec"] and stored["spec"]["devices"] == [{"name": "eth1"}]


def test_unknown_fields_under_strict_are_a_400_and_ignore_is_silent(fake):
    code, body, _ = send(fake, "POST", SLICES, slice_body(), "fieldValidation=Strict")
    assert code == 400 and body["message"] == 'strict decoding error: unknown field "spec.shinyNewField"'
    assert fake.get_slice("s1") is None
    code, _, warnings = send(fake, "POST", SLICES, slice_body(), "fieldValidation=Ignore")
    assert code == 201 and warnings == []
    assert "shinyNewField" not in fake.get_slice("s1")["spec"]
    code, body, _ = send(fake, "PUT", f"{SLICES}/s1", slice_body(), "fieldValidation=Loud")
    assert code == 422 and 'fieldValidation: Unsupported value: "Loud"' in body["message"]


def test_unknown_fields_of_a_claim_status_update_are_dropped(fake):
    allocated(fake)
    current = fake.get_claim(NS, "c1")
    current["status"]["devices"] = [entry(conditions=[condition("Ready")], color="blue")]
    code, _, warnings = send(fake, "PUT", f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/c1/status", current)
    assert code == 200 and warnings == ['299 - "unknown field \\"status.devices[0].color\\""']
    assert "color" not in devices_of(fake)[0]


def test_list_map_merge_order_is_structured_merge_diffs():
    """``mergingWalker.visitListItems``: live-only items keep their place, applied items come in
    applied order (shared ones too)."""
    from tests.fakes.apiserver import smd

    conditions = smd.ListMap(("type",), smd.CONDITION)

    def types(live, applied):
        merged = smd.merge([{"type": t} for t in live], [{"type": t} for t in applied], conditions)
        return [c["type"] for c in merged]

    assert types("abc", "cda") == ["b", "c", "d", "a"]
    assert types("ab", "x") == ["a", "b", "x"]
    assert types("", "ba") == ["b", "a"]


def test_data_size_is_that_of_gos_json_marshal(fake, rapi):
    """``validateRawExtension`` measures ``len(Raw)``, and a server-side apply rebuilds ``Raw`` with
    ``json.Marshal`` (apimachinery ``runtime/converter.go`` ``fromUnstructured``): each ``<``, ``>``,
    ``&`` is ``\\u003c`` (6 bytes); non-ASCII stays raw UTF-8 (Python's ``ensure_ascii`` would not)."""
    from tests.fakes.apiserver.gojson import marshal, marshal_size

    assert (
        marshal({"b": "<&>", "a": [1, 2.5, 1e-7, 1e21, 1.0]})
        == '{"a":[1,2.5,1e-7,1e+21,1],"b":"\\u003c\\u0026\\u003e"}'
    )
    assert marshal_size({"d": "é\u2028\n"}) == len('{"d":"') + 2 + 6 + 2 + 2
    allocated(fake)
    with pytest.raises(UnprocessableEntityException) as info:
        apply(rapi, DRIVER, [entry(data={"domain": "<" * 9000})])  # 9 KB as sent, 54 KB re-encoded
    assert body_of(info.value)["message"] == (
        'ResourceClaim.resource.k8s.io "c1" is invalid: status.devices[0].data: Too long: must have at most 10240 bytes'
    )
    apply(rapi, DRIVER, [entry(data={"domain": "é" * 5000})])  # 10,000 bytes of UTF-8, 30,000 if \u-escaped
    assert devices_of(fake)[0]["data"] == {"domain": "é" * 5000}
