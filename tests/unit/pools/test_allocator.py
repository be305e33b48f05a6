"""The allocator and the claims' pool addresses, through the real kubernetes client against the
test API server serving the shipped AddressReservation CRD (its create is the test-and-set)."""

from __future__ import annotations

import ipaddress
import threading
from pathlib import Path

import pytest
import yaml

from dracni.claims.pool_addresses import PoolAddresses
from dracni.claims.resolve import ClaimError
from dracni.kube.api import KubeApi
from dracni.kube.reservations import ApiReservations, NodeUid
from dracni.pools.allocator import RELEASE_WORKERS, AllocationError, Pick, PoolAllocator, PoolFull
from dracni.pools.model import parse_pool
from dracni.pools.reservations import Holder
from dracni.state.store import StateDir
from tests.kubeclient import client_for, serving

CRD = Path(__file__).resolve().parents[3] / "spec" / "crds" / "addressreservations.dracni.io.yaml"
RESERVATIONS = "/apis/dracni.io/v1alpha1/addressreservations"


@pytest.fixture
def fake(tmp_path):
    crd = yaml.safe_load(CRD.read_text())
    with serving(tmp_path, crds=[crd]) as server:
        for node in ("node-1", "node-2"):
            server.add_node(node, uid=f"uid-{node}")
        yield server


@pytest.fixture
def api(fake):
    client = client_for(fake.kubeconfig_path)
    yield KubeApi(client)
    client.close()


def allocator(api: KubeApi, node: str = "node-1") -> PoolAllocator:
    return PoolAllocator(ApiReservations(api), node, NodeUid(api, node))


def holder(claim: str = "c", pod: str | None = None, keep: bool = False, uid: str | None = None) -> Holder:
    return Holder("ns", claim, uid or f"uid-{claim}", "net", "node-1/eth1", pod_uid=pod, pod_name=pod, keep=keep)


SMALL = parse_pool({"name": "small", "subnets": [{"subnet": "10.0.0.0/29"}]}, "p")  # 5 addresses


def test_a_reservation_is_an_object_named_after_the_address_owned_by_the_node(fake, api):
    got = allocator(api).reserve_free(Pick(SMALL, "ipv4", "seed"), holder())
    obj = fake.get_custom_object("addressreservations", got.name)
    assert obj["metadata"]["name"] == f"small.{got.address}"
    assert obj["metadata"]["ownerReferences"][0]["uid"] == "uid-node-1"
    assert obj["spec"]["claim"] == {"namespace": "ns", "name": "c", "uid": "uid-c"}


def test_the_same_holder_gets_its_own_address_again_without_a_request(fake, api):
    alloc = allocator(api)
    first = alloc.reserve_free(Pick(SMALL, "ipv4", "seed"), holder())
    fake.reset_requests()
    assert alloc.reserve_free(Pick(SMALL, "ipv4", "seed"), holder()) == first
    assert not fake.requests_to(path_contains=RESERVATIONS)


def test_after_a_restart_the_ledger_finds_the_node_s_own_reservations(fake, api):
    first = allocator(api).reserve_free(Pick(SMALL, "ipv4", "seed"), holder())
    again = allocator(api)  # a new process: an empty ledger
    again.ensure_loaded()
    fake.reset_requests()
    assert again.reserve_free(Pick(SMALL, "ipv4", "seed"), holder()).name == first.name
    assert not fake.requests_to(method="POST", path_contains=RESERVATIONS)


def test_two_nodes_allocating_at_once_never_share_an_address(fake, api):
    nodes = [allocator(api, "node-1"), allocator(api, "node-2")]
    pool = parse_pool({"name": "mid", "subnets": [{"subnet": "10.1.0.0/26"}]}, "p")  # 61 addresses
    got: list[str] = []
    lock = threading.Lock()

    def run(index: int) -> None:
        alloc = nodes[index % 2]
        r = alloc.reserve_free(Pick(pool, "ipv4", f"seed-{index}"), holder(f"c{index}"))
        with lock:
            got.append(r.address)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 40 and len(set(got)) == 40


def test_an_address_the_node_holds_for_another_claim_is_tried_last_without_a_create(fake, api):
    alloc = allocator(api)
    first = alloc.reserve_free(Pick(SMALL, "ipv4", "same-seed"), holder("c1"))
    fake.reset_requests()
    # the same probe order meets c1's address first: the ledger says it is taken, no 409 is asked for
    second = alloc.reserve_free(Pick(SMALL, "ipv4", "same-seed"), holder("c2"))
    creates = fake.requests_to(method="POST", path_contains=RESERVATIONS)
    assert second.address != first.address
    assert [r.status for r in creates] == [201]


