"""Write dracni's entries of the ``k8s.v1.cni.cncf.io/network-status`` annotation on the pods
of this node's attachments (``--network-status-annotation``).

A sibling step of the status drain (``status/drain.py drain_outbox`` ``annotate_pods``): each
pending outbox record, the full desired set of one claim's facts on this node, becomes per pod
the claim's entries (``status/network_status.py``), written beside the entries others wrote.
Never on the CNI path: ADD and DEL only write the outbox, as for the claim status.

- **Which pods.**  The pods of the record's ready facts, plus the pods this writer annotated for
  the claim before (kept in ``<state>/netstatus/<claimUID>.json``, so a DEL, whose facts are gone
  from the record, still finds the pod whose entries must go, after a restart too).  Only this
  node's attachments: O(this node), never a list of pods.
- **Read-modify-write.**  GET the pod; a pod that is gone, or another pod under that name (its
  UID differs), is final for that pod.  The new value keeps the others' entries
  (``network_status.merged``) and goes out as a merge patch of that one annotation with the pod's
  ``resourceVersion`` as precondition; a conflict (409) re-reads and tries again, as client-go's
  ``retry.RetryOnConflict`` does for Multus (network-attachment-definition-client
  ``pkg/utils/net-attach-def.go setPodNetworkStatus``).
- **Never dropped.**  Any other failure raises a retryable ``SinkError``: the drain keeps the
  claim's record pending and the publisher retries with its backoff, as for the status.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from .. import jsonio
from ..atomicfile import write_atomic
from ..status.network_status import ANNOTATION, UnreadableAnnotation, merged, owned_prefix, pod_entries
from ..status.sink import SinkError
from .api import ApiError, KubeApi

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..state.records import StatusOutbox
    from ..status.network_status import Status

log = logging.getLogger(__name__)

#: Conflicts (409) re-read and retried at once, before the drain's backoff takes over.
CONFLICT_TRIES = 5


class PodNetworkStatus:
    """``annotate_pods`` of the status drain: see the module docstring."""

    def __init__(self, api: KubeApi, state_root: str, pci_of: Callable[[str, str], str | None] | None = None) -> None:
        self.api = api
        self.dir = os.path.join(state_root, "netstatus")
        self.pci_of = pci_of

    # -- the claim's pods, remembered ------------------------------------------------------
    def _path(self, claim_uid: str) -> str:
        return os.path.join(self.dir, f"{claim_uid}.json")

    def _remembered(self, claim_uid: str) -> dict[str, Any]:
        try:
            with open(self._path(claim_uid), "rb") as f:
                data = jsonio.loads(f.read())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("network-status memory of claim %s unreadable, starting afresh: %s", claim_uid, exc)
            return {}
        return data if isinstance(data, dict) else {}

    def _remember(self, claim_uid: str, namespace: str, claim: str, pods: dict[str, str]) -> None:
        if not pods:
            try:
                os.unlink(self._path(claim_uid))
            except FileNotFoundError:
                pass
            return
        os.makedirs(self.dir, exist_ok=True)
        body = {"namespace": namespace, "claim": claim, "pods": pods}
        write_atomic(self._path(claim_uid), jsonio.dumps(body))

    # -- the drain's step ------------------------------------------------------------------
    def sync(self, record: StatusOutbox) -> None:
        """Bring the annotation of every pod of the claim's attachments on this node in line
        with ``record``; raise a retryable SinkError if any pod could not be written."""
        claim = record.get("claim") or {}
        uid = claim.get("uid") or ""
        memory = self._remembered(uid)
        # A DEL without an attachment record names the claim by UID only: the memory knows it.
        namespace = claim.get("namespace") or memory.get("namespace") or ""
        name = claim.get("name") or memory.get("claim") or ""
        if not uid or not namespace or not name:
            return
        desired = pod_entries(record.get("devices") or [], namespace, name, self.pci_of)
        before: dict[str, str] = {k: v for k, v in (memory.get("pods") or {}).items() if isinstance(v, str)}
        targets = {**before, **{pod_uid: pod_name for pod_uid, (pod_name, _) in desired.items()}}
        if targets != before:  # known before the first write: a crash midway still finds them
            self._remember(uid, namespace, name, targets)
        errors: list[ApiError] = []
        for pod_uid, pod_name in sorted(targets.items()):
            ours = desired[pod_uid][1] if pod_uid in desired else []
            try:
                self._write(namespace, pod_name, pod_uid, owned_prefix(namespace, name), ours)
            except ApiError as exc:
                errors.append(exc)
        if errors:
            forbidden = any(e.status in (401, 403) for e in errors)
            text = "; ".join(str(e) for e in errors)
            raise SinkError(f"{ANNOTATION} of pods of claim {namespace}/{name}: {text}", forbidden=forbidden)
        self._remember(uid, namespace, name, {pod_uid: pod_name for pod_uid, (pod_name, _) in desired.items()})

    def _write(self, namespace: str, name: str, pod_uid: str, prefix: str, ours: list[Status]) -> None:
        """One pod's read-modify-write; returns quietly when the pod is gone or another one."""
        for attempt in range(CONFLICT_TRIES):
            pod = self.api.get_pod(namespace, name)
            meta = (pod or {}).get("metadata") or {}
            if pod is None or meta.get("uid") != pod_uid:
                return  # final: the pod is gone (or re-created): no annotation left to keep right
            current = (meta.get("annotations") or {}).get(ANNOTATION)
            try:
                value = merged(current, prefix, ours)
            except UnreadableAnnotation as exc:
                log.warning("pod %s/%s: %s; left as it is", namespace, name, exc)
                return
            if value == current:
                return
            try:
                self.api.patch_pod_annotation(namespace, name, ANNOTATION, value, meta.get("resourceVersion") or "")
                return
            except ApiError as exc:
                if exc.status == 404:
                    return
                if exc.status != 409 or attempt == CONFLICT_TRIES - 1:
                    raise
