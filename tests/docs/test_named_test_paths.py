"""Every test or harness file the repository names exists: a path under ``tests/`` or ``harness/``
written in the docs, the READMEs, the code's docstrings and comments or the scripts (as
``tests/cluster/test_election.py`` is here) names a file or folder of the working tree. Tests move
with their subject; this keeps what points at them from going stale."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from march_harness import REPO_ROOT

NAMED = re.compile(r"(?<![\w./-])((?:tests|harness)/[\w./-]*\w)")
# Where the repository's text lives (the tracked folders; never .venv, .git or caches).
SOURCES = ["README.md", "Dockerfile", "docker-compose.yml", ".ci", "clients", "config", "docker", "docs", "harness",
           "march", "monitoring", "scripts", "tests"]  # fmt: skip
SKIP = {".venv", ".git", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", "node_modules", "wheels"}


def named_paths(text: str) -> list[str]:
    """The paths under tests/ or harness/ that ``text`` names (globs and placeholders left out)."""
    return [m.group(1) for m in NAMED.finditer(text) if not any(c in m.group(1) for c in "<*{")]


def _texts() -> Iterator[Path]:
    for source in SOURCES:
        top = REPO_ROOT / source
        for path in [top] if top.is_file() else sorted(top.rglob("*")):
            if path.is_file() and not SKIP & set(path.relative_to(REPO_ROOT).parts) and ".egg-info" not in str(path):
                yield path


def test_every_named_test_or_harness_path_exists() -> None:
    missing = []
    for path in _texts():
        try:
            text = path.read_text()
        except UnicodeDecodeError:  # images, binaries
            continue
        name = path.relative_to(REPO_ROOT)
        missing += [f"{name}: {ref}" for ref in named_paths(text) if not (REPO_ROOT / ref).exists()]
    assert missing == [], "paths named but not in the tree:\n" + "\n".join(missing)


def test_named_paths_are_found() -> None:
    text = "see tests/cluster/test_election.py, `harness/march_harness/sim.py` and tests/<folder>/; old/tests/x"
    assert named_paths(text) == ["tests/cluster/test_election.py", "harness/march_harness/sim.py"]
