"""Delegates' VERSION answers, remembered across CNI invocations.

Version negotiation asks every delegate of a chain for its VERSION before the chain runs: an
exec per plugin per ADD, as libcni does.  The answer only changes with the binary, so the
delegate runner (``dracni.cni.delegate``, this cache's only user) keys it by the binary's
identity and keeps it here, in the state dir's ``cache/plugin-versions.json`` (through
``StateDir.read_cache``/``write_cache``: the state dir owns the layout, the lock and the atomic
writes; this module owns what the record means).
"""

from __future__ import annotations

import os

from ..state import records as R

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..state.store import StateDir


class PluginVersionCache:
    """Delegates' VERSION answers, kept in ``cache/plugin-versions.json`` across invocations.

    Keys name a binary's identity (path, inode, mtime, size: the delegate runner builds them,
    the path first, up to a ``|``); entries of binaries that no longer exist are dropped on write.
    """

    NAME = "plugin-versions"

    def __init__(self, state: StateDir) -> None:
        self.state = state
        self._entries: dict[str, list[str]] | None = None

    def get(self, key: str) -> list[str] | None:
        if self._entries is None:
            record = self.state.read_cache(self.NAME)
            self._entries = {k: v for k, v in record.items() if isinstance(v, list)}
        return self._entries.get(key)

    def put(self, key: str, versions: list[str]) -> None:
        """Remember an answer; raises StateError when it cannot be written (a cache: callers may go on)."""
        if self._entries is None:
            self.get(key)
        assert self._entries is not None
        self._entries[key] = versions
        live = {k: v for k, v in self._entries.items() if os.path.exists(k.split("|", 1)[0])}
        self.state.write_cache(self.NAME, {"kind": R.PLUGIN_VERSIONS, **live})
