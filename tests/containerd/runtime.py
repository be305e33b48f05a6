"""A real container runtime for the tests and ``make bench`` (f): Debian's containerd 1.6 + runc.

One home for the set-up shared by ``tests/containerd/`` and ``tests/tools/bench.py``:

- ``pause_image``: the sandbox image, built here from Debian's ``busybox-static`` (a rootfs of
  one static binary, ``sleep`` as the entrypoint) and packed as a docker archive with tarfile,
  json and hashlib; cached under ``.cache/`` by content.
- ``Node``: a throwaway "node" network namespace (the parent NIC of macvlan is a link in it),
  private CNI bin and conf dirs (Debian's plugins linked in, the primary conflist with
  host-local in a temp ``dataDir``, ``dracni install`` of the frozen bundle), dracni's state and
  claim manifest dirs.
- ``Containerd``: containerd started in that namespace with ``nsenter --net`` (``ip netns
  exec`` would remount /sys), with a private root, state, socket and config; the image
  imported with ``ctr``.  ``stop`` ends containerd, the shims and the pause processes they
  started, and unmounts what they left, also after a failure.
- ``Cri``: the CRI v1 RuntimeService over gRPC, its messages compiled on first use from
  ``tests/containerd/proto/k8s.io/cri-api/pkg/apis/runtime/v1/api.proto`` (a subset of
  upstream's, same field numbers; not under spec/, whose files ship in the bundle: dracni does
  not speak CRI), nothing shared with dracni.

Everything lives in one temp dir and the node's netns; nothing touches the host network.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from tests import procs
from tests.fakes.kubelet.protos import Api, compile_protos
from tests.harness import DEBIAN_CNI_DIR, REPO, Netns, dracni_cli, ip, run

CRI_PROTO = ("k8s.io/cri-api/pkg/apis/runtime/v1/api.proto", "runtime.v1")
PROTO_DIR = Path(__file__).resolve().parent / "proto"
IMAGE = "dracni.test/pause:busybox"
BUSYBOX = Path("/bin/busybox")
CACHE = REPO / ".cache" / "containerd"
DRACNI_CONF_FILE = "00-dracni.conflist"  # dracni.defaults.CONF_FILE: what `dracni install` writes
PRIMARY_CONF_FILE = "10-podnet.conflist"
POD_SUBNET = "10.88.0.0/16"


def missing_tools() -> str | None:
    """Why this machine cannot run containerd pods, or None."""
    for tool in ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (make sysdeps installs Debian's containerd, runc)"
    if not BUSYBOX.exists():
        return f"{BUSYBOX} is missing (Debian's busybox-static builds the sandbox image)"
    if os.geteuid() != 0:
        return "containerd needs root"
    if not any(line.split()[2] in ("cgroup", "cgroup2") for line in Path("/proc/self/mounts").read_text().splitlines()):
        return "no cgroup filesystem mounted: runc cannot start a sandbox"
    return None


# -- the sandbox image ---------------------------------------------------------------------------
def _tar_bytes(members: Iterable[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _dir(name: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    return info, None


def pause_image() -> Path:
    """A docker archive (``ctr images import`` reads it) of a one-layer image: busybox-static
    as /bin/busybox, ``busybox sleep 2147483647`` as the sandbox's process.  Built once per
    busybox binary, kept under ``.cache/containerd/``."""
    busybox = BUSYBOX.read_bytes()
    key = hashlib.sha256(busybox + IMAGE.encode()).hexdigest()[:16]
    archive = CACHE / f"pause-{key}.tar"
    if archive.exists():
        return archive
    binary = tarfile.TarInfo("bin/busybox")
    binary.mode, binary.size = 0o755, len(busybox)
    layer = _tar_bytes([_dir("bin"), (binary, busybox), _dir("dev"), _dir("etc"), _dir("proc"), _dir("sys")])
    layer_digest = hashlib.sha256(layer).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": ["/bin/busybox", "sleep", "2147483647"], "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
        },
        sort_keys=True,
    ).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = json.dumps(
        [{"Config": config_name, "RepoTags": [IMAGE], "Layers": [f"{layer_digest}/layer.tar"]}]
    ).encode()
    files = [(config_name, config), (f"{layer_digest}/layer.tar", layer), ("manifest.json", manifest)]
    members = [_dir(layer_digest)]
    for name, data in files:
        info = tarfile.TarInfo(name)
        info.mode, info.size = 0o644, len(data)
        members.append((info, data))
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(_tar_bytes(members))
    tmp.rename(archive)
    return archive


# -- the CRI client --------------------------------------------------------------------------------
_CRI: Api | None = None


def cri_api() -> Api:
    global _CRI
    if _CRI is None:
        _CRI = Api(compile_protos([CRI_PROTO[0]], include=PROTO_DIR), *CRI_PROTO)
    return _CRI


@dataclass(frozen=True)
class Sandbox:
    id: str
    name: str
    uid: str
    namespace: str


class Cri:
    """kubelet's side of the RuntimeService, for pod sandboxes only."""

    def __init__(self, socket: Path, log_root: Path) -> None:
        self.api = cri_api()
        self.log_root = log_root
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        self._calls: dict[str, Any] = {}

    def _call(self, method: str, request: Any, timeout: float = 60) -> Any:
        if method not in self._calls:
            self._calls[method] = self.api.unary(self.channel, "RuntimeService", method)
        return self._calls[method](request, timeout=timeout)

    def version(self, timeout: float = 5) -> Any:
        return self._call("Version", self.api.VersionRequest(version="v1"), timeout=timeout)

    def run_pod(self, name: str, uid: str | None = None, namespace: str = "default") -> Sandbox:
        """RunPodSandbox the way kubelet fills the config for a pod in the pod network
        (pkg/kubelet/kuberuntime/kuberuntime_sandbox.go generatePodSandboxConfig and
        generatePodSandboxLinuxConfig, labels.go newPodLabels; trimmed to what containerd reads)."""
        uid = uid or str(uuid.uuid4())
        api = self.api
        config = api.PodSandboxConfig(
            metadata=api.PodSandboxMetadata(name=name, uid=uid, namespace=namespace, attempt=0),
            hostname=name,
            log_directory=str(self.log_root / f"{namespace}_{name}_{uid}"),
            labels={
                "io.kubernetes.pod.name": name,
                "io.kubernetes.pod.namespace": namespace,
                "io.kubernetes.pod.uid": uid,
            },
            linux=api.LinuxPodSandboxConfig(
                security_context=api.LinuxSandboxSecurityContext(
                    namespace_options=api.NamespaceOption(network=0, pid=1, ipc=0)  # POD, CONTAINER, POD
                )
            ),
        )
        reply = self._call("RunPodSandbox", api.RunPodSandboxRequest(config=config))
        return Sandbox(id=reply.pod_sandbox_id, name=name, uid=uid, namespace=namespace)

    def status(self, sandbox_id: str) -> tuple[Any, dict[str, Any]]:
        """The sandbox's CRI status and containerd's verbose ``info`` (parsed JSON)."""
        reply = self._call(
            "PodSandboxStatus", self.api.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id, verbose=True)
        )
        return reply.status, json.loads(reply.info.get("info", "{}"))

    def netns_path(self, sandbox_id: str) -> str:
        """The sandbox's network namespace, from the runtime spec containerd reports."""
        _, info = self.status(sandbox_id)
        for ns in info["runtimeSpec"]["linux"]["namespaces"]:
            if ns["type"] == "network":
                return str(ns["path"])
        raise AssertionError(f"no network namespace in the runtime spec of {sandbox_id}")

    def stop_pod(self, sandbox_id: str) -> None:
        self._call("StopPodSandbox", self.api.StopPodSandboxRequest(pod_sandbox_id=sandbox_id))

    def remove_pod(self, sandbox_id: str) -> None:
        self._call("RemovePodSandbox", self.api.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id))

    def list_pods(self) -> list[Any]:
        return list(self._call("ListPodSandbox", self.api.ListPodSandboxRequest()).items)

    def close(self) -> None:
        self.channel.close()


