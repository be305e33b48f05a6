"""The CNI hot path imports nothing heavy, and an ADD with a claim syncs and forks no more than it must.

Every pod start runs the plugin once per network; its start-up time is mostly imports.  A
fresh interpreter (the venv's Python) serves CNI commands through ``dracni.cni.main.run`` with
an in-memory stdin, then reports which modules the commands imported beyond dracni's own: each
path has an allowlist of C modules (``json``, ``subprocess``, ``socket``, ``threading`` and
everything they pull in, ``re``, ``enum``, ``collections``, ``functools``, cost ~20 ms of an
ADD with a claim).  What only running a delegate needs (ctypes for its parent-death signal,
select, fcntl for the state lock) is imported lazily: a pass-through ADD imports none of it.
The driver also counts, through wrappers of ``os.fsync`` and ``os.fork`` that call the real
ones, the fsyncs and delegate forks of each command.  The frozen bundle must answer VERSION,
and keep its modules as files (no PYZ archive to unpack at every start).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dracni.defaults import PYTHON_EXECUTABLE
from dracni.state.store import StateDir
from tests.harness import DRACNI_BINARY, REPO

FORBIDDEN = (
    "json",
    "re",
    "enum",
    "collections",
    "functools",
    "socket",
    "threading",
    "selectors",
    "signal",
    "locale",
    "contextlib",
    "kubernetes",
    "grpc",
    "pyroute2",
    "filelock",
    "orjson",
    "jsonschema",
    "yaml",
    "click",
    "logging",
    "typing",
    "dataclasses",
    "asyncio",
    "inspect",
    "datetime",
)
# Imported only when a delegate is executed, never on the pass-through path.
DELEGATE_ONLY = ("subprocess", "ctypes")
# Every module (beyond dracni's own and what the bare interpreter has loaded) each path may import.
PASSTHROUGH_IMPORTS = {"__future__", "_json"}
CLAIM_PATH_IMPORTS = PASSTHROUGH_IMPORTS | {
    "_ctypes",
    "_socket",  # if_nameindex in the pod's netns
    "_struct",
    "ctypes",
    "ctypes._endian",
    "errno",
    "fcntl",  # the state lock
    "select",  # poll on the delegate's pipes
    "struct",
    "types",
}
#: fsyncs of an ADD with one claim once the delegates' versions are cached: the write-ahead
#: attachment record (file + directory), the ready record and the outbox (their files only).
ADD_FSYNCS = 4
K8S_ARGS = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_UID=pod-uid-1"

# The driver itself imports only what every interpreter has loaded anyway (sys, io, os).
DRIVER = r"""
import io, os, sys

FORBIDDEN = sys.argv[1].split(",")
commands = sys.argv[2:]
baseline = sorted(m for m in FORBIDDEN if m in sys.modules)
before = set(sys.modules)

counts = {"fsync": 0, "fork": 0}
real_fsync, real_fork = os.fsync, os.fork

def counting_fsync(fd):
    counts["fsync"] += 1
    return real_fsync(fd)

def counting_fork():
    counts["fork"] += 1
    return real_fork()

os.fsync, os.fork = counting_fsync, counting_fork

from dracni.cni.main import run

outputs = []
for spec in commands:
    env_part, _, stdin = spec.partition("\n")
    env = dict(kv.split("=", 1) for kv in env_part.split("\x1f") if kv)
    out = io.BytesIO()
    counts.update(fsync=0, fork=0)
    rc = run(env, stdin.encode(), out)
    outputs.append([rc, out.getvalue().decode(), dict(counts)])

def heavy(name):
    return name in sys.modules or any(m.startswith(name + ".") for m in sys.modules)

