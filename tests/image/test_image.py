"""The image is really built and run (issue 14 item 4): ``packaging/Dockerfile`` built with
buildah from local Debian bases (``tests/image/build.py``), then the image's own entrypoint run
the ways the DaemonSet runs it:

- ``--version``;
- ``install`` into a fake host root (an empty tree with opt/cni/bin, etc/cni/net.d and a primary
  conflist, no C library: ``--host-root=/``, the check runs the copy in the image itself);
- ``install`` with the DaemonSet's own arguments and mounts (``packaging/deploy/daemonset.yaml``)
  on Debian 11 and 12 nodes (``tests/node_os`` root filesystems), mounted at /host read-only,
  their CNI dirs writable, the installed copy run on each through ``chroot``;
- ``kubelet-plugin --help``: every option the DaemonSet passes is one the image's binary knows.

Each run is a fresh container of the image (``buildah run --isolation chroot``), removed after it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.image.build import Buildah, Built, build_image, missing_tools
from tests.node_os.rootfs import SUITES, node_root

REPO = Path(__file__).resolve().parents[2]
DAEMONSET = REPO / "packaging" / "deploy" / "daemonset.yaml"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
PRIMARY = {
    "cniVersion": "1.0.0",
    "name": "podnet",
    "plugins": [
        {"type": "bridge", "bridge": "cni0", "ipam": {"type": "host-local", "subnet": "10.88.0.0/16"}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
}


@pytest.fixture(scope="module")
def buildah() -> Buildah:
    why = missing_tools()
    if why:
        pytest.skip(why)
    return Buildah()


@pytest.fixture(scope="module")
def image(buildah: Buildah) -> Built:
    built = build_image(buildah)
    t = built.timings
    print(
        f"\n{built.ref}: {built.size}; build base {t.build_base:.0f} s, runtime base "
        f"{t.runtime_base:.0f} s, image {t.image:.0f} s (0 s: cached)"
    )
    return built


def run(buildah: Buildah, image: Built, *args: str, volumes=()) -> subprocess.CompletedProcess[bytes]:
    """The image's entrypoint with ``args``, as a container runtime runs it."""
    proc = buildah.run_image(image.ref, [*image.entrypoint, *args], volumes=volumes)
    print(f"$ {' '.join([*image.entrypoint, *args])}\n{proc.stdout.decode()}{proc.stderr.decode()}")
    return proc


