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
        _cni()
    from dracni.cli import main as cli_main

    cli_main(prog_name="dracni")  # whatever argv[0] is: the native dracni execs dracni-python


def _cni() -> None:
    """One CNI command, then out without the interpreter's teardown.

    A CNI exec lives for a few milliseconds and allocates little: the cyclic garbage collector
    (which runs a few times while the plugin's modules are imported, and once more at exit)
    and the interpreter's finalization (module and object destruction) are ~3 ms of each
    exec spent on memory the kernel reclaims anyway.  Nothing the plugin does needs them: it
    writes its records and log lines with unbuffered os calls, joins the one thread it may
    start, and registers no atexit handler.  What an exit would still do is flush stdout and
    stderr; done here, with Python's own exit status 120 when that fails.
    """
    import gc

    gc.disable()
    from dracni.cni.main import run

    code = run()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # as Py_FinalizeEx's flush_std_files: exit status 120
            code = 120
    os._exit(code)


if __name__ == "__main__":
    main()
