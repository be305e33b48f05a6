"""The AddressReservation CRD (spec/crds/addressreservations.dracni.io.yaml) and its deploy copy.

- The deploy copy is byte-for-byte the spec one (kustomize cannot reference a file outside its
  directory, so packaging/deploy carries a copy; this test is what keeps them one).
- The schema is structural (apiextensions-apiserver pkg/apiserver/schema: ``NewStructural`` and
  ``ValidateStructural``: every node has a type, no metadata constraints but on the root, arrays
  have items), every field is described, and it accepts POOLS.md section 2's object while refusing
  what it should (checked with jsonschema, the OpenAPI subset the schema uses).
- The printer columns, the names, the scope, and the transition rules keeping pool, address and
  claim immutable.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest

from tests.packaging.manifests import DEPLOY, ROOT, deploy_objects, load_one

SPEC_CRD = ROOT / "spec" / "crds" / "addressreservations.dracni.io.yaml"
DEPLOY_CRD = DEPLOY / "addressreservations.dracni.io.yaml"


def crd() -> dict[str, Any]:
    return load_one(SPEC_CRD)


def schema() -> dict[str, Any]:
    (version,) = crd()["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def example() -> dict[str, Any]:
    """POOLS.md section 2's reservation."""
    return {
        "apiVersion": "dracni.io/v1alpha1",
        "kind": "AddressReservation",
        "metadata": {
            "name": "lan.10.10.1.7",
            "labels": {"dracni.io/pool": "lan", "dracni.io/node": "node-1"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "u"}],
        },
        "spec": {
            "pool": "lan",
            "address": "10.10.1.7",
            "node": "node-1",
            "claim": {"namespace": "ns", "name": "c", "uid": "0f2a4d3c-1b1e-4a53-9b2f-2c8e3d1f5a60"},
            "request": "net",
            "device": "nics/eth1",
            "pod": {"namespace": "ns", "name": "p", "uid": "pod-uid"},
            "keep": False,
        },
    }


def test_the_deploy_copy_is_the_spec_crd() -> None:
    assert DEPLOY_CRD.read_bytes() == SPEC_CRD.read_bytes(), f"cp {SPEC_CRD.relative_to(ROOT)} {DEPLOY}/"


def test_the_kustomization_ships_the_crd_and_the_policy() -> None:
    objects = deploy_objects()
    assert objects["CustomResourceDefinition/addressreservations.dracni.io"] == crd()
    assert "ValidatingAdmissionPolicy/dracni-addressreservations" in objects
    assert "ValidatingAdmissionPolicyBinding/dracni-addressreservations" in objects
    resources = load_one(DEPLOY / "kustomization.yaml")["resources"]
    assert resources.index(DEPLOY_CRD.name) < resources.index("daemonset.yaml"), "the CRD before its users"


def test_names_scope_and_version() -> None:
    spec = crd()["spec"]
    assert crd()["apiVersion"] == "apiextensions.k8s.io/v1" and crd()["kind"] == "CustomResourceDefinition"
    assert crd()["metadata"]["name"] == "addressreservations.dracni.io"
    assert spec["group"] == "dracni.io" and spec["scope"] == "Cluster"
    assert spec["names"] == {
        "kind": "AddressReservation",
        "listKind": "AddressReservationList",
        "plural": "addressreservations",
        "singular": "addressreservation",
    }
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert "subresources" not in version, "no status: the object is its spec"


def test_printer_columns() -> None:
    (version,) = crd()["spec"]["versions"]
    columns = [(c["name"], c["jsonPath"], c["type"]) for c in version["additionalPrinterColumns"]]
    assert columns == [
        ("Pool", ".spec.pool", "string"),
        ("Address", ".spec.address", "string"),
        ("Namespace", ".spec.claim.namespace", "string"),
        ("Claim", ".spec.claim.name", "string"),
        ("Node", ".spec.node", "string"),
        ("Age", ".metadata.creationTimestamp", "date"),
    ]


def _walk(node: dict[str, Any], path: str):
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from _walk(child, f"{path}.{name}")
    if "items" in node:
        yield from _walk(node["items"], f"{path}[]")


def test_the_schema_is_structural_and_described() -> None:
    root = schema()
    for path, node in _walk(root, "<root>"):
        assert "type" in node, f"{path}: a structural schema types every node"
        assert not {"anyOf", "oneOf", "allOf", "not", "$ref", "additionalProperties"} & set(node), path
        if node["type"] == "array":
            assert "items" in node, path
        if node["type"] == "string" and path.startswith("<root>.spec"):
            assert "maxLength" in node, f"{path}: bounded, for the CEL cost of the transition rules"
        if path not in ("<root>.metadata",):
            assert node.get("description", "").strip(), f"{path}: no description"
    assert root["properties"]["metadata"] == {"type": "object"}, "metadata is the API server's"
    spec = root["properties"]["spec"]
    assert sorted(spec["required"]) == sorted(["pool", "address", "node", "claim", "request", "device"])
    assert sorted(spec["properties"]["claim"]["required"]) == ["name", "namespace", "uid"]
    assert sorted(spec["properties"]["pod"]["required"]) == ["name", "namespace", "uid"]
    assert spec["properties"]["keep"]["type"] == "boolean"
    assert spec["properties"]["pool"]["maxLength"] == 40


def test_pool_address_and_claim_are_immutable() -> None:
    properties = schema()["properties"]["spec"]["properties"]
    for name, prop in properties.items():
        rules = [r["rule"] for r in prop.get("x-kubernetes-validations") or []]
        if name in ("pool", "address", "claim"):
            assert rules == ["self == oldSelf"], name
            (rule,) = prop["x-kubernetes-validations"]
            assert rule["message"] == f"spec.{name} is immutable"
        else:
            assert not rules, f"spec.{name} may change"


def validate(obj: dict[str, Any]) -> None:
    jsonschema.validate(obj, schema(), cls=jsonschema.Draft4Validator)


def test_the_design_example_is_valid() -> None:
    validate(example())
    for address in ("fd00:10:1::7", "fd00::", "::", "255.255.255.255", "2001:db8:1:2:3:4:5:6"):
        obj = example()
        obj["spec"]["address"] = address
        validate(obj)
    obj = example()
    del obj["spec"]["pod"], obj["spec"]["keep"]
    obj["spec"]["request"] = "net/eth"
    obj["spec"]["device"] = "node-1.example/nics/eth1"
    validate(obj)


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("pool", "Lan"),
        ("pool", "a" * 41),
        ("pool", "lan."),
        ("address", "10.10.1.7/24"),
        ("address", "FD00::1"),
        ("address", "fd00::1%eth0"),
        ("address", "host"),
        ("node", "Node_1"),
        ("request", "a/b/c"),
        ("device", "eth1"),
        ("claim", {"namespace": "ns", "name": "c"}),
        ("pod", {"name": "p", "uid": "u"}),
        ("keep", "yes"),
        ("node", None),
    ],
)
def test_the_schema_refuses(where: str, value: Any) -> None:
    obj = copy.deepcopy(example())
    if value is None:
        del obj["spec"][where]
    else:
        obj["spec"][where] = value
    with pytest.raises(jsonschema.ValidationError):
        validate(obj)
