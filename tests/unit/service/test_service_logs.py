"""The service's log set-up: --log-level=debug is dracni's debug, not its libraries'."""

from __future__ import annotations

import logging

import pytest

from dracni.service.logs import setup_logging


@pytest.fixture
def root_handler():
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging(level="debug")
        yield root.handlers[0]
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)


def record(name: str, level: int) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, "message", None, None)


def test_debug_is_dracnis_only(root_handler):
    logging.getLogger("pyroute2").setLevel(0)  # what pyroute2 does when it is imported
    assert root_handler.filter(record("dracni.kubelet.helper", logging.DEBUG))
    assert not root_handler.filter(record("pyroute2.netlink.core", logging.DEBUG))
    assert not root_handler.filter(record("urllib3.connectionpool", logging.DEBUG))
    assert not root_handler.filter(record("kubernetes.client.rest", logging.INFO))
    assert root_handler.filter(record("urllib3.connectionpool", logging.WARNING))
    assert root_handler.filter(record("pyroute2.netlink.core", logging.ERROR))
