"""Real-parts test harness: throwaway network namespaces, a CNI bin dir, cnitool, dracni.

The "host" side of every test runs inside its own network namespace (``ip netns exec``), so
bridges, veths, addresses and sysctls never touch the machine's real network.  Every IPAM
``dataDir`` and the dracni state dir live in a temp dir.  Everything is removed on exit, also
when a test fails.

Used by the integration tests, ``make demo`` (tests/tools/demo.py) and ``make bench``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEBIAN_CNI_DIR = Path("/usr/lib/cni")
DRACNI_BINARY = Path(os.environ.get("DRACNI_BINARY", REPO / "dist" / "dracni" / "dracni"))
CNI_TOOLS = Path(os.environ.get("CNI_TOOLS", REPO / ".cache" / "cni-tools"))
NETNS_RUN = Path("/var/run/netns")


def run(
    cmd: list[str], *, check: bool = True, input: bytes | None = None, env: dict | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, input=input, env=env, capture_output=True, check=check, timeout=timeout)


def ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    return run(prefix + ["ip", *args], check=check)


def dracni_cli(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    """The frozen bundle's operator CLI (``dracni prepare``, ``install``, ...); with ``check``, a
    failure raises with its output."""
    proc = run([str(DRACNI_BINARY), *args], check=False, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"dracni {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout.decode()}\n{proc.stderr.decode()}"
        )
    return proc


class Netns:
    """A named network namespace (``/var/run/netns/<name>``), deleted on close if we made it."""

    def __init__(self, prefix: str, existing: str | None = None) -> None:
        self.owned = existing is None
        self.name = existing or f"{prefix}-{uuid.uuid4().hex[:8]}"
        if self.owned:
            run(["ip", "netns", "add", self.name])
            ip("link", "set", "lo", "up", netns=self.name)

    @property
    def path(self) -> str:
        return str(NETNS_RUN / self.name)

    def exec(self, *cmd: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
        return run(["ip", "netns", "exec", self.name, *cmd], check=check, **kw)

    def links(self) -> dict[str, dict]:
        out = self.exec("ip", "-j", "addr", "show").stdout
        return {link["ifname"]: link for link in json.loads(out or b"[]")}

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def close(self) -> None:
        if self.owned and self.exists():
            run(["ip", "netns", "del", self.name], check=False)


def add_nics(ns: Netns, nics: tuple[str, ...]) -> None:
    """Stand-ins for a node's NICs in ``ns``: veth pairs (this kernel has no dummy links), both
    ends up; ``<nic>p`` is the peer."""
    for nic in nics:
        ip("link", "add", nic, "type", "veth", "peer", "name", f"{nic}p", netns=ns.name)
        ip("link", "set", nic, "up", netns=ns.name)
        ip("link", "set", f"{nic}p", "up", netns=ns.name)


@contextmanager
def node_netns(prefix: str, nics: tuple[str, ...] = ("eth1", "eth2")) -> Iterator[Netns]:
    """A throwaway "node" netns with ``nics`` (``add_nics``), deleted afterwards."""
    ns = Netns(prefix)
    try:
        add_nics(ns, nics)
        yield ns
    finally:
        ns.close()


class Lab:
    """One test's world: a host netns with NICs, pod netnses, a CNI bin dir and a temp tree."""

    def __init__(
        self, base: Path | None = None, nics: tuple[str, ...] = ("eth1",), host_name: str | None = None
    ) -> None:
        self._own_tmp = base is None
        self.tmp = Path(tempfile.mkdtemp(prefix="dracni-lab-")) if base is None else Path(base)
        self.state_dir = self.tmp / "state"
        self.ipam_dir = self.tmp / "ipam"
        self.netconf_dir = self.tmp / "net.d"
        self.claims_dir = self.tmp / "claims"
        self.log_file = self.tmp / "dracni.log"
        for d in (self.ipam_dir, self.netconf_dir, self.claims_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.bin_dir = self.tmp / "bin"
        self.pods: list[Netns] = []
        self.host = Netns("dracni-host", existing=host_name)
        try:
            add_nics(self.host, nics)
            self._make_bin_dir()
        except BaseException:
            self.close()
            raise

    def _make_bin_dir(self) -> None:
        """Debian's plugins, cnitool's noop and dracni, linked the way /opt/cni/bin would hold them."""
        self.bin_dir.mkdir(exist_ok=True)
        for plugin in DEBIAN_CNI_DIR.iterdir():
            (self.bin_dir / plugin.name).symlink_to(plugin)
        if (CNI_TOOLS / "noop").exists():
            (self.bin_dir / "noop").symlink_to(CNI_TOOLS / "noop")
        (self.bin_dir / "recorder").symlink_to(REPO / "tests" / "tools" / "recorder-plugin")
        # The onedir bundle is a directory: CNI_PATH lookup must work through a link to its executable.
        (self.bin_dir / "dracni").symlink_to(DRACNI_BINARY)

    def pod(self, prefix: str = "dracni-pod") -> Netns:
        ns = Netns(prefix)
        self.pods.append(ns)
        return ns

    # -- configuration -----------------------------------------------------------------------
    def write_conflist(
        self,
        name: str = "podnet",
        cni_version: str = "1.0.0",
        primary: str = "ptp",
        dracni_extra: dict | None = None,
        subnet: str = "10.244.0.0/24",
    ) -> dict:
        """The node's network: a primary plugin with dracni chained after it."""
        primary_conf: dict = {
            "type": primary,
            "ipam": {"type": "host-local", "subnet": subnet, "dataDir": str(self.ipam_dir)},
        }
        if primary == "bridge":
            primary_conf.update({"bridge": "cni0", "isGateway": True})
        conflist = {
            "cniVersion": cni_version,
            "name": name,
            "plugins": [
                primary_conf,
                {
                    "type": "dracni",
                    "stateDir": str(self.state_dir),
                    "logFile": str(self.log_file),
                    "logLevel": "debug",
                    **(dracni_extra or {}),
                },
            ],
        }
        (self.netconf_dir / f"10-{name}.conflist").write_text(json.dumps(conflist, indent=2))
        return conflist

    def env(
        self, pod_uid: str | None = None, pod_name: str = "demo", namespace: str = "default", extra: dict | None = None
    ) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CNI_")}
        args = f"IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={pod_name}"
        if pod_uid:
            args += f";K8S_POD_INFRA_CONTAINER_ID=infra;K8S_POD_UID={pod_uid}"
        env.update({"NETCONFPATH": str(self.netconf_dir), "CNI_PATH": str(self.bin_dir), "CNI_ARGS": args})
        env.update(extra or {})
        return env

    # -- the runtime: cnitool inside the host netns -----------------------------------------------
    def cnitool(
        self, command: str, pod: Netns, network: str = "podnet", check: bool = True, **env_kw
    ) -> subprocess.CompletedProcess:
        tool = str(CNI_TOOLS / "cnitool")
        proc = self.host.exec(tool, command, network, pod.path, env=self.env(**env_kw), check=False)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"cnitool {command} failed ({proc.returncode}):\nstdout: {proc.stdout.decode()}"
                f"\nstderr: {proc.stderr.decode()}\nlog:\n{self.read_log()}"
            )
        return proc

    def dracni(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """The operator CLI of the frozen bundle."""
        return dracni_cli(*args, check=check)

    def prepare(self, *claims: dict, args: tuple[str, ...] = (), check: bool = True) -> subprocess.CompletedProcess:
        """Write the claims' manifests and prepare them with the frozen CLI (kubelet's role).

        Allocated devices are the host netns's NICs (``--nic-netns``); ``args`` adds options
        (the tenant policy's, e.g. ``--claim-configs=full``).
        """
        for claim in claims:
            write_manifest(self.claims_dir, claim)
        return self.dracni(
            "prepare", str(self.claims_dir), f"--state-dir={self.state_dir}", f"--nic-netns={self.host.path}", *args,
            check=check,
        )  # fmt: skip

    def plugin(
        self, command: str, conf: dict, *, container_id: str = "", netns: str = "", ifname: str = "", cni_args: str = ""
    ) -> subprocess.CompletedProcess:
        """Exec the dracni plugin directly, inside the host netns, the way libcni would."""
        env = self.env()
        env.update(
            {
                "CNI_COMMAND": command,
                "CNI_CONTAINERID": container_id,
                "CNI_NETNS": netns,
                "CNI_IFNAME": ifname,
                "CNI_ARGS": cni_args,
            }
        )
        return self.host.exec(str(self.bin_dir / "dracni"), input=json.dumps(conf).encode(), env=env, check=False)

    def read_log(self) -> str:
        return self.log_file.read_text() if self.log_file.exists() else ""

    def close(self) -> None:
        for ns in self.pods:
            ns.close()
        self.host.close()
        if self._own_tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)


