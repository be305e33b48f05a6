"""``dracni`` from the source tree with a CPU and an allocation profiler ready: ``make bench``'s
profile mode (``BENCH_ONLY=profile``, ``tests/tools/bench_profile.py``) runs the kubelet plugin
service through it.

The profilers run only between two signals, so that what they report is the burst alone:

- ``SIGUSR1``: start yappi (CPU clock, every thread, the ones started later too);
  again: stop it and write its function statistics to ``$DRACNI_PROFILE_DIR/cpu.pstat``
  (pstats format).
- ``SIGUSR2``: start tracemalloc (25 frames); again: write the allocations made since and
  still alive plus the count of every allocation made meanwhile, per file, to
  ``$DRACNI_PROFILE_DIR/alloc.json``, then stop it.

A file ``done`` beside them says each report is complete.  The service's code is the same
as the frozen bundle's; only the interpreter differs (the virtualenv's).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import tracemalloc
from pathlib import Path
from types import FrameType

import yappi

OUT = Path(os.environ.get("DRACNI_PROFILE_DIR", "."))


class _Toggles:
    def __init__(self) -> None:
        self.cpu = False
        self.alloc: tracemalloc.Snapshot | None = None
        self.lock = threading.Lock()

    def cpu_toggle(self, _signum: int, _frame: FrameType | None) -> None:
        # Work off the signal handler's frame: yappi's stats walk takes a while.
        threading.Thread(target=self._cpu, daemon=True).start()

    def _cpu(self) -> None:
        with self.lock:
            if not self.cpu:
                yappi.clear_stats()
                yappi.set_clock_type("cpu")
                yappi.start(builtins=True, profile_threads=True)
                self.cpu = True
                (OUT / "cpu.started").touch()
                return
            yappi.stop()
            self.cpu = False
            yappi.get_func_stats().save(str(OUT / "cpu.pstat"), type="pstat")
            (OUT / "cpu.done").touch()

    def alloc_toggle(self, _signum: int, _frame: FrameType | None) -> None:
        threading.Thread(target=self._alloc, daemon=True).start()

    def _alloc(self) -> None:
        with self.lock:
            if self.alloc is None:
                tracemalloc.start(25)
                tracemalloc.reset_peak()
                self.alloc = tracemalloc.take_snapshot()
                (OUT / "alloc.started").touch()
                return
            after = tracemalloc.take_snapshot()
            _, peak = tracemalloc.get_traced_memory()
            diff = after.compare_to(self.alloc, "filename")
            tracemalloc.stop()
            self.alloc = None
            report = {
                "peak_bytes": peak,
                "by_file": [
                    {"file": str(d.traceback[0].filename), "size_diff": d.size_diff, "count_diff": d.count_diff}
                    for d in diff
                ],
            }
            (OUT / "alloc.json").write_text(json.dumps(report))
            (OUT / "alloc.done").touch()


def main() -> None:
    toggles = _Toggles()
    signal.signal(signal.SIGUSR1, toggles.cpu_toggle)
    signal.signal(signal.SIGUSR2, toggles.alloc_toggle)
    from dracni.entry import main as dracni_main

    sys.argv[0] = "dracni"
    dracni_main()


if __name__ == "__main__":
    main()
