"""A claim cannot make dracni reach outside its device (issue 9), through the frozen binary,
cnitool and Debian's plugins in throwaway network namespaces.

So far: a claim naming ``type: dracni``, as a plugin or as the IPAM of a plugin, neither
recurses nor writes the files its config names (the nested dracni refuses before it opens
its ``logFile``), and the outer dracni's log keeps one line per message.  The policy engine
that refuses such configs at prepare time is still to come.
"""

from __future__ import annotations

from tests.integration.conftest import macvlan, one_device_claim


def injected(lab) -> dict:
    """What a hostile tenant hands the nested dracni: a file to append to, a newline to forge a line."""
    return {"logFile": str(lab.tmp / "victim"), "logLevel": "debug", "stateDir": "/etc/hostname/\nFORGED\n"}


def assert_refused(lab, proc) -> None:
    assert proc.returncode != 0
    assert b"cannot be a delegate of dracni" in proc.stdout + proc.stderr
    assert not (lab.tmp / "victim").exists(), "the nested dracni wrote the claim's logFile"
    assert not any(line.startswith("FORGED") for line in lab.read_log().splitlines())


def test_a_claim_naming_dracni_as_its_plugin_is_refused(lab, pod_uid):
    lab.write_conflist()
    lab.prepare(one_device_claim("nested", pod_uid, [{"type": "dracni", **injected(lab)}]))
    pod = lab.pod()

    proc = lab.cnitool("add", pod, pod_uid=pod_uid, check=False)

    assert_refused(lab, proc)
    assert "net1" not in pod.links()
    lab.cnitool("del", pod, pod_uid=pod_uid)  # the runtime's DEL after a failed ADD succeeds


def test_a_claim_naming_dracni_as_an_ipam_is_refused(lab, pod_uid):
    lab.write_conflist()
    lab.prepare(one_device_claim("nested-ipam", pod_uid, [macvlan(lab, ipam={"type": "dracni", **injected(lab)})]))
    pod = lab.pod()

    proc = lab.cnitool("add", pod, pod_uid=pod_uid, check=False)

    assert_refused(lab, proc)
    # Debian's macvlan leaves its net1 in the pod when its IPAM fails, and its DEL stops at the
    # IPAM's DEL: refusing ipam.type dracni at prepare time (the policy engine) is still to come.
    lab.cnitool("del", pod, pod_uid=pod_uid, check=False)
