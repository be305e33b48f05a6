"""Sticky addresses: which IPs a persistent attachment asks for, and how they are reported."""

from __future__ import annotations

import pytest

from dracni.addresses import missing_addresses
from dracni.claims.resolve import ClaimError
from dracni.claims.sticky import canonical_ips, from_template, pin_addresses
from dracni.status.entries import device_status_entry

DRIVER = "dracni.io"


def claim(*, annotations=None, owners=None, status_devices=None) -> dict:
    return {
        "metadata": {"namespace": "ns", "name": "c", "annotations": annotations or {}, "ownerReferences": owners or []},
        "status": {"devices": status_devices or []},
    }


def record(**device) -> dict:
    return {
        "devices": [
            {
                "request": "net",
                "pool": "node-a",
                "device": "eth1",
                "shareID": None,
                "persistentIPs": False,
                "ipamClaim": None,
                **device,
            }
        ]
    }


def status_entry(ips, device="eth1", driver=DRIVER) -> dict:
    return {"driver": driver, "pool": "node-a", "device": device, "networkData": {"ips": ips}}


def test_non_persistent_attachments_request_nothing():
    rec = record()
    pin_addresses(claim(status_devices=[status_entry(["10.0.0.5/24"])]), rec, driver=DRIVER, ipamclaims=None)
    assert rec["devices"][0]["requestedIPs"] == []


def test_persistent_attachment_asks_for_its_status_addresses_canonicalized():
    rec = record(persistentIPs=True)
    entries = [
        status_entry(["10.9.9.9/24"], device="eth2"),
        status_entry(["10.0.0.5/24"], driver="other"),
        status_entry(["10.0.0.5/24", "FD00:0:0::5/64", "10.0.0.5/24"]),
    ]
    pin_addresses(claim(status_devices=entries), rec, driver=DRIVER, ipamclaims=None)
    assert rec["devices"][0]["requestedIPs"] == ["10.0.0.5/24", "fd00::5/64"]


def test_ipamclaim_wins_and_its_absence_is_a_clear_error():
    seen = []

    def get(namespace, name):
        seen.append((namespace, name))
        return {"status": {"ips": ["10.1.1.1/24"]}} if name == "vm" else None

    rec = record(persistentIPs=True, ipamClaim="vm")
    pin_addresses(claim(status_devices=[status_entry(["10.0.0.5/24"])]), rec, driver=DRIVER, ipamclaims=get)
    assert rec["devices"][0]["requestedIPs"] == ["10.1.1.1/24"] and seen == [("ns", "vm")]
    with pytest.raises(ClaimError, match="IPAMClaim ns/gone not found"):
        pin_addresses(claim(), record(ipamClaim="gone"), driver=DRIVER, ipamclaims=get)
    with pytest.raises(ClaimError, match="needs the API server"):
        pin_addresses(claim(), record(ipamClaim="vm"), driver=DRIVER, ipamclaims=None)


def test_an_unreadable_ipamclaim_is_a_claim_error():
    def broken(namespace, name):
        raise RuntimeError("connection refused")

    with pytest.raises(ClaimError, match="cannot read IPAMClaim ns/vm: connection refused"):
        pin_addresses(claim(), record(ipamClaim="vm"), driver=DRIVER, ipamclaims=broken)
    with pytest.raises(ClaimError, match="not an address in CIDR form"):
        pin_addresses(
            claim(), record(ipamClaim="vm"), driver=DRIVER, ipamclaims=lambda ns, n: {"status": {"ips": ["10.1.1.1"]}}
        )


@pytest.mark.parametrize(
    "metadata",
    [
        {"annotations": {"resource.kubernetes.io/pod-claim-name": "net"}},
        {"owners": [{"kind": "Pod", "name": "p", "uid": "u", "controller": True}]},
    ],
)
def test_template_generated_claims_never_pin(metadata):
    c = claim(status_devices=[status_entry(["10.0.0.5/24"])], **metadata)
    assert from_template(c)
    rec = record(persistentIPs=True, ipamClaim="vm")
    pin_addresses(c, rec, driver=DRIVER, ipamclaims=lambda ns, n: pytest.fail("must not be read"))
    assert rec["devices"][0] == {**rec["devices"][0], "requestedIPs": [], "persistentIPs": False, "ipamClaim": None}


def test_a_non_controller_pod_owner_does_not_make_a_template_claim():
    assert not from_template(claim(owners=[{"kind": "Pod", "name": "p", "uid": "u"}]))


def test_canonical_ips_rejects_bare_addresses():
    assert canonical_ips(["10.0.0.5/24"], "x") == ["10.0.0.5/24"]
    with pytest.raises(ClaimError, match="x: '10.0.0.5' is not an address in CIDR form"):
        canonical_ips(["10.0.0.5"], "x")


def test_missing_addresses_ignores_prefix_length():
    assert missing_addresses(["10.0.0.5/24"], ["10.0.0.5/16"]) == []
    assert missing_addresses(["10.0.0.5/24", "fd00::5/64"], ["10.0.0.5/24"]) == ["fd00::5/64"]


def fact(**over) -> dict:
    return {
        "request": "net",
        "pool": "node-a",
        "device": "eth1",
        "shareID": None,
        "ifName": "net1",
        "ready": False,
        "result": None,
        "error": None,
        "containerID": "c",
        "podUID": "p",
        "updatedAt": "2026-11-21T05:00:00Z",
        **over,
    }


def test_detached_entry_keeps_the_addresses_without_claiming_readiness():
    entry = device_status_entry(fact(detached=True, keptIPs=["10.0.0.5/24"]), driver=DRIVER)
    condition = entry["conditions"][0]
    assert (condition["status"], condition["reason"]) == ("False", "Detached")
    assert entry["networkData"] == {"interfaceName": "net1", "ips": ["10.0.0.5/24"]}
    assert "data" not in entry


def test_a_failed_persistent_add_still_publishes_the_kept_addresses():
    entry = device_status_entry(
        fact(keptIPs=["10.0.0.5/24"], error={"code": 100, "msg": "IPAM returned X"}), driver=DRIVER
    )
    assert entry["conditions"][0]["reason"] == "NetworkInterfaceNotReady"
    assert entry["networkData"]["ips"] == ["10.0.0.5/24"]
