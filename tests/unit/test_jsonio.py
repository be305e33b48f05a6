"""dracni.jsonio gives what the standard library's json gives, without importing it.

The CNI hot path serializes and parses through ``_json`` directly (``json`` imports ``re`` and
costs ~6 ms of every exec); these tests hold the fast path to ``json``'s output byte for byte,
and its errors to ``json``'s word for word, including in a fresh interpreter where ``json``
was never imported (CPython 3.11's C scanner needs ``json.decoder`` loaded to word an error).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from hypothesis import given, settings
from hypothesis import strategies as st

from dracni import jsonio
from tests.harness import REPO

SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner) | st.tuples(inner, inner) | st.dictionaries(st.text(), inner), max_leaves=40
)
#: jsonio.dumps's modes and the json.dumps arguments each stands for.
MODES = (
    ({"pretty": True}, {"indent": 2, "sort_keys": True, "ensure_ascii": False}),
    ({}, {"separators": (",", ":"), "ensure_ascii": False}),
    ({"ascii_only": True}, {"separators": (",", ":"), "ensure_ascii": True}),
)
MALFORMED = [
    "",
    "   ",
    '{"a": 1',
    "nul",
    '{"a":1} x',
    "[1,]",
    '"\\x"',
    '{"a" 1}',
    "\ufeff{}",
    "NaN",
    "[1, -Infinity]",
    '{"a": Infinity}',
    "[" * 10 + "]" * 9,
    "\x00",
]
WELL_FORMED = [' \t\n{"a": [1, 2.5, "x", null, true]}\r\n', "-0", "1e400", '"\\ud800"', "[]", '{"": {}}']


def outcome(call: object) -> tuple:
    try:
        return ("ok", call())  # type: ignore[operator]
    except Exception as exc:  # the exception is the outcome compared
        return ("error", type(exc).__name__, str(exc))


def json_loads(text: str) -> object:
    return json.loads(text, parse_constant=jsonio._reject_constant)


@settings(max_examples=1500, deadline=None)
@given(VALUES)
def test_dumps_is_json_dumps_byte_for_byte(value: object) -> None:
    for ours, theirs in MODES:
        expected = outcome(lambda: json.dumps(value, **theirs).encode())  # noqa: B023
        assert outcome(lambda: jsonio.dumps(value, **ours)) == expected, (ours, value)  # noqa: B023


def test_dumps_hands_what_it_does_not_take_on_to_json() -> None:
    """Non-string keys, subclasses of the JSON types, deep nesting, cycles, unknown types."""
    cyclic: list = []
    cyclic.append(cyclic)

    class Text(str):
        pass

    deep: list = []
    for _ in range(300):
        deep = [deep]
    for value in ({1: "a", "b": 2}, {Text("k"): Text("v")}, deep, cyclic, {"a": {1, 2}}, {"a": {3: None}}):
        for ours, theirs in MODES:
            assert outcome(lambda: jsonio.dumps(value, **ours)) == outcome(  # noqa: B023
                lambda: json.dumps(value, **theirs).encode()  # noqa: B023
            )


@settings(max_examples=1500, deadline=None)
@given(st.text() | st.binary() | VALUES.map(json.dumps))
def test_loads_is_json_loads(data: str | bytes) -> None:
    expected = outcome(lambda: json_loads(data.decode("utf-8") if isinstance(data, bytes) else data))
    assert repr(outcome(lambda: jsonio.loads(data))) == repr(expected)


def test_loads_words_errors_as_json_in_an_interpreter_that_never_imported_json() -> None:
    driver = textwrap.dedent("""\
        import sys
        from dracni import jsonio
        cases = __import__("ast").literal_eval(sys.stdin.read())
        out = []
        for text in cases:
            try:
                out.append(("ok", repr(jsonio.loads(text))))
            except ValueError as exc:
                out.append(("error", type(exc).__name__, str(exc)))
        print(repr(out))
    """)
    cases = MALFORMED + WELL_FORMED
    proc = subprocess.run(
        [sys.executable, "-c", driver],
        input=repr(cases),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    got = __import__("ast").literal_eval(proc.stdout)
    expected = []
    for text in cases:
        try:
            expected.append(("ok", repr(json_loads(text))))
        except ValueError as exc:
            expected.append(("error", type(exc).__name__, str(exc)))
    assert got == expected


def test_round_trip_of_a_record_imports_neither_json_nor_re() -> None:
    driver = textwrap.dedent("""\
        import sys
        before = set(sys.modules)
        from dracni import jsonio
        record = {"kind": "Attachment", "devices": [{"ifName": "net1", "ips": ["10.0.0.2/24"], "x": 1.5}], "ok": True}
        assert jsonio.loads(jsonio.dumps(record, pretty=True)) == record
        assert jsonio.loads_object(jsonio.dumps(record, ascii_only=True), "r") == record
        print(" ".join(sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("json", "re", "enum"))))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", driver],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == []
