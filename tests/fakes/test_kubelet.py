"""The fake kubelet (tests/fakes/kubelet) against a stub DRA plugin made from the same protos,
and the test API server: the upstream behaviours it models, one by one.

The stub plugin answers from a table the test sets, so each rule of manager.go and the plugin
manager is seen in isolation; the service itself meets the fake in
tests/integration/test_kubelet_pods.py.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import socket
import tempfile
import threading
import zlib
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pool

from tests.fakes.apiserver import FakeApiServer
from tests.fakes.kubelet import (
    APIS,
    V1,
    ClaimInfo,
    ClaimInfoCache,
    DeviceState,
    FakeKubelet,
    Pod,
    PodSyncError,
    RegistrationError,
)
from tests.fakes.kubelet.claiminfo import CorruptCheckpoint
from tests.fakes.kubelet.plugins import PluginManager

DRIVER = "stub.example.com"
NODE = "node-a"
PACKAGE = Path(__file__).resolve().parents[1] / "fakes" / "kubelet"


class StubPlugin:
    """A DRA plugin from the fake's own protos: ``answers[uid]`` = (devices, error) for prepare,
    ``unprepare_errors[uid]`` for unprepare; ``skip`` UIDs get no entry; ``calls`` records claims."""

    def __init__(self, root: str, driver: str = DRIVER, endpoint_name: str = "dra.sock", reg_name: str | None = None):
        self.driver = driver
        self.endpoint = os.path.join(root, "plugins", driver, endpoint_name)
        self.registration = os.path.join(root, "registry", reg_name or f"{driver}-reg.sock")
        os.makedirs(os.path.dirname(self.endpoint), exist_ok=True)
        os.makedirs(os.path.dirname(self.registration), exist_ok=True)
        self.answers: dict[str, tuple[list[tuple[str, str]], str]] = {}
        self.unprepare_errors: dict[str, str] = {}
        self.skip: set[str] = set()
        self.calls: list[tuple[str, list[str]]] = []
        self.notified: list[tuple[bool, str]] = []
        self.dra = grpc.server(futures.ThreadPoolExecutor(4))
        self.reg = grpc.server(futures.ThreadPoolExecutor(2))
        api, reg = APIS.dra[V1], APIS.registration

        def prepare(request, context):
            self.calls.append(("prepare", [c.name for c in request.claims]))
            out = api.NodePrepareResourcesResponse()
            for c in request.claims:
                if c.uid in self.skip:
                    continue
                devices, error = self.answers.get(c.uid, ([("p", "d")], ""))
                entry = out.claims[c.uid]
                entry.error = error
                if not error:
                    entry.devices.extend(
                        api.Device(pool_name=p, device_name=d, request_names=["r"]) for p, d in devices
                    )
            return out

        def unprepare(request, context):
            self.calls.append(("unprepare", [c.name for c in request.claims]))
            out = api.NodeUnprepareResourcesResponse()
            for c in request.claims:
                out.claims[c.uid].error = self.unprepare_errors.get(c.uid, "")
            return out

        def handlers(package, service, methods):
            return grpc.method_handlers_generic_handler(
                f"{package}.{service}",
                {
                    name: grpc.unary_unary_rpc_method_handler(
                        fn, request_deserializer=req.FromString, response_serializer=resp.SerializeToString
                    )
                    for name, (fn, req, resp) in methods.items()
                },
            )

        self.dra.add_generic_rpc_handlers(
            (
                handlers(
                    api.package,
                    "DRAPlugin",
                    {
                        "NodePrepareResources": (
                            prepare,
                            api.NodePrepareResourcesRequest,
                            api.NodePrepareResourcesResponse,
                        ),
                        "NodeUnprepareResources": (
                            unprepare,
                            api.NodeUnprepareResourcesRequest,
                            api.NodeUnprepareResourcesResponse,
                        ),
                    },
                ),
            )
        )

        def get_info(request, context):
            return reg.PluginInfo(type="DRAPlugin", name=self.driver, endpoint=self.endpoint, supported_versions=[V1])

        def notify(request, context):
            self.notified.append((request.plugin_registered, request.error))
            return reg.RegistrationStatusResponse()

        self.reg.add_generic_rpc_handlers(
            (
                handlers(
                    reg.package,
                    "Registration",
                    {
                        "GetInfo": (get_info, reg.InfoRequest, reg.PluginInfo),
                        "NotifyRegistrationStatus": (notify, reg.RegistrationStatus, reg.RegistrationStatusResponse),
                    },
                ),
            )
        )

    def start(self) -> StubPlugin:
        self.dra.add_insecure_port("unix:" + self.endpoint)
        self.dra.start()
        self.reg.add_insecure_port("unix:" + self.registration)
        self.reg.start()
        return self

    def stop(self) -> None:
        self.reg.stop(0).wait()
        self.dra.stop(0).wait()
        for path in (self.registration, self.endpoint):
            if os.path.exists(path):
                os.unlink(path)


@pytest.fixture
def root():
    d = tempfile.mkdtemp(dir="/tmp", prefix="fk-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def stubs(root):
    made: list[StubPlugin] = []

    def make(**kw) -> StubPlugin:
        stub = StubPlugin(root, **kw).start()
        made.append(stub)
        return stub

    yield make
    for stub in made:
        stub.stop()


@pytest.fixture
def api(tmp_path):
    server = FakeApiServer(tmp_path / "api").start()
    server.add_node(NODE)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def kubelets(root, api):
    made: list[FakeKubelet] = []

    def make(**kw) -> FakeKubelet:
        kw.setdefault("kubeconfig", api.kubeconfig_path)
        kw.setdefault("node_name", NODE)
        kw.setdefault("state_dir", os.path.join(root, "kubelet"))
        kubelet = FakeKubelet(os.path.join(root, "registry"), **kw)
        made.append(kubelet)
        return kubelet

    yield make
    for kubelet in made:
        kubelet.close()


def claim(api, name: str, pods: list[str], drivers: tuple[str, ...] = (DRIVER,)) -> dict:
    api.create_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "c"}}]}},
        }
    )
    allocation = {
        "devices": {
            "results": [{"request": "r", "driver": d, "pool": NODE, "device": f"dev{i}"} for i, d in enumerate(drivers)]
        }
    }
    reserved = [{"resource": "pods", "name": f"pod-{uid[:4]}", "uid": uid} for uid in pods]
    api.set_claim_allocation("default", name, allocation, reserved)
    return api.get_claim("default", name)


def uid_of(obj: dict) -> str:
    return obj["metadata"]["uid"]


# -- how the fake is built ------------------------------------------------------------------------
def test_the_fake_imports_nothing_from_dracni():
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            assert not [n for n in names if n.split(".")[0] == "dracni"], f"{path.name} imports {names}"


def test_protos_are_compiled_from_spec_into_a_private_pool():
    v1 = APIS.dra[V1]
    assert v1.file.name == "k8s.io/kubelet/pkg/apis/dra/v1/api.proto"
    assert v1.file.pool is not descriptor_pool.Default()
    assert v1.Device.DESCRIPTOR.fields_by_name["share_id"].number == 5
    assert "share_id" not in APIS.dra["v1beta1.DRAPlugin"].Device.DESCRIPTOR.fields_by_name
    assert APIS.registration.PluginInfo.DESCRIPTOR.full_name == "pluginregistration.PluginInfo"


# -- plugin watcher and reconciler ---------------------------------------------------------------
def test_every_socket_but_dot_files_is_a_plugin_to_register(root):
    registry = Path(root) / "registry"
    (registry / "sub").mkdir(parents=True)
    for path in (registry / "a.sock", registry / ".hidden.sock", registry / "sub" / "b"):
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))
    (registry / "not-a-socket").write_text("")
    manager = PluginManager(str(registry))
    assert sorted(manager.registration_sockets()) == [str(registry / "a.sock"), str(registry / "sub" / "b")]


def test_a_plugin_whose_socket_goes_away_is_unregistered_and_a_new_one_registered(stubs, kubelets):
    kubelet = kubelets()
    first = stubs()
    kubelet.wait_for_plugin(timeout=10)
    assert first.notified == [(True, "")]
    first.stop()
    kubelet.manager.reconcile()
    assert kubelet.plugins == {}
    second = stubs()
    plugin = kubelet.wait_for_plugin(timeout=10)
    assert plugin.endpoint == second.endpoint and second.notified == [(True, "")]


def test_a_refused_plugin_is_told_why(stubs, kubelets):
    stub = stubs()
    with pytest.raises(RegistrationError, match="plugin validation failed with err: .*not the expected driver"):
        kubelets(driver="someone-else.io").wait_for_plugin(timeout=10)
    assert stub.notified[0][0] is False and "not the expected driver" in stub.notified[0][1]


def test_one_endpoint_per_driver(root, stubs, kubelets):
    stub = stubs()
    kubelet = kubelets()
    kubelet.wait_for_plugin(timeout=10)
    # A second registration socket naming the same endpoint: add() refuses it.
    twin = StubPlugin(root, reg_name="twin-reg.sock")
    twin.endpoint = stub.endpoint
    twin.reg.add_insecure_port("unix:" + twin.registration)
    twin.reg.start()
    try:
        with pytest.raises(RegistrationError, match=f"endpoint {stub.endpoint} already registered"):
            kubelet.wait_for_plugin(timeout=10)
        assert twin.notified == [
            (
                False,
                f"RegisterPlugin error -- plugin registration failed with err: endpoint {stub.endpoint} already registered for DRA driver plugin {DRIVER}",
            )
        ]
    finally:
        twin.reg.stop(0).wait()


def test_get_plugin_prefers_the_newest_connected_plugin(root, stubs, kubelets):
    kubelet = kubelets()
    old = stubs()
    kubelet.wait_for_plugin(timeout=10)
    new = stubs(endpoint_name="dra2.sock", reg_name="new-reg.sock")
    kubelet.wait_for_plugin(timeout=10)
    assert kubelet.plugin(DRIVER).endpoint == new.endpoint
    new.dra.stop(0).wait()  # the newest plugin's connection ends; its registration stays
    kubelet.manager.monitor_connections()
    assert kubelet.plugin(DRIVER).endpoint == old.endpoint


def test_a_driver_without_a_connected_plugin_is_wiped_after_the_delay_unless_it_comes_back(root, stubs):
    wiped: list[str] = []
    done = threading.Event()
    manager = PluginManager(
        os.path.join(root, "registry"), wipe=lambda d: (wiped.append(d), done.set()), wiping_delay=0.3
    )
    try:
        first = stubs()
        manager.reconcile()
        first.stop()
        manager.reconcile()  # socket gone: DeRegisterPlugin -> sync -> wipe queued
        assert manager.pending_wipes() == [DRIVER]
        second = stubs()
        manager.reconcile()  # back in time: cancelled
        assert manager.pending_wipes() == []
        assert not done.wait(0.6) and wiped == []

        second.stop()
        manager.reconcile()
        assert done.wait(5) and wiped == [DRIVER]
    finally:
        manager.stop()


def test_a_connection_that_ends_queues_a_wipe_even_with_the_registration_socket_left(root, stubs):
    """HandleConn: the endpoint stops answering (a crashed plugin leaves its registration
    socket behind) -> the driver is unusable -> sync queues a wipe; connected again cancels it."""
    manager = PluginManager(os.path.join(root, "registry"), wipe=lambda d: None, wiping_delay=60)
    try:
        stub = stubs()
        manager.reconcile()
        assert manager.pending_wipes() == []
        stub.dra.stop(0).wait()
        manager.monitor_connections()
        assert manager.pending_wipes() == [DRIVER] and list(manager.registered) == [stub.registration]
        stub.dra = StubPlugin(root).dra  # the same endpoint serves again
        stub.dra.add_insecure_port("unix:" + stub.endpoint)
        stub.dra.start()
        manager.monitor_connections()
        assert manager.pending_wipes() == []
    finally:
        manager.stop()


def test_unsupported_services_are_refused(root, stubs, kubelets):
    stub = stubs()
    with pytest.raises(RegistrationError, match="none of services supported by the plugin"):
        kubelets(force_v1beta1=True).wait_for_plugin(timeout=10)
    assert stub.notified[0] == (
        False,
        f"RegisterPlugin error -- plugin validation failed with err: invalid supported gRPC versions of DRA "
        f"driver plugin {DRIVER} at endpoint {stub.endpoint}: none of services supported by the plugin "
        '(["v1.DRAPlugin"]) are supported by the kubelet (["v1beta1.DRAPlugin"])',
    )


# -- the DRA manager ------------------------------------------------------------------------------
def test_the_first_failing_entry_aborts_the_pod_and_keeps_what_upstream_keeps(api, stubs, kubelets):
    stub = stubs()
    kubelet = kubelets()
    kubelet.wait_for_plugin(timeout=10)
    pod_uid = "11111111-1111-1111-1111-111111111111"
    a, b = claim(api, "a", [pod_uid]), claim(api, "b", [pod_uid])
    stub.answers[uid_of(b)] = ([], "b is broken")
    pod = Pod(pod_uid, "default", "p", ("a", "b"))

    with pytest.raises(
        PodSyncError, match="prepare dynamic resources: NodePrepareResources failed for ResourceClaim b: b is broken"
    ):
        kubelet.prepare_pod(pod)
    info_a, info_b = kubelet.cache.get("a", "default"), kubelet.cache.get("b", "default")
    # Entries are read in response order (a map: any order) up to the first error; A's devices
    # are in the cache when its entry came first.  Nothing is prepared.
    order = list(kubelet.calls[0].results or {})
    kept = ["d"] if order.index(uid_of(a)) < order.index(uid_of(b)) else []
    assert [d.device_name for d in info_a.driver_state[DRIVER]] == kept and not info_a.prepared
    assert info_b.driver_state[DRIVER] == [] and not info_b.prepared
    assert info_a.pod_uids == info_b.pod_uids == {pod_uid}

    del stub.answers[uid_of(b)]
    kubelet.prepare_pod(pod)
    assert stub.calls == [("prepare", ["a", "b"]), ("prepare", ["a", "b"])]
    assert info_a.prepared and info_b.prepared
    # addDevice appends: a device kept from the failed round is there twice, as in upstream's cache.
    assert [d.device_name for d in info_a.driver_state[DRIVER]] == [*kept, "d"]


def test_a_response_that_skips_a_claim_fails_the_pod(api, stubs, kubelets):
    stub = stubs()
    kubelet = kubelets()
    kubelet.wait_for_plugin(timeout=10)
    pod_uid = "22222222-2222-2222-2222-222222222222"
    claim(api, "a", [pod_uid])
    b = claim(api, "b", [pod_uid])
    stub.skip.add(uid_of(b))
    with pytest.raises(PodSyncError, match="NodePrepareResources skipped 1 ResourceClaims"):
        kubelet.prepare_pod(Pod(pod_uid, "default", "p", ("a", "b")))
    assert not kubelet.cache.get("a", "default").prepared


def test_validation_errors_change_nothing(api, stubs, kubelets):
    stubs()
    kubelet = kubelets()
    kubelet.wait_for_plugin(timeout=10)
    pod_uid = "33333333-3333-3333-3333-333333333333"
    claim(api, "other-driver", [pod_uid], drivers=("gone.example.com",))
    with pytest.raises(PodSyncError, match="DRA driver gone.example.com is not registered"):
        kubelet.prepare_pod(Pod(pod_uid, "default", "p", ("other-driver",)))
    with pytest.raises(PodSyncError, match="fetch ResourceClaim missing: 404"):
        kubelet.prepare_pod(Pod(pod_uid, "default", "p", ("missing",)))
    assert kubelet.calls == [] and kubelet.cache.claims == {}


def test_a_claim_recreated_under_the_same_name_is_refused_while_the_old_one_is_cached(api, stubs, kubelets):
    stubs()
    kubelet = kubelets()
    kubelet.wait_for_plugin(timeout=10)
    pod_uid = "44444444-4444-4444-4444-444444444444"
    old = claim(api, "a", [pod_uid])
    kubelet.prepare_pod(Pod(pod_uid, "default", "p", ("a",)))
    api.delete_claim("default", "a")
    claim(api, "a", [pod_uid])
    with pytest.raises(PodSyncError, match=f"old ResourceClaim with same name a and different UID {uid_of(old)}"):
        kubelet.prepare_pod(Pod(pod_uid, "default", "p", ("a",)))


def test_unprepare_of_a_gone_driver_fails_and_keeps_the_claim(api, stubs, kubelets):
    stub = stubs()
    kubelet = kubelets()
    kubelet.wait_for_plugin(timeout=10)
    pod_uid = "55555555-5555-5555-5555-555555555555"
    claim(api, "a", [pod_uid])
    pod = Pod(pod_uid, "default", "p", ("a",))
    kubelet.prepare_pod(pod)
    stub.stop()
    kubelet.manager.reconcile()
    with pytest.raises(PodSyncError, match=f"unprepare dynamic resources: DRA driver {DRIVER} is not registered"):
        kubelet.unprepare_pod(pod)
    assert kubelet.cache.get("a", "default") is not None


def test_the_reconcile_loop_unprepares_claims_of_pods_that_are_gone(api, stubs, kubelets):
    stub = stubs()
    kubelet = kubelets()
    kubelet.wait_for_plugin(timeout=10)
    alive, gone = "66666666-6666-6666-6666-666666666666", "77777777-7777-7777-7777-777777777777"
    shared = claim(api, "shared", [alive, gone])
    own = claim(api, "own", [gone])
    kubelet.prepare_pod(Pod(alive, "default", "alive", ("shared",)))
    kubelet.prepare_pod(Pod(gone, "default", "gone", ("shared", "own")))
    stub.unprepare_errors[uid_of(own)] = "busy"

    assert "NodeUnprepareResources failed for ResourceClaim own: busy" in kubelet.reconcile_pods([alive])[gone]
    assert kubelet.cache.get("own", "default") is not None  # kept for the next pass
    del stub.unprepare_errors[uid_of(own)]
    assert kubelet.reconcile_pods([alive]) == {}
    assert kubelet.cache.get("own", "default") is None
    assert kubelet.cache.get("shared", "default").pod_uids == {alive}  # still used: not unprepared
    assert [names for kind, names in stub.calls if kind == "unprepare"] == [["own"], ["own"]]
    assert uid_of(shared) not in {u for c in kubelet.calls_of("NodeUnprepareResources") for _, u, _ in c.claims}


# -- the checkpoint -------------------------------------------------------------------------------
def test_the_checkpoint_is_upstreams_format_and_restores_claims_unprepared(root):
    state = os.path.join(root, "kubelet")
    cache = ClaimInfoCache(state)
    info = ClaimInfo("uid-1", "a", "default", {"pod-1"}, {DRIVER: [DeviceState("p", "d", ["r"], [], "share")]})
    info.prepared = True
    cache.add(info)
    cache.sync_to_checkpoint()

    blob = json.loads(Path(state, "dra_manager_state").read_text())
    assert blob["Checksum"] == zlib.crc32(blob["Data"].encode())
    data = json.loads(blob["Data"])
    assert (data["kind"], data["apiVersion"]) == ("DRACheckpoint", "checkpoint.dra.kubelet.k8s.io/v1")
    assert data["Entries"][0]["PodUIDs"] == {"pod-1": {}}
    assert data["Entries"][0]["DriverState"][DRIVER]["Devices"][0]["ShareID"] == "share"

    restored = ClaimInfoCache(state).get("a", "default")
    assert restored is not None and not restored.prepared
    assert (restored.claim_uid, restored.pod_uids, restored.driver_state) == ("uid-1", {"pod-1"}, info.driver_state)

    Path(state, "dra_manager_state").write_text(json.dumps({**blob, "Checksum": blob["Checksum"] ^ 1}))
    with pytest.raises(CorruptCheckpoint):
        ClaimInfoCache(state)
