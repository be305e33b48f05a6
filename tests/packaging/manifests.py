"""The deployment manifests of packaging/deploy as the tests load them: files, objects, the
DaemonSet's containers and flags, the example claims and classes."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


PACKAGING = ROOT / "packaging"


DEPLOY = PACKAGING / "deploy"


EXAMPLES = DEPLOY / "examples"


DOCKERFILE = PACKAGING / "Dockerfile"


DRIVER = "dracni.io"


KUBELET_PATHS = ("/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry")


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
MULTI_OBJECT_FILES = {
    "claim-parameters-policy.yaml": ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"],
    "addressreservations-policy.yaml": ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"],
    "pod-network-status-policy.yaml": ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"],
}


def file_objects(path: Path) -> list[dict]:
    """The objects of a manifest: one per file, but for MULTI_OBJECT_FILES."""
    if path.name in MULTI_OBJECT_FILES:
        docs = load_docs(path)
        assert [d["kind"] for d in docs] == MULTI_OBJECT_FILES[path.name], path.name
        return docs
    return [load_one(path)]


def deploy_objects() -> dict[str, dict]:
    """The kustomization's objects by kind/name, and by kind where there is one of the kind
    (there are four admission policies and four bindings)."""
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


def k8s_versions() -> list[str]:
    import kubernetes_validate

    return sorted({"1.34.0", kubernetes_validate.latest_version()})


def service_account_user() -> str:
    sa = deploy_objects()["ServiceAccount"]["metadata"]
    return f"system:serviceaccount:{sa['namespace']}:{sa['name']}"


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


def host_path_of(container: dict, path: str) -> str | None:
    """The host path mounted at ``path`` in ``container`` (None: not a hostPath mount)."""
    volumes = {v["name"]: v for v in pod_spec()["volumes"]}
    for mount in container.get("volumeMounts", []):
        if mount["mountPath"].rstrip("/") == path.rstrip("/"):
            return (volumes[mount["name"]].get("hostPath") or {}).get("path")
    return None


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
