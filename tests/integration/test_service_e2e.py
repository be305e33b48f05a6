"""End to end: fake kubelet -> frozen `dracni kubelet-plugin` -> state dir -> cnitool ADD with
Debian's plugins in a real netns -> status.devices in the (fake) API server -> DEL."""

from __future__ import annotations

from tests.harness import add_nics
from tests.integration.conftest import prepare_ok
from tests.integration.service import (
    DRIVER,
    NODE,
    FakeKubelet,
    claim_ref,
    create_allocated_claim,
    dump,
    macvlan_params,
    new_pod_uid,
    our_status,
    wait_for,
)


def test_prepare_add_status_del(lab, api, service, kubelet):
    pod_uid = new_pod_uid()
    claim = create_allocated_claim(api, "mv", pod_uid, macvlan_params(lab))
    response = prepare_ok(kubelet, claim)
    assert [(d.pool_name, d.device_name, list(d.request_names)) for d in response.devices] == [(NODE, "eth1", ["net"])]

    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)

    entries, elapsed = wait_for(lambda: our_status(api, claim), 1.0, "status.devices after ADD")
    mac = pod.links()["net1"]["address"]
    assert len(entries) == 1, dump(entries)
    entry = entries[0]
    assert (entry["pool"], entry["device"]) == (NODE, "eth1")
    assert entry["networkData"] == {"interfaceName": "net1", "ips": ["10.10.1.2/24"], "hardwareAddress": mac}
    assert entry["conditions"][0]["type"] == "Ready" and entry["conditions"][0]["status"] == "True"
    assert entry["data"]["ips"][0]["address"] == "10.10.1.2/24"
    applies = api.requests_to("PATCH", "/resourceclaims/mv/status")
    assert applies and all(
        r.content_type.startswith("application/apply-patch") and r.field_manager == DRIVER for r in applies
    )

    lab.cnitool("del", pod, pod_uid=pod_uid)
    wait_for(lambda: not our_status(api, claim), 1.0, "our status.devices entries to be cleared after DEL")
    unprepared = kubelet.unprepare([claim_ref(claim)])
    assert not unprepared[claim["metadata"]["uid"]].error


def test_other_drivers_entries_survive_our_publishes(lab, api, service, kubelet):
    pod_uid = new_pod_uid()
    claim = create_allocated_claim(api, "mv", pod_uid, macvlan_params(lab))
    prepare_ok(kubelet, claim)
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    wait_for(lambda: our_status(api, claim), 1.0, "status after ADD")
    lab.cnitool("del", pod, pod_uid=pod_uid)
    wait_for(lambda: not our_status(api, claim), 1.0, "status cleared")
    # Only server-side apply (never a merge patch, which replaces the whole list) was used.
    assert not api.requests_to("PATCH", "/status") or all(
        r.content_type.startswith("application/apply-patch") for r in api.requests_to("PATCH", "/status")
    )


def test_failed_add_reports_ready_false_with_the_cni_error(lab, api, service, kubelet):
    pod_uid = new_pod_uid()
    claim = create_allocated_claim(api, "bad", pod_uid, macvlan_params(lab, master="nosuchnic"))
    prepare_ok(kubelet, claim)
    pod = lab.pod()

    proc = lab.cnitool("add", pod, pod_uid=pod_uid, check=False)
    assert proc.returncode != 0

    entries, _ = wait_for(lambda: our_status(api, claim), 1.0, "Ready=False after a failed ADD")
    condition = entries[0]["conditions"][0]
    assert condition["type"] == "Ready" and condition["status"] == "False"
    assert "delegate macvlan ADD failed" in condition["message"]
    assert entries[0]["networkData"] == {"interfaceName": "net1"}
    # kubectl describe pod shows why (issue 12 item 1): a Warning Event on the Pod and on the claim.
    events, _ = wait_for(
        lambda: (lambda evs: evs if len(evs) == 2 else None)(
            [e for e in api.list_events("default") if e["reason"] == "NetworkAttachmentFailed"]
        ),
        5.0,
        "NetworkAttachmentFailed events",
    )
    by_kind = {e["regarding"]["kind"]: e for e in events}
    assert by_kind["Pod"]["regarding"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "demo",
                                           "uid": pod_uid}  # fmt: skip
    assert by_kind["Pod"]["related"]["name"] == "bad" and by_kind["ResourceClaim"]["regarding"]["name"] == "bad"
    for event in events:
        assert event["type"] == "Warning" and event["reportingController"] == DRIVER
        assert event["note"].startswith("claim default/bad request net (device node-a/eth1, interface net1): ")
        assert "delegate macvlan ADD failed" in event["note"]
    # The runtime's teardown DEL retracts the failed attachment: the failure stays readable
    # (issue 12 item 2) until the claim is unprepared.
    lab.cnitool("del", pod, pod_uid=pod_uid)
    wait_for(lambda: outbox_published(lab, claim), 2.0, "the DEL published")
    assert [e["conditions"][0]["message"] for e in our_status(api, claim)] == [condition["message"]]
    assert not kubelet.unprepare([claim_ref(claim)])[claim["metadata"]["uid"]].error
    wait_for(lambda: not our_status(api, claim), 2.0, "status cleared after unprepare")
    wait_for(lambda: not outbox_path(lab, claim).exists(), 2.0, "nothing left in the outbox")


