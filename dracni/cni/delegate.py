"""Invoke delegate CNI plugins the way libcni's ``pkg/invoke`` does: find, negotiate, exec.

Find ``<type>`` as a regular executable file in the ``CNI_PATH`` directories (``FindInPath``),
ask it for its VERSION and pick the version both sides speak (``GetVersionInfo``, cached per
binary), and run one command (``ExecPluginWithResult``): the caller's environment overridden
with the call's ``CNI_*`` variables (``Args.AsEnv``, from a whole ``RuntimeConf``), its config
on stdin, its result or CNI error read from stdout and mapped to a ``CNIError``.  Starting,
feeding, timing out and reaping the process is ``dracni.cni.process``'s job (``RawExec``);
remembering VERSION answers across invocations, ``dracni.cni.versioncache``'s; what runs in
which order (a conflist), ``dracni.cni.conflist``'s.
"""

from __future__ import annotations

import os
import sys
import time

from .. import jsonio
from . import errors as E
from . import process
from .errors import CNIError
from .log import log
from .request import DELEGATE_MARK
from .versions import LATEST, best_common_version

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .versioncache import PluginVersionCache

DEFAULT_TIMEOUT = 120.0


class RuntimeConf:
    """Where a delegate runs (libcni's ``RuntimeConf``): the container, its netns, the interface
    name, and ``CNI_ARGS`` (None: the caller's own, inherited; ``""``: none at all).

    Passed whole from the chain layer down to the exec, which turns it into the delegate's
    environment (``as_env``, libcni's ``invoke.Args.AsEnv``): the call sites never unpack it.
    """

    __slots__ = ("args", "container_id", "ifname", "netns")

    def __init__(self, container_id: str, netns: str, ifname: str, args: str | None = None) -> None:
        self.container_id = container_id
        self.netns = netns
        self.ifname = ifname
        self.args = args

    def as_env(self, command: str, path: list[str]) -> dict[str, str]:
        """The variables a delegate's call sets over the caller's environment."""
        env = {
            # Who runs it, for which container: inherited by whatever the delegate starts
            # (an IPAM plugin), so a later DEL finds an interrupted ADD's processes.
            DELEGATE_MARK: f"{os.getpid()}/{self.container_id}",
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": self.container_id,
            "CNI_NETNS": self.netns,
            "CNI_IFNAME": self.ifname,
            "CNI_PATH": ":".join(path),
        }
        if self.args is not None:
            env["CNI_ARGS"] = self.args
        return env


#: Calls about a plugin rather than a container (VERSION, GC): as libcni sends them, no
#: per-container variables and an empty CNI_ARGS.
NO_CONTAINER = RuntimeConf("", "", "", "")


