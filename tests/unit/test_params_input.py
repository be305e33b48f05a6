"""Names and input a tenant cannot hurt anyone with (issue 22): interface names limited to what
Linux tools show and create as they are (rule ifNameCharacters), and every string of the
parameters encodable as UTF-8 text, refused where it enters with the field named."""

from __future__ import annotations

import json

import pytest

from dracni.params import IF_NAME_CHARACTERS, ParameterError, validate_parameters
from dracni.policy.rules import RULES

DRACNI = "dracni.io/v1alpha1"
CONFLIST = {"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": "macvlan", "mode": "bridge"}]}


def attachment(**fields: object) -> dict:
    return {"apiVersion": DRACNI, "kind": "NetworkAttachment", "config": CONFLIST, **fields}


def cni_form(**fields: object) -> dict:
    return {
        "apiVersion": "cni.networking.x-k8s.io/v1alpha1",
        "kind": "CNI",
        "ifName": "net1",
        "config": CONFLIST,
        **fields,
    }


def error_of(params: object) -> ParameterError:
    with pytest.raises(ParameterError) as info:
        validate_parameters(params)
    message = str(info.value)
    assert message.startswith(info.value.field + ": ")
    message.encode("ascii")  # printable as it is: no raw escapes, no lone surrogates
    assert message.isprintable(), message
    return info.value


def test_the_rule_text_is_the_policys() -> None:
    assert RULES["ifNameCharacters"] == IF_NAME_CHARACTERS


@pytest.mark.parametrize(
    ("if_name", "shown"),
    [
        ("net\x1b[7m", '"\\u001b"'),
        ("net\x7f", '"\\u007f"'),
        ("net%d", '"%"'),
        ('net"1', '"\\""'),
        ("net'1", '"\'"'),
        ("net`1", '"`"'),
        ("net\\1", '"\\\\"'),
        ("netë", '"\\u00eb"'),
    ],
)
def test_an_ifname_linux_tools_mishandle_is_refused_naming_the_rule(if_name: str, shown: str) -> None:
    for params in (attachment(ifName=if_name), cni_form(ifName=if_name)):
        err = error_of(params)
        assert err.field == "parameters.ifName"
        assert err.reason.endswith(
            f"holds a character Linux tools mishandle, {shown} (rule ifNameCharacters: {RULES['ifNameCharacters']})"
        )


@pytest.mark.parametrize("if_name", ["net1", "eth0.100", "net-1_a@b+c", "A~Z=!#$&()*,;<>?[]^{|}"[:15]])
def test_printable_ascii_names_pass(if_name: str) -> None:
    assert validate_parameters(attachment(ifName=if_name))["ifName"] == if_name


@pytest.mark.parametrize(
    ("params", "field", "reason"),
    [
        (attachment(ifName="\ud800"), "parameters.ifName", '"\\ud800" holds a lone surrogate'),
        (cni_form(ifName="n\udfff"), "parameters.ifName", "holds a lone surrogate"),
        (attachment(runtimeConfig={"mac": "02:00:00:00:00:\ud800"}), "parameters.runtimeConfig.mac", "lone surrogate"),
        (
            attachment(runtimeConfig={"ips": ["10.0.0.1/24", "\udc80"]}),
            "parameters.runtimeConfig.ips[1]",
            "lone surrogate",
        ),
        (attachment(runtimeConfig={"m\ud800": 1}), "parameters.runtimeConfig", 'the key "m\\ud800" holds a lone'),
        (attachment(ifName="net\x00"), "parameters.ifName", '"net\\u0000" holds a NUL character'),
        (attachment(ipamClaim="a\x00"), "parameters.ipamClaim", "NUL"),
        (
            attachment(config={**CONFLIST, "plugins": [{"type": "macvlan", "x": {"y": ["\ud800"]}}]}),
            "parameters.config.plugins[0].x.y[0]",
            "lone surrogate",
        ),
        (attachment(**{"k\x00": 1}), "parameters", "the key"),
        (attachment(config=json.dumps({**CONFLIST, "name": "\ud800"})), "parameters.config.name", "lone surrogate"),
        (attachment(config='{"type": "macvlan", "x\\u0000": 1}'), "parameters.config", "NUL"),
    ],
)
def test_text_that_is_not_unicode_is_refused_where_it_enters(params: dict, field: str, reason: str) -> None:
    err = error_of(params)
    assert err.field == field
    assert reason in err.reason


def test_the_encoding_check_comes_before_the_schema() -> None:
    """A lone surrogate in an unknown field is named as such, not as the unknown field (whose
    message would carry it)."""
    assert error_of(attachment(**{"x": "\ud800"})).field == "parameters.x"
