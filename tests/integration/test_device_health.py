"""Device health through the frozen service (issue 11, item 4): kubelet's health stream
(tests/fakes/kubelet_health.py) on the service's DRA socket while the lab's "node" netns takes
its NICs down and up.  eth1 is a shared NIC (one device), eth2 is offered as slots (several
devices): every device carries its NIC's health."""

from __future__ import annotations

import time

import grpc
import pytest

from tests.fakes.kubelet_health import (
    HEALTHY,
    UNHEALTHY,
    UNKNOWN,
    V1,
    V1ALPHA1,
    V1BETA1,
    HealthWatcher,
    resource_health,
)
from tests.harness import ip
from tests.integration.service import DRIVER, NODE, ServiceProcess, wait_for

SLOTS = 4
ETH2 = [f"eth2-slot-{i}" for i in range(SLOTS)]


@pytest.fixture
def service(lab, api):
    lab.write_conflist()
    svc = ServiceProcess(lab, api, extra_args=("--nic-sharing=eth2=slots", f"--nic-slots={SLOTS}"))
    try:
        svc.start()
        yield svc
    finally:
        svc.close()


def registration_socket(service: ServiceProcess) -> str:
    return str(service.registry_dir / f"{DRIVER}-reg.sock")


def published(api) -> set[str]:
    return {d["name"] for s in api.list_slices() for d in s["spec"]["devices"]}


def test_health_follows_the_links_for_every_kubelet_version(lab, api, service):
    wait_for(lambda: {"eth1", *ETH2} <= published(api), 10.0, "the slices")
    new = HealthWatcher.for_plugin(registration_socket(service), kubelet="1.37", retry_interval=60)
    old = HealthWatcher.for_plugin(registration_socket(service), kubelet="1.36", retry_interval=60)
    assert new is not None and new.service == V1
    assert old is not None and old.service == V1ALPHA1
    beta = HealthWatcher(new.endpoint, DRIVER, V1BETA1, retry_interval=60)
    kubelets = (new, old, beta)
    with new, old, beta:
        for kubelet in kubelets:
            kubelet.wait_for(NODE, ["eth1", *ETH2], HEALTHY)
            first = {device for _, device, *_ in kubelet.responses[0]}
            assert {"eth1", *ETH2} <= first, "the first message lists every published device"

        ip("link", "set", "eth1p", "down", netns=lab.host.name)  # eth1 loses its carrier
        for kubelet in kubelets:
            assert "no carrier" in kubelet.wait_for(NODE, ["eth1"], UNHEALTHY)[0]
            assert [kubelet.health(NODE, d)[0] for d in ETH2] == [HEALTHY] * SLOTS
        # what kubelet writes into the pod's container status for a claim on eth1
        assert resource_health(DRIVER, NODE, "eth1", new.health(NODE, "eth1")[0]) == {
            "resourceID": f"{DRIVER}/{NODE}/eth1",
            "health": UNHEALTHY,
        }

        ip("link", "set", "eth1p", "up", netns=lab.host.name)
        ip("link", "set", "eth2", "down", netns=lab.host.name)  # every slot of eth2 goes with it
        for kubelet in kubelets:
            kubelet.wait_for(NODE, ["eth1"], HEALTHY)
            assert "administratively down" in kubelet.wait_for(NODE, ETH2, UNHEALTHY)[0]

        ip("link", "set", "eth2", "up", netns=lab.host.name)
        for kubelet in kubelets:
            kubelet.wait_for(NODE, ETH2, HEALTHY)

        ip("link", "del", "eth1", netns=lab.host.name)  # gone from the node's namespace
        for kubelet in kubelets:
            kubelet.wait_for(NODE, ["eth1"], UNKNOWN)
            assert not kubelet.errors, kubelet.errors

        # The service stops: its streams end cleanly, before the socket goes away.
        started = time.monotonic()
        assert service.stop() == 0
        assert time.monotonic() - started < 5.0
        for kubelet in kubelets:
            kubelet.wait_ended(1)
            assert kubelet.errors in ([], [grpc.StatusCode.UNAVAILABLE])
            assert kubelet.health(NODE, "eth2-slot-0")[0] == UNKNOWN  # kubelet cleared the driver
    assert "device eth1 is Unhealthy" in service.log()
