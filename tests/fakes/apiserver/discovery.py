"""Discovery: ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/resource.k8s.io[/v1]`` and,
for each installed CRD, ``/apis/<group>[/<version>]``.

CRD groups are upstream's ``apiextensions-apiserver/pkg/apiserver/customresource_discovery_controller.go``
``DiscoveryController.sync``: a group lists the versions its CRDs serve, sorted by
``version.CompareKubeAwareVersionStrings`` (the first is preferred); a version's
``APIResourceList`` has each CRD's resource (``singularName``, ``shortNames``, ``categories``,
the verbs of a custom resource) and its ``/status`` subresource when declared.  Groups are listed
after the built-in ones, in installation order."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .resources import KUBERNETES_VERSION, RESOURCE_API_VERSION, RESOURCE_GROUP, RESOURCE_VERSION, RESOURCES, Resource

if TYPE_CHECKING:
    from .crds import ServedCrd

#: The verbs of a custom resource in discovery (customresource_discovery_controller.go).
_CUSTOM_VERBS = ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]


def _entries(res: Resource, extra: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {
        "name": res.plural,
        "singularName": res.singular,
        "namespaced": res.namespaced,
        "kind": res.kind,
        "verbs": list(_CUSTOM_VERBS if res.custom else res.verbs),
    }
    entry.update(extra or {})
    out = [entry]
    if res.status_subresource:
        out.append(
            {
                "name": f"{res.plural}/status",
                "singularName": "",
                "namespaced": res.namespaced,
                "kind": res.kind,
                "verbs": ["get", "patch", "update"],
            }
        )
    return out


def _resource_list(group_version: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": entries}


def _crd_groups(crds: list[ServedCrd]) -> dict[str, dict[str, Any]]:
    """Each CRD group's ``APIGroup`` body (name, versions, preferredVersion)."""
    from .crds import sorted_versions

    versions: dict[str, set[str]] = {}
    for served in crds:
        versions.setdefault(served.group, set()).update(served.served_versions())
    groups = {}
    for group, names in versions.items():
        listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in sorted_versions(names)]
        groups[group] = {"name": group, "versions": listed, "preferredVersion": listed[0]}
    return groups


def _crd_version(crds: list[ServedCrd], group: str, version: str) -> dict[str, Any] | None:
    entries: list[dict[str, Any]] = []
    for served in crds:
        kind = served.kinds.get(version)
        if served.group != group or kind is None:
            continue
        names = served.names
        extra: dict[str, Any] = {}
        if names.get("shortNames"):
            extra["shortNames"] = list(names["shortNames"])
        if names.get("categories"):
            extra["categories"] = list(names["categories"])
        entries += _entries(kind.res, extra)
    return _resource_list(f"{group}/{version}", entries) if entries else None


def discovery(segments: list[str], port: int | None, crds: list[ServedCrd]) -> dict[str, Any] | None:
    """The discovery document at ``/`` + ``segments``, None when the path is not a discovery one."""
    if len(segments) > 3:  # every discovery path is /version, /api[/v1] or /apis[/<group>[/<version>]]
        return None
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
    custom = _crd_groups(crds)
    if segments == ["apis"]:
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group, *custom.values()]}
    if segments == ["apis", RESOURCE_GROUP]:
        return {"kind": "APIGroup", "apiVersion": "v1", **group}
    if segments == ["api", "v1"]:
        return _resource_list("v1", [e for p in ("nodes", "namespaces", "pods") for e in _entries(RESOURCES[p])])
    if segments == ["apis", RESOURCE_GROUP, RESOURCE_VERSION]:
        return _resource_list(
            RESOURCE_API_VERSION, [e for p in ("resourceclaims", "resourceslices") for e in _entries(RESOURCES[p])]
        )
    if len(segments) == 2 and segments[0] == "apis" and segments[1] in custom:
        return {"kind": "APIGroup", "apiVersion": "v1", **custom[segments[1]]}
    if len(segments) == 3 and segments[0] == "apis" and segments[1] in custom:
        return _crd_version(crds, segments[1], segments[2])
    return None
