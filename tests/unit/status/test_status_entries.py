"""status.devices entries from outbox facts, and the API server's rules for them."""

from __future__ import annotations

import copy

import orjson
import pytest

from dracni.addresses import canonical_interface_address
from dracni.apirules.validation import DATA_MAX_BYTES, validate_device_status, validate_status_devices
from dracni.clock import normalize_time
from dracni.state import facts as status_facts
from dracni.state.store import StateDir
from dracni.status.entries import device_status_entry, status_devices

DRIVER = "dracni.io"
SHARE = "4b7f2c1e-9a0d-4c5e-8f3a-2d1b0c9e8f7a"


def macvlan_result() -> dict:
    """What the macvlan + host-local chain returns (CNI 1.1.0), eth0 being the runtime's."""
    return {
        "cniVersion": "1.1.0",
        "interfaces": [
            {"name": "eth0", "mac": "AA:BB:CC:00:00:01", "sandbox": "/var/run/netns/x"},
            {"name": "net1", "mac": "0A:58:0A:00:00:05", "mtu": 1500, "sandbox": "/var/run/netns/x"},
        ],
        "ips": [
            {"address": "10.0.0.5/24", "gateway": "10.0.0.1", "interface": 1},
            {"address": "FD00:0:0::5/64", "gateway": "fd00::1", "interface": 1},
            {"address": "192.168.7.2/24", "interface": 0},
        ],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}],
        "dns": {"nameservers": ["10.0.0.53"], "search": ["example.svc"]},
    }


def fact(**overrides) -> dict:
    base = {
        "request": "macvlan",
        "pool": "node-1",
        "device": "net1",
        "shareID": None,
        "ifName": "net1",
        "ready": True,
        "result": macvlan_result(),
        "error": None,
        "containerID": "c0ffee",
        "podUID": "pod-uid-1",
        "updatedAt": "2026-11-21T05:00:00Z",
    }
    base.update(overrides)
    return base


ALLOCATED = [{"request": "macvlan", "driver": DRIVER, "pool": "node-1", "device": "net1"}]


# -- device_status_entry -------------------------------------------------------------------
def test_ready_entry_shape():
    entry = device_status_entry(fact(), driver=DRIVER)
    assert entry["driver"] == DRIVER and entry["pool"] == "node-1" and entry["device"] == "net1"
    assert "shareID" not in entry
    assert entry["conditions"] == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "NetworkInterfaceReady",
            "message": "net1 configured",
            "lastTransitionTime": "2026-11-21T05:00:00Z",
        }
    ]
    assert entry["networkData"] == {
        "interfaceName": "net1",
        "ips": ["10.0.0.5/24", "fd00::5/64"],
        "hardwareAddress": "0a:58:0a:00:00:05",
    }
    assert validate_device_status(entry, ALLOCATED) == []


def test_share_id_only_when_set():
    entry = device_status_entry(fact(shareID=SHARE), driver=DRIVER)
    assert entry["shareID"] == SHARE
    assert "shareID" not in device_status_entry(fact(shareID=""), driver=DRIVER)


def test_data_is_the_result_without_sandbox():
    original = macvlan_result()
    f = fact(result=original)
    entry = device_status_entry(f, driver=DRIVER)
    assert all("sandbox" not in iface for iface in entry["data"]["interfaces"])
    expected = copy.deepcopy(original)
    for iface in expected["interfaces"]:
        del iface["sandbox"]
    assert entry["data"] == expected
    # the fact itself is not modified
    assert f["result"]["interfaces"][1]["sandbox"] == "/var/run/netns/x"


def test_ips_filtered_by_interface_index():
    entry = device_status_entry(fact(), driver=DRIVER)
    assert "192.168.7.2/24" not in entry["networkData"]["ips"]


def test_sandbox_interface_preferred_over_host_side_of_same_name():
    result = macvlan_result()
    # a host-side interface also named net1 (no sandbox) comes first
    result["interfaces"].insert(0, {"name": "net1", "mac": "EE:EE:EE:EE:EE:EE"})
    for ip in result["ips"]:
        ip["interface"] += 1
    result["ips"].append({"address": "172.16.0.1/16", "interface": 0})
    entry = device_status_entry(fact(result=result), driver=DRIVER)
    assert entry["networkData"]["hardwareAddress"] == "0a:58:0a:00:00:05"
    assert entry["networkData"]["ips"] == ["10.0.0.5/24", "fd00::5/64"]


