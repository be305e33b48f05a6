"""Imports between dracni's packages go down the layer order of docs/architecture.md only.

The order is read from the document's layer table, so the page and the code cannot drift
apart: a new import that goes up the order (and so could close a cycle) fails here, naming
the importing module, the imported one and their layers.  Every import counts, also one
inside a function or under ``TYPE_CHECKING``: a cycle among lazy imports is still a cycle
of concepts.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "dracni"
DOC = REPO / "docs" / "architecture.md"
#: Generated gRPC modules import only each other and grpc/protobuf.
GENERATED = PACKAGE / "kubelet" / "proto"


def layer_table() -> dict[str, int]:
    """unit -> layer from the doc's table rows ``| N | `unit` `unit` ... |``.  A unit is a
    package (``state``) or a top-level module (``clock``)."""
    text = DOC.read_text()
    section = text[text.index("### Layers") :]
    layers: dict[str, int] = {}
    for match in re.finditer(r"^\| *(\d+) *\|([^|]*)\|", section, re.MULTILINE):
        for unit in re.findall(r"`([\w.]+)`", match.group(2)):
            assert unit not in layers, f"{unit} stands in two layers of {DOC.name}"
            layers[unit] = int(match.group(1))
    assert layers, f"no layer table under '### Layers' in {DOC}"
    return layers


def unit_of(module: str) -> str:
    """``dracni.state.store`` -> ``state``; ``dracni.clock`` -> ``clock``; ``dracni`` -> ``__init__``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1]


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if GENERATED in path.parents:
            continue
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The dracni modules ``module`` imports (``from pkg import mod`` names the module)."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "dracni")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "dracni":
                continue
            out.add(target)
            out.update(f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports_of(m, p, set(mods)) for m, p in mods.items()}


def test_every_unit_has_a_layer() -> None:
    layers = layer_table()
    units = {unit_of(m) for m in modules()}
    assert units - set(layers) == set(), f"{DOC.name}'s layer table lacks {sorted(units - set(layers))}"
    assert set(layers) - units == set(), (
        f"{DOC.name}'s layer table names what does not exist: {sorted(set(layers) - units)}"
    )


def test_imports_only_go_down_the_layer_order() -> None:
    layers = layer_table()
    upward = []
    for module, targets in sorted(graph().items()):
        here = unit_of(module)
        for target in sorted(targets):
            there = unit_of(target)
            if there != here and layers.get(there, 0) >= layers.get(here, 0):
                upward.append(f"{module} (layer {layers.get(here)}) imports {target} (layer {layers.get(there)})")
    assert upward == [], "imports that do not go down the layer order:\n" + "\n".join(upward)


def test_no_package_cycle() -> None:
    """Also without the table: the graph of units has no cycle (a layer holds one unit's
    equals, so a cycle inside one layer would pass the order check)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for module, targets in graph().items():
        for target in targets:
            if unit_of(target) != unit_of(module):
                edges[unit_of(module)].add(unit_of(target))
    seen: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(unit: str, path: list[str]) -> None:
        seen[unit] = 1
        for nxt in sorted(edges[unit]):
            if seen.get(nxt) == 1:
                pytest.fail("package cycle: " + " -> ".join([*path[path.index(nxt) :], nxt]))
            if nxt not in seen:
                visit(nxt, [*path, nxt])
        seen[unit] = 2

    for unit in sorted(edges):
        if unit not in seen:
            visit(unit, [unit])
