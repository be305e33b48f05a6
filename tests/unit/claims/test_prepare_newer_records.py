"""A prepare that meets a record of its claim that it cannot read (spec/state-layout.md,
Compatibility): a newer dracni's record fails that claim alone and stays byte for byte; an
unreadable one is moved aside and written afresh; the batch's other claims are prepared."""

from __future__ import annotations

import json
from pathlib import Path

from dracni.claims.prepare import Resolver, store_prepared
from dracni.state.records import SCHEMA_VERSION
from dracni.state.store import StateDir
from tests.unit.claims.test_prepare import DRIVER, make_claim


def test_a_newer_record_fails_its_claim_alone_and_stays(state: StateDir, root: Path) -> None:
    resolver = Resolver(state=state, driver=DRIVER)
    first = resolver.resolve(make_claim("c1", "uid-1"))
    assert store_prepared(state, [first])["uid-1"].error is None
    path = root / "claims" / "uid-1.json"
    newer = json.dumps({**json.loads(path.read_text()), "schema": SCHEMA_VERSION + 1})
    path.write_text(newer)

    again = resolver.resolve(make_claim("c1", "uid-1"))
    other = resolver.resolve(make_claim("c2", "uid-2", pod_uid="pod-2"))
    outcomes = store_prepared(state, [again, other])

    assert outcomes["uid-1"].error is not None and "newer than this dracni's" in outcomes["uid-1"].error
    assert outcomes["uid-2"].error is None
    assert path.read_text() == newer
    assert [c["uid"] for c in state.list_claims(bad=[])] == ["uid-2"]


def test_an_unreadable_record_is_moved_aside_and_written_afresh(state: StateDir, root: Path) -> None:
    resolver = Resolver(state=state, driver=DRIVER)
    assert store_prepared(state, [resolver.resolve(make_claim("c1", "uid-1"))])["uid-1"].error is None
    (root / "claims" / "uid-1.json").write_text("{garbage")

    outcomes = store_prepared(state, [resolver.resolve(make_claim("c1", "uid-1"))])

    assert outcomes["uid-1"].error is None
    assert [c["uid"] for c in state.list_claims()] == ["uid-1"]
    assert [p.read_text() for p in (root / "quarantine").iterdir()] == ["{garbage"]
