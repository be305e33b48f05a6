"""Node installation (the library behind ``dracni install`` and ``dracni uninstall``)."""

from __future__ import annotations

from .bundle import (InstallError, NoPrimaryError, bundle_hash, find_primary, install_bundle, render_chained,
                     running_bundle_dir, sync, uninstall, watch, write_chained)

__all__ = ["InstallError", "NoPrimaryError", "bundle_hash", "find_primary", "install_bundle", "render_chained",
           "running_bundle_dir", "sync", "uninstall", "watch", "write_chained"]
