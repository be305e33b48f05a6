"""The CNI protocol layer, in-process: ``dracni.cni.main.run(env, stdin, out)``.

Every test checks the exit code and the exact JSON object printed on stdout.  Error tests also
check that the message names the variable or field at fault.  Nothing here runs a delegate: the
CNI_PATH is an empty temp dir and every state dir is a pytest temp dir.

Tests under "Regressions" pin inputs that once escaped as a traceback or code 999.
"""

from __future__ import annotations

import io
import json
import os

import pytest

from dracni.cni import main as cni_main
from dracni.cni.log import log
from dracni.cni.versions import LATEST, SUPPORTED_VERSIONS
from dracni.state.store import StateDir

SUPPORTED = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
ERROR_KEYS = {"cniVersion", "code", "msg", "details"}
K8S_ARGS = (
    "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;"
    "K8S_POD_INFRA_CONTAINER_ID=c0ffee;K8S_POD_UID=pod-uid-1"
)


def _strict_loads(raw: bytes):
    def reject(name):
        raise ValueError(f"{name} in output")

    return json.loads(raw.decode("utf-8"), parse_constant=reject)


class CNI:
    """Builds invocations against one temp state dir and an empty CNI_PATH."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.state_dir = str(tmp_path / "state")
        self.cni_path = tmp_path / "cni-bin"
        self.cni_path.mkdir()
        self.regular_file = tmp_path / "a-regular-file"
        self.regular_file.write_text("not a directory\n")

    def env(self, command="ADD", **overrides):
        env = {
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": "c0ffee",
            "CNI_NETNS": "/var/run/netns/test-pod",
            "CNI_IFNAME": "eth0",
            "CNI_ARGS": K8S_ARGS,
            "CNI_PATH": str(self.cni_path),
        }
        if command in ("GC", "STATUS"):  # libcni sets the per-container variables to ""
            env.update(CNI_CONTAINERID="", CNI_NETNS="", CNI_IFNAME="", CNI_ARGS="")
        for key, value in overrides.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def conf(self, version="1.1.0", **fields):
        conf = {"cniVersion": version, "name": "net", "type": "dracni", "stateDir": self.state_dir}
        for key, value in fields.items():
            if value is _DROP:
                conf.pop(key, None)
            else:
                conf[key] = value
        return conf

    def run(self, command="ADD", conf=None, stdin=None, env=None, **env_overrides):
        if env is None:
            env = self.env(command, **env_overrides)
        if stdin is None:
            stdin = json.dumps(self.conf() if conf is None else conf).encode()
        out = io.BytesIO()
        rc = cni_main.run(env=env, stdin=stdin, out=out)
        return rc, out.getvalue()

    def ok(self, *args, **kwargs):
        rc, raw = self.run(*args, **kwargs)
        assert rc == 0, raw
        return raw

    def error(self, code, *needles, version=None, **kwargs) -> dict:
        rc, raw = self.run(**kwargs)
        return check_error(rc, raw, code, *needles, version=version)


_DROP = object()


def check_error(rc, raw, code, *needles, version=None) -> dict:
    assert rc == 1, f"expected an error, got exit {rc}: {raw!r}"
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1, raw
    err = _strict_loads(raw)
    assert isinstance(err, dict)
    assert {"cniVersion", "code", "msg"} <= set(err) <= ERROR_KEYS, err
    assert type(err["code"]) is int, err
    assert isinstance(err["msg"], str) and err["msg"], err
    assert isinstance(err.get("details", ""), str)
    assert err["cniVersion"] in SUPPORTED_VERSIONS, err
    assert err["code"] == code, err
    if version is not None:
        assert err["cniVersion"] == version, err
    for needle in needles:
        assert needle in err["msg"], f"{needle!r} not named in {err['msg']!r}"
    return err


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """No run may fall back to /var/lib/dracni, and the module-level logger is restored."""
    monkeypatch.setenv("DRACNI_STATE_DIR", str(tmp_path / "fallback-state"))
    saved = (log.threshold, log.path, log.context)
    yield
    log.threshold, log.path, log.context = saved
    assert not os.path.exists(tmp_path / "fallback-state"), "a run used the fallback state dir"


@pytest.fixture
def cni(tmp_path):
    return CNI(tmp_path)


def put_attachment(
    state_dir: str, *, network="net", container_id="c0ffee", ifname="eth0", state="ready", delegate_type=None
) -> dict:
    devices = []
    if delegate_type is not None:
        devices.append(
            {
                "claim": {"uid": "claim-1", "namespace": "default", "name": "nets"},
                "request": "macvlan",
                "pool": "node-1",
                "device": "eth1",
                "shareID": None,
                "ifName": "net1",
                "driver": "dracni.io",
                "result": None,
                "error": None,
                "delegates": [
                    {
                        "type": delegate_type,
                        "cniVersion": "1.0.0",
                        "added": True,
                        "result": None,
                        "config": {"cniVersion": "1.0.0", "name": "macnet", "type": delegate_type},
                    }
                ],
            }
        )
    record = {
        "kind": "Attachment",
        "network": network,
        "containerID": container_id,
        "ifName": ifname,
        "netns": "/var/run/netns/test-pod",
        "cniArgs": K8S_ARGS,
        "cniVersion": "1.1.0",
        "pod": {"uid": "pod-uid-1", "namespace": "default", "name": "web-0"},
        "state": state,
        "error": None,
        "updatedAt": "2026-01-01T00:00:00Z",
        "devices": devices,
    }
    StateDir(state_dir).put_attachment(record)
    return record


def attachment_exists(state_dir, network="net", container_id="c0ffee", ifname="eth0") -> bool:
    return StateDir(state_dir).read_attachment(network, container_id, ifname) is not None


# -- VERSION ----------------------------------------------------------------------------------


def test_supported_versions_constant():
    assert list(SUPPORTED_VERSIONS) == SUPPORTED
    assert LATEST == "1.1.0"


@pytest.mark.parametrize("stdin", [b"", b"  \n", b"{}"])
def test_version_without_cni_version_answers_latest(cni, stdin):
    raw = cni.ok("VERSION", stdin=stdin, env={"CNI_COMMAND": "VERSION"})
    assert raw == b'{"cniVersion":"1.1.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}\n'


@pytest.mark.parametrize("version", SUPPORTED + ["0.2.0", "9.9.9"])
def test_version_echoes_cni_version(cni, version):
    raw = cni.ok("VERSION", stdin=json.dumps({"cniVersion": version}).encode(), env={"CNI_COMMAND": "VERSION"})
    assert _strict_loads(raw) == {"cniVersion": version, "supportedVersions": SUPPORTED}
    assert raw.count(b"\n") == 1


def test_version_needs_no_other_variable(cni):
    """libcni's VERSION call sets only CNI_COMMAND (and CNI_PATH); nothing else is required."""
    raw = cni.ok(env={"CNI_COMMAND": "VERSION"}, stdin=b'{"cniVersion":"1.0.0"}')
    assert _strict_loads(raw)["cniVersion"] == "1.0.0"


