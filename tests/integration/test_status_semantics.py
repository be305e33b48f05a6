"""The frozen service's status writes against the API server semantics the test double now
transcribes from upstream: server-side apply inside an entry (structured-merge-diff:
``conditions`` by type), the apiserver's field validation (unknown fields dropped with a
warning), and a gate that drops ``status.devices`` on write (strategy.go
``dropDisabledDRAResourceClaimDeviceStatusFields``)."""

from __future__ import annotations

import time

from kubernetes import client, config

from tests.fakes.apiserver import APPLY_PATCH, FakeApiServer
from tests.integration.conftest import prepare_ok
from tests.integration.service import (
    DRIVER,
    NODE,
    claim_ref,
    create_allocated_claim,
    macvlan_params,
    new_pod_uid,
    our_status,
    wait_for,
)


def apply_as(api: FakeApiServer, manager: str, name: str, devices: list[dict]) -> None:
    """Another controller's server-side apply of ``status.devices`` (the other token)."""
    api_client = config.new_client_from_config(config_file=api.other_kubeconfig_path)
    try:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "status": {"devices": devices},
        }
        client.ResourceV1Api(api_client).patch_namespaced_resource_claim_status(
            name, "default", body, field_manager=manager, force=True, _content_type=APPLY_PATCH
        )
    finally:
        api_client.close()


LINK_UP = {
    "type": "example.com/LinkUp",
    "status": "True",
    "reason": "CarrierUp",
    "message": "",
    "lastTransitionTime": "2026-01-01T00:00:00Z",
}


def test_another_managers_condition_on_our_entry_survives_our_publishes(lab, api, service, kubelet):
    """conditions is a list-map keyed by type: the service owns Ready, a health monitor owns its
    own type on the same entry; the service's re-publish (DEL) takes only what it owns."""
    pod_uid = new_pod_uid()
    claim = create_allocated_claim(api, "mv", pod_uid, macvlan_params(lab))
    prepare_ok(kubelet, claim)
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    wait_for(lambda: our_status(api, claim), 5.0, "status.devices after ADD")

    apply_as(api, "health-monitor", "mv", [{"driver": DRIVER, "pool": NODE, "device": "eth1", "conditions": [LINK_UP]}])
    (entry,) = our_status(api, claim)
    assert [c["type"] for c in entry["conditions"]] == ["Ready", LINK_UP["type"]]
    assert entry["networkData"]["ips"] == ["10.10.1.2/24"]

    lab.cnitool("del", pod, pod_uid=pod_uid)

    def ready_gone():
        entries = our_status(api, claim)
        return entries and all(c["type"] != "Ready" for c in entries[0].get("conditions") or []) and entries

    (entry,), _ = wait_for(ready_gone, 5.0, "the service's own fields to leave the entry after DEL")
    # What only the service owned is gone; the monitor's condition (and the entry's key) stay.
    assert entry["conditions"] == [LINK_UP]
    assert "networkData" not in entry and "data" not in entry
    assert not kubelet.unprepare([claim_ref(claim)])[claim["metadata"]["uid"]].error


def test_the_service_sends_no_field_the_server_drops(lab, api, service, kubelet):
    """Every body the service sent decoded into the server's types without an unknown field
    (a field the server does not know would be dropped with a ``Warning`` header)."""
    pod_uid = new_pod_uid()
    claim = create_allocated_claim(api, "mv", pod_uid, macvlan_params(lab))
    prepare_ok(kubelet, claim)
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    wait_for(lambda: our_status(api, claim), 5.0, "status.devices after ADD")
    lab.cnitool("del", pod, pod_uid=pod_uid)
    wait_for(lambda: not our_status(api, claim), 5.0, "status.devices cleared after DEL")
    writes = [r for r in api.requests if r.method in ("POST", "PUT", "PATCH")]
    assert any("/resourceslices" in r.path for r in writes) and any(r.path.endswith("/status") for r in writes)
    assert [(r.method, r.path, r.warnings) for r in writes if r.warnings] == []


def test_a_status_the_server_drops_is_not_rewritten_in_a_loop(lab, api, service, kubelet):
    """With DRAResourceClaimDeviceStatus off the server accepts the apply and drops
    ``status.devices`` silently: the service's write "succeeded", and it does not retry it."""
    api.set_feature_gate("DRAResourceClaimDeviceStatus", False)
    pod_uid = new_pod_uid()
    claim = create_allocated_claim(api, "mv", pod_uid, macvlan_params(lab))
    prepare_ok(kubelet, claim)
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)

    def applied():
        return [r for r in api.requests_to("PATCH", "/resourceclaims/mv/status") if r.status == 200]

    wait_for(applied, 5.0, "the service's status apply")
    time.sleep(1.0)  # long enough for several retries, were the service to retry
    assert len(applied()) == 1
    assert not our_status(api, claim)
    lab.cnitool("del", pod, pod_uid=pod_uid)
    assert not kubelet.unprepare([claim_ref(claim)])[claim["metadata"]["uid"]].error
