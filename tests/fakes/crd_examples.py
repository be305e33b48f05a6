"""The custom resource definitions and helpers the CRD tests of the fake API server share
(tests/fakes/crds/: test_crds.py, test_crd_serving.py, their conftest.py).

``CRD`` is written here after the design of the AddressReservation (/work/wt/POOLS.md section 2:
cluster-scoped, ``dracni.io/v1alpha1``, printer columns, immutable pool and claim), so that the
tests do not depend on the shipped file; ``WIDGETS`` is a namespaced one with a status
subresource and two served versions."""

from __future__ import annotations

import json
import os

from kubernetes import client
from kubernetes.client.exceptions import ApiException

GROUP, VERSION, PLURAL = "dracni.io", "v1alpha1", "addressreservations"
SHIPPED = os.path.join(os.path.dirname(__file__), "..", "..", "spec", "crds", "addressreservations.dracni.io.yaml")
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
                                        "x-kubernetes-validations": [
                                            {"rule": "self == oldSelf", "message": "spec.pool is immutable"}
                                        ],
                                    },
                                    "address": {"type": "string", "maxLength": 39},
                                    "node": {"type": "string"},
                                    "claim": {**_REF, "x-kubernetes-validations": [{"rule": "self == oldSelf"}]},
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
            "request": "net",
            "device": "node-1/eth1",
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
