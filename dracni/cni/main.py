"""The CNI entry point: env + stdin in, a result or a CNI error JSON out, never a traceback.

This module and what it imports form the hot path of every pod start on the node: keep it to
the standard library and dracni's own small modules (no kubernetes, no grpc, no
logging, no pyroute2 outside CHECK).
"""

from __future__ import annotations

import os
import sys

from .. import jsonio
from . import errors as E
from .errors import CNIError
from .log import log
from .versions import LATEST, SUPPORTED_VERSIONS

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hot path: no typing at run time
    from typing import Any, BinaryIO

    from .request import Request

    JSON = dict[str, Any]


def run(env: dict[str, str] | None = None, stdin: bytes | None = None, out: BinaryIO | None = None) -> int:
    """Serve one CNI command; returns the process exit code."""
    env = dict(os.environ) if env is None else env
    out = out or sys.stdout.buffer
    version = LATEST
    try:
        if stdin is None:
            stdin = sys.stdin.buffer.read()
        from .request import DELEGATE_MARK, parse

        req = parse(env, stdin)
        version = req.cni_version if req.cni_version in SUPPORTED_VERSIONS else LATEST
        if req.command == "VERSION":
            _write(out, {"cniVersion": req.cni_version, "supportedVersions": list(SUPPORTED_VERSIONS)})
            return 0
        if env.get(DELEGATE_MARK):  # before the config's logFile is opened
            raise CNIError(
                E.INVALID_CONFIG,
                "type: dracni cannot be a delegate of dracni (a claim's config names it as a plugin or as "
                "an IPAM); refused so that a claim cannot make dracni recurse or write files of its choosing",
            )
        log.configure(
            req.option("logLevel"), req.option("logFile"), f"{req.command} {req.container_id or '-'} {req.network}: "
        )
        result = _dispatch(req)
        if result is not None:
            _write(out, result)
        return 0
    except CNIError as exc:
        return _fail(out, exc, version)
    except Exception as exc:  # the last line of defence: report, never a traceback on stdout
        err = _classify(exc)
        _log_traceback()
        return _fail(out, err, version)


def _fail(out: BinaryIO, err: CNIError, version: str) -> int:
    try:
        log.error(f"{err.msg} {err.details}".strip())
        _write(out, err.to_dict(version))
    except Exception:  # even the report failed: a fixed, valid error object
        _write(out, {"cniVersion": version, "code": E.INTERNAL, "msg": "internal error while reporting an error"})
    return 1


def _dispatch(req: Request) -> JSON | None:
    from ..state.store import StateDir

    state = StateDir(req.state_dir)
    claim_uids = state.pod_claim_uids(req.pod_uid, req.pod_namespace, req.pod_name) if req.command == "ADD" else []
    if req.command == "ADD" and not claim_uids:
        # Most pods of a node: decided before the plugin's machinery is even imported.
        log.debug("no prepared claims for this pod: pass-through")
        return req.passthrough_result()
    from .delegate import DEFAULT_TIMEOUT, DelegateRunner
    from .plugin import MetaPlugin
    from .versioncache import PluginVersionCache

    runner = DelegateRunner(
        req.path, req.env, PluginVersionCache(state), float(req.option("delegateTimeout", DEFAULT_TIMEOUT))
    )
    plugin = MetaPlugin(req, state, runner)
    if req.command == "ADD":
        return plugin.add(claim_uids)
    if req.command == "DEL":
        plugin.delete()
    elif req.command == "CHECK":
        plugin.check()
    elif req.command == "GC":
        plugin.gc()
    elif req.command == "STATUS":
        plugin.status()
    return None


def _classify(exc: Exception) -> CNIError:
    from ..state.store import StateError

    if isinstance(exc, StateError):
        return CNIError(E.IO_FAILURE, f"state directory: {exc}")
    if isinstance(exc, OSError):
        return CNIError(E.IO_FAILURE, f"I/O error: {exc}")
    return CNIError(E.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")


def _log_traceback() -> None:
    if log.path:
        import traceback

        log.debug("".join(traceback.format_exc()))


def _write(out: BinaryIO, obj: JSON) -> None:
    # ASCII escapes: env values that are not UTF-8 reach messages as lone surrogates.
    out.write(jsonio.dumps(obj, ascii_only=True))
    out.write(b"\n")
    out.flush()
