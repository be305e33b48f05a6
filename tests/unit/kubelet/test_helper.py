"""The seam between the generic kubelet helper (kubelet/helper.py) and a DRA driver
(kubelet/driver.py Driver), as upstream's kubeletplugin helper draws it.

The helper is generic, so a test double stands on the driver side here: it records what the
helper hands it and answers as told.  The claim source is a dict.  dracni's own driver behind
the same helper is tested in test_kube_adapters.py, test_shared_claims.py and test_prepare.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

import pytest
from click.testing import CliRunner

from dracni.kubelet.driver import Claim, ClaimRef, PrepareResult
from dracni.kubelet.helper import KubeletPluginHelper

DRIVER = "dracni.io"
NODE = "node-a"


def claim(name: str, uid: str, *, pool: str = NODE, driver: str = DRIVER, allocated: bool = True) -> Claim:
    status: dict[str, Any] = {}
    if allocated:
        status["allocation"] = {
            "devices": {"results": [{"request": "net", "driver": driver, "pool": pool, "device": "eth1"}]}
        }
    return {"metadata": {"namespace": "ns", "name": name, "uid": uid}, "status": status}


def ref(c: Claim) -> ClaimRef:
    return ClaimRef(c["metadata"]["namespace"], c["metadata"]["uid"], c["metadata"]["name"])


class Claims:
    """A ClaimSource over a dict; ``broken`` names raise, as an unreachable API server does."""

    def __init__(self, *claims: Claim, broken: tuple[str, ...] = ()) -> None:
        self.claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
        self.broken = broken

    def get(self, namespace: str, name: str) -> Claim | None:
        if name in self.broken:
            raise ConnectionError("connection refused")
        return self.claims.get((namespace, name))


class FakeDriver:
    """The driver side: prepares every claim it is given onto its allocated device, unless told
    otherwise through ``answer`` (a function of the claims or refs, returning the mapping)."""

    def __init__(self) -> None:
        self.prepared: list[list[str]] = []
        self.unprepared: list[list[str]] = []
        self.answer: Any = None

    def prepare_claims(self, claims: list[Claim]) -> Mapping[str, PrepareResult]:
        self.prepared.append([c["metadata"]["uid"] for c in claims])
        if self.answer is not None:
            return self.answer(claims)
        return {
            c["metadata"]["uid"]: PrepareResult(devices=[{"request": "net", "pool": NODE, "device": "eth1"}])
            for c in claims
        }

    def unprepare_claims(self, refs: list[ClaimRef]) -> Mapping[str, str | None]:
        self.unprepared.append([r.uid for r in refs])
        if self.answer is not None:
            return self.answer(refs)
        return dict.fromkeys(r.uid for r in refs)


class Observed:
    """An Observer recording each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[ClaimRef], dict[str, Any], float]] = []

    def observe_prepare(self, refs: list[ClaimRef], results: Mapping[str, PrepareResult], seconds: float) -> None:
        self.calls.append(("prepare", refs, dict(results), seconds))

    def observe_unprepare(self, refs: list[ClaimRef], errors: Mapping[str, str | None], seconds: float) -> None:
        self.calls.append(("unprepare", refs, dict(errors), seconds))


def helper(source: Claims, driver: FakeDriver, observer: Observed | None = None, node: str | None = NODE):
    return KubeletPluginHelper(claims=source, driver=driver, driver_name=DRIVER, node=node, observer=observer)


def failure_lines(caplog: pytest.LogCaptureFixture, uid: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and uid in r.getMessage()]


