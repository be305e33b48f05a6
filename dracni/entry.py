"""The one entry point of the frozen bundle.

Invoked by a container runtime (``CNI_COMMAND`` set, no arguments) it is the CNI plugin and
takes the fast path; with arguments it is the operator CLI (``dracni prepare``, ``inspect``,
``kubelet-plugin``, ...).
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    if len(sys.argv) <= 1 and "CNI_COMMAND" in os.environ:
        from dracni.cni.main import run

        sys.exit(run())
    from dracni.cli import main as cli_main

    cli_main(prog_name="dracni")  # whatever argv[0] is: the native dracni execs dracni-python


if __name__ == "__main__":
    main()
