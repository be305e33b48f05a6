"""Run the frozen ``dracni kubelet-plugin`` against the fake API server, with a fake kubelet."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from tests import procs
from tests.fakes.apiserver import FakeApiServer
from tests.fakes.kubelet import FakeKubelet, RegistrationError
from tests.harness import DRACNI_BINARY, Lab, attachment_params
from tests.integration.in_cluster import InCluster

DRIVER = "dracni.io"
NODE = "node-a"


#: One sample of a metrics text: its name and its labels, sorted.
Sample = tuple[str, tuple[tuple[str, str], ...]]


def metric_samples(text: str) -> dict[Sample, float]:
    """Every sample of a Prometheus text exposition (the service's ``/metrics``), parsed by
    prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServiceProcess:
    """The DaemonSet's main process: the frozen bundle, NICs discovered in the lab's host netns.

    ``kubelet`` plays the node's kubelet: it registers the plugin each time the service starts
    (kubelet's plugin watcher does so when the registration socket appears), and the service is
    ready only once registered.  The service runs in a process group of its own: ``stop()``
    kills what it left in it, and ``close()`` fails on such ``leftovers`` (a forked child that
    outlived the service).
    """

    def __init__(
        self,
        lab: Lab,
        api: FakeApiServer,
        kubeconfig: str | None = None,
        extra_args: tuple[str, ...] = (),
        node: str = NODE,
        kubelet: Callable[[Path], FakeKubelet] | None = None,
        instance: str | None = None,
        beside: ServiceProcess | None = None,
        program: tuple[str, ...] | None = None,
        in_cluster: bool = False,
    ) -> None:
        self.lab = lab
        #: what runs instead of the frozen bundle (``make bench``'s profile: the source tree under
        #: a profiler), the service's options after it
        self.program = program or (str(DRACNI_BINARY),)
        self.node = node
        self.extra_args = extra_args  # more options for kubelet-plugin (sharing, policy)
        self.api = api
        self.kubeconfig = kubeconfig or api.kubeconfig_path  # another one: e.g. through a proxy
        #: ``in_cluster``: no kubeconfig, the in-cluster configuration of a pod (``in_cluster.py``;
        #: the API server must serve TLS)
        self.in_cluster = InCluster(api, lab.tmp / "in-cluster") if in_cluster else None
        #: ``--instance-id`` (the pod UID of a rolling update); ``beside``: another instance of the
        #: same node, whose socket dirs and kubelet this one shares (and leaves to it to close)
        self.instance = instance
        self.beside = beside
        # Unix socket paths must stay under 108 bytes: a short dir under /tmp.
        self.sockets = beside.sockets if beside else Path(tempfile.mkdtemp(prefix="dr-", dir="/tmp"))
        self.registry_dir = self.sockets / "reg"
        self.plugins_dir = self.sockets / "plugins"
        self.health_port = free_port()
        self.log_path = lab.tmp / (f"service-{instance}.log" if instance else "service.log")
        self.proc: subprocess.Popen | None = None
        # ``kubelet(registry_dir)`` makes the node's kubelet (default: one without an API client)
        if beside is not None:
            self.kubelet = beside.kubelet
        else:
            self.kubelet = kubelet(self.registry_dir) if kubelet else FakeKubelet(str(self.registry_dir), driver=DRIVER)
        self.leftovers: list[str] = []  # what stop() found (and killed) in the service's process group

    def start(self, wait_ready: bool = True) -> None:
        if self.proc is not None and self.proc.poll() is None:
            raise AssertionError(f"the service (pid {self.proc.pid}) is already running")
        cmd = [
            *self.program,
            "kubelet-plugin",
            f"--driver={DRIVER}",
            f"--node-name={self.node}",
            *([] if self.in_cluster else [f"--kubeconfig={self.kubeconfig}"]),
            f"--state-dir={self.lab.state_dir}",
            f"--registry-dir={self.registry_dir}",
            f"--plugins-dir={self.plugins_dir}",
            f"--health-address=127.0.0.1:{self.health_port}",
            f"--nic-netns={self.lab.host.path}",
            "--log-level=debug",
            # The lab's NIC stand-ins are veths, which a node's defaults rightly exclude.
            "--nic-include=eth1",
            "--nic-include=eth2",
            "--nic-include=eth9",
            *([f"--instance-id={self.instance}"] if self.instance else []),
            *self.extra_args,
        ]
        if self.in_cluster:
            cmd = self.in_cluster.command(cmd)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=log,
                process_group=0,
                env={
                    k: v for k, v in os.environ.items() if not k.startswith("KUBE") and k != "GRPC_ENABLE_FORK_SUPPORT"
                }
                | (self.in_cluster.environment() if self.in_cluster else {}),
            )
        if wait_ready:
            try:
                self.wait_ready()
            except BaseException:
                self.stop()
                raise

    def readyz(self) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=1) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError as exc:
            return 0, str(exc)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/metrics", timeout=2) as r:
            return r.read().decode()

    def samples(self) -> dict[Sample, float]:
        """``metrics()``, parsed (``metric_samples``)."""
        return metric_samples(self.metrics())

    def wait_ready(self, timeout: float = 20) -> None:
        """Register the plugin with ``kubelet`` once its socket appears, then wait for /readyz.

        The service is ready only once a kubelet has registered it, so /readyz 200 also covers a
        kubelet whose own loop (``start()``) registered the plugin first.
        """
        deadline = time.monotonic() + timeout
        registered = False
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"service exited with {self.proc.returncode}:\n{self.log()}")
            if not registered:
                try:
                    self.kubelet.wait_for_plugin(timeout=0)
                    registered = True
                except RegistrationError:
                    pass  # no socket yet, or not answering yet: kubelet retries too
            if self.readyz()[0] == 200:
                return
            time.sleep(0.05)
        raise AssertionError(f"service not ready in {timeout}s: {self.readyz()}\n{self.log()}")

    def stop(self) -> int:
        """SIGTERM, SIGKILL after 15 s; then kill what is left in the service's process group."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        group = self._group()
        self.leftovers += [p.describe() for p in group]
        procs.kill(group)
        return self.proc.returncode

    def _group(self, settle: float = 1.0) -> list[procs.Proc]:
        """The service's process group once its members had ``settle`` seconds to go."""
        deadline = time.monotonic() + settle
        while True:
            group = [p for p in procs.snapshot().values() if p.pgid == self.proc.pid and p.state != "Z"]
            if not group or time.monotonic() > deadline:
                return group
            time.sleep(0.02)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def close(self) -> None:
        try:
            self.stop()
        finally:
            if self.beside is None:
                self.kubelet.close()
                shutil.rmtree(self.sockets, ignore_errors=True)
            if self.in_cluster:
                self.in_cluster.close()
        if self.leftovers:
            raise AssertionError(f"the service left processes running (killed): {self.leftovers}")


