"""Run one plugin process: libcni's ``pkg/invoke`` ``RawExec`` counterpart.

``start`` forks and execs a binary with a given environment, retrying the exec on "text file
busy" (an installer replacing the binary) as ``RawExec.ExecPlugin`` does; ``Child.run`` writes
its stdin, reads its stdout and stderr, and reaps it.  What a CNI call means (the ``CNI_*``
variables, the config, the result or error on stdout) is ``dracni.cni.delegate``'s business;
this module knows processes only.  A process started here runs in its own process group (a
timeout kills the group) and, on Linux, dies with dracni (``PR_SET_PDEATHSIG``): the runtime may
SIGKILL dracni at its CNI timeout, and a delegate left running would finish after the rollback
or the runtime's DEL and leak what it allocated.  What escapes that (a delegate's own IPAM
child) is found again by ``kill_leftovers``.  ctypes, select and fcntl are imported only once a
process runs: the pass-through never pays for them.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal's C half: signal itself imports enum
import errno
import os
import time

from .request import DELEGATE_MARK

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_ETXTBSY_RETRIES = 5
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_SIGKILL = 9  # without importing signal
_prctl: Any = None  # libc's prctl once looked up; False where there is none (not Linux)


class Timeout(Exception):
    """The process outlived its timeout (``subprocess.TimeoutExpired``)."""


def start(binary: str, env: dict[str, str]) -> Child:
    """Exec ``binary`` (argv ``[binary]``) with exactly ``env`` in its own process group, dying
    with this process where the kernel allows; ``OSError`` when it cannot be executed (after
    the ETXTBSY retries).  ``Child.run`` then feeds, reads and reaps it."""
    in_child = _die_with(os.getpid())
    attempt = 0
    while True:
        try:
            # Its own process group: a timeout ends the process and everything it started.
            # And it dies with dracni (in_child, between fork and exec), when it can.
            return Child.start(binary, env, in_child)
        except OSError as exc:
            if exc.errno != errno.ETXTBSY or attempt == _ETXTBSY_RETRIES:
                raise
            attempt += 1
            time.sleep(0.05 * attempt)


#: What ``close_fds`` closes up to (``subprocess``'s ``_MAXFD``).
try:
    _MAXFD = os.sysconf("SC_OPEN_MAX")
except (OSError, ValueError):
    _MAXFD = 256
_READ_SIZE = 32768


class Child:
    """One plugin process with pipes to its stdin, stdout and stderr.

    What ``subprocess.Popen([binary], stdin=PIPE, stdout=PIPE, stderr=PIPE, env=env,
    close_fds=True, process_group=0, preexec_fn=in_child)`` and ``communicate(input, timeout)``
    did, on ``os.fork``/``os.execve``/``select.poll``: ``subprocess`` costs ~9 ms of imports
    (``signal``, ``locale``, ``selectors``, ``threading``, ``contextlib`` and through them
    ``enum``, ``re``, ``functools``, ``collections``), more than the rest of the ADD path's
    Python.  As ``subprocess`` does: the child dups the pipes onto 0, 1 and 2, resets SIGPIPE
    and SIGXFSZ (Python ignores them) to their defaults, joins its own process group, runs
    ``in_child``, closes every other inherited descriptor and execs; an exec that fails is
    reported through a close-on-exec pipe and raised in the parent as ``OSError`` (with its
    errno: ETXTBSY is retried by the caller).
    """

    __slots__ = ("pid", "stdin", "stdout", "stderr", "returncode")

    def __init__(self, pid: int, stdin: int, stdout: int, stderr: int) -> None:
        self.pid = pid
        self.stdin: int | None = stdin
        self.stdout: int | None = stdout
        self.stderr: int | None = stderr
        self.returncode: int | None = None

    @classmethod
    def start(cls, binary: str, env: dict[str, str], in_child: Callable[[], None] | None) -> Child:
        for key, value in env.items():  # what Popen refuses before it forks
            if "=" in key or "\0" in key or "\0" in value:
                raise ValueError(f"illegal environment variable {key!r}")
        ours: list[int] = []  # every descriptor made here, closed on failure
        try:
            in_r, in_w = _pipe(ours)
            out_r, out_w = _pipe(ours)
            err_r, err_w = _pipe(ours)
            exec_r, exec_w = _pipe(ours)  # close-on-exec: EOF when the exec succeeded
            pid = os.fork()
            if pid == 0:
                _exec_child(binary, env, in_child, (in_r, out_w, err_w), exec_w)  # never returns
            for fd in (in_r, out_w, err_w, exec_w):
                os.close(fd)
                ours.remove(fd)
            report = b""
            while chunk := os.read(exec_r, 64):
                report += chunk
            os.close(exec_r)
            ours.remove(exec_r)
            if report:  # the exec failed: the child has exited
                os.waitpid(pid, 0)
                code = int(report) if report.isdigit() else 0
                raise OSError(code, os.strerror(code) if code else "the child failed before exec", binary)
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        return cls(pid, in_w, out_r, err_r)

    def communicate(self, data: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        """Write ``data`` to its stdin, read its stdout and stderr to EOF, reap it: its exit code
        (minus the signal that killed it), stdout and stderr.  ``Timeout`` when that takes
        longer than ``timeout`` seconds (the process is left as it is)."""
        import select

        deadline = time.monotonic() + timeout
        out: dict[int, list[bytes]] = {}
        poller = select.poll()
        view = memoryview(data)
        if self.stdin is not None:
            if view:
                os.set_blocking(self.stdin, False)
                poller.register(self.stdin, select.POLLOUT)
            else:
                self._close("stdin")
        for fd in (self.stdout, self.stderr):
            assert fd is not None
            out[fd] = []
            poller.register(fd, select.POLLIN | select.POLLPRI)
        open_fds = len(out) + (1 if self.stdin is not None else 0)
        while open_fds:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Timeout
            for fd, _events in poller.poll(remaining * 1000):
                if fd == self.stdin:
                    try:
                        view = view[os.write(fd, view) :]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:  # it exited or closed its stdin: as communicate()
                        view = view[:0]
                    if not view:
                        poller.unregister(fd)
                        self._close("stdin")
                        open_fds -= 1
                    continue
                chunk = os.read(fd, _READ_SIZE)
                if chunk:
                    out[fd].append(chunk)
                else:
                    poller.unregister(fd)
                    open_fds -= 1
        stdout = b"".join(out[self.stdout])  # type: ignore[index]
        stderr = b"".join(out[self.stderr])  # type: ignore[index]
        self._close("stdout")
        self._close("stderr")
        return self._wait(deadline), stdout, stderr

    def _wait(self, deadline: float) -> int:
        """Reap the process by ``deadline`` (``Popen.wait(timeout)``'s polling), else ``Timeout``."""
        delay = 0.0005
        while True:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                return self.returncode
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Timeout
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.05)

    def run(self, data: bytes, timeout: float) -> tuple[int, bytes, bytes]:
        """``communicate``, but a process that outlives ``timeout`` is ended with everything it
        started (``kill_group``) before ``Timeout`` is raised."""
        try:
            return self.communicate(data, timeout)
        except Timeout:
            self.kill_group()
            raise

    def kill_group(self) -> None:
        """SIGKILL the delegate's whole process group, reap the delegate, drop its pipes."""
        try:
            os.killpg(self.pid, 9)  # SIGKILL, without importing signal
        except ProcessLookupError:
            pass
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        for pipe in ("stdin", "stdout", "stderr"):
            self._close(pipe)

    def _close(self, pipe: str) -> None:
        fd = getattr(self, pipe)
        if fd is not None:
            setattr(self, pipe, None)
            os.close(fd)


