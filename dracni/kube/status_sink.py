"""The status sink of a cluster: server-side apply of this driver's ``status.devices`` entries."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..status.sink import SinkError
from .api import ApiError, KubeApi

if TYPE_CHECKING:
    from ..state.records import ClaimRef


#: What a refused status write needs (packaging/deploy/clusterrole.yaml grants it).
FORBIDDEN_HINT = (
    "dracni needs the ClusterRole rule {apiGroups: [resource.k8s.io], resources: [resourceclaims/status], "
    "verbs: [patch]} bound to its service account, and on Kubernetes 1.36+ (per-device status "
    "authorization) a pod-bound token naming this node and the claim allocated to this node; "
    "retrying until it is granted"
)


class ApiStatusSink:
    """``StatusSink`` writing through the API server (fieldManager = driver name, force)."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    def apply(self, claim: ClaimRef, driver: str, devices: list[dict[str, Any]]) -> None:
        try:
            self.api.apply_claim_status(
                claim["namespace"], claim["name"], devices, field_manager=driver, uid=claim.get("uid") or None
            )
        except ApiError as exc:
            where = f"ResourceClaim {claim['namespace']}/{claim['name']}"
            if exc.status == 404:
                # The claim is gone: there is no status left to write (or to clear).
                raise SinkError(f"{where} no longer exists", retryable=False) from None
            if exc.status == 409 and "UID in precondition" in str(exc):
                # Deleted and re-created under the same name: that claim is not this one.
                raise SinkError(
                    f"{where} was re-created (another UID): not giving it this status", retryable=False
                ) from None
            if exc.status == 403 or (exc.status == 422 and "Forbidden" in str(exc)):
                raise SinkError(f"{where}: {exc}; {FORBIDDEN_HINT}", forbidden=True) from None
            # 422: the server refuses the entries; sending them again would not change that.
            raise SinkError(f"{where}: {exc}", retryable=exc.retryable) from None
