"""Node installation (dracni.install and `dracni install/uninstall`) on a temporary root.

The bin dir and net.d live in tmp_path.  The "bundle" is a fake onedir bundle: an executable
``dracni`` script that, like the PyInstaller bootloader, finds its ``_internal/`` next to its
resolved path and prints what it holds on CNI_COMMAND=VERSION.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from dracni import install as inst
from dracni.cli import main as cli_main
from dracni.install import InstallError, NoPrimaryError
from dracni.install import bundle as inst_bundle

PRIMARY = {
    "cniVersion": "1.0.0",
    "name": "podnet",
    "plugins": [
        {"type": "ptp", "ipam": {"type": "host-local", "subnet": "10.244.0.0/24"}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
}
DRACNI_CONF = {"stateDir": "/var/lib/dracni", "logFile": "/var/log/dracni.log", "logLevel": "info"}

FAKE_DRACNI = """#!/bin/sh
# like the PyInstaller bootloader: _internal/ sits next to the resolved executable
here=$(dirname "$(readlink -f "$0")")
if [ "$CNI_COMMAND" = ADD ]; then  # a pod without claims (the installer's check): prevResult back
  exec python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["prevResult"]))'
fi
exec cat "$here/_internal/version.json"
"""

# Runs in its own process (so that it never inherits a file the installer holds open for
# writing, which would make its own exec fail with ETXTBSY: golang/go#22315), execs EXE in a
# tight loop until STOP_FILE exists and reports every exec whose result is not one of EXPECTED.
EXEC_LOOP = r"""
import json, os, subprocess, sys
exe, stop_file, expected = sys.argv[1], sys.argv[2], set(json.loads(sys.argv[3]))
env = {k: v for k, v in os.environ.items() if not k.startswith(("CNI_", "DRACNI_"))}
env.update(CNI_COMMAND="VERSION", CNI_PATH=os.path.dirname(exe))
runs, failures = 0, []
open(stop_file + ".started", "w").close()
while True:
    done = os.path.exists(stop_file)
    try:
        p = subprocess.run([exe], input=b'{"cniVersion":"1.0.0"}', env=env, capture_output=True, timeout=60)
        out = p.stdout.decode(errors="replace")
        if p.returncode != 0 or out not in expected:
            failures.append(f"rc={p.returncode} stdout={out[:300]!r} stderr={p.stderr[-500:]!r}")
    except OSError as exc:
        failures.append(f"exec failed: {exc!r}")
    runs += 1
    if done:
        break