def test_interface_without_sandbox_used_when_no_sandbox_match():
    result = macvlan_result()
    for iface in result["interfaces"]:
        iface.pop("sandbox")
    entry = device_status_entry(fact(result=result), driver=DRIVER)
    assert entry["networkData"]["ips"] == ["10.0.0.5/24", "fd00::5/64"]
    assert entry["networkData"]["hardwareAddress"] == "0a:58:0a:00:00:05"


def test_ips_without_interface_index_are_included():
    result = {"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.9/16"}, {"address": "10.1.0.10/16", "interface": 3}]}
    entry = device_status_entry(fact(result=result), driver=DRIVER)
    assert entry["networkData"] == {"interfaceName": "net1", "ips": ["10.1.0.9/16"]}


def test_canonical_and_deduplicated():
    result = macvlan_result()
    result["ips"] = [
        {"address": "FD00:0:0::5/64", "interface": 1},
        {"address": "fd00::5/64", "interface": 1},
        {"address": "10.0.0.5/24", "interface": 1},
        {"address": "10.0.0.5/24", "interface": 1},
        {"address": "2001:DB8:0:0:1:0:0:1/64", "interface": 1},
        {"address": "not-an-ip", "interface": 1},
        {"address": "10.0.0.7", "interface": 1},  # no prefix: not CIDR
        {"address": "fe80::1%net1/64", "interface": 1},  # zoned: rejected by the API
    ]
    entry = device_status_entry(fact(result=result), driver=DRIVER)
    assert entry["networkData"]["ips"] == ["fd00::5/64", "10.0.0.5/24", "2001:db8::1:0:0:1/64"]
    assert validate_device_status(entry, ALLOCATED) == []


@pytest.mark.parametrize(
    "value,expected",
    [
        ("10.0.0.5/24", "10.0.0.5/24"),
        ("010.000.000.005/24", "10.0.0.5/24"),
        ("FD00:0:0::5/64", "fd00::5/64"),
        ("::ffff:10.0.0.1/120", "10.0.0.1/24"),
        ("2001:db8:0:0:0:0:0:1/128", "2001:db8::1/128"),
        ("10.0.0.5/33", None),
        ("10.0.0.5", None),
        ("10.0.0.5/ 24", None),
        ("::ffff:10.0.0.1/64", None),
        (None, None),
    ],
)
def test_canonical_interface_address(value, expected):
    assert canonical_interface_address(value) == expected


def test_more_than_16_ips_capped():
    result = macvlan_result()
    result["ips"] = [{"address": f"10.9.8.{i}/24", "interface": 1} for i in range(20)]
    entry = device_status_entry(fact(result=result), driver=DRIVER)
    assert entry["networkData"]["ips"] == [f"10.9.8.{i}/24" for i in range(16)]
    assert validate_device_status(entry, ALLOCATED) == []


def test_duplicates_do_not_count_towards_the_cap():
    result = macvlan_result()
    result["ips"] = [{"address": "10.9.8.1/24", "interface": 1}] * 30 + [{"address": "10.9.8.2/24", "interface": 1}]
    entry = device_status_entry(fact(result=result), driver=DRIVER)
    assert entry["networkData"]["ips"] == ["10.9.8.1/24", "10.9.8.2/24"]


def _size(value) -> int:
    return len(orjson.dumps(value))


def test_large_dns_dropped_first():
    result = macvlan_result()
    result["dns"]["search"] = [f"s{i}.example.svc.cluster.local" for i in range(400)]
    entry = device_status_entry(fact(result=result), driver=DRIVER)
    assert "dns" not in entry["data"]
    assert entry["data"]["routes"] == result["routes"]
    assert _size(entry["data"]) <= DATA_MAX_BYTES
    assert validate_device_status(entry, ALLOCATED) == []


def test_large_routes_dropped_next():
    result = macvlan_result()
    result["routes"] = [{"dst": f"10.{i // 256}.{i % 256}.0/24", "gw": "10.0.0.1"} for i in range(400)]
    entry = device_status_entry(fact(result=result), driver=DRIVER)
    assert "dns" not in entry["data"] and "routes" not in entry["data"]
    assert len(entry["data"]["interfaces"]) == 2
    assert _size(entry["data"]) <= DATA_MAX_BYTES


