"""Fixtures the unit tests share: the test API server's client (tests/kubeclient.py), and a
state dir with the records schema (the store's and the version cache's tests)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from dracni.state.store import StateDir
from tests.kubeclient import api_client

__all__ = ["api_client", "root", "state", "validator"]

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "spec" / "state-records.schema.json"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Where a test's state dir lives (not created: the store makes it)."""
    return tmp_path / "state"


@pytest.fixture
def state(root: Path) -> StateDir:
    return StateDir(str(root))


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    """spec/state-records.schema.json, itself checked against its metaschema."""
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)
