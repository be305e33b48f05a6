"""The kubelet plugin gRPC server against a fake kubelet, over real unix sockets.

The fake kubelet (tests/fakes/kubelet.py) registers the plugin and calls it as kubelet does;
the preparer port is played by small in-test callbacks.  Socket dirs live under /tmp with
short names: pytest's tmp_path can exceed the 107-byte unix socket path limit.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
import pytest

from dracni.kube.transport import CONNECTIONS
from dracni.kubelet.driver import PrepareResult as PrepareOutcome
from dracni.kubelet.proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    registration_pb2,
    registration_pb2_grpc,
)
from dracni.kubelet.server import DRA_WORKERS, SUPPORTED_SERVICES, ClaimRef, DRAPluginServer
from tests.fakes.kubelet import ClaimError, FakeKubelet, RegistrationError

ROOT = Path(__file__).resolve().parents[3]
DRIVER = "dracni.io"
CLAIMS = [("ns1", "uid-a", "claim-a"), ("ns1", "uid-b", "claim-b"), ("ns2", "uid-c", "claim-c")]


def good_prepare(claims: list[ClaimRef]) -> dict[str, PrepareOutcome]:
    return {
        c.uid: PrepareOutcome(devices=[{"request": "net", "pool": "node1", "device": f"dev-{c.uid}", "shareID": None}])
        for c in claims
    }


def good_unprepare(claims: list[ClaimRef]) -> dict[str, str | None]:
    return {c.uid: None for c in claims}


@pytest.fixture
def sockdir():
    d = tempfile.mkdtemp(dir="/tmp", prefix="dra-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def make_server(sockdir):
    servers: list[DRAPluginServer] = []

    def make(prepare=good_prepare, unprepare=good_unprepare, start=True, **kw) -> DRAPluginServer:
        server = DRAPluginServer(
            driver=kw.pop("driver", DRIVER),
            plugins_dir=kw.pop("plugins_dir", os.path.join(sockdir, "plugins")),
            registry_dir=kw.pop("registry_dir", os.path.join(sockdir, "registry")),
            prepare=prepare,
            unprepare=unprepare,
            **kw,
        )
        servers.append(server)
        if start:
            server.start()
        return server

    yield make
    for server in servers:
        server.stop(grace=0)


@pytest.fixture
def kubelets(sockdir):
    made: list[FakeKubelet] = []

    def make(**kw) -> FakeKubelet:
        kubelet = FakeKubelet(os.path.join(sockdir, "registry"), driver=kw.pop("driver", DRIVER), **kw)
        made.append(kubelet)
        return kubelet

    yield make
    for kubelet in made:
        kubelet.close()


def registered_kubelet(kubelets, version: str) -> FakeKubelet:
    kubelet = kubelets(force_v1beta1=(version == "v1beta1"))
    plugin = kubelet.wait_for_plugin(timeout=10)
    assert plugin.version == version
    return kubelet


# -- the generated modules -------------------------------------------------------------------


def test_generated_modules_load_together_under_unique_file_names():
    assert dra_v1_pb2.DESCRIPTOR.name == "k8s.io/kubelet/pkg/apis/dra/v1/api.proto"
    assert dra_v1beta1_pb2.DESCRIPTOR.name == "k8s.io/kubelet/pkg/apis/dra/v1beta1/api.proto"
    assert registration_pb2.DESCRIPTOR.name == "k8s.io/kubelet/pkg/apis/pluginregistration/v1/api.proto"
    assert dra_v1_pb2.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1"
    assert dra_v1beta1_pb2.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1beta1"
    assert registration_pb2.DESCRIPTOR.package == "pluginregistration"
    assert dra_v1_pb2.DESCRIPTOR.services_by_name["DRAPlugin"].full_name == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    assert registration_pb2.DESCRIPTOR.services_by_name["Registration"].full_name == "pluginregistration.Registration"
    for module in (dra_v1_pb2_grpc, dra_v1beta1_pb2_grpc, registration_pb2_grpc):
        assert module.__name__.startswith("dracni.kubelet.proto.")
    assert dra_v1_pb2.Device.__module__ == "dracni.kubelet.proto.dra_v1_pb2"
    assert not [m for m in sys.modules if m == "k8s" or m.startswith("k8s.")]


# Field numbers and types of docs/contracts.md section 2 (= upstream's protos).
_S, _B, _M = "string", "bool", "message"
WIRE = {
    "NodePrepareResourcesRequest": {"claims": (1, _M, True)},
    "NodePrepareResourcesResponse": {"claims": (1, _M, True)},
    "NodePrepareResourceResponse": {"devices": (1, _M, True), "error": (2, _S, False)},
    "Device": {
        "request_names": (1, _S, True),
        "pool_name": (2, _S, False),
        "device_name": (3, _S, False),
        "cdi_device_ids": (4, _S, True),
    },
    "NodeUnprepareResourcesRequest": {"claims": (1, _M, True)},
    "NodeUnprepareResourcesResponse": {"claims": (1, _M, True)},
    "NodeUnprepareResourceResponse": {"error": (1, _S, False)},
    "Claim": {"namespace": (1, _S, False), "uid": (2, _S, False), "name": (3, _S, False)},
}
REGISTRATION_WIRE = {
    "PluginInfo": {
        "type": (1, _S, False),
        "name": (2, _S, False),
        "endpoint": (3, _S, False),
        "supported_versions": (4, _S, True),
    },
    "RegistrationStatus": {"plugin_registered": (1, _B, False), "error": (2, _S, False)},
    "RegistrationStatusResponse": {},
    "InfoRequest": {},
}
_TYPE_NAMES = {9: _S, 8: _B, 11: _M}


def _repeated(f) -> bool:
    return f.is_repeated if hasattr(f, "is_repeated") else f.label == f.LABEL_REPEATED


def _fields(message_descriptor) -> dict:
    return {f.name: (f.number, _TYPE_NAMES[f.type], _repeated(f)) for f in message_descriptor.fields}


@pytest.mark.parametrize("pb2", [dra_v1_pb2, dra_v1beta1_pb2], ids=["v1", "v1beta1"])
def test_dra_messages_match_the_kubelet_wire_format(pb2):
    extra = {"share_id": (5, _S, False)} if pb2 is dra_v1_pb2 else {}
    for name, fields in WIRE.items():
        want = {**fields, **extra} if name == "Device" else fields
        assert _fields(pb2.DESCRIPTOR.message_types_by_name[name]) == want, name
    assert set(pb2.DESCRIPTOR.message_types_by_name) == set(WIRE)
    # claims maps are keyed by claim UID (string)
    entry = pb2.NodePrepareResourcesResponse.DESCRIPTOR.fields_by_name["claims"].message_type
    assert entry.GetOptions().map_entry and entry.fields_by_name["key"].type == 9
    methods = {
        m.name: (m.input_type.name, m.output_type.name) for m in pb2.DESCRIPTOR.services_by_name["DRAPlugin"].methods
    }
    assert methods == {
        "NodePrepareResources": ("NodePrepareResourcesRequest", "NodePrepareResourcesResponse"),
        "NodeUnprepareResources": ("NodeUnprepareResourcesRequest", "NodeUnprepareResourcesResponse"),
    }
    if pb2 is dra_v1_pb2:
        assert pb2.Device.DESCRIPTOR.fields_by_name["share_id"].has_presence  # proto3 optional


def test_registration_messages_match_the_kubelet_wire_format():
    for name, fields in REGISTRATION_WIRE.items():
        assert _fields(registration_pb2.DESCRIPTOR.message_types_by_name[name]) == fields, name
    methods = {
        m.name: (m.input_type.name, m.output_type.name)
        for m in registration_pb2.DESCRIPTOR.services_by_name["Registration"].methods
    }
    assert methods == {
        "GetInfo": ("InfoRequest", "PluginInfo"),
        "NotifyRegistrationStatus": ("RegistrationStatus", "RegistrationStatusResponse"),
    }


def test_make_protos_reproduces_the_committed_modules(sockdir):
    pytest.importorskip("grpc_tools.protoc")
    out = Path(sockdir) / "gen"
    subprocess.run(
        [str(ROOT / "packaging" / "gen-protos.sh"), str(out)],
        env={**os.environ, "PYTHON": sys.executable},
        check=True,
        capture_output=True,
    )
    committed = ROOT / "dracni" / "kubelet" / "proto"
    generated = sorted(p.name for p in out.iterdir())
    assert generated == sorted(p.name for p in committed.glob("*_pb2*.py"))
    for name in generated:
        assert (out / name).read_bytes() == (committed / name).read_bytes(), f"{name}: run make protos"


def test_cni_hot_path_imports_no_grpc():
    code = (
        "import sys, dracni.cni.main, dracni.state.store\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'grpc' or m.startswith('google.protobuf') or m.startswith('dracni.kubelet'))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- registration ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_registration(make_server, kubelets, version):
    server = make_server()
    kubelet = kubelets(force_v1beta1=(version == "v1beta1"))
    plugin = kubelet.wait_for_plugin(timeout=10)

    assert plugin.driver == DRIVER
    assert plugin.endpoint == server.dra_socket == os.path.join(os.path.dirname(server.dra_socket), "dra.sock")
    assert os.path.isabs(plugin.endpoint)
    assert plugin.registration_socket == server.registration_socket
    assert plugin.registration_socket.endswith(f"/{DRIVER}-reg.sock")
    assert plugin.supported_versions == ["v1.DRAPlugin", "v1beta1.DRAPlugin"] == list(SUPPORTED_SERVICES)
    assert plugin.service == f"{version}.DRAPlugin"
    assert server.registered_event.wait(5)
    assert server.registered is True and server.registration_error is None

    results = kubelet.prepare(CLAIMS[:1], raise_on_error=True)
    # the fake's own classes, compiled from spec/ (not dracni's modules)
    assert (
        type(results["uid-a"]).DESCRIPTOR.full_name
        == f"k8s.io.kubelet.pkg.apis.dra.{version}.NodePrepareResourceResponse"
    )
    assert not isinstance(
        results["uid-a"], (dra_v1_pb2.NodePrepareResourceResponse, dra_v1beta1_pb2.NodePrepareResourceResponse)
    )
    assert [d.device_name for d in results["uid-a"].devices] == ["dev-uid-a"]


def test_registration_rejected_by_kubelet_is_recorded(make_server, kubelets):
    server = make_server()
    kubelet = kubelets(driver="someone-else.io")
    with pytest.raises(RegistrationError, match="not the expected driver"):
        kubelet.wait_for_plugin(timeout=10)
    assert server.registered is False
    assert "not the expected driver" in server.registration_error
    assert not server.registered_event.is_set()

    # a later successful registration (kubelet retries) clears the error
    kubelets().register(server.registration_socket)
    assert server.registered is True and server.registration_error is None
    assert server.registered_event.is_set()


def test_plugin_restart_registers_again(make_server, kubelets):
    kubelet = kubelets()
    first = make_server()
    kubelet.wait_for_plugin(timeout=10)
    first.stop()
    second = make_server()
    plugin = kubelet.wait_for_plugin(timeout=10)  # a new socket at the same path
    assert plugin.endpoint == second.dra_socket
    assert second.registered_event.wait(5)
    assert set(kubelet.prepare(CLAIMS)) == {"uid-a", "uid-b", "uid-c"}


# -- prepare / unprepare --------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_batch_with_one_failing_claim(make_server, kubelets, version):
    seen: list[list[ClaimRef]] = []

    def prepare(claims):
        seen.append(claims)
        out = good_prepare(claims)
        out["uid-b"] = PrepareOutcome(error="claim ns1/claim-b: no such interface eth9")
        return out

    make_server(prepare=prepare)
    kubelet = registered_kubelet(kubelets, version)
    results = kubelet.prepare(CLAIMS)

    assert seen == [
        [ClaimRef("ns1", "uid-a", "claim-a"), ClaimRef("ns1", "uid-b", "claim-b"), ClaimRef("ns2", "uid-c", "claim-c")]
    ]
    assert set(results) == {"uid-a", "uid-b", "uid-c"}
    assert results["uid-b"].error == "claim ns1/claim-b: no such interface eth9"
    assert list(results["uid-b"].devices) == []
    for uid in ("uid-a", "uid-c"):
        assert results[uid].error == ""
        (device,) = results[uid].devices
        assert list(device.request_names) == ["net"]
        assert device.pool_name == "node1"
        assert device.device_name == f"dev-{uid}"
        assert list(device.cdi_device_ids) == []

    with pytest.raises(
        ClaimError, match="NodePrepareResources failed for claim ns1/claim-b: claim ns1/claim-b: no such"
    ):
        kubelet.prepare(CLAIMS, raise_on_error=True)


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_callback_that_forgets_a_claim_gives_it_an_error(make_server, kubelets, version):
    def prepare(claims):
        return {uid: o for uid, o in good_prepare(claims).items() if uid != "uid-c"}

    def unprepare(claims):
        return {c.uid: None for c in claims if c.uid != "uid-a"}

    make_server(prepare=prepare, unprepare=unprepare)
    kubelet = registered_kubelet(kubelets, version)

    results = kubelet.prepare(CLAIMS)  # no ProtocolError: every claim has its entry
    assert results["uid-a"].error == results["uid-b"].error == ""
    assert "no outcome for claim ns2/claim-c" in results["uid-c"].error
    assert list(results["uid-c"].devices) == []

    results = kubelet.unprepare(CLAIMS)
    assert "no outcome for claim ns1/claim-a" in results["uid-a"].error
    assert results["uid-b"].error == results["uid-c"].error == ""


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_callback_that_raises_fails_every_claim_not_the_rpc(make_server, kubelets, version):
    def boom(claims):
        raise RuntimeError("state dir on fire")

    make_server(prepare=boom, unprepare=boom)
    kubelet = registered_kubelet(kubelets, version)

    for call in (kubelet.prepare, kubelet.unprepare):
        results = call(CLAIMS)
        assert set(results) == {"uid-a", "uid-b", "uid-c"}
        for entry in results.values():
            assert "RuntimeError: state dir on fire" in entry.error


def test_callback_answers_for_unrequested_claims_are_dropped(make_server, kubelets):
    def prepare(claims):
        out = good_prepare(claims)
        out["uid-stranger"] = PrepareOutcome()
        return out

    def unprepare(claims):
        return {**good_unprepare(claims), "uid-stranger": None}

    make_server(prepare=prepare, unprepare=unprepare)
    kubelet = registered_kubelet(kubelets, "v1")
    assert set(kubelet.prepare(CLAIMS[:2])) == {"uid-a", "uid-b"}  # the fake raises on unknown UIDs
    assert set(kubelet.unprepare(CLAIMS[:2])) == {"uid-a", "uid-b"}


def test_bad_outcomes_become_claim_errors(make_server, kubelets):
    def prepare(claims):
        return {
            "uid-a": PrepareOutcome(devices=[{"request": "net", "pool": "", "device": "eth1"}]),
            "uid-b": "not an outcome",
            "uid-c": PrepareOutcome(devices=[{"pool": "node1", "device": "eth2"}]),  # no request: all requests
        }

    make_server(prepare=prepare)
    kubelet = registered_kubelet(kubelets, "v1")
    results = kubelet.prepare(CLAIMS)
    assert "lacks pool or device" in results["uid-a"].error
    assert "bad outcome for claim ns1/claim-b" in results["uid-b"].error
    assert results["uid-c"].error == ""
    assert list(results["uid-c"].devices[0].request_names) == []


def test_unprepare_errors_per_claim(make_server, kubelets):
    seen = []

    def unprepare(claims):
        seen.append(claims)
        return {"uid-a": None, "uid-b": "", "uid-c": "cannot remove claim record: read-only file system"}

    make_server(unprepare=unprepare)
    kubelet = registered_kubelet(kubelets, "v1")
    results = kubelet.unprepare(CLAIMS)
    assert seen == [[ClaimRef(*c) for c in CLAIMS]]
    assert results["uid-a"].error == results["uid-b"].error == ""
    assert results["uid-c"].error == "cannot remove claim record: read-only file system"
    with pytest.raises(ClaimError, match="NodeUnprepareResources failed for claim ns2/claim-c"):
        kubelet.unprepare(CLAIMS, raise_on_error=True)


def test_share_id_on_v1_only(make_server, kubelets):
    def prepare(claims):
        return {
            c.uid: PrepareOutcome(
                devices=[
                    {"request": "net", "pool": "node1", "device": "eth1", "shareID": "8a1c3e54-share"},
                    {"request": "net2", "pool": "node1", "device": "eth2", "shareID": None},
                ]
            )
            for c in claims
        }

    make_server(prepare=prepare)
    shared, unshared = registered_kubelet(kubelets, "v1").prepare(CLAIMS[:1])["uid-a"].devices
    assert shared.HasField("share_id") and shared.share_id == "8a1c3e54-share"
    assert not unshared.HasField("share_id")

    devices = registered_kubelet(kubelets, "v1beta1").prepare(CLAIMS[:1])["uid-a"].devices
    assert [d.device_name for d in devices] == ["eth1", "eth2"]
    assert "share_id" not in dra_v1beta1_pb2.Device.DESCRIPTOR.fields_by_name
    # nor on the wire: unknown fields survive re-serialisation, and there is no field 5
    assert not any(dra_v1_pb2.Device.FromString(d.SerializeToString()).HasField("share_id") for d in devices)


def test_both_versions_served_on_one_socket(make_server):
    server = make_server()
    with grpc.insecure_channel("unix:" + server.dra_socket) as channel:
        for pb2, pb2_grpc in ((dra_v1_pb2, dra_v1_pb2_grpc), (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc)):
            stub = pb2_grpc.DRAPluginStub(channel)
            request = pb2.NodePrepareResourcesRequest(claims=[pb2.Claim(namespace="ns1", uid="u1", name="c1")])
            assert set(stub.NodePrepareResources(request, timeout=5).claims) == {"u1"}
            assert stub.NodePrepareResources(pb2.NodePrepareResourcesRequest(), timeout=5).claims == {}


def test_calls_run_concurrently(make_server, kubelets):
    barrier = threading.Barrier(2, timeout=5)

    def prepare(claims):
        barrier.wait()  # breaks (-> claim errors) unless two calls are in here at once
        return good_prepare(claims)

    make_server(prepare=prepare)
    kubelet = registered_kubelet(kubelets, "v1")
    results: dict = {}
    threads = [threading.Thread(target=lambda c=c: results.update(kubelet.prepare([c]))) for c in CLAIMS[:2]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert {uid: r.error for uid, r in results.items()} == {"uid-a": "", "uid-b": ""}


def test_twice_as_many_calls_run_at_once_as_there_are_api_connections(make_server, kubelets):
    """A burst of pod starts keeps every API connection busy: the calls waiting for their group
    commit hold a worker each but no connection (``DRA_WORKERS``)."""
    calls = 2 * CONNECTIONS
    assert calls == DRA_WORKERS
    barrier = threading.Barrier(calls, timeout=10)

    def prepare(claims):
        barrier.wait()  # breaks (-> claim errors) unless all the calls are in here at once
        return good_prepare(claims)

    make_server(prepare=prepare)
    kubelet = registered_kubelet(kubelets, "v1")
    claims = [("ns1", f"uid-{n}", f"claim-{n}") for n in range(calls)]
    results: dict = {}
    threads = [threading.Thread(target=lambda c=c: results.update(kubelet.prepare([c]))) for c in claims]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert {r.error for r in results.values()} == {""}
    assert len(results) == calls


# -- sockets and lifecycle ------------------------------------------------------------------


def _leave_stale_socket(path: str) -> None:
    """What a crashed plugin leaves: a socket file nobody listens on."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    assert not _accepts(path)


