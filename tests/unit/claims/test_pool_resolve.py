"""A DeviceClass network with an address pool, as prepare resolves it (no API server needed for
the refusals; the reservations themselves: tests/unit/pools/test_allocator.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dracni.claims.prepare import Resolver
from dracni.policy.binding import DeviceFacts
from dracni.state.store import StateDir

DRIVER = "dracni.io"
POOL = {"name": "lan", "subnets": [{"subnet": "10.10.1.0/24"}]}
IPAM = {"type": "host-local", "ranges": [[{"subnet": "10.10.1.0/24"}]]}


def nics(pool: str, device: str) -> DeviceFacts | None:
    return DeviceFacts("eth0", None, None) if device == "eth0" else None


def claim(class_params: dict, claim_params: dict | None = None) -> dict:
    configs = [{"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": class_params}}]
    if claim_params is not None:
        configs.append({"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": claim_params}})
    return {
        "metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": "net", "driver": DRIVER, "pool": "node1", "device": "eth0"}],
                    "config": configs,
                }
            },
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-1"}],
        },
    }


def network(pool: dict | None = POOL, ipam: dict = IPAM) -> dict:
    return {
        "apiVersion": "dracni.io/v1alpha1",
        "kind": "NetworkAttachment",
        **({"addressPool": pool} if pool else {}),
        "config": {
            "cniVersion": "1.0.0",
            "name": "mv",
            "plugins": [{"type": "macvlan", "capabilities": {"ips": True}, "ipam": ipam}],
        },
    }


@pytest.fixture
def resolver(tmp_path: Path) -> Resolver:
    return Resolver(state=StateDir(str(tmp_path / "state")), driver=DRIVER, node="node1", devices=nics)


def error(resolver: Resolver, obj: dict) -> str:
    outcome = resolver.resolve(obj).outcome
    assert outcome.error, "expected a refusal"
    return outcome.error


def test_a_pool_network_needs_the_service(resolver):
    message = error(resolver, claim(network()))
    assert "address pool lan is cluster-wide" in message and "dracni kubelet-plugin" in message


def test_a_network_without_a_pool_resolves_as_before(resolver):
    resolved = resolver.resolve(claim(network(pool=None)))
    assert resolved.outcome.error is None and "addressPool" not in resolved.record["devices"][0]


def test_the_class_pool_is_checked_and_blamed_on_the_class(resolver):
    message = error(resolver, claim(network(pool={"name": "lan", "subnets": [{"subnet": "10.10.1.0/33"}]})))
    assert "the DeviceClass's config: parameters.addressPool.subnets[0].subnet" in message
    message = error(resolver, claim(network(ipam={"type": "dhcp"})))
    assert "parameters.addressPool: the network's IPAM must be host-local or static" in message


def test_a_claim_cannot_bring_a_pool(resolver):
    choice = {"apiVersion": "dracni.io/v1alpha1", "kind": "NetworkAttachment", "addressPool": POOL}
    message = error(resolver, claim(network(), choice))
    assert "parameters.addressPool: a claim cannot define an address pool (rule addressPools" in message


def test_a_chosen_address_must_be_one_the_pool_hands_out(resolver):
    pool = {"name": "lan", "subnets": [{"subnet": "10.10.1.0/24", "exclude": ["10.10.1.50"]}]}
    choice = {
        "apiVersion": "dracni.io/v1alpha1",
        "kind": "NetworkAttachment",
        "runtimeConfig": {"ips": ["10.10.1.50/24"]},
    }
    message = error(resolver, claim(network(pool=pool), choice))
    assert "parameters.runtimeConfig.ips[0]: 10.10.1.50 is not an address pool lan hands out" in message
    assert "(rule networkRanges" in message