def test_version_with_non_string_cni_version_answers_latest(cni):
    raw = cni.ok(env={"CNI_COMMAND": "VERSION"}, stdin=b'{"cniVersion": 1}')
    assert _strict_loads(raw) == {"cniVersion": "1.1.0", "supportedVersions": SUPPORTED}


@pytest.mark.parametrize("stdin", [b"{", b"[]", b'"1.0.0"'])
def test_version_with_undecodable_stdin_is_code_6(cni, stdin):
    cni.error(6, "stdin", env={"CNI_COMMAND": "VERSION"}, stdin=stdin, version=LATEST)


# -- pass-through ADD, DEL, CHECK, GC, STATUS that succeed --------------------------------------


PREV_RESULTS = {
    "0.3.1": {
        "cniVersion": "0.3.1",
        "interfaces": [{"name": "eth0", "mac": "0a:58:0a:f4:00:05", "sandbox": "/var/run/netns/test-pod"}],
        "ips": [{"version": "4", "address": "10.244.0.5/24", "gateway": "10.244.0.1", "interface": 0}],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dns": {},
    },
    "0.4.0": {
        "cniVersion": "0.4.0",
        "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/test-pod"}],
        "ips": [
            {"version": "6", "address": "fd00::5/64", "interface": 0},
            {"version": "4", "address": "10.0.0.5/8", "interface": 0},
        ],
        "dns": {"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"]},
    },
    "1.0.0": {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "mac": "0a:58:0a:f4:00:05", "mtu": 1450, "sandbox": "/x"}],
        "ips": [{"address": "10.244.0.5/24", "gateway": "10.244.0.1", "interface": 0}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.244.0.1"}],
        "dns": {},
        "x-unknown": [1, {"a": None}],
    },
    "1.1.0": {
        "cniVersion": "1.1.0",
        "interfaces": [
            {"name": "eth0", "mac": "0a:58:0a:f4:00:05", "socketPath": "/run/x.sock", "pciID": "0000:00:1f.6"}
        ],
        "ips": [{"address": "fd00::5/64", "interface": 0}],
        "routes": [{"dst": "::/0", "mtu": 1400, "advmss": 1360, "priority": 10, "table": 100, "scope": 0}],
        "dns": {"nameservers": ["fd00::a"]},
    },
}


