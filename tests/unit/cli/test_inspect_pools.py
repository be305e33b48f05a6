"""``dracni inspect`` shows each device's pool addresses from the state dir and, given the API
server, the node's AddressReservations (the test API server serving the shipped CRD)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from dracni.claims.pool_addresses import PoolAddresses
from dracni.cli import main as cli
from dracni.kube.api import KubeApi
from dracni.kube.reservations import ApiReservations, NodeUid
from dracni.pools.allocator import PoolAllocator
from dracni.state.store import StateDir
from tests.kubeclient import client_for, serving

CRD = Path(__file__).resolve().parents[3] / "spec" / "crds" / "addressreservations.dracni.io.yaml"
POOL = {"name": "lan", "subnets": [{"subnet": "10.9.0.0/24"}]}


def prepared(uid: str, pods: list[str], **device) -> dict:
    return {
        "kind": "PreparedClaim",
        "uid": uid,
        "namespace": "ns",
        "name": f"claim-{uid}",
        "driver": "dracni.io",
        "source": None,
        "preparedAt": "2026-11-27T00:00:00Z",
        "pods": [{"uid": p, "name": f"name-{p}"} for p in pods],
        "devices": [
            {
                "request": "net", "pool": "node-1", "device": "eth1", "shareID": None, "ifName": None,
                "config": {"name": "mv", "plugins": [{"type": "macvlan"}]}, "runtimeConfig": {}, "capabilities": {},
                "persistentIPs": False, "ipamClaim": None, "addressPool": POOL, **device,
            }
        ],
    }  # fmt: skip


def test_inspect_shows_pool_addresses_and_the_node_s_reservations(tmp_path):
    crd = yaml.safe_load(CRD.read_text())
    with serving(tmp_path, "node-1", crds=[crd]) as server:
        client = client_for(server.kubeconfig_path)
        try:
            api = KubeApi(client)
            pools = PoolAddresses(PoolAllocator(ApiReservations(api), "node-1", NodeUid(api, "node-1")))
            shared = prepared("u1", ["pod-a", "pod-b"])
            sticky = prepared("u2", ["pod-c"], persistentIPs=True)
            for record in (shared, sticky):
                pools.assign({}, record)
        finally:
            client.close()
        state = StateDir(str(tmp_path / "state"))
        state.ensure()
        state.put_claims([shared, sticky])
        args = ["inspect", f"--state-dir={state.root}", "--node-name=node-1", f"--kubeconfig={server.kubeconfig_path}"]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        text = result.output
        a, b = shared["devices"][0]["poolIPs"]["pod-a"][0], shared["devices"][0]["poolIPs"]["pod-b"][0]
        assert f"pool lan: {a} (pod name-pod-a)" in text and f"pool lan: {b} (pod name-pod-b)" in text
        assert f"pool lan: {sticky['devices'][0]['requestedIPs'][0]} (the claim's)" in text
        assert "address reservations of node node-1: 3" in text
        assert f"lan.{a.split('/')[0]}" in text and "ns/claim-u2 (kept)" in text
        snapshot = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
        assert len(snapshot["reservations"]) == 3


def test_inspect_says_what_failed_when_the_api_server_cannot_be_read(tmp_path):
    state = StateDir(str(tmp_path / "state"))
    state.ensure()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1", "kind": "Config", "current-context": "c",
                "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:9"}}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
            }
        )
    )  # fmt: skip
    result = CliRunner().invoke(
        cli, ["inspect", f"--state-dir={state.root}", "--node-name=node-1", f"--kubeconfig={kubeconfig}"]
    )
    assert result.exit_code == 1
    assert "cannot list the address reservations of node node-1" in result.output
