"""The frozen service under a fake kubelet that behaves like upstream's DRA manager and plugin
manager (tests/fakes/kubelet): pods are prepared claim set by claim set, a failure fails the
pod and the unprepared set is sent again, shared claims are prepared once, ResourceSlices are
wiped when kubelet starts and when a driver stays away, and a restarted kubelet registers
the plugin again from its checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes.kubelet import FakeKubelet, Pod, PodSyncError, WipeBackoff
from tests.harness import ip
from tests.integration.conftest import ipam_reservations
from tests.integration.service import (
    DRIVER,
    NODE,
    ServiceProcess,
    claim_ref,
    create_allocated_claim,
    macvlan_params,
    new_pod_uid,
    our_status,
    wait_for,
)

OTHER_DRIVER = "other.example.com"


def api_kubelet(lab, api, *, wiping_delay: float = 30.0, state_dir: Path | None = None):
    """A factory for ServiceProcess: the node's kubelet with an API client and a checkpoint."""

    def make(registry_dir: Path) -> FakeKubelet:
        return FakeKubelet(
            str(registry_dir),
            driver=DRIVER,
            state_dir=str(state_dir or lab.tmp / "kubelet"),
            kubeconfig=api.kubeconfig_path,
            node_name=NODE,
            wiping_delay=wiping_delay,
            wipe_backoff=WipeBackoff(duration=0.1),
        )

    return make


@pytest.fixture
def node(lab, api):
    """The service, registered with a started fake kubelet that talks to the API server."""
    lab.write_conflist()
    svc = ServiceProcess(lab, api, kubelet=api_kubelet(lab, api))
    try:
        svc.kubelet.start()
        svc.start()
        yield svc
    finally:
        svc.close()


def record_of(lab, claim: dict) -> Path:
    return lab.state_dir / "claims" / f"{claim['metadata']['uid']}.json"


def network_without_master(lab, network: str, subnet: str) -> dict:
    """A DeviceClass network whose macvlan master comes from the allocated device."""
    params = macvlan_params(lab, network=network, subnet=subnet)
    del params["config"]["plugins"][0]["master"]
    return params


def slice_devices(api, driver: str = DRIVER) -> set[str]:
    return {d["name"] for s in api.list_slices(node=NODE, driver=driver) for d in s["spec"]["devices"]}


def other_driver_slice(api) -> None:
    api.create_slice(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{NODE}-other"},
            "spec": {
                "driver": OTHER_DRIVER,
                "nodeName": NODE,
                "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu0"}],
            },
        }
    )


# -- the DRA manager ----------------------------------------------------------------------------
def test_a_failing_claim_fails_the_pod_and_the_whole_unprepared_set_is_sent_again(lab, api, node):
    kubelet = node.kubelet
    pod_uid = new_pod_uid()
    a = create_allocated_claim(api, "a", pod_uid, macvlan_params(lab))
    # B's device is eth9, which this node does not have yet: the service refuses B.
    b = create_allocated_claim(api, "b", pod_uid, network_without_master(lab, "mv-b", "10.10.2.0/24"), device="eth9")
    pod = Pod(pod_uid, "default", "demo", ("a", "b"))

    with pytest.raises(PodSyncError, match=r"NodePrepareResources failed for ResourceClaim b: .*no such device"):
        kubelet.prepare_pod(pod)
    (first,) = kubelet.calls_of("NodePrepareResources")
    assert [name for _, _, name in first.claims] == ["a", "b"]  # one batch for the driver
    assert first.results is not None and first.results[a["metadata"]["uid"]] == ""
    assert record_of(lab, a).exists() and not record_of(lab, b).exists()  # the service prepared A alone
    record_a = record_of(lab, a).read_bytes()
    for name in ("a", "b"):  # kubelet keeps both, referenced by the pod, neither prepared
        info = kubelet.cache.get(name, "default")
        assert info is not None and info.pod_uids == {pod_uid} and not info.prepared

    # The NIC appears; the service publishes it, and the next pod sync sends [A, B] again.
    ip("link", "add", "eth9", "type", "veth", "peer", "name", "eth9p", netns=lab.host.name)
    wait_for(lambda: "eth9" in slice_devices(api), 10.0, "eth9 in the node's slice")
    kubelet.prepare_pod(pod)
    second = kubelet.calls_of("NodePrepareResources")[1]
    assert [name for _, _, name in second.claims] == ["a", "b"]
    assert second.results == {a["metadata"]["uid"]: "", b["metadata"]["uid"]: ""}
    assert record_of(lab, a).read_bytes() == record_a  # A again: idempotent, its record untouched
    assert record_of(lab, b).exists()
    assert all(kubelet.cache.get(name, "default").prepared for name in ("a", "b"))

    kubelet.prepare_pod(pod)  # a later sync: everything is prepared, nothing is sent
    assert len(kubelet.calls_of("NodePrepareResources")) == 2

    kubelet.unprepare_pod(pod)
    (unprepare,) = kubelet.calls_of("NodeUnprepareResources")
    assert sorted(name for _, _, name in unprepare.claims) == ["a", "b"]
    assert not record_of(lab, a).exists() and not record_of(lab, b).exists()
    assert kubelet.cache.claims == {}