class DelegateRunner:
    """Executes delegate plugins for one CNI invocation (libcni's ``CNIConfig``: the
    ``CNI_PATH`` to search, the caller's environment, and how long a delegate may take).

    ``versions`` remembers delegates' VERSION answers across invocations (``get(key)`` and
    ``put(key, versions)``, e.g. ``dracni.cni.versioncache.PluginVersionCache``); without it
    every negotiation execs VERSION.
    """

    def __init__(
        self,
        path: list[str],
        base_env: dict[str, str],
        versions: PluginVersionCache | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.path = path
        self.base_env = runtime_env(base_env, getattr(sys, "_MEIPASS", None))
        self.versions = versions
        self.timeout = timeout
        self._answers: dict[str, list[str]] = {}  # binary identity -> versions, this invocation
        self._found: dict[str, str] = {}  # type -> path, for this invocation (ADD looks each up twice)

    # -- lookup ---------------------------------------------------------------------------
    def find(self, plugin_type: object, field: str = "type") -> str:
        if not isinstance(plugin_type, str) or not plugin_type:
            raise CNIError(E.INVALID_CONFIG, f"{field}: delegate plugin type must be a non-empty string")
        if "/" in plugin_type or plugin_type in (".", ".."):
            raise CNIError(E.INVALID_CONFIG, f"{field}: delegate plugin type {plugin_type!r} must not contain '/'")
        if plugin_type in self._found:
            return self._found[plugin_type]
        for directory in self.path:
            candidate = os.path.join(directory, plugin_type)
            try:
                st = os.stat(candidate)
            except OSError:
                continue
            if (st.st_mode & 0o170000) == 0o100000 and os.access(candidate, os.X_OK):
                self._found[plugin_type] = candidate
                return candidate
        raise CNIError(
            E.INVALID_CONFIG, f"{field}: failed to find plugin {plugin_type!r} in CNI_PATH {':'.join(self.path)!r}"
        )

    # -- version negotiation ----------------------------------------------------------------
    def supported_versions(self, binary: str) -> list[str]:
        """The delegate's VERSION answer, cached per binary identity."""
        st = os.stat(binary)
        key = f"{os.path.realpath(binary)}|{st.st_ino}|{st.st_mtime_ns}|{st.st_size}"
        cached = self._answers.get(key)
        if cached is None and self.versions is not None:
            cached = self.versions.get(key)
        if cached is not None:
            self._answers[key] = cached
            return cached
        answer = self.exec(binary, "VERSION", {"cniVersion": LATEST}, NO_CONTAINER)
        versions = answer.get("supportedVersions") if answer else None
        if not isinstance(versions, list):
            raise CNIError(E.INVALID_CONFIG, f"delegate {binary} gave no supportedVersions in its VERSION answer")
        answer_versions = [v for v in versions if isinstance(v, str)]
        self._answers[key] = answer_versions
        if self.versions is not None:
            try:
                self.versions.put(key, answer_versions)
            except Exception as exc:  # a cache: losing it only costs an exec next time
                log.warning(f"cannot cache plugin versions: {exc}")
        return answer_versions

    def negotiate(self, binary: str, cap: str, field: str) -> str:
        theirs = self.supported_versions(binary)
        version = best_common_version(theirs, cap)
        if version is None:
            raise CNIError(
                E.INCOMPATIBLE_VERSION,
                f"{field}: delegate {os.path.basename(binary)} speaks none of the versions up to {cap}",
                f"it supports {', '.join(theirs) or 'nothing'}",
            )
        return version

    # -- exec -----------------------------------------------------------------------------
    def delegate(
        self, plugin_type: object, command: str, conf: dict[str, Any], rt: RuntimeConf, field: str = "type"
    ) -> dict[str, Any] | None:
        """Find ``plugin_type`` in ``CNI_PATH`` and run one command of it (libcni's
        ``invoke.DelegateAdd``/``DelegateDel``/...)."""
        return self.exec(self.find(plugin_type, field), command, conf, rt)

    def exec(self, binary: str, command: str, conf: dict[str, Any], rt: RuntimeConf) -> dict[str, Any] | None:
        """Run one delegate command; return its decoded stdout (None when empty)."""
        env = dict(self.base_env)
        env.update(rt.as_env(command, self.path))
        stdin = jsonio.dumps(conf)
        name = os.path.basename(binary)
        started = time.monotonic()
        try:
            proc = process.start(binary, env)
        except OSError as exc:
            raise CNIError(E.IO_FAILURE, f"cannot execute delegate {binary}: {exc.strerror}") from None
        try:
            returncode, stdout, stderr = proc.run(stdin, self.timeout)
        except process.Timeout:
            raise CNIError(
                E.TRY_AGAIN_LATER, f"delegate {name} {command} did not finish within {self.timeout:g}s"
            ) from None
        elapsed = (time.monotonic() - started) * 1000
        if stderr:
            log.debug(f"delegate {name} {command} stderr: {stderr.decode('utf-8', 'replace').strip()}")
        log.debug(f"delegate {name} {command} ifname={rt.ifname} exit={returncode} in {elapsed:.1f}ms")
        out = stdout.strip()
        if returncode != 0:
            raise _delegate_error(name, command, out, stderr, returncode)
        if not out:
            return None
        try:
            return jsonio.loads_object(out, f"the output of delegate {name} {command}")
        except ValueError as exc:
            raise CNIError(E.DECODE_FAILURE, str(exc)) from None


def runtime_env(env: dict[str, str], bundle_libs: str | None = None) -> dict[str, str]:
    """``env`` without what the frozen bundle's bootloader added to it, for the delegates.

    PyInstaller's bootloader (``pyi_main.c``) adds ``_PYI_*`` variables and, when it restarts
    itself (run directly, not through the native ``dracni``'s exec on the bundle's own loader),
    points ``LD_LIBRARY_PATH`` at ``bundle_libs`` (the bundle's ``_internal/``, ``sys._MEIPASS``),
    keeping a value the runtime set in ``LD_LIBRARY_PATH_ORIG``
    (``pyi_utils_set_library_search_path``).  A dynamically linked delegate would load the
    bundle's copies of libcrypto, libz, libffi, ... instead of its own, and a delegate that is
    itself a PyInstaller application would take itself for a subprocess of dracni.  So the
    ``_PYI_*`` variables go and ``LD_LIBRARY_PATH`` is the runtime's again (PyInstaller's
    documented remedy); a value the bootloader did not make stays.  Outside a bundle (no
    ``_PYI_`` variable) ``env`` is returned as it is.
    """
    if not any(key.startswith("_PYI_") for key in env):
        return env
    cleaned = {k: v for k, v in env.items() if not k.startswith("_PYI_") and k != "LD_LIBRARY_PATH_ORIG"}
    if "LD_LIBRARY_PATH_ORIG" in env:
        cleaned["LD_LIBRARY_PATH"] = env["LD_LIBRARY_PATH_ORIG"]
    elif bundle_libs is not None and env.get("LD_LIBRARY_PATH") == bundle_libs:
        del cleaned["LD_LIBRARY_PATH"]  # the runtime set none
    return cleaned


def _delegate_error(name: str, command: str, out: bytes, stderr: bytes, rc: int) -> CNIError:
    try:
        data = jsonio.loads(out) if out else None
    except ValueError:
        data = None
    if isinstance(data, dict) and ("msg" in data or "code" in data):
        err = CNIError.from_dict(data)
        return CNIError(err.code, f"delegate {name} {command} failed: {err.msg}", err.details)
    tail = (stderr or out).decode("utf-8", "replace").strip()[-500:]
    return CNIError(E.DELEGATE_FAILED, f"delegate {name} {command} failed with exit code {rc}", tail)
