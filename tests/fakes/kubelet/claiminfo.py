"""kubelet's claim info cache and its checkpoint (pkg/kubelet/cm/dra/claiminfo.go, state/).

- Keyed by ``<namespace>/<claim name>`` (claiminfo.go ``claimInfoCache.add``/``get``), holding
  the claim UID, the set of pod UIDs using it, and per driver the devices the plugin returned
  (``ClaimInfoState``, state/types.go; ``addDevice`` appends, it does not deduplicate).
- ``prepared`` lives in memory only: a cache loaded from the checkpoint starts with every claim
  unprepared (``newClaimInfoFromState``).  A restarted kubelet does not call the plugin for a
  pod whose sandbox keeps running (kuberuntime ``SyncPod`` runs ``PrepareDynamicResources``
  only before it creates a sandbox), but when it creates one for such a pod, the pod's claims
  are sent again; unprepare works from the restored pod references.
- The checkpoint file ``dra_manager_state`` (manager.go ``draManagerStateFileName``) is
  ``{"Data": <JSON of CheckpointData>, "Checksum": crc32(Data)}`` (state/checkpoint.go
  ``NewCheckpoint``, ``VerifyChecksum``); ``syncToCheckpoint`` writes the whole cache.
"""

from __future__ import annotations

import json
import os
import threading
import zlib
from dataclasses import dataclass, field
from typing import Any

CHECKPOINT_FILE = "dra_manager_state"
CHECKPOINT_KIND = "DRACheckpoint"
CHECKPOINT_API_VERSION = "checkpoint.dra.kubelet.k8s.io/v1"


class CorruptCheckpoint(Exception):
    """The checkpoint's checksum does not match its data (checkpointmanager CorruptCheckpointError)."""


@dataclass
class DeviceState:
    """state.Device: how the plugin described a prepared device."""

    pool_name: str
    device_name: str
    request_names: list[str] = field(default_factory=list)
    cdi_device_ids: list[str] = field(default_factory=list)
    share_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "PoolName": self.pool_name,
            "DeviceName": self.device_name,
            "RequestNames": self.request_names or None,
            "CDIDeviceIDs": self.cdi_device_ids or None,
        }
        if self.share_id is not None:
            out["ShareID"] = self.share_id
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DeviceState:
        return cls(
            pool_name=obj.get("PoolName", ""),
            device_name=obj.get("DeviceName", ""),
            request_names=list(obj.get("RequestNames") or []),
            cdi_device_ids=list(obj.get("CDIDeviceIDs") or []),
            share_id=obj.get("ShareID"),
        )


@dataclass
class ClaimInfo:
    """claiminfo.go ``ClaimInfo``: ``ClaimInfoState`` plus the in-memory ``prepared`` flag."""

    claim_uid: str
    claim_name: str
    namespace: str
    pod_uids: set[str] = field(default_factory=set)
    #: driver -> devices; every driver with allocation results has an entry (newClaimInfoFromClaim)
    driver_state: dict[str, list[DeviceState]] = field(default_factory=dict)
    prepared: bool = False

    @classmethod
    def from_claim(cls, claim: dict[str, Any]) -> ClaimInfo:
        """``newClaimInfoFromClaim``: an unallocated claim is an error."""
        meta = claim.get("metadata") or {}
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            raise ValueError("not allocated")
        results = (allocation.get("devices") or {}).get("results") or []
        return cls(
            claim_uid=meta.get("uid", ""),
            claim_name=meta.get("name", ""),
            namespace=meta.get("namespace", ""),
            driver_state={r.get("driver", ""): [] for r in results},
        )

    def add_device(self, driver: str, device: DeviceState) -> None:
        self.driver_state.setdefault(driver, []).append(device)

    def to_json(self) -> dict[str, Any]:
        return {
            "ClaimUID": self.claim_uid,
            "ClaimName": self.claim_name,
            "Namespace": self.namespace,
            "PodUIDs": {uid: {} for uid in sorted(self.pod_uids)},  # sets.Set[string] marshals as a map
            "DriverState": {
                driver: {"Devices": [d.to_json() for d in devices] or None}
                for driver, devices in self.driver_state.items()
            },
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ClaimInfo:
        """``newClaimInfoFromState``: never prepared."""
        return cls(
            claim_uid=obj.get("ClaimUID", ""),
            claim_name=obj.get("ClaimName", ""),
            namespace=obj.get("Namespace", ""),
            pod_uids=set(obj.get("PodUIDs") or {}),
            driver_state={
                driver: [DeviceState.from_json(d) for d in (state or {}).get("Devices") or []]
                for driver, state in (obj.get("DriverState") or {}).items()
            },
        )


class ClaimInfoCache:
    """``claimInfoCache``; ``state_dir`` None keeps no checkpoint (a kubelet without one)."""

    def __init__(self, state_dir: str | None = None) -> None:
        self.lock = threading.RLock()
        self.state_dir = state_dir
        self.claims: dict[str, ClaimInfo] = {}
        if state_dir is not None:
            os.makedirs(state_dir, exist_ok=True)
            for entry in self._load():
                info = ClaimInfo.from_json(entry)
                self.claims[f"{info.namespace}/{info.claim_name}"] = info

    @property
    def checkpoint_path(self) -> str | None:
        return os.path.join(self.state_dir, CHECKPOINT_FILE) if self.state_dir else None

    def get(self, name: str, namespace: str) -> ClaimInfo | None:
        return self.claims.get(f"{namespace}/{name}")

    def add(self, info: ClaimInfo) -> None:
        self.claims[f"{info.namespace}/{info.claim_name}"] = info

    def delete(self, name: str, namespace: str) -> None:
        self.claims.pop(f"{namespace}/{name}", None)

    def claim_names_for_pod(self, pod_uid: str) -> list[str]:
        """Names of the cached claims that reference the pod (manager.go ``claimNamesForPod``)."""
        return [info.claim_name for info in self.claims.values() if pod_uid in info.pod_uids]

    def has_pod_reference(self, pod_uid: str) -> bool:
        return any(pod_uid in info.pod_uids for info in self.claims.values())

    def sync_to_checkpoint(self) -> None:
        """``syncToCheckpoint``: the whole cache, written atomically."""
        path = self.checkpoint_path
        if path is None:
            return
        data = json.dumps(
            {
                "kind": CHECKPOINT_KIND,
                "apiVersion": CHECKPOINT_API_VERSION,
                "Entries": [info.to_json() for info in self.claims.values()],
            },
            separators=(",", ":"),
        )
        blob = json.dumps({"Data": data, "Checksum": zlib.crc32(data.encode())})
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(blob)
        os.replace(tmp, path)

    def _load(self) -> list[dict[str, Any]]:
        path = self.checkpoint_path
        if path is None or not os.path.exists(path):
            return []  # GetOrCreate: no checkpoint yet
        with open(path, encoding="utf-8") as fh:
            checkpoint = json.load(fh)
        data = checkpoint.get("Data", "")
        if zlib.crc32(data.encode()) != checkpoint.get("Checksum"):
            raise CorruptCheckpoint(f"{path}: checksum mismatch; drain the node and remove the DRA state file")
        return list(json.loads(data).get("Entries") or [])