def tree_digest(root: Path) -> dict[str, str]:
    """Relative path -> sha256 (files), target (links), 'dir' of everything under ``root``."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def bundle_in_image(buildah: Buildah, image: Built) -> dict[str, str]:
    """The bundle the image carries (its entrypoint's directory), digested."""
    with buildah.mounted(image.ref) as root:
        return tree_digest(root / Path(image.entrypoint[0]).parent.relative_to("/"))


def fake_host(base: Path) -> Path:
    (base / "opt/cni/bin").mkdir(parents=True)
    (base / "etc/cni/net.d").mkdir(parents=True)
    (base / "etc/cni/net.d/10-podnet.conflist").write_text(json.dumps(PRIMARY))
    return base


def assert_installed(host: Path, stdout: str, bundle: dict[str, str], state_dir: str | None) -> None:
    """The link names a content-addressed copy of the image's bundle; the chained conflist is
    the primary's network with dracni appended; the primary is untouched."""
    bin_dir, conf_dir = host / "opt/cni/bin", host / "etc/cni/net.d"
    target = os.readlink(bin_dir / "dracni")
    assert target.startswith(".dracni/") and target.endswith("/dracni"), target
    assert tree_digest(bin_dir / Path(target).parent) == bundle
    assert sorted(p.name for p in bin_dir.iterdir()) == [".dracni", "dracni"]
    chained = json.loads((conf_dir / "00-dracni.conflist").read_text())
    ours = {"type": "dracni", **({"stateDir": state_dir} if state_dir else {})}
    assert chained == {
        "cniVersion": "1.0.0",
        "name": "podnet",
        "dracni.io/primary": "10-podnet.conflist",
        "plugins": [*PRIMARY["plugins"], ours],
    }
    assert json.loads((conf_dir / "10-podnet.conflist").read_text()) == PRIMARY
    assert (conf_dir / "00-dracni.conflist").stat().st_mode & 0o777 == 0o644
    lines = stdout.splitlines()
    assert len(lines) == 2, stdout
    assert lines[0].endswith(f"/opt/cni/bin/dracni -> {target}"), lines[0]
    assert lines[1].endswith("/etc/cni/net.d/00-dracni.conflist chains 10-podnet.conflist (written)"), lines[1]


def test_version(buildah: Buildah, image: Built) -> None:
    assert image.entrypoint == ("/opt/dracni/dracni",)
    proc = run(buildah, image, "--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode() == f"dracni, version {VERSION}\n"


def test_install_into_a_fake_host_root(
    buildah: Buildah, image: Built, bundle_in_image: dict[str, str], tmp_path: Path
) -> None:
    """An empty host tree (no C library): the check runs the copy in the image (--host-root=/)."""
    host = fake_host(tmp_path / "host")
    proc = run(
        buildah,
        image,
        "install",
        "--host-root=/",
        "--bin-dir=/fakehost/opt/cni/bin",
        "--conf-dir=/fakehost/etc/cni/net.d",
        volumes=[(host, "/fakehost")],
    )
    assert proc.returncode == 0, proc.stderr
    assert_installed(host, proc.stdout.decode(), bundle_in_image, state_dir=None)


def daemonset_pod() -> dict:
    return yaml.safe_load(DAEMONSET.read_text())["spec"]["template"]["spec"]


@pytest.mark.parametrize("suite", sorted(SUITES))
def test_install_as_the_daemonset_runs_it(
    buildah: Buildah, image: Built, bundle_in_image: dict[str, str], suite: str, tmp_path: Path
) -> None:
    """The install-cni init container, its args and mounts, on a Debian node (11: glibc 2.31,
    12: 2.36): the node's root filesystem (``tests/node_os``, shared and left untouched) at
    /host read-only, its CNI bin and conf dirs writable on their own; the host's /proc at
    /host/proc stands for the recursive bind of hostPath / (the native ``dracni`` finds
    ``dracni-python`` through /proc/self/exe).  The installer runs the copy chrooted on the node."""
    node = node_root(suite)
    cni = fake_host(tmp_path / "node")
    pod = daemonset_pod()
    init = next(c for c in pod["initContainers"] if c["name"] == "install-cni")
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    writable = {"/opt/cni/bin": cni / "opt/cni/bin", "/etc/cni/net.d": cni / "etc/cni/net.d"}
    for host_path in writable:  # the volumes' type DirectoryOrCreate: kubelet makes them on the node
        (node / host_path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    volumes = []
    for mount in init["volumeMounts"]:
        host_path = host_paths[mount["name"]]
        source = node if host_path == "/" else writable[host_path]
        volumes.append((source, mount["mountPath"] + (":ro" if mount.get("readOnly") else "")))
    assert [dst for _, dst in volumes] == ["/host:ro", "/host/opt/cni/bin", "/host/etc/cni/net.d"]
    volumes.append((Path("/proc"), "/host/proc"))
    proc = run(buildah, image, *init["args"], volumes=volumes)
    assert proc.returncode == 0, proc.stderr
    state_dir = next(a.split("=", 1)[1] for a in init["args"] if a.startswith("--state-dir="))
    assert_installed(cni, proc.stdout.decode(), bundle_in_image, state_dir=state_dir)


def test_kubelet_plugin_help(buildah: Buildah, image: Built) -> None:
    proc = run(buildah, image, "kubelet-plugin", "--help")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    assert out.startswith("Usage: dracni kubelet-plugin [OPTIONS]\n"), out
    assert "Run the kubelet DRA plugin service" in out
    main = next(c for c in daemonset_pod()["containers"] if c["name"] == "kubelet-plugin")
    assert main["args"][0] == "kubelet-plugin"
    flags = [a.split("=", 1)[0] for a in main["args"][1:] if a.startswith("--")]
    assert flags, main["args"]
    for flag in flags:
        assert f"  {flag} " in out or f"  {flag}\n" in out or f", {flag} " in out, flag


def test_install_without_a_primary_fails_and_names_it(buildah: Buildah, image: Built, tmp_path: Path) -> None:
    """No primary conflist yet (the init container is retried until there is one): exit 1, one
    line naming the missing config; the bundle is in place, no conflist is written."""
    host = tmp_path / "host"
    (host / "opt/cni/bin").mkdir(parents=True)
    (host / "etc/cni/net.d").mkdir(parents=True)
    proc = run(
        buildah,
        image,
        "install",
        "--host-root=/",
        "--bin-dir=/fakehost/opt/cni/bin",
        "--conf-dir=/fakehost/etc/cni/net.d",
        volumes=[(host, "/fakehost")],
    )
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.decode().splitlines() if line.startswith("dracni:")]
    assert errors == ["dracni: no CNI network config in /fakehost/etc/cni/net.d yet: is the primary CNI installed?"], (
        proc.stderr
    )
    assert list((host / "etc/cni/net.d").iterdir()) == []


def test_nothing_is_left_behind(buildah: Buildah, image: Built) -> None:
    """After the runs above (one of them failing): no working container, nothing mounted under
    the private storage."""
    assert buildah("containers", "--quiet") == ""
    prefix = str(buildah.cache.resolve()) + "/"
    with open("/proc/self/mountinfo") as f:
        assert [line.split()[4] for line in f if line.split()[4].startswith(prefix)] == []
