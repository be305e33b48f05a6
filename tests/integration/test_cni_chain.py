"""The frozen dracni binary chained after ptp, driven by cnitool 1.1.2, with Debian's plugins as
delegates, in throwaway network namespaces."""

from __future__ import annotations

import json
import shutil

import pytest

from dracni.defaults import PYTHON_EXECUTABLE
from tests.harness import DRACNI_BINARY, container_id_for, ip, run
from tests.integration.conftest import (
    addresses,
    assert_records_match_schema,
    ipam_reservations,
    macvlan,
    one_device_claim,
    result_of,
)


def test_macvlan_claim_add_check_del(lab, pod_uid):
    lab.write_conflist()
    lab.prepare(one_device_claim("mv", pod_uid, [macvlan(lab)]))
    pod = lab.pod()

    out = result_of(lab.cnitool("add", pod, pod_uid=pod_uid))

    # Chained: the runtime gets ptp's result unchanged, the pod's primary IP stays primary.
    assert [i["name"] for i in out["interfaces"] if i.get("sandbox")] == ["eth0"]
    assert [ip_["address"] for ip_ in out["ips"]] == ["10.244.0.2/24"]
    links = pod.links()
    assert addresses(links, "net1") == ["10.10.1.2/24"]
    assert links["net1"]["link_type"] == "ether" and links["net1"]["address"]
    assert ipam_reservations(lab, "mv") == ["10.10.1.2"]

    lab.cnitool("check", pod, pod_uid=pod_uid)

    lab.cnitool("del", pod, pod_uid=pod_uid)
    assert "net1" not in pod.links()
    assert ipam_reservations(lab, "mv") == []
    assert not list((lab.state_dir / "attachments").iterdir())


def test_status_outbox_records_what_was_built(lab, pod_uid):
    lab.write_conflist()
    claim = one_device_claim("mv", pod_uid, [macvlan(lab)], if_name="data0")
    lab.prepare(claim)
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)

    lab.dracni("publish-status", str(lab.claims_dir), f"--state-dir={lab.state_dir}")
    status_file = next(lab.claims_dir.glob("*.status.json"))
    entry = json.loads(status_file.read_text())["status"]["devices"][0]
    mac = pod.links()["data0"]["address"]
    assert entry["networkData"] == {"interfaceName": "data0", "ips": ["10.10.1.2/24"], "hardwareAddress": mac}
    assert entry["conditions"][0]["type"] == "Ready" and entry["conditions"][0]["status"] == "True"
    assert entry["data"]["interfaces"] == [{"name": "data0", "mac": mac}]  # sandbox path removed
    assert (entry["driver"], entry["pool"], entry["device"]) == ("dracni.io", "node1", "eth1")

    lab.cnitool("del", pod, pod_uid=pod_uid)
    lab.dracni("publish-status", str(lab.claims_dir), f"--state-dir={lab.state_dir}")
    assert not list(lab.claims_dir.glob("*.status.json"))


def test_pod_without_claims_is_a_pass_through(lab, pod_uid):
    lab.write_conflist()
    pod = lab.pod()
    out = result_of(lab.cnitool("add", pod, pod_uid=pod_uid))
    assert sorted(pod.links()) == ["eth0", "lo"]
    assert [i["name"] for i in out["interfaces"] if i.get("sandbox")] == ["eth0"]
    lab.cnitool("check", pod, pod_uid=pod_uid)
    lab.cnitool("del", pod, pod_uid=pod_uid)


def test_pod_found_by_namespace_and_name_without_uid(lab, pod_uid):
    lab.write_conflist()
    lab.prepare(one_device_claim("mv", pod_uid, [macvlan(lab)]))
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=None, pod_name="demo")
    assert "net1" in pod.links()
    lab.cnitool("del", pod, pod_uid=None, pod_name="demo")
    assert "net1" not in pod.links()


