"""The link database (``dracni.inventory.links``): the one link-state predicate behind device
health and slice taints, and the one netlink watcher, in throwaway network namespaces (veth
pairs; always deleted).  Nothing here forks: an at-fork hook counts any fork of this process."""

from __future__ import annotations

import os
import threading
import time

import pytest

from dracni.inventory.health import HEALTHY, UNHEALTHY, link_health
from dracni.inventory.links import DOWN_STATES, LinkDB, LinkState, dump_links, link_problems, open_route_socket
from dracni.inventory.nics import Nic, discover_nics
from tests.harness import NETNS_RUN, ip, node_netns
from tests.unit.inventory.test_nics import needs_netns

FORKS: list[int] = []
os.register_at_fork(before=lambda: FORKS.append(1))

#: RFC 2863 ifOperStatus, as IFLA_OPERSTATE names them (lowercased), and whether traffic passes.
RFC2863 = [
    ("up", True),
    ("unknown", True),  # drivers that keep no state (dummy, tun): the carrier decides
    ("down", False),
    ("lowerlayerdown", False),
    ("notpresent", False),
    ("dormant", False),  # waiting for an external event (802.1X, mode dormant): no packets
    ("testing", False),  # "no operational packets can be passed"
]


@pytest.mark.parametrize(("state", "passes"), RFC2863)
def test_one_predicate_for_health_and_taints(state, passes):
    """Kubelet's health and the slice's link=down taint read the same predicate: a link that
    cannot pass traffic is Unhealthy *and* tainted, whatever its operational state."""
    assert (state in DOWN_STATES) is not passes
    assert (link_problems(state, True) == []) is passes
    health, _ = link_health("eth1", LinkState("eth1", 3, True, state, True))
    assert health == (HEALTHY if passes else UNHEALTHY)
    assert Nic("eth1", 3, oper_state=state, carrier=True, admin_up=True).link_down is not passes


@pytest.mark.parametrize("state", [s for s, _ in RFC2863])
def test_no_carrier_is_down_in_every_state(state):
    assert link_problems(state, False)
    assert Nic("eth1", 3, oper_state=state, carrier=False).link_down


def test_the_reasons_name_every_problem():
    assert link_problems("down", False, admin_up=False) == [
        "administratively down",
        "no carrier",
        "operational state down",
    ]


@pytest.fixture
def node():
    with node_netns("dracni-links") as ns:
        yield ns
    assert not ns.exists()


def _wait(predicate, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("timed out")


@needs_netns
def test_the_view_follows_link_events_and_tells_subscribers(node):
    forks = len(FORKS)
    db = LinkDB(node.path)
    heard: list[bool] = []
    db.subscribe(heard.append)
    db.start()
    try:
        assert db.alive()
        assert {"lo", "eth1", "eth2"} <= set(db.by_name())
        assert [link.name for link in db.snapshot()] == [link.name for link in dump_links(node.path)]
        _wait(lambda: heard)  # every POLL_SECONDS, changed or not
        heard.clear()
        ip("link", "set", "eth1", "mtu", "1400", netns=node.name)
        _wait(lambda: db.by_name()["eth1"].mtu == 1400)
        _wait(lambda: True in heard)
        ip("link", "add", "eth3", "type", "veth", "peer", "name", "eth3p", netns=node.name)
        _wait(lambda: "eth3" in db.by_name() and db.by_name()["eth3"].kind == "veth")
        ip("link", "del", "eth3", netns=node.name)
        _wait(lambda: "eth3" not in db.by_name())
    finally:
        db.stop()
    assert not db.running()
    assert len(FORKS) == forks, "the link database forked"


@needs_netns
def test_a_dormant_nic_is_unhealthy_and_tainted(node):
    """RFC 2863 dormant: the link is up and has a lower layer, but passes nothing yet."""
    ip("link", "set", "eth1", "mode", "dormant", netns=node.name)
    ip("link", "set", "eth1p", "down", netns=node.name)  # the state is recomputed on a carrier change
    ip("link", "set", "eth1p", "up", netns=node.name)
    db = LinkDB(node.path)
    db.start()
    try:
        link = _wait(lambda: db.by_name()["eth1"].oper_state == "dormant" and db.by_name()["eth1"])
        assert link_health("eth1", link)[0] == UNHEALTHY
        nic = {n.name: n for n in discover_nics(links=db, sysfs_root="/nonexistent-sysfs")}["eth1"]
        assert nic.link_down
        assert not {n.name: n for n in discover_nics(links=db, sysfs_root="/nonexistent-sysfs")}["eth2"].link_down
    finally:
        db.stop()


@needs_netns
def test_a_failing_subscriber_does_not_stop_the_others(node):
    db = LinkDB(node.path)

    def broken(changed: bool) -> None:
        raise RuntimeError("subscriber bug")

    heard = threading.Event()
    db.subscribe(broken)
    db.subscribe(lambda changed: heard.set())
    db.start()
    try:
        assert heard.wait(5)
        heard.clear()
        assert heard.wait(5) and db.alive()
    finally:
        db.stop()


def test_a_shared_database_is_used_as_it_is_else_one_of_our_own():
    """The publisher and the health reporter share the service's database (its owner starts and
    stops it), else each makes, starts and stops its own."""
    shared = LinkDB("/run/netns/x")
    assert LinkDB.shared_or_own(shared, "/run/netns/y") == (shared, False)
    own, owned = LinkDB.shared_or_own(None, "/run/netns/y")
    assert owned and own is not shared and own.netns == "/run/netns/y"
    assert not own.running()


@needs_netns
def test_a_missing_namespace_fails_the_start_and_is_not_created():
    path = str(NETNS_RUN / f"dracni-links-absent-{os.getpid()}")
    with pytest.raises(FileNotFoundError):
        LinkDB(path).start()
    with pytest.raises(FileNotFoundError):
        open_route_socket(path)
    assert not os.path.lexists(path)


@needs_netns
def test_without_a_watcher_a_snapshot_dumps_once(node):
    forks = len(FORKS)
    db = LinkDB(node.path)
    assert not db.running() and db.by_name() == {}
    assert {"lo", "eth1", "eth2"} <= {link.name for link in db.snapshot()}
    assert len(FORKS) == forks