def _accepts(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except ConnectionRefusedError:
        return False
    finally:
        s.close()


def test_stale_sockets_are_replaced_at_start(make_server, kubelets):
    server = make_server(start=False)
    for path in (server.dra_socket, server.registration_socket):
        _leave_stale_socket(path)

    server.start()
    assert _accepts(server.dra_socket) and _accepts(server.registration_socket)
    kubelet = kubelets()
    kubelet.wait_for_plugin(timeout=10)
    assert set(kubelet.prepare(CLAIMS)) == {"uid-a", "uid-b", "uid-c"}


def test_stop_removes_both_sockets(make_server, kubelets):
    server = make_server()
    kubelet = kubelets()
    kubelet.wait_for_plugin(timeout=10)
    assert os.path.exists(server.dra_socket) and os.path.exists(server.registration_socket)

    server.stop(grace=1)
    assert not os.path.exists(server.dra_socket)
    assert not os.path.exists(server.registration_socket)
    assert kubelet.registration_sockets() == []
    assert server.wait(0)
    server.stop()  # idempotent
    with pytest.raises(RuntimeError):
        server.start()


def test_registration_socket_appears_only_after_dra_socket_serves(make_server):
    server = make_server(start=False)
    observed: dict = {}

    def watch():
        deadline = time.monotonic() + 10
        while not os.path.exists(server.registration_socket):
            if time.monotonic() > deadline:
                return
        # the instant kubelet could see the registration socket, the endpoint must answer
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(server.dra_socket)
            observed["connect"] = "ok"
        except OSError as exc:
            observed["connect"] = repr(exc)
        finally:
            s.close()
        with grpc.insecure_channel("unix:" + server.dra_socket) as channel:
            stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
            observed["rpc"] = (
                stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(), timeout=2).claims == {}
            )

    watcher = threading.Thread(target=watch)
    watcher.start()
    server.start()
    watcher.join(15)
    assert observed == {"connect": "ok", "rpc": True}