def test_a_failure_lasts_until_the_next_successful_add(lab, api, service, kubelet):
    """A failed ADD, its DEL, then a retried sandbox whose ADD succeeds: Ready=False until then."""
    pod_uid = new_pod_uid()
    claim = create_allocated_claim(api, "retry", pod_uid, macvlan_params(lab, master="eth9"))
    prepare_ok(kubelet, claim)
    first = lab.pod()
    assert lab.cnitool("add", first, pod_uid=pod_uid, check=False).returncode != 0
    lab.cnitool("del", first, pod_uid=pod_uid)
    wait_for(lambda: outbox_published(lab, claim), 2.0, "the DEL published")
    (entry,) = our_status(api, claim)
    assert entry["conditions"][0]["status"] == "False" and "macvlan ADD failed" in entry["conditions"][0]["message"]

    add_nics(lab.host, ("eth9",))  # the parent NIC appears; kubelet's next sandbox ADD succeeds
    second = lab.pod()
    lab.cnitool("add", second, pod_uid=pod_uid)
    wait_for(lambda: [e for e in our_status(api, claim) if e["conditions"][0]["status"] == "True"], 2.0, "Ready=True")
    lab.cnitool("del", second, pod_uid=pod_uid)
    wait_for(lambda: not our_status(api, claim), 2.0, "nothing left after the successful pod's DEL")
    wait_for(lambda: not outbox_path(lab, claim).exists(), 2.0, "nothing left in the outbox")


def test_a_failure_whose_add_and_del_both_happen_while_the_service_is_down_is_published(lab, api, service, kubelet):
    """The failure lasts in the state dir, not in the service's memory: a service that was down
    during the failed ADD and its teardown DEL (or restarts after them) still publishes it."""
    pod_uid = new_pod_uid()
    claim = create_allocated_claim(api, "down", pod_uid, macvlan_params(lab, master="nosuchnic"))
    prepare_ok(kubelet, claim)
    assert service.stop() == 0
    pod = lab.pod()
    assert lab.cnitool("add", pod, pod_uid=pod_uid, check=False).returncode != 0
    lab.cnitool("del", pod, pod_uid=pod_uid)

    service.start()
    entries, _ = wait_for(lambda: our_status(api, claim), 5.0, "the failure published after the restart")
    condition = entries[0]["conditions"][0]
    assert condition["status"] == "False" and "delegate macvlan ADD failed" in condition["message"]
    assert not kubelet.unprepare([claim_ref(claim)])[claim["metadata"]["uid"]].error
    wait_for(lambda: not our_status(api, claim), 2.0, "status cleared after unprepare")


def outbox_path(lab, claim):
    return lab.state_dir.joinpath("outbox", f"{claim['metadata']['uid']}.json")


def outbox_published(lab, claim) -> bool:
    """The claim's outbox holds nothing the service has not sent (gone, or seq == publishedSeq)."""
    import json

    try:
        record = json.loads(outbox_path(lab, claim).read_text())
    except FileNotFoundError:
        return True
    return record["seq"] == record["publishedSeq"]


def test_add_while_api_server_is_down_publishes_when_it_is_back(lab, api, service, kubelet):
    pod_uid = new_pod_uid()
    claim = create_allocated_claim(api, "mv", pod_uid, macvlan_params(lab))
    prepare_ok(kubelet, claim)
    api.stop()
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)  # the CNI path makes no API call
    assert "net1" in pod.links()

    api.start()
    entries, _ = wait_for(lambda: our_status(api, claim), 15.0, "status once the API server is back")
    assert entries[0]["networkData"]["interfaceName"] == "net1"
    lab.cnitool("del", pod, pod_uid=pod_uid)