def test_ipvlan_claim(lab, pod_uid):
    probe = ip("link", "add", "ipvprobe", "link", "eth1", "type", "ipvlan", netns=lab.host.name, check=False)
    if probe.returncode != 0:
        pytest.skip(f"this kernel has no ipvlan support: {probe.stderr.decode().strip()}")
    ip("link", "del", "ipvprobe", netns=lab.host.name)
    lab.write_conflist()
    ipvlan = {
        "type": "ipvlan",
        "master": "eth1",
        "mode": "l2",
        "ipam": {"type": "host-local", "subnet": "10.20.0.0/24", "dataDir": str(lab.ipam_dir)},
    }
    lab.prepare(one_device_claim("ipv", pod_uid, [ipvlan]))
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    assert addresses(pod.links(), "net1") == ["10.20.0.2/24"]
    lab.cnitool("del", pod, pod_uid=pod_uid)
    assert "net1" not in pod.links()


def test_bridge_claim(lab, pod_uid):
    lab.write_conflist()
    bridge = {
        "type": "bridge",
        "bridge": "br-claims",
        "isGateway": True,
        "ipam": {"type": "host-local", "subnet": "10.30.0.0/24", "dataDir": str(lab.ipam_dir)},
    }
    lab.prepare(one_device_claim("br", pod_uid, [bridge]))
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    assert addresses(pod.links(), "net1") == ["10.30.0.2/24"]
    host_links = lab.host.links()
    assert "br-claims" in host_links and addresses(host_links, "br-claims") == ["10.30.0.1/24"]
    lab.cnitool("del", pod, pod_uid=pod_uid)
    assert "net1" not in pod.links()
    assert ipam_reservations(lab, "br") == []


def test_host_device_claim_moves_the_nic_in_and_back(lab, pod_uid):
    lab.write_conflist()
    ip("addr", "add", "192.168.77.7/24", "dev", "eth2", netns=lab.host.name)
    # host-device takes the whole NIC: the administrator offers eth2 exclusively
    lab.prepare(
        one_device_claim("hd", pod_uid, [{"type": "host-device", "device": "eth2"}], device="eth2"),
        args=("--nic-sharing=eth2=exclusive",),
    )
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    assert "net1" in pod.links() and "eth2" not in lab.host.links()
    lab.cnitool("del", pod, pod_uid=pod_uid)
    assert "eth2" in lab.host.links() and "net1" not in pod.links()


def test_static_ipam_with_tuning_in_the_claim_chain(lab, pod_uid):
    lab.write_conflist()
    plugins = [
        {
            "type": "macvlan",
            "master": "eth1",
            "mode": "bridge",
            "ipam": {"type": "static", "addresses": [{"address": "192.168.50.5/24", "gateway": "192.168.50.1"}]},
        },
        {"type": "tuning", "mtu": 1280, "mac": "02:00:00:00:50:05", "sysctl": {"net.ipv4.conf.net1.arp_notify": "1"}},
    ]
    lab.prepare(one_device_claim("st", pod_uid, plugins))
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    net1 = pod.links()["net1"]
    assert addresses(pod.links(), "net1") == ["192.168.50.5/24"]
    assert net1["mtu"] == 1280 and net1["address"] == "02:00:00:00:50:05"
    lab.cnitool("check", pod, pod_uid=pod_uid)
    lab.cnitool("del", pod, pod_uid=pod_uid)
    assert "net1" not in pod.links()


def test_two_claims_on_one_pod_get_net1_and_net2(lab, pod_uid):
    lab.write_conflist()
    bridge = {
        "type": "bridge",
        "bridge": "br-b",
        "ipam": {"type": "host-local", "subnet": "10.31.0.0/24", "dataDir": str(lab.ipam_dir)},
    }
    lab.prepare(one_device_claim("a-macvlan", pod_uid, [macvlan(lab)]), one_device_claim("b-bridge", pod_uid, [bridge]))
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    links = pod.links()
    assert addresses(links, "net1") == ["10.10.1.2/24"] and addresses(links, "net2") == ["10.31.0.2/24"]
    lab.cnitool("del", pod, pod_uid=pod_uid)
    assert sorted(pod.links()) == ["lo"]
    assert ipam_reservations(lab, "a-macvlan") == [] and ipam_reservations(lab, "b-bridge") == []


