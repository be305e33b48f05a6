"""CustomResourceDefinitions served by the fake API server (crds.py, crd_schema.py, crd_status.py,
tables.py), driven through the real kubernetes client (``CustomObjectsApi``, ``ApisApi``).

The CRD under test is written here, after docs' design of the AddressReservation (POOLS.md
section 2: cluster-scoped, ``dracni.io/v1alpha1``, printer columns), so that these tests do not
depend on the shipped file; one test loads ``spec/crds/addressreservations.dracni.io.yaml`` when it
exists."""

from __future__ import annotations

import json
import os

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import (
    ApiException,
    ConflictException,
    NotFoundException,
    UnprocessableEntityException,
)

from tests.fakes.apiserver import ApiStatusError, FakeApiServer
from tests.kubeclient import client_for, serving

GROUP, VERSION, PLURAL = "dracni.io", "v1alpha1", "addressreservations"
SHIPPED = "spec/crds/addressreservations.dracni.io.yaml"
TABLE_ACCEPT = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)

_REF = {
    "type": "object",
    "required": ["namespace", "name", "uid"],
    "properties": {"namespace": {"type": "string"}, "name": {"type": "string"}, "uid": {"type": "string"}},
}
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Cluster",
        "names": {
            "plural": PLURAL,
            "singular": "addressreservation",
            "kind": "AddressReservation",
            "listKind": "AddressReservationList",
            "shortNames": ["ar"],
            "categories": ["dracni"],
        },
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "additionalPrinterColumns": [
                    {"name": "Pool", "type": "string", "jsonPath": ".spec.pool"},
                    {"name": "Address", "type": "string", "jsonPath": ".spec.address"},
                    {"name": "Namespace", "type": "string", "jsonPath": ".spec.claim.namespace"},
                    {"name": "Claim", "type": "string", "jsonPath": ".spec.claim.name"},
                    {"name": "Node", "type": "string", "jsonPath": ".spec.node"},
                    {"name": "Keep", "type": "boolean", "jsonPath": ".spec.keep", "priority": 1},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "required": ["spec"],
                        "properties": {
                            "apiVersion": {"type": "string"},
                            "kind": {"type": "string"},
                            "metadata": {"type": "object"},
                            "spec": {
                                "type": "object",
                                "required": ["pool", "address", "node", "claim"],
                                "properties": {
                                    "pool": {
                                        "type": "string",
                                        "maxLength": 40,
                                        "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                                    },
                                    "address": {"type": "string", "maxLength": 39},
                                    "node": {"type": "string"},
                                    "claim": _REF,
                                    "request": {"type": "string"},
                                    "device": {"type": "string"},
                                    "pod": _REF,
                                    "keep": {"type": "boolean"},
                                    "family": {"type": "string", "enum": ["IPv4", "IPv6"]},
                                    "prefix": {"type": "integer", "minimum": 0, "maximum": 128},
                                    "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                                    "seen": {"type": "string", "format": "date-time"},
                                    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}

#: A namespaced one with a status subresource and two served versions.
WIDGETS = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": version,
                "served": True,
                "storage": version == "v1",
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                            "status": {
                                "type": "object",
                                "required": ["phase"],
                                "properties": {"phase": {"type": "string"}},
                            },
                        },
                    }
                },
            }
            for version in ("v1beta1", "v1")
        ],
    },
}


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("crds"), "node-1", "node-2", crds=[CRD, WIDGETS]) as server:
        yield server


@pytest.fixture
def custom(api_client) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


@pytest.fixture(autouse=True)
def _clean(fake):
    """Each test starts without custom objects (the server is the module's)."""
    yield
    for plural in (PLURAL, "widgets"):
        for obj in fake.list_custom_objects(plural):
            fake._store.remove(plural, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


def reservation(address: str, node: str = "node-1", pool: str = "lan", **spec) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "AddressReservation",
        "metadata": {"name": f"{pool}.{address}", "labels": {"dracni.io/pool": pool, "dracni.io/node": node}},
        "spec": {
            "pool": pool,
            "address": address,
            "node": node,
            "claim": {"namespace": "ns", "name": "c", "uid": "u-1"},
            **spec,
        },
    }


def create(custom: client.CustomObjectsApi, body: dict) -> dict:
    return custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)


def body_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


def raw_get(api_client: client.ApiClient, path: str, accept: str, **query) -> dict:
    response = api_client.call_api(
        *api_client.param_serialize(
            method="GET",
            resource_path=path,
            query_params=list(query.items()),
            header_params={"Accept": accept},
            auth_settings=["BearerToken"],
        )
    )
    return json.loads(response.read())


