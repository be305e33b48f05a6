"""Process safety through the frozen binary (issue 9): the container runtime SIGKILLs dracni in
the middle of an ADD (its CNI timeout, say).  The delegate dracni was running dies with it
(PR_SET_PDEATHSIG) instead of finishing its ADD after the runtime's DEL, and that DEL, from the
write-ahead record, leaves nothing behind: no interface, no address, no record, no process.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

from tests import procs
from tests.harness import DRACNI_BINARY
from tests.integration.conftest import ipam_reservations, macvlan, one_device_claim

#: The process that runs delegates: the native fast path (DRACNI_BINARY) hands a pod with claims
#: over by exec'ing, in the same process, the Python executable beside it.
PYTHON_PATH = os.path.join(os.path.dirname(os.path.realpath(DRACNI_BINARY)), "dracni-python")


def is_dracni_python(proc: procs.Proc) -> bool:
    """The Python bundle, as the native dracni runs it: on the bundle's own loader (issue 14)."""
    return PYTHON_PATH in proc.argv


def recorded(record_file) -> list[dict]:
    return [json.loads(line) for line in record_file.read_text().splitlines()] if record_file.exists() else []


def gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while (proc := procs.read(pid)) is not None and proc.state != "Z" and time.monotonic() < deadline:
        time.sleep(0.02)
    proc = procs.read(pid)
    return proc is None or proc.state == "Z"


def start_add(lab, env: dict, conf: dict) -> subprocess.Popen:
    """The runtime's exec of dracni ADD in the host netns, its config written to stdin."""
    runtime = subprocess.Popen(
        ["ip", "netns", "exec", lab.host.name, str(lab.bin_dir / "dracni")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    runtime.stdin.write(json.dumps(conf).encode())
    runtime.stdin.close()
    return runtime


def first_add_pid(lab, runtime: subprocess.Popen, record_file, never: str) -> int:
    """The pid of the first ADD the recorder plugin recorded, once it is there."""
    deadline = time.monotonic() + 30
    while not (adds := [r for r in recorded(record_file) if r["command"] == "ADD"]):
        assert runtime.poll() is None, (runtime.stdout.read(), runtime.stderr.read(), lab.read_log())
        assert time.monotonic() < deadline, never
        time.sleep(0.02)
    return adds[0]["pid"]


def stop(runtime: subprocess.Popen, plugin: int | None) -> None:
    """Whatever the test left running: the runtime's exec and the recorded plugin process."""
    runtime.kill()
    runtime.wait()
    for stream in (runtime.stdin, runtime.stdout, runtime.stderr):
        stream.close()
    if plugin is not None and not gone(plugin, 0):
        os.kill(plugin, 9)


def test_a_killed_dracni_takes_its_delegate_with_it_and_del_cleans_up(lab, pod_uid):
    lab.write_conflist()
    record_file = lab.tmp / "recorder.jsonl"
    slow = {"type": "recorder", "recordFile": str(record_file), "sleepSeconds": 60}
    lab.prepare(one_device_claim("slow", pod_uid, [macvlan(lab), slow]))
    pod = lab.pod()
    conf = {
        "cniVersion": "1.0.0",
        "name": "podnet",
        "type": "dracni",
        "stateDir": str(lab.state_dir),
        "logFile": str(lab.log_file),
        "logLevel": "debug",
    }
    call = {
        "container_id": "killed-add",
        "netns": pod.path,
        "ifname": "eth0",
        "cni_args": f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=demo;K8S_POD_UID={pod_uid}",
    }
    env = lab.env()
    env.update(
        {
            "CNI_COMMAND": "ADD",
            "CNI_CONTAINERID": call["container_id"],
            "CNI_NETNS": call["netns"],
            "CNI_IFNAME": call["ifname"],
            "CNI_ARGS": call["cni_args"],
        }
    )
    runtime = start_add(lab, env, conf)
    delegate = None
    try:
        delegate = first_add_pid(lab, runtime, record_file, "the slow delegate never started")
        # macvlan ran first: the ADD is half done, net1 is in the pod and host-local holds an address.
        assert "net1" in pod.links() and len(ipam_reservations(lab, "slow")) == 1
        dracni = procs.read(delegate).ppid
        assert is_dracni_python(procs.read(dracni))

        os.kill(dracni, 9)  # the runtime gives up on dracni: SIGKILL
        runtime.wait(timeout=10)

        assert gone(delegate, 2.0), "the delegate outlived the dracni that started it"
        proc = lab.plugin("DEL", conf, **call)  # the runtime's teardown of the failed sandbox
        assert proc.returncode == 0, (proc.stdout, proc.stderr, lab.read_log())
        assert "net1" not in pod.links()
        assert ipam_reservations(lab, "slow") == []
        assert not list((lab.state_dir / "attachments").iterdir())
        assert [r["command"] for r in recorded(record_file)] == ["ADD", "DEL"]  # the killed ADD never answered
    finally:
        stop(runtime, delegate)


def test_del_after_a_killed_add_stops_what_the_delegate_started(lab, pod_uid):
    """The IPAM plugin a delegate started is dracni's grandchild: PR_SET_PDEATHSIG does not reach
    it.  The runtime's DEL finds the interrupted ADD (its write-ahead record) and stops it, so it
    cannot finish its ADD after the DEL."""
    lab.write_conflist()
    record_file = lab.tmp / "recorder.jsonl"
    # macvlan runs a slow IPAM (the recorder, which reads recordFile from the network config)
    slow_ipam = macvlan(lab, ipam={"type": "recorder"}, recordFile=str(record_file), sleepSeconds=60)
    lab.prepare(one_device_claim("slow-ipam", pod_uid, [slow_ipam]))
    pod = lab.pod()
    env = lab.env(pod_uid=pod_uid)
    env.update({"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "killed", "CNI_NETNS": pod.path, "CNI_IFNAME": "eth0"})
    conf = json.loads((lab.netconf_dir / "10-podnet.conflist").read_text())["plugins"][1]
    conf.update({"cniVersion": "1.0.0", "name": "podnet"})
    runtime = start_add(lab, env, conf)
    ipam = None
    try:
        ipam = first_add_pid(lab, runtime, record_file, "the slow IPAM never started")
        delegate = procs.read(ipam).ppid  # macvlan
        dracni = procs.read(delegate).ppid
        assert is_dracni_python(procs.read(dracni))

        os.kill(dracni, 9)
        runtime.wait(timeout=10)
        assert gone(delegate, 2.0), "macvlan outlived the dracni that started it"
        assert not gone(ipam, 0), "the grandchild is out of PR_SET_PDEATHSIG's reach: this test needs it alive"

        proc = lab.plugin("DEL", conf, container_id="killed", netns=pod.path, ifname="eth0", cni_args=env["CNI_ARGS"])
        assert proc.returncode == 0, (proc.stdout, proc.stderr, lab.read_log())
        assert gone(ipam, 2.0), "the interrupted ADD's IPAM is still running after the DEL"
        assert "stopped what the interrupted ADD left running" in lab.read_log()
        assert "net1" not in pod.links()
        assert not list((lab.state_dir / "attachments").iterdir())
    finally:
        stop(runtime, ipam)
