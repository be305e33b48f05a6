"""Names and input that cannot hurt (issue 22, item 4), through the frozen CLI's clusterless
``dracni prepare``: a tenant's claim holding a lone surrogate (``runtimeConfig.mac``) or a
terminal escape (``ifName``) fails alone with an error naming the field, and the other claim of
the same run is prepared."""

from __future__ import annotations

import json

from tests.harness import Lab, attachment_params, claim_manifest


def class_macvlan(lab: Lab) -> dict:
    """The administrator's macvlan network granting mac and ips (the shipped class's shape)."""
    plugin = {
        "type": "macvlan",
        "mode": "bridge",
        "capabilities": {"mac": True, "ips": True},
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.10.1.0/24"}]], "dataDir": str(lab.ipam_dir)},
    }
    return attachment_params([plugin], name="macvlan")


def tenant_claim(lab: Lab, name: str, pod_uid: str, device: str, **fields: object) -> dict:
    """A tenant's claim choosing the class network (the profile form) with ``fields``."""
    params = {"apiVersion": "dracni.io/v1alpha1", "kind": "NetworkAttachment", **fields}
    entry = {"request": "net", "pool": "node1", "device": device, "params": params, "class": class_macvlan(lab)}
    return claim_manifest(name, pod_uid=pod_uid, devices=[entry], source="FromClaim")


def test_an_unencodable_or_escaping_claim_fails_alone(lab, pod_uid):
    good = tenant_claim(lab, "good", pod_uid, "eth1", ifName="net1", runtimeConfig={"mac": "02:00:00:00:00:01"})
    surrogate = tenant_claim(lab, "surrogate", pod_uid, "eth2", runtimeConfig={"mac": "02:00:00:00:00:\ud800"})
    escape = tenant_claim(lab, "escape", pod_uid, "eth2", ifName="net\x1b[7m")
    for claim in (surrogate, escape):  # as the API server's JSON would carry them: "\ud800", "\u001b"
        (lab.claims_dir / f"{claim['metadata']['name']}.json").write_text(json.dumps(claim))
    proc = lab.prepare(good, check=False)

    stdout, stderr = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stderr and "UnicodeEncodeError" not in stderr and "internal error" not in stderr
    assert "\x1b" not in stdout + stderr  # the escape never reaches the terminal raw
    assert f"claim {good['metadata']['uid']}: prepared net=node1/eth1" in stdout
    lines = {line.split(": error: ")[0]: line for line in stderr.splitlines() if ": error: " in line}
    bad_mac = lines[f"claim {surrogate['metadata']['uid']}"]
    assert ": parameters.runtimeConfig.mac: " in bad_mac and "lone surrogate" in bad_mac, bad_mac
    bad_name = lines[f"claim {escape['metadata']['uid']}"]
    assert ': parameters.ifName: "net\\u001b[7m" holds a character Linux tools mishandle' in bad_name, bad_name
    assert "(rule ifNameCharacters: " in bad_name, bad_name
    prepared = {json.loads(p.read_text())["name"] for p in (lab.state_dir / "claims").iterdir()}
    assert prepared == {"good"}
    print(stderr)  # the exact messages, for `pytest -s`