def test_failing_second_claim_rolls_back_the_first(lab, pod_uid):
    lab.write_conflist()
    lab.prepare(
        one_device_claim("a-good", pod_uid, [macvlan(lab)]),
        one_device_claim("b-bad", pod_uid, [macvlan(lab, subnet="10.11.0.0/24", master="nosuchnic")]),
    )
    pod = lab.pod()

    proc = lab.cnitool("add", pod, pod_uid=pod_uid, check=False)

    assert proc.returncode != 0
    assert b"claim default/b-bad request net (net2): delegate macvlan ADD failed" in proc.stderr
    # ptp's eth0 stays until the runtime's DEL; nothing of dracni's is left.
    assert "net1" not in pod.links() and "net2" not in pod.links()
    assert ipam_reservations(lab, "a-good") == [] and ipam_reservations(lab, "b-bad") == []
    cid = container_id_for(pod.path)
    record = json.loads((lab.state_dir / "attachments" / f"podnet+{cid}+eth0.json").read_text())
    assert record["state"] == "failed" and "b-bad" in record["error"]["msg"]

    lab.cnitool("del", pod, pod_uid=pod_uid)  # every ADD gets a DEL, also a failed one
    assert not list((lab.state_dir / "attachments").iterdir())


def test_del_twice_succeeds(lab, pod_uid):
    lab.write_conflist()
    lab.prepare(one_device_claim("mv", pod_uid, [macvlan(lab)]))
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    lab.cnitool("del", pod, pod_uid=pod_uid)
    lab.cnitool("del", pod, pod_uid=pod_uid)
    assert ipam_reservations(lab, "mv") == []


def test_del_after_netns_deleted_releases_addresses(lab, pod_uid):
    lab.write_conflist()
    lab.prepare(one_device_claim("mv", pod_uid, [macvlan(lab)]))
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    run(["ip", "netns", "del", pod.name])
    assert not pod.exists()

    lab.cnitool("del", pod, pod_uid=pod_uid)

    assert ipam_reservations(lab, "mv") == []
    assert not list((lab.state_dir / "attachments").iterdir())


def test_del_with_state_dir_wiped(lab, pod_uid):
    lab.write_conflist()
    lab.prepare(one_device_claim("mv", pod_uid, [macvlan(lab)]))
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    shutil.rmtree(lab.state_dir)

    lab.cnitool("del", pod, pod_uid=pod_uid)  # nothing known: still a success
    lab.cnitool("del", pod, pod_uid=pod_uid)


def test_del_with_records_lost_but_claims_replayed_releases_ipam(lab, pod_uid):
    """Attachment records lost, then kubelet replays prepare: DEL rebuilds the delegate calls."""
    lab.write_conflist()
    lab.prepare(one_device_claim("mv", pod_uid, [macvlan(lab)]))
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    shutil.rmtree(lab.state_dir)
    lab.prepare()  # replay from the manifests

    lab.cnitool("del", pod, pod_uid=pod_uid)

    assert ipam_reservations(lab, "mv") == []
    assert "net1" not in pod.links()


def test_check_detects_a_removed_interface(lab, pod_uid):
    lab.write_conflist()
    lab.prepare(one_device_claim("mv", pod_uid, [macvlan(lab)]))
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    pod.exec("ip", "link", "del", "net1")

    proc = lab.cnitool("check", pod, pod_uid=pod_uid, check=False)

    assert proc.returncode != 0
    assert b"net1" in proc.stderr + proc.stdout
    lab.cnitool("del", pod, pod_uid=pod_uid)


