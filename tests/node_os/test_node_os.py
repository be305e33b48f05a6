"""dracni on the node OSes it supports (issue 14 item 2): Debian 11 (glibc 2.31) and Debian 12
(glibc 2.36) root filesystems made with debootstrap, dracni installed into each exactly as
`dracni install` does on a host (through --host-root), and the CNI plugin run *inside* each
(chroot) the way the container runtime runs it: VERSION, a pass-through ADD, and an ADD/DEL
with a macvlan claim against that release's own Debian CNI plugins.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from tests.harness import Netns, attachment_params, claim_manifest, dracni_cli, node_netns, write_manifest
from tests.node_os.rootfs import SUITES, NodeRoot, glibc_of, have_debootstrap

PRIMARY = {
    "cniVersion": "1.0.0",
    "name": "podnet",
    "plugins": [{"type": "ptp", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/24"}]]}}],
}
PREV_RESULT = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "eth0", "sandbox": "/run/netns/x"}],
    "ips": [{"address": "10.88.0.5/24", "interface": 0}],
    "dns": {},
}


@pytest.fixture(params=list(SUITES), ids=list(SUITES))
def node(request: pytest.FixtureRequest) -> Iterator[NodeRoot]:
    why = have_debootstrap()
    if why:
        pytest.skip(f"node OS tests: {why}")
    n = NodeRoot(request.param)
    try:
        yield n
    finally:
        n.close()


@pytest.fixture
def host() -> Iterator[Netns]:
    """The node's network namespace (a throwaway one, with eth1 as the NIC claims use)."""
    with node_netns("dracni-nodeos", ("eth1",)) as ns:
        yield ns


def dracni(*args: str) -> None:
    dracni_cli(*args)


def install(node: NodeRoot) -> dict:
    """`dracni install` as the DaemonSet's init container runs it; the chained conflist it wrote."""
    (node.path("/etc/cni/net.d") / "10-podnet.conflist").write_text(json.dumps(PRIMARY))
    dracni("install", f"--host-root={node.root}", f"--bin-dir={node.path('/opt/cni/bin')}",
           f"--conf-dir={node.path('/etc/cni/net.d')}")  # fmt: skip
    chained = json.loads((node.path("/etc/cni/net.d") / "00-dracni.conflist").read_text())
    assert [p["type"] for p in chained["plugins"]] == ["ptp", "dracni"]
    return chained


def runtime_conf(chained: dict, prev_result: dict) -> dict:
    """What libcni gives the last plugin of the chain."""
    return {"cniVersion": chained["cniVersion"], "name": chained["name"], **chained["plugins"][-1],
            "prevResult": prev_result}  # fmt: skip


def test_install_and_the_cni_plugin_on_the_node(node: NodeRoot, host: Netns, tmp_path) -> None:
    glibc = glibc_of(node.root)
    chained = install(node)

    version = node.cni("VERSION", {"cniVersion": "1.1.0"}, netns=host.name)
    assert version.returncode == 0, f"on {node.suite} (glibc {glibc}): {version.stderr.decode()}"
    assert "1.1.0" in json.loads(version.stdout)["supportedVersions"]

    pod_uid = str(uuid.uuid4())
    pod = Netns("dracni-nodeos-pod")
    try:
        call = {"CNI_CONTAINERID": "c" + pod_uid.replace("-", ""), "CNI_NETNS": f"/run/netns/{pod.name}",
                "CNI_IFNAME": "eth0", "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=demo;K8S_POD_UID={pod_uid}"}  # fmt: skip
        passed = node.cni("ADD", runtime_conf(chained, PREV_RESULT), netns=host.name, **call)
        assert passed.returncode == 0, passed.stdout.decode() + passed.stderr.decode()
        assert json.loads(passed.stdout) == PREV_RESULT  # a pod without claims: the chain's result
        assert node.cni("DEL", runtime_conf(chained, PREV_RESULT), netns=host.name, **call).returncode == 0

        # a claim: macvlan on eth1 with host-local, run by this release's own plugins
        macvlan = {"type": "macvlan", "master": "eth1", "mode": "bridge",
                   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.10.7.0/24"}]]}}  # fmt: skip
        params = attachment_params([macvlan], name="mv", cni_version="1.0.0")
        claim = claim_manifest("mv", pod_uid=pod_uid, devices=[{"request": "net", "pool": "node1", "device": "eth1",
                                                                 "params": params}])  # fmt: skip
        (tmp_path / "claims").mkdir()
        write_manifest(tmp_path / "claims", claim)
        dracni("prepare", str(tmp_path / "claims"), f"--state-dir={node.path('/var/lib/dracni')}",
               f"--nic-netns={host.path}")  # fmt: skip

        added = node.cni("ADD", runtime_conf(chained, PREV_RESULT), netns=host.name, **call)
        assert added.returncode == 0, f"on {node.suite} (glibc {glibc}): {added.stdout.decode()}{added.stderr.decode()}"
        assert json.loads(added.stdout) == PREV_RESULT  # the runtime's result stays the primary's
        net1 = pod.links()["net1"]
        assert [a["local"] for a in net1["addr_info"] if a["family"] == "inet"][0].startswith("10.10.7.")
        reserved = node.path("/var/lib/cni/networks/mv")
        assert any(p.name.startswith("10.10.7.") for p in reserved.iterdir())

        deleted = node.cni("DEL", runtime_conf(chained, PREV_RESULT), netns=host.name, **call)
        assert deleted.returncode == 0, deleted.stdout.decode() + deleted.stderr.decode()
        assert "net1" not in pod.links()
        assert not any(p.name.startswith("10.10.7.") for p in reserved.iterdir())
        assert not list(node.path("/var/lib/dracni/attachments").iterdir())
    finally:
        pod.close()
