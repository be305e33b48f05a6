"""Forward compatibility within one schema version (spec/state-layout.md, Compatibility): a
newer release's optional fields, unknown to this one, are read past and survive this release's
rewrites; the keys this release knows are exactly the schema's."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from dracni.state import records as R
from dracni.state.store import StateDir
from tests.unit.state.test_state_store import prepared_claim

SCHEMA = json.loads((Path(__file__).resolve().parents[3] / "spec" / "state-records.schema.json").read_text())


def test_the_known_keys_are_the_schemas_properties() -> None:
    claim = SCHEMA["$defs"]["PreparedClaim"]
    assert set(claim["properties"]) == R._CLAIM_KEYS
    device = claim["properties"]["devices"]["items"]
    assert set(device["properties"]) | set(SCHEMA["$defs"]["deviceKey"]["properties"]) == R._DEVICE_KEYS


def test_a_re_prepare_keeps_a_newer_releases_fields(state: StateDir, root: Path) -> None:
    newer = prepared_claim()
    newer["fromTheFuture"] = {"x": 1}
    newer["devices"][0]["futureDeviceField"] = [1, 2]
    newer["devices"][1]["futureDeviceField"] = "vf"
    state.put_claim(copy.deepcopy(newer))

    again = prepared_claim(pods=[("pod-uid-1", "web-0"), ("pod-uid-2", "web-1")])  # built afresh
    again["devices"] = again["devices"][:1]  # the second device went: its fields go with it
    again["preparedAt"] = "2024-05-02T10:00:00Z"
    state.put_claim(again)

    stored = json.loads((root / "claims" / "claim-uid-1.json").read_text())
    assert stored["fromTheFuture"] == {"x": 1}
    assert stored["devices"] == [{**prepared_claim()["devices"][0], "futureDeviceField": [1, 2]}]
    assert [p["uid"] for p in stored["pods"]] == ["pod-uid-1", "pod-uid-2"]
    assert stored["preparedAt"] == "2024-05-02T10:00:00Z"


def test_a_known_key_left_out_by_the_new_record_is_not_brought_back(state: StateDir, root: Path) -> None:
    old = prepared_claim()
    old["devices"][0]["requestedIPs"] = ["10.0.0.5/24"]
    state.put_claim(old)
    state.put_claim(prepared_claim())  # the claim no longer pins an address
    stored = json.loads((root / "claims" / "claim-uid-1.json").read_text())
    assert "requestedIPs" not in stored["devices"][0]
