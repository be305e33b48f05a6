"""The fake API server's garbage collector (tests/fakes/apiserver/gc.py), seen through the real
kubernetes client: kube-controller-manager's ownerReference cascade (k8s
pkg/controller/garbagecollector garbagecollector.go ``attemptToDeleteItem``,
``attemptToOrphanWorker``; graph_builder.go) and the API server's ``DeleteOptions``
(``propagationPolicy``)."""

from __future__ import annotations

import json

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import UnprocessableEntityException

from tests.fakes.apiserver import FakeApiServer
from tests.kubeclient import client_for, serving

NODE_A = "node-a"
NODE_B = "node-b"
DRIVER = "a.dracni.io"
NS = "team-1"
NS2 = "team-2"


@pytest.fixture
def fake(tmp_path):
    with serving(tmp_path, namespaces=("default", NS, NS2)) as server:
        yield server


def ref(kind: str, obj: dict, api_version: str = "v1", uid: str | None = None, **extra) -> dict:
    """An owner reference to ``obj`` (a dict as the fake's helpers return), ``uid`` overriding."""
    meta = obj["metadata"]
    return {"apiVersion": api_version, "kind": kind, "name": meta["name"], "uid": uid or meta["uid"], **extra}


def node_ref(node: dict, **extra) -> dict:
    # As dracni's slices carry them (controller: true), but written from the API's shape.
    return ref("Node", node, controller=True, **extra)


def slice_ref(obj: client.V1ResourceSlice) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "name": obj.metadata.name,
        "uid": obj.metadata.uid,
    }


def slice_obj(name: str, owners: list[dict] | None = None, node: str = NODE_A, finalizers=None) -> dict:
    metadata: dict = {"name": name}
    if owners:
        metadata["ownerReferences"] = owners
    if finalizers:
        metadata["finalizers"] = finalizers
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": f"{node}-{name}", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "eth1"}],
        },
    }


def claim_obj(name: str, namespace: str, owners: list[dict]) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": owners},
        "spec": {"devices": {"requests": [{"name": "net", "exactly": {"deviceClassName": "dracni.io"}}]}},
    }


def slice_events(rapi: client.ResourceV1Api, since: str) -> list[tuple[str, str]]:
    """The slices' watch events after ``since``, as ``(type, name)``."""
    stream = watch.Watch().stream(rapi.list_resource_slice, resource_version=since, timeout_seconds=1)
    return [(e["type"], e["object"].metadata.name) for e in stream]


def slice_names(rapi: client.ResourceV1Api) -> list[str]:
    return [s.metadata.name for s in rapi.list_resource_slice().items]


def owner_uids(obj) -> list[str]:
    return [r.uid for r in obj.metadata.owner_references or []]


# -- the cascade ---------------------------------------------------------------------------------------
def test_a_deleted_node_takes_its_slices_with_it(fake, rapi):
    node_a, node_b = fake.add_node(NODE_A), fake.add_node(NODE_B)
    for name, node in (("a-0", node_a), ("a-1", node_a), ("b-0", node_b)):
        rapi.create_resource_slice(slice_obj(name, [node_ref(node)], node=node["metadata"]["name"]))
    rapi.create_resource_slice(slice_obj("unowned"))
    start = fake.resource_version

    fake.delete_node(NODE_A)

    # Synchronous in the fake: the cascade's events are in before delete_node returns.
    assert slice_events(rapi, start) == [("DELETED", "a-0"), ("DELETED", "a-1")]
    assert slice_names(rapi) == ["b-0", "unowned"]
    # Each deletion is a write of its own: the node's, then one resourceVersion per slice.
    deleted = [e for e in fake.events() if e["type"] == "DELETED"]
    assert [(e["resource"], e["object"]["metadata"]["name"]) for e in deleted] == [
        ("nodes", NODE_A),
        ("resourceslices", "a-0"),
        ("resourceslices", "a-1"),
    ]
    assert [int(e["object"]["metadata"]["resourceVersion"]) for e in deleted] == [
        int(start) + 1,
        int(start) + 2,
        int(start) + 3,
    ]


