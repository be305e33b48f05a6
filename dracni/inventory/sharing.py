"""How each NIC is offered: to one claim at a time, or to many (KEP-5075 consumable capacity).

macvlan, ipvlan and VLAN exist so that many pods share a parent, so a NIC can be offered as

- ``exclusive``: one device, allocated to one claim at a time (what host-device passthrough
  needs: the whole NIC moves into the pod);
- ``shared``: one device with ``allowMultipleAllocations: true`` and a capacity counting
  attachments (``<driver>/attachments``), whose request policy makes a plain request consume
  one; every allocation gets its own ``shareID``.  Needs the API server's feature gate
  ``DRAConsumableCapacity`` (beta, on, from 1.36; alpha in 1.34);
- ``slots``: N devices per NIC (``<nic>-slot-<i>``), each an ordinary device with an attribute
  naming its parent: many pods per NIC on any cluster, without the feature.

The administrator picks a mode per NIC by name glob (``--nic-sharing GLOB=MODE``, first match
wins); every other NIC is ``shared``, which falls back to ``slots`` when the API server turns
out to drop ``allowMultipleAllocations`` (the publisher notices, docs/architecture.md).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass

EXCLUSIVE = "exclusive"
SHARED = "shared"
SLOTS = "slots"
MODES = (EXCLUSIVE, SHARED, SLOTS)

DEFAULT_SLOTS = 16
DEFAULT_MAX_ATTACHMENTS = 64
MAX_SLOTS = 128  # a slice holds at most 128 devices


@dataclass(frozen=True)
class SharingRule:
    pattern: str
    mode: str


@dataclass(frozen=True)
class Sharing:
    """The administrator's sharing settings for the node's NICs."""

    rules: tuple[SharingRule, ...] = ()
    default: str = SHARED
    slots: int = DEFAULT_SLOTS
    max_attachments: int = DEFAULT_MAX_ATTACHMENTS

    def mode(self, nic_name: str) -> str:
        for rule in self.rules:
            if fnmatch.fnmatchcase(nic_name, rule.pattern):
                return rule.mode
        return self.default

    def without_consumable_capacity(self) -> Sharing:
        """The same, with every ``shared`` NIC offered as slots (the API server lacks the gate)."""
        rules = tuple(SharingRule(r.pattern, SLOTS if r.mode == SHARED else r.mode) for r in self.rules)
        default = SLOTS if self.default == SHARED else self.default
        return Sharing(rules, default, self.slots, self.max_attachments)


def parse_sharing(
    specs: Iterable[str], *, slots: int = DEFAULT_SLOTS, max_attachments: int = DEFAULT_MAX_ATTACHMENTS
) -> Sharing:
    """``GLOB=MODE`` rules (``eth2=exclusive``, ``ens*=slots``); ValueError names a bad one."""
    rules = []
    for spec in specs:
        pattern, sep, mode = spec.partition("=")
        if not sep or not pattern or mode not in MODES:
            raise ValueError(f"--nic-sharing {spec!r}: write GLOB=MODE with MODE one of {', '.join(MODES)}")
        rules.append(SharingRule(pattern, mode))
    if not 1 <= slots <= MAX_SLOTS:
        raise ValueError(f"--nic-slots {slots}: must be between 1 and {MAX_SLOTS}")
    if max_attachments < 1:
        raise ValueError(f"--max-attachments {max_attachments}: must be at least 1")
    return Sharing(tuple(rules), SHARED, slots, max_attachments)
