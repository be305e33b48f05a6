"""Discovery: ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/resource.k8s.io[/v1]`` and,
while the IPAMClaim CRD is installed, ``/apis/k8s.cni.cncf.io[/v1alpha1]``."""

from __future__ import annotations

from typing import Any

from .resources import (
    IPAM_API_VERSION,
    IPAM_GROUP,
    IPAM_VERSION,
    KUBERNETES_VERSION,
    RESOURCE_API_VERSION,
    RESOURCE_GROUP,
    RESOURCE_VERSION,
    RESOURCES,
)


def _resource_list(group_version: str, plurals: list[str]) -> dict[str, Any]:
    resources: list[dict[str, Any]] = []
    for plural in plurals:
        res = RESOURCES[plural]
        resources.append(
            {
                "name": plural,
                "singularName": res.singular,
                "namespaced": res.namespaced,
                "kind": res.kind,
                "verbs": list(res.verbs),
            }
        )
        if res.status_subresource:
            resources.append(
                {
                    "name": f"{plural}/status",
                    "singularName": "",
                    "namespaced": True,
                    "kind": res.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}


def discovery(segments: list[str], port: int | None, ipamclaims: bool) -> dict[str, Any] | None:
    """The discovery document at ``/`` + ``segments``, None when the path is not a discovery one."""
    if segments == ["version"]:
        return {
            **KUBERNETES_VERSION,
            "gitCommit": "0" * 40,
            "gitTreeState": "clean",
            "buildDate": "2025-08-27T00:00:00Z",
            "goVersion": "go1.24.6",
            "compiler": "gc",
            "platform": "linux/amd64",
        }
    if segments == ["api"]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{port}"}],
        }
    group_version = {"groupVersion": RESOURCE_API_VERSION, "version": RESOURCE_VERSION}
    group = {"name": RESOURCE_GROUP, "versions": [group_version], "preferredVersion": group_version}
    ipam_version = {"groupVersion": IPAM_API_VERSION, "version": IPAM_VERSION}
    ipam_group = {"name": IPAM_GROUP, "versions": [ipam_version], "preferredVersion": ipam_version}
    if segments == ["apis"]:
        groups = [group, ipam_group] if ipamclaims else [group]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
    if segments == ["apis", RESOURCE_GROUP]:
        return {"kind": "APIGroup", "apiVersion": "v1", **group}
    if ipamclaims and segments == ["apis", IPAM_GROUP]:
        return {"kind": "APIGroup", "apiVersion": "v1", **ipam_group}
    if ipamclaims and segments == ["apis", IPAM_GROUP, IPAM_VERSION]:
        return _resource_list(IPAM_API_VERSION, ["ipamclaims"])
    if segments == ["api", "v1"]:
        return _resource_list("v1", ["nodes", "namespaces", "pods"])
    if segments == ["apis", RESOURCE_GROUP, RESOURCE_VERSION]:
        return _resource_list(RESOURCE_API_VERSION, ["resourceclaims", "resourceslices"])
    return None
