"""IPAMClaims (k8s.cni.cncf.io/v1alpha1) in the fake API server, driven only by the real kubernetes
client 37.x (``CustomObjectsApi``), and the CRD shipped in ``spec/crds``.

How this client writes a custom resource's status (pinned below):

- ``replace_namespaced_custom_object_status(group, version, ns, "ipamclaims", name, body)``: a
  ``PUT .../status`` (sent, like ``create_namespaced_custom_object``, with no Content-Type header
  and a JSON body); the body's ``metadata.resourceVersion`` is a precondition (409 when stale);
  only ``status`` is taken from the body.
- ``patch_namespaced_custom_object_status(group, version, ns, "ipamclaims", name, body)`` sends
  ``application/merge-patch+json`` by default (the first JSON type of its two accepted content
  types), so no ``_content_type`` is needed for a merge patch; ``metadata.resourceVersion`` in the
  patch is a precondition too.
- Server-side apply: the same call with ``_content_type="application/apply-patch+yaml"`` and
  ``field_manager=...`` (the dict body is sent JSON-encoded, which is YAML); ``force=True`` takes
  fields over from other managers.
- ``_content_type="application/json-patch+json"`` with a dict body is rewritten by the client to
  ``application/strategic-merge-patch+json``, which custom resources do not support (415).
"""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import (
    ApiException,
    ConflictException,
    ForbiddenException,
    NotFoundException,
    UnprocessableEntityException,
)

from tests.fakes.apiserver import APPLY_PATCH, MERGE_PATCH, ApiStatusError, FakeApiServer
from tests.fakes.apiserver import ipamclaim_schema as fake_module
from tests.kubeclient import client_for, serving

GROUP = "k8s.cni.cncf.io"
VERSION = "v1alpha1"
PLURAL = "ipamclaims"
NS = "vms"
CRD_PATH = "spec/crds/ipamclaims.k8s.cni.cncf.io.yaml"
IPS = ["10.0.0.5/24", "fd00::5/64"]
ALLOCATED = {
    "type": "IPsAllocated",
    "status": "True",
    "reason": "SuccessfulAllocation",
    "message": "",
    "lastTransitionTime": "2025-01-01T00:00:00Z",
}


# -- fixtures and helpers ----------------------------------------------------------------------------
@pytest.fixture
def fake(tmp_path):
    with serving(tmp_path, ipamclaims=True, namespaces=("default", NS)) as server:
        yield server


@pytest.fixture
def custom(api_client) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


def ipamclaim(name: str, network: str = "tenantred", interface: str = "pod16367aacb67", **meta) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "IPAMClaim",
        "metadata": {"name": name, **meta},
        "spec": {"network": network, "interface": interface},
    }


def body_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


def causes(exc: ApiException) -> list[tuple[str, str]]:
    return [(c["field"], c["reason"]) for c in body_of(exc)["details"]["causes"]]


def get(custom: client.CustomObjectsApi, name: str, namespace: str = NS) -> dict:
    return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def patch_status(custom: client.CustomObjectsApi, name: str, body: dict, **kwargs) -> dict:
    return custom.patch_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, name, body, **kwargs)


def apply_status(custom: client.CustomObjectsApi, name: str, status: dict, manager: str = "dracni", **kwargs) -> dict:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "IPAMClaim", "metadata": {"name": name}, "status": status}
    return patch_status(custom, name, body, _content_type=APPLY_PATCH, field_manager=manager, **kwargs)


def stream(custom: client.CustomObjectsApi, **kwargs) -> list[dict]:
    w = watch.Watch()
    return list(w.stream(custom.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, timeout_seconds=1, **kwargs))


def managers(obj: dict) -> dict[tuple[str, str, str], dict]:
    return {
        (m["manager"], m["operation"], m.get("subresource", "")): m["fieldsV1"]
        for m in obj["metadata"].get("managedFields") or []
    }


# -- the CRD in spec/crds ----------------------------------------------------------------------------
def load_crd() -> dict:
    with open(CRD_PATH, encoding="utf-8") as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d]
    assert len(docs) == 1
    return docs[0]


