"""Pods that join a claim already prepared on this node.

Kubelet prepares a claim once, for the first pod that uses it (``pkg/kubelet/cm/dra/manager.go``
``prepareResources``: a claim whose ClaimInfo is already prepared is skipped), and only
unprepares it after the last one.  A claim shared by several pods (a ResourceClaim the pods name
in ``spec.resourceClaims[].resourceClaimName``) therefore never reaches NodePrepareResources
again when the scheduler reserves it for a second pod, and the CNI plugin, which finds a pod's
claims in the state dir's pod index, would give that pod no interface.

So the service watches this node's pods (field selector ``spec.nodeName``: the node's own
pods, the load of one kubelet) and, when a pod names a claim prepared here for other pods,
prepares that claim again: a GET of the claim, whose ``status.reservedFor`` (written by the
scheduler before it bound the pod to this node) names the new pod.  The claim's record is
otherwise unchanged, so its attachments are untouched.  Pods whose claims came from a
ResourceClaimTemplate have a claim of their own and cost nothing here.

Kubelet runs a pod only after it has seen the pod bound to this node, through the same kind of
watch, and after it has called the DRA manager; the service sees the binding at about the same
time and needs one GET, so the pod index is current before the sandbox's CNI ADD in practice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ..kube.api import ApiError, KubeApi
from ..kubelet.driver import ClaimRef, PrepareResult
from ..state.store import StateDir

log = logging.getLogger(__name__)

WATCH_TIMEOUT = 300

#: ``(claims) -> {uid: outcome}``: the kubelet helper's prepare.
Prepare = Callable[[list[ClaimRef]], dict[str, PrepareResult]]


def claim_names(pod: dict[str, Any]) -> set[str]:
    """The ResourceClaims a pod names directly (shared claims; template claims have their
    own pod and are prepared for it)."""
    spec = pod.get("spec") or {}
    return {
        str(c["resourceClaimName"])
        for c in spec.get("resourceClaims") or []
        if isinstance(c, dict) and c.get("resourceClaimName")
    }


class SharedClaimPods:
    """Keeps the pod index current for pods that join a claim prepared here; see the module
    docstring.  ``run(stop)`` is the service's loop; ``pod_changed(pod)`` handles one pod."""

    def __init__(self, api: KubeApi, state: StateDir, node: str, prepare: Prepare) -> None:
        self.api = api
        self.state = state
        self.node = node
        self.prepare = prepare
        self.synced = threading.Event()

    def pod_changed(self, pod: dict[str, Any]) -> None:
        names = claim_names(pod)
        if not names:
            return
        meta = pod.get("metadata") or {}
        namespace, pod_uid = meta.get("namespace"), meta.get("uid")
        joining = [
            ClaimRef(record["namespace"], record["uid"], record["name"])
            for record in self.state.list_claims()
            if record["namespace"] == namespace
            and record["name"] in names
            and pod_uid not in {p["uid"] for p in record["pods"]}
        ]
        if not joining:
            return
        for uid, outcome in self.prepare(joining).items():
            error = outcome.error
            if error:
                log.warning(
                    "pod %s/%s joined claim %s, which could not be prepared again: %s",
                    namespace,
                    meta.get("name"),
                    uid,
                    error,
                )
            else:
                log.info("pod %s/%s joined claim %s prepared on this node", namespace, meta.get("name"), uid)

    def run(self, stop: threading.Event) -> None:
        """LIST this node's pods, then WATCH them; re-LIST after a broken watch."""
        backoff = 0.5
        while not stop.is_set():
            try:
                pods, resource_version = self.api.list_node_pods(self.node)
                for pod in pods:
                    self.pod_changed(pod)
                self.synced.set()
                backoff = 0.5
                for kind, pod in self.api.watch_node_pods(self.node, resource_version, WATCH_TIMEOUT):
                    if stop.is_set():
                        return
                    if kind in ("ADDED", "MODIFIED"):
                        self.pod_changed(pod)
            except ApiError as exc:
                if exc.status != 410:
                    log.warning("watching this node's pods failed: %s; retrying in %.1fs", exc, backoff)
                    stop.wait(backoff)
                    backoff = min(backoff * 2, 30.0)
            except Exception:
                log.exception("watching this node's pods failed; retrying in %.1fs", backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
