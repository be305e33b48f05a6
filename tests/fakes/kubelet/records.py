"""What a test hands the fake kubelet and what it keeps: the pod the DRA manager reads, the
record of each DRA call (with the endpoint of the instance that served it: since 1.33 several
instances of one driver may be registered, dra_plugin_manager.go ``get`` picks one per call),
the fake's errors, and the device state read from a prepare response (manager.go
``prepareResources`` stores each ``Device`` of an entry in the claim info).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .claiminfo import DeviceState
from .draplugins import KubeletError

ClaimTuple = tuple[str, str, str]  # (namespace, uid, name)


class ProtocolError(KubeletError):
    """The plugin broke the DRA protocol (a missing or unknown claim UID in a response)."""


class ClaimError(KubeletError):
    """A claim's entry carried an error (only with ``raise_on_error=True``)."""


class PodSyncError(KubeletError):
    """``PrepareResources``/``UnprepareResources`` failed: kubelet fails this pod sync and retries later."""


@dataclass(frozen=True)
class Pod:
    """What the DRA manager reads of a pod: its UID, namespace, name and the names of the
    ResourceClaims it uses (``pod.spec.resourceClaims`` resolved by ``resourceclaim.Name``)."""

    uid: str
    namespace: str
    name: str
    claims: tuple[str, ...]


@dataclass(frozen=True)
class Call:
    """One DRA call the fake sent: ``claims`` as requested, and what came back."""

    method: str  # NodePrepareResources / NodeUnprepareResources
    driver: str
    service: str
    claims: tuple[ClaimTuple, ...]
    #: uid -> error string ("" = ok) of the response; None when the RPC failed
    results: dict[str, str] | None
    rpc_error: str | None = None
    #: the instance that served it (its endpoint): ``GetPlugin``'s choice at the call
    endpoint: str = ""


def device_state(device: Any) -> DeviceState:
    share_id = (
        device.share_id if "share_id" in device.DESCRIPTOR.fields_by_name and device.HasField("share_id") else None
    )
    return DeviceState(
        pool_name=device.pool_name,
        device_name=device.device_name,
        request_names=list(device.request_names),
        cdi_device_ids=list(device.cdi_device_ids),
        share_id=share_id,
    )
