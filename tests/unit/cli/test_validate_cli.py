"""``dracni validate``: the tenant policy before any pod runs, on manifests and parameter files."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from dracni.cli import main as cli
from tests.policy_cases import CASES, CLASS_NETWORK, attach, plugin

EXAMPLES = Path(__file__).resolve().parents[3] / "packaging" / "deploy" / "examples"


def validate(path: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["validate", str(path), *args])
    return result.exit_code, result.output


def write(tmp_path: Path, *docs: dict) -> Path:
    path = tmp_path / "manifests.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def device_class(params: dict) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "net.dracni.io"},
        "spec": {"config": [{"opaque": {"driver": "dracni.io", "parameters": params}}]},
    }


def template(params: dict) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "tenant"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "net", "exactly": {"deviceClassName": "net.dracni.io"}}],
                    "config": [{"requests": ["net"], "opaque": {"driver": "dracni.io", "parameters": params}}],
                }
            }
        },
    }


def test_deploy_examples_are_valid_under_the_defaults(tmp_path: Path) -> None:
    docs = [yaml.safe_load(p.read_text()) for p in sorted(EXAMPLES.glob("*.yaml"))]
    code, output = validate(write(tmp_path, *docs))
    assert code == 0, output
    assert "6 of 6 parameter set(s) valid" in output


def test_a_claims_own_network_is_refused_naming_field_and_rule(tmp_path: Path) -> None:
    own = attach(config=plugin("macvlan", master="uplink0"))
    code, output = validate(write(tmp_path, template(own)))
    assert code == 1
    assert "ResourceClaimTemplate tenant/t config[0]: parameters.config: " in output
    assert "(rule claimConfigs: " in output


def test_full_policy_from_flags(tmp_path: Path) -> None:
    portmap = attach(config={"name": "own", "plugins": [{"type": "macvlan"}, {"type": "portmap"}]})
    path = write(tmp_path, template(portmap))
    code, output = validate(path, "--claim-configs=full")
    assert code == 1 and "parameters.config.plugins[1].type: " in output and "(rule pluginTypes: " in output
    code, output = validate(path, "--claim-configs=full", "--allow-type=portmap")
    assert code == 0, output


def test_a_choice_is_checked_against_the_classes_given(tmp_path: Path) -> None:
    code, output = validate(write(tmp_path, device_class(CLASS_NETWORK), template(attach(network="storage"))))
    assert code == 1 and '"storage" is not a network of the DeviceClasses given (they have: macvlan-eth1)' in output
    knobs = attach(network="macvlan-eth1", runtimeConfig={"ips": ["10.99.0.1/24"]})
    code, output = validate(write(tmp_path, device_class(CLASS_NETWORK), template(knobs)))
    assert code == 1 and "(rule networkRanges: " in output


def test_a_class_naming_dracni_is_refused(tmp_path: Path) -> None:
    code, output = validate(write(tmp_path, device_class(attach(config=plugin("dracni")))))
    assert code == 1 and "DeviceClass net.dracni.io config[0]: " in output and "rule noSelfDelegate" in output


def test_every_case_the_node_refuses_offline_is_refused(tmp_path: Path) -> None:
    """What validate can see (all but the allocation and the class's networks), it refuses."""
    for case in CASES:
        if case.node_only:
            continue
        path = tmp_path / f"{case.id}.yaml"
        path.write_text(yaml.safe_dump(case.params))
        args = [f"--claim-configs={case.mode}", *(f"--allow-type={t}" for t in case.extra_types)]
        if case.allowed_sysctls:  # the administrator's allowedSysctls, in a policy file
            policy = tmp_path / f"{case.id}.policy.yaml"
            policy.write_text(yaml.safe_dump({"allowedSysctls": list(case.allowed_sysctls)}))
            args.append(f"--policy-file={policy}")
        code, output = validate(path, *args)
        if case.refused is None:
            assert code == 0, (case.id, output)
        else:
            assert code == 1 and f"{case.refused[0]}: " in output, (case.id, output)


def test_a_bad_policy_file_stops_the_command(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("pluginTypes: [dracni]\n")
    code, output = validate(write(tmp_path, template(attach())), f"--policy-file={policy}")
    assert code == 1 and "dracni can never be a delegate of itself" in output


def test_a_bare_parameters_file_with_a_typo_in_kind_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "dracni.io/v1alpha1", "kind": "NetworkAttachmnt"}))
    code, output = validate(path)
    assert code == 1 and "parameters.kind: " in output