def test_too_long_socket_paths_are_rejected_at_construction(sockdir):
    long_dir = os.path.join(sockdir, "x" * 100)
    kw = {"driver": DRIVER, "prepare": good_prepare, "unprepare": good_unprepare}
    with pytest.raises(ValueError, match=r"DRA service socket path .* at most 107 bytes"):
        DRAPluginServer(plugins_dir=long_dir, registry_dir=sockdir, **kw)
    with pytest.raises(ValueError, match=r"registration socket path .* at most 107 bytes"):
        DRAPluginServer(plugins_dir=sockdir, registry_dir=long_dir, **kw)
    # exactly 107 bytes is fine
    registry = os.path.join(sockdir, "r" * (107 - len(sockdir) - 2 - len(f"{DRIVER}-reg.sock")))
    server = DRAPluginServer(plugins_dir=sockdir, registry_dir=registry, **kw)
    assert len(server.registration_socket.encode()) == 107
    with pytest.raises(ValueError, match="driver name"):
        DRAPluginServer(
            plugins_dir=sockdir, registry_dir=sockdir, driver="../evil", prepare=good_prepare, unprepare=good_unprepare
        )


SIGTERM_SCRIPT = """
import logging, sys, threading
from dracni.kubelet.server import DRAPluginServer
from dracni.service.signals import stop_on_signals, wait_for_stop
logging.basicConfig(level=logging.INFO)
server = DRAPluginServer(driver="dracni.io", plugins_dir=sys.argv[1], registry_dir=sys.argv[2],
                         prepare=lambda c: {}, unprepare=lambda c: {})
stop = threading.Event()
stop_on_signals(stop)
server.start()
print("ready", flush=True)
wait_for_stop(stop)
server.stop(grace=1)
sys.exit(0 if server.wait(30) else 3)
"""


