"""Node root filesystems of the Debian releases dracni must run on, and a way to run in them.

``node_root(suite)`` makes a minimal root filesystem of that release with Debian's
``debootstrap`` (from Debian's archive, with the release's own CNI plugins and iproute2) and
caches it under ``.cache/rootfs/<suite>/``: about 40 s and 200 MB each, once per machine.

``NodeRoot.run`` runs a command *on that node* the way the container runtime would: chrooted
into the root filesystem, in the test's throwaway "host" network namespace, with ``/proc`` and
the test's network namespaces mounted -- all inside a private mount namespace (``unshare``),
so nothing stays mounted when the command ends, also when a test fails.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.harness import NETNS_RUN, REPO

MIRROR = "http://deb.debian.org/debian"
#: The releases the tests run on, with the C library each has.
SUITES = {"bullseye": "Debian 11, glibc 2.31", "bookworm": "Debian 12, glibc 2.36"}
CACHE = REPO / ".cache" / "rootfs"
_STAMP = ".dracni-rootfs-complete"
_PACKAGES = "containernetworking-plugins,iproute2"
#: What a test changes in a node root; emptied before and after each test.
SCRATCH = ("opt/cni/bin", "etc/cni/net.d", "var/lib/dracni", "var/lib/cni", "run/netns")


def node_root(suite: str) -> Path:
    """The cached root filesystem of ``suite``, made on first use."""
    root = CACHE / suite
    if (root / _STAMP).exists():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test runs build it once
        if (root / _STAMP).exists():
            return root
        tmp = Path(tempfile.mkdtemp(prefix=f".{suite}-", dir=CACHE))
        try:
            proc = subprocess.run(
                ["debootstrap", "--variant=minbase", f"--include={_PACKAGES}", suite, str(tmp), MIRROR],
                capture_output=True,
                timeout=1200,
                check=False,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"debootstrap {suite} failed:\n{proc.stdout.decode()[-3000:]}{proc.stderr.decode()}")
            (tmp / _STAMP).write_text(suite)
            if root.exists():
                shutil.rmtree(root)
            tmp.rename(root)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return root


class NodeRoot:
    """One test's use of a node root filesystem (its scratch dirs emptied before and after)."""

    def __init__(self, suite: str) -> None:
        self.suite = suite
        self.root = node_root(suite)
        self.reset()

    def reset(self) -> None:
        for rel in SCRATCH:
            path = self.root / rel
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True)

    def path(self, rel: str) -> Path:
        """A path of the node as the test (outside the chroot) sees it."""
        return self.root / rel.lstrip("/")

    def run(
        self,
        argv: list[str],
        *,
        netns: str,
        env: dict[str, str] | None = None,
        stdin: bytes | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[bytes]:
        """``argv`` on the node: chrooted, in ``netns`` (a /var/run/netns name), with the
        test's network namespaces at /run/netns inside."""
        script = (
            'set -e; root="$1"; netns="$2"; shift 2; '
            'mount -t proc proc "$root/proc"; '
            f'mount --rbind {NETNS_RUN} "$root/run/netns"; '
            'exec nsenter --net="$netns" chroot "$root" "$@"'
        )
        full_env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **(env or {})}
        return subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(self.root),
             str(NETNS_RUN / netns), *argv],
            input=stdin, env=full_env, capture_output=True, timeout=timeout, check=False,
        )  # fmt: skip

    def cni(self, command: str, conf: dict, *, netns: str, **env: str) -> subprocess.CompletedProcess[bytes]:
        """The runtime's exec of the installed plugin, /opt/cni/bin/dracni."""
        cni_env = {"CNI_COMMAND": command, "CNI_PATH": "/opt/cni/bin:/usr/lib/cni", **env}
        return self.run(["/opt/cni/bin/dracni"], netns=netns, env=cni_env, stdin=json.dumps(conf).encode())

    def close(self) -> None:
        self.reset()


def glibc_of(root: Path) -> str:
    """The C library release of a root filesystem, e.g. "2.31" (what the node tests report)."""
    proc = subprocess.run(["chroot", str(root), "getconf", "GNU_LIBC_VERSION"], capture_output=True, check=True)
    return proc.stdout.decode().split()[-1]


def have_debootstrap() -> str | None:
    """Why the node tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (chroot, mount namespaces)"
    for tool in ("debootstrap", "unshare", "nsenter", "chroot"):
        if shutil.which(tool) is None:
            return f"needs {tool} (make sysdeps installs it)"
    return None
