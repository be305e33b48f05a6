"""The Helm chart (packaging/helm/dracni), rendered and linted by real Helm through
helm-python-sdk (``helm_python``: Helm v4's Go SDK, offline).

- ``helm lint --strict`` passes (warnings are failures), with the defaults and every values set
  below.
- One source of truth: the default render (templates plus crds/) equals packaging/deploy's
  kustomization object for object, and the chart's CRD is spec/crds' file byte for byte.
- Values sets render what they say (another kubelet root dir moves every kubelet path, extras
  appear, admission policies can be left out, a custom image), and every rendered object
  validates strictly against the Kubernetes schemas (as test_manifests.py does for the
  kustomize files).
- values.schema.json refuses bad values, and Helm's message names the value.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.packaging.chart import (
    CHART,
    by_kind,
    daemonset,
    kustomize_objects,
    pod_containers,
    rendered_objects,
    sort_key,
)
from tests.packaging.manifests import ROOT, k8s_versions

OTHER_ROOT = "/var/snap/microk8s/common/var/lib/kubelet"

#: Values sets that must lint, render and validate; the tests below check what each changes.
VALUES_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "kubelet-root": {"kubeletRootDir": OTHER_ROOT},
    "cni-dirs": {"cni": {"binDir": "/home/kubernetes/bin", "confDir": "/etc/cni/conf.d"}},
    "extras": {
        "extraArgs": ["--nic-slots=8"],
        "extraEnv": [{"name": "DRACNI_MAX_ATTACHMENTS", "value": "32"}],
        "extraVolumes": [{"name": "netns", "hostPath": {"path": "/run/netns", "type": "Directory"}}],
        "extraVolumeMounts": [{"name": "netns", "mountPath": "/run/netns", "readOnly": True}],
        "nicSharing": ["eth2=exclusive", "ens*=slots"],
    },
    "no-admission-policies": {"admissionPolicies": {"enabled": False}},
    "custom-image": {
        "image": {"repository": "registry.example:5000/net/dracni", "tag": "1.2.3", "pullPolicy": "Always"}
    },
    "operations": {
        "log": {"format": "text", "level": "debug"},
        "healthPort": 19180,
        "priorityClassName": "",
        "tolerations": [],
        # Helm merges maps with the defaults: null removes a default key.
        "nodeSelector": {"kubernetes.io/os": None, "node-role.example/net": "true"},
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
        "resources": {
            "installCni": {"requests": {"cpu": "20m"}},
            "kubeletPlugin": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
            "cniConfSync": {},
        },
    },
    "policy-and-classes": {
        "namespace": {"name": "kube-network", "create": False},
        "policy": {
            "claimConfigs": "full",
            "pluginTypes": "macvlan,tuning",
            "allowedSysctls": "net.ipv4.conf.all.rp_filter",
        },
        "deviceClasses": [
            {"name": "dracni.io", "spec": {"selectors": [{"cel": {"expression": 'device.driver == "dracni.io"'}}]}},
            {
                "name": "fast.dracni.io",
                "spec": {
                    "selectors": [
                        {
                            "cel": {
                                "expression": 'device.driver == "dracni.io" && device.attributes["dracni.io"].speedMbps >= 25000'
                            }
                        }
                    ]
                },
            },
        ],
    },
}


def kubelet_plugin(objects: list[dict]) -> dict:
    (main,) = [c for c in pod_containers(objects) if c["name"] == "kubelet-plugin"]
    return main


def volumes(objects: list[dict]) -> dict[str, dict]:
    return {v["name"]: v for v in daemonset(objects)["spec"]["template"]["spec"]["volumes"]}


@pytest.mark.parametrize("name", VALUES_SETS)
def test_strict_lint_passes(name: str) -> None:
    import helm_python

    report = helm_python.lint(CHART, VALUES_SETS[name] or None, strict=True, kube_version="v1.34.0")
    assert report["total_charts_linted"] == 1
    assert not report["errors"], report
    # Severity 2 is a warning, 3 an error; 1 (info: "icon is recommended") is not a finding.
    assert [m for m in report["messages"] if m["severity"] >= 2] == [], report


def test_default_render_equals_the_kustomize_manifests() -> None:
    rendered, kustomized = rendered_objects(), kustomize_objects()
    assert [sort_key(o) for o in rendered] == [sort_key(o) for o in kustomized]
    for got, want in zip(rendered, kustomized, strict=True):
        assert got == want, f"{'/'.join(sort_key(want))}: the chart renders another object than packaging/deploy"


def test_the_chart_crd_is_the_spec_crd() -> None:
    spec = ROOT / "spec" / "crds" / "addressreservations.dracni.io.yaml"
    assert (CHART / "crds" / spec.name).read_bytes() == spec.read_bytes()
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == [spec.name]


def test_chart_metadata() -> None:
    import helm_python

    with helm_python.Chart.load(CHART) as chart:
        meta = chart.metadata
        assert chart.schema is not None and chart.schema["additionalProperties"] is False
    assert (meta["apiVersion"], meta["name"], meta["type"]) == ("v2", "dracni", "application")
    project = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{meta["appVersion"]}"' in project, "appVersion (the default image tag) is dracni's version"


@pytest.mark.parametrize("version", k8s_versions())
@pytest.mark.parametrize("name", VALUES_SETS)
def test_rendered_objects_validate_strictly(name: str, version: str) -> None:
    import kubernetes_validate

    for obj in rendered_objects(VALUES_SETS[name]):
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{name}: {'/'.join(sort_key(obj))} against Kubernetes {version}: {where}: {exc.message}")


def test_another_kubelet_root_dir_moves_every_kubelet_path() -> None:
    objects = rendered_objects(VALUES_SETS["kubelet-root"])
    main = kubelet_plugin(objects)
    assert f"--registry-dir={OTHER_ROOT}/plugins_registry" in main["args"]
    assert f"--plugins-dir={OTHER_ROOT}/plugins" in main["args"]
    mounts = {m["name"]: m["mountPath"] for m in main["volumeMounts"]}
    vols = volumes(objects)
    for name, path in (("plugins-registry", f"{OTHER_ROOT}/plugins_registry"), ("plugins", f"{OTHER_ROOT}/plugins")):
        assert mounts[name] == path and vols[name]["hostPath"]["path"] == path
    text = repr(objects)
    assert "/var/lib/kubelet" not in text.replace(OTHER_ROOT, ""), "a kubelet path did not follow kubeletRootDir"


def test_cni_dirs_move_the_installers_and_their_volumes() -> None:
    objects = rendered_objects(VALUES_SETS["cni-dirs"])
    vols = volumes(objects)
    assert vols["cni-bin"]["hostPath"]["path"] == "/home/kubernetes/bin"
    assert vols["cni-conf"]["hostPath"]["path"] == "/etc/cni/conf.d"
    installers = [c for c in pod_containers(objects) if c["args"][0] == "install"]
    assert len(installers) == 2
    for container in installers:
        assert "--bin-dir=/host/home/kubernetes/bin" in container["args"]
        assert "--conf-dir=/host/etc/cni/conf.d" in container["args"]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["cni-bin"] == "/host/home/kubernetes/bin" and mounts["cni-conf"] == "/host/etc/cni/conf.d"


def test_extras_appear_in_the_kubelet_plugin_container() -> None:
    objects = rendered_objects(VALUES_SETS["extras"])
    main = kubelet_plugin(objects)
    assert main["args"][-3:] == ["--nic-sharing=eth2=exclusive", "--nic-sharing=ens*=slots", "--nic-slots=8"]
    assert main["env"][-1] == {"name": "DRACNI_MAX_ATTACHMENTS", "value": "32"}
    assert main["volumeMounts"][-1] == {"name": "netns", "mountPath": "/run/netns", "readOnly": True}
    assert volumes(objects)["netns"] == VALUES_SETS["extras"]["extraVolumes"][0]


def test_admission_policies_can_be_left_out() -> None:
    objects = rendered_objects(VALUES_SETS["no-admission-policies"])
    assert not by_kind(objects, "ValidatingAdmissionPolicy")
    assert not by_kind(objects, "ValidatingAdmissionPolicyBinding")
    everything = rendered_objects()
    assert len(by_kind(everything, "ValidatingAdmissionPolicy")) == 4
    assert len(objects) == len(everything) - 8


def test_a_custom_image_is_used_by_every_container() -> None:
    for container in pod_containers(rendered_objects(VALUES_SETS["custom-image"])):
        assert container["image"] == "registry.example:5000/net/dracni:1.2.3"
        assert container["imagePullPolicy"] == "Always"


def test_operational_values() -> None:
    objects = rendered_objects(VALUES_SETS["operations"])
    ds = daemonset(objects)
    spec = ds["spec"]["template"]["spec"]
    assert ds["spec"]["updateStrategy"] == VALUES_SETS["operations"]["updateStrategy"]
    assert "priorityClassName" not in spec and "tolerations" not in spec
    assert spec["nodeSelector"] == {"node-role.example/net": "true"}
    main = kubelet_plugin(objects)
    assert {"--log-format=text", "--log-level=debug", "--health-address=:19180"} <= set(main["args"])
    assert "ports" not in main  # a declared host port would keep the surge pod off the node
    assert main["livenessProbe"]["httpGet"]["port"] == main["readinessProbe"]["httpGet"]["port"] == 19180
    # Merged with the defaults, key by key (Helm's coalescing), as the nodeSelector is.
    assert main["resources"] == {
        "requests": {"cpu": "100m", "memory": "256Mi"},
        "limits": {"cpu": "1", "memory": "1Gi"},
    }


def test_namespace_policy_and_device_classes() -> None:
    objects = rendered_objects(VALUES_SETS["policy-and-classes"])
    assert not by_kind(objects, "Namespace")
    assert {o["metadata"]["namespace"] for o in objects if "namespace" in o["metadata"]} == {"kube-network"}
    (configmap,) = by_kind(objects, "ConfigMap")
    assert configmap["data"] == {
        "claimConfigs": "full",
        "pluginTypes": "macvlan,tuning",
        "ipamTypes": "dhcp,host-local,static",
        "allowedSysctls": "net.ipv4.conf.all.rp_filter",
    }
    assert [c["metadata"]["name"] for c in by_kind(objects, "DeviceClass")] == ["dracni.io", "fast.dracni.io"]
    usernames = [
        c["expression"]
        for p in by_kind(objects, "ValidatingAdmissionPolicy")
        for c in p["spec"].get("matchConditions", [])
        if "username" in c["expression"]
    ]
    assert len(usernames) == 3 and all("system:serviceaccount:kube-network:dracni" in e for e in usernames)
    assert "dracni-system" not in repr(objects)


BAD_VALUES = [
    ({"kubeletRootDir": 5}, "/kubeletRootDir", "want string"),
    ({"kubeletRootDir": "var/lib/kubelet"}, "/kubeletRootDir", "pattern"),
    ({"kubeletRootDir": "/var/lib/kubelet/"}, "/kubeletRootDir", "pattern"),
    ({"kubletRootDir": "/var/lib/kubelet"}, "'kubletRootDir' not allowed", ""),
    ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy", "IfNotPresent"),
    ({"image": {"registry": "example"}}, "'registry' not allowed", "/image"),
    ({"cni": {"binDir": 7}}, "/cni/binDir", "want string"),
    ({"policy": {"claimConfigs": "all"}}, "/policy/claimConfigs", "profiles"),
    ({"nicSharing": ["eth0=maybe"]}, "/nicSharing/0", "eth0=maybe"),
    ({"log": {"level": "trace"}}, "/log/level", "debug"),
    ({"healthPort": 70000}, "/healthPort", "maximum"),
    ({"admissionPolicies": {"enabled": "yes"}}, "/admissionPolicies/enabled", "want boolean"),
    ({"updateStrategy": {"type": "Recreate"}}, "/updateStrategy/type", "OnDelete"),
    ({"extraEnv": [{"value": "x"}]}, "/extraEnv/0", "name"),
    ({"deviceClasses": [{"name": "Bad_Name", "spec": {}}]}, "/deviceClasses/0/name", "Bad_Name"),
]


@pytest.mark.parametrize(
    ("values", "where", "what"), BAD_VALUES, ids=lambda v: str(v)[:40] if isinstance(v, dict) else None
)
def test_the_schema_refuses_bad_values(values: dict, where: str, what: str) -> None:
    """Refused by the schema on render (as ``helm install`` would) and on validation, with a
    message naming the value."""
    import helm_python

    with helm_python.Chart.load(CHART) as chart:
        with pytest.raises(helm_python.HelmValuesError) as validated:
            chart.validate_schema(chart.merge_values(values))
        with pytest.raises(helm_python.HelmValuesError) as rendered:
            chart.render(values=values, name="dracni")
    for error in (validated.value, rendered.value):
        assert where in str(error) and what in str(error), str(error)


def test_the_defaults_pass_the_schema() -> None:
    import helm_python

    with helm_python.Chart.load(CHART) as chart:
        chart.validate_schema(chart.values)
        chart.validate_schema(chart.merge_values(VALUES_SETS["operations"]))


def test_device_metadata_is_opt_in_and_mounts_the_cdi_dir() -> None:
    off = kubelet_plugin(rendered_objects())
    assert not any(a.startswith("--device-metadata-versions") for a in off["args"])
    on = kubelet_plugin(rendered_objects({"deviceMetadata": {"versions": "v1alpha1", "cdiDir": "/etc/cdi"}}))
    assert {"--device-metadata-versions=v1alpha1", "--cdi-dir=/etc/cdi"} <= set(on["args"])
    assert {"name": "cdi", "mountPath": "/etc/cdi"} in on["volumeMounts"]