def _pipe(ours: list[int]) -> tuple[int, int]:
    """A pipe (close-on-exec both ends) whose descriptors are above 0, 1 and 2, so that the
    child's dup2 onto those never overwrites another of its pipes."""
    ends = []
    for fd in os.pipe():
        ours.append(fd)
        if fd <= 2:  # our own stdin/stdout/stderr were closed: move it up
            import fcntl

            high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
            ours.append(high)
            os.close(fd)
            ours.remove(fd)
            fd = high
        ends.append(fd)
    return ends[0], ends[1]


def _exec_child(
    binary: str, env: dict[str, str], in_child: Callable[[], None] | None, stdio: tuple[int, int, int], report: int
) -> None:
    """In the forked child: set up, exec; on failure report the errno to ``report`` and exit."""
    code = b"0"
    try:
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)  # inheritable
        for signum in (_signal.SIGPIPE, _signal.SIGXFSZ):  # subprocess's restore_signals
            _signal.signal(signum, _signal.SIG_DFL)
        os.setpgid(0, 0)
        if in_child is not None:
            in_child()
        os.closerange(3, report)
        os.closerange(report + 1, _MAXFD)
        os.execve(binary, [binary], env)
    except OSError as exc:
        code = str(exc.errno or 0).encode()
    except BaseException:
        pass
    try:
        os.write(report, code)
    finally:
        os._exit(255)