def test_service_restarted_between_add_and_publish_publishes_exactly_once(lab, api, service, kubelet):
    pod_uid = new_pod_uid()
    claim = create_allocated_claim(api, "mv", pod_uid, macvlan_params(lab))
    prepare_ok(kubelet, claim)
    assert service.stop() == 0
    assert not list(service.registry_dir.glob("*.sock")) and not list(service.plugins_dir.rglob("*.sock"))
    api.reset_requests()
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)

    service.start()
    entries, _ = wait_for(lambda: our_status(api, claim), 5.0, "status after the service restarted")
    assert entries[0]["networkData"]["interfaceName"] == "net1"
    import time

    time.sleep(0.5)  # any duplicate publish would have happened by now
    assert len(api.requests_to("PATCH", "/resourceclaims/mv/status")) == 1
    lab.cnitool("del", pod, pod_uid=pod_uid)


def test_kubelet_restart_replays_prepare_idempotently(lab, api, service, kubelet):
    pod_uid = new_pod_uid()
    claim = create_allocated_claim(api, "mv", pod_uid, macvlan_params(lab))
    first = prepare_ok(kubelet, claim)
    record = (lab.state_dir / "claims" / f"{claim['metadata']['uid']}.json").read_bytes()
    kubelet.close()

    restarted = FakeKubelet(str(service.registry_dir), driver=DRIVER)
    try:
        restarted.wait_for_plugin(timeout=10)
        again = prepare_ok(restarted, claim)
        assert list(again.devices) == list(first.devices)
        assert (lab.state_dir / "claims" / f"{claim['metadata']['uid']}.json").read_bytes() == record
        # Unprepare may come for a claim never prepared, or twice.
        assert not restarted.unprepare([claim_ref(claim)])[claim["metadata"]["uid"]].error
        assert not restarted.unprepare([claim_ref(claim)])[claim["metadata"]["uid"]].error
    finally:
        restarted.close()


def test_prepare_errors_name_what_to_fix(lab, api, service, kubelet):
    good = create_allocated_claim(api, "good", new_pod_uid(), macvlan_params(lab))
    api.create_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "unallocated", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "net", "exactly": {"deviceClassName": DRIVER}}]}},
        }
    )
    unallocated = api.get_claim("default", "unallocated")
    refs = [claim_ref(good), claim_ref(unallocated), ("default", "0000-missing", "missing")]
    responses = kubelet.prepare(refs)
    assert not responses[good["metadata"]["uid"]].error
    assert "not allocated" in responses[unallocated["metadata"]["uid"]].error
    assert "not found" in responses["0000-missing"].error


def test_tenant_policy_in_the_service(lab, api, service, kubelet):
    """A claim choosing its class's network gets it on the allocated NIC (master found through
    the service's inventory); a claim bringing its own network is refused naming the rule."""
    network = macvlan_params(lab, network="macvlan")
    del network["config"]["plugins"][0]["master"]
    pod_uid = new_pod_uid()
    choice = {"apiVersion": "dracni.io/v1alpha1", "kind": "NetworkAttachment", "ifName": "data1"}
    chosen = create_allocated_claim(api, "chosen", pod_uid, choice, source="FromClaim", class_params=network)
    hostile = create_allocated_claim(
        api, "hostile", new_pod_uid(), macvlan_params(lab, master="eth2"), source="FromClaim", device="eth2"
    )
    responses = kubelet.prepare([claim_ref(chosen), claim_ref(hostile)])
    assert not responses[chosen["metadata"]["uid"]].error
    error = responses[hostile["metadata"]["uid"]].error
    assert "parameters.config: a claim config may not define its own network (rule claimConfigs: " in error
    assert "tenant policy: claimConfigs=profiles" in service.log()
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    assert "data1" in pod.links()
    lab.cnitool("del", pod, pod_uid=pod_uid)


