"""CustomResourceDefinitions served by the fake API server (crds.py, crd_status.py, tables.py,
discovery.py, gc.py), through the real kubernetes client: ``kubectl get``'s Tables, watch, the
status subresource and served versions, the garbage collector's cascade from a Node, discovery,
installation, and the shipped AddressReservation CRD."""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import (
    NotFoundException,
    UnprocessableEntityException,
)

from tests.fakes.apiserver import ApiStatusError, FakeApiServer
from tests.fakes.crd_examples import (
    CRD,
    GROUP,
    PLURAL,
    SHIPPED,
    TABLE_ACCEPT,
    VERSION,
    body_of,
    create,
    raw_get,
    reservation,
)
from tests.kubeclient import client_for, serving


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
    # A read through another version leaves the stored object as it was (routes._get).
    assert [w["apiVersion"] for w in fake.list_custom_objects("widgets", "w")] == ["example.com/v1"]
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


def test_the_shipped_crd_is_served(tmp_path):
    with open(SHIPPED, encoding="utf-8") as fh:
        [crd] = [d for d in yaml.safe_load_all(fh) if d]
    with serving(tmp_path, "node-1", crds=[crd]) as server:
        api = client_for(server.kubeconfig_path)
        try:
            custom = client.CustomObjectsApi(api)
            created = create(custom, reservation("10.10.1.7"))
            assert created["spec"]["address"] == "10.10.1.7"
            with pytest.raises(UnprocessableEntityException) as info:
                custom.patch_cluster_custom_object(
                    GROUP, VERSION, PLURAL, "lan.10.10.1.7", {"spec": {"address": "10.10.1.8"}}
                )
            assert [c["field"] for c in body_of(info.value)["details"]["causes"]] == ["spec.address"]
            table = raw_get(api, f"/apis/{GROUP}/{VERSION}/{PLURAL}", TABLE_ACCEPT)
            names = [c["name"] for c in table["columnDefinitions"]]
            assert names[:1] == ["Name"] and {"Pool", "Address", "Namespace", "Claim", "Node", "Age"} <= set(names)
        finally:
            api.close()
