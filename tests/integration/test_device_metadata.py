"""Device metadata (KEP-5304) end to end: clusterless ``dracni prepare`` with
``--device-metadata-versions`` writes the file and its CDI spec, the frozen plugin's ADD (cnitool,
in a lab netns) writes the attachment's ``networkData`` into it, DEL takes it out, unprepare
removes both files; and a real CDI consumer, a container started by Debian's podman with the CDI
device, reads the file at the upstream container path
(k8s.io/dynamic-resource-allocation/api/metadata ``ResourceClaimFilePath``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from dracni.claims.device_metadata import parse_stream, read_stream
from tests.integration.conftest import addresses, assert_records_match_schema, macvlan, one_device_claim

DRIVER = "dracni.io"
#: podman 4.3 (Debian 12) reads CDI specs from /etc/cdi and /var/run/cdi only (no
#: ``cdi_spec_dirs`` setting before containers/common 0.54): the consumer test writes there,
#: under names holding the test's claim UID, and removes them.
SYSTEM_CDI_DIR = Path("/var/run/cdi")


def _prepare(lab, claim, cdi_dir: Path) -> str:
    proc = lab.prepare(
        claim,
        args=(
            "--device-metadata-versions=v1alpha1",
            f"--cdi-dir={cdi_dir}",
            f"--plugins-dir={lab.tmp / 'plugins'}",
        ),
    )
    return proc.stdout.decode()


def _paths(lab, claim, cdi_dir: Path) -> tuple[Path, Path]:
    meta = claim["metadata"]
    file = (
        lab.tmp
        / "plugins"
        / DRIVER
        / "dra-device-metadata"
        / f"{meta['namespace']}_{meta['name']}"
        / "net"
        / "metadata.json"
    )
    return file, cdi_dir / f"{DRIVER}_metadata_{meta['uid']}_net.json"


def test_add_writes_network_data_del_removes_it(lab, pod_uid):
    lab.write_conflist()
    claim = one_device_claim("mv", pod_uid, [macvlan(lab)])
    cdi_dir = lab.tmp / "cdi"
    out = _prepare(lab, claim, cdi_dir)
    assert f"(CDI devices: {DRIVER}/metadata={claim['metadata']['uid']}_net)" in out
    file, spec = _paths(lab, claim, cdi_dir)
    (before,) = read_stream(str(file))
    assert before["apiVersion"] == "metadata.resource.k8s.io/v1alpha1"
    device = before["requests"][0]["devices"][0]
    assert (device["driver"], device["pool"], device["name"]) == (DRIVER, "node1", "eth1")
    assert device["attributes"][f"{DRIVER}/ifName"] == {"string": "eth1"}  # the ResourceSlice's attributes
    assert "networkData" not in device
    assert json.loads(spec.read_text())["kind"] == f"{DRIVER}/metadata"

    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    mac = pod.links()["net1"]["address"]
    (after,) = read_stream(str(file))
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
    assert after["requests"][0]["devices"][0]["networkData"] == {
        "interfaceName": "net1",
        "ips": addresses(pod.links(), "net1"),
        "hardwareAddress": mac,
    }
    assert_records_match_schema(lab.state_dir)

    lab.cnitool("del", pod, pod_uid=pod_uid)
    (deleted,) = read_stream(str(file))
    assert deleted["metadata"]["generation"] == after["metadata"]["generation"] + 1
    assert "networkData" not in deleted["requests"][0]["devices"][0]

    lab.dracni("unprepare", str(lab.claims_dir), f"--state-dir={lab.state_dir}")
    assert not file.exists() and not spec.exists()


def _podman_problem() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not installed (the Makefile's APT_PACKAGES has it)"
    if shutil.which("debootstrap") is None:
        return "debootstrap is not installed: no Debian root filesystem for the container"
    return None


def test_a_podman_container_reads_the_file_at_the_upstream_path(lab, pod_uid, tmp_path):
    problem = _podman_problem()
    if problem:
        pytest.skip(problem)
    from tests.node_os.rootfs import node_root

    rootfs = node_root("bookworm")  # debootstrap's minbase, cached under .cache/rootfs/ (read-only here: :O)
    lab.write_conflist()
    claim = one_device_claim("mv", pod_uid, [macvlan(lab)])
    _prepare(lab, claim, SYSTEM_CDI_DIR)
    file, spec = _paths(lab, claim, SYSTEM_CDI_DIR)
    store: Path | None = None
    try:
        pod = lab.pod()
        lab.cnitool("add", pod, pod_uid=pod_uid)
        mac = pod.links()["net1"]["address"]
        cdi_id = f"{DRIVER}/metadata={claim['metadata']['uid']}_net"
        inside = f"/var/run/kubernetes.io/dra-device-attributes/resourceclaims/mv/net/{DRIVER}-metadata.json"
        store = Path(tempfile.mkdtemp(prefix="dracni-pm-"))  # podman: a run root of <= 50 characters
        proc = subprocess.run(
            [
                "podman", f"--root={store / 'root'}", f"--runroot={store / 'run'}", "--storage-driver=vfs",
                "--cgroup-manager=cgroupfs", "--events-backend=file", "run", "--rm", "--network=none", "--ulimit=nofile=1024:1024", "--ulimit=nproc=1024:1024",
                f"--device={cdi_id}", "--rootfs", f"{rootfs}:O", "/bin/cat", inside,
            ],
            capture_output=True,
            timeout=120,
            check=False,
            env={**os.environ, "TMPDIR": str(tmp_path)},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr.decode()
        (seen,) = parse_stream(proc.stdout.decode())
        if os.environ.get("DRACNI_METADATA_SAMPLE"):  # keep what the container read (a report's example)
            Path(os.environ["DRACNI_METADATA_SAMPLE"]).write_text(proc.stdout.decode())
        assert seen["requests"][0]["devices"][0]["networkData"] == {
            "interfaceName": "net1",
            "ips": addresses(pod.links(), "net1"),
            "hardwareAddress": mac,
        }
        lab.cnitool("del", pod, pod_uid=pod_uid)
    finally:
        if store is not None:
            shutil.rmtree(store, ignore_errors=True)
        lab.dracni("unprepare", str(lab.claims_dir), f"--state-dir={lab.state_dir}", check=False)
        spec.unlink(missing_ok=True)
    assert not file.exists() and not spec.exists()
