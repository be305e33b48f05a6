"""resolve_claim: ResourceClaim object -> PreparedClaim record."""

from __future__ import annotations

import copy
import re
from typing import Any

import jsonschema
import pytest

from dracni.claims.manifests import ManifestClaimSource
from dracni.claims.resolve import ClaimError, config_applies, resolve_claim
from dracni.policy.binding import DeviceFacts
from dracni.policy.config import DEFAULT_PLUGIN_TYPES, TenantPolicy
from dracni.specfiles import load_json_spec, spec_path

DRIVER = "dracni.io"
POD = {"apiGroup": "", "resource": "pods", "name": "demo", "uid": "pod-uid-1"}


def params(plugin_type: str = "macvlan", if_name: str | None = None, **extra: Any) -> dict:
    out: dict[str, Any] = {
        "apiVersion": "dracni.io/v1alpha1",
        "kind": "NetworkAttachment",
        "config": {"type": plugin_type},
    }
    if if_name is not None:
        out["ifName"] = if_name
    return {**out, **extra}


def config(
    parameters: Any, *, requests: list[str] | None = None, source: str = "FromClaim", driver: str = DRIVER
) -> dict:
    entry: dict[str, Any] = {"source": source, "opaque": {"driver": driver, "parameters": parameters}}
    if requests is not None:
        entry["requests"] = requests
    return entry


def result(request: str = "net", device: str = "eth0", pool: str = "node1", driver: str = DRIVER, **extra: Any) -> dict:
    return {"request": request, "driver": driver, "pool": pool, "device": device, **extra}


def claim(
    results: list[dict] | None = None,
    configs: list[dict] | None = None,
    *,
    reserved: list[dict] | None = None,
    api: str = "resource.k8s.io/v1",
) -> dict:
    return {
        "apiVersion": api,
        "kind": "ResourceClaim",
        "metadata": {"name": "c1", "namespace": "ns1", "uid": "claim-uid-1"},
        "spec": {"devices": {"requests": [{"name": "net", "exactly": {"deviceClassName": DRIVER}}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": results if results is not None else [result()],
                    "config": configs if configs is not None else [config(params())],
                }
            },
            "reservedFor": reserved if reserved is not None else [POD],
        },
    }


#: These tests are about the API's shapes and precedence, not the tenant policy
#: (tests/unit/policy/test_policy.py): claim configs are allowed, with the made-up types they use.
OPEN = TenantPolicy(
    claim_configs="full",
    plugin_types=DEFAULT_PLUGIN_TYPES
    | {"bridge", "from-claim", "from-class", "first", "second", "c1", "c2", "class", "other", "ours", "all", "only-b"}
    | {"a", "b", "parent", "sub", "x", "fast", "base", "from-spec", "from-status"},
)


def nic_named_like_the_device(pool: str, device: str) -> DeviceFacts:
    return DeviceFacts(device, None, None)


def resolve(obj: dict, **kwargs: Any) -> dict:
    kwargs.setdefault("policy", OPEN)
    kwargs.setdefault("devices", nic_named_like_the_device)
    return resolve_claim(obj, driver=DRIVER, **kwargs)


def error_of(obj: dict, **kwargs: Any) -> ClaimError:
    with pytest.raises(ClaimError) as info:
        resolve(obj, **kwargs)
    return info.value


def device_types(record: dict) -> list[str]:
    return [d["config"]["plugins"][0]["type"] for d in record["devices"]]


# -- the record ----------------------------------------------------------------------------


def test_record_shape_matches_state_schema() -> None:
    record = resolve(claim(), source="/m/c1.yaml")
    schema = load_json_spec("state-records.schema.json")
    jsonschema.Draft202012Validator(schema).validate({**record, "schema": 1})
    assert record["kind"] == "PreparedClaim"
    assert (record["uid"], record["namespace"], record["name"], record["driver"]) == (
        "claim-uid-1",
        "ns1",
        "c1",
        DRIVER,
    )
    assert record["source"] == "/m/c1.yaml"
    assert record["pods"] == [{"uid": "pod-uid-1", "name": "demo"}]
    assert record["devices"] == [
        {
            "request": "net",
            "pool": "node1",
            "device": "eth0",
            "shareID": None,
            "ifName": None,
            "config": {"name": "macvlan", "plugins": [{"type": "macvlan", "master": "eth0"}]},
            "runtimeConfig": {},
            "capabilities": {},
            "persistentIPs": False,
            "ipamClaim": None,
        }
    ]


