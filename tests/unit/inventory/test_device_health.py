"""Device health (issue 11, item 4): the link -> health mapping, and the DRAResourceHealth
stream of the real gRPC server and link monitor, read by kubelet's side of it
(tests/fakes/kubelet_health.py) over a real unix socket, with NICs in a throwaway netns."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from contextlib import contextmanager

import grpc
import pytest

from dracni.inventory.health import (
    HEALTHY,
    UNHEALTHY,
    UNKNOWN,
    DeviceHealthReporter,
    DiscoveredOffers,
    LinkState,
    device_health,
    link_health,
)
from dracni.inventory.nics import Nic
from dracni.inventory.sharing import EXCLUSIVE, SHARED, SLOTS
from dracni.inventory.slices import Offer
from dracni.kubelet.server import HEALTH_SERVICES, MAX_HEALTH_STREAMS, SUPPORTED_SERVICES, DRAPluginServer
from tests.fakes import kubelet_health
from tests.fakes.kubelet_health import V1, V1ALPHA1, V1BETA1, HealthWatcher, health_service_for, plugin_info
from tests.harness import Netns, ip, node_netns

DRIVER = "dracni.io"
POOL = "node1"

needs_netns = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 for a throwaway netns"
)


def up(name: str = "eth1", **kw) -> LinkState:
    return LinkState(**{"name": name, "index": 3, "admin_up": True, "oper_state": "up", "carrier": True, **kw})


# -- link -> health ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("link", "health", "words"),
    [
        (up(), HEALTHY, "is up"),
        (up(oper_state="unknown"), HEALTHY, "is up"),  # no RFC 2863 state (dummy, tun): carrier decides
        (up(carrier=None), HEALTHY, "is up"),
        (up(admin_up=False, oper_state="down", carrier=False), UNHEALTHY, "administratively down"),
        (up(carrier=False, oper_state="lowerlayerdown"), UNHEALTHY, "no carrier, operational state lowerlayerdown"),
        (up(oper_state="unknown", carrier=False), UNHEALTHY, "no carrier"),
        (up(oper_state="dormant"), UNHEALTHY, "operational state dormant"),
        (up(oper_state="down"), UNHEALTHY, "operational state down"),
        (up(oper_state="notpresent"), UNHEALTHY, "operational state notpresent"),
        (up(oper_state="testing"), UNHEALTHY, "operational state testing"),
        (None, UNKNOWN, "not in the node's network namespace"),
    ],
)
def test_link_health(link, health, words):
    got, message = link_health("eth1", link)
    assert got == health
    assert words in message


def offer(device: str, nic: str, mode: str = EXCLUSIVE, slot: int | None = None) -> Offer:
    return Offer(device, Nic(name=nic, index=0), mode, slot)


def test_every_device_of_a_nic_carries_its_health():
    offered = {
        "eth1": offer("eth1", "eth1", SHARED),
        **{f"eth2-slot-{i}": offer(f"eth2-slot-{i}", "eth2", SLOTS, i) for i in range(3)},
        "eth3": offer("eth3", "eth3"),
    }
    links = {"eth1": up("eth1"), "eth2": up("eth2", carrier=False, oper_state="lowerlayerdown")}
    got = {d.device: d.health for d in device_health(POOL, offered, links)}
    assert got == {"eth1": HEALTHY, "eth2-slot-0": UNHEALTHY, "eth2-slot-1": UNHEALTHY, "eth2-slot-2": UNHEALTHY,
                   "eth3": UNKNOWN}  # fmt: skip
    assert [d.device for d in device_health(POOL, offered, links)] == sorted(offered)
    assert {d.pool for d in device_health(POOL, offered, links)} == {POOL}


def test_a_device_no_longer_offered_is_reported_unknown():
    got = device_health(
        POOL, {"eth1": offer("eth1", "eth1")}, {"eth1": up()}, formerly={"eth1": "eth1", "eth9": "eth9"}
    )
    assert [(d.device, d.health) for d in got] == [("eth1", HEALTHY), ("eth9", UNKNOWN)]
    assert "no longer offered" in got[1].message


def test_messages_fit_kubelets_limit():
    got = device_health(POOL, {"d": offer("d", "x" * 2000)}, {})
    assert len(got[0].message) <= 1024


def test_without_slices_the_devices_are_discovered_again_only_when_links_change():
    names = [frozenset({"lo", "eth1"})]
    discoveries = []

    def discover():
        discoveries.append(1)
        return {"eth1": offer("eth1", "eth1")}

    devices = DiscoveredOffers(lambda: names[0], discover)
    assert devices() == devices() == {"eth1": offer("eth1", "eth1")}
    assert len(discoveries) == 1
    names[0] = frozenset({"lo", "eth1", "eth2"})
    devices()
    assert len(discoveries) == 2


# -- kubelet's choice of service (the fake's model) ------------------------------------------
def test_which_service_each_kubelet_dials():
    served = [*SUPPORTED_SERVICES, *HEALTH_SERVICES]
    assert health_service_for("1.37", served) == V1
    assert health_service_for("1.37", ["v1.DRAPlugin", V1ALPHA1]) == V1ALPHA1
    assert health_service_for("1.37", list(SUPPORTED_SERVICES)) is None
    for old in ("1.34", "1.35", "1.36"):
        assert health_service_for(old, list(SUPPORTED_SERVICES)) == V1ALPHA1


# -- the stream, end to end in one process ------------------------------------------------------
@pytest.fixture
def node():
    """A throwaway "node" netns with eth1 and eth2 (veth pairs, peers up)."""
    with node_netns("dracni-health") as ns:
        yield ns


OFFERED = {
    "eth1": offer("eth1", "eth1", SHARED),
    "eth2-slot-0": offer("eth2-slot-0", "eth2", SLOTS, 0),
    "eth2-slot-1": offer("eth2-slot-1", "eth2", SLOTS, 1),
}


@contextmanager
def serving(node: Netns, *, health: bool = True, resend: float = 10.0):
    """The DRA plugin server with a device health reporter on ``node``'s links."""
    sockdir = tempfile.mkdtemp(dir="/tmp", prefix="drh-")
    reporter = DeviceHealthReporter(pool=POOL, offered=lambda: OFFERED, netns=node.path, resend_seconds=resend)
    server = DRAPluginServer(
        driver=DRIVER,
        plugins_dir=os.path.join(sockdir, "plugins"),
        registry_dir=os.path.join(sockdir, "reg"),
        prepare=lambda claims: {},
        unprepare=lambda claims: {},
        health=reporter if health else None,
    )
    try:
        if health:
            reporter.start()
        server.start()
        yield server, reporter
    finally:
        reporter.close()
        server.stop(grace=1.0)
        reporter.stop()
        shutil.rmtree(sockdir, ignore_errors=True)