def test_gc_releases_stale_attachments_and_forwards_to_1_1_delegates(lab):
    lab.write_conflist()  # cnitool 1.1.2 and Debian's ptp stop at 1.0.0; GC comes from a 1.1.0 runtime below
    record_file = lab.tmp / "recorder.jsonl"
    recorder = {"type": "recorder", "recordFile": str(record_file)}
    uids = {"stale": "11111111-0000-0000-0000-000000000001", "live": "11111111-0000-0000-0000-000000000002"}
    pods = {}
    for name, uid in uids.items():
        lab.prepare(one_device_claim(f"c-{name}", uid, [macvlan(lab, subnet="10.40.0.0/24"), recorder]))
        pods[name] = lab.pod()
        lab.cnitool("add", pods[name], pod_uid=uid)
    assert len(ipam_reservations(lab, "c-stale")) == 1
    live_cid = container_id_for(pods["live"].path)
    record_file.write_text("")

    gc_conf = {
        "cniVersion": "1.1.0",
        "name": "podnet",
        "type": "dracni",
        "stateDir": str(lab.state_dir),
        "cni.dev/valid-attachments": [{"containerID": live_cid, "ifname": "eth0"}],
    }
    proc = lab.plugin("GC", gc_conf)

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ipam_reservations(lab, "c-stale") == [] and len(ipam_reservations(lab, "c-live")) == 1
    assert "net1" not in pods["stale"].links() and "net1" in pods["live"].links()
    remaining = [p.name for p in (lab.state_dir / "attachments").iterdir()]
    assert remaining == [f"podnet+{live_cid}+eth0.json"]
    calls = [json.loads(line) for line in record_file.read_text().splitlines()]
    assert [c["command"] for c in calls] == ["DEL", "GC", "GC"]  # stale DEL, then one GC per delegate network
    gc_by_network = {c["conf"]["name"]: c["conf"]["cni.dev/valid-attachments"] for c in calls[1:]}
    assert gc_by_network == {"c-live": [{"containerID": live_cid, "ifname": "net1"}], "c-stale": []}


def test_status_reports_whether_add_can_be_served(lab):
    good = {"cniVersion": "1.1.0", "name": "podnet", "type": "dracni", "stateDir": str(lab.state_dir)}
    assert lab.plugin("STATUS", good).returncode == 0
    blocker = lab.tmp / "not-a-dir"
    blocker.write_text("")
    proc = lab.plugin("STATUS", dict(good, stateDir=str(blocker / "state")))
    assert proc.returncode != 0 and json.loads(proc.stdout)["code"] == 50


@pytest.mark.parametrize("version", ["0.4.0", "1.0.0"])
def test_cni_version_through_the_whole_chain(lab, pod_uid, version):
    lab.write_conflist(cni_version=version)
    debug = lab.tmp / "noop-debug.json"
    debug.write_text(json.dumps({"ReportResult": "PASSTHROUGH"}))
    plugins = [macvlan(lab, cniVersion=version), {"type": "noop", "debugFile": str(debug)}]
    lab.prepare(one_device_claim("mv", pod_uid, plugins, cni_version=version))
    pod = lab.pod()

    out = result_of(lab.cnitool("add", pod, pod_uid=pod_uid))

    assert out["cniVersion"] == version
    if version == "0.4.0":
        assert all(ip_["version"] == "4" for ip_ in out["ips"])
    received = json.loads(__import__("base64").b64decode(json.loads(debug.read_text())["CmdArgs"]["StdinData"]))
    assert received["cniVersion"] == version
    assert received["prevResult"]["cniVersion"] == version
    assert [i["name"] for i in received["prevResult"]["interfaces"]] == ["net1"]
    lab.cnitool("check", pod, pod_uid=pod_uid)
    lab.cnitool("del", pod, pod_uid=pod_uid)
    assert ipam_reservations(lab, "mv") == []


def _noop_call(debug_file) -> tuple[str, dict, dict]:
    """What Debian's noop plugin recorded of its last call: command, stdin config, CmdArgs."""
    import base64

    debug = json.loads(debug_file.read_text())
    args = debug["CmdArgs"]
    return debug["Command"], json.loads(base64.b64decode(args["StdinData"])), args