@pytest.mark.parametrize("version", [kubernetes_validate.latest_version(), "1.30"])
def test_crd_validates_as_a_customresourcedefinition(version):
    crd = load_crd()
    kubernetes_validate.validate(crd, version, strict=True)


def test_crd_structure_matches_upstream():
    crd = load_crd()
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1" and crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{PLURAL}.{GROUP}"
    spec = crd["spec"]
    assert spec["group"] == GROUP and spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": "IPAMClaim",
        "listKind": "IPAMClaimList",
        "plural": PLURAL,
        "singular": "ipamclaim",
    }
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == (VERSION, True, True)
    assert version["subresources"] == {"status": {}}
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["type"] == "object" and "required" not in schema
    props = schema["properties"]
    assert set(props) == {"apiVersion", "kind", "metadata", "spec", "status"}
    claim_spec, status = props["spec"], props["status"]
    assert set(claim_spec["properties"]) == {"network", "interface"}
    assert sorted(claim_spec["required"]) == ["interface", "network"]
    assert all(p["type"] == "string" for p in claim_spec["properties"].values())
    assert set(status["properties"]) == {"ips", "ownerPod", "conditions"}
    assert status["required"] == ["ips"]
    assert status["properties"]["ips"] == {**status["properties"]["ips"], "type": "array", "items": {"type": "string"}}
    owner = status["properties"]["ownerPod"]
    assert owner["type"] == "object" and owner["required"] == ["name"]
    assert owner["properties"] == {"name": {"type": "string"}}
    condition = status["properties"]["conditions"]["items"]
    assert sorted(condition["required"]) == ["lastTransitionTime", "message", "reason", "status", "type"]
    assert condition["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    # The fake prunes to exactly the CRD's fields.
    assert set(fake_module._IPAM_SPEC_FIELDS) == set(claim_spec["properties"])
    assert set(fake_module._IPAM_STATUS_FIELDS) == set(status["properties"])
    assert set(fake_module._CONDITION_FIELDS) == set(condition["properties"])
    assert condition["properties"]["type"]["pattern"] == fake_module._CONDITION_TYPE.pattern
    assert condition["properties"]["reason"]["pattern"] == fake_module._CONDITION_REASON.pattern


# -- discovery, CRD presence -------------------------------------------------------------------------
def test_discovery_lists_the_group_when_installed(fake, api_client):
    groups = client.ApisApi(api_client).get_api_versions()
    assert [g.name for g in groups.groups] == ["resource.k8s.io", GROUP]
    ours = groups.groups[1]
    assert ours.preferred_version.group_version == f"{GROUP}/{VERSION}"
    raw = api_client.call_api(
        *api_client.param_serialize(
            method="GET",
            resource_path=f"/apis/{GROUP}/{VERSION}",
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
    )
    listing = json.loads(raw.read())
    assert listing["groupVersion"] == f"{GROUP}/{VERSION}"
    by_name = {r["name"]: r for r in listing["resources"]}
    assert by_name[PLURAL]["kind"] == "IPAMClaim" and by_name[PLURAL]["namespaced"] is True
    assert {"create", "get", "list", "watch", "update", "patch", "delete"} <= set(by_name[PLURAL]["verbs"])
    assert by_name[f"{PLURAL}/status"]["verbs"] == ["get", "patch", "update"]


def test_without_the_crd_the_group_is_absent(tmp_path):
    with FakeApiServer(tmp_path / "bare") as bare:
        api = client_for(bare.kubeconfig_path)
        try:
            assert [g.name for g in client.ApisApi(api).get_api_versions().groups] == ["resource.k8s.io"]
            with pytest.raises(NotFoundException) as info:
                client.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
            assert body_of(info.value)["message"] == "the server could not find the requested resource"
            with pytest.raises(RuntimeError, match="not installed"):
                bare.create_ipamclaim("default", "c", "net")
            bare.install_ipamclaims()
            assert bare.ipamclaims_installed
            bare.create_ipamclaim("default", "c", "net", "pod1")
            assert get(client.CustomObjectsApi(api), "c", "default")["spec"]["network"] == "net"
            assert bare.uninstall_ipamclaims() == 1
            assert bare.get_ipamclaim("default", "c") is None
            assert [e["type"] for e in bare.events() if e["resource"] == PLURAL] == ["ADDED", "DELETED"]
            with pytest.raises(NotFoundException):
                get(client.CustomObjectsApi(api), "c", "default")
        finally:
            api.close()
            assert bare.internal_errors == []


# -- create / get / list / delete --------------------------------------------------------------------
def test_create_and_get(fake, custom):
    created = custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        NS,
        PLURAL,
        {**ipamclaim("vm-a.tenantred", labels={"kubevirt.io/vm": "vm-a"}), "status": {"ips": IPS}, "bogus": 1},
    )
    assert created["apiVersion"] == f"{GROUP}/{VERSION}" and created["kind"] == "IPAMClaim"
    meta = created["metadata"]
    assert meta["namespace"] == NS and meta["uid"] and meta["generation"] == 1
    assert meta["resourceVersion"] == fake.resource_version
    assert "status" not in created  # create drops status on a CRD with a status subresource
    assert "bogus" not in created  # unknown fields are pruned
    got = get(custom, "vm-a.tenantred")
    assert got == created
    assert custom.get_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "vm-a.tenantred") == created
    assert fake.get_ipamclaim(NS, "vm-a.tenantred") == created
    assert fake.requests_to("POST")[0].path == f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}"

    with pytest.raises(ConflictException) as info:
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, ipamclaim("vm-a.tenantred"))
    assert body_of(info.value)["reason"] == "AlreadyExists"
    assert body_of(info.value)["message"] == f'{PLURAL}.{GROUP} "vm-a.tenantred" already exists'