def test_the_driver_sees_only_claims_that_pass_the_guards():
    good = claim("good", "u-good")
    elsewhere = claim("elsewhere", "u-elsewhere", pool="node-b")
    pending = claim("pending", "u-pending", allocated=False)
    foreign = claim("foreign", "u-foreign", driver="other.example.com")
    source = Claims(good, elsewhere, pending, foreign, claim("broken", "u-broken"), broken=("broken",))
    driver = FakeDriver()
    refs = [
        ref(good),
        ref(elsewhere),
        ref(pending),
        ref(foreign),
        ClaimRef("ns", "u-old", "good"),  # deleted and re-created under the same name
        ClaimRef("ns", "u-missing", "missing"),
        ClaimRef("ns", "u-broken", "broken"),
    ]

    results = helper(source, driver).prepare(refs)

    assert driver.prepared == [["u-good"]]
    assert list(results) == [r.uid for r in refs]  # one answer per claim, in kubelet's order
    assert results["u-good"] == PrepareResult(devices=[{"request": "net", "pool": NODE, "device": "eth1"}])
    assert "pool node-b, not from this node node-a" in results["u-elsewhere"].error
    assert "claim ns/pending: not allocated" in results["u-pending"].error
    assert "no device of driver dracni.io" in results["u-foreign"].error
    assert "has UID u-good, kubelet asked for u-old" in results["u-old"].error
    assert results["u-missing"].error == "ResourceClaim ns/missing not found"
    assert "cannot read it: connection refused" in results["u-broken"].error


def test_without_a_node_any_pool_passes():
    elsewhere = claim("elsewhere", "u-elsewhere", pool="node-b")
    driver = FakeDriver()
    assert helper(Claims(elsewhere), driver, node=None).prepare([ref(elsewhere)])["u-elsewhere"].error is None
    assert driver.prepared == [["u-elsewhere"]]


def test_every_claim_gets_exactly_one_answer_whatever_the_driver_does():
    a, b, c = claim("a", "u-a"), claim("b", "u-b"), claim("c", "u-c")
    source, driver = Claims(a, b, c), FakeDriver()
    plugin = helper(source, driver)

    driver.answer = lambda claims: {"u-a": PrepareResult(), "u-stranger": PrepareResult(), "u-c": "garbage"}
    results = plugin.prepare([ref(a), ref(b), ref(c), ClaimRef("ns", "../x", "evil")])
    assert set(results) == {"u-a", "u-b", "u-c", "../x"}
    assert results["u-a"] == PrepareResult()
    assert results["u-b"].error == "internal error: no outcome for claim ns/b"
    assert "internal error: bad outcome for claim ns/c" in results["u-c"].error
    assert results["../x"].error == "malformed claim UID '../x' (claim ns/evil)"
    assert driver.prepared[-1] == ["u-a", "u-b", "u-c"]  # the malformed UID never reached it

    def boom(_claims: Any) -> Any:
        raise RuntimeError("boom")

    driver.answer = boom
    results = plugin.prepare([ref(a), ref(b)])
    assert {uid: r.error for uid, r in results.items()} == {
        "u-a": "internal error: preparing claims failed: RuntimeError: boom",
        "u-b": "internal error: preparing claims failed: RuntimeError: boom",
    }
    assert plugin.unprepare([ref(a), ClaimRef("", "", "")]) == {
        "u-a": "internal error: unpreparing claims failed: RuntimeError: boom",
        "": "the claim has no UID",
    }
    driver.answer = lambda refs: {"u-a": "device busy"}
    assert plugin.unprepare([ref(a), ref(b)]) == {
        "u-a": "device busy",
        "u-b": "internal error: no outcome for claim ns/b",
    }


def test_the_observer_hears_once_per_call_with_every_answer():
    good, pending = claim("good", "u-good"), claim("pending", "u-pending", allocated=False)
    observer, driver = Observed(), FakeDriver()
    plugin = helper(Claims(good, pending), driver, observer)
    refs = [ref(good), ref(pending), ClaimRef("ns", "", "blank")]

    results = plugin.prepare(refs)
    assert len(observer.calls) == 1
    call, seen_refs, seen, seconds = observer.calls[0]
    assert (call, seen_refs, seen) == ("prepare", refs, results) and seconds >= 0
    assert {uid for uid, r in seen.items() if r.error} == {"u-pending", ""}

    errors = plugin.unprepare([ref(good), ref(pending)])
    assert observer.calls[1][:3] == ("unprepare", [ref(good), ref(pending)], errors)
    assert driver.unprepared == [["u-good", "u-pending"]]  # unprepare fetches nothing: no guards
    assert len(observer.calls) == 2


