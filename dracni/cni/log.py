"""A tiny logger for the CNI hot path (the ``logging`` module costs a few ms to import).

Lines at the configured level go to the config's ``logFile``; stderr gets warnings and errors
only, whatever the level.  The runtime keeps stdout for the result and treats stderr as the
plugin's message: libcni's ``RawExec.ExecPlugin`` (pkg/invoke/raw_exec.go) copies a successful
plugin's stderr into the runtime's own log, and when the plugin died without a result on stdout
(the runtime killed it at its timeout) ``pluginErr`` makes the whole of stderr the error the
pod shows.  So debug lines (delegate output, timings) must never reach stderr, and an ADD
prints nothing there unless something goes wrong.
"""

from __future__ import annotations

import os
import sys
import time

from ..logtext import escape_controls

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
#: The lowest level stderr gets.
STDERR_LEVEL = _LEVELS["warning"]


class Log:
    def __init__(self, level: str = "info", path: str | None = None, context: str = "") -> None:
        self.threshold = _LEVELS.get(level, 20)
        self.path = path
        self.context = context

    def configure(self, level: str | None, path: str | None, context: str) -> None:
        if level:
            self.threshold = _LEVELS.get(level, self.threshold)
        self.path = path or self.path
        self.context = context

    def _emit(self, level: str, msg: str) -> None:
        if _LEVELS[level] < self.threshold:
            return
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
        line = f"{stamp} {level.upper()} dracni[{os.getpid()}] {escape_controls(self.context + msg)}\n"
        if _LEVELS[level] >= STDERR_LEVEL:
            try:
                sys.stderr.write(line.encode("utf-8", "backslashreplace").decode("utf-8"))
            except (OSError, ValueError):
                pass
        if self.path:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    os.write(fd, line.encode("utf-8", "replace"))
                finally:
                    os.close(fd)
            except (OSError, ValueError):  # ValueError: a NUL or an unencodable path
                pass

    def debug(self, msg: str) -> None:
        self._emit("debug", msg)

    def info(self, msg: str) -> None:
        self._emit("info", msg)

    def warning(self, msg: str) -> None:
        self._emit("warning", msg)

    def error(self, msg: str) -> None:
        self._emit("error", msg)


log = Log(level=os.environ.get("DRACNI_LOG_LEVEL", "warning"))
