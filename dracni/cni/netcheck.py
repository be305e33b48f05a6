"""Look inside a network namespace: pyroute2 for CHECK (heavy), a plain name listing for ADD."""

from __future__ import annotations

import os

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


_CLONE_NEWNET = 0x40000000  # <linux/sched.h>


def link_names(netns_path: str) -> set[str] | None:
    """The names of the links in the namespace at ``netns_path``; None when it cannot be read.

    A short-lived thread enters the namespace (``setns`` affects the calling thread only) and
    lists the links with ``if_nameindex``, whose netlink socket lives in that namespace: cheap
    enough for every ADD with claims, unlike pyroute2.  The thread and the listing come from
    ``_thread`` and ``_socket``, the C modules under ``threading`` and ``socket``: those two
    cost ~4 ms of imports (``socket`` turns its constants into enums) for one call each.
    """
    import _socket
    import _thread
    import ctypes  # deferred: only an ADD with claims pays for these

    found: list[set[str] | None] = [None]
    done = _thread.allocate_lock()
    done.acquire()

    def look() -> None:
        try:
            fd = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(fd, _CLONE_NEWNET) != 0:
                return
            found[0] = {name for _, name in _socket.if_nameindex()}
        except (OSError, AttributeError):
            return
        finally:
            os.close(fd)

    def worker() -> None:
        try:
            look()
        finally:
            done.release()  # the thread, in the pod's netns, ends right after: never reused

    _thread.start_new_thread(worker, ())
    done.acquire()
    return found[0]
