"""The slice publisher in-process, against the test API server (the real kubernetes client over
HTTP) and a throwaway network namespace holding the "node's" NICs (veth pairs):

- its view of the node's slices is one LIST with resourceVersion=0, then a WATCH; link events
  and resyncs cause no LIST; a 410 Gone lists again, with resourceVersion=0;
- a NIC whose link is down gets a ``dracni.io/link=down`` taint, one that vanished stays with
  ``=gone``, both removed when the link is back; a link state change that keeps the taint as it
  is writes nothing; ``None`` publishes no taint;
- slices deleted by someone else (kubelet) are re-created from the cache;
- with ``DRADeviceTaints`` off (the server drops the taints) the writes are bounded: one per
  change of what the publisher wants, none while it stays the same.
"""

from __future__ import annotations

import threading
import time

import pytest

from dracni.inventory.publisher import SlicePublisher
from dracni.kube.api import KubeApi
from tests.fakes.apiserver import FakeApiServer
from tests.harness import Netns, ip, node_netns
from tests.kubeclient import client_for
from tests.unit.inventory.test_nics import needs_netns

pytestmark = needs_netns

NODE = "node-a"
DRIVER = "dracni.io"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


@pytest.fixture
def node():
    """The node's netns with eth1 and eth2 (veth pairs, both ends up)."""
    with node_netns("dracni-pub") as ns:
        yield ns
    assert not ns.exists()


def make_fake(tmp_path, **gates: bool) -> FakeApiServer:
    fake = FakeApiServer(tmp_path / "apiserver", feature_gates=gates or None).start()
    fake.add_node(NODE)
    return fake


@pytest.fixture
def fake(tmp_path):
    server = make_fake(tmp_path)
    try:
        yield server
        assert server.internal_errors == []
    finally:
        server.close()


class Running:
    """A publisher's loops on threads, stopped (and its client closed) by ``close``."""

    def __init__(self, fake: FakeApiServer, node: Netns, **kw) -> None:
        self.client = client_for(fake.kubeconfig_path)
        self.publisher = SlicePublisher(
            KubeApi(self.client), driver=DRIVER, node=NODE, include=["eth1", "eth2"], netns=node.path, **kw
        )
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.publisher.run, args=(self.stop,), daemon=True)
        self.thread.start()
        assert self.publisher.published.wait(10), "the slices were never published"

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.client.close()
        assert not self.thread.is_alive()


@pytest.fixture
def running(fake, node):
    runs: list[Running] = []

    def start(**kw) -> Running:
        runs.append(Running(fake, node, **kw))
        return runs[-1]

    try:
        yield start
    finally:
        for run in runs:
            run.close()


def devices(fake: FakeApiServer) -> dict[str, dict]:
    return {d["name"]: d for s in fake.list_slices(node=NODE, driver=DRIVER) for d in s["spec"]["devices"]}


def taint_of(fake: FakeApiServer, name: str) -> tuple[str, str] | None:
    taints = devices(fake).get(name, {}).get("taints") or []
    return (taints[0]["value"], taints[0]["effect"]) if taints else None


