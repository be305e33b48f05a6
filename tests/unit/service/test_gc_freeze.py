"""The service leaves start-up's objects out of later collections, having collected first.

Run in a child interpreter: freezing the test process's objects would change every test after.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.harness import REPO


def test_start_up_s_objects_are_frozen_after_its_cycles_are_collected() -> None:
    script = textwrap.dedent(
        """
        import gc, weakref

        class Node:
            pass

        cycle = Node()
        cycle.me = cycle
        gone = weakref.ref(cycle)
        del cycle
        kept = [Node() for _ in range(100)]

        from dracni.service.main import freeze_startup_objects

        freeze_startup_objects()
        assert gone() is None, "a cycle start-up left must be collected, not frozen forever"
        assert gc.get_freeze_count() > len(kept), gc.get_freeze_count()
        assert gc.get_count()[0] < 100, gc.get_count()
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
