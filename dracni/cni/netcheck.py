"""Look inside a network namespace: pyroute2 for CHECK (heavy), a plain name listing for ADD."""

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


def link_names(netns_path: str) -> set[str] | None:
    """The names of the links in the namespace at ``netns_path``; None when it cannot be read.

    A short-lived thread enters the namespace (``netns.in_netns``) and lists the links with
    ``if_nameindex``, whose netlink socket lives in that namespace: cheap enough for every ADD
    with claims, unlike pyroute2.  The listing comes from ``_socket``, the C module under
    ``socket``, which would cost ~4 ms of imports (it turns its constants into enums).
    """
    import _socket

    from ..netns import in_netns

    try:
        return in_netns(netns_path, lambda: {name for _, name in _socket.if_nameindex()})
    except (OSError, AttributeError):
        return None