# -- the node: netns, CNI dirs, dracni -------------------------------------------------------------
def add_parent_nic(ns: Netns, name: str) -> str:
    """The parent NIC of macvlan in the node's netns: a dummy link, or a veth pair where the
    kernel has no dummy driver.  Returns the kind made."""
    if ip("link", "add", name, "type", "dummy", netns=ns.name, check=False).returncode == 0:
        kind = "dummy"
    else:
        ip("link", "add", name, "type", "veth", "peer", "name", f"{name}p", netns=ns.name)
        ip("link", "set", f"{name}p", "up", netns=ns.name)
        kind = "veth"
    ip("link", "set", name, "up", netns=ns.name)
    return kind


class Node:
    """One node's world in a temp dir: netns, CNI bin/conf dirs, dracni's dirs."""

    def __init__(self, base: Path, nics: tuple[str, ...] = ("eth1",)) -> None:
        self.base = base
        self.bin_dir = base / "cni-bin"
        self.conf_dir = base / "net.d"
        self.ipam_dir = base / "ipam"
        self.state_dir = base / "dracni-state"
        self.claims_dir = base / "claims"
        self.log_file = base / "dracni.log"
        for d in (self.bin_dir, self.conf_dir, self.ipam_dir, self.claims_dir):
            d.mkdir(parents=True, exist_ok=True)
        for plugin in DEBIAN_CNI_DIR.iterdir():
            (self.bin_dir / plugin.name).symlink_to(plugin)
        self.netns = Netns("dracni-ctrd")
        try:
            self.nic_kind = {nic: add_parent_nic(self.netns, nic) for nic in nics}
        except BaseException:
            self.netns.close()
            raise

    def write_primary(self, primary: str = "bridge") -> dict:
        """The node's primary network: ``bridge`` (or ``ptp``) with host-local in a temp dataDir."""
        conf: dict = {
            "type": primary,
            "ipam": {"type": "host-local", "subnet": POD_SUBNET, "dataDir": str(self.ipam_dir)},
        }
        if primary == "bridge":
            conf.update({"bridge": "cni0", "isGateway": True, "ipMasq": False})
        conflist = {"cniVersion": "1.0.0", "name": "podnet", "plugins": [conf]}
        (self.conf_dir / PRIMARY_CONF_FILE).write_text(json.dumps(conflist, indent=2))
        return conflist

    def install(self, *extra: str, log_level: str | None = "debug") -> subprocess.CompletedProcess:
        """``dracni install`` of the frozen bundle into the bin dir, chaining dracni after the primary.

        The tests log at debug (they read what dracni did); the bench installs as the DaemonSet
        does (``log_level=None``): a debug log makes every call go through the Python path.
        """
        level = [f"--log-level={log_level}"] if log_level else []
        return self.dracni(
            "install", f"--bin-dir={self.bin_dir}", f"--conf-dir={self.conf_dir}", f"--state-dir={self.state_dir}",
            f"--log-file={self.log_file}", *level, *extra,
        )  # fmt: skip

    def dracni(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return dracni_cli(*args, check=check)

    def prepare(self, *claims: dict, check: bool = True) -> subprocess.CompletedProcess:
        """kubelet's NodePrepareResources, clusterless: manifests in, ``dracni prepare``."""
        from tests.harness import write_manifest

        for claim in claims:
            write_manifest(self.claims_dir, claim)
        return self.dracni(
            "prepare", str(self.claims_dir), f"--state-dir={self.state_dir}", f"--nic-netns={self.netns.path}",
            check=check,
        )  # fmt: skip

    def read_log(self) -> str:
        return self.log_file.read_text() if self.log_file.exists() else ""

    def close(self) -> None:
        self.netns.close()


# -- containerd ------------------------------------------------------------------------------------
def _config(base: Path, node: Node) -> str:
    """containerd's config (version 2): everything private to ``base``, CRI with the local
    sandbox image, the ``native`` snapshotter (no overlay mounts needed), no registry."""
    return f"""version = 2
root = "{base / "root"}"
state = "{base / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.internal.v1.opt", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{base / "containerd.sock"}"

[ttrpc]
  address = "{base / "containerd.sock.ttrpc"}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  disable_apparmor = true
  stats_collect_period = 3600
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{base / "runc"}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{node.bin_dir}"
    conf_dir = "{node.conf_dir}"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{base / "certs.d"}"
"""


class Containerd:
    """containerd in the node's netns; ``stop`` leaves no process and no mount behind."""

    def __init__(self, base: Path, node: Node) -> None:
        self.base = base
        self.node = node
        self.socket = base / "containerd.sock"
        self.config = base / "config.toml"
        self.log = base / "containerd.log"
        base.mkdir(parents=True, exist_ok=True)
        self.config.write_text(_config(base, node))
        self.proc: subprocess.Popen | None = None
        self.cri: Cri | None = None

    def start(self, timeout: float = 30) -> Containerd:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                ["nsenter", f"--net={self.node.netns.path}", "containerd", "--config", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.cri = Cri(self.socket, self.base / "pod-logs")
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"containerd exited ({self.proc.returncode}):\n{self.tail_log()}")
            try:
                self.cri.version(timeout=1)
                break
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"containerd did not answer CRI Version in {timeout}s:\n{self.tail_log()}"
                    ) from None
                time.sleep(0.05)
        return self

    def import_image(self) -> None:
        archive = pause_image()
        self.ctr("images", "import", "--snapshotter", "native", str(archive))

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return run(["ctr", "--address", str(self.socket), "-n", "k8s.io", *args], check=check)

    def tail_log(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _shims(self) -> list[procs.Proc]:
        """The shims this containerd started (their argv names its socket) and all they run."""
        table = procs.snapshot()
        shims = [p for p in table.values() if "containerd-shim" in " ".join(p.argv) and str(self.socket) in p.argv]
        found = list(shims)
        for shim in shims:
            found += procs.descendants(shim.pid, table)
        return found

    def stop_daemon(self, timeout: float = 10) -> None:
        """containerd alone (a restart): the shims and the pods keep running."""
        if self.cri is not None:
            self.cri.close()
            self.cri = None
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        """containerd, then every shim and sandbox process it left, then its mounts."""
        self.stop_daemon()
        left = self._shims()
        if left:
            sockets = [s for s in (shim_socket(p.argv) for p in left) if s is not None]  # argv: before the kill
            procs.kill(left)
            for socket in sockets:
                socket.unlink(missing_ok=True)
        unmount_under(self.base)


SHIM_SOCKETS = Path("/run/containerd/s")


def shim_socket(argv: tuple[str, ...]) -> Path | None:
    """The socket a runc v2 shim listens on, which it removes only when shut down cleanly:
    ``/run/containerd/s/<sha256(address/namespace/id)>`` (containerd 1.6
    runtime/v2/shim/util_unix.go SocketAddress).  None for a process that is not a shim."""
    if not argv or not argv[0].endswith("containerd-shim-runc-v2"):
        return None
    flags = dict(zip(argv[1::2], argv[2::2], strict=False))
    try:
        key = os.path.join(flags["-address"], flags["-namespace"], flags["-id"])
    except KeyError:
        return None
    return SHIM_SOCKETS / hashlib.sha256(key.encode()).hexdigest()


def unmount_under(path: Path) -> None:
    """Lazily unmount everything mounted under ``path`` (sandbox rootfs, /dev/shm, netns
    bind mounts), deepest first."""
    prefix = str(path.resolve()) + "/"
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for point in sorted({p for p in points if p.startswith(prefix)}, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


# -- one node with its runtime, for a test or the bench -------------------------------------------
class World:
    """A node (netns, CNI dirs, dracni installed or not) and containerd running on it."""

    def __init__(
        self,
        base: Path,
        *,
        install: bool = True,
        nics: tuple[str, ...] = ("eth1", "eth2"),
        log_level: str | None = "debug",
    ) -> None:
        self.base = base
        self.node = Node(base / "node", nics)
        self.containerd: Containerd | None = None
        try:
            self.node.write_primary()
            if install:
                self.node.install(log_level=log_level)
            self.containerd = Containerd(base / "containerd", self.node).start()
            self.containerd.import_image()
        except BaseException:
            self.close()
            raise

    @property
    def cri(self) -> Cri:
        assert self.containerd is not None and self.containerd.cri is not None, "containerd is not running"
        return self.containerd.cri

    def pod_links(self, sandbox_id: str) -> dict[str, dict]:
        """``ip -j addr`` inside the sandbox's network namespace, by interface name."""
        path = self.cri.netns_path(sandbox_id)
        out = run(["nsenter", f"--net={path}", "ip", "-j", "addr", "show"]).stdout
        return {link["ifname"]: link for link in json.loads(out or b"[]")}

    def close(self) -> None:
        try:
            if self.containerd is not None:
                self.containerd.stop()
        finally:
            self.node.close()
            unmount_under(self.base)