def test_delegates_receive_exactly_what_the_spec_says(lab, pod_uid):
    lab.write_conflist()
    first_result = {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "net1", "mac": "02:00:00:00:00:aa", "sandbox": "/x"}],
        "ips": [{"address": "10.60.0.5/24", "interface": 0}],
        "dns": {},
    }
    debug_a, debug_b = lab.tmp / "noop-a.json", lab.tmp / "noop-b.json"
    debug_a.write_text(json.dumps({"ReportResult": json.dumps(first_result)}))
    debug_b.write_text(json.dumps({"ReportResult": "PASSTHROUGH"}))
    plugin_a = {"type": "noop", "debugFile": str(debug_a), "capabilities": {"mac": True}, "custom": {"k": [1, 2]}}
    plugin_b = {"type": "noop", "debugFile": str(debug_b), "cniVersion": "0.3.1"}
    runtime_config = {"mac": "02:00:00:00:00:aa", "bandwidth": {"ingressRate": 1000}}
    lab.prepare(one_device_claim("noops", pod_uid, [plugin_a, plugin_b], if_name="data0", runtimeConfig=runtime_config))
    pod = lab.pod()

    lab.cnitool("add", pod, pod_uid=pod_uid)

    command, received_a, args_a = _noop_call(debug_a)
    assert command == "ADD"
    assert received_a == {
        **plugin_a,
        "name": "noops",
        "cniVersion": "1.0.0",
        "runtimeConfig": {"mac": runtime_config["mac"]},
    }
    command, received_b, args_b = _noop_call(debug_b)
    assert command == "ADD"
    # The list's name and version win over the plugin's own; prevResult is the previous delegate's result.
    assert received_b == {**plugin_b, "name": "noops", "cniVersion": "1.0.0", "prevResult": first_result}
    for args in (args_a, args_b):
        assert args["ContainerID"] == container_id_for(pod.path)
        assert args["Netns"] == pod.path
        assert args["IfName"] == "data0"
        assert args["Args"] == lab.env(pod_uid=pod_uid)["CNI_ARGS"]
        assert args["Path"] == str(lab.bin_dir)

    lab.cnitool("del", pod, pod_uid=pod_uid)
    for debug in (debug_a, debug_b):
        command, received, args = _noop_call(debug)
        assert command == "DEL" and received["prevResult"] == first_result and args["IfName"] == "data0"


def test_failing_second_delegate_rolls_back_the_first_in_one_chain(lab, pod_uid):
    lab.write_conflist()
    debug = lab.tmp / "noop-fail.json"
    debug.write_text(json.dumps({"ReportError": "boom from the second delegate"}))
    lab.prepare(one_device_claim("chain", pod_uid, [macvlan(lab), {"type": "noop", "debugFile": str(debug)}]))
    pod = lab.pod()

    proc = lab.cnitool("add", pod, pod_uid=pod_uid, check=False)

    assert proc.returncode != 0 and b"boom from the second delegate" in proc.stderr
    assert "net1" not in pod.links() and ipam_reservations(lab, "chain") == []
    assert _noop_call(debug)[0] == "DEL"  # the failing delegate was DELeted too
    lab.cnitool("del", pod, pod_uid=pod_uid)


def test_two_claims_asking_for_one_interface_name_fail_clearly(lab, pod_uid):
    lab.write_conflist()
    lab.prepare(
        one_device_claim("a", pod_uid, [macvlan(lab)], if_name="data0"),
        one_device_claim("b", pod_uid, [macvlan(lab, subnet="10.12.0.0/24")], if_name="data0"),
    )
    pod = lab.pod()
    proc = lab.cnitool("add", pod, pod_uid=pod_uid, check=False)
    assert proc.returncode != 0
    assert b"ifName: claim default/b request net asks for 'data0', already used by claim default/a" in proc.stderr
    assert "data0" not in pod.links()
    lab.cnitool("del", pod, pod_uid=pod_uid)


