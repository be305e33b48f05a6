"""The server's feature gates (``--feature-gates``), which the registry strategies consult the way
kube-apiserver's consult ``utilfeature.DefaultFeatureGate``.

Only the gates whose rules the fake models are known; a test may flip one at any time (as an
upgrade or a downgrade of the API server would: objects already stored keep their fields, see
the "in use" rules of each ``dropDisabled...`` function).  Defaults: k8s
``pkg/features/kube_features.go`` (``defaultVersionedKubernetesFeatureGates``) at 1.36, which
1.37 keeps for these gates (``pkg/features/versioned_kube_features.go``: device status GA and
locked on, device taints GA and on, list-type attributes still alpha and off).
"""

from __future__ import annotations

from collections.abc import Mapping

#: KEP-5075 consumable capacity: alpha (off) in 1.34, beta (on) from 1.36.
DRA_CONSUMABLE_CAPACITY = "DRAConsumableCapacity"

#: KEP-5055 device taints: alpha (off) from 1.33, beta (on) from 1.36, GA in 1.37.
DRA_DEVICE_TAINTS = "DRADeviceTaints"
#: KEP-4817 ``status.devices``: beta (on) 1.33-1.36, GA (locked on) 1.37.
DRA_RESOURCE_CLAIM_DEVICE_STATUS = "DRAResourceClaimDeviceStatus"
#: Granular status authorization (``resourceclaims/binding``, ``resourceclaims/driver``):
#: beta (on) from 1.36; off stands for a 1.34/1.35 server.
DRA_GRANULAR_STATUS_AUTHZ = "DRAResourceClaimGranularStatusAuthorization"

#: KEP-5491 list-type attribute values (``ints``, ``strings``, ...): alpha (off) in 1.36 and 1.37.
DRA_LIST_TYPE_ATTRIBUTES = "DRAListTypeAttributes"

DEFAULTS: dict[str, bool] = {
    DRA_CONSUMABLE_CAPACITY: True,
    DRA_DEVICE_TAINTS: True,
    DRA_RESOURCE_CLAIM_DEVICE_STATUS: True,
    DRA_GRANULAR_STATUS_AUTHZ: True,
    DRA_LIST_TYPE_ATTRIBUTES: False,
}


class FeatureGates:
    """Known gates with their defaults, overridden by ``overrides``."""

    def __init__(self, overrides: Mapping[str, bool] | None = None) -> None:
        self._enabled = dict(DEFAULTS)
        for name, value in (overrides or {}).items():
            self.set(name, value)

    def set(self, name: str, enabled: bool) -> None:
        """Turn a gate on or off; an unknown name is refused as ``featuregate.SetFromMap`` does."""
        if name not in DEFAULTS:
            raise ValueError(f"unrecognized feature gate: {name}")
        self._enabled[name] = bool(enabled)

    def enabled(self, name: str) -> bool:
        return self._enabled[name]

    def as_dict(self) -> dict[str, bool]:
        return dict(self._enabled)