@pytest.mark.parametrize("version", sorted(PREV_RESULTS))
def test_passthrough_add_returns_prev_result_unchanged(cni, version):
    prev = PREV_RESULTS[version]
    raw = cni.ok("ADD", conf=cni.conf(version, prevResult=prev))
    assert raw == json.dumps(prev, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
    assert _strict_loads(raw) == prev


@pytest.mark.parametrize("version", SUPPORTED)
def test_passthrough_add_without_prev_result(cni, version):
    raw = cni.ok("ADD", conf=cni.conf(version))
    assert raw == json.dumps({"cniVersion": version, "dns": {}}, separators=(",", ":")).encode() + b"\n"


def test_passthrough_add_without_k8s_args(cni):
    raw = cni.ok("ADD", CNI_ARGS=None)
    assert _strict_loads(raw) == {"cniVersion": "1.1.0", "dns": {}}


def test_passthrough_add_accepts_unknown_and_reserved_keys(cni):
    conf = cni.conf(
        runtimeConfig={"portMappings": []},
        args={"cni": {"x": 1}},
        capabilities={"ips": True},
        logLevel="debug",
        logFile=str(cni.tmp / "dracni.log"),
        delegateTimeout=2.5,
        **{"cni.dev/whatever": 1, "someUnknownKey": {"nested": [1, 2]}},
    )
    assert _strict_loads(cni.ok("ADD", conf=conf)) == {"cniVersion": "1.1.0", "dns": {}}


@pytest.mark.parametrize("ifname", ["e", "a" * 15, "eth0.100", "net-1_x", "veth@1", "ethé"])
def test_valid_ifnames_are_accepted(cni, ifname):
    cni.ok("ADD", CNI_IFNAME=ifname)


@pytest.mark.parametrize("cid", ["c", "0", "abc-DEF_1.2", "a" * 64, "cnitool-77383ca0a0715733ca6f"])
def test_valid_container_ids_are_accepted(cni, cid):
    cni.ok("ADD", CNI_CONTAINERID=cid)


def test_cni_args_empty_pairs_and_values_are_accepted(cni):
    cni.ok("ADD", CNI_ARGS=";IgnoreUnknown=1;;K8S_POD_NAME=;K8S_POD_UID=u=v;")


def test_del_with_nothing_recorded_succeeds_silently(cni):
    assert cni.ok("DEL") == b""
    assert cni.ok("DEL") == b""  # idempotent


@pytest.mark.parametrize("netns", [None, ""])
def test_del_without_netns_succeeds(cni, netns):
    assert cni.ok("DEL", CNI_NETNS=netns) == b""


def test_del_without_prev_result_and_state_dir_missing(cni, tmp_path):
    conf = cni.conf(stateDir=str(tmp_path / "never" / "created"))
    assert cni.ok("DEL", conf=conf) == b""


def test_del_removes_a_recorded_attachment_without_devices(cni):
    put_attachment(cni.state_dir)
    assert cni.ok("DEL") == b""
    assert not attachment_exists(cni.state_dir)


@pytest.mark.parametrize("version", ["0.4.0", "1.0.0", "1.1.0"])
def test_check_with_nothing_recorded_succeeds_silently(cni, version):
    prev = dict(PREV_RESULTS["0.4.0" if version == "0.4.0" else "1.0.0"], cniVersion=version)
    assert cni.ok("CHECK", conf=cni.conf(version, prevResult=prev)) == b""


def test_status_on_a_good_state_dir(cni):
    os.makedirs(cni.state_dir)
    assert cni.ok("STATUS") == b""
    assert os.path.isdir(cni.state_dir)


def test_status_never_creates_the_state_dir(cni):
    """A missing state dir that ADD could create is fine for STATUS, and stays missing."""
    assert cni.ok("STATUS") == b""
    assert not os.path.exists(cni.state_dir)


@pytest.mark.parametrize("command", ["GC", "STATUS"])
@pytest.mark.parametrize("version", ["0.3.0", "0.3.1", "0.4.0", "1.0.0"])
def test_gc_and_status_before_1_1_0_are_code_1(cni, command, version):
    """The spec introduces GC and STATUS in 1.1.0 (libcni pkg/skel: "config version does not allow GC")."""
    conf = cni.conf(version, **{"cni.dev/valid-attachments": []})
    err = cni.error(1, f"config version {version} does not allow {command}", command=command, conf=conf)
    assert err["cniVersion"] == version
    assert not os.path.exists(cni.state_dir)


def test_status_needs_no_cni_path(cni):
    assert cni.ok("STATUS", CNI_PATH=None) == b""


def test_gc_with_no_attachments(cni):
    assert cni.ok("GC", conf=cni.conf(**{"cni.dev/valid-attachments": []})) == b""


def test_gc_releases_stale_and_keeps_valid_attachments(cni):
    put_attachment(cni.state_dir, container_id="keep")
    put_attachment(cni.state_dir, container_id="stale")
    put_attachment(cni.state_dir, network="other", container_id="stale")
    valid = [{"containerID": "keep", "ifname": "eth0"}, {"containerID": "nothing-here", "ifname": "eth1"}]
    assert cni.ok("GC", conf=cni.conf(**{"cni.dev/valid-attachments": valid})) == b""
    assert attachment_exists(cni.state_dir, container_id="keep")
    assert not attachment_exists(cni.state_dir, container_id="stale")
    assert attachment_exists(cni.state_dir, network="other", container_id="stale")  # another network


def test_gc_accepts_the_legacy_attachments_key(cni):
    put_attachment(cni.state_dir, container_id="keep")
    put_attachment(cni.state_dir, container_id="stale")
    conf = cni.conf(**{"cni.dev/attachments": [{"containerID": "keep", "ifname": "eth0"}]})
    assert cni.ok("GC", conf=conf) == b""
    assert attachment_exists(cni.state_dir, container_id="keep")
    assert not attachment_exists(cni.state_dir, container_id="stale")


def test_gc_prefers_valid_attachments_over_the_legacy_key(cni):
    put_attachment(cni.state_dir, container_id="a")
    put_attachment(cni.state_dir, container_id="b")
    conf = cni.conf(
        **{
            "cni.dev/valid-attachments": [{"containerID": "a", "ifname": "eth0"}],
            "cni.dev/attachments": [{"containerID": "b", "ifname": "eth0"}],
        }
    )
    assert cni.ok("GC", conf=conf) == b""
    assert attachment_exists(cni.state_dir, container_id="a")
    assert not attachment_exists(cni.state_dir, container_id="b")


# -- code 1: incompatible version -----------------------------------------------------------------


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK", "GC", "STATUS"])
@pytest.mark.parametrize(
    "bad", ["0.2.0", "0.1.0", "1.0", "1", "1.2.0", "v1.0.0", " 1.0.0", "", 1, 1.0, None, ["1.0.0"]]
)
def test_unsupported_config_version_is_code_1(cni, command, bad):
    cni.error(1, "cniVersion", repr(bad), command=command, conf=cni.conf(bad), version=LATEST)


@pytest.mark.parametrize("bad", ["0.2.0", "1.0", "2.0.0", 100, None])
def test_unsupported_prev_result_version_is_code_1(cni, bad):
    prev = dict(PREV_RESULTS["1.0.0"], cniVersion=bad)
    cni.error(1, "prevResult.cniVersion", command="ADD", conf=cni.conf(prevResult=prev))


@pytest.mark.parametrize("version", ["0.3.0", "0.3.1"])
def test_check_with_a_0_3_config_is_code_1(cni, version):
    err = cni.error(
        1, "cniVersion", version, "CHECK", command="CHECK", conf=cni.conf(version, prevResult=PREV_RESULTS["0.3.1"])
    )
    assert err["cniVersion"] == version  # errors after parsing speak the config's version


# -- code 2: unsupported field ------------------------------------------------------------------
# dracni never raises code 2 (UNSUPPORTED_FIELD): unknown keys are passed through, as the spec
# requires of plugins.  Nothing to trigger.


# -- code 3: unknown container ---------------------------------------------------------------------


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK"])
@pytest.mark.parametrize("cid", [None, ""])
def test_missing_container_id_is_code_3(cni, command, cid):
    cni.error(3, "CNI_CONTAINERID", command=command, CNI_CONTAINERID=cid)


def test_check_without_a_record_for_a_pod_with_claims_is_code_3(cni):
    StateDir(cni.state_dir).put_claim(
        {
            "uid": "claim-1",
            "namespace": "default",
            "name": "nets",
            "driver": "dracni.io",
            "pods": [{"uid": "pod-uid-1", "name": "web-0"}],
            "devices": [],
        }
    )
    cni.error(3, "c0ffee", command="CHECK", conf=cni.conf(prevResult=PREV_RESULTS["1.1.0"]))


# -- code 4: invalid environment -----------------------------------------------------------------


@pytest.mark.parametrize("command", [None, ""])
def test_missing_command_is_code_4(cni, command):
    cni.error(4, "CNI_COMMAND", CNI_COMMAND=command, version=LATEST)


@pytest.mark.parametrize("command", ["add", "Add", "ADD ", "DELETE", "VERSIONS", "INIT", "-"])
def test_unknown_command_is_code_4(cni, command):
    err = cni.error(4, "CNI_COMMAND", repr(command), env=cni.env(command))
    assert "ADD" in err["msg"]  # lists what is accepted


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK"])
@pytest.mark.parametrize("cid", ["-leading-dash", ".hidden", "_x", "a/b", "a b", "a:b", "a;b", "ä", "a\tb", "c0ffee\n"])
def test_container_id_with_bad_chars_is_code_4(cni, command, cid):
    cni.error(4, "CNI_CONTAINERID", command=command, CNI_CONTAINERID=cid)


@pytest.mark.parametrize("command", ["ADD", "CHECK"])
@pytest.mark.parametrize("netns", [None, ""])
def test_missing_netns_on_add_and_check_is_code_4(cni, command, netns):
    cni.error(
        4, "CNI_NETNS", command, command=command, CNI_NETNS=netns, conf=cni.conf(prevResult=PREV_RESULTS["1.1.0"])
    )


BAD_IFNAMES = [
    None,
    "",
    "a" * 16,
    "x" * 100,
    ".",
    "..",
    "a/b",
    "/",
    "eth0:1",
    ":",
    "a b",
    " eth0",
    "eth0 ",
    "a\tb",
    "a\nb",
    "a\u00a0b",
    "a\u2003b",
]


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK"])
@pytest.mark.parametrize("ifname", BAD_IFNAMES)
def test_bad_ifname_is_code_4(cni, command, ifname):
    cni.error(4, "CNI_IFNAME", command=command, CNI_IFNAME=ifname, conf=cni.conf(prevResult=PREV_RESULTS["1.1.0"]))


@pytest.mark.parametrize(
    "args", ["K8S_POD_NAME", "IgnoreUnknown=1;K8S_POD_UID", "=value", "IgnoreUnknown=1;=x", "a=1;b;c=2"]
)
@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK"])
def test_malformed_cni_args_pair_is_code_4(cni, command, args):
    cni.error(4, "CNI_ARGS", command=command, CNI_ARGS=args, conf=cni.conf(prevResult=PREV_RESULTS["1.1.0"]))


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK", "GC"])
@pytest.mark.parametrize("path", [None, ""])
def test_missing_cni_path_is_code_4(cni, command, path):
    conf = cni.conf(prevResult=PREV_RESULTS["1.1.0"], **{"cni.dev/valid-attachments": []})
    cni.error(4, "CNI_PATH", command=command, CNI_PATH=path, conf=conf)


def test_env_is_checked_in_spec_order(cni):
    """A missing CNI_COMMAND is reported before a bad stdin; a bad config before a bad env."""
    check_error(*cni.run(env={}, stdin=b"garbage"), 4, "CNI_COMMAND")
    check_error(*cni.run(env={"CNI_COMMAND": "ADD"}, stdin=b"garbage"), 6, "stdin")
    check_error(*cni.run(env={"CNI_COMMAND": "ADD"}, stdin=b'{"name":"net"}'), 7, "cniVersion")
    check_error(*cni.run(env={"CNI_COMMAND": "ADD"}, stdin=json.dumps(cni.conf()).encode()), 3, "CNI_CONTAINERID")


# -- code 5: I/O failure -----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["ADD", "DEL", "GC"])
def test_state_dir_below_a_regular_file_is_code_5(cni, command):
    bad = str(cni.regular_file / "state")
    conf = cni.conf(stateDir=bad, **{"cni.dev/valid-attachments": []})
    err = cni.error(5, bad, command=command, conf=conf)
    assert "state directory" in err["msg"]


def test_state_dir_that_is_a_regular_file_is_code_5(cni):
    bad = str(cni.regular_file)
    cni.error(5, bad, command="DEL", conf=cni.conf(stateDir=bad))


# -- code 6: decode failure ------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK", "GC", "STATUS"])
@pytest.mark.parametrize(
    "stdin",
    [
        b"",
        b" \n\t",  # empty
        b"{",
        b"{'cniVersion': '1.0.0'}",
        b'{"a":1} {"b":2}',  # invalid JSON
        b'{"cniVersion":"1.1.0","name":"net","x":NaN}',
        b'{"x": Infinity}',
        b"[]",
        b"[1]",
        b'"ADD"',
        b"42",
        b"null",
        b"true",  # not an object
        b'{"cniVersion":"1.1.0","name":"n\xc3"}',
        b"\xff\xfe\xfd",  # bad UTF-8
    ],
)
def test_undecodable_stdin_is_code_6(cni, command, stdin):
    cni.error(6, "stdin", command=command, stdin=stdin, version=LATEST)


def test_non_object_message_names_the_json_type(cni):
    err = cni.error(6, "stdin", stdin=b"[1, 2]")
    assert "list" in err["msg"] or "array" in err["msg"]


# -- code 7: invalid configuration -------------------------------------------------------------------


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK", "GC", "STATUS"])
def test_missing_cni_version_is_code_7(cni, command):
    cni.error(7, "cniVersion", command=command, conf=cni.conf(cniVersion=_DROP))


@pytest.mark.parametrize("name", [_DROP, None, "", "-net", ".net", "my net", "a/b", "ä", 5, ["net"], {"n": 1}])
def test_bad_network_name_is_code_7(cni, name):
    cni.error(7, "name", command="ADD", conf=cni.conf(name=name))


@pytest.mark.parametrize(
    "key,value",
    [
        ("stateDir", 5),
        ("stateDir", True),
        ("stateDir", None),
        ("stateDir", []),
        ("stateDir", {}),
        ("logFile", 5),
        ("logFile", False),
        ("logFile", None),
        ("logFile", ["/tmp/x"]),
        ("logLevel", 10),
        ("logLevel", True),
        ("logLevel", None),
        ("logLevel", "verbose"),
        ("logLevel", "DEBUG"),
        ("logLevel", ""),
        ("delegateTimeout", "30"),
        ("delegateTimeout", True),
        ("delegateTimeout", None),
        ("delegateTimeout", 0),
        ("delegateTimeout", -1),
        ("delegateTimeout", -0.5),
        ("delegateTimeout", [1]),
        ("runtimeConfig", []),
        ("runtimeConfig", "x"),
        ("runtimeConfig", 1),
        ("runtimeConfig", None),
        ("args", []),
        ("args", "K=V"),
        ("args", 0),
        ("args", None),
        ("prevResult", []),
        ("prevResult", "x"),
        ("prevResult", 1),
        ("prevResult", True),
    ],
)
@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK", "GC", "STATUS"])
def test_bad_field_type_is_code_7(cni, command, key, value):
    conf = cni.conf(**{key: value, "cni.dev/valid-attachments": []})
    cni.error(7, key, command=command, conf=conf)


@pytest.mark.parametrize("state_dir", ["var/lib/dracni", "./state", "../state", "~/state", ""])
def test_relative_state_dir_is_code_7(cni, state_dir):
    err = cni.error(7, "stateDir", command="ADD", conf=cni.conf(stateDir=state_dir))
    assert "absolute" in err["msg"]


@pytest.mark.parametrize(
    "key,value",
    [
        ("ips", "10.0.0.5/24"),
        ("ips", {"address": "10.0.0.5/24"}),
        ("ips", 5),
        ("ips", [1]),
        ("ips", ["x"]),
        ("interfaces", "eth0"),
        ("interfaces", [None]),
        ("routes", {}),
        ("routes", [[]]),
        ("dns", []),
        ("dns", "8.8.8.8"),
    ],
)
@pytest.mark.parametrize("version", ["1.0.0", "1.1.0"])
def test_malformed_prev_result_is_code_7(cni, version, key, value):
    prev = dict(PREV_RESULTS["1.0.0"], cniVersion=version, **{key: value})
    cni.error(7, f"prevResult.{key}", command="ADD", conf=cni.conf(version, prevResult=prev))


def test_gc_without_valid_attachments_is_code_7(cni):
    err = cni.error(7, "cni.dev/valid-attachments", command="GC", conf=cni.conf("1.1.0"))
    assert err["cniVersion"] == "1.1.0"


@pytest.mark.parametrize("key", ["cni.dev/valid-attachments", "cni.dev/attachments"])
@pytest.mark.parametrize(
    "entries,where",
    [
        ("c0ffee", ""),
        ({"containerID": "c", "ifname": "eth0"}, ""),
        (5, ""),
        ([1], "[0]"),
        (["c0ffee"], "[0]"),
        ([None], "[0]"),
        ([{"containerID": "c"}], "[0]"),
        ([{"ifname": "eth0"}], "[0]"),
        ([{"containerID": 1, "ifname": "eth0"}], "[0]"),
        ([{"containerID": "c", "ifname": None}], "[0]"),
        ([{"containerID": "c", "ifname": "eth0"}, {"containerID": "d"}], "[1]"),
    ],
)
def test_gc_with_malformed_attachments_is_code_7(cni, key, entries, where):
    cni.error(7, key + where, command="GC", conf=cni.conf(**{key: entries}))


def test_gc_with_null_valid_attachments_is_code_7(cni):
    cni.error(7, "cni.dev/valid-attachments", command="GC", conf=cni.conf(**{"cni.dev/valid-attachments": None}))


# -- code 11: try again later --------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["adding", "failed"])
def test_check_of_an_attachment_not_ready_is_code_11(cni, state):
    put_attachment(cni.state_dir, state=state)
    cni.error(11, "c0ffee", state, command="CHECK", conf=cni.conf(prevResult=PREV_RESULTS["1.1.0"]))


def test_del_whose_delegate_cannot_run_is_code_11_and_keeps_the_record(cni):
    put_attachment(cni.state_dir, delegate_type="ghost-plugin")
    cni.error(11, "DEL incomplete", "ghost-plugin", command="DEL")
    assert attachment_exists(cni.state_dir)  # the runtime retries; nothing is forgotten


def test_gc_whose_stale_delegate_cannot_run_is_code_11(cni):
    put_attachment(cni.state_dir, container_id="stale", delegate_type="ghost-plugin")
    put_attachment(cni.state_dir, container_id="other")
    cni.error(11, "GC incomplete", "stale", command="GC", conf=cni.conf(**{"cni.dev/valid-attachments": []}))
    assert attachment_exists(cni.state_dir, container_id="stale")
    assert not attachment_exists(cni.state_dir, container_id="other")  # GC kept going


def test_gc_moves_an_unreadable_record_aside_and_goes_on(cni):
    put_attachment(cni.state_dir, container_id="stale")
    attachments = os.path.join(cni.state_dir, "attachments")
    with open(os.path.join(attachments, "net+broken+eth0.json"), "w") as f:
        f.write("{torn")
    os.makedirs(os.path.join(cni.state_dir, "claims"), exist_ok=True)
    with open(os.path.join(cni.state_dir, "claims", "claim-9.json"), "w") as f:
        f.write("{torn")  # a prepared claim GC cannot read: skipped, left for the service and inspect
    cni.ok("GC", conf=cni.conf(**{"cni.dev/valid-attachments": []}))
    assert os.listdir(attachments) == []
    (moved,) = os.listdir(os.path.join(cni.state_dir, "quarantine"))
    assert moved.startswith("attachments+net+broken+eth0.")


def test_check_reports_an_unreadable_record_as_code_5(cni):
    os.makedirs(os.path.join(cni.state_dir, "attachments"))
    with open(os.path.join(cni.state_dir, "attachments", "net+c0ffee+eth0.json"), "w") as f:
        f.write('{"schema": 2, "kind": "Attachment"}')
    cni.error(5, "schema 2, newer than this dracni's 1", command="CHECK")
    assert os.listdir(os.path.join(cni.state_dir, "attachments")) == ["net+c0ffee+eth0.json"]  # CHECK only reads


# -- code 50: STATUS unavailable -------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["below", "is"])
def test_status_with_an_unusable_state_dir_is_code_50(cni, where):
    bad = str(cni.regular_file / "state") if where == "below" else str(cni.regular_file)
    err = cni.error(50, bad, command="STATUS", conf=cni.conf("1.1.0", stateDir=bad))
    assert err["cniVersion"] == "1.1.0"


# -- code 999: internal error -------------------------------------------------------------------------------


def test_internal_error_is_code_999_and_still_a_cni_error(cni):
    """A record whose keys pass the reader's check but whose delegates have the wrong shape
    (hand-edited) makes DEL fail internally: reported as 999, not a crash."""
    attachments = os.path.join(cni.state_dir, "attachments")
    os.makedirs(attachments)
    record = {
        "schema": 1,
        "kind": "Attachment",
        "network": "net",
        "containerID": "c0ffee",
        "ifName": "eth0",
        "state": "ready",
        "devices": [{"claim": {}, "ifName": "net1", "delegates": [5]}],
    }
    with open(os.path.join(attachments, "net+c0ffee+eth0.json"), "w") as f:
        f.write(json.dumps(record))
    rc, raw = cni.run("DEL")
    err = check_error(rc, raw, 999, "internal error")
    assert "TypeError" in err["msg"]  # names the exception type
    assert "Traceback" not in err["msg"]


@pytest.mark.parametrize(
    "content",
    ['{"schema": 1, "kind": "Attachment", "devices": 5}', "{torn", '{"schema": 2, "kind": "Attachment"}'],
)
def test_del_quarantines_an_unreadable_record_and_succeeds(cni, capsys, content):
    """Issue 12 item 3: a record DEL cannot read (wrong shape, corrupt, newer schema) never blocks
    DEL: it is moved into quarantine/ intact, with one warning line, and DEL has nothing left to do."""
    attachments = os.path.join(cni.state_dir, "attachments")
    os.makedirs(attachments)
    with open(os.path.join(attachments, "net+c0ffee+eth0.json"), "w") as f:
        f.write(content)
    capsys.readouterr()
    rc, raw = cni.run("DEL")
    assert (rc, raw) == (0, b"")
    assert os.listdir(attachments) == []
    (moved,) = os.listdir(os.path.join(cni.state_dir, "quarantine"))
    with open(os.path.join(cni.state_dir, "quarantine", moved)) as f:
        assert f.read() == content
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "WARNING" in lines[0] and "moved an unreadable state record aside" in lines[0]


def test_del_goes_on_when_an_unreadable_record_cannot_be_moved_aside(cni, capsys):
    attachments = os.path.join(cni.state_dir, "attachments")
    os.makedirs(attachments)
    with open(os.path.join(attachments, "net+c0ffee+eth0.json"), "w") as f:
        f.write("{torn")
    with open(os.path.join(cni.state_dir, "quarantine"), "w") as f:
        f.write("a file where the quarantine directory would go")
    capsys.readouterr()
    assert cni.run("DEL") == (0, b"")
    assert os.listdir(attachments) == ["net+c0ffee+eth0.json"]
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "cannot quarantine" in lines[0] and "corrupt state record" in lines[0]


# -- error objects ------------------------------------------------------------------------------------


def test_error_object_is_exactly_one_line_of_json(cni):
    rc, raw = cni.run("ADD", CNI_IFNAME="..")
    assert rc == 1
    assert (
        raw
        == json.dumps(
            {"cniVersion": "1.1.0", "code": 4, "msg": "CNI_IFNAME '..' must not be '.' or '..'"}, separators=(",", ":")
        ).encode()
        + b"\n"
    )


def test_error_details_are_a_string_when_present(cni):
    err = cni.error(1, "cniVersion", conf=cni.conf("0.2.0"))
    assert "1.1.0" in err["details"]


def test_errors_are_logged_to_stderr_not_stdout(cni, capsys):
    rc, raw = cni.run("ADD", CNI_IFNAME="a b")
    assert rc == 1
    stderr = capsys.readouterr().err
    assert "CNI_IFNAME" in stderr and "Traceback" not in stderr
    assert b"ERROR" not in raw


def test_debug_and_info_go_to_the_log_file_never_to_stderr(cni, capsys):
    """Issue 12 item 7: with ``logLevel: debug`` the runtime, which copies a plugin's stderr into
    its own log (libcni RawExec.ExecPlugin), sees nothing of a successful call; the logFile has it all."""
    logfile = cni.tmp / "dracni.log"
    conf = cni.conf(logLevel="debug", logFile=str(logfile))
    put_attachment(cni.state_dir)
    capsys.readouterr()
    cni.ok("ADD", conf=conf)  # no prepared claims: a debug line
    cni.ok("DEL", conf=conf)  # the record's DEL: an info line
    assert capsys.readouterr().err == ""
    logged = logfile.read_text()
    assert " DEBUG " in logged and "pass-through" in logged and " INFO " in logged and "DEL detached" in logged


def test_warnings_and_errors_still_reach_stderr_at_every_level(cni, capsys):
    logfile = cni.tmp / "dracni.log"
    capsys.readouterr()
    cni.error(7, "cni.dev/valid-attachments", command="GC", conf=cni.conf(logLevel="debug", logFile=str(logfile)))
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and " ERROR " in err[0] and "cni.dev/valid-attachments" in err[0]


def test_log_file_receives_the_error(cni):
    logfile = cni.tmp / "dracni.log"
    cni.error(7, "cni.dev/valid-attachments", command="GC", conf=cni.conf(logFile=str(logfile)))
    assert "cni.dev/valid-attachments" in logfile.read_text()


# -- Regressions: inputs that once escaped as tracebacks or code 999 -------------------------------------------


@pytest.mark.parametrize("version,ips", [("0.4.0", "10.0.0.5/24"), ("0.3.1", 5), ("0.3.0", [1])])
def test_regression_0x_prev_result_with_non_list_ips_is_code_7(cni, version, ips):
    """request._parse_conf converts prevResult with to_current() BEFORE _check_result_shape():
    for a 0.x prevResult to_current iterates ``ips`` and calls ``ip.items()``, so a non-list
    ``ips`` (or a non-object entry) is an AttributeError/TypeError -> code 999 instead of 7.
    Fix: run ``_check_result_shape(prev, "prevResult")`` on the raw object before to_current."""
    prev = {"cniVersion": version, "ips": ips}
    cni.error(7, "prevResult.ips", command="ADD", conf=cni.conf(version, prevResult=prev))


def test_regression_ifname_length_is_counted_in_bytes(cni):
    """The kernel's IFNAMSIZ (16 incl. NUL) and libcni's ValidateInterfaceName (Go ``len``) count
    bytes; request.validate_ifname counts characters, so 8 x 'é' (16 bytes) is accepted.
    Fix: ``len(name.encode("utf-8", "surrogateescape")) > 15``."""
    cni.error(4, "CNI_IFNAME", command="ADD", CNI_IFNAME="é" * 8)


@pytest.mark.parametrize("raw_value", [b"1e400", b"1" + b"0" * 400])
def test_regression_delegate_timeout_must_be_finite(cni, raw_value):
    """``1e400`` decodes to float inf and passes ``> 0`` (subprocess.run(timeout=inf) later raises
    OverflowError -> 999); a 401-digit integer passes too and ``float()`` in main._dispatch raises
    OverflowError -> 999.  Fix: in _parse_conf require ``math.isfinite(float(v))`` (catching
    OverflowError) and an upper bound, else code 7 naming delegateTimeout."""
    stdin = json.dumps(cni.conf()).encode()[:-1] + b',"delegateTimeout":' + raw_value + b"}"
    cni.error(7, "delegateTimeout", command="ADD", stdin=stdin)


def test_regression_state_dir_with_nul_is_code_7(cni):
    """os functions raise ValueError('embedded null byte'), which StateDir does not turn into
    StateError, so it ends as 999.  Fix: reject NUL in stateDir/logFile in _parse_conf (code 7)."""
    conf = cni.conf(stateDir=cni.state_dir + "\u0000x")
    cni.error(7, "stateDir", command="STATUS", conf=conf)


def test_regression_log_file_with_nul_is_code_7(cni):
    """logFile is only type-checked; a NUL (or a non-absolute path) is accepted."""
    cni.error(7, "logFile", command="ADD", conf=cni.conf(logFile=str(cni.tmp / "a\u0000b")))


@pytest.mark.parametrize("log_name", ["a\u0000b", "\ud800.log"], ids=["nul", "surrogate"])
def test_regression_unusable_log_file_never_escapes_run(cni, log_name):
    """log.Log._emit catches only OSError: os.open raises ValueError for a NUL and
    UnicodeEncodeError for an unencodable surrogate.  The exception is raised from log.error()
    inside run()'s except-handler, escapes run(): the binary prints a Traceback and no JSON.
    Fix: catch (OSError, ValueError) in _emit (and validate logFile, see above)."""
    try:
        rc, raw = cni.run("GC", conf=cni.conf(logFile=str(cni.tmp / log_name)))
    except Exception as exc:
        pytest.fail(f"run() raised {type(exc).__name__}: {exc}")
    check_error(rc, raw, 7)


def test_regression_error_message_with_undecodable_bytes_still_prints_json(cni):
    """A real environment can hold bytes that are not UTF-8 (Python maps them to lone surrogates,
    e.g. K8S_POD_UID=\\x80 -> '\\udc80').  When such a value lands in an error message (here the
    path in a StateError) main._write -> jsonio.dumps(ensure_ascii=False).encode() raises
    UnicodeEncodeError inside the except-handler: no JSON, a Traceback (seen in the frozen binary).
    Fix: emit CNI output with ensure_ascii=True (or encode with 'backslashreplace'), and wrap the
    handler's own write in a last try that prints a fixed 999 object."""
    conf = cni.conf(stateDir=str(cni.regular_file / "state"))
    try:
        rc, raw = cni.run("ADD", conf=conf, CNI_ARGS="K8S_POD_UID=\udc80")
    except Exception as exc:
        pytest.fail(f"run() raised {type(exc).__name__}: {exc}")
    check_error(rc, raw, 5, "state directory")


@pytest.mark.parametrize(
    "stdin",
    [
        b'{"cniVersion":"1.1.0","name":"net","x":"\xed\xa0\x80"}',  # UTF-8-encoded surrogate
        '{"cniVersion":"1.1.0","name":"net"}'.encode("utf-16"),  # UTF-16 with BOM
        '{"cniVersion":"1.1.0","name":"net"}'.encode("utf-32-le"),  # UTF-32
    ],
    ids=["utf8-surrogate", "utf16", "utf32"],
)
def test_regression_stdin_must_be_utf8(cni, stdin):
    """jsonio.loads(bytes) hands the bytes to json.loads, which auto-detects UTF-16/UTF-32 and
    decodes UTF-8 with 'surrogatepass': stdin that is not UTF-8 (RFC 8259 section 8.1) is accepted,
    and surrogates decoded from it later break the output encoding (see the test above).
    Fix: in jsonio.loads, ``data.decode("utf-8")`` (strict) before json.loads, so these are code 6."""
    cni.error(6, "stdin", command="ADD", stdin=stdin)


# -- dracni under dracni (issue 9, item 3) ------------------------------------------------------


def test_dracni_refuses_to_run_as_a_delegate_of_dracni_and_opens_no_log_file(cni):
    """A claim naming ``type: dracni`` (as a plugin or as an IPAM) gets a clear error, no
    recursion, and none of the files its config names is touched."""
    victim = cni.tmp / "victim"
    conf = cni.conf(logFile=str(victim), stateDir=str(cni.tmp / "elsewhere"))
    for command in ("ADD", "DEL", "CHECK"):
        check_error(*cni.run(command, conf=conf, DRACNI_DELEGATE_OF="4242"), 7, "cannot be a delegate of dracni")
    assert not victim.exists() and not (cni.tmp / "elsewhere").exists()


def test_version_still_answers_under_dracni(cni):
    raw = cni.ok("VERSION", stdin=b'{"cniVersion":"1.0.0"}', DRACNI_DELEGATE_OF="4242")
    assert json.loads(raw)["supportedVersions"] == SUPPORTED


def test_log_lines_escape_control_characters(tmp_path):
    """Tenant text in a message (a delegate's error, a config value) cannot forge a log line of
    its own or steer a terminal: the file and stderr get one line, the controls as escapes."""
    from dracni.cni.log import Log

    logfile = tmp_path / "dracni.log"
    Log(level="info", path=str(logfile), context="ADD c0ffee net: ").error("boom\nFORGED line\x1b[2J\u2028x")
    text = logfile.read_text()
    assert text.count("\n") == 1 and text.endswith("\n")
    assert "ADD c0ffee net: boom\\nFORGED line\\x1b[2J\\u2028x" in text and "\x1b" not in text