def test_concurrent_add_and_del_of_different_pods(lab):
    """Pods start and stop in parallel on a node: no lost record, no shared address, no leak."""
    import uuid
    from concurrent.futures import ThreadPoolExecutor

    lab.write_conflist()
    uids = [str(uuid.uuid4()) for _ in range(6)]
    lab.prepare(
        *[
            one_device_claim(f"claim-{i}", uid, [macvlan(lab, subnet="10.70.0.0/24")], network="shared")
            for i, uid in enumerate(uids)
        ]
    )
    pods = [lab.pod() for _ in uids]

    with ThreadPoolExecutor(len(pods)) as pool:
        list(pool.map(lambda pu: lab.cnitool("add", pu[0], pod_uid=pu[1]), zip(pods, uids, strict=True)))

    got = sorted(addresses(p.links(), "net1")[0] for p in pods)
    assert len(set(got)) == len(pods)
    assert len(ipam_reservations(lab, "shared")) == len(pods)
    # 6 claims, 6 pod-UID index entries + 1 shared by-name entry (all pods are "default/demo"),
    # 6 attachments and 6 outbox records
    assert assert_records_match_schema(lab.state_dir) == 6 + 7 + 6 + 6
    with ThreadPoolExecutor(len(pods)) as pool:
        list(pool.map(lambda pu: lab.cnitool("del", pu[0], pod_uid=pu[1]), zip(pods, uids, strict=True)))
    assert ipam_reservations(lab, "shared") == []
    assert not list((lab.state_dir / "attachments").iterdir())
    outbox = [json.loads(p.read_text()) for p in (lab.state_dir / "outbox").iterdir()]
    assert len(outbox) == 6 and all(o["devices"] == [] and o["seq"] == 2 for o in outbox)


ENV_DUMPER = """#!/bin/sh
# A delegate that writes the environment it was started with, one file per command.
cat >/dev/null
env > "{dump}.$CNI_COMMAND"
case "$CNI_COMMAND" in
  VERSION) echo '{{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}}' ;;
  ADD) echo '{{"cniVersion":"1.0.0","interfaces":[{{"name":"'"$CNI_IFNAME"'"}}],"ips":[]}}' ;;
esac
"""


@pytest.mark.parametrize("runtime", [{"LD_LIBRARY_PATH": "/opt/vendor/lib"}, {}], ids=["runtime-libpath", "none"])
@pytest.mark.parametrize("via", ["native", "python"])
def test_delegates_run_with_the_runtimes_environment_not_the_bundles(lab, pod_uid, via, runtime):
    """The frozen bundle's bootloader adds _PYI_* variables and, when it restarts itself
    (dracni-python exec'd directly, not by the native dracni on the bundle's own loader),
    points LD_LIBRARY_PATH at its _internal/; the delegates get the runtime's environment back
    (LD_LIBRARY_PATH as the runtime set it, or none), so a dynamically linked delegate loads its
    own libraries, not the bundle's."""
    if via == "python":
        link = lab.bin_dir / "dracni"
        link.unlink()
        link.symlink_to(DRACNI_BINARY.parent / PYTHON_EXECUTABLE)
    dump = lab.tmp / "delegate-env"
    dumper = lab.bin_dir / "env-dumper"
    dumper.write_text(ENV_DUMPER.format(dump=dump))
    dumper.chmod(0o755)
    lab.write_conflist()
    lab.prepare(one_device_claim("envd", pod_uid, [{"type": "env-dumper"}]))
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid, extra=runtime)
    lab.cnitool("del", pod, pod_uid=pod_uid, extra=runtime)
    for command in ("VERSION", "ADD", "DEL"):
        env = dict(
            line.split("=", 1)
            for line in (dump.parent / f"{dump.name}.{command}").read_text().splitlines()
            if "=" in line
        )
        assert env.get("LD_LIBRARY_PATH") == runtime.get("LD_LIBRARY_PATH"), command
        assert not [k for k in env if k.startswith("_PYI_") or k == "LD_LIBRARY_PATH_ORIG"], command
        assert env["CNI_COMMAND"] == command
