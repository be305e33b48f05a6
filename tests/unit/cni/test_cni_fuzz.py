"""Fuzzing the CNI entry point with malformed environments and stdin.

Property, for every input: exit code 0 or 1; stdout is one JSON object on one line (or empty,
only for a successful DEL/CHECK/GC/STATUS); when the exit code is not 0 that object is a CNI
error with an int ``code`` of the spec's set {1,2,3,4,5,6,7,11,50,51,999} or >= 100 and a
non-empty ``msg``; stderr never holds a Python traceback.

Safety: every stateDir and logFile the generators produce lies in a pytest temp dir (a generated
stateDir is otherwise a non-string or a relative path, which is rejected before use),
DRACNI_STATE_DIR points into the temp dir for configs without stateDir, and CNI_PATH names
empty temp dirs, so no delegate can run and nothing touches /var/lib/dracni.

``test_fuzz_regressions_*`` widen the generators to NUL bytes and undecodable bytes in paths
and the environment, which once escaped as tracebacks (see test_cni_protocol.py, "Regressions").
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import string
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import event as _hypothesis_event
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from dracni.cni import main as cni_main
from dracni.cni.log import log
from tests.harness import DRACNI_BINARY

SPEC_CODES = {1, 2, 3, 4, 5, 6, 7, 11, 50, 51, 999}
SUPPORTED = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
COMMANDS = ["ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION"]
SILENT_ON_SUCCESS = {"DEL", "CHECK", "GC", "STATUS"}
BINARY = str(DRACNI_BINARY)  # DRACNI_BINARY from the environment, else the bundle in this checkout
K8S_ARGS = (
    "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;"
    "K8S_POD_INFRA_CONTAINER_ID=c0ffee;K8S_POD_UID=pod-uid-1"
)

IN_PROCESS_EXAMPLES = 1000
BINARY_EXAMPLES = 150
REGRESSION_EXAMPLES = 100

_HEALTH = [
    HealthCheck.too_slow,
    HealthCheck.data_too_large,
    HealthCheck.filter_too_much,
    HealthCheck.function_scoped_fixture,
    HealthCheck.large_base_example,
]


# -- the sandbox -------------------------------------------------------------------------------------


class Sandbox:
    def __init__(self, root):
        self.root = str(root)
        self.state = os.path.join(self.root, "state")
        self.fallback_state = os.path.join(self.root, "fallback-state")
        self.logs = os.path.join(self.root, "logs")
        self.cni_path = os.path.join(self.root, "cni-bin")
        self.cni_path2 = os.path.join(self.root, "cni-bin2")
        self.regular_file = os.path.join(self.root, "a-regular-file")
        for d in (self.logs, self.cni_path, self.cni_path2):
            os.makedirs(d, exist_ok=True)
        with open(self.regular_file, "w") as f:
            f.write("x\n")


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    box = Sandbox(tmp_path_factory.mktemp("cni-fuzz"))
    real_state_existed = os.path.exists("/var/lib/dracni")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DRACNI_STATE_DIR", box.fallback_state)
        saved = (log.threshold, log.path, log.context)
        yield box
        log.threshold, log.path, log.context = saved
    assert os.listdir(box.cni_path) == [] and os.listdir(box.cni_path2) == []
    assert real_state_existed or not os.path.exists("/var/lib/dracni"), "a fuzz case used /var/lib/dracni"


# -- generators --------------------------------------------------------------------------------------

# Environment values: anything but NUL (an environment cannot hold NUL) and lone surrogates.
_env_char = st.characters(codec="utf-8", exclude_characters="\x00")
_env_text = st.text(_env_char, max_size=24)
_safe_name = st.text(string.ascii_letters + string.digits + "._-", min_size=1, max_size=12)


def _cni_args():
    pair = st.tuples(st.text(_env_char.filter(lambda c: c not in "=;"), max_size=8), _env_text)
    return st.one_of(
        st.just(K8S_ARGS),
        st.just(""),
        st.sampled_from(
            [
                "K8S_POD_UID",
                "=x",
                "a=1;;b",
                "IgnoreUnknown=1;K8S_POD_UID=../../etc",
                "K8S_POD_UID=" + "u" * 300,
                "K8S_POD_NAMESPACE=a/b;K8S_POD_NAME=..",
                "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=n",
            ]
        ),
        st.lists(pair, max_size=4).map(lambda kvs: ";".join(f"{k}={v}" for k, v in kvs)),
        _env_text,
    )


@st.composite
def envs(draw, box: Sandbox, require_command: bool = False):
    env: dict[str, str] = {}
    pick = draw(st.integers(0, 9))  # mostly a real command (hypothesis favours 0)
    if pick <= 6:
        command = draw(st.sampled_from(COMMANDS))
    elif pick <= 8:
        command = draw(st.sampled_from(["", "add", "Add", "ADD ", " DEL", "VERSIONS", "GC\n"]))
    else:
        command = draw(_env_text)
    if require_command or draw(st.integers(0, 19)) != 19:
        env["CNI_COMMAND"] = command
    per_container = draw(st.booleans()) or command not in ("GC", "STATUS")
    choices = {
        "CNI_CONTAINERID": st.one_of(
            st.sampled_from(["c0ffee", "abc-DEF_1.2", "", "-x", "a/b", "a b", "ä"]),
            st.from_regex(r"\A[a-zA-Z0-9][a-zA-Z0-9_.\-]{0,40}\Z"),
            _env_text,
        ),
        "CNI_NETNS": st.one_of(st.sampled_from(["/var/run/netns/fuzz", "", "/proc/1/ns/net"]), _env_text),
        "CNI_IFNAME": st.one_of(
            st.sampled_from(
                ["eth0", "net1", "", ".", "..", "a/b", "a:b", "a b", "x" * 15, "x" * 16, "é" * 8, "eth0\t"]
            ),
            _env_text,
        ),
        "CNI_ARGS": _cni_args(),
        "CNI_PATH": st.sampled_from(
            [
                box.cni_path,
                box.cni_path + ":" + box.cni_path2,
                "",
                ":",
                box.cni_path + "::",
                os.path.join(box.root, "missing-dir"),
            ]
        ),
    }
    for var, strat in choices.items():
        if var == "CNI_PATH" or per_container:
            if draw(st.integers(0, 5)) != 5:  # mostly present
                env[var] = draw(strat)
        elif draw(st.booleans()):
            env[var] = ""  # libcni's GC/STATUS
    for _ in range(draw(st.integers(0, 2))):
        env[draw(st.sampled_from(["IgnoreMe", "CNI_FOO", "PATH", "HOME"]))] = draw(_env_text)
    return env


def _json_values(text=st.text(max_size=16)):
    scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), text)
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
        ),
        max_leaves=12,
    )


_ip4 = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: "%d.%d.%d.%d/24" % t)
_ip6 = st.integers(0, 0xFFFF).map(lambda n: "fd00::%x/64" % n)


@st.composite
def results(draw, version=None):
    version = version or draw(st.sampled_from(SUPPORTED))
    ips = draw(
        st.lists(
            st.fixed_dictionaries(
                {"address": st.one_of(_ip4, _ip6)},
                optional={"interface": st.integers(0, 2), "gateway": st.just("10.0.0.1")},
            ),
            max_size=3,
        )
    )
    if version < "1.0.0":
        ips = [dict(ip, version="6" if ":" in ip["address"] else "4") for ip in ips]
    res = {
        "cniVersion": version,
        "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/fuzz"}],
        "ips": ips,
        "dns": {},
    }
    if draw(st.booleans()):
        res["routes"] = [{"dst": "0.0.0.0/0"}]
    return res


def _state_dirs(box: Sandbox, hostile: bool):
    """A generated stateDir: inside the sandbox, relative (rejected before use) or not a string."""
    suffix = st.text(
        string.ascii_letters + string.digits + "._-/" + ("\x00\udc80\ud800é" if hostile else ""), max_size=20
    )
    return st.one_of(
        st.just(box.state),
        suffix.map(lambda s: os.path.join(box.state, s.lstrip("/"))),
        st.just(os.path.join(box.regular_file, "state")),
        st.just(box.regular_file),
        st.text(string.ascii_letters + "./~", max_size=10).filter(lambda s: not s.startswith("/")),
        st.one_of(st.none(), st.booleans(), st.integers(), st.lists(st.integers(), max_size=2)),
    )


def _log_files(box: Sandbox, hostile: bool):
    alphabet = string.ascii_letters + string.digits + "._-" + ("\x00\udc80\ud800/" if hostile else "")
    return st.one_of(
        st.text(alphabet, min_size=1, max_size=12).map(lambda s: os.path.join(box.logs, s)),
        st.just(""),
        st.one_of(st.none(), st.booleans(), st.integers(), st.just(["x"])),
    )


def _gc_lists():
    entry = st.fixed_dictionaries(
        {"containerID": st.one_of(_safe_name, _json_values()), "ifname": st.one_of(st.just("eth0"), _json_values())}
    )
    return st.one_of(st.lists(entry, max_size=3), _json_values())


@st.composite
def configs(draw, box: Sandbox, hostile: bool = False):
    """A valid plugin config, then a few fields replaced by wrong values or dropped."""
    version = draw(st.sampled_from(SUPPORTED))
    conf = {
        "cniVersion": version,
        "name": draw(st.sampled_from(["net", "dracni-net", "k8s-pod-network"])),
        "type": "dracni",
        "stateDir": draw(
            st.sampled_from([box.state] * 6 + [os.path.join(box.regular_file, "state"), box.regular_file])
        ),
    }
    if draw(st.booleans()):
        conf["prevResult"] = draw(results(version))
    if draw(st.booleans()):
        conf["cni.dev/valid-attachments" if draw(st.booleans()) else "cni.dev/attachments"] = draw(
            st.lists(st.fixed_dictionaries({"containerID": _safe_name, "ifname": st.just("eth0")}), max_size=3)
        )
    if draw(st.booleans()):
        conf["runtimeConfig"] = {"portMappings": []}
    if draw(st.booleans()):
        conf["logLevel"] = draw(st.sampled_from(["debug", "info", "warning", "error"]))
    if draw(st.booleans()):
        conf["delegateTimeout"] = draw(st.one_of(st.integers(1, 300), st.floats(0.1, 300)))
    mutators = {
        "cniVersion": st.one_of(st.sampled_from(["1.0", "0.2.0", "", "2.0.0", " 1.0.0"]), _json_values()),
        "name": st.one_of(st.sampled_from(["", "-x", "a b", "a/b", "ä"]), _json_values()),
        "stateDir": _state_dirs(box, hostile),
        "logFile": _log_files(box, hostile),
        "logLevel": st.one_of(st.sampled_from(["DEBUG", "verbose", ""]), _json_values()),
        "delegateTimeout": st.one_of(st.sampled_from([0, -1, -0.5, "30", True]), _json_values()),
        "runtimeConfig": _json_values(),
        "args": _json_values(),
        "prevResult": st.one_of(_json_values(), results()),
        "prevResult.cniVersion": st.one_of(st.sampled_from(SUPPORTED + ["0.2.0", "1.0"]), _json_values()),
        "prevResult.ips": _json_values(),
        "prevResult.interfaces": _json_values(),
        "prevResult.routes": _json_values(),
        "prevResult.dns": _json_values(),
        "cni.dev/valid-attachments": _gc_lists(),
        "cni.dev/attachments": _gc_lists(),
        "capabilities": _json_values(),
        "someUnknownKey": _json_values(),
    }
    keys = draw(st.lists(st.sampled_from(sorted(mutators)), max_size=3, unique=True))
    if hostile:
        keys = list(dict.fromkeys(["stateDir" if draw(st.booleans()) else "logFile"] + keys))
    for key in keys:
        drop = key not in ("stateDir", "logFile") and draw(st.integers(0, 4)) == 0
        if key.startswith("prevResult."):
            prev = conf.setdefault("prevResult", draw(results(version)))
            if isinstance(prev, dict):
                field = key.split(".", 1)[1]
                if drop:
                    prev.pop(field, None)
                else:
                    prev[field] = draw(mutators[key])
        elif drop:
            conf.pop(key, None)
        else:
            conf[key] = draw(mutators[key])
    return conf


def _dump(value, draw) -> bytes:
    text = json.dumps(value, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 0, 2])))
    return text.encode("utf-8", "surrogatepass")


@st.composite
def stdins(draw, box: Sandbox, hostile: bool = False):
    kind = draw(st.sampled_from(["config"] * 6 + ["json", "bytes", "truncated", "wrapped"]))
    if kind == "config":
        return _dump(draw(configs(box, hostile)), draw)
    if kind == "json":
        value = draw(_json_values())
        if isinstance(value, dict):  # never let a random object pick its own paths
            value.pop("logFile", None)
            value["stateDir"] = box.state
        return _dump(value, draw)
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    if kind == "truncated":
        raw = _dump(draw(configs(box, hostile)), draw)
        return raw[: draw(st.integers(0, max(0, len(raw) - 1)))]
    # a valid config wrapped in something that is not one object
    raw = _dump(draw(configs(box, hostile)), draw)
    return draw(st.sampled_from([b"[%s]", b"%s %s", b"%s,", b"\xef\xbb\xbf%s", b"%s\x00", b"\xff%s"])).replace(
        b"%s", raw
    )


# -- the property ------------------------------------------------------------------------------------


def event(label: str) -> None:
    """Tally outcomes (pytest --hypothesis-show-statistics); a no-op outside a hypothesis test."""
    try:
        _hypothesis_event(label)
    except InvalidArgument:
        pass


def _reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def check_outcome(env: dict, rc: int, stdout: bytes, stderr: str) -> None:
    command = env.get("CNI_COMMAND")
    event(f"{command if command in COMMANDS else 'bad command'}: exit {rc}")
    assert "Traceback" not in stderr, stderr
    assert rc in (0, 1), f"exit code {rc}"
    if rc == 0 and stdout == b"":
        assert command in SILENT_ON_SUCCESS, f"{command} succeeded without printing a result"
        return
    assert stdout.endswith(b"\n") and stdout.count(b"\n") == 1, f"not one line: {stdout!r}"
    text = stdout.decode("utf-8")  # strict: the runtime reads UTF-8
    obj = json.loads(text, parse_constant=_reject_constant)  # one JSON value, nothing after it
    assert isinstance(obj, dict), obj
    if rc == 0:
        assert command in ("ADD", "VERSION"), f"{command} printed {obj!r} on success"
        if command == "VERSION":
            assert obj["supportedVersions"] == SUPPORTED
            assert isinstance(obj["cniVersion"], str)
        return
    assert {"cniVersion", "code", "msg"} <= set(obj) <= {"cniVersion", "code", "msg", "details"}, obj
    assert type(obj["code"]) is int, obj
    assert obj["code"] in SPEC_CODES or obj["code"] >= 100, obj
    assert isinstance(obj["msg"], str) and obj["msg"].strip(), obj
    assert isinstance(obj.get("details", ""), str), obj
    assert obj["cniVersion"] in SUPPORTED, obj
    event(f"error code {obj['code']}")


def run_in_process(env: dict, stdin: bytes) -> tuple[int, bytes, str]:
    log.threshold, log.path, log.context = 30, None, ""  # what a fresh process starts with
    out, err = io.BytesIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            rc = cni_main.run(env=env, stdin=stdin, out=out)
        except BaseException as exc:  # a traceback, had this been the binary
            import traceback

            err.write("Traceback (most recent call last):\n" + "".join(traceback.format_exception(exc)))
            rc = -1
    return rc, out.getvalue(), err.getvalue()


def run_binary(box: Sandbox, env: dict, stdin: bytes) -> tuple[int, bytes, str]:
    full_env = dict(env, DRACNI_STATE_DIR=box.fallback_state)
    proc = subprocess.run([BINARY], input=stdin, env=full_env, capture_output=True, timeout=30, cwd=box.root)
    return proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace")


# -- the fuzz tests -----------------------------------------------------------------------------------


@st.composite
def invocations(draw, box: Sandbox, require_command=False):
    return draw(envs(box, require_command)), draw(stdins(box))


def test_fuzz_entry_point_in_process(sandbox):
    @settings(max_examples=IN_PROCESS_EXAMPLES, deadline=None, database=None, suppress_health_check=_HEALTH)
    @given(case=invocations(sandbox))
    def fuzz(case):
        env, stdin = case
        check_outcome(env, *run_in_process(env, stdin))

    fuzz()


@pytest.mark.skipif(
    not os.path.isfile(BINARY), reason=f"frozen binary not built: DRACNI_BINARY={BINARY} does not exist (make binary)"
)
def test_fuzz_frozen_binary(sandbox):
    # The binary is the CNI plugin only when CNI_COMMAND is set (else it is the operator CLI),
    # so every generated environment sets it, possibly to an invalid value.
    @settings(max_examples=BINARY_EXAMPLES, deadline=None, database=None, suppress_health_check=_HEALTH)
    @given(case=invocations(sandbox, require_command=True))
    def fuzz(case):
        env, stdin = case
        rc, stdout, stderr = run_binary(sandbox, env, stdin)
        assert "[PYI-" not in stderr, stderr
        check_outcome(env, rc, stdout, stderr)

    fuzz()


# -- regressions: NUL bytes and undecodable bytes in paths and the environment --------------------------


@st.composite
def hostile_invocations(draw, box: Sandbox):
    """Mostly valid calls whose paths or per-container values hold NUL or undecodable bytes
    (Python maps non-UTF-8 bytes of the environment to lone surrogates \udc80-\udcff)."""
    command = draw(st.sampled_from(["ADD", "DEL", "CHECK", "GC", "STATUS"]))
    undecodable = st.text("\udc80\udcffé-x", min_size=1, max_size=6)
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": "c0ffee",
        "CNI_NETNS": "/var/run/netns/x",
        "CNI_IFNAME": draw(st.one_of(st.just("eth0"), undecodable)),
        "CNI_ARGS": "K8S_POD_UID=" + draw(st.one_of(st.just("pod-1"), undecodable)),
        "CNI_PATH": box.cni_path,
    }
    hostile = st.text("\x00\udc80\ud800é-x", min_size=1, max_size=6)
    conf = {
        "cniVersion": "1.1.0",
        "name": "net",
        "stateDir": draw(
            st.one_of(
                st.just(box.state),
                st.just(os.path.join(box.regular_file, "state")),
                hostile.map(lambda s: os.path.join(box.state, s)),
                hostile.map(lambda s: os.path.join(box.regular_file, s)),
            )
        ),
    }
    if draw(st.booleans()):
        conf["logFile"] = draw(hostile.map(lambda s: os.path.join(box.logs, s)))
    if draw(st.booleans()):
        conf["cni.dev/valid-attachments"] = []
    return env, _dump(conf, draw)


def test_fuzz_regressions_in_process(sandbox):
    """NUL and undecodable bytes in stateDir/logFile/env make run() raise (see test_cni_protocol's
    test_regression_unusable_log_file_never_escapes_run and test_regression_error_message_with_undecodable_bytes)."""

    @settings(max_examples=REGRESSION_EXAMPLES, deadline=None, database=None, suppress_health_check=_HEALTH)
    @given(case=hostile_invocations(sandbox))
    def fuzz(case):
        env, stdin = case
        check_outcome(env, *run_in_process(env, stdin))

    fuzz()


@pytest.mark.skipif(
    not os.path.isfile(BINARY), reason=f"frozen binary not built: DRACNI_BINARY={BINARY} does not exist"
)
@pytest.mark.parametrize(
    "env_extra,stdin",
    [
        (
            {"CNI_COMMAND": "GC"},
            b'{"cniVersion":"1.1.0","name":"net","stateDir":"%(state)s","logFile":"%(logs)s/a\\u0000b"}',
        ),
        (
            {"CNI_COMMAND": "ADD", "CNI_ARGS": "K8S_POD_UID=\udc80"},
            b'{"cniVersion":"1.1.0","name":"net","stateDir":"%(file)s/state"}',
        ),
        (
            {"CNI_COMMAND": "DEL", "CNI_IFNAME": "eth\udcff"},
            b'{"cniVersion":"1.1.0","name":"net","stateDir":"%(file)s/x"}',
        ),
    ],
    ids=["logFile-nul", "pod-uid-not-utf8", "ifname-not-utf8"],
)
def test_regressions_in_frozen_binary(sandbox, env_extra, stdin):
    env = {
        "CNI_CONTAINERID": "c0ffee",
        "CNI_NETNS": "/var/run/netns/x",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": sandbox.cni_path,
        **env_extra,
    }
    stdin = stdin % {
        b"state": sandbox.state.encode(),
        b"logs": sandbox.logs.encode(),
        b"file": sandbox.regular_file.encode(),
    }
    rc, stdout, stderr = run_binary(sandbox, env, stdin)
    check_outcome(env, rc, stdout, stderr)