def test_other_interfaces_dropped_and_ips_reindexed():
    result = macvlan_result()
    result["interfaces"][0]["pciID"] = "x" * 11000
    entry = device_status_entry(fact(result=result), driver=DRIVER)
    data = entry["data"]
    assert data["interfaces"] == [{"name": "net1", "mac": "0A:58:0A:00:00:05", "mtu": 1500}]
    assert data["ips"] == [
        {"address": "10.0.0.5/24", "gateway": "10.0.0.1", "interface": 0},
        {"address": "FD00:0:0::5/64", "gateway": "fd00::1", "interface": 0},
    ]
    assert "dns" not in data and "routes" not in data
    assert _size(data) <= DATA_MAX_BYTES
    # networkData still comes from the full result
    assert entry["networkData"]["ips"] == ["10.0.0.5/24", "fd00::5/64"]


def test_data_omitted_when_nothing_fits():
    result = macvlan_result()
    result["interfaces"][1]["pciID"] = "y" * 11000
    entry = device_status_entry(fact(result=result), driver=DRIVER)
    assert "data" not in entry
    assert entry["networkData"]["hardwareAddress"] == "0a:58:0a:00:00:05"
    assert validate_device_status(entry, ALLOCATED) == []


def test_not_ready_with_error_and_no_result():
    error = {"code": 7, "msg": "macvlan: master interface eth9 not found", "details": "Link not found"}
    entry = device_status_entry(fact(ready=False, result=None, error=error), driver=DRIVER)
    assert entry["conditions"][0] == {
        "type": "Ready",
        "status": "False",
        "reason": "NetworkInterfaceNotReady",
        "message": "macvlan: master interface eth9 not found: Link not found",
        "lastTransitionTime": "2026-11-21T05:00:00Z",
    }
    assert "data" not in entry
    assert entry["networkData"] == {"interfaceName": "net1"}
    assert validate_device_status(entry, ALLOCATED) == []


def test_not_ready_without_details():
    entry = device_status_entry(fact(ready=False, result=None, error={"code": 11, "msg": "try again"}), driver=DRIVER)
    assert entry["conditions"][0]["message"] == "try again"


def test_not_ready_message_truncated_to_32k():
    error = {"code": 999, "msg": "ä" * 20000, "details": "d" * 5000}
    entry = device_status_entry(fact(ready=False, result=None, error=error), driver=DRIVER)
    message = entry["conditions"][0]["message"]
    assert len(message.encode("utf-8")) <= 32 * 1024
    assert message.startswith("ää")
    assert validate_device_status(entry, ALLOCATED) == []


@pytest.mark.parametrize(
    "value,expected",
    [
        ("2026-11-21T05:00:00Z", "2026-11-21T05:00:00Z"),
        ("2026-11-21T05:00:00.999999999Z", "2026-11-21T05:00:00Z"),
        ("2026-11-21T06:30:00.5+01:30", "2026-11-21T05:00:00Z"),
        ("2026-11-20T21:00:00-08:00", "2026-11-21T05:00:00Z"),
    ],
)
def test_last_transition_time_normalized(value, expected):
    assert normalize_time(value) == expected
    entry = device_status_entry(fact(updatedAt=value), driver=DRIVER)
    assert entry["conditions"][0]["lastTransitionTime"] == expected


def test_bad_updated_at_falls_back_to_a_valid_time():
    for value in (None, "yesterday", "0001-01-01T00:00:00Z"):
        ltt = device_status_entry(fact(updatedAt=value), driver=DRIVER)["conditions"][0]["lastTransitionTime"]
        assert ltt.endswith("Z") and len(ltt) == 20 and not ltt.startswith("0001")


# -- status_devices --------------------------------------------------------------------------
def test_status_devices_from_a_real_outbox_record(tmp_path):
    state = StateDir(str(tmp_path / "state"))
    claim = {"uid": "claim-uid-1", "namespace": "default", "name": "nets", "driver": DRIVER}
    facts = [
        fact(pool="node-1", device="net2", ifName="net2", updatedAt="2026-11-21T05:00:00Z"),
        fact(
            pool="node-1",
            device="net1",
            ready=False,
            result=None,
            error={"code": 7, "msg": "old"},
            updatedAt="2026-11-21T05:00:00Z",
        ),
        fact(pool="node-0", device="net9", ifName="net9", shareID=SHARE),
        fact(pool="node-1", device="net1", updatedAt="2026-11-21T06:00:00+00:00"),
        fact(
            pool="node-1",
            device="net1",
            ready=False,
            result=None,
            error={"code": 7, "msg": "older"},
            updatedAt="2026-11-21T05:59:59.9Z",
        ),
    ]
    record = status_facts.update_outbox(state, claim, lambda devices: devices + facts)
    entries = status_devices(record, driver=DRIVER)
    assert [(e["pool"], e["device"]) for e in entries] == [("node-0", "net9"), ("node-1", "net1"), ("node-1", "net2")]
    assert entries[0]["shareID"] == SHARE
    # the latest fact for node-1/net1 wins, wherever it is in the list
    assert entries[1]["conditions"][0]["status"] == "True"
    assert entries[1]["conditions"][0]["lastTransitionTime"] == "2026-11-21T06:00:00Z"
    allocated = [
        {"driver": DRIVER, "pool": "node-0", "device": "net9", "shareID": SHARE},
        {"driver": DRIVER, "pool": "node-1", "device": "net1"},
        {"driver": DRIVER, "pool": "node-1", "device": "net2"},
    ]
    assert validate_status_devices(entries, allocated) == []


