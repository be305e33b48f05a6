"""How NICs are offered (exclusive, shared through consumable capacity, slots), as devices."""

from __future__ import annotations

import pytest

from dracni.inventory.nics import Nic
from dracni.inventory.sharing import EXCLUSIVE, SHARED, SLOTS, Sharing, parse_sharing
from dracni.inventory.slices import build_slices, offers


def validate_slice(obj: dict) -> list[str]:
    """The slice against Kubernetes' own schema (strict: unknown fields fail), 1.34 and latest."""
    import kubernetes_validate

    problems = []
    for version in sorted({"1.34.0", kubernetes_validate.latest_version()}):
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{version}: {'.'.join(str(p) for p in exc.path)}: {exc.message}")
    return problems


ETH1 = Nic(name="eth1", index=2, mac="02:00:00:00:00:01", mtu=1500)
ETH2 = Nic(name="eth2", index=3, mac="02:00:00:00:00:02", mtu=1500)


def test_rules_first_match_wins_and_the_rest_is_shared() -> None:
    sharing = parse_sharing(["eth2=exclusive", "eth*=slots"])
    assert [sharing.mode(n) for n in ("eth2", "eth1", "ens1")] == [EXCLUSIVE, SLOTS, SHARED]


@pytest.mark.parametrize(
    ("rules", "kw", "message"),
    [
        (["eth1"], {}, "write GLOB=MODE"),
        (["eth1=pooled"], {}, "write GLOB=MODE"),
        ([], {"slots": 0}, "--nic-slots 0"),
        ([], {"slots": 129}, "--nic-slots 129"),
        ([], {"max_attachments": 0}, "--max-attachments 0"),
    ],
)
def test_bad_settings_name_the_option(rules: list[str], kw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_sharing(rules, **kw)


def test_without_consumable_capacity_shared_becomes_slots_only() -> None:
    sharing = parse_sharing(["eth2=exclusive", "eth3=shared"]).without_consumable_capacity()
    assert [sharing.mode(n) for n in ("eth2", "eth3", "eth1")] == [EXCLUSIVE, SLOTS, SLOTS]
    assert sharing.without_consumable_capacity() == sharing  # nothing left to fall back from


def test_shared_nic_is_one_device_with_the_attachments_capacity() -> None:
    (s,) = build_slices(driver="dracni.io", node_name="n1", node_uid=None, nics=[ETH1], generation=1, sharing=Sharing())
    (device,) = s["spec"]["devices"]
    assert device["allowMultipleAllocations"] is True
    assert device["capacity"] == {
        "dracni.io/attachments": {"value": "64", "requestPolicy": {"default": "1", "validValues": ["1"]}}
    }
    assert device["attributes"]["dracni.io/sharing"] == {"string": "shared"}
    assert validate_slice(s) == []


def test_slots_are_devices_naming_their_parent() -> None:
    sharing = parse_sharing(["eth1=slots", "eth2=exclusive"], slots=3)
    (s,) = build_slices(
        driver="dracni.io", node_name="n1", node_uid=None, nics=[ETH1, ETH2], generation=1, sharing=sharing
    )
    devices = {d["name"]: d for d in s["spec"]["devices"]}
    assert sorted(devices) == ["eth1-slot-0", "eth1-slot-1", "eth1-slot-2", "eth2"]
    slot = devices["eth1-slot-2"]
    assert slot["attributes"]["dracni.io/parent"] == {"string": "eth1"}
    assert slot["attributes"]["dracni.io/slot"] == {"int": 2}
    assert slot["attributes"]["dracni.io/ifName"] == {"string": "eth1"}
    assert "allowMultipleAllocations" not in slot
    assert devices["eth2"]["attributes"]["dracni.io/sharing"] == {"string": "exclusive"}
    assert validate_slice(s) == []


def test_many_slots_spill_into_more_slices() -> None:
    nics = [Nic(name=f"eth{i}", index=i + 2) for i in range(9)]
    slices = build_slices(
        driver="dracni.io", node_name="n1", node_uid=None, nics=nics, generation=1, sharing=parse_sharing(["*=slots"])
    )
    assert len(slices) == 2 and sum(len(s["spec"]["devices"]) for s in slices) == 9 * 16


def test_a_slot_name_clashing_with_a_nic_is_refused() -> None:
    clash = Nic(name="eth1-slot-0", index=9)
    with pytest.raises(ValueError, match="device names clash"):
        offers([ETH1, clash], parse_sharing(["eth1=slots"]))


@pytest.mark.parametrize(("n", "text"), [(64, "64"), (1000, "1k"), (1500, "1500"), (2000000, "2M"), (1024, "1024")])
def test_capacity_is_written_in_the_api_servers_canonical_form(n: int, text: str) -> None:
    """Else a slice read back ("1k") never equals the one written ("1000"): republished forever."""
    from dracni.inventory.slices import canonical_count

    assert canonical_count(n) == text
