"""Records are written by orjson where it is loaded (the service) and by ``jsonio`` where it is
not (the CNI plugin): both give the same file, ``json.dumps(indent=2, sort_keys=True,
ensure_ascii=False)``, and refuse the same records."""

from __future__ import annotations

import json
import math

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from dracni import jsonio
from dracni.state.files import encode_record

# What a record holds: JSON's types (no NaN or Infinity: the readers refuse both, and the API
# server never serves them); integers also beyond 64 bits, which orjson leaves to jsonio.
SCALARS = st.none() | st.booleans() | st.integers() | st.text() | st.floats(allow_nan=False, allow_infinity=False)
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner) | st.tuples(inner, inner) | st.dictionaries(st.text(), inner), max_leaves=40
)


def has_float(value: object) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(has_float(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(has_float(v) for v in value)
    return False


def outcome(call: object) -> tuple:
    try:
        return ("ok", call())  # type: ignore[operator]
    except Exception as exc:  # the kind of refusal is what is compared
        return ("error", isinstance(exc, (TypeError, ValueError)))


@settings(max_examples=1500, deadline=None)
@given(VALUES)
def test_orjson_writes_what_jsonio_writes(value: object) -> None:
    assert "orjson" in __import__("sys").modules  # this test's process has it: the service's path
    ours = outcome(lambda: encode_record(value))
    theirs = outcome(lambda: json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).encode())
    assert ours[0] == theirs[0], (value, ours, theirs)
    if ours[0] == "ok" and not has_float(value):
        assert ours == theirs, value
    elif ours[0] == "ok":  # a float's exponent may be written another way: the same number
        assert json.loads(ours[1]) == json.loads(theirs[1])
    else:
        assert ours == theirs


def test_what_orjson_does_not_take_on_goes_to_jsonio() -> None:
    for record in ({"n": 2**70}, {1: "x"}, {"deep": [[[[[]]]]] * 2}, {"s": "\ud800"}):
        expected = outcome(lambda: jsonio.dumps(record, pretty=True))  # noqa: B023
        assert outcome(lambda: encode_record(record)) == expected, record  # noqa: B023


def test_a_dataclass_or_a_subclass_is_refused_as_json_refuses_it() -> None:
    from dataclasses import dataclass
    from enum import StrEnum

    @dataclass
    class Thing:
        x: int

    class Color(StrEnum):
        RED = "red"

    with_thing = outcome(lambda: encode_record({"thing": Thing(1)}))
    assert with_thing == ("error", True)
    # json writes a str subclass as its text; orjson leaves it to jsonio, which does the same
    assert encode_record({"c": Color.RED}) == json.dumps({"c": Color.RED}, indent=2, sort_keys=True).encode()
    assert not math.isnan(orjson.loads(encode_record({"f": 1.5}))["f"])
