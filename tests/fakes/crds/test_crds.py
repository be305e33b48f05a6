"""CustomResourceDefinitions served by the fake API server (crds.py, crd_schema.py), driven through
the real kubernetes client (``CustomObjectsApi``): the generic verbs, AlreadyExists, conflicts,
pruning, schema validation and transition rules.  Tables, watch, status, versions, the garbage
collector and discovery: test_crd_serving.py."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import (
    ApiException,
    ConflictException,
    NotFoundException,
    UnprocessableEntityException,
)

from tests.fakes.crd_examples import (
    GROUP,
    PLURAL,
    VERSION,
    body_of,
    create,
    reservation,
)


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


def test_immutability_transition_rules(fake, custom):
    """``x-kubernetes-validations: [{rule: self == oldSelf}]``: the one CEL rule the fake runs."""
    create(custom, reservation("10.10.1.7"))
    with pytest.raises(UnprocessableEntityException) as info:
        custom.patch_cluster_custom_object(
            GROUP, VERSION, PLURAL, "lan.10.10.1.7", {"spec": {"pool": "wan", "claim": {"uid": "u-2"}}}
        )
    assert [(c["field"], c["message"]) for c in body_of(info.value)["details"]["causes"]] == [
        ("spec.pool", 'Invalid value: "string": spec.pool is immutable'),
        ("spec.claim", 'Invalid value: "object": failed rule: self == oldSelf'),
    ]
    moved = custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, "lan.10.10.1.7", {"spec": {"node": "node-2"}})
    assert moved["spec"]["node"] == "node-2"  # no rule on node
