"""Warning Events (issue 12 item 1): dracni's EventRecorder through the real kubernetes client
against the test API server's events.k8s.io/v1 Events, and the fake's own Event rules."""

from __future__ import annotations

import pytest

from dracni.kube.api import ApiError, KubeApi
from dracni.kube.events import FINISH_SECONDS, SPAM_BURST, EventRecorder, claim_ref, pod_ref
from tests.kubeclient import serving


@pytest.fixture
def fake(tmp_path):
    with serving(tmp_path) as server:
        yield server


@pytest.fixture
def api(api_client) -> KubeApi:
    return KubeApi(api_client)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def recorder(api: KubeApi, clock: Clock | None = None) -> EventRecorder:
    return EventRecorder(
        api, controller="dracni.io", instance="dracni.io-node-a", clock=clock or Clock(), retry_seconds=0
    )


POD = pod_ref("default", "web-1", "pod-uid-1")
CLAIM = claim_ref("default", "nets", "claim-uid-1")


def test_a_warning_event_regarding_the_pod_names_claim_request_and_cause(fake, api):
    rec = recorder(api)
    rec.warn(POD, "NetworkAttachmentFailed", "Attach", "claim default/nets request net: Link not found", related=CLAIM)
    rec.drain()
    (event,) = fake.list_events("default")
    assert event["type"] == "Warning" and event["reason"] == "NetworkAttachmentFailed"
    assert event["regarding"] == POD and event["related"] == CLAIM
    assert event["reportingController"] == "dracni.io" and event["reportingInstance"] == "dracni.io-node-a"
    assert event["note"] == "claim default/nets request net: Link not found"
    assert event["metadata"]["name"].startswith("web-1.") and "series" not in event


def test_isomorphic_events_become_one_series(fake, api):
    """client-go recordToSink: the 2nd makes a series (count 2, patched), later ones only count
    until finishSeries writes the final count."""
    clock = Clock()
    rec = recorder(api, clock)
    for n in range(5):
        clock.now += 1
        rec.warn(POD, "NetworkAttachmentFailed", "Attach", f"attempt {n}")
        rec.drain()
    (event,) = fake.list_events("default")
    assert event["series"]["count"] == 2 and event["note"] == "attempt 0"
    rec.finish_series(now=clock.now + FINISH_SECONDS + 1)
    (event,) = fake.list_events("default")
    assert event["series"]["count"] == 5
    # forgotten: the next one starts afresh
    rec.warn(POD, "NetworkAttachmentFailed", "Attach", "again")
    rec.drain()
    assert len(fake.list_events("default")) == 2


def test_other_reasons_and_objects_are_separate_events(fake, api):
    rec = recorder(api)
    rec.warn(POD, "NetworkAttachmentFailed", "Attach", "a")
    rec.warn(CLAIM, "NetworkAttachmentFailed", "Attach", "a")
    rec.warn(POD, "DeviceUnhealthy", "HealthCheck", "b")
    rec.drain()
    assert sorted((e["regarding"]["kind"], e["reason"]) for e in fake.list_events("default")) == [
        ("Pod", "DeviceUnhealthy"),
        ("Pod", "NetworkAttachmentFailed"),
        ("ResourceClaim", "NetworkAttachmentFailed"),
    ]


def test_one_object_cannot_flood_the_api_server(fake, api):
    """record.EventCorrelator's spam filter: a burst per regarding object, then one per 5 min."""
    rec = recorder(api)
    for n in range(SPAM_BURST + 10):
        rec.warn(POD, f"Reason{n}", "Attach", "x")
    rec.drain()
    assert len(fake.list_events("default")) == SPAM_BURST and rec.dropped == 10


def test_a_long_note_is_cut_to_what_the_server_takes(fake, api):
    rec = recorder(api)
    rec.warn(POD, "NetworkAttachmentFailed", "Attach", "é" * 1000)  # 2000 bytes
    rec.drain()
    (event,) = fake.list_events("default")
    assert len(event["note"].encode()) <= 1024 and event["note"].endswith("...")


