"""dracni.cni.delegate and dracni.cni.process: DelegateRunner, delegate_config and the delegate
processes, with real execs.

The delegate plugins are small executable scripts written into tmp_path (test doubles of
external CNI plugins); everything of dracni runs for real.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dracni.cni import errors as E
from dracni.cni import process
from dracni.cni.conflist import delegate_config
from dracni.cni.delegate import NO_CONTAINER, DelegateRunner, RuntimeConf
from dracni.cni.errors import CNIError
from dracni.cni.request import DELEGATE_MARK
from dracni.cni.versioncache import PluginVersionCache
from dracni.state.store import StateDir

PY = sys.executable
BASE_PATH = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")


def write_plugin(path: Path, body: str, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(mode)
    return path


def py_plugin(path: Path, code: str) -> Path:
    """A Python delegate (``-S``: no site, so it starts fast and imports nothing of ours)."""
    return write_plugin(path, f"#!{PY} -S\n" + code)


def sh_plugin(path: Path, code: str) -> Path:
    return write_plugin(path, "#!/bin/sh\n" + code)


@pytest.fixture
def bindir(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    return d


def runner(*dirs: Path, env: dict | None = None, state: StateDir | None = None, timeout: float = 30) -> DelegateRunner:
    versions = PluginVersionCache(state) if state is not None else None
    return DelegateRunner([str(d) for d in dirs], {"PATH": BASE_PATH} if env is None else env, versions, timeout)


def run_add(
    r: DelegateRunner,
    binary: Path | str,
    conf: dict | None = None,
    *,
    ifname: str = "net1",
    container_id: str = "c0ffee",
    netns: str = "/var/run/netns/pod",
    cni_args: str | None = None,
) -> dict | None:
    rt = RuntimeConf(container_id, netns, ifname, cni_args)
    return r.exec(str(binary), "ADD", conf or {"cniVersion": "1.0.0", "name": "n", "type": "t"}, rt)


# -- find --------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["", "a/b", "/usr/lib/cni/bridge", "../bridge", ".", ".."])
def test_find_rejects_bad_types_naming_the_field(bindir: Path, bad: str) -> None:
    with pytest.raises(CNIError) as info:
        runner(bindir).find(bad, "config.plugins[2].type")
    assert info.value.code == E.INVALID_CONFIG == 7
    assert info.value.msg.startswith("config.plugins[2].type: ")


@pytest.mark.parametrize("bad", [None, 3, ["bridge"]])
def test_find_rejects_non_string_types(bindir: Path, bad) -> None:
    with pytest.raises(CNIError) as info:
        runner(bindir).find(bad)
    assert info.value.code == 7
    assert info.value.msg.startswith("type: ")


def test_find_searches_cni_path_in_order(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    sh_plugin(second / "bridge", "exit 0\n")
    sh_plugin(first / "bridge", "exit 0\n")
    sh_plugin(second / "only-second", "exit 0\n")
    r = runner(tmp_path / "missing-dir", first, second)
    assert r.find("bridge") == str(first / "bridge")
    assert r.find("only-second") == str(second / "only-second")
    r = runner(second, first)
    assert r.find("bridge") == str(second / "bridge")


def test_find_skips_directories_and_non_executables(tmp_path: Path) -> None:
    a, b, c, d = (tmp_path / x for x in "abcd")
    (a / "bridge").mkdir(parents=True)  # a directory, even one with x bits
    write_plugin(b / "bridge", "#!/bin/sh\nexit 0\n", mode=0o644)  # not executable
    (c).mkdir()
    os.mkfifo(c / "bridge", 0o755)  # not a regular file
    sh_plugin(d / "bridge", "exit 0\n")
    assert runner(a, b, c, d).find("bridge") == str(d / "bridge")
    with pytest.raises(CNIError) as info:
        runner(a, b, c).find("bridge")
    assert info.value.code == 7


def test_find_follows_symlinks(tmp_path: Path, bindir: Path) -> None:
    real = sh_plugin(tmp_path / "store" / "bridge-1.4", "exit 0\n")
    os.symlink(real, bindir / "bridge")
    os.symlink(tmp_path / "nowhere", bindir / "dangling")
    os.symlink(tmp_path / "store", bindir / "dirlink")
    assert runner(bindir).find("bridge") == str(bindir / "bridge")
    for name in ("dangling", "dirlink"):
        with pytest.raises(CNIError):
            runner(bindir).find(name)


def test_find_missing_plugin_names_type_and_path(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    with pytest.raises(CNIError) as info:
        runner(a, b).find("macvlan", "claim ns/c request net: config.plugins[0].type")
    err = info.value
    assert err.code == 7
    assert err.msg.startswith("claim ns/c request net: config.plugins[0].type: ")
    assert "'macvlan'" in err.msg
    assert f"{a}:{b}" in err.msg


# -- exec --------------------------------------------------------------------------------------

RECORDER = """
import json, os, sys
out = os.path.join(os.path.dirname(sys.argv[0]), "calls.jsonl")
raw = sys.stdin.read()
with open(out, "a") as f:
    f.write(json.dumps({"env": dict(os.environ), "stdin": raw, "argv": sys.argv[1:]}) + "\\n")
print(json.dumps({"cniVersion": "1.0.0", "interfaces": [{"name": os.environ.get("CNI_IFNAME", "")}],
                  "ips": [{"address": "10.1.0.9/24", "interface": 0}]}))
