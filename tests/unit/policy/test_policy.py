"""The tenant policy on the node: trust (class vs claim configs), profiles, allowlists, key rules
and the device binding, through resolve_claim (what prepare runs).  The shared case table is
tests/policy_cases.py; the admission policy's CEL is held to the same table elsewhere."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dracni.claims.resolve import ClaimError, resolve_claim
from dracni.policy.binding import DeviceFacts
from dracni.policy.config import DEFAULT_PLUGIN_TYPES, SAFE_SYSCTLS, PolicyError, TenantPolicy, load_policy
from dracni.policy.rules import RULES
from tests.policy_cases import CASES, CLASS_NETWORK, HOST_LOCAL, PolicyCase, attach, plugin

DRIVER = "dracni.io"
NODE_NICS = {
    "eth1": DeviceFacts("eth1", "0000:03:00.0", "02:00:00:00:00:e1"),
    "uplink0": DeviceFacts("uplink0", "0000:01:00.0", "02:00:00:00:00:01"),
}


def node_devices(pool: str, device: str) -> DeviceFacts | None:
    """The inventory port: this node's NICs by device name."""
    return NODE_NICS.get(device)


def claim(*configs: dict, device: str = "eth1", share_id: str | None = None) -> dict:
    result: dict[str, Any] = {"request": "net", "driver": DRIVER, "pool": "node1", "device": device}
    if share_id:
        result["shareID"] = share_id
    return {
        "metadata": {"name": "c1", "namespace": "tenant", "uid": "claim-uid-1"},
        "status": {
            "allocation": {"devices": {"results": [result], "config": list(configs)}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-1"}],
        },
    }


def from_class(params: dict) -> dict:
    return {
        "source": "FromClass",
        "requests": ["net"],
        "opaque": {"driver": DRIVER, "parameters": copy.deepcopy(params)},
    }


def from_claim(params: dict) -> dict:
    return {
        "source": "FromClaim",
        "requests": ["net"],
        "opaque": {"driver": DRIVER, "parameters": copy.deepcopy(params)},
    }


def resolve(obj: dict, policy: TenantPolicy | None = None, **kw: Any) -> dict:
    return resolve_claim(obj, driver=DRIVER, policy=policy, devices=node_devices, ipam_dir="/state/ipam", **kw)


def case_claim(case: PolicyCase) -> dict:
    configs = [from_class(CLASS_NETWORK)] if case.mode == "profiles" else []
    return claim(*configs, from_claim(case.params))


def case_policy(case: PolicyCase) -> TenantPolicy:
    return TenantPolicy(
        claim_configs=case.mode,
        plugin_types=DEFAULT_PLUGIN_TYPES | set(case.extra_types),
        sysctls=SAFE_SYSCTLS | set(case.allowed_sysctls),
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_policy_case(case: PolicyCase) -> None:
    if case.refused is None:
        record = resolve(case_claim(case), case_policy(case))
        assert record["devices"][0]["config"]["plugins"]
        return
    with pytest.raises(ClaimError) as info:
        resolve(case_claim(case), case_policy(case))
    field, rule = case.refused
    message = str(info.value)
    assert info.value.field == field, message
    assert f"request net: {field}: " in message
    if rule != "schema":
        assert f"(rule {rule}: {RULES[rule]})" in message


# -- trust: the administrator's configs ------------------------------------------------------


def test_class_config_is_trusted_and_unchanged() -> None:
    """An administrator's network in today's format works as it is, under every mode."""
    network = {
        "apiVersion": "dracni.io/v1alpha1",
        "kind": "NetworkAttachment",
        "ifName": "net1",
        "config": plugin("bridge", bridge="br-data", ipam={**HOST_LOCAL, "dataDir": "/var/lib/cni/data"}),
    }
    for mode in ("profiles", "full"):
        spec = resolve(claim(from_class(network)), TenantPolicy(claim_configs=mode))["devices"][0]
        assert spec["config"]["plugins"][0] == network["config"] | {"type": "bridge"}
        assert spec["config"]["plugins"][0]["ipam"]["dataDir"] == "/var/lib/cni/data"
        assert spec["ifName"] == "net1"


def test_class_config_gets_master_from_the_allocated_device() -> None:
    """A DeviceClass cannot know which NIC the scheduler picks: master is filled in."""
    spec = resolve(claim(from_class(CLASS_NETWORK)))["devices"][0]
    assert spec["config"]["plugins"][0]["master"] == "eth1"


def test_class_config_naming_a_master_keeps_it() -> None:
    network = copy.deepcopy(CLASS_NETWORK)
    network["config"]["plugins"][0]["master"] = "bond0"
    assert resolve(claim(from_class(network)))["devices"][0]["config"]["plugins"][0]["master"] == "bond0"


def test_class_config_may_not_run_dracni_either() -> None:
    network = copy.deepcopy(CLASS_NETWORK)
    network["config"]["plugins"][0]["ipam"] = {"type": "dracni"}
    with pytest.raises(
        ClaimError, match=r"the DeviceClass.s config: parameters.config.plugins\[0\].ipam.type: .*rule noSelfDelegate"
    ):
        resolve(claim(from_class(network)))


def test_claim_config_cannot_replace_the_class_network_even_under_full() -> None:
    own = attach(config=plugin("macvlan", ipam=HOST_LOCAL))
    with pytest.raises(ClaimError) as info:
        resolve(claim(from_class(CLASS_NETWORK), from_claim(own)), TenantPolicy(claim_configs="full"))
    assert info.value.field == "parameters.config"
    assert "rule classPrecedence" in str(info.value)


def test_profile_overrides_only_per_attachment_fields() -> None:
    knobs = attach(
        network="macvlan-eth1",
        ifName="data0",
        runtimeConfig={"mac": "02:00:00:00:00:aa", "ips": ["10.10.1.9/24"]},
        persistentIPs=True,
    )
    spec = resolve(claim(from_class(CLASS_NETWORK), from_claim(knobs)))["devices"][0]
    assert spec["ifName"] == "data0"
    assert spec["runtimeConfig"] == {"mac": "02:00:00:00:00:aa", "ips": ["10.10.1.9/24"]}
    assert spec["persistentIPs"] is True
    assert spec["config"]["name"] == "macvlan-eth1"
    assert spec["config"]["plugins"][0]["master"] == "eth1"


def test_profile_picks_among_several_class_networks() -> None:
    other = copy.deepcopy(CLASS_NETWORK)
    other["config"]["name"] = "ipvlan-eth1"
    other["config"]["plugins"][0]["type"] = "ipvlan"
    both = [from_class(CLASS_NETWORK), from_class(other)]
    assert resolve(claim(*both))["devices"][0]["config"]["name"] == "ipvlan-eth1"  # the last one by default
    chosen = resolve(claim(*both, from_claim(attach(network="macvlan-eth1"))))["devices"][0]
    assert chosen["config"]["name"] == "macvlan-eth1"
    with pytest.raises(ClaimError, match='"storage" is not a network of the DeviceClass .*ipvlan-eth1, macvlan-eth1'):
        resolve(claim(*both, from_claim(attach(network="storage"))))


def test_profile_without_class_network_says_so() -> None:
    with pytest.raises(ClaimError, match="the DeviceClass defines no network for this request"):
        resolve(claim(from_claim(attach(ifName="net1"))))


def test_profile_ips_need_the_capability() -> None:
    network = copy.deepcopy(CLASS_NETWORK)
    del network["config"]["plugins"][0]["capabilities"]
    with pytest.raises(ClaimError, match="takes no ips from claims"):
        resolve(claim(from_class(network), from_claim(attach(runtimeConfig={"ips": ["10.10.1.5/24"]}))))


# -- full claim configs ----------------------------------------------------------------------


FULL = TenantPolicy(claim_configs="full")


def test_full_config_gets_master_and_a_managed_ipam_dir() -> None:
    spec = resolve(claim(from_claim(attach(config=plugin("macvlan", ipam=HOST_LOCAL)))), FULL)["devices"][0]
    assert spec["config"]["plugins"][0]["master"] == "eth1"
    assert spec["config"]["plugins"][0]["ipam"]["dataDir"] == "/state/ipam"


def test_host_device_is_bound_to_the_allocated_nic() -> None:
    spec = resolve(claim(from_claim(attach(config=plugin("host-device")))), FULL)["devices"][0]
    assert spec["config"]["plugins"][0]["device"] == "eth1"
    ok = attach(config=plugin("host-device", pciBusID="0000:03:00.0"))
    assert resolve(claim(from_claim(ok)), FULL)["devices"][0]["config"]["plugins"][0]["pciBusID"] == "0000:03:00.0"
    for key, value in (("pciBusID", "0000:01:00.0"), ("hwaddr", "02:00:00:00:00:01")):
        with pytest.raises(ClaimError) as info:
            resolve(claim(from_claim(attach(config=plugin("host-device", **{key: value})))), FULL)
        assert info.value.field == f"parameters.config.{key}"
        assert "rule deviceBinding" in str(info.value) and "node1/eth1" in str(info.value)


def test_host_device_refused_on_a_shared_device_from_any_source() -> None:
    network = attach(config=plugin("host-device"))
    for configs in ([from_class(network)], [from_claim(network)]):
        with pytest.raises(ClaimError, match="rule exclusiveDevice"):
            resolve(claim(*configs, share_id="7b5a1f5e-0000-4000-8000-000000000001"), FULL)


def test_unknown_device_cannot_be_bound() -> None:
    with pytest.raises(ClaimError, match="cannot tell which network interface the allocated device node1/eth9 is"):
        resolve(claim(from_class(CLASS_NETWORK), device="eth9"))


def test_runtime_device_id_must_be_the_allocated_one() -> None:
    bad = attach(config=plugin("host-device"), runtimeConfig={"deviceID": "0000:01:00.0"})
    with pytest.raises(ClaimError, match="rule deviceBinding"):
        resolve(claim(from_claim(bad)), FULL)
    good = attach(config=plugin("host-device"), runtimeConfig={"deviceID": "0000:03:00.0"})
    assert resolve(claim(from_claim(good)), FULL)


# -- the administrator's policy ----------------------------------------------------------------


def test_policy_defaults_are_safe() -> None:
    policy = load_policy()
    assert policy.claim_configs == "profiles"
    assert "portmap" not in policy.plugin_types and "bridge" not in policy.plugin_types
    assert not policy.port_mappings


def test_policy_from_configmap_directory_and_flags(tmp_path) -> None:
    (tmp_path / "claimConfigs").write_text("full\n")
    (tmp_path / "pluginTypes").write_text("macvlan, ipvlan\n")
    policy = load_policy(str(tmp_path), allow_types=["portmap"])
    assert policy.claim_configs == "full"
    assert policy.plugin_types == {"macvlan", "ipvlan", "portmap"}
    assert policy.port_mappings
    assert load_policy(str(tmp_path), claim_configs="profiles").claim_configs == "profiles"


def test_policy_from_yaml_file(tmp_path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("claimConfigs: full\nipamTypes: [host-local, whereabouts]\n")
    assert load_policy(str(path)).ipam_types == {"host-local", "whereabouts"}
    path.write_text("claimConfig: full\n")
    with pytest.raises(PolicyError, match="unknown setting claimConfig"):
        load_policy(str(path))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"allow_types": ["dracni"]}, "dracni can never be a delegate of itself"),
        ({"allow_ipam_types": ["macvlan"]}, "macvlan are main plugins, never IPAM plugins"),
        ({"claim_configs": "all"}, "'all' is not one of profiles, full"),
    ],
)
def test_policy_refuses_what_is_never_safe(settings: dict, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        load_policy(**settings)


def test_an_empty_configmap_directory_means_the_defaults(tmp_path) -> None:
    """The DaemonSet mounts the ConfigMap optionally: without it kubelet leaves the dir empty."""
    assert load_policy(str(tmp_path)) == TenantPolicy()