# -- the generic verbs -----------------------------------------------------------------------------
def test_create_get_list_by_label_and_delete_with_preconditions(fake, custom):
    created = create(custom, reservation("10.10.1.7"))
    meta = created["metadata"]
    assert created["apiVersion"] == f"{GROUP}/{VERSION}" and created["kind"] == "AddressReservation"
    assert meta["uid"] and meta["generation"] == 1 and meta["resourceVersion"] == fake.resource_version
    assert "namespace" not in meta  # cluster-scoped
    assert custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, "lan.10.10.1.7") == created
    create(custom, reservation("10.10.1.8", node="node-2"))

    listed = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, label_selector="dracni.io/node=node-1")
    assert listed["kind"] == "AddressReservationList" and listed["apiVersion"] == f"{GROUP}/{VERSION}"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["lan.10.10.1.7"]
    by_name = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, field_selector="metadata.name=lan.10.10.1.8")
    assert [i["metadata"]["name"] for i in by_name["items"]] == ["lan.10.10.1.8"]
    with pytest.raises(ApiException) as info:  # a custom resource has no spec field labels
        custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, field_selector="spec.node=node-1")
    assert info.value.status == 400

    with pytest.raises(ConflictException) as info:
        custom.delete_cluster_custom_object(
            GROUP, VERSION, PLURAL, "lan.10.10.1.7", body=client.V1DeleteOptions(preconditions={"uid": "other"})
        )
    assert body_of(info.value)["message"] == (
        f'Operation cannot be fulfilled on {PLURAL}.{GROUP} "lan.10.10.1.7": Precondition failed: '
        f"UID in precondition: other, UID in object meta: {meta['uid']}"
    )
    with pytest.raises(ConflictException):
        custom.delete_cluster_custom_object(
            GROUP, VERSION, PLURAL, "lan.10.10.1.7", body=client.V1DeleteOptions(preconditions={"resourceVersion": "1"})
        )
    deleted = custom.delete_cluster_custom_object(
        GROUP, VERSION, PLURAL, "lan.10.10.1.7", body=client.V1DeleteOptions(preconditions={"uid": meta["uid"]})
    )
    assert deleted["metadata"]["name"] == "lan.10.10.1.7"
    with pytest.raises(NotFoundException) as info:
        custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, "lan.10.10.1.7")
    assert body_of(info.value)["message"] == f'{PLURAL}.{GROUP} "lan.10.10.1.7" not found'

    custom.delete_collection_cluster_custom_object(GROUP, VERSION, PLURAL, label_selector="dracni.io/pool=lan")
    assert fake.list_custom_objects(PLURAL) == []


def test_create_of_a_taken_name_is_already_exists(fake, custom):
    create(custom, reservation("10.10.1.7"))
    with pytest.raises(ConflictException) as info:
        create(custom, reservation("10.10.1.7", node="node-2"))
    status = body_of(info.value)
    assert (status["code"], status["reason"]) == (409, "AlreadyExists")
    assert status["message"] == f'{PLURAL}.{GROUP} "lan.10.10.1.7" already exists'
    assert status["details"] == {"name": "lan.10.10.1.7", "group": GROUP, "kind": PLURAL}
    assert fake.get_custom_object(PLURAL, "lan.10.10.1.7")["spec"]["node"] == "node-1"


def test_update_with_a_stale_resource_version_is_a_conflict(fake, custom):
    stale = create(custom, reservation("10.10.1.7"))
    moved = {**stale, "spec": {**stale["spec"], "node": "node-2"}}
    updated = custom.replace_cluster_custom_object(GROUP, VERSION, PLURAL, "lan.10.10.1.7", moved)
    assert updated["spec"]["node"] == "node-2" and updated["metadata"]["generation"] == 2
    with pytest.raises(ConflictException) as info:
        custom.replace_cluster_custom_object(GROUP, VERSION, PLURAL, "lan.10.10.1.7", stale)
    assert body_of(info.value)["reason"] == "Conflict"
    assert body_of(info.value)["message"].endswith(
        "the object has been modified; please apply your changes to the latest version and try again"
    )
    patched = custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, "lan.10.10.1.7", {"spec": {"keep": True}})
    assert patched["spec"]["keep"] is True and patched["metadata"]["generation"] == 3
    labelled = custom.patch_cluster_custom_object(
        GROUP, VERSION, PLURAL, "lan.10.10.1.7", {"metadata": {"labels": {"x": "y"}}}
    )
    assert labelled["metadata"]["generation"] == 3  # metadata is not spec


