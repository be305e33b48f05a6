"""The differential fuzz corpus of test_fastpath.py is a function of its seed alone (issue 20).

The corpus used to encode the test's temp dir path at random, one draw or more per character:
the path's length (and its "/"s) shifted every later draw, and on a fresh machine made case 707
a "duplicate key" case whose key was written only once.  Here the generator runs in two processes that differ in everything but
the seed -- hash seed, temp dir (name, length, depth), working directory -- and each places its
cases under a temp dir of its own, as the fuzz does: with that dir written back as ``<base>``,
the two corpora, the cases and what is expected of them, are the same byte for byte.
No binary needed: the cases are generated, never run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.harness import REPO
from tests.unit import test_fastpath as fuzz

#: One process's corpus, placed under a fresh temp dir of its $TMPDIR, as JSON on stdout.
GENERATE = r"""
import json, sys, tempfile
from pathlib import Path
from tests.unit import test_fastpath as fuzz

base = Path(tempfile.mkdtemp(prefix=sys.argv[1]))
real = str(base)
out = []
for case in fuzz.corpus():
    run = fuzz.placed(case, base)
    out.append({
        "kind": run.kind,
        "expect": run.expect,
        "reasons": sorted(fuzz.REASONS.get(run.kind, ())),
        "root": str(run.root).replace(real, "<base>"),
        "env": {k: v.replace(real, "<base>") for k, v in run.env.items()},
        "argv": run.argv,
        "files": {k: v if v is None else v.hex() for k, v in run.files.items()},
        "stdin": run.stdin.replace(real.encode(), b"<base>").hex(),
    })
json.dump({"base": real, "cases": out}, sys.stdout)
"""


def test_the_corpus_depends_on_the_seed_alone(tmp_path: Path) -> None:
    setups = [  # (hash seed, $TMPDIR, mkdtemp prefix)
        ("0", tmp_path / "t", "a"),
        ("4242", tmp_path / ("d" * 40) / "deeper" / ("e" * 97), "pytest-of-somebody-"),
    ]
    procs = []
    for i, (hashseed, tmpdir, prefix) in enumerate(setups):
        tmpdir.mkdir(parents=True)
        cwd = tmp_path / f"cwd{i}"
        cwd.mkdir()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(REPO),
            "PYTHONHASHSEED": hashseed,
            "TMPDIR": str(tmpdir),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", GENERATE, prefix],
                env=env,
                cwd=cwd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
    runs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr.decode()
        runs.append(json.loads(stdout))
    (a, b), (base_a, base_b) = [r["cases"] for r in runs], [r["base"] for r in runs]
    assert len(base_a) != len(base_b) and base_a.count("/") != base_b.count("/")
    assert len(a) == len(b) >= 1000
    differ = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    assert not differ, f"{len(differ)} cases differ, the first, case {differ[0]}:\n{a[differ[0]]}\n{b[differ[0]]}"


def test_every_duplicate_key_case_repeats_a_key() -> None:
    """What the kind says holds: each "duplicate key" case has an object (the config or its
    prevResult) with a key written twice, the native parser's reason to hand it over ("json")."""
    repeats: list[str] = []

    def pairs(members: list[tuple[str, object]]) -> dict[str, object]:
        keys = [k for k, _ in members]
        repeats.extend(k for i, k in enumerate(keys) if k in keys[:i])
        return dict(members)

    cases = [case for case in fuzz.corpus() if case.kind == "duplicate key"]
    assert cases and fuzz.REASONS["duplicate key"] == {"json"}
    for case in cases:
        repeats.clear()
        json.loads(case.stdin.decode(), object_pairs_hook=pairs)
        assert repeats, f"no key repeated in {case.stdin!r}"


def test_the_temp_dir_stand_in_is_written_as_it_is() -> None:
    """``placed`` finds every path of a case in its stdin: in each config that is JSON, BASE is
    written (never escaped) as often as its strings hold it -- no state dir or log file is left
    pointing at "/%BASE%"."""

    def strings(value: object) -> list[str]:
        if isinstance(value, str):
            return [value]
        if isinstance(value, tuple):  # an object's members, repeated keys kept
            return [s for key, v in value for s in [key, *strings(v)]]
        if isinstance(value, list):
            return [s for v in value for s in strings(v)]
        return []

    checked = 0
    for case in fuzz.corpus():
        try:
            held = strings(json.loads(case.stdin.decode("utf-8"), object_pairs_hook=tuple))
        except (ValueError, RecursionError):
            continue  # not JSON, or nested too deep for this walk
        count = sum(s.count(fuzz.BASE) for s in held)
        assert case.stdin.count(fuzz.BASE.encode()) == count, case.stdin
        checked += count > 0
    assert checked > 500