"""


def calls(binary: Path) -> list[dict]:
    path = binary.parent / "calls.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_exec_passes_env_overrides_stdin_and_parses_stdout(bindir: Path) -> None:
    plugin = py_plugin(bindir / "recorder", RECORDER)
    base = {
        "PATH": BASE_PATH,
        "FOO": "bar",
        "CNI_COMMAND": "stale",
        "CNI_CONTAINERID": "stale",
        "CNI_NETNS": "stale",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": "/stale",
        "CNI_ARGS": "K8S_POD_NAME=runtime",
    }
    r = runner(bindir, Path("/opt/cni/bin"), env=base)
    conf = {
        "cniVersion": "1.0.0",
        "name": "macnet",
        "type": "recorder",
        "master": "eth1",
        "prevResult": {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.1/24"}]},
        "uni": "h\u00e9llo \u2603",
    }
    result = run_add(
        r,
        plugin,
        conf,
        ifname="net1",
        container_id="c0ffee",
        netns="/var/run/netns/pod",
        cni_args="IgnoreUnknown=1;K8S_POD_UID=u1",
    )
    assert result == {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "net1"}],
        "ips": [{"address": "10.1.0.9/24", "interface": 0}],
    }
    (call,) = calls(plugin)
    env = call["env"]
    assert env["FOO"] == "bar"
    assert env["PATH"] == BASE_PATH
    assert env["CNI_COMMAND"] == "ADD"
    assert env["CNI_CONTAINERID"] == "c0ffee"
    assert env["CNI_NETNS"] == "/var/run/netns/pod"
    assert env["CNI_IFNAME"] == "net1"
    assert env["CNI_PATH"] == f"{bindir}:/opt/cni/bin"
    assert env["CNI_ARGS"] == "IgnoreUnknown=1;K8S_POD_UID=u1"
    assert json.loads(call["stdin"]) == conf
    assert call["argv"] == []
    assert base["CNI_COMMAND"] == "stale"  # the caller's env dict is not modified


# What PyInstaller's bootloader (bootloader/src/pyi_main.c, pyi_utils_set_library_search_path
# in pyi_utils.c) adds to the environment of the frozen bundle: _PYI_* always; LD_LIBRARY_PATH
# (sys._MEIPASS first, the runtime's value kept in LD_LIBRARY_PATH_ORIG) only when it restarts
# itself, not when the native dracni execs it on the bundle's own loader (native/fastpath.c).
BUNDLE = "/opt/cni/bin/.dracni/0123/_internal"
PYI = {
    "_PYI_ARCHIVE_FILE": "/opt/cni/bin/.dracni/0123/dracni-python",
    "_PYI_PARENT_PROCESS_LEVEL": "1",
    "_PYI_LINUX_PROCESS_NAME": "dracni",
}


@pytest.mark.parametrize(
    ("runtime", "bootloader", "expected"),
    [
        ({}, {"LD_LIBRARY_PATH": BUNDLE}, None),  # restarted; the runtime set none
        (
            {"LD_LIBRARY_PATH": "/opt/vendor/lib"},
            {"LD_LIBRARY_PATH": f"{BUNDLE}:/opt/vendor/lib", "LD_LIBRARY_PATH_ORIG": "/opt/vendor/lib"},
            "/opt/vendor/lib",
        ),  # restarted; the runtime's value comes back
        ({"LD_LIBRARY_PATH": "/opt/vendor/lib"}, {}, "/opt/vendor/lib"),  # exec'd on its own loader
        ({}, {}, None),
    ],
)
def test_delegates_get_the_runtimes_environment_not_the_bundles(
    bindir: Path, monkeypatch: pytest.MonkeyPatch, runtime: dict, bootloader: dict, expected
) -> None:
    monkeypatch.setattr(sys, "_MEIPASS", BUNDLE, raising=False)  # what the bootloader sets in a frozen process
    plugin = py_plugin(bindir / "recorder", RECORDER)
    run_add(runner(bindir, env={"PATH": BASE_PATH, "FOO": "bar", **runtime, **bootloader, **PYI}), plugin)
    (call,) = calls(plugin)
    env = call["env"]
    assert env.get("LD_LIBRARY_PATH") == expected
    assert not [k for k in env if k.startswith("_PYI_") or k == "LD_LIBRARY_PATH_ORIG"]
    assert env["FOO"] == "bar"


def test_outside_a_bundle_ld_library_path_is_passed_on(bindir: Path) -> None:
    plugin = py_plugin(bindir / "recorder", RECORDER)
    run_add(runner(bindir, env={"PATH": BASE_PATH, "LD_LIBRARY_PATH": "/opt/vendor/lib"}), plugin)
    (call,) = calls(plugin)
    assert call["env"]["LD_LIBRARY_PATH"] == "/opt/vendor/lib"


def test_exec_keeps_callers_cni_args_when_none_given(bindir: Path) -> None:
    plugin = py_plugin(bindir / "recorder", RECORDER)
    r = runner(bindir, env={"PATH": BASE_PATH, "CNI_ARGS": "K8S_POD_NAME=runtime"})
    r.exec(str(plugin), "DEL", {"cniVersion": "1.0.0"}, RuntimeConf("c1", "", "net2"))
    r.exec(str(plugin), "DEL", {"cniVersion": "1.0.0"}, RuntimeConf("c1", "", "net2", ""))
    first, second = calls(plugin)
    assert first["env"]["CNI_ARGS"] == "K8S_POD_NAME=runtime"
    assert first["env"]["CNI_COMMAND"] == "DEL"
    assert first["env"]["CNI_NETNS"] == ""
    assert second["env"]["CNI_ARGS"] == ""


def test_exec_empty_stdout_is_none(bindir: Path) -> None:
    plugin = sh_plugin(bindir / "quiet", "cat >/dev/null\nexit 0\n")
    assert runner(bindir).exec(str(plugin), "DEL", {}, RuntimeConf("c", "", "net1")) is None
    plugin = sh_plugin(bindir / "blank", "cat >/dev/null\nprintf '  \\n\\n'\n")
    assert runner(bindir).exec(str(plugin), "DEL", {}, RuntimeConf("c", "", "net1")) is None


# -- RuntimeConf: what a call puts in a delegate's environment -----------------------------------


def test_runtime_conf_as_env_is_the_calls_cni_variables() -> None:
    rt = RuntimeConf("c0ffee", "/var/run/netns/pod", "net1", "IgnoreUnknown=1;K8S_POD_UID=u1")
    assert rt.as_env("ADD", ["/opt/cni/bin", "/usr/lib/cni"]) == {
        DELEGATE_MARK: f"{os.getpid()}/c0ffee",
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": "c0ffee",
        "CNI_NETNS": "/var/run/netns/pod",
        "CNI_IFNAME": "net1",
        "CNI_PATH": "/opt/cni/bin:/usr/lib/cni",
        "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_UID=u1",
    }
    # None: the caller's CNI_ARGS stay (no override); "": explicitly none.
    assert "CNI_ARGS" not in RuntimeConf("c0ffee", "", "net1").as_env("DEL", [])
    assert RuntimeConf("c0ffee", "", "net1", "").as_env("DEL", [])["CNI_ARGS"] == ""


def test_delegate_runs_the_type_found_in_cni_path_with_the_whole_runtime_conf(bindir: Path) -> None:
    plugin = py_plugin(bindir / "recorder", RECORDER)
    r = runner(bindir, env={"PATH": BASE_PATH, "CNI_ARGS": "K8S_POD_NAME=runtime", "CNI_IFNAME": "eth0"})
    rt = RuntimeConf("c0ffee", "/var/run/netns/pod", "net3")
    result = r.delegate("recorder", "CHECK", {"cniVersion": "1.0.0"}, rt)
    assert result is not None and result["interfaces"] == [{"name": "net3"}]
    (call,) = calls(plugin)
    env = call["env"]
    assert {k: env[k] for k in ("CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS")} == {
        "CNI_COMMAND": "CHECK",
        "CNI_CONTAINERID": "c0ffee",
        "CNI_NETNS": "/var/run/netns/pod",
        "CNI_IFNAME": "net3",
        "CNI_ARGS": "K8S_POD_NAME=runtime",
    }
    assert env["CNI_PATH"] == str(bindir)
    assert env[DELEGATE_MARK] == f"{os.getpid()}/c0ffee"
    with pytest.raises(CNIError) as info:
        r.delegate("absent", "DEL", {}, rt, "ipam.type")
    assert info.value.code == E.INVALID_CONFIG and info.value.msg.startswith("ipam.type: ")


def test_version_is_asked_without_a_container(bindir: Path) -> None:
    """VERSION (and GC) run with NO_CONTAINER: no per-container variables, an empty CNI_ARGS."""
    plugin = py_plugin(
        bindir / "versions",
        RECORDER.split("print(")[0] + 'print(json.dumps({"cniVersion": "1.0.0", "supportedVersions": ["1.0.0"]}))\n',
    )
    r = runner(bindir, env={"PATH": BASE_PATH, "CNI_ARGS": "K8S_POD_NAME=runtime", "CNI_NETNS": "/proc/1/ns/net"})
    assert r.supported_versions(str(plugin)) == ["1.0.0"]
    (call,) = calls(plugin)
    env = call["env"]
    assert (env["CNI_COMMAND"], env["CNI_CONTAINERID"], env["CNI_NETNS"], env["CNI_IFNAME"], env["CNI_ARGS"]) == (
        "VERSION",
        "",
        "",
        "",
        "",
    )
    assert NO_CONTAINER.as_env("VERSION", [])["CNI_ARGS"] == ""


def test_exec_plugin_error_keeps_code_and_msg(bindir: Path) -> None:
    plugin = sh_plugin(
        bindir / "macvlan",
        "cat >/dev/null\n"
        'echo \'{"cniVersion":"1.0.0","code":7,"msg":"master eth9 not found",'
        '"details":"link lookup failed"}\'\n'
        "echo 'some log line' >&2\nexit 1\n",
    )
    with pytest.raises(CNIError) as info:
        run_add(runner(bindir), plugin)
    err = info.value
    assert err.code == 7
    assert "master eth9 not found" in err.msg
    assert "macvlan" in err.msg and "ADD" in err.msg
    assert err.details == "link lookup failed"


def test_exec_plugin_error_with_plugin_specific_code(bindir: Path) -> None:
    plugin = sh_plugin(
        bindir / "sriov", 'cat >/dev/null\necho \'{"cniVersion":"0.4.0","code":123,"msg":"VF busy"}\'\nexit 1\n'
    )
    with pytest.raises(CNIError) as info:
        run_add(runner(bindir), plugin)
    assert info.value.code == 123
    assert "VF busy" in info.value.msg


def test_exec_nonzero_exit_without_json_is_code_100_with_stderr_tail(bindir: Path) -> None:
    plugin = sh_plugin(
        bindir / "crashy",
        "cat >/dev/null\n"
        'i=0; while [ $i -lt 200 ]; do echo "noise line $i" >&2; i=$((i+1)); done\n'
        "echo 'panic: runtime error: index out of range' >&2\nexit 2\n",
    )
    with pytest.raises(CNIError) as info:
        run_add(runner(bindir), plugin)
    err = info.value
    assert err.code == E.DELEGATE_FAILED == 100
    assert "crashy" in err.msg and "exit code 2" in err.msg
    assert err.details.endswith("panic: runtime error: index out of range")
    assert len(err.details) <= 500
    assert "noise line 0\n" not in err.details  # only the tail


def test_exec_nonzero_exit_with_garbage_stdout_and_no_stderr(bindir: Path) -> None:
    plugin = sh_plugin(bindir / "garbage", "cat >/dev/null\necho 'Segmentation fault'\nexit 139\n")
    with pytest.raises(CNIError) as info:
        run_add(runner(bindir), plugin)
    assert info.value.code == 100
    assert "exit code 139" in info.value.msg
    assert "Segmentation fault" in info.value.details


@pytest.mark.parametrize(
    "output", ["this is not json", '{"cniVersion": "1.0.0",', '{"ips": NaN}', "[1, 2, 3]", '"a string"', "\\0377\\0376"]
)
def test_exec_invalid_json_output_is_code_6(bindir: Path, output: str) -> None:
    plugin = sh_plugin(bindir / "badjson", f"cat >/dev/null\nprintf '%b\\n' '{output}'\n")
    with pytest.raises(CNIError) as info:
        run_add(runner(bindir), plugin)
    assert info.value.code == E.DECODE_FAILURE == 6
    assert "badjson" in info.value.msg


def kill_recorded(pidfile: Path) -> None:
    """Cleanup: SIGKILL the process whose pid a test plugin wrote, if it is still there."""
    if pidfile.exists():
        try:
            os.kill(int(pidfile.read_text()), 9)
        except (ProcessLookupError, ValueError):
            pass


def test_exec_timeout_is_code_11(bindir: Path) -> None:
    plugin = sh_plugin(bindir / "sleepy", "exec sleep 30\n")
    started = time.monotonic()
    with pytest.raises(CNIError) as info:
        run_add(runner(bindir, timeout=0.5), plugin)
    elapsed = time.monotonic() - started
    assert info.value.code == E.TRY_AGAIN_LATER == 11
    assert "sleepy" in info.value.msg and "0.5s" in info.value.msg
    assert 0.4 <= elapsed < 10


def test_exec_timeout_with_a_grandchild_holding_stdout(bindir: Path, tmp_path: Path) -> None:
    """The plugin's shell is killed at the timeout; a background child still holding the
    stdout pipe must not keep the runner waiting."""
    pidfile = tmp_path / "grandchild.pid"
    plugin = sh_plugin(bindir / "forky", f'sleep 30 &\necho $! > "{pidfile}"\nwait\n')
    started = time.monotonic()
    try:
        with pytest.raises(CNIError) as info:
            run_add(runner(bindir, timeout=0.5), plugin)
        assert info.value.code == 11
        assert time.monotonic() - started < 10
    finally:
        kill_recorded(pidfile)


def test_exec_unexecutable_binary_is_code_5(bindir: Path) -> None:
    plugin = write_plugin(bindir / "noexec", "#!/bin/sh\nexit 0\n", mode=0o644)
    with pytest.raises(CNIError) as info:
        run_add(runner(bindir), plugin)
    assert info.value.code == E.IO_FAILURE == 5
    assert str(plugin) in info.value.msg


# -- "text file busy" --------------------------------------------------------------------------

PLUGIN_BODY = b'#!/bin/sh\ncat >/dev/null\necho \'{"cniVersion":"1.0.0","dns":{}}\'\n'


def open_for_writing(path: Path) -> int:
    """Create the plugin like an installer does, and keep the write descriptor open."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o755)
    os.write(fd, PLUGIN_BODY)
    os.chmod(path, 0o755)
    # The test's premise: the kernel refuses to exec a file open for writing.
    with pytest.raises(OSError) as info:
        subprocess.run([str(path)], capture_output=True, timeout=10)
    assert info.value.errno == errno.ETXTBSY
    return fd


