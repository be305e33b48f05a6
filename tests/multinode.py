"""Several "nodes" on one L2 segment, one API server: the world of cluster-wide address pools.

A node here is a network namespace with its own ``eth1`` (a veth) and its own frozen
``dracni kubelet-plugin`` service with a fake kubelet, as tests/integration/service.py runs one
node.  Every node's ``eth1`` peer sits on one bridge in a "segment" namespace: one L2 segment,
as the nodes of a rack share one VLAN, so a pod's macvlan on node-1 reaches a pod's on node-2.

All services talk to ONE fake API server serving the AddressReservation CRD
(spec/crds/addressreservations.dracni.io.yaml) and running the shipped admission policy
(packaging/deploy/addressreservations-policy.yaml).  They share dracni's service account, as a
DaemonSet's pods do, each with a token bound to its own node (``FakeApiServer.add_token``), so
the policy sees which node writes.  Each Node object has a UID: reservations get it as owner and
the fake's garbage collector deletes them with the Node.

The nodes share one host-local ``dataDir`` (one machine; on a cluster each node has its own):
the addresses come from the pool, host-local only records what it is asked for.

Used by tests/integration/test_address_pools.py and ``make demo`` (tests/tools/demo.py).
Everything (services, netns, temp dirs) goes on ``close()``, also after a failure.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import grpc
import yaml

from tests.fakes.apiserver import FakeApiServer
from tests.harness import REPO, Lab, Netns, attachment_params, ip, run
from tests.integration.service import ServiceProcess, claim_ref, create_allocated_claim

SERVICE_ACCOUNT = "system:serviceaccount:dracni-system:dracni"  # packaging/deploy/serviceaccount.yaml
CRD = REPO / "spec" / "crds" / "addressreservations.dracni.io.yaml"
POLICY = REPO / "packaging" / "deploy" / "addressreservations-policy.yaml"
RESERVATIONS = "addressreservations"
#: The printer columns of the CRD, as ``kubectl get addressreservations`` shows them.
COLUMNS = ("NAME", "POOL", "ADDRESS", "NAMESPACE", "CLAIM", "NODE")


def load_yaml(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


def pool_network(
    pool: str,
    subnets: list[dict[str, Any]],
    *,
    ipam: str = "host-local",
    data_dir: Path | None = None,
    pinnable: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """The administrator's DeviceClass network: macvlan on the allocated NIC (no ``master``: the
    device fills it in), IPAM host-local with one range per pool subnet, or static; the
    ``addressPool`` gives its addresses (POOLS.md section 1).  ``pinnable``: the plugin declares
    the ``ips`` capability, so that claims may pin an address (``runtimeConfig.ips``)."""
    if ipam == "host-local":
        conf: dict[str, Any] = {"type": "host-local", "ranges": [[{"subnet": s["subnet"]}] for s in subnets]}
        if data_dir is not None:
            conf["dataDir"] = str(data_dir)
    else:
        conf = {"type": "static"}
    plugin: dict[str, Any] = {"type": "macvlan", "mode": "bridge", "ipam": conf}
    if pinnable:
        plugin["capabilities"] = {"ips": True}
    return attachment_params([plugin], name=pool, addressPool={"name": pool, "subnets": subnets}, **extra)


class Node:
    """One node: its netns (the Lab's host), its service and fake kubelet, its pods."""

    def __init__(self, name: str, index: int, lab: Lab, service: ServiceProcess, uid: str) -> None:
        self.name = name
        self.index = index
        self.lab = lab
        self.service = service
        self.uid = uid

    @property
    def kubelet(self) -> Any:
        return self.service.kubelet

    def record(self, claim_uid: str) -> dict[str, Any] | None:
        """The PreparedClaim record of a claim on this node (None: not prepared here)."""
        path = self.lab.state_dir / "claims" / f"{claim_uid}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def records(self) -> list[dict[str, Any]]:
        directory = self.lab.state_dir / "claims"
        return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))] if directory.exists() else []


