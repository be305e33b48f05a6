"""Look inside a network namespace with pyroute2 (used by CHECK only: pyroute2 is heavy)."""

from __future__ import annotations

from .errors import UNKNOWN_CONTAINER, CNIError


def missing_interfaces(netns_path: str, names: list[str]) -> list[str]:
    """The names of ``names`` that are not links in the namespace at ``netns_path``."""
    from pyroute2 import NetNS
    from pyroute2.netlink.exceptions import NetlinkError

    try:
        # flags=0: never create the namespace (the default silently does).
        ns = NetNS(netns_path, flags=0)
    except (OSError, NetlinkError) as exc:
        raise CNIError(UNKNOWN_CONTAINER, f"CNI_NETNS {netns_path}: cannot open network namespace: {exc}") from None
    try:
        present = {link.get_attr("IFLA_IFNAME") for link in ns.get_links()}
    finally:
        ns.close()
    return [n for n in names if n not in present]
