"""The Helm chart of packaging/helm/dracni as the tests render it: through real Helm (Helm v4's
Go SDK, embedded by helm-python-sdk's module ``helm_python``), offline.

``rendered_objects`` parses what ``helm template`` would print plus the chart's ``crds/`` (Helm
installs those before the templates and never templates them), so a render compares directly
with the kustomize manifests of packaging/deploy."""

from __future__ import annotations

from typing import Any

import yaml

from tests.packaging.manifests import PACKAGING, deploy_objects

CHART = PACKAGING / "helm" / "dracni"


#: The release name the tests render with (the chart's object names do not depend on it).
RELEASE = "dracni"


def sort_key(obj: dict) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return (obj["kind"], meta.get("namespace", ""), meta["name"])


def rendered_objects(values: dict[str, Any] | None = None) -> list[dict]:
    """Every object the chart installs with ``values`` (on top of values.yaml), CRDs included,
    sorted by kind, namespace and name."""
    import helm_python

    with helm_python.Chart.load(CHART) as chart:
        manifests = chart.render(values=values, name=RELEASE, namespace="dracni-system")
        crds = [crd["data"] for crd in chart.crds]
    objects = [doc for text in [*manifests.values(), *crds] for doc in yaml.safe_load_all(text) if doc is not None]
    return sorted(objects, key=sort_key)


def kustomize_objects() -> list[dict]:
    """The objects of packaging/deploy's kustomization, sorted as ``rendered_objects``."""
    return sorted((o for key, o in deploy_objects().items() if "/" in key), key=sort_key)


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def daemonset(objects: list[dict]) -> dict:
    (found,) = by_kind(objects, "DaemonSet")
    return found


def pod_containers(objects: list[dict]) -> list[dict]:
    spec = daemonset(objects)["spec"]["template"]["spec"]
    return spec["initContainers"] + spec["containers"]
