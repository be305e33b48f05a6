"""dracni.cni.versioncache: delegates' VERSION answers kept in the state dir across invocations.

The cache's records go through a real StateDir; the one delegate is a small shell script (a
test double of an external CNI plugin).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dracni.cni.delegate import DelegateRunner
from dracni.cni.versioncache import PluginVersionCache
from dracni.state.store import StateDir


def test_plugin_version_cache_record_validates_against_the_schema(
    state: StateDir, root: Path, tmp_path: Path, validator
) -> None:
    """The store also writes cache/plugin-versions.json (kind PluginVersions) under the same
    layout and schema=1, but the schema's oneOf knows no such kind."""
    plugin_dir = tmp_path / "bin"
    plugin_dir.mkdir()
    plugin = plugin_dir / "fake"
    plugin.write_text('#!/bin/sh\ncat >/dev/null\necho \'{"cniVersion":"1.0.0","supportedVersions":["1.0.0"]}\'\n')
    plugin.chmod(0o755)
    DelegateRunner(
        [str(plugin_dir)], {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, PluginVersionCache(state)
    ).supported_versions(str(plugin))
    record = json.loads((root / "cache" / "plugin-versions.json").read_text())
    assert record["schema"] == 1 and record["kind"] == "PluginVersions"
    errors = [e.message for e in validator.iter_errors(record)]
    assert not errors, f"cache/plugin-versions.json does not validate: {errors}"


def test_an_answer_survives_the_invocation_and_vanished_binaries_are_dropped(
    state: StateDir, root: Path, tmp_path: Path
) -> None:
    kept = tmp_path / "bridge"
    kept.write_text("")
    gone = tmp_path / "macvlan"
    gone.write_text("")
    first = PluginVersionCache(state)
    assert first.get(f"{kept}|1|2|3") is None
    first.put(f"{kept}|1|2|3", ["0.4.0", "1.0.0"])
    first.put(f"{gone}|4|5|6", ["1.1.0"])
    assert PluginVersionCache(StateDir(str(root))).get(f"{gone}|4|5|6") == ["1.1.0"]
    gone.unlink()
    first.put(f"{kept}|7|8|9", ["1.1.0"])  # the binary was replaced: a new identity
    later = PluginVersionCache(StateDir(str(root)))
    assert later.get(f"{kept}|1|2|3") == ["0.4.0", "1.0.0"]
    assert later.get(f"{kept}|7|8|9") == ["1.1.0"]
    assert later.get(f"{gone}|4|5|6") is None
    record = json.loads((root / "cache" / "plugin-versions.json").read_text())
    assert record["kind"] == "PluginVersions" and f"{gone}|4|5|6" not in record