def test_get_missing_is_404(fake, custom):
    with pytest.raises(NotFoundException) as info:
        get(custom, "ghost")
    assert body_of(info.value)["message"] == f'{PLURAL}.{GROUP} "ghost" not found'
    assert body_of(info.value)["details"] == {"name": "ghost", "group": GROUP, "kind": PLURAL}
    with pytest.raises(NotFoundException):
        patch_status(custom, "ghost", {"status": {"ips": IPS}})
    with pytest.raises(NotFoundException):
        apply_status(custom, "ghost", {"ips": IPS})
    with pytest.raises(NotFoundException):  # a namespace that does not exist
        custom.create_namespaced_custom_object(GROUP, VERSION, "nope", PLURAL, ipamclaim("c"))


def test_list_select_and_delete(fake, custom):
    fake.create_ipamclaim(NS, "a.net1", "net1", "pod1", labels={"vm": "a"})
    fake.create_ipamclaim(NS, "b.net1", "net1", "pod1", labels={"vm": "b"})
    fake.create_ipamclaim("default", "c.net1", "net1", "pod1")
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)
    assert listed["kind"] == "IPAMClaimList" and listed["apiVersion"] == f"{GROUP}/{VERSION}"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["a.net1", "b.net1"]
    assert [
        i["metadata"]["name"]
        for i in custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, label_selector="vm=b")["items"]
    ] == ["b.net1"]
    assert [
        i["metadata"]["name"]
        for i in custom.list_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, field_selector="metadata.name=a.net1"
        )["items"]
    ] == ["a.net1"]
    everywhere = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    assert sorted(i["metadata"]["name"] for i in everywhere["items"]) == ["a.net1", "b.net1", "c.net1"]
    with pytest.raises(ApiException) as info:
        custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, field_selector="spec.network=net1")
    assert info.value.status == 400

    deleted = custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a.net1")
    assert deleted["metadata"]["name"] == "a.net1"
    assert fake.get_ipamclaim(NS, "a.net1") is None
    with pytest.raises(NotFoundException):
        custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a.net1")
    assert [i["metadata"]["name"] for i in fake.list_ipamclaims()] == ["c.net1", "b.net1"]  # by namespace, name
    assert [i["metadata"]["name"] for i in fake.list_ipamclaims(NS)] == ["b.net1"]


