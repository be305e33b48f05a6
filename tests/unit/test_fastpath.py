"""The native fast path (native/fastpath.c) against the Python path it stands in for.

``dist/dracni/dracni`` is the native program the runtime execs; ``dracni-python`` beside it is
the PyInstaller executable.  The differential fuzz runs a seeded corpus of >= 1,000 CNI calls
through both and asserts byte-identical stdout and identical exit codes.  Every case is
labelled by its generator with the route it must take: a valid pass-through (a pod with nothing
for dracni) must be answered by the native program itself, everything else (malformed input,
anything unusual, anything to do) must be handed over -- ``DRACNI_FASTPATH_TRACE`` names a
file where the native program writes which route it took.

The corpus is a function of its seed alone (issue 20): the generator writes every path under
``BASE``, a stand-in it never encodes at random, and ``placed`` puts the test's temp dir in its
place only when the case runs -- neither the temp dir's name and length nor the hash seed nor
anything else of the machine changes a random choice (tests/unit/test_fastpath_corpus.py).

Safety: every state dir and log file lies in the test's temp dir (DRACNI_STATE_DIR or the
config's stateDir point there, relative state dirs resolve against a temp cwd), CNI_PATH names
an empty temp dir, and no case has a prepared claim a delegate could run for.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DRACNI_BINARY, REPO

NATIVE = Path(DRACNI_BINARY).resolve()
PYTHON = NATIVE.parent / "dracni-python"
SUPPORTED = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
SEED = 20261125
VALID_CASES = 520
MALFORMED_ROUNDS = 9  # every malformed kind, this many times (with its own random base case)
#: The test's temp dir as the generator writes it: ``placed`` replaces it by the real one.  Never
#: encoded at random (see ``enc_str``), and no generator writes a "%", so it is found again in
#: stdin, wherever it is, unless a mutation cut or split it (bad JSON either way).
BASE = "/%BASE%"

pytestmark = pytest.mark.skipif(not PYTHON.exists(), reason=f"no {PYTHON}: run make binary")


# -- random JSON text, the way other writers than Python's json may write it ----------------------
ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
TEXT = ALNUM + ' _.-/:+=@"\\\t\n\x01\x1f\x7f' + "éüß中文ж" + "\u2028\ufeff\U0001f600\U00010000\U0010ffff"


def rand_text(rng: random.Random, n: int = 8) -> str:
    return "".join(rng.choice(TEXT) for _ in range(rng.randint(0, n)))


def rand_ident(rng: random.Random) -> str:
    return rng.choice(ALNUM) + "".join(rng.choice(ALNUM + "_.-") for _ in range(rng.randint(0, 12)))


def rand_uid(rng: random.Random) -> str:
    """A pod UID, namespace or name: DNS-label characters (never "..")."""
    return rng.choice(ALNUM) + "".join(rng.choice(ALNUM + "-") for _ in range(rng.randint(0, 12)))


def rand_value(rng: random.Random, depth: int = 0) -> Any:
    """Any JSON value the fast path understands: no floats, no -0, no duplicate keys."""
    kind = rng.choice(["str", "int", "bigint", "bool", "null", "list", "obj"] if depth < 6 else ["str", "int"])
    if kind == "str":
        return rand_text(rng)
    if kind == "int":
        return rng.randint(-(10**6), 10**6)
    if kind == "bigint":
        return rng.choice([-1, 1]) * rng.randint(10**18, 10 ** rng.randint(19, 400))
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "list":
        return [rand_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rand_text(rng, 6): rand_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def ws(rng: random.Random) -> str:
    return "".join(rng.choice(" \t\n\r") for _ in range(rng.choice([0, 0, 0, 1, 3])))


def enc_str(rng: random.Random, s: str) -> str:
    """A JSON string, each character written raw or escaped at random (never a surrogate escape);
    ``BASE`` as it is, without a random draw: the draws never depend on the real temp dir."""
    return '"' + BASE.join(_enc_chars(rng, part) for part in s.split(BASE)) + '"'


def _enc_chars(rng: random.Random, s: str) -> str:
    out = []
    for c in s:
        short = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
        if c in short:
            out.append(short[c] if rng.random() < 0.8 else f"\\u{ord(c):04X}")
        elif ord(c) < 0x20:
            out.append(f"\\u{ord(c):04x}")
        elif c == "/" and rng.random() < 0.5:
            out.append("\\/")
        elif ord(c) < 0x10000 and rng.random() < 0.3:
            out.append(f"\\u{ord(c):04x}" if rng.random() < 0.5 else f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return "".join(out)


def enc(rng: random.Random, v: Any) -> str:
    if isinstance(v, dict):
        if not v:
            return "{" + ws(rng) + "}"
        items = [ws(rng) + enc_str(rng, k) + ws(rng) + ":" + ws(rng) + enc(rng, x) + ws(rng) for k, x in v.items()]
        return "{" + ",".join(items) + "}"
    if isinstance(v, list):
        if not v:
            return "[" + ws(rng) + "]"
        return "[" + ",".join(ws(rng) + enc(rng, x) + ws(rng) for x in v) + "]"
    if isinstance(v, str):
        return enc_str(rng, v)
    return json.dumps(v)


# -- cases ------------------------------------------------------------------------------------------
@dataclass
class Case:
    kind: str
    expect: str  # "fast" or "python"
    root: Path  # the case's private dir (under BASE until placed): state, CNI_PATH, cwd, log file, trace
    env: dict[str, str]
    stdin: bytes
    argv: list[str] = field(default_factory=list)
    files: dict[str, bytes | None] = field(default_factory=dict)  # state-relative path -> bytes (None: a dir)


def prev_result(rng: random.Random, version: str) -> dict[str, Any]:
    old = version < "1.0.0"
    prev: dict[str, Any] = {}
    if rng.random() < 0.8:
        prev["cniVersion"] = rng.choice(SUPPORTED)
    shapes: list[tuple[str, Callable[[], Any]]] = [
        ("interfaces", lambda: [{"name": f"eth{i}", "sandbox": "/x"} for i in range(rng.randint(0, 3))]),
        (
            "ips",
            lambda: [
                {"address": f"10.0.0.{i}/24", **({"version": "4"} if old else {}), "interface": i}
                for i in range(rng.randint(0, 3))
            ],
        ),
        ("routes", lambda: [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}] * rng.randint(0, 2)),
        ("dns", lambda: {"nameservers": ["10.96.0.10"]} if rng.random() < 0.5 else {}),
    ]
    for key, make in shapes:
        r = rng.random()
        if r < 0.6:
            prev[key] = make()
        elif r < 0.7 and key != "dns":
            prev[key] = None
    for _ in range(rng.randint(0, 3)):
        prev.setdefault(rand_text(rng, 5), rand_value(rng, 2))
    return prev


def valid(rng: random.Random, root: Path, command: str | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """A valid pass-through call of a pod with nothing for dracni: (config, env)."""
    command = command or rng.choice(["ADD", "DEL", "CHECK"])
    versions = SUPPORTED[2:] if command == "CHECK" else SUPPORTED
    version = rng.choice(versions)
    conf: dict[str, Any] = {"cniVersion": version, "name": rand_ident(rng), "type": "dracni"}
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": rand_ident(rng),
        "CNI_NETNS": "/var/run/netns/" + rand_ident(rng),
        "CNI_IFNAME": "".join(rng.choice(ALNUM + "_.-+@#") for _ in range(rng.randint(1, 15))),
        "CNI_PATH": str(root / "bin") + rng.choice(["", ":/nonexistent", ":"]),
    }
    if env["CNI_IFNAME"] in (".", ".."):
        env["CNI_IFNAME"] = "eth0"
    if command == "DEL" and rng.random() < 0.3:
        env["CNI_NETNS"] = ""
    pairs = [f"K8S_POD_UID={rand_uid(rng)}", f"K8S_POD_NAMESPACE={rand_uid(rng)}", f"K8S_POD_NAME={rand_uid(rng)}"]
    pairs = [p for p in pairs if rng.random() < 0.8] + ["IgnoreUnknown=1", "K8S_POD_INFRA_CONTAINER_ID=x", "", "A=b=c"]
    rng.shuffle(pairs)
    if rng.random() < 0.9:
        env["CNI_ARGS"] = ";".join(pairs)
    state = root / "state"
    if rng.random() < 0.5:
        conf["stateDir"] = str(state) + rng.choice(["", "/", "//"])
    else:
        env["DRACNI_STATE_DIR"] = str(state)
    if rng.random() < 0.3:
        conf["logFile"] = str(root / "log")
    if rng.random() < 0.3:
        conf["logLevel"] = rng.choice(["info", "warning", "error"])
    if rng.random() < 0.3:
        conf["delegateTimeout"] = rng.choice([1, 60, 3600, rng.randint(1, 3600)])
    for key in ("runtimeConfig", "args"):
        if rng.random() < 0.3:
            conf[key] = {rand_text(rng, 4): rand_value(rng, 3) for _ in range(rng.randint(0, 3))}
    if rng.random() < 0.75:
        conf["prevResult"] = prev_result(rng, version) if rng.random() < 0.9 else None
    for _ in range(rng.randint(0, 3)):
        conf.setdefault(rand_text(rng, 6), rand_value(rng, 1))
    items = list(conf.items())
    rng.shuffle(items)
    return dict(items), env


def other_records(rng: random.Random) -> dict[str, bytes | None]:
    """Records of other pods and containers: never the ones a case looks up."""
    files: dict[str, bytes | None] = {}
    for _ in range(rng.randint(0, 2)):
        files[f"pods/uid_other-{rng.randint(0, 99)}.json"] = b'{"kind":"PodIndex","claims":[]}'
        files[f"attachments/net+other{rng.randint(0, 99)}+eth0.json"] = b"{}"
    return files


def make_valid(rng: random.Random, root: Path) -> Case:
    conf, env = valid(rng, root)
    return Case("valid", "fast", root, env, (ws(rng) + enc(rng, conf) + ws(rng)).encode(), files=other_records(rng))


def _mutate_text(rng: random.Random, text: str) -> str:
    """Bad JSON: a cut, a stray character, a trailing comma, a foreign literal or number."""
    choice = rng.randrange(8)
    if choice == 0:
        return text[: rng.randrange(1, max(2, len(text) - 1))]
    if choice == 1:
        i = rng.randrange(len(text))
        return text[:i] + rng.choice("{}[],:'\"\\x") + text[i:]
    if choice == 2:
        return text[:-1] + ',"k":1,}'
    if choice == 3:
        return text[:-1] + ',"k":' + rng.choice(["NaN", "Infinity", "-Infinity", "nul", "tru", "'x'"]) + "}"
    if choice == 4:
        return (
            text[:-1] + ',"k":' + rng.choice(["1.5", "1e5", "1E-2", "-0", "01", "-", "0x1", "1.", ".5", "-0.0"]) + "}"
        )
    if choice == 5:
        return text[:-1] + ',"k":"' + rng.choice(["\x01", "\\x", "\\u12", "\\uZZZZ", "\n", "\\"]) + '"}'
    if choice == 6:
        return text + rng.choice(["x", "{}", "1", "\x0b", "\x0c"])
    return rng.choice(["", " ", "\n\t", "[]", '"x"', "1", "null", "\ufeff" + text])


def repeated(rng: random.Random, obj: dict[str, Any], key: str) -> str:
    """``obj`` as JSON text with ``key`` written once more at its end (twice when ``obj`` lacks
    it), the repeat spelled with some \\u escapes at random: the same key once decoded."""
    value = obj[key] if key in obj else rng.randint(0, 9)
    spelled = "".join(f"\\u{ord(c):04x}" if rng.random() < 0.3 else c for c in key)
    members = [f'"{spelled}":' + json.dumps(value)]
    if key not in obj:  # the first time with another value: Python keeps the last one
        members.insert(0, f'"{key}":' + json.dumps(value + 1))
    return enc(rng, obj)[:-1] + ("," if obj else "") + ",".join(members) + "}"


def build_malformed(rng: random.Random, root: Path, kind: str) -> Case:
    """One case of a kind the fast path must hand over (its base: a valid pass-through)."""
    command = "CHECK" if kind.startswith("check") else None
    conf, env = valid(rng, root, command)
    argv: list[str] = []
    files = other_records(rng)
    text: str | None = None
    raw: bytes | None = None
    state = env.get("DRACNI_STATE_DIR") or conf["stateDir"]
    args = env.get("CNI_ARGS", "")
    cni_args = dict(p.partition("=")[::2] for p in args.split(";") if p)
    if kind == "bad json":
        while True:
            text = _mutate_text(rng, enc(rng, conf))
            try:
                json.loads(text)
            except ValueError:
                break
    elif kind == "bad utf-8":
        bad = rng.choice([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\xf4\x90\x80\x80", b"\x80", b"\xf8"])
        raw = enc(rng, conf)[:-1].encode() + b',"k":"a' + bad + b'"}'
    elif kind == "surrogate escape":
        text = enc(rng, conf)[:-1] + ',"k":"' + rng.choice(["\\ud83d\\ude00", "\\ud800", "\\udfff", "x\\uDBFFy"]) + '"}'
    elif kind == "duplicate key":
        # A key of the config, or of its prevResult, written twice: Python's json keeps the last
        # value, the native parser refuses a repeated key in any object ("json").  Always a real
        # repeat: a prevResult the base case lacks is added first (a "prevResult" written once is
        # no duplicate: it is judged as a prevResult, and handed over for "prevResult").
        dup = rng.choice(["name", "cniVersion", "k", "prevResult", "prevResult.cniVersion", "prevResult.ips"])
        if dup.startswith("prevResult") and not isinstance(conf.get("prevResult"), dict):
            conf["prevResult"] = prev_result(rng, conf["cniVersion"])
        if dup.startswith("prevResult."):
            prev = conf.pop("prevResult")
            text = enc(rng, conf)[:-1] + ',"prevResult":' + repeated(rng, prev, dup.partition(".")[2]) + "}"
        else:
            text = repeated(rng, conf, dup)
    elif kind == "deep nesting":
        depth = rng.choice([64, 65, 100, 999, 1001, 5000])  # below the top-level object
        text = enc(rng, conf)[:-1] + ',"deep":' + "[" * depth + "]" * depth + "}"
    elif kind == "float or -0":
        conf.pop("prevResult", None)
        number = rng.choice(["1.0", "-0", "1e3", "2.5E-3", "-0.0", "1.7976931348623157e309", "0E0"])
        text = enc(rng, conf)[:-1] + ',"prevResult":{"x":' + number + "}}"
    elif kind == "big int over the limit":
        text = enc(rng, conf)[:-1] + ',"k":' + "9" * rng.choice([4001, 4300, 4301, 5000]) + "}"
    elif kind == "missing env":
        drop = rng.choice(["CNI_COMMAND", "CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH", "CNI_NETNS"])
        if drop == "CNI_NETNS" and env["CNI_COMMAND"] == "DEL":
            env["CNI_COMMAND"] = "ADD"
        env[drop] = ""
        if rng.random() < 0.5:
            del env[drop]
    elif kind == "bad ifname":
        env["CNI_IFNAME"] = rng.choice(
            ["a" * 16, ".", "..", "a/b", "a:b", "a b", "a\tb", "eth0\x1c", "eth\u00a0", "ét", "\x01", "eth0\u3000"]
        )
    elif kind == "bad CNI_ARGS":
        env["CNI_ARGS"] = rng.choice(
            [
                "foo",
                "=x",
                "K8S_POD_UID=a/b",
                "K8S_POD_UID=" + "u" * 300,
                "K8S_POD_UID=ü",
                "K8S_POD_NAMESPACE=a/..;K8S_POD_NAME=b",
                "K8S_POD_NAMESPACE=x;K8S_POD_NAME=..",
                "IgnoreUnknown=1;junk",
            ]
        )
    elif kind == "bad container id":
        env["CNI_CONTAINERID"] = rng.choice(["-abc", "a b", "ä", "a/b", "_x", ".x"])
    elif kind == "wrong type of own key":
        key, value = rng.choice(
            [
                ("stateDir", 5),
                ("stateDir", "relative"),
                ("stateDir", ""),
                ("stateDir", "/a\u0000b"),
                ("logFile", "log"),
                ("logFile", None),
                ("logLevel", "debug"),
                ("logLevel", "trace"),
                ("logLevel", 3),
                ("delegateTimeout", "5"),
                ("delegateTimeout", True),
                ("delegateTimeout", 0),
                ("delegateTimeout", 3601),
                ("delegateTimeout", -1),
                ("delegateTimeout", 99999),
                ("runtimeConfig", []),
                ("runtimeConfig", None),
                ("args", "x"),
                ("name", "bad name"),
                ("name", 5),
                ("name", "-x"),
            ]
        )
        conf[key] = value
    elif kind == "bad version":
        conf["cniVersion"] = rng.choice(["1.0", "0.2.0", "2.0.0", 1, None, "", "1.0.0 ", "v1.0.0"])
        if rng.random() < 0.2:
            del conf["cniVersion"]
    elif kind == "bad prevResult":
        conf["prevResult"] = rng.choice(
            [
                [],
                "x",
                1,
                {"cniVersion": "9.9.9"},
                {"cniVersion": None},
                {"cniVersion": 1},
                {"interfaces": {}},
                {"ips": [1]},
                {"routes": "x"},
                {"dns": None},
                {"dns": []},
                {"ips": 0},
            ]
        )
    elif kind == "pod with prepared claims":
        # A pod index of the pod (by UID, or by name when there is no UID), naming claims that
        # are not there: Python finds nothing to do, but only Python may decide that.
        env["CNI_COMMAND"] = rng.choice(["ADD", "DEL", "CHECK"]) if conf["cniVersion"] >= "0.4.0" else "ADD"
        uid, ns, name = cni_args.get("K8S_POD_UID"), cni_args.get("K8S_POD_NAMESPACE"), cni_args.get("K8S_POD_NAME")
        if not uid and not (ns and name):
            uid = "pod-" + rand_ident(rng)
            env["CNI_ARGS"] = args + f";K8S_POD_UID={uid}"
        if env["CNI_COMMAND"] != "DEL":
            env["CNI_NETNS"] = "/var/run/netns/x"
        stem = f"uid_{uid}" if uid else f"name_{ns}_{name}"
        files[f"pods/{stem}.json"] = rng.choice(
            [b'{"kind":"PodIndex","claims":["c-1"]}', b'{"kind":"PodIndex","claims":[]}', b"not json", None]
        )
    elif kind == "existing attachment record":
        env["CNI_COMMAND"] = rng.choice(["DEL", "CHECK"]) if conf["cniVersion"] >= "0.4.0" else "DEL"
        if env["CNI_COMMAND"] == "CHECK" and not env["CNI_NETNS"]:
            env["CNI_NETNS"] = "/var/run/netns/x"
        key = f"{conf['name']}+{env['CNI_CONTAINERID']}+{env['CNI_IFNAME']}"
        files[f"attachments/{key}.json"] = rng.choice([b"{}", b"not json", b'{"kind":"Attachment"}', None])
    elif kind == "unknown command":
        env["CNI_COMMAND"] = rng.choice(["FOO", "add", "VERSION", "GC", "STATUS", "ADD ", "VERSION"])
    elif kind == "check before 0.4.0":
        env["CNI_COMMAND"] = "CHECK"
        conf["cniVersion"] = rng.choice(["0.3.0", "0.3.1"])
        if isinstance(conf.get("prevResult"), dict):
            conf["prevResult"]["cniVersion"] = conf["cniVersion"]
    elif kind == "delegate mark":
        env["DRACNI_DELEGATE_OF"] = rng.choice(["1", "x", ""])
    elif kind == "log level env":
        env["DRACNI_LOG_LEVEL"] = rng.choice(["debug", "info", "error", ""])
        conf["logFile"] = str(root / "log")
    elif kind == "unusual state dir":
        odd = rng.choice([f"{state}/./", f"{state}/../state", "state", "./state", f"{state}/é"])
        if "stateDir" in conf and rng.random() < 0.5:
            conf["stateDir"] = odd
        else:
            conf.pop("stateDir", None)
            env["DRACNI_STATE_DIR"] = odd
    elif kind == "argv":
        argv = [rng.choice(["--version", "--help", "bogus"])]
    else:  # pragma: no cover - a kind without a generator is a bug of this test
        raise AssertionError(kind)
    if raw is None:
        raw = (text if text is not None else enc(rng, conf)).encode("utf-8", "surrogatepass")
    return Case(kind, "python", root, env, raw, argv, files)


MALFORMED_KINDS = [
    "bad json",
    "bad utf-8",
    "surrogate escape",
    "duplicate key",
    "deep nesting",
    "float or -0",
    "big int over the limit",
    "missing env",
    "bad ifname",
    "bad CNI_ARGS",
    "bad container id",
    "wrong type of own key",
    "bad version",
    "bad prevResult",
    "pod with prepared claims",
    "existing attachment record",
    "unknown command",
    "check before 0.4.0",
    "delegate mark",
    "log level env",
    "unusual state dir",
    "argv",
]
#: Why the fast path hands each kind over (its trace line "python <reason>", native/fastpath.c).
REASONS = {
    **dict.fromkeys(
        ["bad json", "bad utf-8", "surrogate escape", "duplicate key", "deep nesting", "float or -0"], {"json"}
    ),
    "big int over the limit": {"json"},
    "missing env": {"command", "CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH", "CNI_NETNS"},
    "bad ifname": {"CNI_IFNAME"},
    "bad CNI_ARGS": {"CNI_ARGS", "K8S_POD_UID", "K8S_POD_NAME"},
    "bad container id": {"CNI_CONTAINERID"},
    "wrong type of own key": {"stateDir", "logFile", "logLevel", "delegateTimeout", "runtimeConfig", "args", "name"},
    "bad version": {"cniVersion"},
    "bad prevResult": {"prevResult", "prevResult.cniVersion", "prevResult shape", "prevResult.dns"},
    "pod with prepared claims": {"pod index"},
    "existing attachment record": {"attachment record"},
    "unknown command": {"command"},
    "check before 0.4.0": {"CHECK version"},
    "delegate mark": {"delegate mark"},
    "log level env": {"log level"},
    "unusual state dir": {"state dir", "stateDir"},
    "argv": {"argv"},
}
WEIGHTS = {"bad json": 4, "wrong type of own key": 3, "bad prevResult": 2, "pod with prepared claims": 2}


def corpus() -> list[Case]:
    """The seeded corpus, a function of SEED alone; case i lives in ``BASE/case-<i>``."""
    rng = random.Random(SEED)
    cases: list[Case] = []

    def root() -> Path:
        return Path(BASE) / f"case-{len(cases):06d}"

    for _ in range(VALID_CASES):
        cases.append(make_valid(rng, root()))
    for _ in range(MALFORMED_ROUNDS):
        for kind in MALFORMED_KINDS:
            for _ in range(WEIGHTS.get(kind, 1) * 2):
                cases.append(build_malformed(rng, root(), kind))
    return cases


def placed(case: Case, base: Path) -> Case:
    """The case as it runs: ``BASE`` replaced by ``base`` (the test's temp dir) in its root, its
    environment and its stdin.  ``base`` goes into the JSON text as it is, so it must be a plain
    path (printable ASCII, nothing JSON escapes, no "." or ".." component)."""
    real = str(base)
    assert real.startswith("/") and all(" " <= c <= "~" and c not in '"\\' for c in real), real
    assert not {".", ".."} & set(real.split("/")), real
    return dataclasses.replace(
        case,
        root=Path(str(case.root).replace(BASE, real)),
        env={k: v.replace(BASE, real) for k, v in case.env.items()},
        stdin=case.stdin.replace(BASE.encode(), real.encode()),
    )


# -- running ------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    stdout: bytes
    returncode: int
    route: str


def run_case(case: Case, executable: Path) -> Outcome:
    """One call with a fresh copy of the case's state (a DEL may move a record aside)."""
    root = case.root
    shutil.rmtree(root, ignore_errors=True)
    for sub in ("state/pods", "state/attachments", "bin", "cwd"):
        (root / sub).mkdir(parents=True)
    for rel, data in case.files.items():
        path = root / "state" / rel
        if data is None:
            path.mkdir()
        else:
            path.write_bytes(data)
    trace = root / "trace"
    env = {"PATH": "/usr/bin:/bin", **case.env, "DRACNI_FASTPATH_TRACE": str(trace)}
    env_bytes = {k.encode(): v.encode("utf-8", "surrogatepass") for k, v in env.items()}
    proc = subprocess.run(
        [str(NATIVE), *case.argv],  # argv[0] as the runtime or the operator gives it, for both
        executable=executable,
        env=env_bytes,  # type: ignore[arg-type]
        input=case.stdin,
        capture_output=True,
        cwd=root / "cwd",
        timeout=60,
    )
    route = trace.read_text().strip() if trace.exists() else ""
    return Outcome(proc.stdout, proc.returncode, route)


def test_native_and_python_paths_agree_on_a_generated_corpus(tmp_path: Path) -> None:
    cases = [placed(case, tmp_path) for case in corpus()]
    assert len(cases) >= 1000
    answered: Counter[str] = Counter()
    handed: Counter[str] = Counter()

    def one(i: int) -> list[str]:
        case = cases[i]
        native = run_case(case, NATIVE)
        python = run_case(case, PYTHON)
        problems = []
        if (native.stdout, native.returncode) != (python.stdout, python.returncode):
            problems.append(
                f"case {i} ({case.kind}): native {native.returncode} {native.stdout!r} != "
                f"python {python.returncode} {python.stdout!r}\nenv={case.env} argv={case.argv} stdin={case.stdin!r}"
            )
        route = "fast" if native.route == "fast" else "python"
        if route == "python" and native.route.removeprefix("python ") not in REASONS.get(case.kind, ()):
            problems.append(f"case {i} ({case.kind}): handed over for {native.route!r}\nenv={case.env}")
        if route != case.expect:
            problems.append(
                f"case {i} ({case.kind}): expected the {case.expect} path, took {native.route!r}\n"
                f"env={case.env} stdin={case.stdin!r}"
            )
        (answered if route == "fast" else handed)[case.kind] += 1
        shutil.rmtree(case.root, ignore_errors=True)
        return problems

    with ThreadPoolExecutor(max_workers=2) as pool:
        problems = [p for ps in pool.map(one, range(len(cases))) for p in ps]
    print(f"\nfast path: {sum(answered.values())} answered, {sum(handed.values())} handed over")
    for kind in sorted(set(answered) | set(handed)):
        print(f"  {kind}: {answered[kind]} answered, {handed[kind]} handed over")
    assert not problems, f"{len(problems)} problems, the first ones:\n" + "\n".join(problems[:5])
    assert answered["valid"] == VALID_CASES


# -- the handover ---------------------------------------------------------------------------------------
def cni_env(root: Path, command: str = "ADD") -> dict[str, str]:
    (root / "state").mkdir(exist_ok=True)
    return {
        "PATH": "/usr/bin:/bin",
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": "c1",
        "CNI_NETNS": "/var/run/netns/x",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": str(root),
        "CNI_ARGS": "K8S_POD_UID=u1",
        "DRACNI_STATE_DIR": str(root / "state"),
        "DRACNI_FASTPATH_TRACE": str(root / "trace"),
    }


def route(root: Path) -> str:
    return (root / "trace").read_text()


@pytest.mark.parametrize("pipe", [False, True], ids=["memfd", "pipe"])
def test_stdin_over_64k_reaches_python_whole(tmp_path: Path, pipe: bool) -> None:
    """A config above a pipe's capacity, handed over (a float in it): Python answers the same
    prevResult as when it reads the config itself; the pipe fallback (no memfd) as well."""
    big = "x" * 200_000
    conf = {"cniVersion": "1.0.0", "name": "net", "prevResult": {"cniVersion": "1.0.0", "big": big, "f": 1.5}}
    env = cni_env(tmp_path)
    if pipe:
        env["DRACNI_FASTPATH_PIPE"] = "1"
    proc = subprocess.run([str(NATIVE)], env=env, input=json.dumps(conf).encode(), capture_output=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert json.loads(proc.stdout) == conf["prevResult"]
    assert route(tmp_path) == "python json\n"


def test_stdin_over_64k_answered_natively(tmp_path: Path) -> None:
    conf = {"cniVersion": "1.1.0", "name": "net", "prevResult": {"cniVersion": "1.1.0", "big": ["é" * 100] * 1000}}
    stdin = json.dumps(conf, ensure_ascii=False).encode()
    assert len(stdin) > 65536
    proc = subprocess.run([str(NATIVE)], env=cni_env(tmp_path), input=stdin, capture_output=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout == json.dumps(conf["prevResult"], separators=(",", ":")).encode() + b"\n"
    assert route(tmp_path) == "fast\n"


def test_argv_use_is_the_cli(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "DRACNI_FASTPATH_TRACE": str(tmp_path / "trace")}
    native = subprocess.run([str(NATIVE), "--version"], env=env, capture_output=True, timeout=60)
    python = subprocess.run([str(PYTHON), "--version"], env=env, capture_output=True, timeout=60)
    assert (native.returncode, native.stdout) == (python.returncode, python.stdout)
    assert python.stdout.startswith(b"dracni, version ")
    # argv[0] is kept: the CLI names itself as the operator called it, not "dracni-python"
    helps = [subprocess.run([str(b), "--help"], env=env, capture_output=True, timeout=60) for b in (NATIVE, PYTHON)]
    assert helps[0].returncode == 0
    assert helps[0].stdout.startswith(b"Usage: dracni [OPTIONS]")
    assert helps[0].stdout == helps[1].stdout.replace(b"dracni-python", b"dracni")
    assert route(tmp_path) == "python argv\npython argv\n"


@pytest.mark.parametrize(
    ("stdin", "code"),
    [(b"{}", 1), (b"not json", 1), (b'{"cniVersion":"1.0.0","name":"n"}', 0)],
    ids=["invalid config", "not json", "passthrough"],
)
def test_exit_codes_propagate(tmp_path: Path, stdin: bytes, code: int) -> None:
    env = cni_env(tmp_path)
    env["DRACNI_LOG_LEVEL"] = "error"  # always handed over
    proc = subprocess.run([str(NATIVE)], env=env, input=stdin, capture_output=True, timeout=60)
    assert proc.returncode == code
    assert route(tmp_path) == "python log level\n"
    if code:
        assert json.loads(proc.stdout)["code"] in (4, 6, 7)


def test_the_native_program_is_static() -> None:
    """No ELF program interpreter (PT_INTERP): it runs whatever the node's libc."""
    data = NATIVE.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2  # 64-bit
    phoff, phentsize, phnum = (
        int.from_bytes(data[32:40], "little"),
        int.from_bytes(data[54:56], "little"),
        int.from_bytes(data[56:58], "little"),
    )
    types = [int.from_bytes(data[phoff + i * phentsize : phoff + i * phentsize + 4], "little") for i in range(phnum)]
    assert types and 3 not in types  # PT_INTERP = 3


def test_a_bundle_without_dracni_python_says_so(tmp_path: Path) -> None:
    shutil.copy(NATIVE, tmp_path / "dracni")
    proc = subprocess.run([str(tmp_path / "dracni"), "--version"], capture_output=True, timeout=60)
    assert proc.returncode == 127
    assert f"cannot exec {tmp_path}/dracni-python".encode() in proc.stderr


def test_sanitizers_find_nothing_on_the_corpus(tmp_path: Path) -> None:
    """The same C built with -fsanitize=address,undefined, run over the corpus (its handovers
    exec the real dracni-python through a link beside it)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "dracni-python").symlink_to(PYTHON)
    build = subprocess.run(
        [gcc, "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-Wall", "-Wextra", "-Werror"]
        + ["-o", str(bundle / "dracni"), str(REPO / "native" / "fastpath.c")],
        capture_output=True,
    )
    if build.returncode != 0 and b"asan" in build.stderr.lower():
        pytest.skip(f"no sanitizer runtime: {build.stderr.decode()}")
    assert build.returncode == 0, build.stderr.decode()
    cases = [placed(case, tmp_path / "cases") for case in corpus()]
    # every case the native code answers; a sample of the handed-over ones (they parse too)
    chosen = [c for c in cases if c.expect == "fast"] + [c for c in cases if c.expect == "python"][::8]
    for case in chosen:
        case.env["ASAN_OPTIONS"] = "detect_leaks=0:exitcode=99"
        case.env["UBSAN_OPTIONS"] = "halt_on_error=1:exitcode=99"
        out = run_case(case, bundle / "dracni")
        assert out.returncode != 99, f"sanitizer report on {case.kind}: {case.stdin!r}"
        shutil.rmtree(case.root, ignore_errors=True)


@pytest.mark.parametrize("length", [300, 5000], ids=["over NAME_MAX", "over PATH_MAX"])
@pytest.mark.parametrize("with_dirs", [False, True], ids=["no record dirs", "record dirs"])
def test_names_too_long_for_a_file_name_agree(tmp_path: Path, length: int, with_dirs: bool) -> None:
    """A record name the kernel refuses (ENAMETOOLONG) is not an absent record: Python reports it
    (or, without the directory, both see ENOENT first): the two paths agree either way."""
    conf = json.dumps({"cniVersion": "1.0.0", "name": "n" * length}).encode()
    outs = []
    for exe in (NATIVE, PYTHON):
        shutil.rmtree(tmp_path, ignore_errors=True)
        tmp_path.mkdir()
        env = cni_env(tmp_path, "DEL")
        if with_dirs:
            (tmp_path / "state" / "attachments").mkdir()
        proc = subprocess.run([str(NATIVE)], executable=exe, env=env, input=conf, capture_output=True, timeout=60)
        outs.append((proc.returncode, proc.stdout))
    assert outs[0] == outs[1]