def container_id_for(netns_path: str) -> str:
    """cnitool's container ID: ``cnitool-`` + hex of the first 10 bytes of sha512(netns path)."""
    import hashlib

    return "cnitool-" + hashlib.sha512(netns_path.encode()).hexdigest()[:20]


def attachment_params(
    plugins: list[dict], *, name: str, if_name: str | None = None, cni_version: str = "1.0.0", **extra
) -> dict:
    """dracni's own opaque parameters for one attachment."""
    params: dict = {
        "apiVersion": "dracni.io/v1alpha1",
        "kind": "NetworkAttachment",
        "config": {"cniVersion": cni_version, "name": name, "plugins": plugins},
    }
    if if_name:
        params["ifName"] = if_name
    params.update(extra)
    return params


def claim_manifest(
    name: str,
    *,
    pod_uid: str,
    devices: list[dict],
    pod_name: str = "demo",
    namespace: str = "default",
    uid: str | None = None,
    driver: str = "dracni.io",
    source: str = "FromClass",
    more_pods: tuple[tuple[str, str], ...] = (),
) -> dict:
    """An allocated ResourceClaim reserved for one pod (and ``more_pods``: (name, uid) each).

    ``devices``: ``[{"request", "pool", "device", "params"}]``, each with its own opaque config,
    and optionally ``"class"``: the DeviceClass's network for that request.  ``source`` says
    whose ``params`` are: ``FromClass`` (the default: the administrator's network, as the API
    server copies a DeviceClass config into the allocation) or ``FromClaim`` (the tenant's, in
    the claim's spec too).
    """
    import copy

    requests, results, config, spec_config = [], [], [], []
    for d in devices:
        requests.append({"name": d["request"], "exactly": {"deviceClassName": driver}})
        results.append({"request": d["request"], "driver": driver, "pool": d["pool"], "device": d["device"]})
        if "class" in d:
            config.append(
                {
                    "source": "FromClass",
                    "requests": [d["request"]],
                    "opaque": {"driver": driver, "parameters": copy.deepcopy(d["class"])},
                }
            )
        entry = {"requests": [d["request"]], "opaque": {"driver": driver, "parameters": copy.deepcopy(d["params"])}}
        config.append({"source": source, **entry})
        if source == "FromClaim":
            spec_config.append(copy.deepcopy(entry))
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4())},
        "spec": {"devices": {"requests": requests, "config": spec_config}},
        "status": {
            "allocation": {"devices": {"results": results, "config": config}},
            "reservedFor": [
                {"resource": "pods", "name": name, "uid": uid} for name, uid in ((pod_name, pod_uid), *more_pods)
            ],
        },
    }


def write_manifest(directory: Path, claim: dict) -> Path:
    import yaml

    path = directory / f"{claim['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(claim, sort_keys=False))
    return path