new = sorted(m for m in set(sys.modules) - before if m != "dracni" and not m.startswith("dracni."))
report = {"baseline": baseline, "imported": sorted(m for m in FORBIDDEN if heavy(m)), "new": new, "outputs": outputs}
import json  # only now: dracni.jsonio does without it
sys.stdout.write(json.dumps(report))
"""


def command(env: dict[str, str], conf: dict | None) -> str:
    return "\x1f".join(f"{k}={v}" for k, v in env.items()) + "\n" + (json.dumps(conf) if conf is not None else "")


def run_driver(*commands: str, forbidden: tuple[str, ...] = FORBIDDEN) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRACNI_", "PYTHON"))}
    env["DRACNI_LOG_LEVEL"] = "error"
    env["PYTHONPATH"] = str(REPO)  # this checkout's dracni, whichever one the venv installed
    proc = subprocess.run(
        # -S: no site (its .pth hooks import re, enum, ...); the hot path needs no site-packages either
        [sys.executable, "-S", "-c", textwrap.dedent(DRIVER), ",".join(forbidden), *commands],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def cni_env(command_name: str, cni_path: Path, **extra: str) -> dict[str, str]:
    return {
        "CNI_COMMAND": command_name,
        "CNI_CONTAINERID": "c0ffee",
        "CNI_NETNS": "/var/run/netns/pod",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": str(cni_path),
        "CNI_ARGS": K8S_ARGS,
        **extra,
    }


def assert_clean(report: dict, allowed: set[str]) -> None:
    assert report["baseline"] == [], f"the bare interpreter already imported {report['baseline']}"
    assert report["imported"] == [], f"the CNI hot path imported heavy modules: {report['imported']}"
    assert set(report["new"]) <= allowed, f"the CNI hot path imported {sorted(set(report['new']) - allowed)}"


def test_passthrough_add_and_version_import_nothing_heavy(tmp_path: Path) -> None:
    cni_path = tmp_path / "bin"
    cni_path.mkdir()
    state_dir = tmp_path / "state"
    conf = {
        "cniVersion": "1.0.0",
        "name": "cbr0",
        "type": "dracni",
        "stateDir": str(state_dir),
        "prevResult": {
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/pod"}],
            "ips": [{"address": "10.244.0.7/24", "interface": 0}],
        },
    }
    report = run_driver(
        command(cni_env("ADD", cni_path), conf),
        command({"CNI_COMMAND": "VERSION"}, {"cniVersion": "1.0.0"}),
        forbidden=FORBIDDEN + DELEGATE_ONLY,
    )
    (add_rc, add_out, add_counts), (ver_rc, ver_out, _) = report["outputs"]
    assert add_rc == 0, add_out
    assert json.loads(add_out) == conf["prevResult"]  # pass-through: the runtime's result unchanged
    assert add_counts == {"fsync": 0, "fork": 0}  # reads only
    assert ver_rc == 0
    assert json.loads(ver_out) == {
        "cniVersion": "1.0.0",
        "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"],
    }
    assert_clean(report, PASSTHROUGH_IMPORTS)


def test_add_and_del_with_a_prepared_claim_import_nothing_heavy(tmp_path: Path) -> None:
    """The full path: state lock, delegate VERSION + ADD + DEL execs, attachment and outbox
    writes; then a second ADD, whose delegate's versions are cached: one fork, four fsyncs."""
    cni_path = tmp_path / "bin"
    cni_path.mkdir()
    fake = cni_path / "fake-delegate"
    fake.write_text(
        textwrap.dedent("""\
        #!/bin/sh
        cat >/dev/null
        case "$CNI_COMMAND" in
          VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}' ;;
          ADD) echo '{"cniVersion":"1.0.0","interfaces":[{"name":"'"$CNI_IFNAME"'"}],"ips":[{"address":"10.9.0.2/24","interface":0}]}' ;;
        esac
        """)
    )
    fake.chmod(0o755)
    state = StateDir(str(tmp_path / "state"))
    state.put_claim(
        {
            "uid": "claim-uid-1",
            "namespace": "default",
            "name": "web-net",
            "driver": "dracni.io",
            "pods": [{"uid": "pod-uid-1", "name": "web-0"}],
            "devices": [
                {
                    "request": "net",
                    "pool": "node-a",
                    "device": "d0",
                    "shareID": None,
                    "ifName": None,
                    "config": {"cniVersion": "1.0.0", "name": "fakenet", "plugins": [{"type": "fake-delegate"}]},
                }
            ],
        }
    )
    conf = {"cniVersion": "1.0.0", "name": "cbr0", "type": "dracni", "stateDir": state.root}
    again = cni_env("ADD", cni_path, CNI_CONTAINERID="c0ffee2")
    report = run_driver(
        command(cni_env("ADD", cni_path), conf), command(cni_env("DEL", cni_path), conf), command(again, conf)
    )
    (add_rc, add_out, add_counts), (del_rc, del_out, _), (again_rc, again_out, again_counts) = report["outputs"]
    assert add_rc == 0, add_out
    assert [i["name"] for i in json.loads(add_out)["interfaces"]] == ["net1"]
    assert add_counts["fork"] == 2  # the delegate's VERSION, then its ADD
    assert del_rc == 0, del_out
    assert state.read_attachment("cbr0", "c0ffee", "eth0") is None
    assert again_rc == 0, again_out
    assert again_counts == {"fsync": ADD_FSYNCS, "fork": 1}
    assert state.read_attachment("cbr0", "c0ffee2", "eth0")["state"] == "ready"
    assert state.read_outbox("claim-uid-1")["seq"] == 3  # published on ADD, retracted on DEL, published again
    assert_clean(report, CLAIM_PATH_IMPORTS)


