"""Run the installed executable on the node before the node's CNI configuration may name it.

The bundle that ``dracni install`` copies into the host's CNI bin dir runs *outside* any
container, on the node's own C library and kernel, for every pod of the node.  If it cannot run
there (a C library too old for it, a foreign architecture, a ``noexec`` mount, a damaged copy),
chaining it into the node's conflist would fail every pod's CNI ADD.  So the installer runs the
copy exactly as the container runtime will -- on the host, through the host's root mount
(``chroot``) when it runs in a container -- and only when both answers are right does the link
switch to it and the conflist get written:

- ``CNI_COMMAND=VERSION``: the whole Python bundle starts (the fast path hands VERSION over);
- a pass-through ``ADD`` of a pod without claims: what every pod of the node will run.

A failure raises ``HostCheckError`` with one line naming the cause (for a C library too old,
the version the node has and the one the bundle needs).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import InstallError

#: How long one check may take (the bundle answers in well under a second).
TIMEOUT_SECONDS = 30.0
CHECK_NAME = "dracni-install-check"
#: A state dir that cannot exist: the pass-through ADD reads it and must find nothing.
CHECK_STATE_DIR = "/nonexistent/dracni-install-check"
_PREV_RESULT = {"cniVersion": "1.1.0", "interfaces": [{"name": "eth0"}], "ips": [], "dns": {}}
#: Where a node keeps its C library, relative to its root (Debian/Ubuntu multiarch, RHEL-likes).
_LIBC_PATHS = (
    "lib/x86_64-linux-gnu/libc.so.6",
    "lib/aarch64-linux-gnu/libc.so.6",
    "usr/lib/x86_64-linux-gnu/libc.so.6",
    "usr/lib/aarch64-linux-gnu/libc.so.6",
    "lib64/libc.so.6",
    "usr/lib64/libc.so.6",
    "lib/libc.so.6",
    "usr/lib/libc.so.6",
)
_GLIBC_RELEASE = re.compile(rb"GNU C Library [^\n\0]*? version (\d+\.\d+)")
_GLIBC_NEEDED = re.compile(r"version `(GLIBC_[0-9.]+)' not found")


class HostCheckError(InstallError):
    """The installed executable does not run on this node."""


@dataclass(frozen=True)
class HostCheck:
    """Runs an installed executable on the node whose root is mounted at ``host_root``."""

    host_root: str = "/"

    @property
    def root(self) -> str:
        """The host root, resolved ("/": this process runs on the node itself)."""
        return os.path.realpath(self.host_root)

    def path_on_host(self, path: str) -> str:
        """``path`` (as this process sees it) as the node sees it."""
        root = self.root
        real = os.path.realpath(path)
        if root == "/":
            return real
        if real != root and not real.startswith(root + os.sep):
            raise InstallError(f"{path} is not under the host root {self.host_root}")
        return "/" + os.path.relpath(real, root)

    def run(self, executable: str, bin_dir: str) -> None:
        """Raise HostCheckError unless ``executable`` answers VERSION and a pass-through ADD."""
        exe = self.path_on_host(executable)
        cni_path = self.path_on_host(bin_dir)
        version = self._exec(exe, {"CNI_COMMAND": "VERSION"}, {"cniVersion": "1.1.0"})
        try:
            supported = json.loads(version).get("supportedVersions")
        except (ValueError, AttributeError):
            supported = None
        if not isinstance(supported, list) or "1.1.0" not in supported:
            raise HostCheckError(f"{exe} answered VERSION on this node with {_excerpt(version)}")
        conf = {
            "cniVersion": "1.1.0",
            "name": CHECK_NAME,
            "type": "dracni",
            "stateDir": CHECK_STATE_DIR,
            "prevResult": _PREV_RESULT,
        }
        env = {
            "CNI_COMMAND": "ADD",
            "CNI_CONTAINERID": CHECK_NAME,
            "CNI_NETNS": "/proc/self/ns/net",  # never entered: a pod without claims
            "CNI_IFNAME": "eth0",
            "CNI_PATH": cni_path,
            "CNI_ARGS": f"K8S_POD_UID={CHECK_NAME};K8S_POD_NAMESPACE={CHECK_NAME};K8S_POD_NAME={CHECK_NAME}",
        }
        added = self._exec(exe, env, conf)
        try:
            passed_through = json.loads(added) == _PREV_RESULT
        except ValueError:
            passed_through = False
        if not passed_through:
            raise HostCheckError(f"{exe} answered a pass-through ADD on this node with {_excerpt(added)}")

    def _exec(self, exe: str, env: dict[str, str], stdin: Mapping[str, object]) -> str:
        argv = [exe]
        if self.root != "/":
            chroot = shutil.which("chroot") or "/usr/sbin/chroot"
            argv = [chroot, self.root, exe]
        full_env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", **env}
        try:
            proc = subprocess.run(
                argv,
                input=json.dumps(stdin).encode(),
                env=full_env,
                capture_output=True,
                timeout=TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise HostCheckError(f"{exe} did not answer {env['CNI_COMMAND']} within {TIMEOUT_SECONDS:.0f} s") from None
        except OSError as exc:
            raise HostCheckError(f"cannot run {argv[0]}: {exc.strerror}") from None
        if proc.returncode != 0:
            raise HostCheckError(self._cause(exe, env["CNI_COMMAND"], proc))
        return proc.stdout.decode("utf-8", "replace")

    def _cause(self, exe: str, command: str, proc: subprocess.CompletedProcess[bytes]) -> str:
        stderr = proc.stderr.decode("utf-8", "replace")
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        what = lines[-1] if lines else _excerpt(proc.stdout.decode("utf-8", "replace")) or f"exit {proc.returncode}"
        message = f"{exe} cannot run on this node ({command} failed: {what})"
        needed = _GLIBC_NEEDED.search(stderr)
        if needed:
            have = host_glibc(self.host_root)
            message += f"; this node has glibc {have or 'of an unknown version'}, the bundle needs {needed.group(1)}"
        return message


def host_glibc(root: str) -> str | None:
    """The GNU C library release of the node whose root is ``root`` ("2.31"), else None."""
    for rel in _LIBC_PATHS:
        path = os.path.join(root, rel)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        found = _GLIBC_RELEASE.search(data)
        if found:
            return found.group(1).decode()
    return None


def _excerpt(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return repr(text[:limit] + ("..." if len(text) > limit else ""))
