"""Node installation: put the bundle into the CNI bin dir and chain dracni into the node's conflist.

What it guarantees, and why (the failures Multus users met):

- **No "text file busy", no half-written binary; an exec racing the switch still works;
  idempotent** (``bundle``: content-addressed copies under ``<bin_dir>/.dracni/``, one link
  swapped by rename).
- **No empty or dangling conflist** (``chain``: a separate file that sorts first, generated from
  the primary's, written atomically, removed when the primary is gone; ``watch`` keeps it so).
- **Reversible.**  ``uninstall`` removes exactly what ``install`` created: our conflist first
  (so the runtime stops calling dracni), then the link, then ``.dracni/``.
- **Least privilege.**  It needs write access to the bin dir and the conf dir and nothing
  else; installed files are never group/other-writable, never setuid.

Library only (the click commands live in ``dracni.cli``).
"""

from __future__ import annotations

import os

from ..defaults import CONF_FILE
from .bundle import bundle_hash, install_bundle, remove_bundle, running_bundle_dir
from .chain import check_conf_file, find_primary, remove_chained, render_chained, sync, write_chained
from .errors import InstallError, NoPrimaryError
from .watch import watch

__all__ = [
    "InstallError",
    "NoPrimaryError",
    "bundle_hash",
    "find_primary",
    "install_bundle",
    "remove_chained",
    "render_chained",
    "running_bundle_dir",
    "sync",
    "uninstall",
    "watch",
    "write_chained",
]


def uninstall(bin_dir: str, conf_dir: str, filename: str = CONF_FILE) -> list[str]:
    """Remove our conflist (first: the runtime stops calling dracni), the ``dracni`` link (only
    when it points into ``.dracni/``) and ``<bin_dir>/.dracni/``.  Idempotent; returns the
    paths removed.  The primary's and every other file stay.
    """
    check_conf_file(filename)
    removed = []
    if remove_chained(conf_dir, filename):
        removed.append(os.path.join(conf_dir, filename))
    return removed + remove_bundle(bin_dir)