def test_sigterm_stops_the_server_and_removes_sockets(sockdir, kubelets):
    plugins, registry = os.path.join(sockdir, "plugins"), os.path.join(sockdir, "registry")
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_SCRIPT, plugins, registry],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        kubelets().wait_for_plugin(timeout=10)
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stderr.read()
    assert not os.path.exists(os.path.join(plugins, DRIVER, "dra.sock"))
    assert not os.path.exists(os.path.join(registry, f"{DRIVER}-reg.sock"))


# -- a claim with an empty or malformed UID fails alone --------------------------------------


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
@pytest.mark.parametrize("bad_uid", ["", "..", "a/b", "x\x00y"])
def test_claim_with_an_empty_or_malformed_uid_gets_its_own_error(make_server, kubelets, tmp_path, version, bad_uid):
    """The real state-dir callbacks fail a batch holding an unusable UID (StateError: it cannot
    name a record); the server answers that claim alone and the others are served."""
    from dracni.claims.prepare import unprepare_claims
    from dracni.state.store import StateDir

    state = StateDir(str(tmp_path / "state"))
    seen: list[list[str]] = []

    def prepare(claims):
        seen.append([c.uid for c in claims])
        for c in claims:
            state.read_claim(c.uid)  # raises StateError for a UID that cannot name a record
        return good_prepare(claims)

    def unprepare(claims):
        seen.append([c.uid for c in claims])
        return unprepare_claims(state, [c.uid for c in claims])

    make_server(prepare=prepare, unprepare=unprepare)
    kubelet = registered_kubelet(kubelets, version)
    batch = [CLAIMS[0], ("ns1", bad_uid, "claim-bad"), CLAIMS[2]]

    for call in (kubelet.prepare, kubelet.unprepare):
        results = call(batch)
        assert set(results) == {"uid-a", bad_uid, "uid-c"}
        assert results["uid-a"].error == results["uid-c"].error == ""
        assert "claim ns1/claim-bad" in results[bad_uid].error
        assert ("has no UID" if not bad_uid else "malformed claim UID") in results[bad_uid].error
    assert seen == [["uid-a", "uid-c"], ["uid-a", "uid-c"]]  # the bad one never reached a callback
    assert results["uid-a"].error == ""


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_cdi_device_ids_reach_kubelet(make_server, kubelets, version):
    """Device metadata (KEP-5304): the request's CDI device goes in ``Device.cdi_device_ids``
    (k8s kubeletplugin metadata.go ``processPreparedClaim``); none without it."""
    cdi = "dracni.io/metadata=uid-a_net"

    def prepare(claims):
        return {
            c.uid: PrepareOutcome(
                devices=[
                    {"request": "net", "pool": "node1", "device": "eth1", "cdiDeviceIDs": [cdi]},
                    {"request": "net2", "pool": "node1", "device": "eth2"},
                ]
            )
            for c in claims
        }

    make_server(prepare=prepare)
    with_cdi, without = registered_kubelet(kubelets, version).prepare(CLAIMS[:1])["uid-a"].devices
    assert list(with_cdi.cdi_device_ids) == [cdi]
    assert list(without.cdi_device_ids) == []