def test_a_watch_on_a_node_selector_sees_the_slices_go(fake, rapi):
    node = fake.add_node(NODE_A)
    rapi.create_resource_slice(slice_obj("a-0", [node_ref(node)]))
    start = fake.resource_version
    fake.delete_node(NODE_A)
    events = list(
        watch.Watch().stream(
            rapi.list_resource_slice,
            field_selector=f"spec.nodeName={NODE_A}",
            resource_version=start,
            timeout_seconds=1,
        )
    )
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("DELETED", "a-0")]
    assert owner_uids(events[0]["object"]) == [node["metadata"]["uid"]]  # the last state, as stored


def test_a_dependent_with_another_live_owner_stays_and_loses_the_dangling_reference(fake, rapi):
    node_a, node_b = fake.add_node(NODE_A), fake.add_node(NODE_B)
    rapi.create_resource_slice(slice_obj("shared", [node_ref(node_a), ref("Node", node_b)]))
    start = fake.resource_version

    fake.delete_node(NODE_A)

    # attemptToDeleteItem: a solid owner keeps the item; the dangling reference is patched away.
    assert slice_events(rapi, start) == [("MODIFIED", "shared")]
    assert owner_uids(rapi.read_resource_slice("shared")) == [node_b["metadata"]["uid"]]

    fake.delete_node(NODE_B)
    assert slice_names(rapi) == []


def test_a_reference_whose_uid_is_not_the_live_objects_is_dangling(fake, rapi):
    node_a, node_b = fake.add_node(NODE_A), fake.add_node(NODE_B)
    # The second reference names node-b, live, but by another UID (a node-b deleted and
    # re-registered): isDangling compares UIDs, so node-b does not hold the slice.
    stale = ref("Node", node_b, uid="00000000-0000-0000-0000-000000000000")
    rapi.create_resource_slice(slice_obj("stale", [node_ref(node_a), stale]))
    rapi.create_resource_slice(slice_obj("solid", [node_ref(node_a), ref("Node", node_b)]))

    fake.delete_node(NODE_A)

    assert slice_names(rapi) == ["solid"]
    assert fake.get_node(NODE_B) is not None


def test_only_the_owners_uid_makes_a_dependent(fake, rapi):
    """The graph is keyed by UID: a reference that names the deleted object with another UID is
    not one of its dependents."""
    node_a = fake.add_node(NODE_A)
    fake.add_node(NODE_B)
    other = ref("Node", node_a, uid="00000000-0000-0000-0000-000000000001")
    rapi.create_resource_slice(slice_obj("not-a-dependent", [other]))
    fake.delete_node(NODE_B)
    assert slice_names(rapi) == ["not-a-dependent"]


def test_a_chain_cascades_over_http(fake, rapi):
    top = rapi.create_resource_slice(slice_obj("a"))
    middle = rapi.create_resource_slice(slice_obj("b", [slice_ref(top)]))
    rapi.create_resource_slice(slice_obj("c", [slice_ref(middle)]))
    rapi.create_resource_slice(slice_obj("d"))
    start = fake.resource_version

    deleted = rapi.delete_resource_slice("a")

    assert deleted.metadata.name == "a"
    assert slice_events(rapi, start) == [("DELETED", "a"), ("DELETED", "b"), ("DELETED", "c")]
    assert slice_names(rapi) == ["d"]


@pytest.mark.parametrize("policy", ["Background", "Foreground"])
def test_background_and_foreground_cascade(fake, rapi, policy):
    top = rapi.create_resource_slice(slice_obj("a"))
    rapi.create_resource_slice(slice_obj("b", [slice_ref(top)]))
    rapi.delete_resource_slice("a", propagation_policy=policy)
    assert slice_names(rapi) == []