def test_exec_retries_text_file_busy(bindir: Path) -> None:
    plugin = bindir / "installing"
    fd = open_for_writing(plugin)
    closer = threading.Timer(0.1, os.close, (fd,))
    closer.start()
    try:
        started = time.monotonic()
        assert run_add(runner(bindir), plugin) == {"cniVersion": "1.0.0", "dns": {}}
        assert time.monotonic() - started >= 0.09  # it did have to wait for the writer
    finally:
        closer.join()


def test_exec_text_file_busy_forever_is_code_5(bindir: Path) -> None:
    plugin = bindir / "stuck"
    fd = open_for_writing(plugin)
    try:
        with pytest.raises(CNIError) as info:
            run_add(runner(bindir), plugin)
    finally:
        os.close(fd)
    assert info.value.code == E.IO_FAILURE == 5
    assert str(plugin) in info.value.msg
    assert "busy" in info.value.msg.lower()


# -- version negotiation -----------------------------------------------------------------------


def version_plugin(path: Path, versions: list[str], extra: str = "") -> Path:
    """Answers VERSION with ``versions``; appends each call's command and stdin to ``<path>.calls``."""
    answer = json.dumps({"cniVersion": "1.0.0", "supportedVersions": versions})
    return sh_plugin(
        path,
        f"""{extra}
stdin=$(cat)
echo "$CNI_COMMAND|$CNI_CONTAINERID|$CNI_IFNAME|$CNI_NETNS|${{CNI_ARGS-unset}}|$stdin" >> "{path}.calls"
echo '{answer}'
""",
    )


