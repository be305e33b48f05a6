"""Which devices a pod gets, in which order, under which interface names.

The pod's prepared claims are ordered by namespace/name/uid and their devices by position,
so a DEL without a record plans what the ADD did, as long as the ADD found no name in use (a
name in prevResult or in the pod's netns is skipped by ADD, and DEL without a record cannot
know it was).
"""

from __future__ import annotations

from ..state.facts import claim_ref
from . import errors as E
from .errors import CNIError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..state.facts import ClaimRef
    from ..state.records import DeviceSpec, PreparedClaim

#: Interface names dracni picks for devices without an explicit ifName: net1, net2, ...
AUTO_IFNAME_PREFIX = "net"


class PlannedDevice:
    """One device of the pod, in attach order, with the interface name it gets."""

    __slots__ = ("claim", "driver", "spec", "ifname")

    def __init__(self, claim: ClaimRef, driver: str | None, spec: DeviceSpec) -> None:
        self.claim = claim
        self.driver = driver
        self.spec = spec
        self.ifname = ""

    @property
    def where(self) -> str:
        return f"claim {self.claim['namespace']}/{self.claim['name']} request {self.spec['request']}"


def plan(claims: list[PreparedClaim], primary_ifname: str, in_use: dict[str, str] | None = None) -> list[PlannedDevice]:
    """Order the pod's devices and give each its interface name.

    Claims are ordered by namespace/name/uid and devices by their position in the claim, so a
    DEL without a record plans what the ADD did.  ``in_use`` (name -> where it was seen: the
    chain's prevResult, the pod's netns) holds names that exist before this ADD: automatic
    names skip them and an explicit ifName among them is refused before any delegate runs,
    so a rollback or DEL, which deletes links by name, only ever removes links this
    attachment created.
    """
    devices = []
    for claim in sorted(claims, key=lambda c: (c.get("namespace", ""), c.get("name", ""), c["uid"])):
        ref = claim_ref(claim["uid"], claim.get("namespace", ""), claim.get("name", ""))
        for spec in claim.get("devices", []):
            devices.append(PlannedDevice(ref, claim.get("driver"), spec))
    taken = {primary_ifname: "the runtime's primary interface", **(in_use or {})}
    for d in devices:
        name = d.spec.get("ifName")
        if name:
            if name in taken:
                raise CNIError(E.INVALID_CONFIG, f"ifName: {d.where} asks for {name!r}, already used by {taken[name]}")
            taken[name] = d.where
    n = 0
    for d in devices:
        explicit = d.spec.get("ifName")
        if explicit:
            d.ifname = explicit
            continue
        n += 1
        while f"{AUTO_IFNAME_PREFIX}{n}" in taken:
            n += 1
        d.ifname = f"{AUTO_IFNAME_PREFIX}{n}"
    return devices