def test_a_series_whose_event_was_deleted_is_created_again(fake, api):
    rec = recorder(api)
    rec.warn(POD, "NetworkAttachmentFailed", "Attach", "x")
    rec.drain()
    (event,) = fake.list_events("default")
    fake._store.remove("events", "default", event["metadata"]["name"])
    rec.warn(POD, "NetworkAttachmentFailed", "Attach", "x")
    rec.drain()
    (again,) = fake.list_events("default")
    assert again["series"]["count"] == 2


# -- the fake's Event rules (pkg/apis/core/validation/events.go) ----------------------------------
def event(**changes) -> dict:
    body = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "web-1.abc", "namespace": "default"},
        "eventTime": "2026-11-25T18:00:00.000000Z",
        "reportingController": "dracni.io",
        "reportingInstance": "dracni.io-node-a",
        "action": "Attach",
        "reason": "NetworkAttachmentFailed",
        "regarding": POD,
        "note": "n",
        "type": "Warning",
    }
    return {k: v for k, v in {**body, **changes}.items() if v is not None}


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"type": "Bad"}, "type: Invalid value"),
        ({"reportingController": ""}, "reportingController: Required value"),
        ({"action": ""}, "action: Required value"),
        ({"reason": "r" * 129}, "reason: Invalid value"),
        ({"note": "n" * 1025}, "note: Invalid value"),
        ({"series": {"count": 1, "lastObservedTime": "2026-11-25T18:00:00.000000Z"}}, "series.count"),
        ({"deprecatedCount": 3}, "deprecatedCount: Invalid value"),
    ],
)
def test_validate_event_create(fake, api, changes, error):
    with pytest.raises(ApiError) as info:
        api.create_event("default", event(**changes))
    assert info.value.status == 422 and error in str(info.value)


def test_validate_event_create_needs_an_event_time(fake, api_client):
    """The client's models require eventTime themselves: a raw request shows the server's rule."""
    from kubernetes.client.exceptions import ApiException

    from tests.fakes.test_apiserver import raw_call

    with pytest.raises(ApiException) as info:
        raw_call(
            api_client, "POST", "/apis/events.k8s.io/v1/namespaces/default/events", event(eventTime=None), "object"
        )
    assert info.value.status == 422 and "eventTime: Required value" in info.value.body


def test_validate_event_update_keeps_identity_immutable(fake, api):
    api.create_event("default", event())
    with pytest.raises(ApiError) as info:
        api.patch_event("default", "web-1.abc", {"note": "other"})
    assert info.value.status == 422 and "note" in str(info.value)
    series = {"count": 2, "lastObservedTime": "2026-11-25T18:00:01.000000Z"}
    assert api.patch_event("default", "web-1.abc", {"series": series})["series"] == series


def test_a_failed_attachment_is_reported_once_on_the_pod_and_the_claim(fake, api):
    from dracni.service.events import ServiceEvents

    events = ServiceEvents(recorder(api))
    fact = {
        "request": "net", "pool": "node-a", "device": "eth1", "shareID": None, "ifName": "net1", "ready": False,
        "result": None, "error": {"code": 11, "msg": "delegate macvlan ADD failed", "details": "Link not found"},
        "containerID": "c1", "podUID": "pod-uid-1", "podName": "web-1", "updatedAt": "2026-11-25T18:00:00Z",
    }  # fmt: skip
    outbox = {"claim": {"uid": "claim-uid-1", "namespace": "default", "name": "nets"}, "devices": [fact]}
    events.attachment_failures(outbox)
    events.attachment_failures(outbox)  # the same record drained again (a retried publish)
    events.recorder.drain()
    found = fake.list_events("default")
    assert sorted(e["regarding"]["kind"] for e in found) == ["Pod", "ResourceClaim"]
    assert all("series" not in e for e in found)
    assert {e["note"] for e in found} == {
        "claim default/nets request net (device node-a/eth1, interface net1): "
        "delegate macvlan ADD failed: Link not found"
    }
