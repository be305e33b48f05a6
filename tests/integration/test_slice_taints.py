"""The frozen service's ResourceSlices against the test API server, NICs in the lab's "node"
netns (issue 11): link-down and gone taints (KEP-5055), no LIST per netlink event and LISTs with
resourceVersion=0, slices wiped by someone re-created, and bounded writes when the server drops
the taints (DRADeviceTaints off)."""

from __future__ import annotations

import time

import pytest

from tests.harness import ip
from tests.integration.conftest import running_api_server
from tests.integration.service import DRIVER, NODE, ServiceProcess, wait_for

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def devices(api) -> dict[str, dict]:
    return {d["name"]: d for s in api.list_slices(node=NODE, driver=DRIVER) for d in s["spec"]["devices"]}


def taint_of(api, name: str) -> tuple[str, str] | None:
    taints = devices(api).get(name, {}).get("taints") or []
    return (taints[0]["value"], taints[0]["effect"]) if taints else None


def slice_requests(api, *, watch: bool | None = None, methods: tuple[str, ...] = ()) -> list:
    return [
        r
        for r in api.requests
        if r.path.startswith(SLICES) and (watch is None or r.watch == watch) and (not methods or r.method in methods)
    ]


def lists(api) -> list:
    return slice_requests(api, watch=False, methods=("GET",))


def writes(api) -> list:
    return slice_requests(api, methods=("POST", "PUT", "PATCH", "DELETE"))


def quiet(seconds: float = 1.5) -> None:
    """Time for the service to act on what just happened (a resync would take 60 s)."""
    time.sleep(seconds)


@pytest.fixture
def started(lab, api):
    services: list[ServiceProcess] = []

    def start(*args: str) -> ServiceProcess:
        service = ServiceProcess(lab, api, extra_args=args)
        service.start()
        services.append(service)
        return service

    try:
        yield start
    finally:
        for service in services:
            service.close()


def test_link_down_taints_up_untaints_without_a_list(lab, api, started):
    started()
    assert lists(api) and all(r.query.get("resourceVersion") == "0" for r in lists(api))
    assert taint_of(api, "eth1") is None and taint_of(api, "eth2") is None
    api.reset_requests()
    ip("link", "set", "eth1p", "down", netns=lab.host.name)  # eth1 loses its carrier
    assert wait_for(lambda: taint_of(api, "eth1"), 5.0, "eth1's taint")[0] == ("down", "NoSchedule")
    (taint,) = devices(api)["eth1"]["taints"]
    assert taint["key"] == f"{DRIVER}/link" and taint["timeAdded"].endswith("Z")
    ip("link", "set", "eth1p", "up", netns=lab.host.name)
    wait_for(lambda: taint_of(api, "eth1") is None, 5.0, "eth1's taint to go")
    quiet()
    assert lists(api) == [], "a LIST after a netlink event"
    assert len(writes(api)) == 2  # the taint, its removal: nothing else


def test_a_vanished_nic_stays_tainted_gone_and_comes_back(lab, api, started):
    started("--link-down-taint-effect=NoExecute")
    ip("link", "del", "eth2", netns=lab.host.name)
    assert wait_for(lambda: taint_of(api, "eth2"), 5.0, "eth2's gone taint")[0] == ("gone", "NoExecute")
    ip("link", "add", "eth2", "type", "veth", "peer", "name", "eth2p", netns=lab.host.name)
    ip("link", "set", "eth2", "up", netns=lab.host.name)
    ip("link", "set", "eth2p", "up", netns=lab.host.name)
    wait_for(lambda: "eth2" in devices(api) and taint_of(api, "eth2") is None, 5.0, "eth2 back, untainted")


def test_slices_wiped_by_kubelet_are_recreated_without_a_list(lab, api, started):
    started()
    before = devices(api)
    api.reset_requests()
    assert api.delete_all_slices(node=NODE) == 1  # kubelet at its start
    wait_for(lambda: devices(api).keys() == before.keys(), 5.0, "the slices back")
    quiet()
    assert lists(api) == [] and [r.method for r in writes(api)] == ["POST"]


def test_gate_off_the_dropped_taint_is_written_once(lab, tmp_path):
    """DRADeviceTaints off (before 1.36): the server stores the slice without the taint.  The
    service writes it once, then not again while it wants the same, through link events."""
    with running_api_server(tmp_path, feature_gates={"DRADeviceTaints": False}) as api:
        service = ServiceProcess(lab, api)
        service.start()
        try:
            api.reset_requests()
            ip("link", "set", "eth1p", "down", netns=lab.host.name)
            wait_for(lambda: writes(api), 5.0, "the write of the taint")
            quiet()
            assert len(writes(api)) == 1 and "taints" not in devices(api)["eth1"]
            for state in ("down", "up", "down"):  # eth1 itself flaps: still "down", no carrier
                ip("link", "set", "eth1", state, netns=lab.host.name)
                time.sleep(0.2)
            quiet()
            assert len(writes(api)) == 1, [(r.method, r.path) for r in writes(api)]
            assert "dracni_resourceslice_writes_total" in service.metrics()
        finally:
            service.close()


def test_a_nic_host_device_moved_into_a_pod_is_not_tainted_gone(lab, api, started):
    """The NIC left the node's netns because a prepared claim's pod holds it: no "gone" taint
    (with NoExecute it would evict that very pod); after DEL it is back, not "gone"."""
    from tests.integration.service import claim_ref, create_allocated_claim, new_pod_uid

    lab.write_conflist()
    service = started("--nic-sharing=eth2=exclusive", "--link-down-taint-effect=NoExecute")
    network = {"apiVersion": "dracni.io/v1alpha1", "kind": "NetworkAttachment", "ifName": "data0", "config": {
        "cniVersion": "1.0.0", "name": "passthrough", "plugins": [{"type": "host-device"}]}}  # fmt: skip
    pod_uid = new_pod_uid()
    claim = create_allocated_claim(api, "whole", pod_uid, network, device="eth2")
    assert not service.kubelet.prepare([claim_ref(claim)])[claim["metadata"]["uid"]].error
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    assert "eth2" not in lab.host.links()
    ip("link", "set", "eth1p", "down", netns=lab.host.name)  # a later event to wait for
    wait_for(lambda: taint_of(api, "eth1"), 5.0, "eth1's taint")
    quiet(0.5)
    assert "eth2" in devices(api) and taint_of(api, "eth2") is None
    lab.cnitool("del", pod, pod_uid=pod_uid)
    assert "eth2" in lab.host.links()
    quiet(0.5)
    assert (taint_of(api, "eth2") or ("",))[0] != "gone"  # back (host-device may return it down)