def test_deeply_nested_parameters_are_an_error_naming_the_limit(tmp_path: Path) -> None:
    """~900 levels once crashed ``validate`` with RecursionError: now a clear error per document,
    naming the limit, and the other documents are still checked."""
    import json

    def nested(depth: int) -> dict:
        value: dict = {"x": 1}
        for _ in range(depth - 1):
            value = {"a": value}
        return value

    good = attach(ifName="net1")
    path = tmp_path / "manifests.yaml"
    docs = [
        device_class(CLASS_NETWORK),
        template(good),
        template({**good, "runtimeConfig": nested(900)}),
        template({**good, "runtimeConfig": nested(40)}),
    ]
    path.write_text("---\n".join(json.dumps(d) + "\n" for d in docs))
    code, output = validate(path)
    assert code == 1
    assert "document 3: nested too deeply: the limit is 100 levels; document skipped" in output
    assert "parameters: nested too deeply: the limit is 32 levels" in output
    assert "2 of 3 parameter set(s) valid" in output  # the class's network and the good template
    assert "1 document(s) skipped" in output
    assert "RecursionError" not in output


def test_a_class_pool_is_checked(tmp_path: Path) -> None:
    pool = {"name": "lan", "subnets": [{"subnet": "10.10.1.0/24", "gateway": "10.20.0.1"}]}
    code, output = validate(write(tmp_path, device_class({**CLASS_NETWORK, "addressPool": pool})))
    assert code == 1 and "class parameters.addressPool.subnets[0].gateway: 10.20.0.1 is not in 10.10.1.0/24" in output
    dhcp = {**CLASS_NETWORK["config"], "plugins": [{"type": "macvlan", "ipam": {"type": "dhcp"}}]}
    good_pool = {"name": "lan", "subnets": [{"subnet": "10.10.1.0/24"}]}
    code, output = validate(write(tmp_path, device_class({**CLASS_NETWORK, "config": dhcp, "addressPool": good_pool})))
    assert code == 1 and "the network's IPAM must be host-local or static (it has: dhcp)" in output
    code, output = validate(write(tmp_path, device_class({**CLASS_NETWORK, "addressPool": good_pool})))
    assert code == 0, output


def named_class(name: str, *networks: dict) -> dict:
    """A DeviceClass ``name`` whose configs define ``networks``, in order."""
    configs = [{"opaque": {"driver": "dracni.io", "parameters": n}} for n in networks]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"config": configs},
    }


def network(name: str, ipam: dict) -> dict:
    plugins = [{"type": "macvlan", "mode": "bridge", "capabilities": {"ips": True}, "ipam": ipam}]
    return {**CLASS_NETWORK, "config": {"cniVersion": "1.0.0", "name": name, "plugins": plugins}}