def test_unknown_fields_are_pruned(fake, custom):
    body = reservation("10.10.1.7", extra={"anything": {"goes": [1]}})
    body["spec"]["bogus"] = 1
    body["spec"]["claim"]["color"] = "red"
    body["top"] = True
    body["spec"]["request"] = None  # a null of a non-nullable field goes too
    created = create(custom, body)
    assert "top" not in created and "bogus" not in created["spec"] and "request" not in created["spec"]
    assert created["spec"]["claim"] == {"namespace": "ns", "name": "c", "uid": "u-1"}
    assert created["spec"]["extra"] == {"anything": {"goes": [1]}}  # x-kubernetes-preserve-unknown-fields
    record = fake.requests_to("POST")[-1]
    assert sorted(record.warnings) == [
        'unknown field "spec.bogus"',
        'unknown field "spec.claim.color"',
        'unknown field "top"',
    ]
    strict = reservation("10.10.1.9")
    strict["spec"]["bogus"] = 1
    with pytest.raises(ApiException) as info:
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, strict, field_validation="Strict")
    assert info.value.status == 400
    assert body_of(info.value)["message"] == 'strict decoding error: unknown field "spec.bogus"'
    assert fake.get_custom_object(PLURAL, "lan.10.10.1.9") is None


def test_schema_violations_are_422_with_field_paths(fake, custom):
    body = reservation("10.10.1.7", family="IPv5", prefix=129, tags=["a", "b", "c"], seen="yesterday", keep="yes")
    body["spec"]["pool"] = "Not_A_Label"
    body["metadata"]["name"] = "bad.1"
    del body["spec"]["node"]
    with pytest.raises(UnprocessableEntityException) as info:
        create(custom, body)
    status = body_of(info.value)
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert status["details"]["group"] == GROUP and status["details"]["kind"] == "AddressReservation"
    causes = {c["field"]: (c["reason"], c["message"]) for c in status["details"]["causes"]}
    assert causes == {
        "spec.node": ("FieldValueRequired", "Required value"),
        "spec.tags": ("FieldValueTooMany", "Too many: 3: must have at most 2 items"),
        "spec.seen": (
            "FieldValueInvalid",
            'Invalid value: "yesterday": spec.seen in body must be of type date-time: "yesterday"',
        ),
        "spec.prefix": (
            "FieldValueInvalid",
            "Invalid value: 129: spec.prefix in body should be less than or equal to 128",
        ),
        "spec.pool": (
            "FieldValueInvalid",
            "Invalid value: \"Not_A_Label\": spec.pool in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
        ),
        "spec.keep": (
            "FieldValueInvalid",
            'Invalid value: "string": spec.keep in body must be of type boolean: "string"',
        ),
        "spec.family": ("FieldValueNotSupported", 'Unsupported value: "IPv5": supported values: "IPv4", "IPv6"'),
    }
    assert status["message"].startswith(f'AddressReservation.{GROUP} "bad.1" is invalid: [spec.node: Required value, ')

    too_long = reservation("10.10.1.7", pool="p" * 41)
    with pytest.raises(UnprocessableEntityException) as info:
        create(custom, too_long)
    assert [(c["field"], c["message"]) for c in body_of(info.value)["details"]["causes"]] == [
        ("spec.pool", "Too long: must have at most 40 bytes")
    ]
    with pytest.raises(UnprocessableEntityException) as info:
        create(custom, {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AddressReservation", "metadata": {"name": "x"}})
    assert [c["field"] for c in body_of(info.value)["details"]["causes"]] == ["spec"]
    assert fake.list_custom_objects(PLURAL) == []

    good = create(custom, reservation("10.10.1.7"))
    with pytest.raises(UnprocessableEntityException):  # updates are validated too
        custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, "lan.10.10.1.7", {"spec": {"prefix": -1}})
    assert fake.get_custom_object(PLURAL, "lan.10.10.1.7") == good


# -- kubectl get ------------------------------------------------------------------------------------
def test_table_output_has_the_printer_columns(fake, custom, api_client):
    create(custom, reservation("10.10.1.7", keep=True))
    create(custom, reservation("10.10.1.8", node="node-2"))
    path = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
    table = raw_get(api_client, path, TABLE_ACCEPT)
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"]["resourceVersion"] == fake.resource_version
    columns = [(c["name"], c["type"], c["format"], c["priority"]) for c in table["columnDefinitions"]]
    assert columns == [
        ("Name", "string", "name", 0),
        ("Pool", "string", "", 0),
        ("Address", "string", "", 0),
        ("Namespace", "string", "", 0),
        ("Claim", "string", "", 0),
        ("Node", "string", "", 0),
        ("Keep", "boolean", "", 1),
        ("Age", "date", "", 0),
    ]
    rows = [row["cells"] for row in table["rows"]]
    ages = [cells.pop() for cells in rows]
    assert rows == [
        ["lan.10.10.1.7", "lan", "10.10.1.7", "ns", "c", "node-1", True],
        ["lan.10.10.1.8", "lan", "10.10.1.8", "ns", "c", "node-2", None],
    ]
    assert all(age.endswith("s") and age[:-1].isdigit() for age in ages)  # HumanDuration: "0s"
    row_object = table["rows"][0]["object"]
    assert row_object["kind"] == "PartialObjectMetadata" and row_object["metadata"]["name"] == "lan.10.10.1.7"

    one = raw_get(api_client, f"{path}/lan.10.10.1.8", TABLE_ACCEPT, includeObject="Object")
    assert [row["cells"][:6] for row in one["rows"]] == [["lan.10.10.1.8", "lan", "10.10.1.8", "ns", "c", "node-2"]]
    assert one["rows"][0]["object"]["spec"]["node"] == "node-2"
    # Plain JSON when the client does not ask for a Table.
    assert raw_get(api_client, path, "application/json")["kind"] == "AddressReservationList"


def test_a_crd_without_printer_columns_gets_age(fake, custom, api_client):
    fake.add_namespace("w")
    body = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "a"}, "spec": {}}
    custom.create_namespaced_custom_object("example.com", "v1", "w", "widgets", body)
    table = raw_get(api_client, "/apis/example.com/v1/namespaces/w/widgets", TABLE_ACCEPT)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Age"]
    assert table["rows"][0]["cells"][0] == "a"