@needs_netns
def test_registration_lists_the_health_services(node):
    with serving(node) as (server, _):
        driver, endpoint, supported = plugin_info(server.registration_socket)
    assert (driver, endpoint) == (DRIVER, server.dra_socket)
    assert supported == ["v1.DRAPlugin", "v1beta1.DRAPlugin", V1, V1BETA1, V1ALPHA1]


@needs_netns
@pytest.mark.parametrize("service", [V1, V1BETA1, V1ALPHA1])
def test_the_stream_follows_link_down_and_up(node, service):
    with serving(node) as (server, _), HealthWatcher(server.dra_socket, DRIVER, service) as kubelet:
        first = kubelet.wait_responses(1)[0]
        assert [(p, d, h) for p, d, h, *_ in first] == [(POOL, "eth1", HEALTHY, ), (POOL, "eth2-slot-0", HEALTHY),
                                                        (POOL, "eth2-slot-1", HEALTHY)]  # fmt: skip
        assert {timeout for *_, timeout, _updated in first} == {30}
        assert all(updated > 0 for *_, updated in first)

        ip("link", "set", "eth2p", "down", netns=node.name)  # the NIC loses carrier
        messages = kubelet.wait_for(POOL, ["eth2-slot-0", "eth2-slot-1"], UNHEALTHY)
        assert all("no carrier" in m for m in messages)
        assert kubelet.health(POOL, "eth1") == (HEALTHY, "interface eth1 is up")

        ip("link", "set", "eth2p", "up", netns=node.name)
        kubelet.wait_for(POOL, ["eth2-slot-0", "eth2-slot-1"], HEALTHY)

        ip("link", "set", "eth1", "down", netns=node.name)  # taken down
        assert "administratively down" in kubelet.wait_for(POOL, ["eth1"], UNHEALTHY)[0]

        ip("link", "del", "eth1", netns=node.name)  # gone from the node's namespace
        kubelet.wait_for(POOL, ["eth1"], UNKNOWN)
        assert not kubelet.errors


@needs_netns
def test_a_device_already_unhealthy_when_the_service_starts_is_reported_and_healthy_ones_are_not(node):
    """The service's DeviceUnhealthy Events hang on ``on_unhealthy``: a NIC already down at
    start-up is reported once, like one that goes down later; a change that keeps it down is not."""
    ip("link", "set", "eth2p", "down", netns=node.name)
    reporter = DeviceHealthReporter(pool=POOL, offered=lambda: OFFERED, netns=node.path)
    told: list[tuple[str, str]] = []
    reporter.on_unhealthy = lambda d: told.append((d.device, d.health))
    try:
        reporter.start()
        assert told == [("eth2-slot-0", UNHEALTHY), ("eth2-slot-1", UNHEALTHY)]
        reporter.refresh()
        assert len(told) == 2
    finally:
        reporter.close()
        reporter.stop()