@contextlib.contextmanager
def side_by_side(
    lab: Lab, api: FakeApiServer, old_uid: str, new_uid: str, kubelet: Callable[[Path], FakeKubelet] | None = None
) -> Iterator[tuple[ServiceProcess, ServiceProcess]]:
    """Two instances of the service on one node, as a DaemonSet's surge makes them (neither
    started): the old one (with ``kubelet``, see ``ServiceProcess``) and the new one beside it.
    Both are closed at the end, the new one first (each fails on processes it left)."""
    lab.write_conflist()
    old = ServiceProcess(lab, api, instance=old_uid, kubelet=kubelet)
    new = ServiceProcess(lab, api, instance=new_uid, beside=old)
    try:
        yield old, new
    finally:
        try:
            new.close()
        finally:
            old.close()


def macvlan_params(
    lab: Lab, *, subnet: str = "10.10.1.0/24", master: str = "eth1", if_name: str | None = None, network: str = "mv"
) -> dict:
    plugin = {
        "type": "macvlan",
        "master": master,
        "mode": "bridge",
        "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]], "dataDir": str(lab.ipam_dir)},
    }
    return attachment_params([plugin], name=network, if_name=if_name)


def create_allocated_claim(
    api: FakeApiServer,
    name: str,
    pod_uid: str,
    params: dict,
    *,
    device: str = "eth1",
    namespace: str = "default",
    pod_name: str = "demo",
    annotations: dict | None = None,
    source: str = "FromClass",
    class_params: dict | None = None,
    share_id: str | None = None,
    node: str = NODE,
) -> dict:
    """A claim as a user writes it, then allocated and reserved as the scheduler does (on ``node``).

    ``params`` are the DeviceClass's network (``FromClass``: the allocation carries the class's
    config, the claim none) or the claim's own config (``FromClaim``), then with
    ``class_params`` as its DeviceClass's network.
    """
    opaque = {"driver": DRIVER, "parameters": params}
    spec_config = [{"requests": ["net"], "opaque": opaque}] if source == "FromClaim" else []
    class_config = (
        [{"source": "FromClass", "requests": ["net"], "opaque": {"driver": DRIVER, "parameters": class_params}}]
        if class_params is not None
        else []
    )
    api.create_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, **({"annotations": annotations} if annotations else {})},
            "spec": {
                "devices": {
                    "requests": [{"name": "net", "exactly": {"deviceClassName": DRIVER}}],
                    "config": spec_config,
                }
            },
        }
    )
    allocation = {
        "devices": {
            "results": [
                {"request": "net", "driver": DRIVER, "pool": node, "device": device}
                | ({"shareID": share_id, "consumedCapacity": {f"{DRIVER}/attachments": "1"}} if share_id else {})
            ],
            "config": [*class_config, {"source": source, "requests": ["net"], "opaque": opaque}],
        },
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        },
    }
    api.set_claim_allocation(namespace, name, allocation, [{"resource": "pods", "name": pod_name, "uid": pod_uid}])
    return api.get_claim(namespace, name)


def claim_ref(claim: dict) -> tuple[str, str, str]:
    meta = claim["metadata"]
    return meta["namespace"], meta["uid"], meta["name"]


def our_status(api: FakeApiServer, claim: dict) -> list[dict]:
    current = api.get_claim(claim["metadata"]["namespace"], claim["metadata"]["name"]) or {}
    return [d for d in (current.get("status") or {}).get("devices") or [] if d.get("driver") == DRIVER]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.01):
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    while True:
        value = predicate()
        if value:
            return value, time.monotonic() - started
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def new_pod_uid() -> str:
    return str(uuid.uuid4())


def dump(obj) -> str:
    return json.dumps(obj, indent=2)


__all__ = [
    "DRIVER",
    "NODE",
    "FakeApiServer",
    "FakeKubelet",
    "ServiceProcess",
    "side_by_side",
    "claim_ref",
    "create_allocated_claim",
    "macvlan_params",
    "our_status",
    "wait_for",
    "new_pod_uid",
    "dump",
]