def test_prepared_at_is_rfc3339_utc() -> None:
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", resolve(claim())["preparedAt"])
    assert resolve(claim(), prepared_at="2025-01-02T03:04:05Z")["preparedAt"] == "2025-01-02T03:04:05Z"


def test_source_defaults_to_none() -> None:
    assert resolve(claim())["source"] is None


def test_missing_namespace_is_default() -> None:
    obj = claim()
    del obj["metadata"]["namespace"]
    assert resolve(obj)["namespace"] == "default"


def test_share_id_is_copied() -> None:
    record = resolve(claim([result(shareID="7f3e")]))
    assert record["devices"][0]["shareID"] == "7f3e"


@pytest.mark.parametrize("api", ["resource.k8s.io/v1", "resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2"])
def test_api_versions(api: str) -> None:
    assert resolve(claim(api=api))["devices"][0]["device"] == "eth0"


def test_only_pods_are_taken_from_reserved_for() -> None:
    reserved = [
        {"resource": "pods", "name": "a", "uid": "u-a"},
        {"apiGroup": "example.com", "resource": "pods", "name": "x", "uid": "u-x"},
        {"apiGroup": "apps", "resource": "deployments", "name": "d", "uid": "u-d"},
        {"resource": "pods", "name": "b", "uid": "u-b"},
    ]
    assert resolve(claim(reserved=reserved))["pods"] == [{"uid": "u-a", "name": "a"}, {"uid": "u-b", "name": "b"}]


def test_other_drivers_results_are_skipped() -> None:
    results = [result("gpu", driver="gpu.example.com"), result("net")]
    record = resolve(claim(results))
    assert [d["request"] for d in record["devices"]] == ["net"]


def test_node_does_not_filter_pools() -> None:
    record = resolve(claim([result(pool="some-other-pool")]), node="node1")
    assert record["devices"][0]["pool"] == "some-other-pool"


def test_several_devices_with_distinct_ifnames() -> None:
    results = [result("a", device="eth0"), result("b", device="eth1")]
    configs = [config(params(if_name="net1"), requests=["a"]), config(params("ipvlan", if_name="net2"), requests=["b"])]
    record = resolve(claim(results, configs))
    assert [(d["request"], d["ifName"]) for d in record["devices"]] == [("a", "net1"), ("b", "net2")]
    assert device_types(record) == ["macvlan", "ipvlan"]


def test_one_config_for_several_devices_without_ifname() -> None:
    results = [result("net", device="eth0"), result("net", device="eth1")]
    record = resolve(claim(results, [config(params())]))
    assert [d["ifName"] for d in record["devices"]] == [None, None]
    first, second = record["devices"]
    assert first["config"] is not second["config"]
    # one network, each device bound to its own NIC
    assert [d["config"]["plugins"][0].pop("master") for d in (first, second)] == ["eth0", "eth1"]
    assert first["config"] == second["config"]


def test_cni_dra_driver_form() -> None:
    cni = {
        "apiVersion": "cni.networking.x-k8s.io/v1alpha1",
        "kind": "CNI",
        "ifName": "net1",
        "config": {"cniVersion": "1.0.0", "name": "br", "plugins": [{"type": "bridge"}]},
    }
    record = resolve(claim(configs=[config(cni)]))
    assert record["devices"][0]["ifName"] == "net1"
    assert record["devices"][0]["config"]["name"] == "br"


def test_input_claim_is_not_modified() -> None:
    obj = claim()
    before = copy.deepcopy(obj)
    resolve(obj)["devices"][0]["config"]["plugins"][0]["mode"] = "x"
    assert obj == before


# -- config precedence ---------------------------------------------------------------------


def test_claim_config_chooses_within_the_class_network() -> None:
    # listed claim-first: the class defines the network, the claim's per-attachment fields apply
    claim_part = {"apiVersion": "dracni.io/v1alpha1", "kind": "NetworkAttachment", "ifName": "net7"}
    configs = [config(claim_part, source="FromClaim"), config(params("from-class"), source="FromClass")]
    device = resolve(claim(configs=configs))["devices"][0]
    assert (device_types({"devices": [device]}), device["ifName"]) == (["from-class"], "net7")


def test_later_claim_config_wins() -> None:
    configs = [config(params("first")), config(params("second"))]
    assert device_types(resolve(claim(configs=configs))) == ["second"]


def test_later_class_config_wins_among_class_configs() -> None:
    configs = [config(params("c1"), source="FromClass"), config(params("c2"), source="FromClass")]
    assert device_types(resolve(claim(configs=configs))) == ["c2"]