@needs_netns
def test_the_stream_ends_cleanly_when_the_reporter_closes(node):
    with (
        serving(node) as (server, reporter),
        HealthWatcher(server.dra_socket, DRIVER, V1, retry_interval=60) as kubelet,
    ):
        kubelet.wait_responses(1)
        reporter.close()
        kubelet.wait_ended(1)
        assert not kubelet.errors
        # kubelet clears the driver's health when a stream ends (HandleWatchResourcesStream)
        assert kubelet.health(POOL, "eth1")[0] == UNKNOWN


@needs_netns
def test_the_list_is_re_sent_while_the_link_monitor_lives_and_not_after(node):
    """Kubelet keeps a device's health for its timeout from receipt: the full list goes out
    again and again, but a dead monitor vouches for nothing, so kubelet decays to Unknown."""
    with (
        serving(node, resend=0.1) as (server, reporter),
        HealthWatcher(server.dra_socket, DRIVER, V1, retry_interval=60) as kubelet,
    ):
        responses = [[device[:5] for device in r] for r in kubelet.wait_responses(4)]  # less last_updated_time
        assert all(r == responses[0] for r in responses[1:4])
        reporter.monitor.stop()
        count = len(kubelet.wait_responses(1))
        stopped = threading.Event()
        stopped.wait(0.6)
        assert len(kubelet.responses) <= count + 1  # at most one already on its way
        assert not kubelet.errors


@needs_netns
def test_streams_are_capped_and_a_gone_kubelet_frees_its_stream(node):
    """At most MAX_HEALTH_STREAMS at once (the rest: RESOURCE_EXHAUSTED), so streams never take
    every worker thread; a stream whose kubelet went away ends and frees its place."""
    with serving(node) as (server, _):
        watchers = [HealthWatcher(server.dra_socket, DRIVER, V1, retry_interval=60) for _ in range(MAX_HEALTH_STREAMS)]
        extra = HealthWatcher(server.dra_socket, DRIVER, V1ALPHA1, retry_interval=60)
        try:
            for w in watchers:
                w.start().wait_responses(1)
            assert extra.start().wait_errors(1) == [grpc.StatusCode.RESOURCE_EXHAUSTED]
        finally:
            for w in [*watchers, extra]:
                w.close()
        for _ in range(MAX_HEALTH_STREAMS + 2):  # then one after another: each frees its place
            with HealthWatcher(server.dra_socket, DRIVER, V1, retry_interval=60) as kubelet:
                kubelet.wait_responses(1)


@needs_netns
def test_a_plugin_without_health_answers_unimplemented(node):
    with serving(node, health=False) as (server, _):
        _, _, supported = plugin_info(server.registration_socket)
        assert supported == list(SUPPORTED_SERVICES)
        assert HealthWatcher.for_plugin(server.registration_socket, kubelet="1.37") is None
        # 1.34-1.36 dial v1alpha1 anyway and keep retrying; 1.37 gives up on UNIMPLEMENTED
        old = HealthWatcher.for_plugin(server.registration_socket, kubelet="1.36", retry_interval=0.05)
        new = HealthWatcher(server.dra_socket, DRIVER, V1, kubelet="1.37", retry_interval=0.05)
        with old, new:
            assert old.wait_errors(3)[:3] == [grpc.StatusCode.UNIMPLEMENTED] * 3
            assert new.wait_errors(1) == [grpc.StatusCode.UNIMPLEMENTED]
        assert new.terminated and new.attempts == 1


def test_kubelets_cache_times_devices_out():
    """The fake's model of healthinfo.go: a device left out of a report, or not refreshed,
    turns Unknown after its timeout (here 0: at once)."""
    cache = kubelet_health.HealthCache()
    cache.update([(POOL, "a", HEALTHY, "", 30), (POOL, "b", HEALTHY, "", 30)])
    assert cache.get(POOL, "a") == (HEALTHY, "")
    cache.devices[(POOL, "b")].timeout = 0.0
    changed = cache.update([(POOL, "a", UNHEALTHY, "x", 30)])
    assert (POOL, "a") in changed and (POOL, "b") in changed
    assert cache.get(POOL, "a") == (UNHEALTHY, "x") and cache.get(POOL, "b") == (UNKNOWN, "")
    assert cache.get(POOL, "never") == (UNKNOWN, "")
