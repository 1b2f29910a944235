"""The test doubles stay in the harness: the package neither holds nor imports them.

``march_harness.memory_store`` (the memory store, for unit tests of the pure core),
``march_harness.fake_etcd`` and ``march_harness.manual_clock`` (in harness/march_harness/) are what
tests run on; a running server must never be able to reach them, nor anything else of the harness
or of tests/: no module of march/ imports ``march_harness`` (or ``tests``). Read from the source
(``ast``), not by importing.
"""

from __future__ import annotations

import ast
from pathlib import Path

from march_harness import REPO_ROOT

PACKAGE = REPO_ROOT / "march"
HARNESS = ("march_harness", "tests", "support")  # what march/ never imports (support: the harness's old name)
DOUBLES = ("FakeEtcd", "FakeEtcdClient", "MemoryStore", "ManualClock")  # the names tests know them by


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(), str(path))) for path in sorted(PACKAGE.rglob("*.py"))]


def _imported(tree: ast.Module) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_the_package_imports_nothing_from_the_harness_or_the_tests() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}: {name}"
        for path, tree in _modules()
        for name in _imported(tree)
        if name.split(".")[0] in HARNESS
    ]
    assert found == []


def test_the_package_defines_no_test_double() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}: {node.name}"
        for path, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name in DOUBLES
    ]
    assert found == []


def test_the_checks_see_a_double_and_an_import() -> None:
    """The two checks above can fail: the same walk finds what they look for in a planted module."""
    tree = ast.parse("from march_harness.memory_store import MemoryStore\nclass ManualClock: ...\n")
    assert "march_harness.memory_store" in _imported(tree)
    assert "march_harness" in HARNESS
    assert any(isinstance(n, ast.ClassDef) and n.name in DOUBLES for n in ast.walk(tree))