def test_a_full_pool_is_named_with_its_size_and_a_freed_address_is_found(fake, api):
    alloc = allocator(api)
    held = [alloc.reserve_free(Pick(SMALL, "ipv4", f"s{i}"), holder(f"c{i}")) for i in range(5)]
    assert len({r.address for r in held}) == 5
    with pytest.raises(PoolFull) as caught:
        alloc.reserve_free(Pick(SMALL, "ipv4", "s-next"), holder("next"))
    assert str(caught.value) == "address pool small (10.0.0.0/29) is full: all 5 IPv4 addresses are reserved"
    # one is freed: the address this node saw taken a moment ago is tried again
    alloc.release([held[2]])
    got = alloc.reserve_free(Pick(SMALL, "ipv4", "s-next"), holder("next"))
    assert got.address == held[2].address


def test_a_pinned_address_held_by_another_claim_is_refused_naming_it(fake, api):
    alloc = allocator(api, "node-2")
    ip = ipaddress.ip_address("10.0.0.3")
    alloc.reserve_pinned(SMALL, ip, holder("owner", keep=True))
    with pytest.raises(AllocationError) as caught:
        allocator(api).reserve_pinned(SMALL, ip, holder("thief"))
    assert "reserved for claim ns/owner (on node node-2)" in str(caught.value)


def test_a_kept_reservation_moves_with_its_claim_to_another_node(fake, api):
    ip = ipaddress.ip_address("10.0.0.3")
    allocator(api, "node-2").reserve_pinned(SMALL, ip, holder("vm", keep=True))
    moved = allocator(api, "node-1").reserve_pinned(SMALL, ip, holder("vm", keep=True))
    obj = fake.get_custom_object("addressreservations", moved.name)
    assert obj["spec"]["node"] == "node-1"
    assert obj["metadata"]["labels"]["dracni.io/node"] == "node-1"
    assert [r["name"] for r in obj["metadata"]["ownerReferences"]] == ["node-1"]


def test_deleting_the_node_frees_its_addresses(fake, api):
    alloc = allocator(api, "node-2")
    r = alloc.reserve_free(Pick(SMALL, "ipv4", "x"), holder())
    fake.delete_node("node-2")
    assert fake.get_custom_object("addressreservations", r.name) is None


def test_an_api_failure_fails_the_allocation_and_leaves_nothing(fake, api):
    fake.fail_next(500, method="POST", path=RESERVATIONS)
    with pytest.raises(AllocationError) as caught:
        allocator(api).reserve_free(Pick(SMALL, "ipv4", "x"), holder())
    assert "cannot reserve" in str(caught.value)
    assert fake.list_custom_objects("addressreservations") == []


# -- the claims' pool addresses ------------------------------------------------------------------

POOL = {"name": "lan", "subnets": [{"subnet": "10.9.0.0/24"}, {"subnet": "fd00:9::/64"}]}


def record(uid: str, pods: list[str], devices: int = 1, **device) -> dict:
    return {
        "uid": uid,
        "namespace": "ns",
        "name": f"claim-{uid}",
        "pods": [{"uid": p, "name": p} for p in pods],
        "devices": [
            {"request": f"r{i}", "pool": "node-1", "device": f"eth{i}", "addressPool": POOL, **device}
            for i in range(devices)
        ],
    }


def test_each_device_and_each_pod_gets_one_address_per_family(fake, api, tmp_path):
    pools = PoolAddresses(allocator(api))
    rec = record("u1", ["pod-a", "pod-b"], devices=2)
    pools.assign({}, rec)
    ips = [ip for d in rec["devices"] for pod in ("pod-a", "pod-b") for ip in d["poolIPs"][pod]]
    assert len(ips) == 8 and len(set(ips)) == 8
    assert all(len(d["poolIPs"][p]) == 2 for d in rec["devices"] for p in ("pod-a", "pod-b"))
    assert rec["devices"][0]["poolIPs"]["pod-a"][0].endswith("/24")
    assert rec["devices"][0]["poolIPs"]["pod-a"][1].endswith("/64")
    # a pod leaves the shared claim: its addresses go when the claim is prepared again
    rec2 = record("u1", ["pod-a"], devices=2)
    pools.assign({}, rec2)
    assert rec2["devices"][0]["poolIPs"]["pod-a"] == rec["devices"][0]["poolIPs"]["pod-a"]
    assert len(fake.list_custom_objects("addressreservations")) == 4
    pools.release_claims(["u1"])
    assert fake.list_custom_objects("addressreservations") == []