def invocations(plugin: Path) -> list[str]:
    calls_file = Path(f"{plugin}.calls")
    return calls_file.read_text().splitlines() if calls_file.exists() else []


UP_TO_1_0 = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"]


def test_supported_versions_runs_version_once_then_uses_the_state_cache(tmp_path: Path, bindir: Path) -> None:
    plugin = version_plugin(bindir / "bridge", UP_TO_1_0)
    state_root = tmp_path / "state"
    env = {"PATH": BASE_PATH, "CNI_ARGS": "K8S_POD_NAME=x"}
    r1 = runner(bindir, env=env, state=StateDir(str(state_root)))
    assert r1.supported_versions(str(plugin)) == UP_TO_1_0
    assert r1.supported_versions(str(plugin)) == UP_TO_1_0
    # As libcni does: VERSION without per-container variables, empty CNI_ARGS, latest version in.
    assert invocations(plugin) == ["VERSION||||" + '|{"cniVersion":"1.1.0"}']
    cache = state_root / "cache" / "plugin-versions.json"
    assert cache.is_file()
    assert oct(os.stat(cache).st_mode & 0o777) == oct(0o600)

    # A later CNI invocation (new process: new runner, new StateDir) reads the cache from disk.
    r2 = runner(bindir, env=env, state=StateDir(str(state_root)))
    assert r2.supported_versions(str(plugin)) == UP_TO_1_0
    assert r2.negotiate(str(plugin), "1.1.0", "type") == "1.0.0"
    assert len(invocations(plugin)) == 1


