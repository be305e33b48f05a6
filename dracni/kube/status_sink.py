"""The status sink of a cluster: server-side apply of this driver's ``status.devices`` entries."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..status.sink import SinkError
from .api import ApiError, KubeApi

if TYPE_CHECKING:
    from ..state.records import ClaimRef


class ApiStatusSink:
    """``StatusSink`` writing through the API server (fieldManager = driver name, force)."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    def apply(self, claim: ClaimRef, driver: str, devices: list[dict[str, Any]]) -> None:
        try:
            self.api.apply_claim_status(claim["namespace"], claim["name"], devices, field_manager=driver)
        except ApiError as exc:
            where = f"ResourceClaim {claim['namespace']}/{claim['name']}"
            if exc.status == 404:
                # The claim is gone: there is no status left to write (or to clear).
                raise SinkError(f"{where} no longer exists", retryable=False) from None
            # 422: the server refuses the entries; sending them again would not change that.
            raise SinkError(f"{where}: {exc}", retryable=exc.retryable) from None