# -- watch, status, versions --------------------------------------------------------------------------
def test_watch_of_a_custom_resource(fake, custom):
    start = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["metadata"]["resourceVersion"]
    create(custom, reservation("10.10.1.7"))
    create(custom, reservation("10.10.1.8", node="node-2"))
    custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, "lan.10.10.1.7", {"spec": {"node": "node-2"}})
    custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "lan.10.10.1.8")
    events = list(
        watch.Watch().stream(
            custom.list_cluster_custom_object,
            GROUP,
            VERSION,
            PLURAL,
            resource_version=start,
            label_selector="dracni.io/node=node-2",
            timeout_seconds=1,
        )
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "lan.10.10.1.8"),
        ("DELETED", "lan.10.10.1.8"),
    ]
    events = list(
        watch.Watch().stream(
            custom.list_cluster_custom_object, GROUP, VERSION, PLURAL, resource_version=start, timeout_seconds=1
        )
    )
    assert [e["type"] for e in events] == ["ADDED", "ADDED", "MODIFIED", "DELETED"]
    assert events[0]["object"]["kind"] == "AddressReservation"


def test_status_subresource_and_served_versions(fake, custom):
    fake.add_namespace("w")
    body = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "a"},
        "spec": {"size": 1},
        "status": {"phase": "x"},
    }
    created = custom.create_namespaced_custom_object("example.com", "v1", "w", "widgets", body)
    assert "status" not in created  # create drops status
    with pytest.raises(UnprocessableEntityException) as info:
        custom.patch_namespaced_custom_object_status("example.com", "v1", "w", "widgets", "a", {"status": {"other": 1}})
    assert [c["field"] for c in body_of(info.value)["details"]["causes"]] == ["status.phase"]
    patched = custom.patch_namespaced_custom_object_status(
        "example.com", "v1", "w", "widgets", "a", {"status": {"phase": "Ready"}}
    )
    assert patched["status"] == {"phase": "Ready"} and patched["metadata"]["generation"] == 1
    assert fake.set_custom_status("widgets", "a", {"phase": "Gone"}, "w")["status"] == {"phase": "Gone"}
    # v1beta1 is served too, from the same objects (nop conversion: only apiVersion differs).
    old = custom.get_namespaced_custom_object("example.com", "v1beta1", "w", "widgets", "a")
    assert old["apiVersion"] == "example.com/v1beta1" and old["status"] == {"phase": "Gone"}
    with pytest.raises(NotFoundException):
        custom.get_namespaced_custom_object("example.com", "v2", "w", "widgets", "a")


