"""The CNI hot path imports nothing heavy.

Every pod start runs the plugin once per network; its start-up time is mostly imports.  A
fresh interpreter (the venv's Python) serves CNI commands through ``dracni.cni.main.run`` with
an in-memory stdin, then reports which of the heavy modules ended up in ``sys.modules``.
What only running a delegate needs (subprocess, ctypes for its parent-death signal) is imported
lazily: a pass-through ADD, most pods' only path, imports none of it.  The frozen bundle must
answer VERSION.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dracni.state.store import StateDir
from tests.harness import DRACNI_BINARY, REPO

FORBIDDEN = (
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
K8S_ARGS = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_UID=pod-uid-1"

# The driver itself imports only what every interpreter has loaded anyway (sys, io, os).
DRIVER = r"""
import io, os, sys

FORBIDDEN = sys.argv[1].split(",")
commands = sys.argv[2:]
baseline = sorted(m for m in FORBIDDEN if m in sys.modules)

from dracni.cni.main import run

outputs = []
for spec in commands:
    env_part, _, stdin = spec.partition("\n")
    env = dict(kv.split("=", 1) for kv in env_part.split("\x1f") if kv)
    out = io.BytesIO()
    rc = run(env, stdin.encode(), out)
    outputs.append([rc, out.getvalue().decode()])

def heavy(name):
    return name in sys.modules or any(m.startswith(name + ".") for m in sys.modules)

report = {"baseline": baseline, "imported": sorted(m for m in FORBIDDEN if heavy(m)), "outputs": outputs}
import json  # only now: dracni.jsonio imported it already
sys.stdout.write(json.dumps(report))
"""


def command(env: dict[str, str], conf: dict | None) -> str:
    return "\x1f".join(f"{k}={v}" for k, v in env.items()) + "\n" + (json.dumps(conf) if conf is not None else "")


def run_driver(*commands: str, forbidden: tuple[str, ...] = FORBIDDEN) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRACNI_", "PYTHON"))}
    env["DRACNI_LOG_LEVEL"] = "error"
    env["PYTHONPATH"] = str(REPO)  # this checkout's dracni, whichever one the venv installed
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(DRIVER), ",".join(forbidden), *commands],
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


def assert_clean(report: dict) -> None:
    assert report["baseline"] == [], f"the bare interpreter already imported {report['baseline']}"
    assert report["imported"] == [], f"the CNI hot path imported heavy modules: {report['imported']}"


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
    (add_rc, add_out), (ver_rc, ver_out) = report["outputs"]
    assert add_rc == 0, add_out
    assert json.loads(add_out) == conf["prevResult"]  # pass-through: the runtime's result unchanged
    assert ver_rc == 0
    assert json.loads(ver_out) == {
        "cniVersion": "1.0.0",
        "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"],
    }
    assert_clean(report)


def test_add_and_del_with_a_prepared_claim_import_nothing_heavy(tmp_path: Path) -> None:
    """The full path: state lock, delegate VERSION + ADD + DEL execs, attachment and outbox writes."""
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
    report = run_driver(command(cni_env("ADD", cni_path), conf), command(cni_env("DEL", cni_path), conf))
    (add_rc, add_out), (del_rc, del_out) = report["outputs"]
    assert add_rc == 0, add_out
    assert [i["name"] for i in json.loads(add_out)["interfaces"]] == ["net1"]
    assert del_rc == 0, del_out
    assert state.read_attachment("cbr0", "c0ffee", "eth0") is None
    assert state.read_outbox("claim-uid-1")["seq"] == 2  # published on ADD, retracted on DEL
    assert_clean(report)


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