def test_class_config_used_when_no_claim_config_applies() -> None:
    configs = [config(params("class"), source="FromClass"), config(params("other"), requests=["other"])]
    assert device_types(resolve(claim(configs=configs))) == ["class"]


def test_winning_parameters_are_used_as_a_whole() -> None:
    configs = [config(params(if_name="net7", capabilities={"mac": True})), config(params("ipvlan"))]
    device = resolve(claim(configs=configs))["devices"][0]
    assert (device["ifName"], device["capabilities"]) == (None, {})


def test_other_drivers_configs_are_skipped() -> None:
    configs = [config(params("ours")), config({"anything": "goes"}, driver="gpu.example.com")]
    assert device_types(resolve(claim(configs=configs))) == ["ours"]


def test_config_without_opaque_is_skipped() -> None:
    configs = [config(params("ours")), {"source": "FromClaim", "requests": ["net"]}]
    assert device_types(resolve(claim(configs=configs))) == ["ours"]


def test_requests_filter() -> None:
    results = [result("a", device="eth0"), result("b", device="eth1")]
    configs = [config(params("all")), config(params("only-b"), requests=["b"])]
    assert device_types(resolve(claim(results, configs))) == ["all", "only-b"]


def test_parent_request_matches_subrequest() -> None:
    configs = [config(params("parent"), requests=["net"])]
    assert device_types(resolve(claim([result("net/fast")], configs))) == ["parent"]


def test_subrequest_config_matches_only_that_subrequest() -> None:
    results = [result("net/fast", device="eth0"), result("net/slow", device="eth1")]
    configs = [config(params("parent"), requests=["net"]), config(params("fast"), requests=["net/fast"])]
    assert device_types(resolve(claim(results, configs))) == ["fast", "parent"]


def test_subrequest_config_does_not_match_parent() -> None:
    configs = [config(params("base")), config(params("sub"), requests=["net/fast"])]
    assert device_types(resolve(claim([result("net")], configs))) == ["base"]


def test_prefix_is_not_a_parent() -> None:
    configs = [config(params("base")), config(params("prefix"), requests=["ne"])]
    assert device_types(resolve(claim([result("net/x")], configs))) == ["base"]


@pytest.mark.parametrize(
    ("requests", "result_request", "applies"),
    [
        (None, "a", True),
        ([], "a/b", True),
        (["a"], "a", True),
        (["a"], "a/b", True),
        (["a/b"], "a/b", True),
        (["a/b"], "a", False),
        (["a/b"], "a/c", False),
        (["b"], "a", False),
    ],
)
def test_config_applies(requests: list[str] | None, result_request: str, applies: bool) -> None:
    assert config_applies(requests, result_request) is applies


def test_spec_config_fallback_without_allocation_config() -> None:
    obj = claim()
    del obj["status"]["allocation"]["devices"]["config"]
    obj["spec"]["devices"]["config"] = [
        {"requests": ["net"], "opaque": {"driver": DRIVER, "parameters": params("from-spec")}},
        {"opaque": {"driver": "other.example.com", "parameters": {}}},
    ]
    assert device_types(resolve(obj)) == ["from-spec"]


def test_allocation_config_preferred_over_spec_config() -> None:
    obj = claim(configs=[config(params("from-status"))])
    obj["spec"]["devices"]["config"] = [{"opaque": {"driver": DRIVER, "parameters": params("from-spec")}}]
    assert device_types(resolve(obj)) == ["from-status"]


# -- errors --------------------------------------------------------------------------------


def test_not_allocated() -> None:
    obj = claim()
    del obj["status"]["allocation"]
    err = error_of(obj)
    assert str(err).startswith("claim ns1/c1: not allocated")
    assert "status.allocation" in str(err)


def test_no_status_at_all() -> None:
    obj = claim()
    del obj["status"]
    assert "not allocated" in str(error_of(obj))


def test_no_results_for_driver() -> None:
    err = error_of(claim([result(driver="gpu.example.com")]))
    assert str(err).startswith("claim ns1/c1: no device of driver dracni.io")
    assert "gpu.example.com" in str(err)


def test_no_results_at_all() -> None:
    assert "no device of driver dracni.io" in str(error_of(claim([])))


def test_result_without_device() -> None:
    bad = result()
    del bad["device"]
    assert "has no device" in str(error_of(claim([bad])))


@pytest.mark.parametrize("reserved", [[], [{"apiGroup": "apps", "resource": "deployments", "name": "d", "uid": "u"}]])
def test_not_reserved_for_a_pod(reserved: list[dict]) -> None:
    err = error_of(claim(reserved=reserved))
    assert str(err).startswith("claim ns1/c1: not reserved for any pod")
    assert "status.reservedFor" in str(err)


