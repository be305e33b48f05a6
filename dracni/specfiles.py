"""Locate the contract files of ``spec/`` both in a source tree and in the frozen bundle."""

from __future__ import annotations

import os
import sys
from typing import Any


def spec_dir() -> str:
    """``spec/`` next to the package, or inside the PyInstaller bundle (``sys._MEIPASS``)."""
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        return os.path.join(bundle, "spec")
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "spec")


def spec_path(*parts: str) -> str:
    return os.path.join(spec_dir(), *parts)


def load_json_spec(name: str) -> dict[str, Any]:
    from . import jsonio

    with open(spec_path(name), "rb") as f:
        return jsonio.loads_object(f.read(), name)