def test_changed_binary_invalidates_the_cache(tmp_path: Path, bindir: Path) -> None:
    state_root = tmp_path / "state"
    plugin = version_plugin(bindir / "bridge", ["0.4.0"])
    assert runner(bindir, state=StateDir(str(state_root))).supported_versions(str(plugin)) == ["0.4.0"]
    assert len(invocations(plugin)) == 1

    # An upgrade replaces the binary in place: new size and mtime.
    version_plugin(bindir / "bridge", ["0.4.0", "1.0.0", "1.1.0"])
    st = os.stat(plugin)
    os.utime(plugin, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    r = runner(bindir, state=StateDir(str(state_root)))
    assert r.supported_versions(str(plugin)) == ["0.4.0", "1.0.0", "1.1.0"]
    assert len(invocations(plugin)) == 2
    assert runner(bindir, state=StateDir(str(state_root))).supported_versions(str(plugin)) == [
        "0.4.0",
        "1.0.0",
        "1.1.0",
    ]
    assert len(invocations(plugin)) == 2

    # Same size, only the mtime moves (e.g. rebuilt from the same source): asked again.
    st = os.stat(plugin)
    os.utime(plugin, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    runner(bindir, state=StateDir(str(state_root))).supported_versions(str(plugin))
    assert len(invocations(plugin)) == 3

    # Replaced by rename (new inode) with identical content and mtime: asked again too.
    st = os.stat(plugin)
    new = bindir / ".bridge.new"
    new.write_bytes(plugin.read_bytes())
    new.chmod(0o755)
    os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.rename(new, plugin)
    runner(bindir, state=StateDir(str(state_root))).supported_versions(str(plugin))
    assert len(invocations(plugin)) == 4


def test_cache_is_per_binary(tmp_path: Path, bindir: Path) -> None:
    state = StateDir(str(tmp_path / "state"))
    a = version_plugin(bindir / "a", ["0.4.0"])
    b = version_plugin(bindir / "b", ["1.0.0"])
    r = runner(bindir, state=state)
    assert r.supported_versions(str(a)) == ["0.4.0"]
    assert r.supported_versions(str(b)) == ["1.0.0"]
    r2 = runner(bindir, state=StateDir(state.root))
    assert (r2.supported_versions(str(a)), r2.supported_versions(str(b))) == (["0.4.0"], ["1.0.0"])
    assert (len(invocations(a)), len(invocations(b))) == (1, 1)


def test_without_state_dir_each_runner_asks_again(bindir: Path) -> None:
    plugin = version_plugin(bindir / "bridge", UP_TO_1_0)
    r = runner(bindir)
    r.supported_versions(str(plugin))
    r.supported_versions(str(plugin))
    assert len(invocations(plugin)) == 1
    runner(bindir).supported_versions(str(plugin))
    assert len(invocations(plugin)) == 2


def test_corrupt_cache_is_ignored_and_rewritten(tmp_path: Path, bindir: Path) -> None:
    state = StateDir(str(tmp_path / "state"))
    state.ensure()
    cache = Path(state.root) / "cache" / "plugin-versions.json"
    cache.write_text("{torn")
    plugin = version_plugin(bindir / "bridge", ["1.0.0"])
    assert runner(bindir, state=state).supported_versions(str(plugin)) == ["1.0.0"]
    assert json.loads(cache.read_text())["schema"] == 1
    runner(bindir, state=StateDir(state.root)).supported_versions(str(plugin))
    assert len(invocations(plugin)) == 1


@pytest.mark.parametrize(
    "cap, expected",
    [("1.1.0", "1.0.0"), ("1.0.0", "1.0.0"), ("0.4.0", "0.4.0"), ("0.3.1", "0.3.1"), ("0.3.0", "0.3.0")],
)
def test_negotiate_picks_highest_common_version_up_to_cap(bindir: Path, cap: str, expected: str) -> None:
    plugin = version_plugin(bindir / "bridge", UP_TO_1_0)
    assert runner(bindir).negotiate(str(plugin), cap, "config.plugins[0].type") == expected


def test_negotiate_ignores_garbage_versions(bindir: Path) -> None:
    plugin = version_plugin(bindir / "odd", ["1.0", "v1.1.0", "0.4.0", "2.0.0", "1.0.0-rc1"])
    assert runner(bindir).negotiate(str(plugin), "1.1.0", "type") == "0.4.0"


def test_negotiate_without_common_version_is_code_1(bindir: Path) -> None:
    plugin = version_plugin(bindir / "ancient", ["0.1.0", "0.2.0"])
    with pytest.raises(CNIError) as info:
        runner(bindir).negotiate(str(plugin), "1.1.0", "config.plugins[1].type")
    err = info.value
    assert err.code == E.INCOMPATIBLE_VERSION == 1
    assert err.msg.startswith("config.plugins[1].type: ")
    assert "ancient" in err.msg and "1.1.0" in err.msg
    assert "0.1.0, 0.2.0" in err.details

    newer = version_plugin(bindir / "newer", ["1.0.0", "1.1.0"])
    with pytest.raises(CNIError) as info:
        runner(bindir).negotiate(str(newer), "0.4.0", "type")
    assert info.value.code == 1


def test_version_answer_without_supported_versions_is_code_7(bindir: Path) -> None:
    plugin = sh_plugin(bindir / "mute", 'cat >/dev/null\necho \'{"cniVersion":"1.0.0"}\'\n')
    with pytest.raises(CNIError) as info:
        runner(bindir).supported_versions(str(plugin))
    assert info.value.code == 7
    assert "supportedVersions" in info.value.msg


def test_failing_version_command_is_not_cached(tmp_path: Path, bindir: Path) -> None:
    flaky = bindir / "flaky"
    sh_plugin(flaky, f'cat >/dev/null\necho x >> "{flaky}.calls"\necho oops >&2\nexit 1\n')
    state = StateDir(str(tmp_path / "state"))
    for _ in range(2):
        with pytest.raises(CNIError) as info:
            runner(bindir, state=state).supported_versions(str(flaky))
        assert info.value.code == 100
    assert len(invocations(flaky)) == 2


# -- delegate_config ---------------------------------------------------------------------------

CURRENT_RESULT = {
    "cniVersion": "1.1.0",
    "interfaces": [
        {"name": "net1", "mac": "02:00:00:00:00:01", "sandbox": "/var/run/netns/pod", "pciID": "0000:3b:00.2"}
    ],
    "ips": [
        {"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 0},
        {"address": "fd00::5/64", "interface": 0},
    ],
    "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1", "mtu": 1400}],
    "dns": {"nameservers": ["10.1.0.2"]},
}


def test_delegate_config_injects_name_and_version() -> None:
    plugin = {"type": "bridge", "name": "its-own-name", "cniVersion": "0.3.1", "bridge": "br0"}
    conf = delegate_config(
        plugin, network="macnet", version="1.0.0", runtime_config={}, extra_capabilities={}, prev_result=None
    )
    assert conf == {"type": "bridge", "name": "macnet", "cniVersion": "1.0.0", "bridge": "br0"}
    assert plugin["name"] == "its-own-name" and plugin["cniVersion"] == "0.3.1"  # input untouched


def test_delegate_config_filters_runtime_config_to_capabilities() -> None:
    plugin = {
        "type": "tuning",
        "capabilities": {"mac": True, "ips": True, "bandwidth": False},
        "runtimeConfig": {"stale": 1},
    }
    runtime = {
        "mac": "02:00:00:00:00:09",
        "ips": ["10.1.0.7/24"],
        "bandwidth": {"ingressRate": 1},
        "portMappings": [{"hostPort": 80, "containerPort": 8080}],
        "infinibandGUID": "x",
    }
    conf = delegate_config(
        plugin,
        network="n",
        version="1.0.0",
        runtime_config=runtime,
        extra_capabilities={"portMappings": True},
        prev_result=None,
    )
    assert conf["runtimeConfig"] == {
        "mac": "02:00:00:00:00:09",
        "ips": ["10.1.0.7/24"],
        "portMappings": [{"hostPort": 80, "containerPort": 8080}],
    }
    assert conf["capabilities"] == plugin["capabilities"]
    assert plugin["runtimeConfig"] == {"stale": 1}


def test_delegate_config_drops_plugins_runtime_config_when_nothing_applies() -> None:
    plugin = {"type": "macvlan", "runtimeConfig": {"mac": "02:00:00:00:00:01"}}
    conf = delegate_config(
        plugin,
        network="n",
        version="1.0.0",
        runtime_config={"mac": "02:aa:aa:aa:aa:aa"},
        extra_capabilities={},
        prev_result=None,
    )
    assert "runtimeConfig" not in conf
    plugin = {"type": "macvlan", "capabilities": {"mac": True}, "runtimeConfig": {"mac": "old"}}
    conf = delegate_config(
        plugin, network="n", version="1.0.0", runtime_config={}, extra_capabilities={}, prev_result=None
    )
    assert "runtimeConfig" not in conf
    # a capabilities value that is not an object declares nothing
    plugin = {"type": "macvlan", "capabilities": ["mac"]}
    conf = delegate_config(
        plugin, network="n", version="1.0.0", runtime_config={"mac": "x"}, extra_capabilities={}, prev_result=None
    )
    assert "runtimeConfig" not in conf


def test_delegate_config_converts_prev_result_to_the_delegates_version() -> None:
    plugin = {"type": "tuning", "prevResult": {"cniVersion": "1.0.0", "stale": True}}
    conf = delegate_config(
        plugin, network="n", version="0.4.0", runtime_config={}, extra_capabilities={}, prev_result=CURRENT_RESULT
    )
    prev = conf["prevResult"]
    assert prev["cniVersion"] == "0.4.0"
    assert [ip["version"] for ip in prev["ips"]] == ["4", "6"]
    assert [ip["address"] for ip in prev["ips"]] == ["10.1.0.5/24", "fd00::5/64"]
    assert "pciID" not in prev["interfaces"][0]  # a 1.1.0-only field
    assert "mtu" not in prev["routes"][0]
    assert "stale" not in prev
    assert "version" not in CURRENT_RESULT["ips"][0]  # input untouched

    conf = delegate_config(
        plugin, network="n", version="1.0.0", runtime_config={}, extra_capabilities={}, prev_result=CURRENT_RESULT
    )
    assert conf["prevResult"]["cniVersion"] == "1.0.0"
    assert all("version" not in ip for ip in conf["prevResult"]["ips"])

    conf = delegate_config(
        plugin, network="n", version="1.1.0", runtime_config={}, extra_capabilities={}, prev_result=CURRENT_RESULT
    )
    assert conf["prevResult"] == CURRENT_RESULT

    # No previous result: a prevResult the plugin entry carried is not passed on.
    conf = delegate_config(
        plugin, network="n", version="1.0.0", runtime_config={}, extra_capabilities={}, prev_result=None
    )
    assert "prevResult" not in conf


def test_delegate_config_end_to_end_through_exec(bindir: Path) -> None:
    """What a delegate actually reads on stdin is the delegate_config object."""
    plugin = py_plugin(bindir / "recorder", RECORDER)
    conf = delegate_config(
        {"type": "recorder", "capabilities": {"mac": True}},
        network="macnet",
        version="0.4.0",
        runtime_config={"mac": "02:00:00:00:00:01", "ips": ["x"]},
        extra_capabilities={},
        prev_result=CURRENT_RESULT,
    )
    run_add(runner(bindir), plugin, conf)
    (call,) = calls(plugin)
    received = json.loads(call["stdin"])
    assert received["name"] == "macnet" and received["cniVersion"] == "0.4.0"
    assert received["runtimeConfig"] == {"mac": "02:00:00:00:00:01"}
    assert received["prevResult"]["ips"][1]["version"] == "6"


# -- process safety (issue 9, item 3) ----------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead
    except FileNotFoundError:
        return False


def test_a_timeout_kills_the_delegates_whole_process_group(bindir: Path, tmp_path: Path) -> None:
    """What a delegate started (an IPAM still running, say) dies with it at the timeout,
    instead of finishing after the rollback and leaking what it allocates."""
    pidfile = tmp_path / "grandchild.pid"
    plugin = sh_plugin(bindir / "forky", f'sleep 30 &\necho $! > "{pidfile}"\nwait\n')
    try:
        with pytest.raises(CNIError) as info:
            run_add(runner(bindir, timeout=0.5), plugin)
        assert info.value.code == 11
        grandchild = int(pidfile.read_text())
        deadline = time.monotonic() + 5
        while _alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(grandchild), "the delegate's child survived the timeout"
    finally:
        kill_recorded(pidfile)


def test_a_delegate_runs_in_its_own_process_group(bindir: Path, tmp_path: Path) -> None:
    out = tmp_path / "ids"
    plugin = sh_plugin(
        bindir / "ids",
        f'cat >/dev/null\necho "$$ $(ps -o pgid= -p $$)" > "{out}"\necho \'{{"cniVersion":"1.0.0"}}\'\n',
    )
    run_add(runner(bindir), plugin)
    pid, pgid = out.read_text().split()
    assert pid == pgid and int(pgid) != os.getpgrp()


def test_every_delegate_learns_it_runs_under_dracni(bindir: Path, tmp_path: Path) -> None:
    """The mark a nested dracni refuses to run under (see test_cni_protocol), naming this dracni
    and the container, which a DEL after an interrupted ADD looks for (kill_leftovers)."""
    out = tmp_path / "mark"
    plugin = sh_plugin(
        bindir / "marked", f'cat >/dev/null\necho "$DRACNI_DELEGATE_OF" > "{out}"\necho \'{{"cniVersion":"1.0.0"}}\'\n'
    )
    run_add(runner(bindir), plugin)
    assert out.read_text().strip() == f"{os.getpid()}/c0ffee"


PDEATHSIG_PROBE = """
import ctypes, json, os, sys
sys.stdin.read()
signal = ctypes.c_int(-1)
ctypes.CDLL(None, use_errno=True).prctl(2, ctypes.byref(signal))  # PR_GET_PDEATHSIG
with open(os.path.join(os.path.dirname(sys.argv[0]), "probe.json"), "w") as f:
    json.dump({"pdeathsig": signal.value, "ppid": os.getppid(), "pid": os.getpid(), "pgid": os.getpgrp()}, f)
print(json.dumps({"cniVersion": "1.0.0"}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_delegate_gets_sigkill_as_its_parent_death_signal(bindir: Path) -> None:
    plugin = py_plugin(bindir / "probe", PDEATHSIG_PROBE)
    run_add(runner(bindir), plugin)
    probe = json.loads((bindir / "probe.json").read_text())
    assert probe["pdeathsig"] == signal.SIGKILL
    assert probe["ppid"] == os.getpid()  # set in the child dracni forked, not in a wrapper
    assert probe["pgid"] == probe["pid"]  # and still in its own process group


# The runner of the test below: the CNI plugin's role, in a process of its own that the test
# (the container runtime's role) SIGKILLs while its delegate runs.
KILLED_RUNNER = """
import sys
from dracni.cni.delegate import DelegateRunner, RuntimeConf
bindir, plugin = sys.argv[1], sys.argv[2]
runner = DelegateRunner([bindir], {"PATH": "/usr/bin:/bin"}, timeout=60)
runner.exec(plugin, "ADD", {"cniVersion": "1.0.0", "name": "n", "type": "slow"},
            RuntimeConf("c0ffee", "/var/run/netns/pod", "net1"))
"""


def wait_until_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not _alive(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_delegate_dies_when_the_runner_is_killed(bindir: Path, tmp_path: Path) -> None:
    """The runtime SIGKILLs dracni (its CNI timeout, say): the delegate it was running dies too,
    instead of finishing its ADD after the runtime's DEL and leaking what it allocated."""
    pidfile = tmp_path / "delegate.pid"
    # The delegate's pid, then exec: PR_SET_PDEATHSIG survives the delegate's own execve.
    plugin = sh_plugin(bindir / "slow", f'cat >/dev/null\necho $$ > "{pidfile}"\nexec sleep 30\n')
    repo = str(Path(__file__).resolve().parents[3])
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_RUNNER, str(bindir), str(plugin)],
        env={**os.environ, "PYTHONPATH": repo},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the delegate never started"
            time.sleep(0.02)
        delegate = int(pidfile.read_text())
        assert _alive(delegate)
        proc.kill()
        proc.communicate()
        assert wait_until_gone(delegate, 2.0), "the delegate outlived the runner that started it"
    finally:
        proc.kill()
        proc.communicate()
        kill_recorded(pidfile)