def test_a_claim_shared_by_two_pods_is_prepared_once_and_unprepared_after_the_last(lab, api, node):
    kubelet = node.kubelet
    first, second = new_pod_uid(), new_pod_uid()
    claim = create_allocated_claim(api, "shared", first, macvlan_params(lab), pod_name="one")
    api.set_claim_allocation(
        "default",
        "shared",
        claim["status"]["allocation"],
        [{"resource": "pods", "name": "one", "uid": first}, {"resource": "pods", "name": "two", "uid": second}],
    )
    pod_one = Pod(first, "default", "one", ("shared",))
    pod_two = Pod(second, "default", "two", ("shared",))

    kubelet.prepare_pod(pod_one)
    kubelet.prepare_pod(pod_two)
    (prepare,) = kubelet.calls_of("NodePrepareResources")
    assert [name for _, _, name in prepare.claims] == ["shared"]
    assert kubelet.cache.get("shared", "default").pod_uids == {first, second}

    kubelet.unprepare_pod(pod_one)
    assert kubelet.calls_of("NodeUnprepareResources") == []  # the second pod still uses it
    assert record_of(lab, claim).exists()
    assert kubelet.cache.get("shared", "default").pod_uids == {second}

    kubelet.unprepare_pod(pod_two)
    (unprepare,) = kubelet.calls_of("NodeUnprepareResources")
    assert [name for _, _, name in unprepare.claims] == ["shared"]
    assert not record_of(lab, claim).exists()


def test_a_pod_joining_a_prepared_claim_gets_its_interface_without_a_prepare_call(lab, api, node):
    """Kubelet prepares a shared claim only for its first pod.  The scheduler reserves it for a
    second pod later and binds that pod here: the service learns it from its watch of this
    node's pods, and the second sandbox's ADD finds the claim."""
    kubelet = node.kubelet
    first, second = new_pod_uid(), new_pod_uid()
    claim = create_allocated_claim(api, "shared", first, macvlan_params(lab), pod_name="one")
    api.add_pod("default", "one", node=NODE, claims={"net": "shared"}, uid=first)
    kubelet.prepare_pod(Pod(first, "default", "one", ("shared",)))
    one = lab.pod()
    lab.cnitool("add", one, pod_uid=first)
    assert "net1" in one.links()

    api.set_claim_allocation(  # the scheduler reserves the claim for the second pod, then binds it
        "default",
        "shared",
        claim["status"]["allocation"],
        [{"resource": "pods", "name": "one", "uid": first}, {"resource": "pods", "name": "two", "uid": second}],
    )
    api.add_pod("default", "two", node=NODE, claims={"net": "shared"}, uid=second)
    kubelet.prepare_pod(Pod(second, "default", "two", ("shared",)))
    assert len(kubelet.calls_of("NodePrepareResources")) == 1  # nothing sent for the second pod

    def knows_second() -> bool:
        record = json.loads(record_of(lab, claim).read_text())
        return second in {p["uid"] for p in record["pods"]}

    wait_for(knows_second, 10.0, "the claim's record naming the second pod")
    two = lab.pod()
    lab.cnitool("add", two, pod_uid=second)
    assert "net1" in two.links()
    assert sorted(ipam_reservations(lab, "mv")) == ["10.10.1.2", "10.10.1.3"]
    lab.cnitool("del", two, pod_uid=second)
    lab.cnitool("del", one, pod_uid=first)
    assert ipam_reservations(lab, "mv") == []