def test_status_devices_share_ids_are_separate_entries():
    record = {"devices": [fact(shareID=SHARE), fact(shareID=None), fact(shareID=SHARE.replace("4b", "5c"))]}
    entries = status_devices(record, driver=DRIVER)
    assert [e.get("shareID") for e in entries] == [None, SHARE, SHARE.replace("4b", "5c")]


def test_status_devices_empty():
    assert status_devices({"devices": []}, driver=DRIVER) == []


# -- validate_device_status: each rule -----------------------------------------------------
def valid_entry(**overrides) -> dict:
    entry = device_status_entry(fact(), driver=DRIVER)
    entry.update(overrides)
    return entry


def test_not_an_allocated_device():
    errs = validate_device_status(valid_entry(device="net7"), ALLOCATED)
    assert errs == [
        'status.devices[0]: Invalid value: "dracni.io/node-1/net7": must be an allocated device in the claim'
    ]
    # no allocation given: not checked
    assert validate_device_status(valid_entry(device="net7")) == []


def test_share_id_must_match_the_allocation():
    entry = valid_entry(shareID=SHARE)
    errs = validate_device_status(entry, ALLOCATED, path="status.devices[3]")
    assert errs == [
        f'status.devices[3]: Invalid value: "dracni.io/node-1/net1/{SHARE}": must be an allocated device in the claim'
    ]
    assert validate_device_status(entry, [dict(ALLOCATED[0], shareID=SHARE)]) == []


def test_wrong_driver_is_not_allocated():
    errs = validate_device_status(valid_entry(driver="other.example.com"), ALLOCATED)
    assert any("must be an allocated device in the claim" in e for e in errs)


def test_too_many_conditions():
    conditions = [
        {"type": f"Cond{i}", "status": "True", "reason": "R", "lastTransitionTime": "2026-11-21T05:00:00Z"}
        for i in range(9)
    ]
    assert validate_device_status(valid_entry(conditions=conditions)) == [
        "status.devices[0].conditions: Too many: 9: must have at most 8 items"
    ]
    assert validate_device_status(valid_entry(conditions=conditions[:8])) == []


def test_condition_required_fields():
    errs = validate_device_status(valid_entry(conditions=[{"type": "Ready", "status": "Maybe"}]))
    assert errs == [
        'status.devices[0].conditions[0].status: Unsupported value: "Maybe": supported values: "False", "True", "Unknown"',
        "status.devices[0].conditions[0].lastTransitionTime: Required value: must be set",
        "status.devices[0].conditions[0].reason: Required value: must be set",
    ]


def test_condition_zero_and_bad_time():
    base = {"type": "Ready", "status": "True", "reason": "R"}
    errs = validate_device_status(valid_entry(conditions=[dict(base, lastTransitionTime="0001-01-01T00:00:00Z")]))
    assert errs == ["status.devices[0].conditions[0].lastTransitionTime: Required value: must be set"]
    errs = validate_device_status(valid_entry(conditions=[dict(base, lastTransitionTime="soon")]))
    assert len(errs) == 1 and errs[0].startswith(
        'status.devices[0].conditions[0].lastTransitionTime: Invalid value: "soon"'
    )


