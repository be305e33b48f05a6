"""The fake kubelet with several instances of one DRA driver registered at once (Kubernetes
1.33+, the helper's ``RollingUpdate(podUID)``): each instance is a tiny gRPC server written
here, with upstream's per-instance names ``<driver>-<podUID>-reg.sock`` and
``dra-<podUID>.sock``.  The rules are dra_plugin_manager.go's (``add``, ``remove``, ``get``,
``HandleConn``, ``sync``): the newest registered instance gets the calls, the other one when it
goes, and the driver's ResourceSlices are wiped only once no instance is left.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent import futures

import grpc
import pytest

from tests.fakes.kubelet import APIS, V1, FakeKubelet, KubeletError, RegistrationError
from tests.fakes.test_kubelet import NODE, api, root

__all__ = ["api", "root"]  # the fixtures: a socket root under /tmp, the API server with NODE

DRIVER = "multi.example.com"
CLAIM = ("default", "uid-1", "claim-1")


def _service(package: str, service: str, methods: dict) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        f"{package}.{service}",
        {
            name: grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=req.FromString, response_serializer=resp.SerializeToString
            )
            for name, (fn, req, resp) in methods.items()
        },
    )


class Instance:
    """One pod of the driver: a registration server and a DRA v1 server, both named by pod UID;
    ``served`` lists the claim names of each call it answered."""

    def __init__(self, root: str, pod_uid: str) -> None:
        self.endpoint = os.path.join(root, "plugins", DRIVER, f"dra-{pod_uid}.sock")
        self.registration = os.path.join(root, "registry", f"{DRIVER}-{pod_uid}-reg.sock")
        os.makedirs(os.path.dirname(self.endpoint), exist_ok=True)
        os.makedirs(os.path.dirname(self.registration), exist_ok=True)
        self.served: list[list[str]] = []
        self.dra: grpc.Server | None = None
        self.reg: grpc.Server | None = None

    def start_dra(self) -> None:
        api = APIS.dra[V1]

        def prepare(request, context):
            self.served.append([c.name for c in request.claims])
            out = api.NodePrepareResourcesResponse()
            for c in request.claims:
                out.claims[c.uid].devices.append(api.Device(pool_name=NODE, device_name="d", request_names=["r"]))
            return out

        def unprepare(request, context):
            self.served.append([c.name for c in request.claims])
            out = api.NodeUnprepareResourcesResponse()
            for c in request.claims:
                out.claims[c.uid].error = ""
            return out

        self.dra = grpc.server(futures.ThreadPoolExecutor(2))
        methods = {
            "NodePrepareResources": (prepare, api.NodePrepareResourcesRequest, api.NodePrepareResourcesResponse),
            "NodeUnprepareResources": (
                unprepare,
                api.NodeUnprepareResourcesRequest,
                api.NodeUnprepareResourcesResponse,
            ),
        }
        self.dra.add_generic_rpc_handlers((_service(api.package, "DRAPlugin", methods),))
        self.dra.add_insecure_port("unix:" + self.endpoint)
        self.dra.start()

    def start_registration(self) -> None:
        reg = APIS.registration

        def get_info(request, context):
            return reg.PluginInfo(type="DRAPlugin", name=DRIVER, endpoint=self.endpoint, supported_versions=[V1])

        def notify(request, context):
            return reg.RegistrationStatusResponse()

        self.reg = grpc.server(futures.ThreadPoolExecutor(2))
        methods = {
            "GetInfo": (get_info, reg.InfoRequest, reg.PluginInfo),
            "NotifyRegistrationStatus": (notify, reg.RegistrationStatus, reg.RegistrationStatusResponse),
        }
        self.reg.add_generic_rpc_handlers((_service(reg.package, "Registration", methods),))
        self.reg.add_insecure_port("unix:" + self.registration)
        self.reg.start()

    def start(self) -> Instance:
        self.start_dra()  # the DRA server first, then registration (draplugin.go Start)
        self.start_registration()
        return self

    def unregister(self) -> None:
        """Remove only the registration socket (the first step of a clean shutdown)."""
        if self.reg is not None:
            self.reg.stop(0).wait()
            self.reg = None
        if os.path.exists(self.registration):
            os.unlink(self.registration)

    def stop_dra(self) -> None:
        if self.dra is not None:
            self.dra.stop(0).wait()
            self.dra = None
        if os.path.exists(self.endpoint):
            os.unlink(self.endpoint)

    def stop(self) -> None:
        self.unregister()
        self.stop_dra()


@pytest.fixture
def instances(root):
    made: list[Instance] = []

    def make(pod_uid: str) -> Instance:
        instance = Instance(root, pod_uid).start()
        made.append(instance)
        return instance

    yield make
    for instance in made:
        instance.stop()


@pytest.fixture
def kubelet(root, api):
    k = FakeKubelet(os.path.join(root, "registry"), kubeconfig=api.kubeconfig_path, node_name=NODE, wiping_delay=0.3)
    yield k
    k.close()


def closed_connection(exc: Exception) -> bool:
    if isinstance(exc, grpc.RpcError):
        return exc.code() == grpc.StatusCode.CANCELLED
    return isinstance(exc, KubeletError) and "is closed" in str(exc)


def driver_wipes(api) -> list:
    return [r for r in api.requests_to("DELETE", "/resourceslices") if DRIVER in r.query.get("fieldSelector", "")]


def test_each_pods_registration_socket_is_an_instance_and_the_newest_gets_the_calls(kubelet, instances):
    a = instances("pod-a")
    kubelet.wait_for_plugin()
    b = instances("pod-b")
    kubelet.wait_for_plugin()
    assert sorted(kubelet.manager.registered) == sorted([a.registration, b.registration])
    assert [p.endpoint for p in kubelet.instances(DRIVER)] == [a.endpoint, b.endpoint]
    kubelet.prepare([CLAIM], raise_on_error=True)
    kubelet.unprepare([CLAIM], raise_on_error=True)
    assert kubelet.endpoints_served() == [b.endpoint, b.endpoint]
    assert [c.endpoint for c in kubelet.calls_of("NodePrepareResources")] == [b.endpoint]
    assert a.served == [] and b.served == [["claim-1"], ["claim-1"]]


def test_the_calls_fall_back_to_the_remaining_instance_when_the_newest_unregisters(kubelet, instances, api):
    a = instances("pod-a")
    kubelet.wait_for_plugin()
    b = instances("pod-b")
    kubelet.wait_for_plugin()
    kubelet.prepare([CLAIM])
    b.unregister()  # DeRegisterPlugin -> remove: only b goes
    kubelet.manager.reconcile()
    assert [p.endpoint for p in kubelet.instances(DRIVER)] == [a.endpoint]
    kubelet.prepare([CLAIM])
    assert kubelet.endpoints_served() == [b.endpoint, a.endpoint]
    assert kubelet.manager.pending_wipes() == []  # sync: a is connected, the driver stays usable
    time.sleep(0.6)  # longer than the wiping delay
    assert kubelet.manager.wipes_fired == [] and driver_wipes(api) == []


def test_the_calls_fall_back_when_the_newest_instances_connection_ends(kubelet, instances):
    a = instances("pod-a")
    kubelet.wait_for_plugin()
    b = instances("pod-b")
    kubelet.wait_for_plugin()
    b.stop_dra()  # crashed: its registration socket stays, its endpoint no longer answers
    kubelet.manager.monitor_connections()  # HandleConn(ConnEnd) -> sync
    assert len(kubelet.instances(DRIVER)) == 2 and kubelet.plugin(DRIVER).endpoint == a.endpoint
    kubelet.prepare([CLAIM])
    assert kubelet.endpoints_served() == [a.endpoint]
    assert kubelet.manager.pending_wipes() == []
    b.start_dra()  # back: connected again, the newest again
    kubelet.manager.monitor_connections()
    kubelet.prepare([CLAIM])
    assert kubelet.endpoints_served() == [a.endpoint, b.endpoint]


def test_the_slices_are_wiped_only_after_the_last_instance_is_gone(kubelet, instances, api):
    a = instances("pod-a")
    kubelet.wait_for_plugin()
    b = instances("pod-b")
    kubelet.wait_for_plugin()
    a.stop()
    kubelet.manager.reconcile()
    time.sleep(0.6)
    assert kubelet.manager.wipes_fired == [] and driver_wipes(api) == []
    b.stop()
    kubelet.manager.reconcile()  # the last one: remove -> sync queues the wipe
    assert kubelet.manager.pending_wipes() == [DRIVER]
    deadline = time.monotonic() + 10
    while not driver_wipes(api) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [d for d, _ in kubelet.manager.wipes_fired] == [DRIVER] and len(driver_wipes(api)) == 1
    with pytest.raises(KubeletError, match=f"DRA driver {DRIVER} is not registered"):
        kubelet.prepare([CLAIM], driver=DRIVER)


def test_a_handover_under_calls_sends_each_call_to_one_of_the_instances(kubelet, instances):
    """Calls keep coming while b (newest) hands back to a: each one reaches either instance;
    once b is unregistered every call goes to a."""
    a = instances("pod-a")
    kubelet.wait_for_plugin()
    b = instances("pod-b")
    kubelet.wait_for_plugin()
    kubelet.manager.start()  # the reconciler and connection monitor run in the background
    stop = threading.Event()
    errors: list[Exception] = []

    def load() -> None:
        while not stop.is_set():
            try:
                kubelet.prepare([CLAIM], raise_on_error=True)
            except Exception as exc:  # collected for the assertion
                errors.append(exc)
            time.sleep(0.01)

    worker = threading.Thread(target=load)
    worker.start()
    try:
        time.sleep(0.3)
        b.unregister()  # clean shutdown: the registration socket first ...
        deadline = time.monotonic() + 10
        while len(kubelet.instances(DRIVER)) != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)
        b.stop_dra()  # ... the DRA server once kubelet no longer sends to it
        time.sleep(0.3)
    finally:
        stop.set()
        worker.join(10)
    served = kubelet.endpoints_served()
    # remove() closes b's connection: a call on it at that moment fails, in flight (cancelled)
    # or just sent (the connection is closed), as grpc-go's ClientConn.Close does upstream
    # (kubelet retries the pod's sync later); one call at a time here, so one at most
    assert all(closed_connection(e) for e in errors) and len(errors) <= 1, errors
    assert set(served) == {a.endpoint, b.endpoint}, (served, errors)
    switch = served.index(a.endpoint)
    assert served[:switch] == [b.endpoint] * switch and served[switch:] == [a.endpoint] * (len(served) - switch), served
    assert len(served) - len(errors) <= len(a.served) + len(b.served) <= len(served)


def test_a_recreated_registration_socket_comes_back_as_the_newest_and_an_endpoint_is_not_hijacked(
    root, kubelet, instances
):
    a = instances("pod-a")
    kubelet.wait_for_plugin()
    b = instances("pod-b")
    kubelet.wait_for_plugin()
    a.unregister()
    a.start_registration()  # the same socket path re-created: unregister first, then register
    kubelet.wait_for_plugin()
    assert [p.endpoint for p in kubelet.instances(DRIVER)] == [b.endpoint, a.endpoint]
    kubelet.prepare([CLAIM])
    assert kubelet.endpoints_served() == [a.endpoint]

    thief = Instance(root, "pod-c")
    thief.endpoint = b.endpoint  # announces another instance's endpoint: add() refuses it
    thief.start_registration()
    try:
        with pytest.raises(RegistrationError, match=f"endpoint {b.endpoint} already registered"):
            kubelet.wait_for_plugin()
    finally:
        thief.unregister()
    assert [p.endpoint for p in kubelet.instances(DRIVER)] == [b.endpoint, a.endpoint]