class Cluster:
    """``nodes`` nodes on one segment against one fake API server; see the module docstring."""

    def __init__(self, base: Path | None = None, nodes: int = 3, admission: bool = True) -> None:
        self._own_tmp = base is None
        self.tmp = Path(tempfile.mkdtemp(prefix="dracni-mn-")) if base is None else Path(base)
        self.ipam_dir = self.tmp / "ipam"  # the nodes' shared host-local store (module docstring)
        self.ipam_dir.mkdir(parents=True, exist_ok=True)
        self._stack = ExitStack()
        self.nodes: list[Node] = []
        self.segment: Netns | None = None
        self.api: FakeApiServer | None = None
        try:
            self._start(nodes, admission)
        except BaseException:
            self.close()
            raise

    # -- set-up ------------------------------------------------------------------------------
    def _start(self, count: int, admission: bool) -> None:
        self.api = FakeApiServer(
            self.tmp / "apiserver",
            user=SERVICE_ACCOUNT,
            crds=load_yaml(CRD),
            admission=load_yaml(POLICY) if admission else None,
        ).start()
        self._stack.callback(self.api.close)
        self.segment = Netns("dracni-seg")
        self._stack.callback(self.segment.close)
        ip("link", "add", "br0", "type", "bridge", netns=self.segment.name)
        ip("link", "set", "br0", "up", netns=self.segment.name)
        for index in range(1, count + 1):
            self.add_node(f"node-{index}", index)

    def add_node(self, name: str, index: int) -> Node:
        assert self.api is not None and self.segment is not None
        uid = str(uuid.uuid4())
        self.api.add_node(name, uid=uid)
        lab = Lab(base=self.tmp / name, nics=())
        self._stack.callback(lab.close)
        # The node's eth1, its peer a port of the segment's bridge.
        port = f"port{index}"
        ip("link", "add", port, "type", "veth", "peer", "name", "eth1", "netns", lab.host.name, netns=self.segment.name)
        ip("link", "set", port, "master", "br0", "up", netns=self.segment.name)
        ip("link", "set", "eth1", "up", netns=lab.host.name)
        lab.write_conflist(subnet=f"10.244.{index}.0/24")
        token = self.api.add_token(node_name=name)
        kubeconfig = self.api.write_kubeconfig(self.tmp / f"kubeconfig-{name}", token=token)
        service = ServiceProcess(lab, self.api, kubeconfig=kubeconfig, node=name)
        self._stack.callback(service.close)
        service.start()
        node = Node(name, index, lab, service, uid)
        self.nodes.append(node)
        return node

    def restart(self, node: Node, *, kill: bool = False) -> None:
        """Stop the node's service (SIGKILL with ``kill``: no clean shutdown), start it again and
        wait until the kubelet's connection answers again: the kubelet keeps its channel to the
        same socket path, which gRPC reconnects after its backoff."""
        if kill:
            assert node.service.proc is not None
            node.service.proc.send_signal(signal.SIGKILL)
            node.service.proc.wait()
        node.service.stop()
        node.service.start()
        deadline = time.monotonic() + 20
        while True:
            try:
                node.kubelet.prepare([])
                return
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def close(self) -> None:
        """Stop the services, delete every netns and the temp tree (also after a failure)."""
        try:
            self._stack.close()
        finally:
            if self._own_tmp:
                shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def netns_names(self) -> list[str]:
        """Every namespace this cluster made (segment, nodes, pods)."""
        names = [self.segment.name] if self.segment else []
        for node in self.nodes:
            names += [node.lab.host.name, *(p.name for p in node.lab.pods)]
        return names

    # -- claims ------------------------------------------------------------------------------
    def claim(
        self, node: Node, name: str, network: dict[str, Any], *, namespace: str = "default", **kw: Any
    ) -> dict[str, Any]:
        """A claim of the class network ``network``, allocated ``node``'s eth1 and reserved for
        one pod (named after the claim, ``pod_uid``: a new UID unless given)."""
        assert self.api is not None
        pod_uid = kw.pop("pod_uid", None) or str(uuid.uuid4())
        return create_allocated_claim(
            self.api, name, pod_uid, network, node=node.name, namespace=namespace, pod_name=kw.pop("pod_name", name),
            **kw,
        )  # fmt: skip

    def prepare(
        self, work: Iterable[tuple[Node, dict[str, Any]]], parallel: int = 8, retry: float = 10.0
    ) -> dict[str, str]:
        """One NodePrepareResources per claim (kubelet prepares pod by pod), ``parallel`` at a
        time on all nodes at once; claim UID -> its error ("" when prepared).  A call the plugin
        does not answer (UNAVAILABLE: a restarted service while gRPC reconnects) is retried for
        ``retry`` seconds, as kubelet's pod sync retries a failed prepare."""
        return self._calls("NodePrepareResources", work, parallel, retry)

    def unprepare(
        self, work: Iterable[tuple[Node, dict[str, Any]]], parallel: int = 8, retry: float = 10.0
    ) -> dict[str, str]:
        return self._calls("NodeUnprepareResources", work, parallel, retry)

    def _calls(
        self, method: str, work: Iterable[tuple[Node, dict[str, Any]]], parallel: int, retry: float
    ) -> dict[str, str]:
        def one(item: tuple[Node, dict[str, Any]]) -> tuple[str, str]:
            node, claim = item
            uid = claim["metadata"]["uid"]
            call = node.kubelet.prepare if method == "NodePrepareResources" else node.kubelet.unprepare
            deadline = time.monotonic() + retry
            while True:
                try:
                    return uid, call([claim_ref(claim)])[uid].error
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                        raise
                time.sleep(0.2)

        with ThreadPoolExecutor(parallel) as pool:
            return dict(pool.map(one, list(work)))

    @staticmethod
    def pod_of(claim: dict[str, Any]) -> tuple[str, str]:
        """(name, uid) of the pod a claim is reserved for."""
        ref = claim["status"]["reservedFor"][0]
        return ref["name"], ref["uid"]

    def addresses(self, node: Node, claim: dict[str, Any]) -> list[str]:
        """The addresses (CIDR) the claim's pod gets on ``node``: its record's requestedIPs, else
        its pod's poolIPs."""
        record = node.record(claim["metadata"]["uid"])
        assert record is not None, f"claim {claim['metadata']['name']} is not prepared on {node.name}"
        _, pod_uid = self.pod_of(claim)
        out = []
        for device in record["devices"]:
            out += device.get("requestedIPs") or (device.get("poolIPs") or {}).get(pod_uid) or []
        return out

    # -- the API's reservations -------------------------------------------------------------
    def reservations(self, pool: str | None = None) -> list[dict[str, Any]]:
        assert self.api is not None
        found = self.api.list_custom_objects(RESERVATIONS)
        return [r for r in found if pool is None or r["spec"]["pool"] == pool]

    def table(self, pool: str | None = None) -> str:
        """The reservations as ``kubectl get addressreservations`` prints them (printer columns;
        Age left out: it changes from run to run)."""
        rows = [COLUMNS]
        for r in sorted(self.reservations(pool), key=lambda r: (r["spec"]["pool"], _sort_key(r["spec"]["address"]))):
            spec = r["spec"]
            claim = spec.get("claim") or {}
            rows.append(
                (r["metadata"]["name"], spec["pool"], spec["address"], claim.get("namespace", ""),
                 claim.get("name", ""), spec.get("node", ""))
            )  # fmt: skip
        widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
        return "\n".join("   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)

    # -- pods --------------------------------------------------------------------------------
    def add_pod(self, node: Node, claim: dict[str, Any]) -> Netns:
        """The runtime's sandbox for the claim's pod on ``node``: cnitool ADD of the node's
        network (ptp, then dracni), so the pod gets eth0 and net1."""
        name, pod_uid = self.pod_of(claim)
        sandbox = node.lab.pod(f"dracni-{node.name}")
        node.lab.cnitool("add", sandbox, pod_uid=pod_uid, pod_name=name, namespace=claim["metadata"]["namespace"])
        return sandbox

    def del_pod(self, node: Node, claim: dict[str, Any], sandbox: Netns) -> None:
        name, pod_uid = self.pod_of(claim)
        node.lab.cnitool("del", sandbox, pod_uid=pod_uid, pod_name=name, namespace=claim["metadata"]["namespace"])
        sandbox.close()
        node.lab.pods.remove(sandbox)


def net1_addresses(sandbox: Netns) -> list[str]:
    """The global addresses on a pod's net1, as CIDRs."""
    link = sandbox.links()["net1"]
    return [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", []) if a.get("scope") == "global"]


#: An ICMP echo over one interface, run inside a pod's netns (no ping binary needed): raw socket
#: bound to the interface, one echo request, wait for the reply from the target.
_PING = r"""
import os, select, socket, struct, sys, time
target, ifname, wait = sys.argv[1], sys.argv[2], float(sys.argv[3])
v6 = ":" in target
sock = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_RAW,
                     socket.IPPROTO_ICMPV6 if v6 else socket.IPPROTO_ICMP)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
ident = os.getpid() & 0xFFFF
def checksum(data):
    data += b"\0" * (len(data) % 2)
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    total = (total >> 16) + (total & 0xFFFF)
    return ~(total + (total >> 16)) & 0xFFFF
kind, reply = (128, 129) if v6 else (8, 0)
body = struct.pack("!HH", ident, 1) + b"dracni"
header = struct.pack("!BBH", kind, 0, 0)
packet = header + body if v6 else struct.pack("!BBH", kind, 0, checksum(header + body)) + body
sock.sendto(packet, (target, 0))
deadline = time.monotonic() + wait
while time.monotonic() < deadline:
    if not select.select([sock], [], [], deadline - time.monotonic())[0]:
        break
    data, peer = sock.recvfrom(2048)
    icmp = data if v6 else data[(data[0] & 0x0F) * 4:]
    if peer[0] == target and icmp[0] == reply and struct.unpack("!H", icmp[4:6])[0] == ident:
        sys.exit(0)
sys.exit(1)
"""


def ping(sandbox: Netns, address: str, tries: int = 3, wait: float = 1.0) -> bool:
    """An ICMP echo from the pod over net1 to ``address`` (its prefix dropped) answered, within
    ``tries`` attempts (the first may wait for ARP / neighbour discovery)."""
    target = address.split("/")[0]
    for _ in range(tries):
        proc = sandbox.exec(sys.executable, "-c", _PING, target, "net1", str(wait), check=False)
        if proc.returncode == 0:
            return True
    return False


def netns_left(names: list[str]) -> list[str]:
    listed = run(["ip", "netns", "list"]).stdout.decode().split()
    return [n for n in names if n in listed]


def _sort_key(address: str) -> tuple[int, int]:
    import ipaddress

    parsed = ipaddress.ip_address(address)
    return parsed.version, int(parsed)