# -- garbage collector ------------------------------------------------------------------------------
def test_the_garbage_collector_deletes_reservations_with_their_node(fake, custom):
    fake.add_node("node-3")
    node = fake.get_node("node-3")
    owner = {"apiVersion": "v1", "kind": "Node", "name": "node-3", "uid": node["metadata"]["uid"]}
    body = reservation("10.10.1.30", node="node-3")
    body["metadata"]["ownerReferences"] = [owner]
    create(custom, body)
    other = reservation("10.10.1.31", node="node-1")
    node_1 = fake.get_node("node-1")["metadata"]["uid"]
    other["metadata"]["ownerReferences"] = [{**owner, "name": "node-1", "uid": node_1}]
    create(custom, other)
    start = fake.resource_version
    fake.delete_node("node-3")
    assert fake.get_custom_object(PLURAL, "lan.10.10.1.30") is None
    assert fake.get_custom_object(PLURAL, "lan.10.10.1.31") is not None  # another node's
    events = list(
        watch.Watch().stream(
            custom.list_cluster_custom_object, GROUP, VERSION, PLURAL, resource_version=start, timeout_seconds=1
        )
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("DELETED", "lan.10.10.1.30")]


# -- discovery and installation ---------------------------------------------------------------------
def test_discovery_lists_the_crd_groups(fake, api_client):
    groups = {g.name: g for g in client.ApisApi(api_client).get_api_versions().groups}
    assert list(groups)[:1] == ["resource.k8s.io"] and {GROUP, "example.com"} <= set(groups)
    assert groups[GROUP].preferred_version.group_version == f"{GROUP}/{VERSION}"
    assert [v.version for v in groups["example.com"].versions] == ["v1", "v1beta1"]
    listing = raw_get(api_client, f"/apis/{GROUP}/{VERSION}", "application/json")
    [entry] = listing["resources"]
    assert entry["name"] == PLURAL and entry["namespaced"] is False and entry["kind"] == "AddressReservation"
    assert entry["singularName"] == "addressreservation" and entry["shortNames"] == ["ar"]
    assert entry["categories"] == ["dracni"]
    assert {"create", "get", "list", "watch", "update", "patch", "delete", "deletecollection"} == set(entry["verbs"])
    widgets = raw_get(api_client, "/apis/example.com/v1", "application/json")["resources"]
    assert [(r["name"], r["namespaced"]) for r in widgets] == [("widgets", True), ("widgets/status", True)]


def test_install_and_uninstall(tmp_path):
    with FakeApiServer(tmp_path / "api") as bare:
        assert bare.crds == []
        with pytest.raises(ValueError, match="CustomResourceDefinition"):
            bare.install_crd({"kind": "Pod"})
        bare.install_crd(CRD)
        assert [c["metadata"]["name"] for c in bare.crds] == [f"{PLURAL}.{GROUP}"]
        res = bare._store.resource(PLURAL)
        with bare._store.lock:
            bare._store.create(res, "", reservation("10.0.0.1"), ("t", "Update", ""))
            with pytest.raises(ApiStatusError) as err:
                bare._store.create(res, "", reservation("10.0.0.1"), ("t", "Update", ""))
        assert err.value.reason == "AlreadyExists"
        assert bare.uninstall_crd(f"{PLURAL}.{GROUP}") == 1
        assert bare.crds == [] and bare.list_custom_objects(PLURAL) == []
        assert bare.internal_errors == []


@pytest.mark.skipif(not os.path.exists(SHIPPED), reason=f"{SHIPPED} is not there yet (written in parallel)")
def test_the_shipped_crd_is_served(tmp_path):
    with open(SHIPPED, encoding="utf-8") as fh:
        [crd] = [d for d in yaml.safe_load_all(fh) if d]
    with serving(tmp_path, "node-1", crds=[crd]) as server:
        api = client_for(server.kubeconfig_path)
        try:
            custom = client.CustomObjectsApi(api)
            created = create(custom, reservation("10.10.1.7"))
            assert created["spec"]["address"] == "10.10.1.7"
            table = raw_get(api, f"/apis/{GROUP}/{VERSION}/{PLURAL}", TABLE_ACCEPT)
            names = [c["name"] for c in table["columnDefinitions"]]
            assert names[:1] == ["Name"] and {"Pool", "Address", "Namespace", "Claim", "Node", "Age"} <= set(names)
        finally:
            api.close()