def test_condition_type_reason_message():
    good = {"type": "Ready", "status": "True", "reason": "R", "lastTransitionTime": "2026-11-21T05:00:00Z"}
    errs = validate_device_status(valid_entry(conditions=[good, dict(good)]))
    assert errs == ['status.devices[0].conditions[1].type: Duplicate value: "Ready"']
    errs = validate_device_status(valid_entry(conditions=[dict(good, type="not ok")]))
    assert len(errs) == 1 and errs[0].startswith(
        'status.devices[0].conditions[0].type: Invalid value: "not ok": name part'
    )
    errs = validate_device_status(valid_entry(conditions=[dict(good, reason="Not Ready")]))
    assert len(errs) == 1 and errs[0].startswith(
        'status.devices[0].conditions[0].reason: Invalid value: "Not Ready": a condition reason must start'
    )
    errs = validate_device_status(valid_entry(conditions=[dict(good, reason="R" * 1025)]))
    assert errs == ["status.devices[0].conditions[0].reason: Too long: may not be more than 1024 bytes"]
    errs = validate_device_status(valid_entry(conditions=[dict(good, message="m" * (32 * 1024 + 1))]))
    assert errs == ["status.devices[0].conditions[0].message: Too long: may not be more than 32768 bytes"]
    errs = validate_device_status(valid_entry(conditions=[dict(good, observedGeneration=-1)]))
    assert errs == [
        "status.devices[0].conditions[0].observedGeneration: Invalid value: -1: must be greater than or equal to zero"
    ]


def test_data_rules():
    assert validate_device_status(valid_entry(data={"blob": "x" * DATA_MAX_BYTES})) == [
        "status.devices[0].data: Too long: may not be more than 10240 bytes"
    ]
    assert validate_device_status(valid_entry(data=["a", "list"])) == [
        'status.devices[0].data: Invalid value: "<value omitted>": must be a valid JSON object'
    ]
    assert validate_device_status(valid_entry(data={})) == []


def test_network_data_lengths():
    network = {"interfaceName": "i" * 257, "hardwareAddress": "h" * 129}
    assert validate_device_status(valid_entry(networkData=network)) == [
        "status.devices[0].networkData.interfaceName: Too long: may not be more than 256 bytes",
        "status.devices[0].networkData.hardwareAddress: Too long: may not be more than 128 bytes",
    ]
    network = {"interfaceName": "i" * 256, "hardwareAddress": "h" * 128}
    assert validate_device_status(valid_entry(networkData=network)) == []


def test_network_data_ips():
    ips = ["10.0.0.4/24", "10.0.0.5", "10.0.0.4/24", "FD00::5/64", "10.0.0.4/24"]
    assert validate_device_status(valid_entry(networkData={"ips": ips})) == [
        'status.devices[0].networkData.ips[1]: Invalid value: "10.0.0.5": must be a valid address in CIDR form, '
        "(e.g. 10.9.8.7/24 or 2001:db8::1/64)",
        'status.devices[0].networkData.ips[3]: Invalid value: "FD00::5/64": must be in canonical form ("fd00::5/64")',
        'status.devices[0].networkData.ips[2]: Duplicate value: "10.0.0.4/24"',
        'status.devices[0].networkData.ips[4]: Duplicate value: "10.0.0.4/24"',
    ]


def test_network_data_too_many_ips():
    ips = [f"10.9.8.{i}/24" for i in range(17)]
    assert validate_device_status(valid_entry(networkData={"ips": ips})) == [
        "status.devices[0].networkData.ips: Too many: 17: must have at most 16 items"
    ]


def test_names_validated():
    errs = validate_device_status(valid_entry(driver="", pool="Node_1", device="Net1"))
    assert "status.devices[0].driver: Required value" in errs
    assert any(e.startswith('status.devices[0].pool: Invalid value: "Node_1"') for e in errs)
    assert any(e.startswith('status.devices[0].device: Invalid value: "Net1"') for e in errs)
    errs = validate_device_status(valid_entry(shareID="not-a-uuid"))
    assert errs == ['status.devices[0].shareID: Invalid value: "not-a-uuid": error validating uid: invalid UUID format']


def test_duplicate_entries_in_a_list():
    entry = valid_entry()
    errs = validate_status_devices([entry, copy.deepcopy(entry)], ALLOCATED)
    assert errs == ['status.devices[1]: Duplicate value: "dracni.io/node-1/net1"']


# -- one claim, several pods -------------------------------------------------------------------
def pod_b_fact(**overrides) -> dict:
    result = macvlan_result()
    result["interfaces"][1]["mac"] = "0A:58:0A:00:00:06"
    result["ips"] = [{"address": "10.0.0.6/24", "interface": 1}]
    return fact(
        **{
            "containerID": "b",
            "podUID": "pod-uid-2",
            "result": result,
            "updatedAt": "2026-11-21T05:00:09Z",
            **overrides,
        }
    )


