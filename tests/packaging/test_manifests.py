"""The deployment manifests (packaging/deploy).

- Every manifest, examples included, validates strictly (unknown fields rejected) against the
  Kubernetes JSON schemas kubernetes-validate bundles, for 1.34 (the first release with
  resource.k8s.io/v1, which dracni speaks) and the newest it knows.
- The kustomization lists exactly the non-example files; namespace and driver name agree
  everywhere; the DaemonSet's containers mount what their flags name, the kubelet's paths at
  the host's paths.
- The example claim templates carry parameters dracni accepts, and select devices by
  attributes dracni publishes.
"""

from __future__ import annotations

import copy
import re

import pytest

from tests.packaging.manifests import (
    DEPLOY,
    DRIVER,
    _rel,
    containers,
    deploy_objects,
    example_classes,
    example_objects,
    file_objects,
    flag,
    host_path_of,
    installers,
    k8s_versions,
    load_one,
    main_container,
    manifest_files,
    pod_spec,
    published_attribute_names,
)


@pytest.mark.parametrize("version", k8s_versions())
@pytest.mark.parametrize("path", manifest_files(), ids=_rel)
def test_manifest_validates_strictly(path, version):
    import kubernetes_validate

    for obj in file_objects(path):
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{_rel(path)} ({obj['kind']}) against Kubernetes {version}: {where}: {exc.message}")