def test_a_pod_not_in_reserved_for_is_refused_before_any_call(lab, api, node):
    kubelet = node.kubelet
    create_allocated_claim(api, "mv", new_pod_uid(), macvlan_params(lab))
    stranger = Pod(new_pod_uid(), "default", "stranger", ("mv",))
    with pytest.raises(PodSyncError, match=r"pod stranger \(.*\) is not allowed to use ResourceClaim mv"):
        kubelet.prepare_pod(stranger)
    assert kubelet.calls == [] and kubelet.cache.claims == {}


def test_cni_del_after_unprepare_releases_the_interface_and_ipam(lab, api, node):
    kubelet = node.kubelet
    pod_uid = new_pod_uid()
    claim = create_allocated_claim(api, "mv", pod_uid, macvlan_params(lab))
    pod = Pod(pod_uid, "default", "demo", ("mv",))
    kubelet.prepare_pod(pod)
    netns = lab.pod()
    lab.cnitool("add", netns, pod_uid=pod_uid)
    assert "net1" in netns.links()
    assert ipam_reservations(lab, "mv") == ["10.10.1.2"]
    wait_for(lambda: our_status(api, claim), 5.0, "status after ADD")

    kubelet.unprepare_pod(pod)  # e.g. the runtime's DEL came late, or a second DEL (RemovePodSandbox)
    assert not record_of(lab, claim).exists()
    lab.cnitool("del", netns, pod_uid=pod_uid)
    assert "net1" not in netns.links()
    assert ipam_reservations(lab, "mv") == []
    wait_for(lambda: not our_status(api, claim), 5.0, "our status.devices entries cleared after DEL")


# -- the plugin manager ---------------------------------------------------------------------------
def test_slices_wiped_when_kubelet_starts_are_recreated(lab, api, node):
    wait_for(lambda: {"eth1", "eth2"} <= slice_devices(api), 10.0, "the node's slices")
    before = slice_devices(api)
    api.create_slice(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "node-b-slice"},
            "spec": {
                "driver": DRIVER,
                "nodeName": "node-b",
                "pool": {"name": "node-b", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "eth1"}],
            },
        }
    )
    mark, wipes_before = len(api.events()), len(api.requests_to("DELETE", "/resourceslices"))
    node.kubelet.close()  # kubelet restarts

    restarted = FakeKubelet(
        str(node.registry_dir),
        driver=DRIVER,
        kubeconfig=api.kubeconfig_path,
        node_name=NODE,
        state_dir=str(lab.tmp / "kubelet"),
        wipe_backoff=WipeBackoff(duration=0.1),
    )
    node.kubelet = restarted  # the service closes it
    restarted.start()
    assert restarted.startup_wiped.wait(10)
    (wipe,) = api.requests_to("DELETE", "/resourceslices")[wipes_before:]
    assert "kubelet" in (wipe.user_agent or "") and wipe.query.get("fieldSelector") == f"spec.nodeName={NODE}"
    deleted = [e["object"]["metadata"]["name"] for e in api.events()[mark:] if e["type"] == "DELETED"]
    assert deleted and all(name.startswith(NODE) for name in deleted), deleted
    assert api.get_slice("node-b-slice") is not None  # another node's slice is left alone

    recreated, _ = wait_for(lambda: slice_devices(api) == before and slice_devices(api), 10.0, "re-created slices")
    assert recreated == before


def test_a_driver_gone_longer_than_the_wiping_delay_loses_its_slices(lab, api):
    lab.write_conflist()
    service = ServiceProcess(lab, api, kubelet=api_kubelet(lab, api, wiping_delay=1.0))
    try:
        service.kubelet.start()
        service.start()
        wait_for(lambda: {"eth1", "eth2"} <= slice_devices(api), 10.0, "the node's slices")
        other_driver_slice(api)

        service.stop()  # the registration socket goes away
        wait_for(lambda: not slice_devices(api), 10.0, "the driver's slices wiped")
        assert [driver for driver, _ in service.kubelet.manager.wipes_fired] == [DRIVER]
        assert slice_devices(api, OTHER_DRIVER) == {"gpu0"}  # only that driver's slices

        service.start()  # back: registered again, and it publishes its slices again
        wait_for(lambda: {"eth1", "eth2"} <= slice_devices(api), 10.0, "slices published again")
        assert service.kubelet.manager.pending_wipes() == []
    finally:
        service.close()