def test_a_dependent_with_a_finalizer_is_held_then_cascades_further(fake, rapi):
    node = fake.add_node(NODE_A)
    held = rapi.create_resource_slice(slice_obj("held", [node_ref(node)], finalizers=["example.com/hold"]))
    rapi.create_resource_slice(slice_obj("below", [slice_ref(held)]))

    fake.delete_node(NODE_A)

    # A normal delete: its finalizer holds it (deletionTimestamp), its dependent waits.
    now = rapi.read_resource_slice("held")
    assert now.metadata.deletion_timestamp is not None
    assert slice_names(rapi) == ["below", "held"]

    rapi.patch_resource_slice("held", {"metadata": {"finalizers": None}})
    assert slice_names(rapi) == []


def test_namespaced_owners_are_looked_up_in_the_dependents_namespace(fake, rapi):
    pod_1 = fake.add_pod(NS, "p", node=NODE_A)
    pod_2 = fake.add_pod(NS2, "p", node=NODE_A)
    rapi.create_namespaced_resource_claim(NS, claim_obj("owned", NS, [ref("Pod", pod_1)]))
    # A claim of team-2 naming team-1's pod: resolved in team-2, where "p" has another UID.
    rapi.create_namespaced_resource_claim(NS2, claim_obj("mixed", NS2, [ref("Pod", pod_1), ref("Pod", pod_2)]))

    fake.delete_pod(NS, "p")

    assert [c.metadata.name for c in rapi.list_resource_claim_for_all_namespaces().items] == ["mixed"]
    assert owner_uids(rapi.read_namespaced_resource_claim("mixed", NS2)) == [pod_2["metadata"]["uid"]]


def test_a_cluster_scoped_dependent_of_a_namespaced_owner_is_left_alone(fake, rapi):
    node = fake.add_node(NODE_A)
    pod = fake.add_pod(NS, "p", node=NODE_A)
    rapi.create_resource_slice(slice_obj("odd", [node_ref(node), ref("Pod", pod)]))
    fake.delete_node(NODE_A)
    # namespacedOwnerOfClusterScopedObjectErr: the item is forgotten, not collected nor patched.
    assert owner_uids(rapi.read_resource_slice("odd")) == [node["metadata"]["uid"], pod["metadata"]["uid"]]


def test_an_owner_kind_the_server_does_not_serve_keeps_the_dependent(fake, rapi):
    node = fake.add_node(NODE_A)
    unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w", "uid": "u-1"}
    rapi.create_resource_slice(slice_obj("kept", [node_ref(node), unknown]))
    fake.delete_node(NODE_A)
    assert slice_names(rapi) == ["kept"]


def test_deleting_an_object_without_dependents_is_one_write(fake, rapi):
    node = fake.add_node(NODE_A)
    rapi.create_resource_slice(slice_obj("lonely", [node_ref(node)]))
    rapi.create_resource_slice(slice_obj("other"))
    start = fake.resource_version

    deleted = rapi.delete_resource_slice("other")

    assert deleted.metadata.name == "other"
    assert fake.resource_version == str(int(start) + 1)
    assert slice_events(rapi, start) == [("DELETED", "other")]
    assert slice_names(rapi) == ["lonely"]


def test_deletecollection_skips_what_the_cascade_took(fake, rapi):
    top = rapi.create_resource_slice(slice_obj("a"))
    rapi.create_resource_slice(slice_obj("b", [slice_ref(top)]))
    rapi.create_resource_slice(slice_obj("c"))
    start = fake.resource_version
    rapi.delete_collection_resource_slice()  # no 404 for "b", gone with "a" already
    assert slice_events(rapi, start) == [("DELETED", "a"), ("DELETED", "b"), ("DELETED", "c")]
    assert slice_names(rapi) == []


def test_without_the_garbage_collector_dependents_stay(tmp_path):
    server = FakeApiServer(tmp_path / "no-gc", garbage_collector=False).start()
    try:
        node = server.add_node(NODE_A)
        api = client_for(server.kubeconfig_path)
        try:
            rapi = client.ResourceV1Api(api)
            rapi.create_resource_slice(slice_obj("a-0", [node_ref(node)]))
            server.delete_node(NODE_A)
            assert slice_names(rapi) == ["a-0"]
        finally:
            api.close()
        assert server.internal_errors == []
    finally:
        server.close()


