"""The node's reconcile never releases the addresses of a claim whose record is on its way.

A claim's addresses are reserved in ``PoolAddresses.assign`` and its record is stored after
it, in the same NodePrepareResources call (claims/prepare.py: ``resolve`` then
``store_prepared``).  A reconcile that lists the reservations in between finds one whose claim
is neither being assigned nor recorded: releasing it would let another node take an address
that the record hands to a pod.  Through the real client against the test API server serving
the shipped AddressReservation CRD."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dracni.claims import pool_addresses
from dracni.claims.pool_addresses import PoolAddresses
from dracni.kube.api import KubeApi
from dracni.kube.reservations import ApiReservations, NodeUid
from dracni.pools.allocator import PoolAllocator
from dracni.state.store import StateDir
from tests.kubeclient import client_for, serving

CRD = Path(__file__).resolve().parents[3] / "spec" / "crds" / "addressreservations.dracni.io.yaml"
POOL = {"name": "lan", "subnets": [{"subnet": "10.9.0.0/24"}]}


@pytest.fixture
def fake(tmp_path):
    with serving(tmp_path, crds=[yaml.safe_load(CRD.read_text())]) as server:
        server.add_node("node-1", uid="uid-node-1")
        yield server


@pytest.fixture
def pools(fake):
    client = client_for(fake.kubeconfig_path)
    api = KubeApi(client)
    yield PoolAddresses(PoolAllocator(ApiReservations(api), "node-1", NodeUid(api, "node-1")))
    client.close()


@pytest.fixture
def state(tmp_path) -> StateDir:
    state = StateDir(str(tmp_path / "state"))
    state.ensure()
    return state


def record(uid: str) -> dict:
    return {
        "uid": uid,
        "namespace": "ns",
        "name": f"claim-{uid}",
        "pods": [{"uid": "pod-a", "name": "pod-a"}],
        "devices": [{"request": "net", "pool": "node-1", "device": "eth1", "addressPool": POOL}],
    }


def test_a_claim_assigned_but_not_yet_recorded_keeps_its_addresses(fake, pools, state):
    pools.assign({}, record("u1"))  # its record is not stored yet
    assert pools.reconcile(state, lambda ns, name: None) == 0
    assert len(fake.list_custom_objects("addressreservations")) == 1


def test_once_the_grace_has_passed_an_unrecorded_claim_s_addresses_go(fake, pools, state, monkeypatch):
    pools.assign({}, record("u1"))  # the service never stored the record (it died, say)
    monkeypatch.setattr(pool_addresses, "RECORD_GRACE", 0.0)
    assert pools.reconcile(state, lambda ns, name: None) == 1
    assert fake.list_custom_objects("addressreservations") == []


def test_an_unprepared_persistent_claim_is_not_in_its_grace_any_more(fake, pools, state):
    rec = record("u1")
    rec["devices"][0]["persistentIPs"] = True
    pools.assign({}, rec)
    pools.release_claims(["u1"])  # unprepared: kept while the claim exists
    assert len(fake.list_custom_objects("addressreservations")) == 1
    assert pools.reconcile(state, lambda ns, name: None) == 1  # the claim is gone: released now
    assert fake.list_custom_objects("addressreservations") == []