def test_a_driver_back_within_the_wiping_delay_keeps_its_slices(lab, api):
    lab.write_conflist()
    service = ServiceProcess(lab, api, kubelet=api_kubelet(lab, api, wiping_delay=20.0))
    try:
        service.kubelet.start()
        service.start()
        wait_for(lambda: {"eth1", "eth2"} <= slice_devices(api), 10.0, "the node's slices")
        names = {s["metadata"]["name"] for s in api.list_slices(node=NODE, driver=DRIVER)}
        service.stop()
        wait_for(lambda: service.kubelet.manager.pending_wipes() == [DRIVER], 5.0, "a wipe queued for the driver")
        service.start()
        wait_for(lambda: service.kubelet.manager.pending_wipes() == [], 5.0, "the queued wipe cancelled")
        assert service.kubelet.manager.wipes_fired == []
        assert {s["metadata"]["name"] for s in api.list_slices(node=NODE, driver=DRIVER)} == names
        assert not [
            r for r in api.requests_to("DELETE", "/resourceslices") if "driver" in r.query.get("fieldSelector", "")
        ]
    finally:
        service.close()


def test_a_restarted_kubelet_registers_again_and_prepared_claims_are_still_served(lab, api, node):
    pod_uid = new_pod_uid()
    claim = create_allocated_claim(api, "mv", pod_uid, macvlan_params(lab))
    pod = Pod(pod_uid, "default", "demo", ("mv",))
    node.kubelet.prepare_pod(pod)
    record = record_of(lab, claim).read_bytes()
    netns = lab.pod()
    lab.cnitool("add", netns, pod_uid=pod_uid)
    node.kubelet.close()

    restarted = FakeKubelet(
        str(node.registry_dir),
        driver=DRIVER,
        kubeconfig=api.kubeconfig_path,
        node_name=NODE,
        state_dir=str(lab.tmp / "kubelet"),
        wipe_backoff=WipeBackoff(duration=0.1),
    )
    node.kubelet = restarted
    info = restarted.cache.get("mv", "default")  # from the checkpoint: known, referenced, not prepared
    assert info is not None and info.pod_uids == {pod_uid} and not info.prepared
    assert info.driver_state[DRIVER][0].device_name == "eth1"

    restarted.start()
    wait_for(lambda: DRIVER in restarted.plugins, 10.0, "the plugin registered with the restarted kubelet")
    assert restarted.attempts[-1] == (str(node.registry_dir / f"{DRIVER}-reg.sock"), None)
    assert node.readyz()[0] == 200

    # The pod's sandbox runs on: kubelet sends nothing, and its prepared claim is still served.
    lab.cnitool("check", netns, pod_uid=pod_uid)
    assert restarted.calls == []

    # The sandbox dies and kubelet makes a new one: PrepareResources runs first (kuberuntime
    # SyncPod), and the claim restored unprepared from the checkpoint is sent again.
    lab.cnitool("del", netns, pod_uid=pod_uid)
    restarted.prepare_pod(pod)
    (replay,) = restarted.calls_of("NodePrepareResources")
    assert replay.results == {claim["metadata"]["uid"]: ""}
    assert record_of(lab, claim).read_bytes() == record
    sandbox = lab.pod()
    lab.cnitool("add", sandbox, pod_uid=pod_uid)
    assert "net1" in sandbox.links()

    lab.cnitool("del", sandbox, pod_uid=pod_uid)
    restarted.unprepare_pod(pod)
    assert not record_of(lab, claim).exists()
    assert ipam_reservations(lab, "mv") == []
    assert restarted.cache.claims == {}


def test_a_claim_with_an_empty_or_malformed_uid_fails_alone_in_its_batch(lab, api, node):
    """The frozen service answers such a claim with its own error; the others of the batch are
    prepared and unprepared as usual (issue 12, item 6)."""
    kubelet = node.kubelet
    a = create_allocated_claim(api, "a", new_pod_uid(), macvlan_params(lab))
    batch = [claim_ref(a), ("default", "", "no-uid"), ("default", "x/../y", "bad-uid")]

    results = kubelet.prepare(batch)
    assert results[a["metadata"]["uid"]].error == ""
    assert [d.device_name for d in results[a["metadata"]["uid"]].devices] == ["eth1"]
    assert "the claim has no UID (claim default/no-uid)" in results[""].error
    assert "malformed claim UID 'x/../y' (claim default/bad-uid)" in results["x/../y"].error
    assert record_of(lab, a).exists()

    results = kubelet.unprepare(batch)
    assert results[a["metadata"]["uid"]].error == ""
    assert results[""].error and results["x/../y"].error
    assert not record_of(lab, a).exists()