print(json.dumps({"runs": runs, "failures": failures[:10], "count": len(failures)}))
"""


class ExecLoop:
    """``with ExecLoop(exe, expected) as loop: ...`` then ``loop.report``."""

    def __init__(self, exe: str | Path, expected: set[str], tmp: Path) -> None:
        self.exe, self.expected, self.stop_file = str(exe), expected, tmp / "exec-loop.stop"
        self.report: dict = {}

    def __enter__(self) -> "ExecLoop":
        self.proc = subprocess.Popen(
            [sys.executable, "-c", EXEC_LOOP, self.exe, str(self.stop_file), json.dumps(sorted(self.expected))],
            stdout=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        while not Path(str(self.stop_file) + ".started").exists():
            assert time.monotonic() < deadline and self.proc.poll() is None, "exec loop did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self.stop_file.touch()
        out, _ = self.proc.communicate(timeout=120)
        self.report = json.loads(out)


def version_json(tag: str) -> str:
    return (
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"],
                "bundle": tag,
                "padding": tag * 2000,
            }
        )
        + "\n"
    )


def make_bundle(path: Path, tag: str = "A") -> Path:
    (path / "_internal").mkdir(parents=True, exist_ok=True)
    exe = path / "dracni"
    exe.write_text(FAKE_DRACNI)
    exe.chmod(0o755)
    python = path / "dracni-python"  # what the native fast path hands over to
    python.write_text(FAKE_DRACNI)
    python.chmod(0o755)
    (path / "_internal" / "version.json").write_text(version_json(tag))
    (path / "_internal" / "lib").mkdir(exist_ok=True)
    (path / "_internal" / "lib" / "module.py").write_text(f"TAG = {tag!r}\n")
    return path


def run_plugin(exe: Path | str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CNI_")}
    env["CNI_COMMAND"] = "VERSION"
    return subprocess.run([str(exe)], input=b'{"cniVersion":"1.0.0"}', env=env, capture_output=True, timeout=30)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "bin").mkdir()
    (tmp_path / "net.d").mkdir()
    return tmp_path


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return make_bundle(tmp_path / "bundles" / "a", "A")


def write_primary(conf_dir: Path, name: str = "10-podnet.conflist", doc: dict | None = None) -> Path:
    path = conf_dir / name
    path.write_text(json.dumps(PRIMARY if doc is None else doc, indent=2))
    return path


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def versions(bin_dir: Path) -> set[str]:
    return {n for n in os.listdir(bin_dir / ".dracni") if not n.startswith(".")}


# -- the bundle -----------------------------------------------------------------------------------


def test_install_links_a_hashed_copy_of_the_bundle(root: Path, bundle: Path) -> None:
    exe = inst.install_bundle(str(bundle), str(root / "bin"))
    link = root / "bin" / "dracni"
    digest = inst.bundle_hash(str(bundle))
    assert exe == str(root / "bin" / ".dracni" / digest / "dracni")
    assert link.is_symlink() and os.readlink(link) == f".dracni/{digest}/dracni"  # relative: same on host and in a pod
    assert versions(root / "bin") == {digest}
    installed = root / "bin" / ".dracni" / digest
    assert (installed / "_internal" / "version.json").read_text() == version_json("A")
    assert stat.S_IMODE(installed.stat().st_mode) == 0o755
    assert stat.S_IMODE((installed / "dracni").stat().st_mode) == 0o755
    assert stat.S_IMODE((installed / "_internal" / "version.json").stat().st_mode) == 0o644
    proc = run_plugin(link)
    assert proc.returncode == 0 and proc.stdout.decode() == version_json("A")
    assert not [n for n in os.listdir(root / "bin") if n.startswith(".dracni.link")]


def test_install_is_idempotent(root: Path, bundle: Path) -> None:
    write_primary(root / "net.d")
    first = inst.install_bundle(str(bundle), str(root / "bin"))
    assert inst.sync(str(root / "net.d"), DRACNI_CONF) == str(root / "net.d" / "10-podnet.conflist")
    link, conf = root / "bin" / "dracni", root / "net.d" / "00-dracni.conflist"
    link_before, conf_before = os.lstat(link), os.stat(conf)
    dir_before = os.stat(first)
    time.sleep(0.02)
    assert inst.install_bundle(str(bundle), str(root / "bin")) == first
    assert inst.sync(str(root / "net.d"), DRACNI_CONF) == str(root / "net.d" / "10-podnet.conflist")
    assert not inst.write_chained(str(root / "net.d"), str(root / "net.d" / "10-podnet.conflist"), DRACNI_CONF)
    link_after, conf_after = os.lstat(link), os.stat(conf)
    assert (link_after.st_ino, link_after.st_mtime_ns) == (link_before.st_ino, link_before.st_mtime_ns)
    assert (conf_after.st_ino, conf_after.st_mtime_ns) == (conf_before.st_ino, conf_before.st_mtime_ns)
    assert os.stat(first).st_ino == dir_before.st_ino
    assert versions(root / "bin") == {os.path.basename(os.path.dirname(first))}


def test_reinstall_switches_the_link_and_keeps_exactly_one_previous_version(root: Path, tmp_path: Path) -> None:
    bundles = [make_bundle(tmp_path / "bundles" / t, t) for t in ("A", "B", "C")]
    hashes = [inst.bundle_hash(str(b)) for b in bundles]
    assert len(set(hashes)) == 3
    link = root / "bin" / "dracni"
    inst.install_bundle(str(bundles[0]), str(root / "bin"))
    inst.install_bundle(str(bundles[1]), str(root / "bin"))
    assert os.readlink(link) == f".dracni/{hashes[1]}/dracni"
    assert versions(root / "bin") == {hashes[0], hashes[1]}
    inst.install_bundle(str(bundles[2]), str(root / "bin"))
    assert os.readlink(link) == f".dracni/{hashes[2]}/dracni"
    assert versions(root / "bin") == {hashes[1], hashes[2]}
    assert run_plugin(link).stdout.decode() == version_json("C")
    # back to an earlier content: its dir is made again, the one before goes
    inst.install_bundle(str(bundles[0]), str(root / "bin"))
    assert versions(root / "bin") == {hashes[2], hashes[0]}
    assert run_plugin(link).stdout.decode() == version_json("A")


def test_content_hash_ignores_where_the_bundle_is_but_not_what_it_holds(tmp_path: Path) -> None:
    a = make_bundle(tmp_path / "x" / "a", "A")
    same = make_bundle(tmp_path / "y" / "other-name", "A")
    assert inst.bundle_hash(str(a)) == inst.bundle_hash(str(same))
    (same / "_internal" / "lib" / "module.py").chmod(0o755)  # an exec bit is content
    assert inst.bundle_hash(str(a)) != inst.bundle_hash(str(same))


def test_install_replaces_a_regular_file_atomically(root: Path, bundle: Path) -> None:
    old = root / "bin" / "dracni"
    old.write_text("#!/bin/sh\necho old\n")
    old.chmod(0o755)
    with open(old, "rb") as running:  # what a process executing the old file still sees
        inst.install_bundle(str(bundle), str(root / "bin"))
        assert running.read() == b"#!/bin/sh\necho old\n"
    assert old.is_symlink()
    assert run_plugin(old).stdout.decode() == version_json("A")


def test_install_repairs_a_damaged_copy(root: Path, bundle: Path) -> None:
    exe = Path(inst.install_bundle(str(bundle), str(root / "bin")))
    (exe.parent / "_internal" / "version.json").write_text("")  # e.g. a crash on a filesystem without fsync
    assert inst.install_bundle(str(bundle), str(root / "bin")) == str(exe)
    assert run_plugin(root / "bin" / "dracni").stdout.decode() == version_json("A")
    assert versions(root / "bin") == {exe.parent.name}


@pytest.mark.parametrize(
    "damage, message",
    [
        ("no-exe", "no dracni executable"),
        ("no-python", "no dracni-python executable"),
        ("not-exec", "is not an executable file"),
        ("no-internal", "no _internal/"),
        ("escaping-link", "points outside the bundle"),
    ],
)
def test_install_refuses_what_is_not_a_bundle(root: Path, bundle: Path, damage: str, message: str) -> None:
    if damage == "no-exe":
        (bundle / "dracni").unlink()
    elif damage == "no-python":
        (bundle / "dracni-python").unlink()
    elif damage == "not-exec":
        (bundle / "dracni").chmod(0o644)
    elif damage == "no-internal":
        for p in sorted((bundle / "_internal").rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
        (bundle / "_internal").rmdir()
    else:
        (bundle / "_internal" / "passwd").symlink_to("/etc/passwd")
    with pytest.raises(InstallError, match=message):
        inst.install_bundle(str(bundle), str(root / "bin"))
    assert not (root / "bin" / "dracni").exists()


def test_install_keeps_relative_symlinks_inside_the_bundle(root: Path, bundle: Path) -> None:
    (bundle / "_internal" / "libfoo.so").symlink_to("lib/module.py")
    exe = Path(inst.install_bundle(str(bundle), str(root / "bin")))
    assert os.readlink(exe.parent / "_internal" / "libfoo.so") == "lib/module.py"


def test_install_leaves_no_temp_dirs_after_a_failed_copy(root: Path, bundle: Path, monkeypatch) -> None:
    def boom(src, dst):
        (Path(dst) / "partial").write_text("x")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(inst_bundle, "_copy_tree", boom)
    with pytest.raises(OSError):
        inst.install_bundle(str(bundle), str(root / "bin"))
    assert versions(root / "bin") == set()
    assert not (root / "bin" / "dracni").exists()
    assert [n for n in os.listdir(root / "bin" / ".dracni") if n != ".lock"] == []


def test_exec_never_fails_while_installs_switch_versions(root: Path, tmp_path: Path) -> None:
    """A runtime execing the plugin while installs alternate between two bundles: no ETXTBSY,
    no ENOENT, no partial output."""
    bundles = [make_bundle(tmp_path / "bundles" / t, t) for t in ("A", "B")]
    inst.install_bundle(str(bundles[0]), str(root / "bin"))
    with ExecLoop(root / "bin" / "dracni", {version_json("A"), version_json("B")}, tmp_path) as loop:
        for i in range(20):
            inst.install_bundle(str(bundles[i % 2]), str(root / "bin"))
            time.sleep(0.02)
    assert loop.report["count"] == 0, loop.report["failures"]
    assert loop.report["runs"] >= 20


# -- the chained conflist -----------------------------------------------------------------------------


def test_find_primary_takes_the_first_config_in_libcni_order(root: Path) -> None:
    net = root / "net.d"
    assert not list(net.iterdir())
    with pytest.raises(NoPrimaryError, match=r"no CNI network config in .*net\.d yet: is the primary CNI installed\?"):
        inst.find_primary(str(net))
    write_primary(net, "20-second.conflist")
    write_primary(net, "10-first.conf", {"cniVersion": "1.0.0", "name": "x", "type": "bridge"})
    (net / "05-notes.txt").write_text("not a config")
    (net / "07-dir.conflist").mkdir()
    (net / "00-dracni.conflist").write_text("{}")
    assert inst.find_primary(str(net)) == str(net / "10-first.conf")
    assert inst.find_primary(str(net), "20-second.conflist") == str(net / "20-second.conflist")
    with pytest.raises(NoPrimaryError, match="missing.conflist"):
        inst.find_primary(str(net), "missing.conflist")
    with pytest.raises(InstallError, match="dracni's own"):
        inst.find_primary(str(net), "00-dracni.conflist")


def test_our_own_file_is_never_taken_as_primary(root: Path) -> None:
    net = root / "net.d"
    primary = write_primary(net)
    inst.sync(str(net), DRACNI_CONF)
    # under another name too (an earlier --conf-file): it carries our marker
    os.rename(net / "00-dracni.conflist", net / "05-old-dracni.conflist")
    assert inst.find_primary(str(net)) == str(primary)
    primary.unlink()
    assert inst.sync(str(net), DRACNI_CONF, filename="01-dracni.conflist") == ""
    assert not (net / "01-dracni.conflist").exists()


def test_render_chained_appends_dracni_to_a_conflist(root: Path) -> None:
    doc = dict(PRIMARY, disableCheck=True)
    primary = write_primary(root / "net.d", doc=doc)
    chained = inst.render_chained(str(primary), DRACNI_CONF)
    assert chained["cniVersion"] == "1.0.0" and chained["name"] == "podnet" and chained["disableCheck"] is True
    assert chained["dracni.io/primary"] == "10-podnet.conflist"
    assert chained["plugins"] == PRIMARY["plugins"] + [{"type": "dracni", **DRACNI_CONF}]


@pytest.mark.parametrize("name", ["10-bridge.conf", "10-bridge.json"])
def test_a_single_plugin_conf_is_wrapped_into_a_list(root: Path, name: str) -> None:
    conf = {
        "cniVersion": "0.4.0",
        "name": "mynet",
        "type": "bridge",
        "bridge": "cni0",
        "ipam": {"type": "host-local", "subnet": "10.22.0.0/16"},
    }
    primary = write_primary(root / "net.d", name, conf)
    assert inst.sync(str(root / "net.d"), {"logLevel": "debug"}) == str(primary)
    chained = read_json(root / "net.d" / "00-dracni.conflist")
    assert chained == {
        "cniVersion": "0.4.0",
        "name": "mynet",
        "dracni.io/primary": name,
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "ipam": {"type": "host-local", "subnet": "10.22.0.0/16"}},
            {"type": "dracni", "logLevel": "debug"},
        ],
    }


MALFORMED = [
    ("10-bad.conflist", "{not json", "invalid JSON"),
    ("10-bad.conflist", "", "empty"),
    ("10-bad.conflist", "[1, 2]", "not a JSON object"),
    ("10-bad.conflist", json.dumps({"cniVersion": "1.0.0", "plugins": [{"type": "ptp"}]}), "no network 'name'"),
    ("10-bad.conflist", json.dumps({"cniVersion": "1.0.0", "name": "n"}), "no 'plugins' list"),
    ("10-bad.conflist", json.dumps({"cniVersion": "1.0.0", "name": "n", "plugins": []}), "no 'plugins' list"),
    (
        "10-bad.conflist",
        json.dumps({"cniVersion": "1.0.0", "name": "n", "plugins": [{"ipam": {}}]}),
        r"plugins\[0\] has no 'type'",
    ),
    ("10-bad.conf", json.dumps({"cniVersion": "1.0.0", "name": "n", "bridge": "cni0"}), "the plugin has no 'type'"),
    (
        "10-bad.conflist",
        json.dumps({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "ptp"}, {"type": "dracni"}]}),
        "already chains dracni",
    ),
    (
        "10-bad.conflist",
        json.dumps({"cniVersion": "0.2.0", "name": "n", "plugins": [{"type": "ptp"}]}),
        "cniVersion '0.2.0' is not one dracni speaks",
    ),
]


@pytest.mark.parametrize("name, text, problem", MALFORMED)
def test_a_malformed_primary_is_refused_and_nothing_written(root: Path, name: str, text: str, problem: str) -> None:
    net = root / "net.d"
    (net / name).write_text(text)
    with pytest.raises(InstallError, match=problem) as err:
        inst.sync(str(net), DRACNI_CONF)
    assert str(net / name) in str(err.value)
    assert sorted(os.listdir(net)) == [name]
    assert (net / name).read_text() == text


def test_a_primary_going_bad_leaves_our_last_good_file(root: Path) -> None:
    net = root / "net.d"
    primary = write_primary(net)
    inst.sync(str(net), DRACNI_CONF)
    good = (net / "00-dracni.conflist").read_bytes()
    primary.write_text('{"cniVersion": "1.0.0", "na')  # a primary installer half-way through a write
    with pytest.raises(InstallError, match="invalid JSON"):
        inst.sync(str(net), DRACNI_CONF)
    assert (net / "00-dracni.conflist").read_bytes() == good


def test_write_chained_writes_0644_atomically_only_on_change(root: Path) -> None:
    net = root / "net.d"
    primary = write_primary(net)
    primary_bytes = primary.read_bytes()
    old_umask = os.umask(0o077)
    try:
        assert inst.write_chained(str(net), str(primary), DRACNI_CONF) is True
    finally:
        os.umask(old_umask)
    ours = net / "00-dracni.conflist"
    assert stat.S_IMODE(ours.stat().st_mode) == 0o644
    assert inst.write_chained(str(net), str(primary), DRACNI_CONF) is False
    assert inst.write_chained(str(net), str(primary), dict(DRACNI_CONF, logLevel="debug")) is True
    assert read_json(ours)["plugins"][-1]["logLevel"] == "debug"
    assert primary.read_bytes() == primary_bytes
    assert sorted(os.listdir(net)) == ["00-dracni.conflist", "10-podnet.conflist"]  # no temp file left


def test_write_chained_refuses_a_name_that_would_not_be_read_first(root: Path) -> None:
    net = root / "net.d"
    primary = write_primary(net, "00-calico.conflist")
    with pytest.raises(InstallError, match="00-calico.conflist sorts before 00-dracni.conflist"):
        inst.write_chained(str(net), str(primary), DRACNI_CONF)
    assert inst.write_chained(str(net), str(primary), DRACNI_CONF, filename="00-000-dracni.conflist")
    with pytest.raises(InstallError, match="ending in .conflist"):
        inst.sync(str(net), DRACNI_CONF, filename="../evil.conflist")


def test_sync_follows_the_primary(root: Path) -> None:
    net = root / "net.d"
    ours = net / "00-dracni.conflist"
    primary = write_primary(net)
    inst.sync(str(net), DRACNI_CONF)
    assert [p["type"] for p in read_json(ours)["plugins"]] == ["ptp", "portmap", "dracni"]
    # edited: a plugin added, the version changed
    write_primary(net, doc=dict(PRIMARY, cniVersion="1.1.0", plugins=PRIMARY["plugins"] + [{"type": "bandwidth"}]))
    inst.sync(str(net), DRACNI_CONF)
    assert read_json(ours)["cniVersion"] == "1.1.0"
    assert [p["type"] for p in read_json(ours)["plugins"]] == ["ptp", "portmap", "bandwidth", "dracni"]
    # renamed / replaced by another file
    os.rename(primary, net / "20-renamed.conflist")
    assert inst.sync(str(net), DRACNI_CONF) == str(net / "20-renamed.conflist")
    assert read_json(ours)["dracni.io/primary"] == "20-renamed.conflist"
    write_primary(net, "15-other.conf", {"cniVersion": "1.0.0", "name": "other", "type": "bridge"})
    inst.sync(str(net), DRACNI_CONF)
    assert (read_json(ours)["name"], read_json(ours)["dracni.io/primary"]) == ("other", "15-other.conf")
    # gone: ours goes too, and is never written empty
    (net / "15-other.conf").unlink()
    (net / "20-renamed.conflist").unlink()
    assert inst.sync(str(net), DRACNI_CONF) == ""
    assert not ours.exists()
    assert inst.sync(str(net), DRACNI_CONF) == ""
    # a named primary
    write_primary(net, "10-a.conflist")
    write_primary(net, "20-b.conflist", dict(PRIMARY, name="bnet"))
    assert inst.sync(str(net), DRACNI_CONF, primary_name="20-b.conflist") == str(net / "20-b.conflist")
    assert read_json(ours)["name"] == "bnet"
    (net / "20-b.conflist").unlink()
    assert inst.sync(str(net), DRACNI_CONF, primary_name="20-b.conflist") == ""
    assert not ours.exists()


def wait_for(predicate, timeout: float = 1.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


class Watcher:
    def __init__(self, conf_dir: Path, **kw) -> None:
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, args=(str(conf_dir),), kwargs=kw, daemon=True)

    def _run(self, conf_dir: str, **kw) -> None:
        try:
            inst.watch(conf_dir, DRACNI_CONF, stop=self.stop, **kw)
        except BaseException as exc:
            self.errors.append(exc)

    def __enter__(self) -> "Watcher":
        self.thread.start()
        time.sleep(0.1)
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(5)
        assert not self.thread.is_alive(), "watch did not stop"
        assert not self.errors, self.errors


def test_watch_started_before_the_primary_exists(root: Path) -> None:
    """The "empty conflist after reboot" case: nothing until the primary appears, then ours."""
    net = root / "net.d" / "not-yet"  # the dir itself may be missing at boot
    ours = net / "00-dracni.conflist"
    with Watcher(net):
        wait_for(net.exists, what="conf dir")
        time.sleep(0.1)
        assert list(net.iterdir()) == []
        primary = net / "10-podnet.conflist"
        tmp = net / ".10-podnet.conflist.tmp"  # written the careful way: temp + rename
        tmp.write_text(json.dumps(PRIMARY))
        os.rename(tmp, primary)
        wait_for(ours.exists, what="chained conflist")
        assert read_json(ours)["plugins"][-1] == {"type": "dracni", **DRACNI_CONF}
        # edited in place
        primary.write_text(json.dumps(dict(PRIMARY, plugins=[{"type": "bridge"}])))
        wait_for(
            lambda: [p["type"] for p in read_json(ours)["plugins"]] == ["bridge", "dracni"], what="regenerated conflist"
        )
        # someone deletes ours: it comes back
        ours.unlink()
        wait_for(ours.exists, what="rewritten conflist")
        # replaced by another primary, then gone
        write_primary(net, "20-other.conflist", dict(PRIMARY, name="other"))
        primary.unlink()
        wait_for(lambda: ours.exists() and read_json(ours)["name"] == "other", what="follow the new primary")
        (net / "20-other.conflist").unlink()
        wait_for(lambda: not ours.exists(), what="our conflist removed")
        time.sleep(0.2)
        assert list(net.iterdir()) == []


def test_watch_keeps_going_on_a_malformed_primary(root: Path) -> None:
    net = root / "net.d"
    ours = net / "00-dracni.conflist"
    primary = net / "10-podnet.conflist"
    with Watcher(net):
        primary.write_text("{broken")
        time.sleep(0.3)
        assert not ours.exists()
        primary.write_text(json.dumps(PRIMARY))
        wait_for(ours.exists, what="conflist once the primary is fixed")


def test_watch_resyncs_periodically_when_events_are_missed(root: Path, monkeypatch) -> None:
    import inotify_simple

    def deaf_read(self, timeout=None, read_delay=None):
        time.sleep((timeout or 0) / 1000)
        return []

    monkeypatch.setattr(inotify_simple.INotify, "read", deaf_read)
    net = root / "net.d"
    with Watcher(net, resync_seconds=0.3):
        write_primary(net)
        wait_for((net / "00-dracni.conflist").exists, timeout=2, what="periodic resync")


def test_watch_follows_the_conf_dir_being_recreated(root: Path) -> None:
    import shutil

    net = root / "net.d"
    with Watcher(net):
        write_primary(net)
        wait_for((net / "00-dracni.conflist").exists, what="first conflist")
        shutil.rmtree(net)
        time.sleep(0.3)
        net.mkdir(exist_ok=True)
        write_primary(net)
        wait_for((net / "00-dracni.conflist").exists, timeout=3, what="conflist in the recreated dir")


# -- uninstall -----------------------------------------------------------------------------------------


def test_uninstall_reverts_everything_and_is_idempotent(root: Path, bundle: Path) -> None:
    bin_dir, net = root / "bin", root / "net.d"
    (bin_dir / "ptp").write_text("#!/bin/sh\n")
    (net / "99-other.conf").write_text('{"name": "x", "type": "bridge", "cniVersion": "1.0.0"}')
    primary = write_primary(net)
    primary_bytes = primary.read_bytes()
    before = {p: sorted(os.listdir(p)) for p in (bin_dir, net)}
    inst.install_bundle(str(bundle), str(bin_dir))
    inst.sync(str(net), DRACNI_CONF)
    removed = inst.uninstall(str(bin_dir), str(net))
    assert removed == [str(net / "00-dracni.conflist"), str(bin_dir / "dracni"), str(bin_dir / ".dracni")]
    assert {p: sorted(os.listdir(p)) for p in (bin_dir, net)} == before
    assert primary.read_bytes() == primary_bytes
    assert inst.uninstall(str(bin_dir), str(net)) == []


def test_uninstall_leaves_a_dracni_it_did_not_install(root: Path) -> None:
    other = root / "bin" / "dracni"
    other.write_text("#!/bin/sh\n")
    assert inst.uninstall(str(root / "bin"), str(root / "net.d")) == []
    assert other.read_text() == "#!/bin/sh\n"


# -- the CLI ---------------------------------------------------------------------------------------------


def cli(*args: str):
    return CliRunner().invoke(cli_main, list(args), catch_exceptions=False)


def test_cli_install_and_uninstall(root: Path, bundle: Path) -> None:
    write_primary(root / "net.d")
    args = ["--bin-dir", str(root / "bin"), "--conf-dir", str(root / "net.d")]
    result = cli("install", "--bundle-dir", str(bundle), *args, "--state-dir", "/var/lib/x", "--log-level", "debug")
    assert result.exit_code == 0, result.output
    assert "(unchanged)" not in result.output and "chains 10-podnet.conflist (written)" in result.output
    assert read_json(root / "net.d" / "00-dracni.conflist")["plugins"][-1] == {
        "type": "dracni",
        "stateDir": "/var/lib/x",
        "logLevel": "debug",
    }
    result = cli("install", "--bundle-dir", str(bundle), *args, "--state-dir", "/var/lib/x", "--log-level", "debug")
    assert result.exit_code == 0 and result.output.count("(unchanged)") == 2, result.output
    result = cli("uninstall", *args)
    assert result.exit_code == 0 and result.output.count("removed ") == 3, result.output
    assert cli("uninstall", *args).output.strip() == "nothing to remove"


def test_cli_install_errors_are_one_clear_line(root: Path, bundle: Path) -> None:
    args = ["install", "--bundle-dir", str(bundle), "--bin-dir", str(root / "bin"), "--conf-dir", str(root / "net.d")]
    result = CliRunner().invoke(cli_main, args)
    assert result.exit_code == 1
    assert (
        result.output.strip().splitlines()[-1]
        == f"dracni: no CNI network config in {root / 'net.d'} yet: is the primary CNI installed?"
    )
    (root / "net.d" / "10-bad.conflist").write_text("{")
    result = CliRunner().invoke(cli_main, args)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert (
        result.output.strip()
        .splitlines()[-1]
        .startswith(f"dracni: primary CNI config {root / 'net.d' / '10-bad.conflist'}: invalid JSON")
    )
    assert not (root / "net.d" / "00-dracni.conflist").exists()


def test_cli_install_needs_a_bundle_dir_when_not_frozen(root: Path) -> None:
    result = CliRunner().invoke(
        cli_main, ["install", "--bin-dir", str(root / "bin"), "--conf-dir", str(root / "net.d")]
    )
    assert result.exit_code == 2 and "--bundle-dir is required" in result.output
    result = CliRunner().invoke(cli_main, ["install", "--bundle-dir", str(root), "--state-dir", "relative"])
    assert result.exit_code == 2 and "must be an absolute path" in result.output


def test_cli_install_watch_until_sigterm(root: Path, bundle: Path) -> None:
    import signal

    net = root / "net.d"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CNI_", "DRACNI_"))}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dracni.entry",
            "install",
            "--watch",
            "--bundle-dir",
            str(bundle),
            "--bin-dir",
            str(root / "bin"),
            "--conf-dir",
            str(net),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=Path(__file__).resolve().parents[3],
    )
    try:
        assert proc.stdout.readline().decode().startswith(str(root / "bin" / "dracni"))
        assert proc.stdout.readline().decode().startswith("watching")
        write_primary(net)
        wait_for((net / "00-dracni.conflist").exists, what="conflist from the watch")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0, proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (net / "00-dracni.conflist").exists()  # a restart of the installer does not unchain pods
