"""`dracni install` runs the new copy on the node before the link or the conflist may name it
(issue 14 item 3): a copy that cannot run there leaves the node's CNI configuration and the
previous version in place, and the install fails with one line naming the cause.

Fake onedir bundles (tests/unit/install/test_install.py make_bundle) on the real machine; the same
check through a chroot into another Debian release is in tests/node_os/.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dracni.install.hostcheck import HostCheck, HostCheckError, host_glibc
from tests.unit.install.test_install import cli, make_bundle, write_primary

#: What the dynamic loader prints when the node's C library is too old for a binary.
OLD_GLIBC = """#!/bin/sh
echo "$0: /lib/x86_64-linux-gnu/libc.so.6: version \\`GLIBC_2.99' not found (required by $0)" >&2
exit 1
"""
WRONG_ANSWER = """#!/bin/sh
echo '{"cniVersion":"1.1.0","code":999,"msg":"not what the installer expects"}'
"""


def broken_bundle(path: Path, script: str) -> Path:
    make_bundle(path, "B")
    (path / "dracni").write_text(script)
    return path


@pytest.fixture
def node(tmp_path: Path) -> Path:
    (tmp_path / "bin").mkdir()
    (tmp_path / "net.d").mkdir()
    write_primary(tmp_path / "net.d")
    return tmp_path


def install(node: Path, bundle: Path, *more: str):
    return cli("install", "--bundle-dir", str(bundle), "--bin-dir", str(node / "bin"),
               "--conf-dir", str(node / "net.d"), *more)  # fmt: skip


def snapshot(node: Path) -> dict[str, str | bytes]:
    """Everything the runtime could see: the conf dir's files and the bin dir's link and copies."""
    out: dict[str, str | bytes] = {}
    for path in sorted((node / "net.d").iterdir()):
        out[f"net.d/{path.name}"] = path.read_bytes()
    link = node / "bin" / "dracni"
    out["link"] = os.readlink(link) if link.is_symlink() else "absent"
    versions = node / "bin" / ".dracni"
    out["versions"] = (
        " ".join(sorted(n for n in os.listdir(versions) if not n.startswith("."))) if versions.exists() else ""
    )
    return out


def test_a_copy_the_nodes_c_library_cannot_run_is_never_linked_nor_chained(node: Path) -> None:
    before = snapshot(node)
    result = install(node, broken_bundle(node / "b", OLD_GLIBC))
    assert result.exit_code == 1
    (line,) = result.output.splitlines()
    assert line.startswith("dracni: ") and "cannot run on this node (VERSION failed: " in line
    assert line.endswith(f"this node has glibc {host_glibc('/')}, the bundle needs GLIBC_2.99")
    assert snapshot(node) == before  # no conflist, no link, and the unlinked copy is gone


def test_a_failed_upgrade_keeps_the_previous_version_and_the_conflist(node: Path) -> None:
    assert install(node, make_bundle(node / "a", "A")).exit_code == 0
    before = snapshot(node)
    assert before["link"] != "absent" and "net.d/00-dracni.conflist" in before

    for script in (OLD_GLIBC, WRONG_ANSWER):
        result = install(node, broken_bundle(node / "b", script))
        assert result.exit_code == 1 and len(result.output.splitlines()) == 1, result.output
        assert snapshot(node) == before
    assert "answered VERSION on this node with" in result.output


def test_the_watch_sidecar_checks_before_it_syncs(node: Path) -> None:
    """`install --watch` (the conflist sidecar) installs first: a copy that cannot run stops it
    before it writes anything."""
    result = install(node, broken_bundle(node / "b", OLD_GLIBC), "--watch")
    assert result.exit_code == 1 and "cannot run on this node" in result.output
    assert not (node / "net.d" / "00-dracni.conflist").exists()


def test_the_check_is_a_version_and_a_pass_through_add(node: Path) -> None:
    """The copy sees what the runtime would give it, and nothing of the installer's environment."""
    seen = node / "seen"
    spy = f"""#!/bin/sh
env | sort > "{seen}.$CNI_COMMAND"
cat > "{seen}.$CNI_COMMAND.stdin"
if [ "$CNI_COMMAND" = VERSION ]; then
  echo '{{"cniVersion":"1.1.0","supportedVersions":["1.0.0","1.1.0"]}}'
else
  python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["prevResult"]))' "{seen}.ADD.stdin"
fi
"""
    assert install(node, broken_bundle(node / "spy", spy)).exit_code == 0
    add_env = dict(line.split("=", 1) for line in Path(f"{seen}.ADD").read_text().splitlines())
    assert add_env["CNI_COMMAND"] == "ADD" and add_env["CNI_PATH"] == str((node / "bin").resolve())
    assert add_env["CNI_ARGS"].startswith("K8S_POD_UID=dracni-install-check")
    assert not any(k.startswith("DRACNI_") or k == "PYTHONPATH" for k in add_env)
    assert '"stateDir": "/nonexistent/dracni-install-check"' in Path(f"{seen}.ADD.stdin").read_text()


def test_paths_are_translated_to_the_host_root_and_must_be_under_it(tmp_path: Path) -> None:
    check = HostCheck(str(tmp_path))
    (tmp_path / "opt" / "cni" / "bin").mkdir(parents=True)
    assert check.path_on_host(str(tmp_path / "opt" / "cni" / "bin")) == "/opt/cni/bin"
    with pytest.raises(Exception, match="is not under the host root"):
        check.path_on_host("/usr/lib/cni")
    assert HostCheck("/").path_on_host("/usr/lib/cni") == os.path.realpath("/usr/lib/cni")


def test_the_nodes_glibc_release_is_read_from_its_root(tmp_path: Path) -> None:
    assert host_glibc(str(tmp_path)) is None
    libc = tmp_path / "usr" / "lib64" / "libc.so.6"
    libc.parent.mkdir(parents=True)
    libc.write_bytes(b"\x7fELF...\0GNU C Library (GNU libc) stable release version 2.28.\n\0...")
    assert host_glibc(str(tmp_path)) == "2.28"


def test_an_executable_that_cannot_be_started_at_all_is_named(tmp_path: Path) -> None:
    with pytest.raises(HostCheckError, match="cannot run"):
        HostCheck("/").run(str(tmp_path / "missing"), str(tmp_path))


def test_a_refused_copy_is_a_warning_event_on_the_node(node: Path, tmp_path: Path) -> None:
    """What `kubectl describe node` shows (the init container's status says the same)."""
    from tests.kubeclient import serving

    with serving(tmp_path, "node-7") as api:
        result = install(node, broken_bundle(node / "b", OLD_GLIBC), "--node-name", "node-7",
                         "--kubeconfig", api.kubeconfig_path)  # fmt: skip
        assert result.exit_code == 1
        (event,) = api.list_events("default")
    assert event["type"] == "Warning" and event["reason"] == "CNIPluginCannotRun"
    assert event["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": "node-7"}
    assert event["note"].startswith("dracni was not installed: ") and "GLIBC_2.99" in event["note"]
    assert event["note"].endswith("the node's CNI configuration is unchanged")
