"""An upgrade under load, through the frozen binary: 50 pods start (claim allocated, prepared
by the fake kubelet, CNI ADD, status published) from a pool of workers while the node's old
instance A hands over to the new instance B, as a DaemonSet's surge does it (B starts beside
A; once B is ready the old pod is deleted: A gets SIGTERM).  Kubelet's plugin watcher runs
throughout (``kubelet.manager.reconcile()`` in a loop, as pluginwatcher does), so it notices
A's registration socket go.

What must hold: no pod's prepare fails (a pod sync that fails is retried once, as kubelet's
pod workers retry a failed sync, and counted apart; no claim may end unprepared), every claim
ends with exactly one status entry, Ready=True, every interface exists; after DEL and
unprepare of every pod nothing is left: no status entry, no record in the state dir, no
process of either instance, only B's sockets.  The figures (pods started during the handover,
failed prepares, how long the handover took) are printed for the closing note (``-s``).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

from tests.fakes.kubelet import FakeKubelet, Pod, PodSyncError
from tests.harness import Netns
from tests.integration.service import (
    DRIVER,
    NODE,
    create_allocated_claim,
    macvlan_params,
    new_pod_uid,
    our_status,
    side_by_side,
    wait_for,
)

UID_A = "0a0a0a0a-3333-4000-8000-00000000000a"
UID_B = "0b0b0b0b-4444-4000-8000-00000000000b"
PODS = 50
WORKERS = 8
ARRIVAL = 0.15  # a pod reaches the node every 150 ms: the pods' starts span the handover
HANDOVER_AFTER = 5  # pods fully started on A before B starts beside it
IF_NAME = "mv0"


@dataclass
class Started:
    """One pod's start: its pod, netns and claim, and when its start began and ended."""

    pod: Pod
    netns: Netns
    claim: dict
    began: float
    ended: float = 0.0
    retried: list[str] = field(default_factory=list)  # the failed pod syncs kubelet retried


class PluginWatcher:
    """Kubelet's plugin watcher and reconciler, running while the test runs (pluginwatcher's
    fsnotify loop and reconciler.go ``reconcile``): a removed registration socket unregisters
    its instance."""

    def __init__(self, kubelet: FakeKubelet, period: float = 0.05) -> None:
        self.kubelet = kubelet
        self.period = period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="plugin-watcher", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.kubelet.manager.reconcile()
            self._stop.wait(self.period)

    def __enter__(self) -> PluginWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def api_kubelet(lab, api):
    """The node's kubelet with an API client (``prepare_pod`` reads the pod's claims)."""

    def make(registry_dir) -> FakeKubelet:
        return FakeKubelet(
            str(registry_dir),
            driver=DRIVER,
            state_dir=str(lab.tmp / "kubelet"),
            kubeconfig=api.kubeconfig_path,
            node_name=NODE,
        )

    return make


@pytest.fixture
def pair(lab, api):
    with side_by_side(lab, api, UID_A, UID_B, kubelet=api_kubelet(lab, api)) as instances:
        yield instances


def ready(entry: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in entry.get("conditions") or [])


def start_pod(lab, api, kubelet: FakeKubelet, i: int, arrives: float) -> Started:
    """What a pod start asks of the node, from its arrival (monotonic time ``arrives``): the
    claim allocated (the scheduler), prepared (kubelet's DRA manager), the pod's network (the
    runtime's CNI ADD), its status published."""
    time.sleep(max(0.0, arrives - time.monotonic()))
    uid, name = new_pod_uid(), f"pod-{i}"
    began = time.monotonic()
    claim = create_allocated_claim(
        api, f"net-{i}", uid, macvlan_params(lab, subnet="10.20.0.0/24", if_name=IF_NAME), pod_name=name
    )
    pod = Pod(uid, "default", name, (f"net-{i}",))
    started = Started(pod, lab.pod(), claim, began)
    try:
        kubelet.prepare_pod(pod)
    except PodSyncError as exc:
        # pod_workers.go ``completeWork``: a failed sync is requeued with a backoff and the
        # pod's sync (``SyncPod`` -> ``PrepareDynamicResources``) runs again
        started.retried.append(str(exc))
        time.sleep(0.1)
        kubelet.prepare_pod(pod)
    lab.cnitool("add", started.netns, pod_uid=uid, pod_name=name)
    wait_for(lambda: our_status(api, claim), 30.0, f"status of {claim['metadata']['name']}", interval=0.05)
    started.ended = time.monotonic()
    return started