def allocated_claim(class_name: str, params: dict) -> dict:
    """An allocated claim of one request of ``class_name``, as prepare reads it."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "tenant", "uid": "0b0e5c6a-5a2b-4d8e-9c1d-2f7e4a1b3c5d"},
        "spec": {
            "devices": {
                "requests": [{"name": "net", "exactly": {"deviceClassName": class_name}}],
                "config": [{"requests": ["net"], "opaque": {"driver": "dracni.io", "parameters": params}}],
            }
        },
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "net", "driver": "dracni.io", "pool": "n", "device": "d"}]}
            },
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}],
        },
    }


def prepare_refuses(device_class: dict, claim: dict) -> str | None:
    """What prepare (``claims.resolve``) says of ``claim`` allocated from ``device_class``."""
    from dracni.claims.resolve import ClaimError, resolve_claim

    for config in device_class["spec"]["config"]:
        claim["status"]["allocation"]["devices"].setdefault("config", []).append(
            {"source": "FromClass", "requests": ["net"], "opaque": config["opaque"]}
        )
    claim["status"]["allocation"]["devices"]["config"] += [
        {**c, "source": "FromClaim"} for c in claim["spec"]["devices"]["config"]
    ]
    try:
        resolve_claim(claim, driver="dracni.io")
    except ClaimError as exc:
        return str(exc)
    return None


STORAGE = network("storage", {"type": "host-local", "ranges": [[{"subnet": "10.20.0.0/24"}]]})
STATIC = network("static-lan", {"type": "static", "addresses": []})


def test_a_choice_is_checked_against_its_own_class_only(tmp_path: Path) -> None:
    """Two classes in one file: a request of class A cannot choose class B's network (prepare refuses it)."""
    a, b = named_class("a.dracni.io", CLASS_NETWORK), named_class("b.dracni.io", STORAGE)
    claim = allocated_claim("a.dracni.io", attach(network="storage"))
    tmpl = template(attach(network="storage"))
    tmpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "a.dracni.io"
    code, output = validate(write(tmp_path, a, b, tmpl, claim))
    assert code == 1, output
    wanted = (
        '"storage" is not a network of the DeviceClasses given (they have: macvlan-eth1) for DeviceClass a.dracni.io'
    )
    assert f"ResourceClaimTemplate tenant/t config[0]: parameters.network: {wanted}" in output
    assert f"ResourceClaim tenant/c config[0]: parameters.network: {wanted}" in output
    assert "2 of 4 parameter set(s) valid" in output
    refused = prepare_refuses(a, allocated_claim("a.dracni.io", attach(network="storage")))
    assert refused is not None and '"storage" is not a network of the DeviceClass' in refused
    code, output = validate(write(tmp_path, a, b, allocated_claim("b.dracni.io", attach(network="storage"))))
    assert code == 0, output


def test_a_claim_naming_no_network_is_checked_against_its_class_default(tmp_path: Path) -> None:
    """No ``network``: the class's last network applies, as in prepare; its knobs are checked against it."""
    pinned = attach(runtimeConfig={"ips": ["10.20.0.5/24"]})
    static = named_class("static.dracni.io", STATIC)
    code, output = validate(write(tmp_path, static, allocated_claim("static.dracni.io", pinned)))
    assert code == 1, output
    assert 'parameters.runtimeConfig.ips: network "static-lan" defines no address ranges' in output
    assert "(rule networkRanges: " in output
    refused = prepare_refuses(static, allocated_claim("static.dracni.io", pinned))
    assert refused is not None and "(rule networkRanges: " in refused
    two = named_class("two.dracni.io", CLASS_NETWORK, STORAGE)  # the last one is the default
    code, output = validate(write(tmp_path, two, allocated_claim("two.dracni.io", pinned)))
    assert code == 0, output
    accepted = prepare_refuses(two, allocated_claim("two.dracni.io", pinned)) or ""
    assert "runtimeConfig" not in accepted and "device n/d" in accepted  # only the node's binding is left
    outside = attach(runtimeConfig={"ips": ["10.10.1.5/24"]})  # in macvlan-eth1, not in the default
    code, output = validate(write(tmp_path, two, allocated_claim("two.dracni.io", outside)))
    assert code == 1 and "(rule networkRanges: " in output, output
    assert prepare_refuses(two, allocated_claim("two.dracni.io", outside)) is not None


def test_a_full_claim_config_cannot_replace_its_class_network(tmp_path: Path) -> None:
    own = attach(config=plugin("macvlan", master="uplink0"))
    code, output = validate(
        write(tmp_path, named_class("a.dracni.io", CLASS_NETWORK), allocated_claim("a.dracni.io", own)),
        "--claim-configs=full",
    )
    assert code == 1 and "(rule classPrecedence: " in output, output