def test_two_pods_one_entry_first_pods_interface_all_addresses() -> None:
    (entry,) = status_devices({"devices": [pod_b_fact(), fact()]}, driver=DRIVER)
    assert entry["networkData"] == {
        "interfaceName": "net1",
        "ips": ["10.0.0.5/24", "fd00::5/64", "10.0.0.6/24"],
        "hardwareAddress": "0a:58:0a:00:00:05",
    }
    assert entry["conditions"][0]["status"] == "True"
    assert validate_status_devices([entry], ALLOCATED) == []


def test_a_failed_pod_does_not_fail_the_entry_another_pod_uses() -> None:
    failed = pod_b_fact(ready=False, result=None, error={"code": 7, "msg": "boom"})
    (entry,) = status_devices({"devices": [fact(), failed]}, driver=DRIVER)
    assert entry["conditions"][0]["status"] == "True" and entry["networkData"]["ips"] == ["10.0.0.5/24", "fd00::5/64"]


def test_addresses_of_many_pods_stop_at_sixteen() -> None:
    pods = []
    for i in range(20):
        result = macvlan_result()
        result["ips"] = [{"address": f"10.0.1.{i}/24", "interface": 1}]
        pods.append(fact(containerID=f"c{i}", result=result, updatedAt=f"2026-11-21T05:00:{i:02d}Z"))
    (entry,) = status_devices({"devices": pods}, driver=DRIVER)
    assert entry["networkData"]["ips"] == [f"10.0.1.{i}/24" for i in range(16)]


def test_upsert_and_retract_keep_other_pods_attachments() -> None:
    from dracni.state.facts import retract_facts, upsert_facts

    facts = upsert_facts([], [fact()])
    facts = upsert_facts(facts, [pod_b_fact()])
    assert [f["containerID"] for f in facts] == ["c0ffee", "b"]
    assert [f["containerID"] for f in upsert_facts(facts, [fact(ifName="net2")])] == ["b", "c0ffee"]
    facts = retract_facts(facts, "b", [pod_b_fact(ready=False, detached=True, result=None)])
    assert [f["containerID"] for f in facts] == ["c0ffee"]  # a Detached fact waits for the last pod
    facts = retract_facts(facts, "c0ffee", [fact(ready=False, detached=True, result=None)])
    assert [(f["containerID"], f.get("detached")) for f in facts] == [("c0ffee", True)]
    assert upsert_facts(facts, [pod_b_fact()]) == [pod_b_fact()]  # the next pod supersedes it


def test_data_is_measured_as_the_api_server_encodes_it():
    """Go's json.Marshal (apimachinery converter.go fromUnstructured) escapes ``<`` as ``\\u003c``:
    a 9,000-character DNS domain of ``<`` is ~9 KB to orjson and 54,000+ bytes to the server."""
    from dracni.apirules.gojson import go_json_size

    domain = {"domain": "<" * 9000}
    assert _size(domain) == 9000 + 13
    assert go_json_size(domain) == 6 * 9000 + 13
    assert go_json_size({"a": "&>\u2028é", "n": [1.0, 1.5e-7, 1e21, 0.000001]}) == len(
        b'{"a":"\\u0026\\u003e\\u2028\xc3\xa9","n":[1,1.5e-7,1e+21,0.000001]}'
    )
    assert validate_device_status(valid_entry(data={"dns": domain})) == [
        "status.devices[0].data: Too long: may not be more than 10240 bytes"
    ]
    result = macvlan_result()
    result["dns"] = domain
    entry = device_status_entry(fact(result=result), driver=DRIVER)
    assert "dns" not in entry["data"] and entry["data"]["routes"] == result["routes"]
    assert entry["conditions"][0]["reason"] == "NetworkInterfaceReady"


def test_an_oversized_result_leaves_data_out_with_a_reason_saying_why():
    result = macvlan_result()
    result["interfaces"][1]["pciID"] = "<" * 2000  # 2 KB to orjson, 12 KB to the API server
    entry = device_status_entry(fact(result=result), driver=DRIVER)
    assert "data" not in entry
    (ready,) = entry["conditions"]
    assert ready["status"] == "True" and ready["reason"] == "NetworkInterfaceReadyResultTooLarge"
    assert "bytes as the API server encodes it) does not fit the 10240-byte limit" in ready["message"]
    assert ready["message"].startswith("net1 configured; data left out: ")
    assert validate_device_status(entry, ALLOCATED) == []