# -- propagationPolicy: Orphan -----------------------------------------------------------------------
def test_orphan_keeps_the_dependents_and_drops_their_reference(fake, rapi):
    owner = rapi.create_resource_slice(slice_obj("owner"))
    other = rapi.create_resource_slice(slice_obj("other"))
    rapi.create_resource_slice(slice_obj("only", [slice_ref(owner)]))
    rapi.create_resource_slice(slice_obj("both", [slice_ref(owner), slice_ref(other)]))
    start = fake.resource_version

    answer = rapi.delete_resource_slice("owner", propagation_policy="Orphan")

    # The API server's answer: the owner as the delete left it, held by the orphan finalizer
    # (store.go updateForGracefulDeletionAndFinalizers); the collector then orphans and removes it.
    assert answer.metadata.finalizers == ["orphan"]
    assert answer.metadata.deletion_timestamp is not None
    assert slice_events(rapi, start) == [
        ("MODIFIED", "owner"),
        ("MODIFIED", "both"),
        ("MODIFIED", "only"),
        ("DELETED", "owner"),
    ]
    assert slice_names(rapi) == ["both", "only", "other"]
    assert rapi.read_resource_slice("only").metadata.owner_references is None
    assert owner_uids(rapi.read_resource_slice("both")) == [other.metadata.uid]


def test_orphan_dependents_in_the_body(fake, rapi):
    owner = rapi.create_resource_slice(slice_obj("owner"))
    rapi.create_resource_slice(slice_obj("kept", [slice_ref(owner)]))
    rapi.delete_resource_slice("owner", body=client.V1DeleteOptions(orphan_dependents=True))
    assert slice_names(rapi) == ["kept"]


def test_orphan_with_another_finalizer_orphans_and_waits(fake, rapi):
    owner = rapi.create_resource_slice(slice_obj("owner", finalizers=["example.com/hold"]))
    rapi.create_resource_slice(slice_obj("kept", [slice_ref(owner)]))
    rapi.delete_resource_slice("owner", propagation_policy="Orphan")
    held = rapi.read_resource_slice("owner")
    assert held.metadata.finalizers == ["example.com/hold"]
    assert held.metadata.deletion_timestamp is not None
    assert rapi.read_resource_slice("kept").metadata.owner_references is None
    rapi.patch_resource_slice("owner", {"metadata": {"finalizers": None}})
    assert slice_names(rapi) == ["kept"]


def test_a_collected_dependent_with_the_orphan_finalizer_orphans_its_own(fake, rapi):
    node = fake.add_node(NODE_A)
    middle = rapi.create_resource_slice(slice_obj("middle", [node_ref(node)], finalizers=["orphan"]))
    rapi.create_resource_slice(slice_obj("bottom", [slice_ref(middle)]))
    fake.delete_node(NODE_A)
    # attemptToDeleteItem honours the orphan finalizer: middle goes, bottom stays, unowned.
    assert slice_names(rapi) == ["bottom"]
    assert rapi.read_resource_slice("bottom").metadata.owner_references is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"propagationPolicy": "Sideways"},
            'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Sideways": '
            'supported values: "Foreground", "Background", "Orphan", "nil"',
        ),
        (
            {"propagationPolicy": "Orphan", "orphanDependents": True},
            'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Invalid value: "Orphan": '
            "orphanDependents and deletionPropagation cannot be both set",
        ),
    ],
)
def test_invalid_delete_options_are_422(fake, rapi, options, message):
    rapi.create_resource_slice(slice_obj("s"))
    with pytest.raises(UnprocessableEntityException) as info:
        rapi.delete_resource_slice("s", body=options)
    assert json.loads(info.value.body)["message"] == message
    assert slice_names(rapi) == ["s"]