# -- status ------------------------------------------------------------------------------------------
def test_status_put_keeps_spec_and_main_put_keeps_status(fake, custom):
    fake.create_ipamclaim(NS, "vm-a.net1", "net1", "pod1")
    current = get(custom, "vm-a.net1")
    body = {
        **current,
        "spec": {"network": "other", "interface": "x"},
        "status": {"ips": IPS, "ownerPod": {"name": "virt-launcher-vm-a-xyz"}},
    }
    updated = custom.replace_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "vm-a.net1", body)
    assert updated["spec"] == {"network": "net1", "interface": "pod1"}  # the status endpoint ignores spec
    assert updated["status"] == {"ips": IPS, "ownerPod": {"name": "virt-launcher-vm-a-xyz"}}
    assert updated["metadata"]["generation"] == 1
    assert int(updated["metadata"]["resourceVersion"]) > int(current["metadata"]["resourceVersion"])
    record = fake.requests_to("PUT")[-1]
    # This client sends create/replace of custom objects without a Content-Type (the body is JSON;
    # kube-apiserver then takes its first media type, application/json).
    assert record.path.endswith("/vm-a.net1/status") and record.content_type is None
    assert fake.requests_to("GET")[-1].path.endswith("/vm-a.net1")
    # no fieldManager on an update: the server names the manager after the User-Agent's prefix
    assert ("dracni", "Update", "status") in managers(updated)

    # The main resource: spec changes (generation bumps), status in the body is ignored.
    body = {**updated, "spec": {"network": "net2", "interface": "pod1"}, "status": {"ips": []}}
    replaced = custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "vm-a.net1", body)
    assert replaced["spec"]["network"] == "net2" and replaced["status"]["ips"] == IPS
    assert replaced["metadata"]["generation"] == 2

    # Writing the same status again is a no-op: no new resourceVersion.
    again = custom.replace_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "vm-a.net1", replaced)
    assert again["metadata"]["resourceVersion"] == replaced["metadata"]["resourceVersion"]


def test_stale_resource_version_is_409(fake, custom):
    fake.create_ipamclaim(NS, "vm-a.net1", "net1", "pod1")
    stale = get(custom, "vm-a.net1")
    fake.set_ipamclaim_status(NS, "vm-a.net1", {"ips": IPS})
    with pytest.raises(ConflictException) as info:
        custom.replace_namespaced_custom_object_status(
            GROUP, VERSION, NS, PLURAL, "vm-a.net1", {**stale, "status": {"ips": ["10.9.9.9/24"]}}
        )
    status = body_of(info.value)
    assert status["reason"] == "Conflict" and status["code"] == 409
    assert status["message"] == (
        f'Operation cannot be fulfilled on {PLURAL}.{GROUP} "vm-a.net1": the object has '
        "been modified; please apply your changes to the latest version and try again"
    )
    with pytest.raises(ConflictException):
        custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "vm-a.net1", stale)
    with pytest.raises(ConflictException):  # a merge patch carrying a stale resourceVersion
        patch_status(
            custom,
            "vm-a.net1",
            {"metadata": {"resourceVersion": stale["metadata"]["resourceVersion"]}, "status": {"ips": ["10.9.9.9/24"]}},
        )
    with pytest.raises(ConflictException):  # and an apply carrying one
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "IPAMClaim",
            "metadata": {"name": "vm-a.net1", "resourceVersion": stale["metadata"]["resourceVersion"]},
            "status": {"ips": IPS},
        }
        patch_status(custom, "vm-a.net1", body, _content_type=APPLY_PATCH, field_manager="dracni")
    assert fake.get_ipamclaim(NS, "vm-a.net1")["status"] == {"ips": IPS}
    # Without a resourceVersion the write is unconditional.
    current = get(custom, "vm-a.net1")
    del current["metadata"]["resourceVersion"]
    current["status"] = {"ips": ["10.9.9.9/24"]}
    assert custom.replace_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "vm-a.net1", current)["status"][
        "ips"
    ] == ["10.9.9.9/24"]


