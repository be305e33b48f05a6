"""The service's threads on one CPU (``--pin-cpu``, on by default).

Why.  The interpreter runs one thread at a time: a thread holds its lock (the GIL) and lets
it go around every system call, waking a thread waiting for it.  When the waiting thread
sleeps on another CPU, every such hand-over is a wake-up there (an inter-processor interrupt;
on a VM, an exit to the hypervisor) and a context switch on each side, and the thread that let
go waits in its turn once its system call returns.  In a burst of pod starts most of the
service's threads want the lock, and the hand-overs cost a good part of its CPU: 13% was
``futex`` in the kernel (``perf`` over (h)'s bursts), besides the switches they cause.  On
one CPU a woken thread waits for the CPU, and the thread whose system call returns takes the
lock back at once.

Measured in ``make bench`` (h), 100 pods x 2 claims at once, the same bundle with and without
the pin, two interleaved rounds on a 2-core VM: CPU per claim 1.60 / 1.70 ms against 1.95 /
2.15, the burst's prepare p99 358 / 370 ms against 424 / 494 (11.3 / 11.8x one pod alone
against 13.7 / 14.8x), its unprepare p99 143 / 128 against 158 / 167 ms; with an address pool
2.70 / 2.65 ms against 3.10 / 3.05, p99 727 / 656 against 870 / 821 ms.  A busy loop on the
pinned CPU beside it did not turn this around (in an ad-hoc run: CPU per claim 1.30-1.80 ms
and p99 370-490 ms pinned, 1.90-2.70 ms and 485-610 ms not).

What it costs: the kernel no longer moves the service to an idle CPU when its own is busy.
Its Python never runs on two CPUs at once anyway; what the pin takes is the C work that could
run beside it (TLS, the HTTP and gRPC libraries' own threads), about a tenth of its CPU.
``--no-pin-cpu`` leaves the threads where the kernel puts them.

Which CPU: the one the kernel runs the service on as it starts, among those it may use (its
cpuset).  The pin is a preference, never a trap: if the cpuset later drops that CPU (kubelet's
CPU manager giving it to a pod as an exclusive CPU), the kernel moves the threads to the
cpuset's other CPUs (before Linux 6.2, any change of the cpuset unpins them).  The service
starts no other program, so nothing else inherits the pin.
"""

from __future__ import annotations

import errno
import os

#: The start-up log's line with ``--no-pin-cpu``.
NOT_PINNED = "threads on any CPU the kernel chooses (--no-pin-cpu)"


def pin_to_one_cpu() -> str:
    """Run every thread of this process, and those it starts later, on one CPU; what was done,
    for the start-up log.  Call it before the service starts its threads: a thread takes the
    CPUs of the thread that starts it, and a thread that runs meanwhile keeps its own."""
    try:
        allowed = os.sched_getaffinity(0)
    except OSError as exc:
        return f"threads not pinned to a CPU: cannot read the CPUs this process may use: {exc}"
    if len(allowed) < 2:
        return f"threads on CPU {_cpu_list(allowed)}, the one CPU this process may use"
    cpu = _current_cpu()
    if cpu not in allowed:
        cpu = min(allowed)
    failed = []
    for tid in _thread_ids():
        try:
            os.sched_setaffinity(tid, {cpu})
        except OSError as exc:  # a thread that ended meanwhile (ESRCH) needs no pin
            if exc.errno != errno.ESRCH:
                failed.append(f"thread {tid}: {exc}")
    if failed:
        return f"threads not all pinned to CPU {cpu}: {'; '.join(failed)}"
    return (
        f"threads pinned to CPU {cpu} of {_cpu_list(allowed)} "
        "(the interpreter runs one at a time; --no-pin-cpu: any CPU)"
    )


def _current_cpu() -> int:
    """The CPU this thread ran on last (``/proc/thread-self/stat``'s 39th field); -1 if unknown."""
    try:
        with open("/proc/thread-self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()  # after the name, which may hold anything
        return int(fields[36])
    except (OSError, IndexError, ValueError):
        return -1


def _thread_ids() -> list[int]:
    try:
        return [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        return [0]  # no /proc: this thread (start-up has started no other)


def _cpu_list(cpus: set[int]) -> str:
    """``{0, 1, 2, 5}`` -> ``0-2,5``, as the kernel writes CPU lists."""
    ranges: list[list[int]] = []
    for cpu in sorted(cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)