def test_a_persistent_claim_keeps_its_address_after_unprepare_until_it_is_gone(fake, api, tmp_path):
    pools = PoolAddresses(allocator(api))
    rec = record("u2", ["pod-a"], persistentIPs=True)
    pools.assign({}, rec)
    assert len(rec["devices"][0]["requestedIPs"]) == 2  # the claim's, one per family
    pools.release_claims(["u2"])
    assert len(fake.list_custom_objects("addressreservations")) == 2
    state = StateDir(str(tmp_path / "state"))
    state.ensure()
    assert pools.reconcile(state, lambda ns, name: allocated_claim("u2", "node-1/eth0")) == 0  # still there
    assert pools.reconcile(state, lambda ns, name: None) == 2  # deleted
    assert fake.list_custom_objects("addressreservations") == []


def test_a_failed_allocation_gives_back_what_this_prepare_reserved(fake, api):
    pools = PoolAddresses(allocator(api))
    taken = PoolAddresses(allocator(api, "node-2"))
    taken.assign({}, record("owner", ["p"], runtimeConfig={"ips": ["10.9.0.7/24"]}))
    rec = record("u3", ["pod-a"], devices=2)
    rec["devices"][1]["runtimeConfig"] = {"ips": ["10.9.0.7/24"]}
    with pytest.raises(ClaimError) as caught:
        pools.assign({}, rec)
    assert "reserved for claim ns/claim-owner" in str(caught.value)
    holders = {o["spec"]["claim"]["uid"] for o in fake.list_custom_objects("addressreservations")}
    assert holders == {"owner"}


def test_an_address_outside_the_pool_is_refused(fake, api):
    rec = record("u4", ["pod-a"], runtimeConfig={"ips": ["10.9.0.1/24"]})  # the gateway
    with pytest.raises(ClaimError) as caught:
        PoolAddresses(allocator(api)).assign({}, rec)
    assert "10.9.0.1 is not one address pool lan hands out" in str(caught.value)


def test_at_start_a_prepared_claim_that_is_gone_gives_its_addresses_back(fake, api, tmp_path):
    """The node was down while the claim's pod ended and the claim was deleted: its record is
    still in the state dir, but the claim is gone, so the service's first reconcile releases."""
    pools = PoolAddresses(allocator(api))
    rec = record("u5", ["pod-a"])
    pools.assign({}, rec)
    state = StateDir(str(tmp_path / "state"))
    state.ensure()
    state.put_claims([{**rec, "kind": "PreparedClaim", "driver": "dracni.io", "source": None, "preparedAt": "x"}])
    asked = []

    def get_claim(namespace, name):
        asked.append((namespace, name))
        return None

    assert pools.reconcile(state, get_claim) == 0 and asked == []  # later rounds trust the record
    assert pools.reconcile(state, get_claim, at_start=True) == 2  # one GET for both addresses
    assert asked == [("ns", "claim-u5")]
    assert fake.list_custom_objects("addressreservations") == []


def allocated_claim(uid: str, device: str | None) -> dict:
    results = [{"driver": "dracni.io", "pool": device.split("/")[0], "device": device.split("/")[1]}] if device else []
    return {"metadata": {"uid": uid}, "status": {"allocation": {"devices": {"results": results}}} if device else {}}


def test_a_persistentips_address_goes_with_the_claim_s_allocation_an_ipamclaim_s_stays(fake, api, tmp_path):
    """persistentIPs keeps an address while the claim is allocated the device (deallocation clears
    the status entry that made it sticky); an IPAMClaim keeps it while the claim exists."""
    pools = PoolAddresses(allocator(api))
    sticky = record("u6", ["pod-a"], persistentIPs=True)
    vm = record("u7", ["pod-b"], ipamClaim="vm.net1")
    pools.assign({}, sticky)
    pools.assign({}, vm)
    pools.release_claims(["u6", "u7"])
    state = StateDir(str(tmp_path / "state"))
    state.ensure()
    still = {"ns/claim-u6": allocated_claim("u6", "node-1/eth0"), "ns/claim-u7": allocated_claim("u7", "node-1/eth0")}
    assert pools.reconcile(state, lambda ns, name: still[f"{ns}/{name}"]) == 0
    moved = {"ns/claim-u6": allocated_claim("u6", None), "ns/claim-u7": allocated_claim("u7", None)}
    assert pools.reconcile(state, lambda ns, name: moved[f"{ns}/{name}"]) == 2  # u6's two, not u7's
    left = fake.list_custom_objects("addressreservations")
    assert {o["spec"]["claim"]["uid"] for o in left} == {"u7"}
    assert {o["spec"]["ipamClaim"] for o in left} == {"vm.net1"}


