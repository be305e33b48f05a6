"""validate_parameters: both parameter forms, normalisation, and every error path."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest

from dracni.params import ParameterError, validate_parameters
from dracni.specfiles import load_json_spec

DRACNI = "dracni.io/v1alpha1"
CNI_DRA = "cni.networking.x-k8s.io/v1alpha1"

MACVLAN = {
    "type": "macvlan",
    "master": "eth0",
    "mode": "bridge",
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.10.1.0/24"}]]},
}
CONFLIST = {"cniVersion": "1.0.0", "name": "macvlan-eth0", "plugins": [MACVLAN]}


def attachment(**fields: object) -> dict:
    return {"apiVersion": DRACNI, "kind": "NetworkAttachment", "config": copy.deepcopy(CONFLIST), **fields}


def cni_form(**fields: object) -> dict:
    return {"apiVersion": CNI_DRA, "kind": "CNI", "ifName": "net1", "config": copy.deepcopy(CONFLIST), **fields}


def error_of(params: object, **kwargs: object) -> ParameterError:
    with pytest.raises(ParameterError) as info:
        validate_parameters(params, **kwargs)
    assert str(info.value).startswith(info.value.field + ": ")
    return info.value


def test_schema_file_is_valid_2020_12() -> None:
    schema = load_json_spec("claim-parameters.schema.json")
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


# -- accepted forms ----------------------------------------------------------------------


def test_cni_dra_driver_form() -> None:
    result = validate_parameters(cni_form())
    assert result == {
        "ifName": "net1",
        "config": CONFLIST,
        "network": None,
        "single": False,
        "runtimeConfig": {},
        "capabilities": {},
        "persistentIPs": False,
        "ipamClaim": None,
    }


def test_dracni_form_with_everything() -> None:
    params = attachment(
        ifName="net2",
        runtimeConfig={"mac": "02:00:00:00:00:01", "ips": ["10.10.1.5/24"]},
        capabilities={"mac": True, "ips": True},
    )
    result = validate_parameters(params)
    assert result["ifName"] == "net2"
    assert result["config"] == CONFLIST
    assert result["runtimeConfig"] == {"mac": "02:00:00:00:00:01", "ips": ["10.10.1.5/24"]}
    assert result["capabilities"] == {"mac": True, "ips": True}


def test_dracni_form_ifname_optional_or_null() -> None:
    assert validate_parameters(attachment())["ifName"] is None
    assert validate_parameters(attachment(ifName=None))["ifName"] is None


def test_single_plugin_becomes_conflist_named_after_type() -> None:
    result = validate_parameters(attachment(config=dict(MACVLAN, cniVersion="1.1.0")))
    assert result["config"] == {
        "cniVersion": "1.1.0",
        "name": "macvlan",
        "plugins": [dict(MACVLAN, cniVersion="1.1.0")],
    }


def test_single_plugin_name_is_kept() -> None:
    result = validate_parameters(attachment(config=dict(MACVLAN, name="lan")))
    assert result["config"]["name"] == "lan"
    assert "cniVersion" not in result["config"]


@pytest.mark.parametrize("config", [CONFLIST, MACVLAN])
def test_config_as_json_string(config: dict) -> None:
    from_string = validate_parameters(attachment(config=json.dumps(config)))
    from_object = validate_parameters(attachment(config=copy.deepcopy(config)))
    assert from_string == from_object


def test_unknown_plugin_keys_pass_through() -> None:
    plugin = dict(MACVLAN, someVendorKey={"x": 1}, **{"cni.dev/ignored": 1})
    conflist = dict(CONFLIST, plugins=[plugin], disableCheck=True)
    assert validate_parameters(attachment(config=conflist))["config"] == conflist


def test_result_shares_nothing_with_input() -> None:
    params = attachment(runtimeConfig={"ips": ["10.0.0.1/24"]})
    before = copy.deepcopy(params)
    result = validate_parameters(params)
    result["config"]["plugins"][0]["mode"] = "vepa"
    result["runtimeConfig"]["ips"].append("x")
    assert params == before


@pytest.mark.parametrize("version", ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
def test_supported_cni_versions(version: str) -> None:
    assert validate_parameters(attachment(config=dict(CONFLIST, cniVersion=version)))


def test_where_prefixes_the_field() -> None:
    err = error_of(attachment(ifName="a/b"), where="spec.devices.config[0].opaque.parameters")
    assert err.field == "spec.devices.config[0].opaque.parameters.ifName"


# -- errors ------------------------------------------------------------------------------


def test_error_is_a_value_error() -> None:
    assert issubclass(ParameterError, ValueError)


@pytest.mark.parametrize("params", [[], "x", None, 3])
def test_parameters_not_an_object(params: object) -> None:
    assert error_of(params).field == "parameters"


def test_plugin_type_with_slash() -> None:
    conflist = dict(CONFLIST, plugins=[MACVLAN, {"type": "macvlan/x"}])
    err = error_of(attachment(config=conflist))
    assert str(err) == 'parameters.config.plugins[1].type: "macvlan/x" must not contain "/"'
    assert err.field == "parameters.config.plugins[1].type"


def test_plugin_type_empty() -> None:
    err = error_of(attachment(config={"type": ""}))
    assert err.field == "parameters.config.type"
    assert "must not be empty" in str(err)


def test_plugin_type_not_a_string() -> None:
    assert (
        error_of(attachment(config=dict(CONFLIST, plugins=[{"type": 3}]))).field == "parameters.config.plugins[0].type"
    )


def test_plugin_without_type() -> None:
    err = error_of(attachment(config=dict(CONFLIST, plugins=[{"master": "eth0"}])))
    assert err.field == "parameters.config.plugins[0].type"
    assert "is required" in str(err)


def test_single_plugin_without_type_mentions_both_shapes() -> None:
    err = error_of(attachment(config={"plugin": [MACVLAN]}))
    assert err.field == "parameters.config.type"
    assert '"plugins"' in str(err)


def test_plugins_empty() -> None:
    err = error_of(attachment(config=dict(CONFLIST, plugins=[])))
    assert err.field == "parameters.config.plugins"


def test_plugins_not_a_list() -> None:
    assert error_of(attachment(config=dict(CONFLIST, plugins=MACVLAN))).field == "parameters.config.plugins"


def test_plugin_not_an_object() -> None:
    assert error_of(attachment(config=dict(CONFLIST, plugins=["macvlan"]))).field == "parameters.config.plugins[0]"


def test_conflist_without_name() -> None:
    conflist = {k: v for k, v in CONFLIST.items() if k != "name"}
    err = error_of(cni_form(config=conflist))
    assert err.field == "parameters.config.name"


@pytest.mark.parametrize("name", ["-lan", "a b", "lan/1", "lan\n", ""])
def test_conflist_bad_name(name: str) -> None:
    err = error_of(attachment(config=dict(CONFLIST, name=name)))
    assert err.field == "parameters.config.name"
    assert "network name" in str(err)


def test_single_plugin_bad_name() -> None:
    assert error_of(attachment(config=dict(MACVLAN, name="no good"))).field == "parameters.config.name"


def test_single_plugin_type_unusable_as_network_name() -> None:
    err = error_of(attachment(config={"type": "vendor+nic"}))
    assert err.field == "parameters.config.type"
    assert 'set "name"' in str(err)


@pytest.mark.parametrize("version", ["0.2.0", "1.2.0", "1", ""])
def test_bad_cni_version(version: str) -> None:
    err = error_of(attachment(config=dict(CONFLIST, cniVersion=version)))
    assert err.field == "parameters.config.cniVersion"
    assert "1.1.0" in str(err)


def test_bad_plugin_cni_version() -> None:
    err = error_of(attachment(config=dict(CONFLIST, plugins=[dict(MACVLAN, cniVersion="9.9.9")])))
    assert err.field == "parameters.config.plugins[0].cniVersion"


def test_config_invalid_json_string() -> None:
    err = error_of(attachment(config='{"name": "x",'))
    assert err.field == "parameters.config"
    assert str(err).startswith("parameters.config: not valid JSON: ")


def test_config_json_string_is_validated_after_decoding() -> None:
    conflist = dict(CONFLIST, plugins=[{"type": "a/b"}])
    assert error_of(attachment(config=json.dumps(conflist))).field == "parameters.config.plugins[0].type"


@pytest.mark.parametrize("config", ["[]", "3", '"macvlan"'])
def test_config_json_string_not_an_object(config: str) -> None:
    assert error_of(attachment(config=config)).field == "parameters.config"


@pytest.mark.parametrize("config", [3, [MACVLAN], None])
def test_config_wrong_type(config: object) -> None:
    assert error_of(attachment(config=config)).field == "parameters.config"


def test_cni_form_rejects_json_string_config() -> None:
    assert error_of(cni_form(config=json.dumps(CONFLIST))).field == "parameters.config"


def test_cni_form_rejects_single_plugin_config() -> None:
    assert error_of(cni_form(config=copy.deepcopy(MACVLAN))).field == "parameters.config.name"


def test_cni_form_requires_ifname() -> None:
    params = cni_form()
    del params["ifName"]
    err = error_of(params)
    assert str(err) == "parameters.ifName: is required"


def test_cni_form_rejects_dracni_fields() -> None:
    err = error_of(cni_form(runtimeConfig={}))
    assert err.field == "parameters.runtimeConfig"
    assert "unknown field" in str(err)


@pytest.mark.parametrize(
    ("if_name", "reason"),
    [
        ("a" * 16, "longer than 15 characters"),
        ("ééééééééé", "longer than 15 bytes"),
        ("", "must not be empty"),
        (".", "not a valid interface name"),
        ("..", "not a valid interface name"),
        ("net/1", "must not contain"),
        ("net:1", "must not contain"),
        ("net 1", "must not contain"),
        ("net1\n", "must not contain"),
        ("net\t1", "must not contain"),
        (7, "must be a string"),
    ],
)
def test_bad_ifname(if_name: object, reason: str) -> None:
    for params in (attachment(ifName=if_name), cni_form(ifName=if_name)):
        err = error_of(params)
        assert err.field == "parameters.ifName"
        assert reason in str(err)


def test_ifname_of_fifteen_characters_is_fine() -> None:
    assert validate_parameters(attachment(ifName="a" * 15))["ifName"] == "a" * 15


def test_unknown_top_level_key_is_a_typo() -> None:
    err = error_of(attachment(ifname="net1"))
    assert err.field == "parameters.ifname"
    assert 'did you mean "ifName"' in str(err)


def test_unknown_top_level_key_lists_known_fields() -> None:
    err = error_of(attachment(zzz=1))
    assert err.field == "parameters.zzz"
    assert "capabilities" in str(err)


def test_missing_api_version() -> None:
    params = attachment()
    del params["apiVersion"]
    assert str(error_of(params)) == "parameters.apiVersion: is required"


def test_unknown_api_version() -> None:
    err = error_of(attachment(apiVersion="dracni.io/v2"))
    assert err.field == "parameters.apiVersion"
    assert "dracni.io/v1alpha1" in str(err)


def test_missing_kind() -> None:
    params = attachment()
    del params["kind"]
    assert error_of(params).field == "parameters.kind"


@pytest.mark.parametrize(
    ("params", "expected"), [(attachment(kind="CNI"), "NetworkAttachment"), (cni_form(kind="NetworkAttachment"), "CNI")]
)
def test_kind_must_match_api_version(params: dict, expected: str) -> None:
    err = error_of(params)
    assert err.field == "parameters.kind"
    assert f'must be "{expected}"' in str(err)


def test_without_config_a_network_is_chosen() -> None:
    params = attachment(network="macvlan-eth1")
    del params["config"]
    result = validate_parameters(params)
    assert (result["config"], result["network"], result["single"]) == (None, "macvlan-eth1", False)
    del params["network"]
    assert validate_parameters(params)["network"] is None  # the class's last network


def test_network_and_config_are_exclusive() -> None:
    err = error_of(attachment(network="macvlan-eth1"))
    assert err.field == "parameters.network"
    assert "either network" in str(err)


def test_cni_dra_driver_form_needs_config() -> None:
    params = cni_form()
    del params["config"]
    assert error_of(params).field == "parameters.config"


def test_runtime_config_not_an_object() -> None:
    assert error_of(attachment(runtimeConfig=["mac"])).field == "parameters.runtimeConfig"


def test_capabilities_not_an_object() -> None:
    assert error_of(attachment(capabilities=["mac"])).field == "parameters.capabilities"


def test_capability_not_a_boolean() -> None:
    err = error_of(attachment(capabilities={"mac": "yes"}))
    assert err.field == "parameters.capabilities.mac"


def test_odd_keys_are_quoted_in_the_field() -> None:
    err = error_of(attachment(capabilities={"io.k8s/x": 1}))
    assert err.field == 'parameters.capabilities["io.k8s/x"]'


def test_deepest_error_wins() -> None:
    # a typo at the top and a bad type deep inside: the specific one is reported first
    conflist = dict(CONFLIST, plugins=[{"type": "x/y"}])
    assert error_of(attachment(config=conflist, ifname="x")).field == "parameters.config.plugins[0].type"


# -- the parameters validated lately (params._validated, a recent.RecentResults) ---------------


def test_a_repeated_validation_gives_an_equal_result_that_shares_nothing() -> None:
    params = attachment(ifName="net7")
    first = validate_parameters(params)
    first["config"]["plugins"][0]["master"] = "changed by a caller"
    first["runtimeConfig"]["mac"] = "02:00:00:00:00:01"
    second = validate_parameters(copy.deepcopy(params))
    assert second["config"]["plugins"][0]["master"] == "eth0"
    assert second["runtimeConfig"] == {}
    assert second == validate_parameters(params)
    assert params["config"]["plugins"][0]["master"] == "eth0"  # the input is never modified


def test_refused_parameters_are_refused_again_naming_the_field_of_each_call() -> None:
    bad = attachment(ifName="x" * 16)
    assert error_of(bad).field == "parameters.ifName"
    assert error_of(copy.deepcopy(bad), where="config[2].parameters").field == "config[2].parameters.ifName"


def test_parameters_differing_in_a_value_are_told_apart() -> None:
    """The key is the exact JSON text: 1 and true, 1 and 1.0, NaN and null are not the same."""
    from dracni.recent import exact_json_key

    assert len({exact_json_key({"a": v}) for v in (1, True, 1.0, float("nan"), None, "1")}) == 6
    assert exact_json_key({"a": "\ud800"}) is None  # a lone surrogate is validated (and refused) each time


def test_the_kept_results_are_bounded() -> None:
    from dracni.params import VALIDATED_CACHE_SIZE, _validated

    for i in range(VALIDATED_CACHE_SIZE + 40):
        validate_parameters(attachment(ifName=f"n{i}"))
    assert len(_validated) == VALIDATED_CACHE_SIZE