def test_invalid_writes_are_422_with_field_paths(fake, custom):
    fake.create_ipamclaim(NS, "vm-a.net1", "net1", "pod1")
    with pytest.raises(UnprocessableEntityException) as info:
        patch_status(custom, "vm-a.net1", {"status": {"ips": ["10.0.0.5/24", "10.0.0.6", "nonsense/8"]}})
    status = body_of(info.value)
    assert status["reason"] == "Invalid" and status["code"] == 422
    assert status["details"]["group"] == GROUP and status["details"]["kind"] == "IPAMClaim"
    assert causes(info.value) == [("status.ips[1]", "FieldValueInvalid"), ("status.ips[2]", "FieldValueInvalid")]
    assert status["message"].startswith(
        f'IPAMClaim.{GROUP} "vm-a.net1" is invalid: [status.ips[1]: Invalid value: "10.0.0.6": must be a CIDR'
    )

    with pytest.raises(UnprocessableEntityException) as info:  # ips is required once status is set
        patch_status(custom, "vm-a.net1", {"status": {"ownerPod": {"name": "p"}}})
    assert causes(info.value) == [("status.ips", "FieldValueRequired")]

    with pytest.raises(UnprocessableEntityException) as info:
        apply_status(
            custom,
            "vm-a.net1",
            {
                "ips": IPS,
                "ownerPod": "virt-launcher-x",
                "conditions": [
                    {"type": "IPsAllocated", "status": "Yes", "reason": "", "lastTransitionTime": "yesterday"}
                ],
            },
        )
    assert causes(info.value) == [
        ("status.ownerPod", "FieldValueInvalid"),
        ("status.conditions[0].message", "FieldValueRequired"),
        ("status.conditions[0].status", "FieldValueNotSupported"),
        ("status.conditions[0].reason", "FieldValueInvalid"),
        ("status.conditions[0].lastTransitionTime", "FieldValueInvalid"),
    ]

    with pytest.raises(UnprocessableEntityException) as info:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, {**ipamclaim("c2"), "spec": {"interface": "pod1", "network": 7}}
        )
    assert causes(info.value) == [("spec.network", "FieldValueInvalid")]
    with pytest.raises(UnprocessableEntityException) as info:
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, {**ipamclaim("c2"), "spec": {}})
    assert causes(info.value) == [("spec.network", "FieldValueRequired"), ("spec.interface", "FieldValueRequired")]
    with pytest.raises(UnprocessableEntityException) as info:
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, ipamclaim("Not_A_Name"))
    assert causes(info.value)[0][0] == "metadata.name"
    assert fake.get_ipamclaim(NS, "c2") is None
    assert "status" not in fake.get_ipamclaim(NS, "vm-a.net1")

    # The helpers validate too.
    with pytest.raises(ApiStatusError) as err:
        fake.create_ipamclaim(NS, "c3", "net1", "pod1", ips=["10.0.0.7"])
    assert err.value.code == 422 and "status.ips[0]" in err.value.message
    with pytest.raises(ApiStatusError):
        fake.set_ipamclaim_status(NS, "vm-a.net1", {"ips": ["fd00::1"]})


