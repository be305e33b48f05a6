"""`dracni install` / `uninstall` of the REAL frozen onedir bundle into a temporary CNI bin dir and
net.d, run the way the installer DaemonSet runs them, then exec'd through the link it made."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.harness import DRACNI_BINARY, Lab, run
from tests.integration.conftest import macvlan, one_device_claim, result_of
from tests.unit.install.test_install import ExecLoop, wait_for

BUNDLE = DRACNI_BINARY.resolve().parent
PRIMARY = {
    "cniVersion": "1.0.0",
    "name": "podnet",
    "plugins": [{"type": "ptp", "ipam": {"type": "host-local", "subnet": "10.244.0.0/24"}}],
}
VERSION_OUT = json.dumps(
    {"cniVersion": "1.0.0", "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]}, separators=(",", ":")
)


def dracni(*args: str, exe: Path | str = DRACNI_BINARY, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CNI_", "DRACNI_"))}
    proc = run([str(exe), *args], check=False, env=env, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"dracni {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout.decode()}\n{proc.stderr.decode()}"
        )
    return proc


def version_through(exe: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CNI_", "DRACNI_"))}
    env["CNI_COMMAND"] = "VERSION"
    return run([str(exe)], input=b'{"cniVersion":"1.0.0"}', env=env, check=False)


@pytest.fixture
def node(tmp_path: Path) -> Path:
    (tmp_path / "bin").mkdir()
    (tmp_path / "net.d").mkdir()
    return tmp_path


def dirs(node: Path) -> list[str]:
    return ["--bin-dir", str(node / "bin"), "--conf-dir", str(node / "net.d")]


def versions(node: Path) -> set[str]:
    return {n for n in os.listdir(node / "bin" / ".dracni") if not n.startswith(".")}


def test_frozen_install_exec_reinstall_uninstall(node: Path) -> None:
    primary = node / "net.d" / "10-podnet.conflist"
    primary.write_text(json.dumps(PRIMARY))
    (node / "bin" / "ptp").write_text("#!/bin/sh\n")
    out = dracni(
        "install",
        "--bundle-dir",
        str(BUNDLE),
        *dirs(node),
        "--state-dir",
        "/var/lib/dracni-test",
        "--log-level",
        "info",
    ).stdout.decode()
    assert "chains 10-podnet.conflist (written)" in out

    link = node / "bin" / "dracni"
    proc = version_through(link)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().strip() == VERSION_OUT
    target = os.readlink(link)
    assert target.startswith(".dracni/") and not os.path.isabs(target)
    ours = node / "net.d" / "00-dracni.conflist"
    chained = json.loads(ours.read_text())
    assert chained["name"] == "podnet" and chained["dracni.io/primary"] == "10-podnet.conflist"
    assert chained["plugins"][-1] == {"type": "dracni", "stateDir": "/var/lib/dracni-test", "logLevel": "info"}

    mtime, link_ino = ours.stat().st_mtime_ns, os.lstat(link).st_ino
    out = dracni(
        "install",
        "--bundle-dir",
        str(BUNDLE),
        *dirs(node),
        "--state-dir",
        "/var/lib/dracni-test",
        "--log-level",
        "info",
    ).stdout.decode()
    assert out.count("(unchanged)") == 2, out
    assert (ours.stat().st_mtime_ns, os.lstat(link).st_ino, os.readlink(link)) == (mtime, link_ino, target)

    out = dracni("uninstall", *dirs(node)).stdout.decode()
    assert out.count("removed ") == 3, out
    assert sorted(os.listdir(node / "bin")) == ["ptp"]
    assert sorted(os.listdir(node / "net.d")) == ["10-podnet.conflist"]
    assert json.loads(primary.read_text()) == PRIMARY
    assert dracni("uninstall", *dirs(node)).stdout.decode().strip() == "nothing to remove"


def test_frozen_default_bundle_dir_is_the_running_bundle_even_through_a_link(node: Path, tmp_path: Path) -> None:
    (node / "net.d" / "10-podnet.conflist").write_text(json.dumps(PRIMARY))
    dracni("install", *dirs(node))  # no --bundle-dir: the bundle it runs from
    first = os.readlink(node / "bin" / "dracni")
    other = tmp_path / "other-bin"
    other.mkdir()
    # run from the installed copy, through the link: it must install itself (same content, same hash)
    dracni("install", "--bin-dir", str(other), "--conf-dir", str(node / "net.d"), exe=node / "bin" / "dracni")
    assert os.readlink(other / "dracni") == first
    assert version_through(other / "dracni").stdout.decode().strip() == VERSION_OUT


def test_frozen_errors_are_one_line(node: Path) -> None:
    proc = dracni("install", *dirs(node), check=False)
    assert proc.returncode == 1
    assert (
        proc.stderr.decode().strip()
        == f"dracni: no CNI network config in {node / 'net.d'} yet: is the primary CNI installed?"
    )
    (node / "net.d" / "10-bad.conflist").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "ptp"}, {"type": "dracni"}]})
    )
    proc = dracni("install", *dirs(node), check=False)
    assert proc.returncode == 1
    lines = proc.stderr.decode().strip().splitlines()
    assert (
        len(lines) == 1 and str(node / "net.d" / "10-bad.conflist") in lines[0] and "already chains dracni" in lines[0]
    )
    assert sorted(os.listdir(node / "net.d")) == ["10-bad.conflist"]


def test_frozen_exec_never_fails_while_installs_switch_versions(node: Path, tmp_path: Path) -> None:
    """The runtime execs the plugin in a loop while ~20 installs alternate between two bundles."""
    variant = tmp_path / "bundle-b"
    shutil.copytree(BUNDLE, variant, symlinks=True)
    (variant / "_internal" / "dracni-test-variant").write_text("B\n")
    bundles = [BUNDLE, variant]
    dracni(
        "install",
        "--bundle-dir",
        str(BUNDLE),
        "--bin-dir",
        str(node / "bin"),
        "--conf-dir",
        str(node / "net.d"),
        check=False,
    )  # no primary: exit 1, but the bundle is in place
    assert (node / "bin" / "dracni").exists()
    seen = set()
    with ExecLoop(node / "bin" / "dracni", {VERSION_OUT + "\n", VERSION_OUT}, tmp_path) as loop:
        for i in range(20):
            proc = dracni("install", "--bundle-dir", str(bundles[(i + 1) % 2]), *dirs(node), check=False)
            assert proc.returncode == 1 and b"no CNI network config" in proc.stderr  # the bin part worked
            seen.add(os.readlink(node / "bin" / "dracni"))
            assert len(versions(node)) == 2
    assert loop.report["count"] == 0, loop.report["failures"]
    assert loop.report["runs"] >= 20, loop.report
    assert len(seen) == 2


def test_frozen_watch_waits_for_the_primary_and_follows_it(node: Path) -> None:
    """Started before the primary CNI (a reboot): nothing, then the chained conflist within a second."""
    net = node / "net.d"
    ours = net / "00-dracni.conflist"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CNI_", "DRACNI_"))}
    proc = subprocess.Popen(
        [str(DRACNI_BINARY), "install", "--watch", *dirs(node)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert proc.stdout.readline().decode().startswith(str(node / "bin" / "dracni"))
        assert proc.stdout.readline().decode().startswith("watching")
        time.sleep(0.3)
        assert list(net.iterdir()) == []
        primary = net / "10-podnet.conflist"
        primary.write_text(json.dumps(PRIMARY))
        wait_for(ours.exists, what="chained conflist")
        primary.write_text(json.dumps(dict(PRIMARY, cniVersion="1.1.0")))
        wait_for(lambda: json.loads(ours.read_text())["cniVersion"] == "1.1.0", what="regenerated conflist")
        primary.unlink()
        wait_for(lambda: not ours.exists(), what="our conflist removed with the primary")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0, proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read().decode()
    assert "Traceback" not in stderr and "waiting for the primary CNI" in stderr


def test_installed_plugin_runs_chained_under_cnitool(tmp_path: Path) -> None:
    """End to end: the installed link and the generated conflist are what the runtime runs."""
    lab = Lab(base=tmp_path, nics=("eth1",))
    try:
        (lab.bin_dir / "dracni").unlink()  # the harness's own link: install makes ours
        primary = {
            "cniVersion": "1.0.0",
            "name": "podnet",
            "plugins": [
                {"type": "ptp", "ipam": {"type": "host-local", "subnet": "10.244.0.0/24", "dataDir": str(lab.ipam_dir)}}
            ],
        }
        (lab.netconf_dir / "10-podnet.conflist").write_text(json.dumps(primary))
        dracni(
            "install",
            "--bin-dir",
            str(lab.bin_dir),
            "--conf-dir",
            str(lab.netconf_dir),
            "--state-dir",
            str(lab.state_dir),
            "--log-file",
            str(lab.log_file),
            "--log-level",
            "debug",
        )
        assert os.path.islink(lab.bin_dir / "dracni")
        pod_uid = "0b5e3c3e-0000-4000-8000-000000000001"
        lab.prepare(one_device_claim("mv", pod_uid, [macvlan(lab)]))
        pod = lab.pod()
        out = result_of(lab.cnitool("add", pod, pod_uid=pod_uid))
        assert [i["name"] for i in out["interfaces"] if i.get("sandbox")] == ["eth0"]
        assert "net1" in pod.links()
        lab.cnitool("del", pod, pod_uid=pod_uid)
        assert "net1" not in pod.links()

        dracni("uninstall", "--bin-dir", str(lab.bin_dir), "--conf-dir", str(lab.netconf_dir))
        pod2 = lab.pod()
        lab.cnitool("add", pod2, pod_uid=pod_uid)  # the primary alone again: no dracni, no net1
        assert sorted(pod2.links()) == ["eth0", "lo"]
        lab.cnitool("del", pod2, pod_uid=pod_uid)
    finally:
        lab.close()