def test_one_log_line_per_failed_claim(caplog):
    good, pending = claim("good", "u-good"), claim("pending", "u-pending", allocated=False)
    driver = FakeDriver()
    plugin = helper(Claims(good, pending), driver, Observed())
    with caplog.at_level(logging.DEBUG):
        plugin.prepare([ref(good), ref(pending), ClaimRef("ns", "u-missing", "missing")])
        driver.answer = lambda refs: {r.uid: "disk full" for r in refs}
        plugin.unprepare([ref(good)])
    assert len(failure_lines(caplog, "u-pending")) == 1
    assert len(failure_lines(caplog, "u-missing")) == 1
    assert failure_lines(caplog, "u-good") == ["unprepare of claim ns/good (u-good) failed: disk full"]


def test_a_caller_that_reports_itself_gets_no_log_line_and_no_observation(caplog):
    pending = claim("pending", "u-pending", allocated=False)
    observer = Observed()
    plugin = helper(Claims(pending), FakeDriver(), observer)
    with caplog.at_level(logging.DEBUG):
        assert plugin.prepare([ref(pending)], report=False)["u-pending"].error
    assert failure_lines(caplog, "u-pending") == [] and observer.calls == []


def test_an_observer_that_fails_does_not_fail_the_call():
    class Broken(Observed):
        def observe_prepare(self, *args: Any) -> None:
            raise RuntimeError("metrics down")

    good = claim("good", "u-good")
    assert helper(Claims(good), FakeDriver(), Broken()).prepare([ref(good)])["u-good"].error is None


def test_calls_for_one_claim_do_not_overlap_in_the_driver():
    """Per-claim locks: a retried prepare waits for the slow one on the same claim, while a
    call for another claim goes through."""
    a, b = claim("a", "u-a"), claim("b", "u-b")
    entered, release = threading.Event(), threading.Event()
    inside: list[str] = []

    class Slow(FakeDriver):
        def prepare_claims(self, claims: list[Claim]) -> Mapping[str, PrepareResult]:
            uid = claims[0]["metadata"]["uid"]
            inside.append(uid)
            if uid == "u-a" and not entered.is_set():
                entered.set()
                assert release.wait(10)
            return super().prepare_claims(claims)

    plugin = helper(Claims(a, b), Slow())
    first = threading.Thread(target=plugin.prepare, args=([ref(a)],))
    first.start()
    assert entered.wait(10)
    retry = threading.Thread(target=plugin.prepare, args=([ref(a)],))
    retry.start()
    assert plugin.prepare([ref(b)])["u-b"].error is None
    assert inside == ["u-a", "u-b"]  # the retry of u-a is still waiting
    release.set()
    first.join(10)
    retry.join(10)
    assert inside == ["u-a", "u-b", "u-a"]


def test_dracni_unprepare_goes_through_the_helper(tmp_path):
    """The helper's answer rules apply to ``dracni unprepare``: a UID that cannot name a claim
    gets its own error, and the other claims are still unprepared (alone, the state dir refuses
    the whole batch over it)."""
    from dracni.cli import main as cli
    from dracni.state.facts import claim_ref
    from dracni.state.records import new_prepared_claim
    from dracni.state.store import StateDir

    state = StateDir(str(tmp_path / "state"))
    state.ensure()
    record = new_prepared_claim(
        claim_ref("u-1", "ns", "c1"),
        driver=DRIVER,
        source=None,
        prepared_at="2026-11-27T00:00:00Z",
        pods=[{"uid": "pod-1", "name": "p1"}],
        devices=[],
    )
    state.put_claims([record])
    assert [c["uid"] for c in state.list_claims()] == ["u-1"]

    result = CliRunner().invoke(cli, ["unprepare", "--uid", "u-1", "--uid", "a/b", f"--state-dir={state.root}"])

    assert result.exit_code == 1
    assert "claim u-1: unprepared" in result.output
    assert "claim a/b: error: malformed claim UID 'a/b'" in result.output
    assert state.list_claims() == []
