"""Logging set-up of the service: plain text for people, JSON lines for log pipelines."""

from __future__ import annotations

import json
import logging
import sys

from ..logtext import escape_controls


class TextFormatter(logging.Formatter):
    """One line per message: control characters in it are escaped (tracebacks stay multi-line)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.message)
        return super().formatMessage(record)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


#: Libraries whose debug output is a line per HTTP request or netlink message: they log at
#: warning and above whatever the service's level (their debug lines say nothing about dracni
#: and, with many calls at once, the shared log handler's lock becomes the service's bottleneck).
QUIET_LIBRARIES = ("urllib3", "kubernetes", "pyroute2", "grpc")


class QuietLibraries(logging.Filter):
    """Drops the libraries' records below warning (pyroute2 resets its logger's level when it
    is imported, so a level set here would not hold)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not record.name.startswith(QUIET_LIBRARIES)


def setup_logging(fmt: str = "text", level: str = "info") -> None:
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(QuietLibraries())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