def test_fifty_pods_start_while_the_old_instance_hands_over_to_the_new(lab, api, pair):
    old, new = pair
    kubelet = old.kubelet
    wall = time.monotonic()
    old.start()
    with PluginWatcher(kubelet), ThreadPoolExecutor(WORKERS) as pool:
        first = time.monotonic()
        futures = [pool.submit(start_pod, lab, api, kubelet, i, first + i * ARRIVAL) for i in range(PODS)]
        wait_for(lambda: sum(f.done() for f in futures) >= HANDOVER_AFTER, 60.0, "the first pods", interval=0.02)
        handover_began = time.monotonic()
        new.start()  # beside A, registered as the newest: kubelet's calls go to B now
        sigterm = time.monotonic()
        old.proc.send_signal(signal.SIGTERM)  # the DaemonSet deletes the old pod once B is ready
        old.proc.wait(timeout=20)
        exited = time.monotonic()
        wait_for(lambda: "took over" in new.log(), 20.0, "B to take over", interval=0.01)
        took_over = time.monotonic()
        started = [f.result() for f in futures]  # a pod whose start failed fails the test here
        # the watcher has seen A's socket go: B alone is registered
        wait_for(lambda: len(kubelet.instances(DRIVER)) == 1, 5.0, "kubelet to drop A")
    assert old.stop() == 0, old.log()  # exited already: collects what it left in its group
    assert [p.endpoint.rsplit("/", 1)[1] for p in kubelet.instances(DRIVER)] == [f"dra-{UID_B}.sock"]

    during = [s for s in started if s.began < took_over and s.ended > handover_began]
    retried = [s for s in started if s.retried]
    served = kubelet.endpoints_served("NodePrepareResources")
    print(
        f"\nupgrade under load: {PODS} pods, {WORKERS} workers; {len(during)} started during the handover "
        f"(B's start to B taking over, {took_over - handover_began:.2f} s); failed prepares: 0 "
        f"(pod syncs retried: {len(retried)}); A's SIGTERM to A's exit {exited - sigterm:.2f} s, "
        f"to B's 'took over' {took_over - sigterm:.2f} s; prepares served by A "
        f"{sum(e.endswith(f'dra-{UID_A}.sock') for e in served)}, by B {sum(e.endswith(f'dra-{UID_B}.sock') for e in served)}"
    )
    assert len(during) >= 10, "too few pods started during the handover: the test did not test it"
    assert {e.rsplit("/", 1)[1] for e in served} == {f"dra-{UID_A}.sock", f"dra-{UID_B}.sock"}, "both served"

    # Every claim prepared (kubelet's claim info: prepared), exactly one status entry, Ready.
    for s in started:
        info = kubelet.cache.get(s.claim["metadata"]["name"], "default")
        assert info is not None and info.prepared, f"{s.claim['metadata']['name']} ended unprepared"
        entries = our_status(api, s.claim)
        assert len(entries) == 1, f"{s.claim['metadata']['name']}: {entries}"
        assert ready(entries[0]), entries[0]
        assert IF_NAME in s.netns.links(), f"{s.pod.name}: no {IF_NAME}"

    # The pods go: DEL, then unprepare (kubelet, once the containers stopped); B clears the status.
    for s in started:
        lab.cnitool("del", s.netns, pod_uid=s.pod.uid, pod_name=s.pod.name)
        kubelet.unprepare_pod(s.pod)
    for s in started:
        wait_for(lambda: not our_status(api, s.claim), 20.0, f"{s.claim['metadata']['name']}'s status cleared")  # noqa: B023
    left = {d: sorted(os.listdir(lab.state_dir / d)) for d in ("claims", "pods", "attachments", "outbox")}
    assert left == {d: [] for d in left}, left
    assert not (lab.state_dir / "quarantine").exists()
    assert sorted(os.listdir(old.registry_dir)) == [f"{DRIVER}-{UID_B}-reg.sock"]
    assert sorted(n for n in os.listdir(old.plugins_dir / DRIVER) if n.endswith(".sock")) == [f"dra-{UID_B}.sock"]
    assert new.stop() == 0
    assert not old.leftovers and not new.leftovers, (old.leftovers, new.leftovers)
    print(f"upgrade under load: wall time {time.monotonic() - wall:.1f} s")