def test_frozen_binary_answers_version() -> None:
    binary = str(DRACNI_BINARY)
    if not os.path.isfile(binary):
        pytest.skip(f"frozen binary {binary} not built")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CNI_COMMAND": "VERSION"}
    proc = subprocess.run([binary], input=b'{"cniVersion":"0.4.0"}', env=env, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert json.loads(proc.stdout) == {
        "cniVersion": "0.4.0",
        "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"],
    }
    # and with no stdin at all (VERSION needs no config)
    proc = subprocess.run([binary], input=b"", env=env, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert "1.1.0" in json.loads(proc.stdout)["supportedVersions"]


def test_frozen_bundle_keeps_its_modules_as_files() -> None:
    """packaging/dracni.spec's noarchive: a PYZ archive's table of contents (thousands of
    modules) would be unmarshalled at every start of dracni-python (~6 ms)."""
    bundle = Path(DRACNI_BINARY).parent
    python = bundle / PYTHON_EXECUTABLE
    if not python.is_file():
        pytest.skip(f"frozen bundle {bundle} not built")
    internal = bundle / "_internal"
    for module in ("dracni/cni/main.pyc", "dracni/jsonio.pyc", "dracni/state/store.pyc", "os.pyc"):
        assert (internal / module).is_file(), f"{module} is not a file of the bundle: a PYZ archive is back"
    assert not (internal / "base_library.zip").exists()
    assert b"dracni.cni.main" not in python.read_bytes(), f"{python} carries a PYZ table of contents"


def test_a_cni_exec_leaves_without_the_interpreters_teardown() -> None:
    """dracni.entry: a CNI command flushes its answer and leaves with os._exit (the teardown
    and the cyclic GC cost ~3 ms of every exec): an atexit handler, which the teardown would
    run, never runs; the exit code is run()'s."""
    driver = textwrap.dedent("""\
        import atexit, sys
        atexit.register(lambda: print("TEARDOWN", flush=True))
        from dracni.entry import main
        main()
    """)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO), "CNI_COMMAND": "VERSION"}
    proc = subprocess.run(
        [sys.executable, "-S", "-c", driver], input=b'{"cniVersion":"1.0.0"}', env=env, capture_output=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cniVersion"] == "1.0.0"  # flushed before os._exit
    assert b"TEARDOWN" not in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-S", "-c", driver],
        input=b"{",
        env={**env, "CNI_COMMAND": "ADD"},
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["code"] in (4, 6)  # an error object, flushed
    assert b"TEARDOWN" not in proc.stdout