def test_resourceslices_are_published_and_recreated_after_a_wipe(lab, api, service):
    slices, _ = wait_for(lambda: api.list_slices(node=NODE, driver=DRIVER), 5.0, "ResourceSlices")
    devices = {d["name"]: d for s in slices for d in s["spec"]["devices"]}
    assert {"eth1", "eth2"} <= set(devices), dump(slices)
    assert devices["eth1"]["attributes"]["dracni.io/ifName"] == {"string": "eth1"}
    assert slices[0]["metadata"]["ownerReferences"][0]["kind"] == "Node"

    api.delete_all_slices(node=NODE)  # what kubelet does when it starts
    recreated, elapsed = wait_for(lambda: api.list_slices(node=NODE, driver=DRIVER), 5.0, "re-created slices")
    assert {d["name"] for s in recreated for d in s["spec"]["devices"]} == set(devices)


def test_a_new_nic_updates_the_slice(lab, api, service):
    from tests.harness import ip

    wait_for(lambda: api.list_slices(node=NODE, driver=DRIVER), 5.0, "ResourceSlices")
    generation = api.list_slices(node=NODE, driver=DRIVER)[0]["spec"]["pool"]["generation"]
    ip("link", "add", "eth9", "type", "veth", "peer", "name", "eth9p", netns=lab.host.name)

    def has_eth9():
        slices = api.list_slices(node=NODE, driver=DRIVER)
        return slices if any(d["name"] == "eth9" for s in slices for d in s["spec"]["devices"]) else None

    slices, _ = wait_for(has_eth9, 5.0, "eth9 in the slice")
    assert slices[0]["spec"]["pool"]["generation"] > generation


def test_health_and_metrics(lab, api, service, kubelet):
    claim = create_allocated_claim(api, "mv", new_pod_uid(), macvlan_params(lab))
    prepare_ok(kubelet, claim)
    assert service.readyz()[0] == 200
    metrics = service.metrics()
    assert 'dracni_prepare_claims_total{result="ok"} 1.0' in metrics
    assert "dracni_status_outbox_pending" in metrics and "dracni_resourceslice_writes_total" in metrics
    # where a prepare's time went: the claim's GET and the state dir's group commit
    samples = service.samples()
    claim_gets = (("resource", "resourceclaims"), ("verb", "GET"))
    assert samples[("dracni_api_request_seconds_count", claim_gets)] >= 1
    assert samples[("dracni_api_connection_wait_seconds_count", ())] >= 1
    assert samples[("dracni_state_commit_seconds_count", ())] >= 1
    assert samples[("dracni_state_commit_batch_calls_sum", ())] >= 1
    assert samples[("dracni_state_commit_lock_seconds_count", ())] >= 1


def test_a_device_that_goes_unhealthy_is_an_event_on_its_pods_and_claims(lab, api, service, kubelet):
    """Issue 12 item 1: the NIC behind a prepared claim loses its carrier."""
    from tests.fakes.kubelet_health import HEALTHY, HealthWatcher
    from tests.harness import ip

    wait_for(lambda: any(d["name"] == "eth1" for s in api.list_slices() for d in s["spec"]["devices"]), 10.0, "slices")
    pod_uid = new_pod_uid()
    claim = create_allocated_claim(api, "health", pod_uid, macvlan_params(lab), pod_name="web-1")
    prepare_ok(kubelet, claim)
    # kubelet's health stream reads eth1 Healthy: the reporter has its first view
    watcher = HealthWatcher.for_plugin(str(service.registry_dir / f"{DRIVER}-reg.sock"), retry_interval=60)
    assert watcher is not None
    with watcher:
        watcher.wait_for(NODE, ["eth1"], HEALTHY)
    ip("link", "set", "eth1p", "down", netns=lab.host.name)  # eth1 loses its carrier
    try:
        events, _ = wait_for(
            lambda: (lambda evs: evs if len(evs) == 2 else None)(
                [e for e in api.list_events("default") if e["reason"] == "DeviceUnhealthy"]
            ),
            10.0,
            "DeviceUnhealthy events",
        )
    finally:
        ip("link", "set", "eth1p", "up", netns=lab.host.name)
    by_kind = {e["regarding"]["kind"]: e for e in events}
    assert by_kind["Pod"]["regarding"]["name"] == "web-1" and by_kind["Pod"]["regarding"]["uid"] == pod_uid
    assert by_kind["ResourceClaim"]["regarding"]["name"] == "health"
    assert all(
        e["note"].startswith(f"claim default/health request net: device {NODE}/eth1 is unhealthy: ") for e in events
    )
    assert all("no carrier" in e["note"] for e in events)