def _libc_prctl() -> Any:
    """libc's ``prctl``, looked up once per process; None where there is none."""
    global _prctl
    if _prctl is None:
        try:
            import ctypes  # deferred: only a delegate exec pays for it, never the pass-through

            # The process's own symbols: libc, also inside the PyInstaller bundle.
            fn = ctypes.CDLL(None, use_errno=True).prctl
            fn.argtypes = (ctypes.c_int, ctypes.c_ulong)
            fn.restype = ctypes.c_int
            _prctl = fn
        except (ImportError, OSError, AttributeError):  # no ctypes, no libc, no prctl: not Linux
            _prctl = False
    return _prctl or None


def _die_with(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel SIGKILL the child when ``parent`` dies.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the process: the
    CNI plugin is single-threaded, so its delegates die exactly when dracni does (a runner used
    from a short-lived thread would see its delegates killed when that thread ends).  The
    signal reaches the delegate only, not the processes it starts: libcni's invoke, with which
    Go plugins run their IPAM, sets none, so a killed dracni's delegate's IPAM runs on to its
    end (the timeout's group kill, while dracni lives, does reach it).  Without prctl (not
    Linux), None: delegates start as before.
    """
    prctl = _libc_prctl()
    if prctl is None:
        return None

    def in_child() -> None:
        prctl(_PR_SET_PDEATHSIG, _SIGKILL)  # a failure (seccomp, say) leaves today's behaviour
        if os.getppid() != parent:  # the parent died before prctl: no signal will come
            os._exit(1)

    return in_child


def kill_leftovers(container_id: str) -> list[int]:
    """SIGKILL what an earlier, interrupted dracni started for ``container_id``; their pids.

    PR_SET_PDEATHSIG reaches only the delegates dracni execs itself: an IPAM plugin a delegate
    started (a slow host-local) survives a dracni the runtime killed, and would finish its ADD
    after the runtime's DEL and leak its address.  Every process dracni starts carries
    ``DRACNI_DELEGATE_OF=<dracni pid>/<container>`` in its environment, and plugins pass their
    environment on (libcni's ``invoke`` does), so those processes are found in /proc.  Only
    processes whose dracni is gone are killed.  Called by DEL when the ADD never finished: it
    reads every process's environment, which costs a few ms on a busy node.
    """
    if not container_id:
        return []
    mark = f"{DELEGATE_MARK}=".encode()
    suffix = f"/{container_id}".encode()
    me = os.getpid()
    killed = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
        except OSError:  # gone, or a kernel thread
            continue
        for var in environ.split(b"\0"):
            if var.startswith(mark) and var.endswith(suffix):
                owner = var[len(mark) : -len(suffix)]
                if owner.isdigit() and not _alive(int(owner)):
                    try:
                        os.kill(int(entry), 9)
                        killed.append(int(entry))
                    except ProcessLookupError:
                        pass
                break
    return killed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