def test_strict_validation_rejects_unknown_fields():
    """The strict schemas do catch a misspelt field (else the test above proves little)."""
    import kubernetes_validate

    daemonset = copy.deepcopy(load_one(DEPLOY / "daemonset.yaml"))
    daemonset["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, "1.34.0", strict=True)


def test_manifests_were_found():
    names = {p.name for p in manifest_files()}
    assert {"daemonset.yaml", "clusterrole.yaml", "deviceclass.yaml"} <= names
    assert len(example_objects("ResourceClaimTemplate")) >= 3 and example_objects("Pod")


def test_kustomization_lists_exactly_the_non_example_files():
    kustomization = load_one(DEPLOY / "kustomization.yaml")
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed)), "a file is listed twice"
    on_disk = sorted(p.name for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == on_disk
    assert not any(name.startswith("examples") for name in listed)


def test_namespace_is_set_and_consistent():
    namespace = load_one(DEPLOY / "kustomization.yaml")["namespace"]
    objects = deploy_objects()
    assert objects["Namespace"]["metadata"]["name"] == namespace
    cluster_scoped = {
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "DeviceClass",
        "Namespace",
        "CustomResourceDefinition",
    }
    for key, obj in objects.items():
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"], f"{key} is cluster-scoped"
        else:
            assert obj["metadata"]["namespace"] == namespace, key
    assert {"ServiceAccount", "DaemonSet", "ConfigMap"} <= {obj["kind"] for obj in objects.values()}
    # The DaemonSet is privileged: Pod Security Admission must admit it in its namespace.
    labels = objects["Namespace"]["metadata"].get("labels", {})
    assert labels.get("pod-security.kubernetes.io/enforce") == "privileged"


def test_driver_name_is_the_same_everywhere():
    from dracni import defaults

    assert defaults.DRIVER == DRIVER
    objects = deploy_objects()
    device_class = objects["DeviceClass"]
    assert device_class["metadata"]["name"] == DRIVER
    (selector,) = device_class["spec"]["selectors"]
    assert selector["cel"]["expression"] == f'device.driver == "{DRIVER}"'
    assert flag(main_container(), "--driver") == DRIVER
    driver_rules = [r for r in objects["ClusterRole"]["rules"] if "resourceclaims/driver" in r["resources"]]
    assert [r["resourceNames"] for r in driver_rules] == [[DRIVER]]


def test_daemonset_shape():
    daemonset = deploy_objects()["DaemonSet"]
    spec = daemonset["spec"]
    assert spec["updateStrategy"]["type"] == "RollingUpdate"
    labels = spec["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in spec["selector"]["matchLabels"].items())
    pod = spec["template"]["spec"]
    assert pod["hostNetwork"] is True, "NIC discovery must see the node's NICs"
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["priorityClassName"] == "system-node-critical"
    assert {"operator": "Exists"} in pod["tolerations"], "must run on every node, whatever its taints"
    assert 5 <= pod["terminationGracePeriodSeconds"] <= 120
    images = {c["image"] for c in containers(pod)}
    assert images == {"ghcr.io/dracni/dracni:0.1.0"}
    for c in containers(pod):
        assert c["resources"]["requests"] and c["resources"]["limits"], c["name"]
        assert "memory" in c["resources"]["limits"], c["name"]
    assert main_container()["securityContext"]["privileged"] is True
    for c in installers():
        assert c["securityContext"].get("privileged") is False, c["name"]


def test_every_mount_has_a_volume_and_every_volume_is_mounted():
    pod = pod_spec()
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert len(volumes) == len(pod["volumes"]), "duplicate volume names"
    mounted = set()
    for c in containers(pod):
        for mount in c.get("volumeMounts", []):
            assert mount["name"] in volumes, f"{c['name']} mounts unknown volume {mount['name']}"
            mounted.add(mount["name"])
    assert mounted == set(volumes), f"unused volumes: {set(volumes) - mounted}"


def test_kubelet_and_state_paths_are_mounted_at_the_host_path():
    """docs/contracts.md section 2: kubelet dials the sockets at the paths the plugin registers, and
    the CNI plugin on the host reads the state dir at the path written in the conflist."""
    main = main_container()
    registry, plugins, state = (flag(main, "--registry-dir"), flag(main, "--plugins-dir"), flag(main, "--state-dir"))
    assert (registry, plugins) == ("/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins")
    from dracni import defaults

    assert state == defaults.STATE_DIR
    for path in (registry, plugins, state):
        assert host_path_of(main, path) == path, f"{path} must be the host's {path}"
    # Every hostPath of the pod under the kubelet's or dracni's dirs is mounted at its own path.
    volumes = {v["name"]: v for v in pod_spec()["volumes"]}
    for c in containers():
        for mount in c.get("volumeMounts", []):
            host = (volumes[mount["name"]].get("hostPath") or {}).get("path", "")
            if host.startswith(("/var/lib/kubelet", "/var/lib/dracni")):
                assert mount["mountPath"] == host, f"{c['name']}: {host} mounted at {mount['mountPath']}"


def test_installers_write_to_the_host_cni_dirs():
    init = pod_spec().get("initContainers", [])
    assert [c["args"][0] for c in init] == ["install"], "an init container installs before the plugin registers"
    assert "--watch" not in init[0]["args"]
    watchers = [c for c in pod_spec()["containers"] if c["args"][:1] == ["install"]]
    assert len(watchers) == 1 and "--watch" in watchers[0]["args"]
    from dracni.cli import install

    for c in installers():
        bin_dir, conf_dir = flag(c, "--bin-dir", install), flag(c, "--conf-dir", install)
        assert (bin_dir, conf_dir) == ("/host/opt/cni/bin", "/host/etc/cni/net.d"), c["name"]
        assert host_path_of(c, bin_dir) == "/opt/cni/bin", c["name"]
        assert host_path_of(c, conf_dir) == "/etc/cni/net.d", c["name"]
        # The conflist names the state dir the CNI plugin (on the host) and the service share.
        assert flag(c, "--state-dir", install) == flag(main_container(), "--state-dir"), c["name"]


def test_downward_api_env():
    env = {e["name"]: e for e in main_container()["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    assert flag(main_container(), "--node-name") is None, "the node name comes from NODE_NAME"
    from dracni.cli import kubelet_plugin

    (node_name,) = [p for p in kubelet_plugin.params if p.name == "node_name"]
    assert node_name.envvar == "NODE_NAME"


def test_probes_hit_the_health_port():
    main = main_container()
    address = flag(main, "--health-address")
    assert address, "the health server must be on"
    port = int(address.rpartition(":")[2])
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = main[probe]["httpGet"]
        assert get["path"] == path
        assert get["port"] == port, f"{probe} port {get['port']} != {port}"


def test_a_new_pod_starts_beside_the_old_one():
    """maxSurge with per-instance sockets (POD_UID -> --instance-id) and no declared host port,
    which would keep the scheduler from placing the surge pod on the node."""
    daemonset = deploy_objects()["DaemonSet"]
    assert daemonset["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    main = main_container()
    assert "ports" not in main
    from dracni.cli import kubelet_plugin

    (instance,) = [p for p in kubelet_plugin.params if p.name == "instance_id"]
    assert instance.envvar == "POD_UID"


def test_example_templates_pass_the_default_tenant_policy():
    """Under the safe defaults (profiles): the classes are the networks, the templates choose one."""
    from dracni.policy.config import TenantPolicy
    from dracni.policy.offline import check_found, class_networks, configs_in

    classes = example_classes()
    types = set()
    for name, device_class in classes.items():
        (found,) = configs_in(device_class, DRIVER, name)
        check_found(found, TenantPolicy(), {})
        types.add(found.parameters["config"]["plugins"][0]["type"])
    assert {"macvlan", "ipvlan", "host-device"} <= types
    for path, template in example_objects("ResourceClaimTemplate"):
        devices = template["spec"]["spec"]["devices"]
        requests = {r["name"]: r for r in devices["requests"]}
        configs = list(configs_in(template, DRIVER, path.name))
        assert configs, f"{path.name}: no dracni parameters"
        for config, entry in zip(configs, devices["config"], strict=True):
            assert set(entry["requests"]) <= set(requests), f"{path.name}: config names an unknown request"
            (request,) = (requests[r] for r in entry["requests"])
            device_class = classes[request["exactly"]["deviceClassName"]]
            networks = class_networks(list(configs_in(device_class, DRIVER, path.name)))
            assert config.parameters.get("config") is None, f"{path.name}: a template chooses, it does not define"
            check_found(config, TenantPolicy(), networks)


def test_example_selectors_use_published_attributes():
    classes = {deploy_objects()["DeviceClass"]["metadata"]["name"], *example_classes()}
    published = published_attribute_names()
    for path, template in example_objects("ResourceClaimTemplate"):
        for request in template["spec"]["spec"]["devices"]["requests"]:
            exactly = request["exactly"]
            assert exactly["deviceClassName"] in classes, path.name
            expressions = [s["cel"]["expression"] for s in exactly.get("selectors", [])]
            assert expressions, f"{path.name}: pick the NIC with a CEL selector"
            for expression in expressions:
                used = re.findall(r'device\.attributes\["([^"]+)"\]\.(\w+)', expression)
                assert used, f"{path.name}: {expression!r} names no dracni attribute"
                for domain, attribute in used:
                    assert domain == DRIVER, f"{path.name}: attributes live in the {DRIVER} domain"
                    assert attribute in published, f"{path.name}: dracni publishes no {attribute!r}"


def test_example_pod_uses_an_example_template():
    templates = {
        (t["metadata"]["namespace"], t["metadata"]["name"]) for _, t in example_objects("ResourceClaimTemplate")
    }
    for path, pod in example_objects("Pod"):
        namespace = pod["metadata"]["namespace"]
        claims = {c["name"]: c for c in pod["spec"]["resourceClaims"]}
        for claim in claims.values():
            assert (namespace, claim["resourceClaimTemplateName"]) in templates, path.name
        for container in pod["spec"]["containers"]:
            for ref in container.get("resources", {}).get("claims", []):
                assert ref["name"] in claims, f"{path.name}: {container['name']} names unknown claim"
