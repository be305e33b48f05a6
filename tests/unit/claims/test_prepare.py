"""prepare_claims / unprepare_claims against a real StateDir."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest

from dracni.claims.manifests import ManifestClaimSource
from dracni.claims.prepare import Resolver, prepare_claims, unprepare_claims
from dracni.kubelet.driver import PrepareResult as PrepareOutcome
from dracni.policy.binding import DeviceFacts
from dracni.policy.config import DEFAULT_PLUGIN_TYPES, TenantPolicy
from dracni.specfiles import spec_path
from dracni.state import facts
from dracni.state.store import StateDir

DRIVER = "dracni.io"
#: Claim configs allowed (the examples of spec/examples bring their own, one with bridge).
OPEN = TenantPolicy(claim_configs="full", plugin_types=DEFAULT_PLUGIN_TYPES | {"bridge"})


def NICS(pool: str, device: str) -> DeviceFacts | None:  # the inventory port of a node with eth0
    return DeviceFacts("eth0", None, None) if device == "eth0" else None


def make_claim(name: str, uid: str, pod_uid: str = "pod-1", pod_name: str = "demo", **params: Any) -> dict:
    parameters = {
        "apiVersion": "dracni.io/v1alpha1",
        "kind": "NetworkAttachment",
        "config": {"type": "macvlan", "mode": "bridge", "master": "eth0"},
        **params,
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns1", "uid": uid},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "net", "driver": DRIVER, "pool": "node1", "device": "eth0", "shareID": "s1"}
                    ],
                    "config": [{"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": parameters}}],
                }
            },
            "reservedFor": [{"resource": "pods", "name": pod_name, "uid": pod_uid}],
        },
    }


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    return StateDir(str(tmp_path / "state"))


def prepare(
    state: StateDir, claims: list[dict], *, sources: dict[str, str | None] | None = None, **kwargs: Any
) -> dict[str, PrepareOutcome]:
    return prepare_claims(Resolver(state=state, driver=DRIVER, **kwargs), claims, sources=sources)


def test_prepare_stores_record_and_pod_index(state: StateDir) -> None:
    outcomes = prepare(state, [make_claim("c1", "uid-1", ifName="net1")], node="node1", sources={"uid-1": "/m/c1.yaml"})
    assert outcomes == {
        "uid-1": PrepareOutcome(
            devices=[{"request": "net", "pool": "node1", "device": "eth0", "shareID": "s1"}], error=None
        )
    }
    record = state.read_claim("uid-1")
    assert record is not None
    assert (record["kind"], record["schema"], record["namespace"], record["name"]) == ("PreparedClaim", 1, "ns1", "c1")
    assert record["source"] == "/m/c1.yaml"
    assert record["devices"][0]["ifName"] == "net1"
    assert record["devices"][0]["config"] == {
        "name": "macvlan",
        "plugins": [{"type": "macvlan", "mode": "bridge", "master": "eth0"}],
    }
    assert os.path.isfile(os.path.join(state.root, "claims", "uid-1.json"))
    assert state.pod_claim_uids("pod-1", None, None) == ["uid-1"]
    assert state.pod_claim_uids(None, "ns1", "demo") == ["uid-1"]
    assert [c["uid"] for c in state.pod_claims("pod-1", "ns1", "demo")] == ["uid-1"]


def test_prepare_is_idempotent(state: StateDir) -> None:
    claim = make_claim("c1", "uid-1")
    first = prepare(state, [claim])
    record = state.read_claim("uid-1")
    second = prepare(state, [copy.deepcopy(claim)])
    assert first == second
    assert state.read_claim("uid-1") == record  # untouched, preparedAt included
    assert state.pod_claim_uids("pod-1", None, None) == ["uid-1"]
    assert [c["uid"] for c in state.list_claims()] == ["uid-1"]


def test_prepare_again_after_change_rewrites(state: StateDir) -> None:
    prepare(state, [make_claim("c1", "uid-1", pod_uid="pod-old", pod_name="old")])
    prepare(state, [make_claim("c1", "uid-1", pod_uid="pod-new", pod_name="new", ifName="net3")])
    assert state.read_claim("uid-1")["devices"][0]["ifName"] == "net3"
    assert state.pod_claim_uids("pod-old", None, None) == []
    assert state.pod_claim_uids("pod-new", None, None) == ["uid-1"]


def test_bad_claim_does_not_stop_the_others(state: StateDir) -> None:
    bad = make_claim("bad", "uid-bad", ifName="a/b")
    unallocated = make_claim("unallocated", "uid-un")
    del unallocated["status"]["allocation"]
    outcomes = prepare(state, [make_claim("c1", "uid-1"), bad, unallocated, make_claim("c2", "uid-2", pod_uid="pod-2")])
    assert list(outcomes) == ["uid-1", "uid-bad", "uid-un", "uid-2"]
    assert outcomes["uid-1"].error is None and outcomes["uid-2"].error is None
    assert outcomes["uid-bad"].devices == []
    assert outcomes["uid-bad"].error.startswith(
        "claim ns1/bad: request net: the DeviceClass's config: parameters.ifName: "
    )
    assert outcomes["uid-un"].error.startswith("claim ns1/unallocated: not allocated")
    assert [c["uid"] for c in state.list_claims()] == ["uid-1", "uid-2"]
    assert state.read_claim("uid-bad") is None


def test_claim_without_uid_is_keyed_by_name(state: StateDir) -> None:
    claim = make_claim("c1", "x")
    del claim["metadata"]["uid"]
    outcome = prepare(state, [claim])["ns1/c1"]
    assert "metadata.uid is missing" in outcome.error


def test_tenant_policy_is_enforced(state: StateDir) -> None:
    claim = make_claim("c1", "uid-1")
    claim["status"]["allocation"]["devices"]["config"][0]["source"] = "FromClaim"
    outcome = prepare(state, [claim])["uid-1"]
    assert "parameters.config: a claim config may not define its own network (rule claimConfigs" in outcome.error
    outcome = prepare(state, [claim], policy=TenantPolicy(claim_configs="full", plugin_types=frozenset({"bridge"})))
    assert "parameters.config.type" in outcome["uid-1"].error
    assert state.read_claim("uid-1") is None


def test_claim_configs_get_the_managed_ipam_dir(state: StateDir) -> None:
    claim = make_claim(
        "c1", "uid-1", config={"type": "macvlan", "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}}
    )
    claim["status"]["allocation"]["devices"]["config"][0]["source"] = "FromClaim"
    assert prepare(state, [claim], policy=OPEN, devices=NICS)["uid-1"].error is None
    plugin = state.read_claim("uid-1")["devices"][0]["config"]["plugins"][0]
    assert plugin["ipam"]["dataDir"] == os.path.join(state.root, "ipam") == state.ipam_dir
    assert plugin["master"] == "eth0"


def test_state_error_is_reported_per_claim(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    state = StateDir(str(blocker / "state"))  # cannot be created: a file is in the way
    outcome = prepare(state, [make_claim("c1", "uid-1")])["uid-1"]
    assert outcome.error and outcome.devices == []


def test_unprepare_removes_claim_and_index_only(state: StateDir) -> None:
    prepare(state, [make_claim("c1", "uid-1"), make_claim("c2", "uid-2")])
    state.put_attachment({"network": "k8s", "containerID": "cid1", "ifName": "eth0", "state": "ready", "devices": []})
    facts.update_outbox(
        state, {"uid": "uid-1", "namespace": "ns1", "name": "c1", "driver": DRIVER}, lambda devices: devices
    )
    assert unprepare_claims(state, ["uid-1"]) == {"uid-1": None}
    assert state.read_claim("uid-1") is None
    assert state.pod_claim_uids("pod-1", None, None) == ["uid-2"]
    assert state.read_attachment("k8s", "cid1", "eth0") is not None
    assert state.read_outbox("uid-1") is not None


def test_unprepare_last_claim_drops_pod_index(state: StateDir) -> None:
    prepare(state, [make_claim("c1", "uid-1")])
    unprepare_claims(state, ["uid-1"])
    assert state.pod_claim_uids("pod-1", "ns1", "demo") == []
    assert state.list_claims() == []


def test_unprepare_unknown_and_twice_succeed(state: StateDir) -> None:
    prepare(state, [make_claim("c1", "uid-1")])
    assert unprepare_claims(state, ["uid-1", "never-prepared"]) == {"uid-1": None, "never-prepared": None}
    assert unprepare_claims(state, ["uid-1"]) == {"uid-1": None}


def test_unprepare_reports_state_errors(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = unprepare_claims(StateDir(str(blocker / "state")), ["uid-1"])
    assert result["uid-1"]


def test_prepare_example_manifests(state: StateDir) -> None:
    source = ManifestClaimSource(spec_path("examples"))
    claims = [source.get("default", "macvlan-net1"), source.get("default", "bridge-net1")]
    uids = [c["metadata"]["uid"] for c in claims]
    sources = {uid: source.path_of("default", c["metadata"]["name"]) for uid, c in zip(uids, claims, strict=True)}
    outcomes = prepare(state, claims, sources=sources, policy=OPEN, devices=NICS)
    assert all(o.error is None for o in outcomes.values()), outcomes
    assert sorted(state.pod_claim_uids("11111111-2222-3333-4444-555555555555", None, None)) == sorted(uids)
    assert state.read_claim(uids[0])["source"] == spec_path("examples", "macvlan-claim.yaml")


def nested(depth: int) -> dict:
    """An object nesting ``depth`` objects (``{"a": {"a": ... {"x": 1}}}``)."""
    value: dict = {"x": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize("depth", [40, 900])
def test_deeply_nested_parameters_fail_their_claim_naming_the_limit(state: StateDir, depth: int) -> None:
    """~900 levels once crashed with RecursionError; now that claim alone fails, naming the limit."""
    deep = make_claim("deep", "uid-deep", runtimeConfig=nested(depth))
    outcomes = prepare(state, [make_claim("c1", "uid-1"), deep, make_claim("c2", "uid-2", pod_uid="pod-2")])
    assert outcomes["uid-1"].error is None and outcomes["uid-2"].error is None
    assert "parameters: nested too deeply: the limit is 32 levels" in outcomes["uid-deep"].error
    assert [c["uid"] for c in state.list_claims()] == ["uid-1", "uid-2"]


def test_parameters_at_the_depth_limit_are_accepted() -> None:
    from dracni.params import MAX_PARAMETER_DEPTH, validate_parameters

    params = {
        "apiVersion": "dracni.io/v1alpha1",
        "kind": "NetworkAttachment",
        "config": {"type": "macvlan", "master": "eth0", "x": nested(MAX_PARAMETER_DEPTH - 2)},
    }
    assert validate_parameters(params)["config"]["plugins"][0]["x"] == nested(MAX_PARAMETER_DEPTH - 2)
    params["config"]["x"] = nested(MAX_PARAMETER_DEPTH - 1)
    with pytest.raises(ValueError, match="nested too deeply: the limit is 32"):
        validate_parameters(params)


def test_a_too_deep_manifest_document_is_skipped_the_others_load(tmp_path: Path) -> None:
    import json

    import yaml

    from dracni.claims.manifests import MAX_MANIFEST_DEPTH

    deep = make_claim("deep", "uid-deep", runtimeConfig=nested(900))
    (tmp_path / "a.json").write_text(json.dumps(deep))
    docs = [make_claim("c1", "uid-1"), deep, make_claim("c2", "uid-2")]
    (tmp_path / "b.yaml").write_text("---\n".join(json.dumps(d) + "\n" for d in docs))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(make_claim("c3", "uid-3")))
    source = ManifestClaimSource(str(tmp_path))
    assert [c["metadata"]["name"] for c in source.list()] == ["c1", "c2", "c3"]
    assert source.skipped == [
        f"{tmp_path}/a.json: document 1: nested too deeply: the limit is {MAX_MANIFEST_DEPTH} levels; document skipped",
        f"{tmp_path}/b.yaml: document 2: nested too deeply: the limit is {MAX_MANIFEST_DEPTH} levels; document skipped",
    ]


def test_prepare_cli_answers_a_malformed_uid_without_a_traceback(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from dracni.cli import main as cli

    (tmp_path / "claims").mkdir()
    (tmp_path / "claims" / "c.json").write_text(json.dumps(make_claim("c1", "a/b")))
    result = CliRunner().invoke(cli, ["prepare", str(tmp_path / "claims"), f"--state-dir={tmp_path / 'state'}"])
    assert result.exit_code == 1, result.output
    assert "claim a/b: error: malformed claim UID 'a/b'" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_text_that_is_not_unicode_fails_its_claim_alone(state: StateDir) -> None:
    surrogate = make_claim("mac", "uid-mac", runtimeConfig={"mac": "02:00:00:00:00:\ud800"})
    escape = make_claim("esc", "uid-esc", pod_uid="pod-3", ifName="net\x1b[7m")
    outcomes = prepare(state, [surrogate, make_claim("c1", "uid-1"), escape])
    assert outcomes["uid-1"].error is None
    assert "parameters.runtimeConfig.mac: " in outcomes["uid-mac"].error
    assert "lone surrogate" in outcomes["uid-mac"].error
    assert "parameters.ifName: " in outcomes["uid-esc"].error
    assert "(rule ifNameCharacters: " in outcomes["uid-esc"].error
    assert [c["uid"] for c in state.list_claims()] == ["uid-1"]


def test_a_record_that_cannot_be_written_fails_its_claim_alone(state: StateDir) -> None:
    """Behind the parameters' check: whatever else reaches a record unencodable (here a claim
    name) fails that claim, and the batch's other records are written."""
    from dracni.claims.prepare import store_prepared

    resolver = Resolver(state=state, driver=DRIVER)
    good = resolver.resolve(make_claim("c1", "uid-1"))
    bad = resolver.resolve(make_claim("c2", "uid-2", pod_uid="pod-2"))
    assert bad.record is not None
    bad.record["name"] = "c\ud800"
    outcomes = store_prepared(state, [bad, good])
    assert outcomes["uid-1"].error is None
    assert outcomes["uid-2"].error.startswith(
        "cannot record the prepared claim: it holds text that is not valid Unicode"
    )
    outcomes["uid-2"].error.encode("ascii")
    assert [c["uid"] for c in state.list_claims()] == ["uid-1"]


def test_the_state_dir_refuses_an_unencodable_record_with_a_state_error(state: StateDir) -> None:
    from dracni.state.store import StateError

    record = Resolver(state=state, driver=DRIVER).resolve(make_claim("c1", "uid-1")).record
    assert record is not None
    record["namespace"] = "\udc80"
    with pytest.raises(StateError, match="is not JSON text"):
        state.put_claims([record])
    assert state.list_claims() == []


def test_prepare_cli_prepares_the_good_claim_beside_an_unencodable_one(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from dracni.cli import main as cli

    (tmp_path / "claims").mkdir()
    bad = make_claim("bad", "uid-bad", runtimeConfig={"mac": "\ud800"})
    (tmp_path / "claims" / "a.json").write_text(json.dumps(bad))  # "\ud800", as JSON writes it
    (tmp_path / "claims" / "b.json").write_text(json.dumps(make_claim("good", "uid-good")))
    result = CliRunner().invoke(cli, ["prepare", str(tmp_path / "claims"), f"--state-dir={tmp_path / 'state'}"])
    assert result.exit_code == 1, result.output
    assert "claim uid-good: prepared net=node1/eth0" in result.output
    assert "claim uid-bad: error: " in result.output and "parameters.runtimeConfig.mac: " in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
