"""The unix sockets kubelet finds a DRA plugin through (docs/contracts.md section 2).

``<registry_dir>/<driver>-reg.sock`` serves registration, ``<plugins_dir>/<driver>/dra.sock``
the DRA service; both paths must be the same inside the plugin's container and on the host.
With an instance ID (the pod's UID: two instances side by side during a rolling update, as
upstream's ``kubeletplugin.RollingUpdate(podUID)`` names them, kubelet 1.33+) the names are
``<driver>-<uid>-reg.sock`` and ``dra-<uid>.sock``, so neither instance touches the other's.
"""

from __future__ import annotations

import logging
import os
import socket
import time

log = logging.getLogger(__name__)

#: ``sun_path`` holds 108 bytes, the terminating NUL included.
MAX_SOCKET_PATH_BYTES = 107


def plugin_data_dir(plugins_dir: str, driver: str) -> str:
    """The driver's directory under kubelet's plugins dir, shared by its instances."""
    return os.path.join(os.path.abspath(plugins_dir), driver)


def dra_socket_path(plugins_dir: str, driver: str, instance: str | None = None) -> str:
    """The DRA service socket: ``<plugins_dir>/<driver>/dra[-<instance>].sock``, absolute."""
    return os.path.join(plugin_data_dir(plugins_dir, driver), f"dra-{instance}.sock" if instance else "dra.sock")


def registration_socket_path(registry_dir: str, driver: str, instance: str | None = None) -> str:
    """The registration socket: ``<registry_dir>/<driver>[-<instance>]-reg.sock``, absolute."""
    name = f"{driver}-{instance}-reg.sock" if instance else f"{driver}-reg.sock"
    return os.path.join(os.path.abspath(registry_dir), name)


def check_socket_path(path: str, what: str = "socket") -> None:
    """Raise ValueError when ``path`` cannot be a unix socket address."""
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH_BYTES:
        raise ValueError(
            f"{what} path {path!r} is {size} bytes long; a unix socket path must be at most "
            f"{MAX_SOCKET_PATH_BYTES} bytes: use a shorter directory"
        )


def remove_stale_socket(path: str) -> None:
    """Remove what a crashed predecessor left at ``path`` (binding would fail on it)."""
    try:
        os.unlink(path)
        log.info("removed stale socket %s", path)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        raise OSError(f"cannot listen on {path}: it is a directory") from None


def wait_until_serving(path: str, timeout: float) -> None:
    """Return once the server on ``path`` accepts connections (connect() succeeds only on a
    listening socket).  A raw connect: gRPC's channel_ready_future polls in 0.2 s steps."""
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                sock.connect(path)
                return
            except OSError as exc:
                if time.monotonic() >= deadline:
                    raise OSError(
                        f"the DRA server on {path} accepted no connection within {timeout} s: {exc}"
                    ) from None
        time.sleep(0.01)