def test_no_config_for_a_request() -> None:
    results = [result("a"), result("b", device="eth1")]
    err = error_of(claim(results, [config(params(), requests=["a"])]))
    assert str(err) == (
        "claim ns1/c1: request b: no opaque config for driver dracni.io; "
        "add spec.devices.config with opaque.driver: dracni.io"
    )


def test_no_config_when_only_other_drivers_have_one() -> None:
    err = error_of(claim(configs=[config(params(), driver="gpu.example.com")]))
    assert "request net: no opaque config for driver dracni.io" in str(err)


def test_invalid_parameters_are_wrapped() -> None:
    bad = {
        "apiVersion": "dracni.io/v1alpha1",
        "kind": "NetworkAttachment",
        "config": {"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "macvlan"}, {"type": "macvlan/x"}]},
    }
    err = error_of(claim(configs=[config(bad)]))
    assert str(err) == 'claim ns1/c1: request net: parameters.config.plugins[1].type: "macvlan/x" must not contain "/"'
    assert err.field == "parameters.config.plugins[1].type"


def test_config_without_parameters() -> None:
    entry = {"source": "FromClaim", "opaque": {"driver": DRIVER}}
    err = error_of(claim(configs=[entry]))
    assert err.field == "parameters"
    assert str(err).startswith("claim ns1/c1: request net: parameters: must be a JSON object")


def test_only_the_winning_config_is_validated() -> None:
    configs = [config({"broken": True}), config(params())]
    assert resolve(claim(configs=configs))


def test_disallowed_type() -> None:
    err = error_of(claim(), policy=TenantPolicy(claim_configs="full", plugin_types=frozenset({"bridge"})))
    assert err.field == "parameters.config.type"
    assert str(err).startswith('claim ns1/c1: request net: parameters.config.type: "macvlan" is not allowed')


def test_ifname_clash_names_both_requests() -> None:
    results = [result("a", device="eth0"), result("b", device="eth1")]
    configs = [config(params(if_name="net1"), requests=["a"]), config(params(if_name="net1"), requests=["b"])]
    err = error_of(claim(results, configs))
    message = str(err)
    assert message.startswith("claim ns1/c1: request a (device node1/eth0) and request b (device node1/eth1)")
    assert 'ifName "net1"' in message


def test_ifname_clash_within_one_request() -> None:
    results = [result("net", device="eth0"), result("net", device="eth1")]
    err = error_of(claim(results, [config(params(if_name="net1"))]))
    assert "request net (device node1/eth0) and request net (device node1/eth1)" in str(err)


def test_missing_uid() -> None:
    obj = claim()
    del obj["metadata"]["uid"]
    assert str(error_of(obj)) == "claim ns1/c1: metadata.uid is missing"


@pytest.mark.parametrize("obj", [{}, {"metadata": {}}, {"metadata": "x"}])
def test_not_a_claim(obj: dict) -> None:
    assert "metadata.name" in str(error_of(obj))


def test_claim_error_is_a_value_error() -> None:
    assert issubclass(ClaimError, ValueError)


# -- the example manifests -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("example", "plugin"), [("macvlan-claim.yaml", "macvlan"), ("cni-dra-driver-claim.yaml", "bridge")]
)
def test_examples_resolve(example: str, plugin: str) -> None:
    path = spec_path("examples", example)
    (obj,) = ManifestClaimSource(path).list()
    record = resolve(obj, source=path)
    assert record["pods"] == [{"uid": "11111111-2222-3333-4444-555555555555", "name": "demo"}]
    (device,) = record["devices"]
    assert (device["pool"], device["device"], device["ifName"]) == ("node1", "eth0", "net1")
    conflist = device["config"]
    assert conflist["cniVersion"] == "1.0.0"
    assert conflist["plugins"][0]["type"] == plugin
    assert conflist["plugins"][0]["ipam"] == {"type": "host-local", "ranges": [[{"subnet": "10.10.1.0/24"}]]}
    if plugin == "macvlan":
        assert conflist["plugins"][0]["mode"] == "bridge"


def test_examples_spec_and_status_configs_agree() -> None:
    for example in ("macvlan-claim.yaml", "cni-dra-driver-claim.yaml"):
        (obj,) = ManifestClaimSource(spec_path("examples", example)).list()
        spec_config = obj["spec"]["devices"]["config"]
        status_config = [
            {k: v for k, v in c.items() if k != "source"} for c in obj["status"]["allocation"]["devices"]["config"]
        ]
        assert spec_config == status_config
