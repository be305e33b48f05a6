"""What the service reports as Warning Events, so ``kubectl describe pod`` says why.

Each event names the claim, the request and the cause, with a stable reason:

- ``NetworkAttachmentFailed`` (action ``Attach``): a failed ADD, on the Pod and on the claim,
  seen in the outbox facts the publisher drains;
- ``PrepareFailed`` (action ``Prepare``): a claim NodePrepareResources could not prepare, on
  the claim (kubelet itself reports the failed prepare on the pod);
- ``DeviceUnhealthy`` (action ``HealthCheck``): a device that turned Unhealthy, on every pod
  and claim prepared with it;
- ``IPAMClaimConflict`` / ``IPAMClaimNotFound`` / ``IPAMClaimRefused`` (action
  ``SyncIPAMClaim``): the IPAMClaim cannot take the attachment's addresses, on the Pod and claim.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..kube.events import EventRecorder, ObjectRef, claim_ref, pod_ref
from ..status.entries import error_message

if TYPE_CHECKING:
    from ..inventory.health import DeviceHealth
    from ..kubelet.driver import ClaimRef, PrepareResult
    from ..state.records import DeviceFact, StatusOutbox
    from ..state.store import StateDir

REASON_ADD_FAILED = "NetworkAttachmentFailed"
REASON_PREPARE_FAILED = "PrepareFailed"
REASON_UNHEALTHY = "DeviceUnhealthy"
#: Failures already reported (claim uid, container, pool, device, shareID, updatedAt), bounded.
SEEN_MAX = 4096


def _device(fact: Mapping[str, Any]) -> str:
    share = f" (share {fact['shareID']})" if fact.get("shareID") else ""
    return f"{fact.get('pool')}/{fact.get('device')}{share}"


class ServiceEvents:
    def __init__(self, recorder: EventRecorder) -> None:
        self.recorder = recorder
        self._seen: dict[tuple[str, ...], None] = {}
        self._lock = threading.Lock()

    def _both(self, claim: ObjectRef, pod: ObjectRef | None, reason: str, action: str, note: str) -> None:
        if pod is not None:
            self.recorder.warn(pod, reason, action, note, related=claim)
        self.recorder.warn(claim, reason, action, note)

    @staticmethod
    def _refs(outbox: StatusOutbox, fact: DeviceFact) -> tuple[ObjectRef, ObjectRef | None]:
        claim = outbox["claim"]
        cref = claim_ref(claim["namespace"], claim["name"], claim.get("uid") or None)
        pod_name = fact.get("podName")
        pod = pod_ref(claim["namespace"], pod_name, fact.get("podUID")) if pod_name else None
        return cref, pod

    # -- a failed ADD (the publisher's outbox facts) ---------------------------------------------
    def attachment_failures(self, outbox: StatusOutbox) -> None:
        """An event for every failed attachment fact not reported yet."""
        claim = outbox["claim"]
        for fact in outbox.get("devices") or []:
            if fact.get("ready") or fact.get("detached") or not fact.get("error"):
                continue
            seen = (
                claim["uid"],
                str(fact.get("containerID")),
                str(fact.get("pool")),
                str(fact.get("device")),
                str(fact.get("shareID") or ""),
                str(fact.get("updatedAt")),
            )
            with self._lock:
                if seen in self._seen:
                    continue
                self._seen[seen] = None
                while len(self._seen) > SEEN_MAX:
                    del self._seen[next(iter(self._seen))]
            cref, pod = self._refs(outbox, fact)
            note = (
                f"claim {claim['namespace']}/{claim['name']} request {fact.get('request')} "
                f"(device {_device(fact)}, interface {fact.get('ifName')}): "
                f"{error_message(fact.get('error'), fact.get('ifName') or '')}"
            )
            self._both(cref, pod, REASON_ADD_FAILED, "Attach", note)

    # -- an IPAMClaim that cannot take the addresses ---------------------------------------------
    def ipamclaim_problem(self, outbox: StatusOutbox, fact: DeviceFact, reason: str, message: str) -> None:
        claim = outbox["claim"]
        cref, pod = self._refs(outbox, fact)
        note = f"claim {claim['namespace']}/{claim['name']} request {fact.get('request')}: {message}"
        self._both(cref, pod, reason, "SyncIPAMClaim", note)

    # -- a failed prepare ------------------------------------------------------------------------
    def prepare_failures(self, refs: list[ClaimRef], outcomes: Mapping[str, PrepareResult]) -> None:
        for ref in refs:
            outcome = outcomes.get(ref.uid)
            if outcome is not None and outcome.error:
                note = f"claim {ref.namespace}/{ref.name}: prepare failed: {outcome.error}"
                self.recorder.warn(claim_ref(ref.namespace, ref.name, ref.uid), REASON_PREPARE_FAILED, "Prepare", note)

    # -- a device that went unhealthy ------------------------------------------------------------
    def unhealthy(self, state: StateDir, device: DeviceHealth) -> None:
        """On every pod and claim prepared with the device."""
        for claim in state.list_claims():
            requests = [
                d["request"] for d in claim["devices"] if (d["pool"], d["device"]) == (device.pool, device.device)
            ]
            if not requests:
                continue
            note = (
                f"claim {claim['namespace']}/{claim['name']} request {', '.join(requests)}: "
                f"device {device.pool}/{device.device} is unhealthy: {device.message}"
            )
            cref = claim_ref(claim["namespace"], claim["name"], claim["uid"])
            for pod in claim.get("pods") or []:
                self.recorder.warn(
                    pod_ref(claim["namespace"], pod["name"], pod.get("uid")), REASON_UNHEALTHY, "HealthCheck", note,
                    related=cref,
                )  # fmt: skip
            self.recorder.warn(cref, REASON_UNHEALTHY, "HealthCheck", note)
