"""The service's log lines: one line per message whatever the message holds."""

from __future__ import annotations

import json
import logging

from dracni.service.logs import JsonFormatter, TextFormatter


def record(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("dracni.test", logging.WARNING, __file__, 1, msg, args, None)


def test_text_lines_escape_control_characters_from_tenant_input() -> None:
    line = TextFormatter("%(levelname)s %(message)s").format(
        record("prepare of claim %s failed: %s", "ns/c", "bad ifName 'x\nFORGED\x1b[31m'")
    )
    assert "\n" not in line and "\x1b" not in line
    assert line == "WARNING prepare of claim ns/c failed: bad ifName 'x\\nFORGED\\x1b[31m'"


def test_json_lines_stay_one_line() -> None:
    line = JsonFormatter().format(record("a\nb"))
    assert "\n" not in line and json.loads(line)["msg"] == "a\nb"
