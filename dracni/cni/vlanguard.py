"""ADD's VLAN check (rule sharedParent): a ``vlan`` delegate never joins a VLAN already in use on its parent.

The kernel allows one VLAN device per VLAN ID on a parent (net/8021q ``vlan_check_real_dev`` ->
``vlan_find_dev``: EEXIST), and it keeps counting that device against the parent after it moved
into a pod's netns.  Without this check a second ``vlan`` delegate on the same ``master`` and
``vlanId`` fails with the kernel's bare "file exists" after the delegate ran, and a tenant who
picks a VLAN ID the node uses for another network would join that network if the ID were free.
So before the device's delegates run, each vlan delegate (master P, vlanId X) is refused when
the node's netns has a VLAN link X on P (``/proc/net/vlan/config``, present while 8021q is
loaded) or another live dracni attachment runs a vlan X on P (its record names its delegates;
a rolled-back ``failed`` one holds nothing).  Imports only C modules (hot path).
"""

from __future__ import annotations

from . import errors as E
from .errors import CNIError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..state.records import AttachedDevice, Attachment, Delegate
    from ..state.store import StateDir

#: The node netns' VLAN devices, ``name | VID | parent`` after two header lines (net/8021q/vlanproc.c).
VLAN_TABLE = "/proc/net/vlan/config"
WHY = (
    "rule sharedParent: the kernel allows one VLAN device per VLAN ID on a parent, and a VLAN the node "
    "or another attachment uses on it is that network's, not this claim's; choose another vlanId"
)


def wanted_vlans(delegates: list[Delegate]) -> list[tuple[int, str, int]]:
    """``(plugin index, master, vlanId)`` of each vlan delegate whose parent is a node link
    (``linkInContainer`` puts the parent in the pod's netns, out of the node's reach)."""
    out = []
    for index, delegate in enumerate(delegates):
        conf = delegate["config"]
        if (delegate.get("type") or conf.get("type")) != "vlan" or conf.get("linkInContainer"):
            continue
        master, vid = conf.get("master"), conf.get("vlanId")
        if isinstance(master, str) and master and isinstance(vid, int) and not isinstance(vid, bool):
            out.append((index, master, vid))
    return out


def check_vlans(state: StateDir, record: Attachment, dev: AttachedDevice) -> None:
    """Refuse ``dev`` (CNIError INVALID_CONFIG naming the rule) when a VLAN it makes is in use."""
    wanted = wanted_vlans(dev["delegates"])
    if not wanted:
        return
    users = _node_vlans()
    key = (record["network"], record["containerID"], record["ifName"])
    for other in state.list_attachments(bad=[]):
        if other.get("state") == "failed":  # rolled back: its interfaces are gone
            continue
        if (other.get("network"), other.get("containerID"), other.get("ifName")) == key:
            continue
        for device in other.get("devices") or []:
            who = f"container {other.get('containerID')}'s interface {device.get('ifName')} (another dracni attachment)"
            for _, master, vid in wanted_vlans(device.get("delegates") or []):
                users.setdefault((master, vid), who)
    for index, master, vid in wanted:
        owner = users.get((master, vid))
        if owner is not None:
            raise CNIError(
                E.INVALID_CONFIG,
                f"config.plugins[{index}].vlanId: VLAN {vid} on parent {master} is in use by {owner} ({WHY})",
            )


def _node_vlans(table_path: str = VLAN_TABLE) -> dict[tuple[str, int], str]:
    """``(parent, VID) -> who`` for the VLAN links of this netns; none when 8021q is not loaded."""
    try:
        with open(table_path, encoding="ascii", errors="replace") as table:
            lines = table.read().splitlines()[2:]
    except OSError:
        return {}
    out = {}
    for line in lines:
        cols = [c.strip() for c in line.split("|")]
        if len(cols) == 3 and cols[1].isdigit():
            out[(cols[2], int(cols[1]))] = f"the node's link {cols[0]}"
    return out