def test_a_child_whose_parent_is_already_gone_exits_before_exec() -> None:
    """The race PR_SET_PDEATHSIG leaves open: the parent dying between fork and prctl.  The
    child checks its parent after prctl and does not run the delegate for a dead parent."""
    in_child = process._die_with(os.getpid())
    if in_child is None:
        pytest.skip("no prctl here")
    ran = subprocess.run(["/bin/echo", "ran"], preexec_fn=in_child, capture_output=True, timeout=10)
    assert (ran.returncode, ran.stdout) == (0, b"ran\n")
    orphan = process._die_with(os.getpid() + 1)  # as if re-parented: not the pid that forked
    assert orphan is not None
    ran = subprocess.run(["/bin/echo", "ran"], preexec_fn=orphan, capture_output=True, timeout=10)
    assert (ran.returncode, ran.stdout) == (1, b"")


def test_without_prctl_delegates_run_as_before(bindir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not Linux (no prctl in libc): no parent-death signal, the rest unchanged."""
    monkeypatch.setattr(process, "_prctl", False)
    assert process._die_with(os.getpid()) is None
    out = tmp_path / "ids"
    plugin = sh_plugin(
        bindir / "ids",
        f'cat >/dev/null\necho "$$ $(ps -o pgid= -p $$)" > "{out}"\necho \'{{"cniVersion":"1.0.0"}}\'\n',
    )
    assert run_add(runner(bindir), plugin) == {"cniVersion": "1.0.0"}
    pid, pgid = out.read_text().split()
    assert pid == pgid


def test_kill_leftovers_stops_only_an_interrupted_adds_processes() -> None:
    """Processes marked for the container whose dracni is gone die; others are left alone."""
    from dracni.cni.process import kill_leftovers
    from dracni.cni.request import DELEGATE_MARK

    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no longer runs: the killed dracni
    marks = {
        "orphan": f"{dead.pid}/cid-1",  # the interrupted ADD's IPAM
        "other-container": f"{dead.pid}/cid-2",
        "live-owner": f"{os.getpid()}/cid-1",  # a dracni still running for the container
    }
    procs = {
        name: subprocess.Popen(["sleep", "60"], env={**os.environ, DELEGATE_MARK: mark}) for name, mark in marks.items()
    }
    try:
        assert kill_leftovers("cid-1") == [procs["orphan"].pid]
        assert procs["orphan"].wait(timeout=5) == -9
        assert procs["other-container"].poll() is None and procs["live-owner"].poll() is None
        assert kill_leftovers("") == []
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
