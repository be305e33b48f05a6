"""Deeply nested claim parameters through the frozen CLI: a clear error naming the depth limit
for that claim, the rest of the batch prepared (issue 12, item 6)."""

from __future__ import annotations

import json

from tests.integration.conftest import macvlan, one_device_claim


def nested(depth: int) -> dict:
    value: dict = {"x": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def test_prepare_with_deep_parameters_prepares_the_rest(lab, pod_uid):
    good = one_device_claim("good", pod_uid, [macvlan(lab)])
    deeper = one_device_claim("deeper", pod_uid, [macvlan(lab, master="eth2")], runtimeConfig=nested(40))
    deepest = one_device_claim("deepest", pod_uid, [macvlan(lab, master="eth2")])
    for config in deepest["status"]["allocation"]["devices"]["config"]:  # the harness deep-copies: add it after
        config["opaque"]["parameters"]["runtimeConfig"] = nested(900)
    (lab.claims_dir / "deepest.json").write_text(json.dumps(deepest))  # yaml.safe_dump recurses: JSON it is
    proc = lab.prepare(good, deeper, check=False)

    assert proc.returncode == 1
    stderr = proc.stderr.decode()
    assert "deepest.json: document 1: nested too deeply: the limit is 100 levels; document skipped" in stderr
    assert "nested too deeply: the limit is 32 levels of objects and arrays" in stderr  # the claim "deeper"
    assert "RecursionError" not in stderr and "Traceback" not in stderr
    prepared = {json.loads(p.read_text())["name"] for p in (lab.state_dir / "claims").iterdir()}
    assert prepared == {"good"}
    assert f"claim {good['metadata']['uid']}: prepared" in proc.stdout.decode()


def test_validate_with_deep_parameters_names_the_limit(lab):
    path = lab.tmp / "params.json"
    path.write_text(json.dumps({"apiVersion": "dracni.io/v1alpha1", "kind": "NetworkAttachment", "x": nested(900)}))
    proc = lab.dracni("validate", str(path), check=False)
    assert proc.returncode == 1
    assert "nested too deeply: the limit is 100 levels" in proc.stderr.decode()
    assert "Traceback" not in proc.stderr.decode()