def test_metrics_give_each_pool_s_size_and_the_node_s_reserved_addresses(fake, api):
    """used (cluster) = sum of dracni_address_pool_reserved over the nodes; free = size - used."""
    from dracni.metrics import REGISTRY

    pool = parse_pool({"name": "metered", "subnets": [{"subnet": "10.3.0.0/29"}]}, "p")
    nodes = [allocator(api, "node-1"), allocator(api, "node-2")]
    held = [nodes[i % 2].reserve_free(Pick(pool, "ipv4", f"m{i}"), holder(f"m{i}")) for i in range(3)]

    def sample(name: str) -> float | None:
        return REGISTRY.get_sample_value(name, {"pool": "metered", "family": "ipv4"})

    assert sample("dracni_address_pool_size") == 5
    # one registry per process: both "nodes" write one gauge here; node-1 counted last, its 2
    assert sample("dracni_address_pool_reserved") == 2
    nodes[0].release([r for r in held if r.node == "node-1"])
    assert sample("dracni_address_pool_reserved") == 0
    with pytest.raises(PoolFull):
        for i in range(10):
            nodes[1].reserve_free(Pick(pool, "ipv4", f"n{i}"), holder(f"n{i}"))
    assert REGISTRY.get_sample_value("dracni_address_pool_exhausted_total", {"pool": "metered"}) == 1


def test_the_ledger_s_claim_index_and_counts_follow_reserves_releases_and_reloads(fake, api):
    """The ledger is indexed by claim and its counts kept as it changes (a prepare costs
    O(its claim), not O(the node's reservations)); both agree with the ledger after every kind
    of change: reserves in two families, a release, a reload that finds one deleted elsewhere,
    and a restart."""
    from dracni.metrics import REGISTRY

    pool = parse_pool({"name": "ledger", "subnets": [{"subnet": "10.4.0.0/28"}, {"subnet": "fd00:4::/124"}]}, "p")
    alloc = allocator(api)

    def reserved() -> dict[str, float | None]:
        return {
            f: REGISTRY.get_sample_value("dracni_address_pool_reserved", {"pool": "ledger", "family": f})
            for f in ("ipv4", "ipv6")
        }

    def families(claim_uid: str, node: PoolAllocator = alloc) -> list[str]:
        return sorted(r.family for r in node.held_by_claim(claim_uid))

    for family in ("ipv4", "ipv6"):
        alloc.reserve_free(Pick(pool, family, f"a-{family}"), holder("a"))
    alloc.reserve_free(Pick(pool, "ipv4", "b"), holder("b"))
    for pod in ("p1", "p2"):
        alloc.reserve_free(Pick(pool, "ipv6", f"c-{pod}"), holder("c", pod=pod))
    assert (families("uid-a"), families("uid-b"), families("uid-c")) == (["ipv4", "ipv6"], ["ipv4"], ["ipv6", "ipv6"])
    assert reserved() == {"ipv4": 2, "ipv6": 3}

    assert alloc.release(alloc.held_by_claim("uid-a")) == []
    assert families("uid-a") == [] and reserved() == {"ipv4": 1, "ipv6": 2}
    assert alloc.release([]) == []  # nothing to give back: no request
    assert reserved() == {"ipv4": 1, "ipv6": 2}

    other = allocator(api)  # another instance of the driver on this node releases b's
    other.load()
    assert other.release(other.held_by_claim("uid-b")) == []
    alloc.load()
    assert families("uid-b") == [] and reserved() == {"ipv4": 0, "ipv6": 2}  # counted once: stays, at 0

    restarted = allocator(api)
    restarted.load()
    assert families("uid-c", restarted) == ["ipv6", "ipv6"]
    assert sorted(r.name for r in restarted.held()) == sorted(r.name for r in alloc.held())
    assert reserved() == {"ipv4": 0, "ipv6": 2}


def test_releases_delete_at_the_same_time_on_threads_kept_for_all_releases(fake, api):
    """A release of several reservations deletes them at once on the allocator's release pool,
    whose threads stay for the next release (none started and stopped per unprepare) and never
    number more than ``RELEASE_WORKERS``; ``close`` stops them."""
    alloc = allocator(api)
    # an earlier test's allocator, not collected yet, may still have its idle release threads
    others = {t for t in threading.enumerate() if t.name.startswith("dracni-release")}

    def release_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("dracni-release")} - others

    seen: set[threading.Thread] = set()
    for claim in "abcde":
        made = [alloc.reserve_free(Pick(SMALL, "ipv4", f"{claim}-{i}"), holder(claim, pod=f"p{i}")) for i in (1, 2)]
        assert alloc.release(made) == []
        assert not fake.list_custom_objects("addressreservations")
        now = release_threads()
        assert seen <= now, "a release thread ended between releases"
        assert 1 <= len(now) <= RELEASE_WORKERS
        seen = now
    alloc.close()
    for thread in seen:
        thread.join(timeout=5)
    assert not release_threads()
