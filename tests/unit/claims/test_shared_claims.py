"""A pod joining a claim already prepared on this node (kubelet prepares a claim once:
pkg/kubelet/cm/dra/manager.go prepareResources skips a prepared ClaimInfo), against the test API
server through the real kubernetes client."""

from __future__ import annotations

import threading

import pytest

from dracni.claims.api_source import ApiClaimSource
from dracni.claims.driver import network_plugin
from dracni.claims.prepare import Resolver
from dracni.claims.shared_claims import SharedClaimPods, claim_names
from dracni.kube.api import KubeApi
from dracni.kubelet.driver import ClaimRef
from dracni.state.store import StateDir
from tests.fakes.apiserver import FakeApiServer
from tests.kubeclient import serving
from tests.unit.kube.test_kube_adapters import DRIVER, NODE, make_claim, ref


@pytest.fixture
def fake(tmp_path):
    with serving(tmp_path, NODE) as server:
        yield server


@pytest.fixture
def api(api_client) -> KubeApi:
    return KubeApi(api_client)


def reserve(fake: FakeApiServer, claim: dict, *pods: tuple[str, str]) -> None:
    """The scheduler reserves the claim for ``pods`` ((name, uid) each) before binding them."""
    fake.set_claim_allocation(
        "default",
        claim["metadata"]["name"],
        claim["status"]["allocation"],
        [{"resource": "pods", "name": name, "uid": uid} for name, uid in pods],
    )


@pytest.fixture
def lab(fake, api, tmp_path):
    state = StateDir(str(tmp_path / "state"))
    helper, _ = network_plugin(Resolver(state=state, driver=DRIVER, node=NODE), claims=ApiClaimSource(api))
    stop = threading.Event()
    watcher = SharedClaimPods(api, state, NODE, helper.prepare)
    thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert watcher.synced.wait(10)
        yield state, helper
    finally:
        stop.set()
        helper.close()
        fake.stop()  # ends the watch
        thread.join(10)


def wait_for(condition, timeout: float = 10.0) -> bool:
    done = threading.Event()
    while not done.wait(0.02):
        if condition():
            return True
        timeout -= 0.02
        if timeout <= 0:
            return False
    return False


def test_a_second_pod_joining_a_shared_claim_finds_it_in_the_pod_index(fake, lab):
    state, helper = lab
    claim = make_claim(fake, "shared")  # reserved for demo / pod-uid-1
    uid = claim["metadata"]["uid"]
    fake.add_pod("default", "demo", node=NODE, claims={"net": "shared"})
    assert helper.prepare([ref(claim)])[uid].error is None  # kubelet, for the first pod only

    reserve(fake, claim, ("demo", "pod-uid-1"), ("second", "pod-uid-2"))  # then binds it here
    fake.add_pod("default", "second", node=NODE, claims={"net": "shared"}, uid="pod-uid-2")

    assert wait_for(lambda: state.pod_claim_uids("pod-uid-2", None, None) == [uid])
    assert state.pod_claim_uids("pod-uid-1", None, None) == [uid]
    assert [p["uid"] for p in state.read_claim(uid)["pods"]] == ["pod-uid-1", "pod-uid-2"]


def test_pods_elsewhere_or_without_that_claim_change_nothing(fake, lab):
    state, helper = lab
    claim = make_claim(fake, "shared")
    uid = claim["metadata"]["uid"]
    assert helper.prepare([ref(claim)])[uid].error is None
    before = state.read_claim(uid)
    marker = make_claim(fake, "marker")
    assert helper.prepare([ref(marker)])[marker["metadata"]["uid"]].error is None
    reserve(fake, marker, ("demo", "pod-uid-1"), ("marker", "pod-uid-m"))
    reads = len(fake.requests_to("GET", "resourceclaims"))

    fake.add_pod("default", "other-node", node="node-b", claims={"net": "shared"})  # not ours
    fake.add_pod("other", "same-name", node=NODE, claims={"net": "shared"})  # another namespace
    fake.add_pod("default", "plain", node=NODE)  # no claims
    fake.add_pod("default", "unknown", node=NODE, claims={"net": "not-prepared-here"})
    # events arrive in order: once the marker pod has joined its claim, the pods above were seen
    fake.add_pod("default", "marker", node=NODE, claims={"net": "marker"}, uid="pod-uid-m")
    assert wait_for(lambda: state.pod_claim_uids("pod-uid-m", None, None) == [marker["metadata"]["uid"]])

    assert state.read_claim(uid) == before
    assert len(fake.requests_to("GET", "resourceclaims")) == reads + 1  # the marker's GET only


def test_claim_names_are_the_claims_a_pod_names_directly():
    pod = {
        "spec": {
            "resourceClaims": [
                {"name": "a", "resourceClaimName": "shared"},
                {"name": "b", "resourceClaimTemplateName": "per-pod"},
            ]
        }
    }
    assert claim_names(pod) == {"shared"}
    assert claim_names({"spec": {}}) == set()
    assert ClaimRef("ns", "u", "n").name == "n"
