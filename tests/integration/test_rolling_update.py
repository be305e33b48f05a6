"""Two instances of the frozen service side by side on one node (a DaemonSet's surge, kubelet
1.33+ as the fake kubelet models it): each registers under its own sockets, the newest gets
kubelet's calls, exactly one publishes slices and status, and when the old one is stopped the
new one takes over without a gap: claims prepare throughout, nothing is published twice or lost,
and the old instance's SIGTERM leaves the new one's sockets alone."""

from __future__ import annotations

import os

import pytest

from tests.integration.conftest import prepare_ok
from tests.integration.service import (
    claim_ref,
    create_allocated_claim,
    macvlan_params,
    new_pod_uid,
    our_status,
    side_by_side,
    wait_for,
)

UID_OLD = "0a0a0a0a-1111-4000-8000-00000000000a"
UID_NEW = "0b0b0b0b-2222-4000-8000-00000000000b"


def slice_writes(api) -> int:
    return sum(len(api.requests_to(m, "/resourceslices")) for m in ("POST", "PUT"))


@pytest.fixture
def pair(lab, api):
    with side_by_side(lab, api, UID_OLD, UID_NEW) as (old, new):
        yield old, new


def test_the_new_instance_takes_over_from_the_old_without_a_gap(lab, api, pair):
    old, new = pair
    old.start()
    kubelet = old.kubelet
    wait_for(lambda: slice_writes(api) or None, 10.0, "the old instance's slices")
    published = slice_writes(api)

    new.start()  # beside the old one: its own sockets, registered as the newest
    sockets = sorted(os.listdir(old.registry_dir))
    assert sockets == sorted([f"dracni.io-{UID_OLD}-reg.sock", f"dracni.io-{UID_NEW}-reg.sock"])
    assert [p.endpoint.rsplit("/", 1)[1] for p in kubelet.instances("dracni.io")] == [
        f"dra-{UID_OLD}.sock",
        f"dra-{UID_NEW}.sock",
    ]

    # A claim prepared now goes to the new instance; the old one still leads: its status.
    first_uid = new_pod_uid()
    first = create_allocated_claim(api, "first", first_uid, macvlan_params(lab))
    prepare_ok(kubelet, first)
    assert kubelet.endpoints_served()[-1].endswith(f"dra-{UID_NEW}.sock")
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=first_uid)
    wait_for(lambda: our_status(api, first), 5.0, "status of the first claim")
    assert slice_writes(api) == published, "the new instance wrote slices while the old one leads"
    assert "took over" not in new.log()

    # The old instance goes (the DaemonSet deletes it once the new one is ready).
    assert old.stop() == 0
    assert sorted(os.listdir(old.registry_dir)) == [f"dracni.io-{UID_NEW}-reg.sock"]
    assert os.path.exists(old.plugins_dir / "dracni.io" / f"dra-{UID_NEW}.sock")
    kubelet.manager.reconcile()  # kubelet's plugin watcher sees the old socket gone
    wait_for(lambda: "took over" in new.log() or None, 5.0, "the new instance to lead")

    # The new instance now publishes status: the DEL of the first pod, and a second claim.
    lab.cnitool("del", pod, pod_uid=first_uid)
    wait_for(lambda: not our_status(api, first), 5.0, "the first claim's status cleared by the new leader")
    second_uid = new_pod_uid()
    second = create_allocated_claim(api, "second", second_uid, macvlan_params(lab, subnet="10.10.2.0/24"))
    prepare_ok(kubelet, second)
    pod2 = lab.pod()
    lab.cnitool("add", pod2, pod_uid=second_uid)
    wait_for(lambda: our_status(api, second), 5.0, "status of the second claim")
    assert slice_writes(api) == published, "the slices were already right: the new leader rewrote them"
    lab.cnitool("del", pod2, pod_uid=second_uid)
    for claim in (first, second):
        assert not kubelet.unprepare([claim_ref(claim)])[claim["metadata"]["uid"]].error
    wait_for(lambda: not our_status(api, second), 5.0, "the second claim's status cleared")