def test_merge_patch_is_the_default_content_type(fake, custom):
    fake.create_ipamclaim(NS, "vm-a.net1", "net1", "pod1", ips=IPS)
    patched = patch_status(
        custom,
        "vm-a.net1",
        {
            "status": {"ownerPod": {"name": "virt-launcher-a"}, "conditions": [ALLOCATED]},
            "spec": {"network": "ignored"},
        },
    )
    assert fake.requests_to("PATCH")[-1].content_type == MERGE_PATCH
    assert patched["status"] == {"ips": IPS, "ownerPod": {"name": "virt-launcher-a"}, "conditions": [ALLOCATED]}
    assert patched["spec"]["network"] == "net1"
    # Explicitly asking for it is the same; null removes a field (lists are replaced whole).
    patched = patch_status(
        custom, "vm-a.net1", {"status": {"conditions": None, "ips": IPS[:1]}}, _content_type=MERGE_PATCH
    )
    assert patched["status"] == {"ips": IPS[:1], "ownerPod": {"name": "virt-launcher-a"}}
    # A JSON patch content type with a dict body becomes a strategic merge patch: unsupported here.
    with pytest.raises(ApiException) as info:
        patch_status(custom, "vm-a.net1", {"status": {"ips": IPS}}, _content_type="application/json-patch+json")
    assert info.value.status == 415
    # Merge patch on the main resource: spec changes, status is left alone.
    main = custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "vm-a.net1", {"spec": {"interface": "pod2"}, "status": {"ips": []}}
    )
    assert main["spec"] == {"network": "net1", "interface": "pod2"} and main["status"]["ips"] == IPS[:1]
    assert main["metadata"]["generation"] == 2


def test_server_side_apply_of_status(fake, custom):
    fake.create_ipamclaim(NS, "vm-a.net1", "net1", "pod1")
    applied = apply_status(custom, "vm-a.net1", {"ips": IPS, "conditions": [ALLOCATED]})
    record = fake.requests_to("PATCH")[-1]
    assert record.content_type == APPLY_PATCH and record.field_manager == "dracni"
    assert applied["status"] == {"ips": IPS, "conditions": [ALLOCATED]}
    assert managers(applied)[("dracni", "Apply", "status")] == {"f:status": {"f:conditions": {}, "f:ips": {}}}

    # Re-applying without conditions gives them up: nobody owns them any more, so they go.
    applied = apply_status(custom, "vm-a.net1", {"ips": IPS})
    assert applied["status"] == {"ips": IPS}
    # Applying the same again is a no-op.
    assert (
        apply_status(custom, "vm-a.net1", {"ips": IPS})["metadata"]["resourceVersion"]
        == applied["metadata"]["resourceVersion"]
    )

    # Another controller's Update takes ips over; applying a different value now conflicts.
    fake.set_ipamclaim_status(
        NS, "vm-a.net1", {"ips": ["10.0.0.9/24"], "ownerPod": {"name": "p2"}}, manager="ovnkube-controller"
    )
    with pytest.raises(ConflictException) as info:
        apply_status(custom, "vm-a.net1", {"ips": IPS})
    status = body_of(info.value)
    assert status["message"].startswith(
        'Apply failed with 1 conflict: conflict with "ovnkube-controller" with '
        f'subresource "status" using {GROUP}/{VERSION} at '
    )
    assert status["message"].endswith(": .status.ips")
    assert [c["field"] for c in status["details"]["causes"]] == [".status.ips"]
    # Applying the value already there shares ownership, no conflict; force takes the field.
    shared = apply_status(custom, "vm-a.net1", {"ips": ["10.0.0.9/24"]})
    assert shared["status"]["ips"] == ["10.0.0.9/24"]
    forced = apply_status(custom, "vm-a.net1", {"ips": IPS}, force=True)
    assert forced["status"] == {"ips": IPS, "ownerPod": {"name": "p2"}}
    owners = managers(forced)
    assert owners[("dracni", "Apply", "status")] == {"f:status": {"f:ips": {}}}
    assert owners[("ovnkube-controller", "Update", "status")] == {"f:status": {"f:ownerPod": {}}}

    with pytest.raises(UnprocessableEntityException):  # apply needs a field manager
        patch_status(
            custom,
            "vm-a.net1",
            {"apiVersion": f"{GROUP}/{VERSION}", "kind": "IPAMClaim", "status": {"ips": IPS}},
            _content_type=APPLY_PATCH,
        )
    with pytest.raises(ApiException) as info:  # and apiVersion/kind
        patch_status(custom, "vm-a.net1", {"status": {"ips": IPS}}, _content_type=APPLY_PATCH, field_manager="x")
    assert info.value.status == 400