def wait_until(predicate, what: str, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def slice_requests(fake: FakeApiServer, method: str | None = None, watch: bool | None = None) -> list:
    return [
        r
        for r in fake.requests
        if r.path.startswith(SLICES) and (method is None or r.method == method) and (watch is None or r.watch == watch)
    ]


def writes(fake: FakeApiServer) -> list:
    return [r for r in slice_requests(fake) if r.method in ("POST", "PUT", "PATCH", "DELETE")]


def settle(publisher: SlicePublisher) -> None:
    """Until the publisher has nothing left to do (no pending reconcile for a moment)."""
    quiet = 0
    deadline = time.monotonic() + 10
    while quiet < 15 and time.monotonic() < deadline:
        quiet = 0 if publisher._dirty.is_set() else quiet + 1
        time.sleep(0.02)


# -- the cache: LIST resourceVersion=0, WATCH, no LIST per event ------------------------------------
def test_links_events_cause_no_list_and_lists_say_resource_version_0(fake, node, running):
    run = running()
    lists = slice_requests(fake, "GET", watch=False)
    assert len(lists) == 1 and lists[0].query.get("resourceVersion") == "0"
    assert lists[0].query.get("fieldSelector") == f"spec.nodeName={NODE},spec.driver={DRIVER}"
    watches = slice_requests(fake, "GET", watch=True)
    assert watches and watches[0].query.get("resourceVersion") not in (None, "", "0")
    fake.reset_requests()
    for _ in range(3):  # flaps: each one is a netlink event
        ip("link", "set", "eth2p", "down", netns=node.name)
        wait_until(lambda: taint_of(fake, "eth2"), "eth2's taint")
        ip("link", "set", "eth2p", "up", netns=node.name)
        wait_until(lambda: taint_of(fake, "eth2") is None, "eth2's taint to go")
    ip("link", "set", "eth1", "mtu", "9000", netns=node.name)
    wait_until(lambda: devices(fake)["eth1"]["attributes"][f"{DRIVER}/mtu"] == {"int": 9000}, "the new MTU")
    settle(run.publisher)
    assert slice_requests(fake, "GET", watch=False) == [], "a LIST after a link event"
    assert len(writes(fake)) == 7  # 3 x (taint, untaint) + the MTU: one write each


def test_watches_resume_and_a_410_lists_again_with_resource_version_0(fake, node, running):
    """A WATCH that ends (its timeout) resumes from the last resourceVersion, without a LIST; a
    resume the server answers with 410 Expired (the resourceVersion was compacted away) lists
    again, with resourceVersion=0."""
    run = running(watch_timeout=1)
    fake.reset_requests()
    wait_until(lambda: len(slice_requests(fake, "GET", watch=True)) >= 2, "a resumed WATCH")
    assert slice_requests(fake, "GET", watch=False) == []
    resumed = slice_requests(fake, "GET", watch=True)[-1]
    assert int(resumed.query["resourceVersion"]) >= int(run.publisher.cache.resource_version) - 1
    fake.fail_next(410, method="GET", path="/resourceslices", message="too old resource version: 1 (5)")
    wait_until(lambda: slice_requests(fake, "GET", watch=False), "a new LIST")
    assert [r.query.get("resourceVersion") for r in slice_requests(fake, "GET", watch=False)] == ["0"]
    ip("link", "set", "eth1", "mtu", "1400", netns=node.name)
    wait_until(lambda: devices(fake)["eth1"]["attributes"][f"{DRIVER}/mtu"] == {"int": 1400}, "the new MTU")


def test_a_broken_watch_lists_again_with_resource_version_0(fake, node, running):
    run = running()
    fake.stop()  # the stream breaks; the server comes back with the same data
    fake.reset_requests()
    fake.start()
    wait_until(lambda: slice_requests(fake, "GET", watch=False), "a new LIST")
    assert [r.query.get("resourceVersion") for r in slice_requests(fake, "GET", watch=False)] == ["0"]
    settle(run.publisher)
    assert writes(fake) == []


def test_slices_deleted_by_someone_else_are_recreated_from_the_cache(fake, node, running):
    run = running()
    before = set(devices(fake))
    fake.reset_requests()
    assert fake.delete_all_slices(node=NODE) == 1  # kubelet at its start
    wait_until(lambda: set(devices(fake)) == before, "the slices back")
    settle(run.publisher)
    assert slice_requests(fake, "GET", watch=False) == []
    assert [r.method for r in writes(fake)] == ["POST"]


def test_a_slice_changed_by_someone_else_is_put_back(fake, node, running):
    run = running()
    current = fake.list_slices(node=NODE)[0]
    current["spec"]["devices"] = [d for d in current["spec"]["devices"] if d["name"] != "eth2"]
    client = client_for(fake.kubeconfig_path)
    try:
        KubeApi(client).replace_slice(current["metadata"]["name"], current)
    finally:
        client.close()
    wait_until(lambda: "eth2" in devices(fake), "eth2 back")
    settle(run.publisher)
    assert slice_requests(fake, "GET", watch=False)[1:] == []  # the first LIST only


def test_the_cache_keeps_the_newer_object():
    from dracni.inventory.publisher import SliceCache

    cache = SliceCache()
    cache.replace([{"metadata": {"name": "s", "resourceVersion": "7"}}], "7")
    assert not cache.put({"metadata": {"name": "s", "resourceVersion": "5"}})  # a late event
    assert cache.put({"metadata": {"name": "s", "resourceVersion": "9"}})
    assert cache.snapshot()["s"]["metadata"]["resourceVersion"] == "9"
    cache.remove("s")
    assert cache.snapshot() == {} and cache.synced.is_set()


# -- link taints -------------------------------------------------------------------------------------
def test_link_down_taints_and_link_up_untaints(fake, node, running):
    run = running()
    assert taint_of(fake, "eth1") is None and taint_of(fake, "eth2") is None
    ip("link", "set", "eth1p", "down", netns=node.name)  # eth1: no carrier, lowerlayerdown
    assert wait_until(lambda: taint_of(fake, "eth1"), "eth1's taint") == ("down", "NoSchedule")
    (taint,) = devices(fake)["eth1"]["taints"]
    assert taint["key"] == f"{DRIVER}/link" and taint["timeAdded"].endswith("Z")
    fake.reset_requests()
    ip("link", "set", "eth1", "down", netns=node.name)  # still down, another state: same taint
    time.sleep(0.3)
    settle(run.publisher)
    assert writes(fake) == [] and devices(fake)["eth1"]["taints"] == [taint]
    ip("link", "set", "eth1", "up", netns=node.name)
    ip("link", "set", "eth1p", "up", netns=node.name)
    wait_until(lambda: taint_of(fake, "eth1") is None, "eth1's taint to go")
    assert taint_of(fake, "eth2") is None


def test_a_vanished_nic_stays_published_tainted_gone_until_it_is_back(fake, node, running):
    run = running()
    generation = fake.list_slices(node=NODE)[0]["spec"]["pool"]["generation"]
    ip("link", "del", "eth2", netns=node.name)
    assert wait_until(lambda: taint_of(fake, "eth2"), "eth2's gone taint") == ("gone", "NoSchedule")
    assert "eth2" in run.publisher.offered()
    assert fake.list_slices(node=NODE)[0]["spec"]["pool"]["generation"] > generation
    ip("link", "add", "eth2", "type", "veth", "peer", "name", "eth2p", netns=node.name)
    assert wait_until(lambda: taint_of(fake, "eth2") == ("down", "NoSchedule"), "eth2 back, still down")
    ip("link", "set", "eth2", "up", netns=node.name)
    ip("link", "set", "eth2p", "up", netns=node.name)
    wait_until(lambda: taint_of(fake, "eth2") is None, "eth2 up")


def test_a_nic_that_left_with_a_claim_is_not_gone(fake, node, running):
    """host-device moves an allocated NIC into its pod: the device a prepared claim holds stays
    published, untainted (a NoExecute taint would evict the very pod using it)."""
    pod = Netns("dracni-pub-pod")
    try:
        run = running(in_use=lambda: {"eth2"})
        ip("link", "set", "eth2", "netns", pod.name, netns=node.name)
        ip("link", "set", "eth1p", "down", netns=node.name)  # an event after it, to wait for
        wait_until(lambda: taint_of(fake, "eth1"), "eth1's taint")
        settle(run.publisher)
        assert "eth2" in devices(fake) and taint_of(fake, "eth2") is None
    finally:
        pod.close()


def test_the_taint_effect_is_configurable(fake, node, running):
    running(link_taint_effect="NoExecute")
    ip("link", "set", "eth1p", "down", netns=node.name)
    assert wait_until(lambda: taint_of(fake, "eth1"), "eth1's taint") == ("down", "NoExecute")


def test_effect_none_publishes_no_taint(fake, node, running):
    run = running(link_taint_effect="None")
    fake.reset_requests()
    ip("link", "set", "eth1p", "down", netns=node.name)
    time.sleep(0.3)
    settle(run.publisher)
    assert writes(fake) == [] and "taints" not in devices(fake)["eth1"]


def test_a_restarted_publisher_keeps_the_taints_and_writes_nothing(fake, node, running):
    first = running()
    ip("link", "set", "eth1p", "down", netns=node.name)
    wait_until(lambda: taint_of(fake, "eth1"), "eth1's taint")
    settle(first.publisher)
    first.close()
    taints = devices(fake)["eth1"]["taints"]
    fake.reset_requests()
    time.sleep(1.1)  # a new timeAdded would differ
    running()
    assert writes(fake) == [] and devices(fake)["eth1"]["taints"] == taints


# -- bounded writes when the server drops fields -----------------------------------------------------
def test_gate_off_the_dropped_taints_cause_bounded_writes(tmp_path, node):
    """DRADeviceTaints off: the server stores the slice without the taint.  The publisher writes
    once per change of what it wants (taint on, taint off) and not again while it is the same,
    however many link events and resyncs come."""
    fake = make_fake(tmp_path, DRADeviceTaints=False)
    run = None
    try:
        run = Running(fake, node)
        fake.reset_requests()
        ip("link", "set", "eth1p", "down", netns=node.name)
        wait_until(lambda: writes(fake), "the write of the taint")
        for mtu in (1400, 1300):  # real changes while the taint stays dropped: one write each
            ip("link", "set", "eth1", "mtu", str(mtu), netns=node.name)
            wait_until(lambda m=mtu: devices(fake)["eth1"]["attributes"][f"{DRIVER}/mtu"] == {"int": m}, "the MTU")
        settle(run.publisher)
        assert len(writes(fake)) == 3 and "taints" not in devices(fake)["eth1"]
        fake.reset_requests()
        for _ in range(5):  # events and resyncs with nothing new: no write
            run.publisher._dirty.set()
            time.sleep(0.1)
        ip("link", "set", "eth1", "down", netns=node.name)  # the same taint: nothing new
        time.sleep(0.3)
        settle(run.publisher)
        assert writes(fake) == [], [(r.method, r.path) for r in writes(fake)]
        ip("link", "set", "eth1", "up", netns=node.name)
        ip("link", "set", "eth1p", "up", netns=node.name)  # the taint goes: the stored slice already says so
        time.sleep(0.3)
        settle(run.publisher)
        assert writes(fake) == []
    finally:
        if run is not None:
            run.close()
        fake.close()
