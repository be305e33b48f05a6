"""What a process costs, read from /proc, and how fast this machine is right now: the
figures ``make bench`` (h) and its profile mode put beside their timings."""

from __future__ import annotations

import os
import time


def rss_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process, in MiB."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def cpu_ms(pid: int) -> float:
    """User + system CPU time of a process so far, in ms."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def context_switches(pid: int) -> tuple[int, int]:
    """Voluntary and involuntary context switches of all a process's threads so far (a thread
    that has ended no longer counts: read it across a span its threads outlive)."""
    voluntary = involuntary = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        voluntary += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches:"):
                        involuntary += int(line.split()[1])
        except OSError:  # the thread ended meanwhile
            continue
    return voluntary, involuntary


def reference_loop_ms() -> float:
    """The fastest of three runs of a fixed pure-Python loop, in ms of CPU: how fast this
    machine is right now (a shared VM's speed wanders)."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        total = 0
        for i in range(3_000_000):
            total += i * i % 7
        best = min(best, (time.process_time() - started) * 1000)
    return best