# -- watch -------------------------------------------------------------------------------------------
def test_watch_sees_status_changes_as_modified(fake, custom):
    fake.create_ipamclaim(NS, "vm-a.net1", "net1", "pod1")
    start = custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)["metadata"]["resourceVersion"]
    patch_status(custom, "vm-a.net1", {"status": {"ips": IPS}})
    fake.create_ipamclaim("default", "elsewhere", "net1", "pod1")
    events = stream(custom, resource_version=start)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("MODIFIED", "vm-a.net1")]
    assert events[0]["object"]["status"] == {"ips": IPS}
    assert events[0]["object"]["kind"] == "IPAMClaim"

    # Without a resourceVersion the watch starts with the current objects as ADDED.
    events = stream(custom)
    assert [(e["type"], e["object"]["status"]) for e in events] == [("ADDED", {"ips": IPS})]

    # Across namespaces, and a deletion.
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "vm-a.net1")
    w = watch.Watch()
    events = list(
        w.stream(custom.list_cluster_custom_object, GROUP, VERSION, PLURAL, resource_version=start, timeout_seconds=1)
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("MODIFIED", "vm-a.net1"),
        ("ADDED", "elsewhere"),
        ("DELETED", "vm-a.net1"),
    ]


# -- helpers and authorization -----------------------------------------------------------------------
def test_helpers(fake, custom):
    created = fake.create_ipamclaim(
        "new-ns",
        "vm-b.net1",
        "net1",
        ips=IPS,
        owner_pod="virt-launcher-b",
        conditions=[ALLOCATED],
        owner_references=[{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "vm-b", "uid": "u-1"}],
    )
    assert created["spec"] == {"network": "net1"}  # interface=None leaves it out
    assert created["status"] == {"ips": IPS, "ownerPod": {"name": "virt-launcher-b"}, "conditions": [ALLOCATED]}
    assert created["metadata"]["ownerReferences"][0]["name"] == "vm-b"
    assert get(custom, "vm-b.net1", "new-ns") == created == fake.get_ipamclaim("new-ns", "vm-b.net1")
    assert ("ovnkube-controller", "Update", "status") not in managers(created)
    assert managers(created)[("virt-controller", "Update", "status")] == {
        "f:status": {"f:conditions": {}, "f:ips": {}, "f:ownerPod": {}}
    }
    with pytest.raises(ApiStatusError) as err:
        fake.create_ipamclaim("new-ns", "vm-b.net1", "net1")
    assert err.value.code == 409
    assert fake.get_ipamclaim("new-ns", "ghost") is None

    cleared = fake.set_ipamclaim_status("new-ns", "vm-b.net1", None)
    assert "status" not in cleared
    assert fake.delete_ipamclaim("new-ns", "vm-b.net1")["metadata"]["name"] == "vm-b.net1"
    assert fake.delete_ipamclaim("new-ns", "vm-b.net1") is None


def test_authorizer_sees_group_resource_and_subresource(fake, custom):
    fake.create_ipamclaim(NS, "vm-a.net1", "net1", "pod1")
    seen = []

    def authorizer(attrs):
        seen.append(attrs)
        return attrs.subresource != "status"

    fake.authorizer = authorizer
    get(custom, "vm-a.net1")
    with pytest.raises(ForbiddenException) as info:
        patch_status(custom, "vm-a.net1", {"status": {"ips": IPS}})
    assert body_of(info.value)["message"] == (
        f'{PLURAL}.{GROUP} "vm-a.net1" is forbidden: User "{fake.user}" cannot patch resource '
        f'"{PLURAL}/status" in API group "{GROUP}" in the namespace "{NS}"'
    )
    assert [(a.verb, a.group, a.resource, a.subresource, a.namespace, a.name) for a in seen] == [
        ("get", GROUP, PLURAL, "", NS, "vm-a.net1"),
        ("patch", GROUP, PLURAL, "status", NS, "vm-a.net1"),
    ]
