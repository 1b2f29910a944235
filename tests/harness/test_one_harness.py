"""The rules of the harness and of the tests' layout, read from the source with ``ast``.

- **One harness, imported by name.** What tests and scripts share is the package ``march_harness``
  (harness/, installed editable by scripts/_env.sh). No file of tests/, scripts/ or harness/ edits
  ``sys.path`` (``sys.path.insert``, ``monkeypatch.syspath_prepend``, ...) or loads a file by path
  (``importlib.util.spec_from_file_location``, ``SourceFileLoader``, ``runpy.run_path``); no test
  module imports another test module or a conftest.
- **One axis.** tests/ mirrors march/: a folder per folder of march/ (tests of its loose modules
  and of the whole package sit loose at the top), beside the folders of what is not march/
  (``NOT_MARCH``). No folder is a kind of test: the kind is a marker (``KINDS``, declared in
  pyproject.toml). No test file name is used twice.
- **Markers that mean what they say.** A module that starts real processes (March, redis-server,
  etcd, PostgreSQL, Prometheus, a script: it uses the harness's process classes, the root
  conftest's process fixtures or ``subprocess``) is marked ``e2e``; a module marked ``e2e`` does.
  So ``-m "not e2e"`` is the suite of the pure core, in process. The drills are marked ``fault``
  too, the fuzzer ``fuzz``.

Each check is shown able to fail on planted source (the companion tests at the end).
"""

from __future__ import annotations

import ast
import tomllib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from march_harness import REPO_ROOT

TESTS = REPO_ROOT / "tests"
SHARED = [REPO_ROOT / "tests", REPO_ROOT / "scripts", REPO_ROOT / "harness" / "march_harness"]
# Folders of tests/ for what is not a folder of march/: the Python client (clients/python) and the
# programs of docs/clients, the docs' examples and generated tables, compose, the monitoring kit,
# the scripts of scripts/, and the harness's own machinery (history checker, doubles, bench library).
NOT_MARCH = {"clients", "docs", "compose", "monitoring", "scripts", "harness"}
KINDS = {"e2e", "fault", "fuzz"}  # the kinds of test: markers, never folders

# Calls that edit the import path or load a file by its path, as ``module.attribute`` chains.
PATH_EDITS = {"sys.path.insert", "sys.path.append", "sys.path.extend", "sys.path.remove", "syspath_prepend"}
LOAD_BY_PATH = {"spec_from_file_location", "SourceFileLoader", "run_path", "load_source"}

# What starts a process: the harness's classes and helpers that start one, and the root conftest's
# fixtures that hand one out (a module's own fixture of the same name is its own business).
PROCESS_NAMES = {
    "MarchServer",
    "RedisServer",
    "EtcdCluster",
    "MarchCluster",
    "DrillEnv",
    "PostgresCluster",
    "Prometheus",
    "serving",
    "paired",
    "run_script",
    "march",
    "ok",
    "refused",
    "subprocess",
    "million",  # march_harness.bench.million: an etcd and two nodes
}
PROCESS_FIXTURES = {
    "march_server",
    "march_factory",
    "redis_server",
    "redis_factory",
    "etcd",
    "etcd3",
    "march_cluster",
    "cluster_env",
    "server_pair",
    "locked_pair",
    "march_proc",
    "redis_proc",
    "mc",
    "rc",
    "server",
    "locked",
    "postgres",
    "march_url",
    "sequencer",
    "prefetch_sequencer",
}


def _python_files(roots: list[Path]) -> Iterator[Path]:
    for root in roots:
        yield from sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return ""


def path_tricks(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for every edit of ``sys.path`` and every load of a file by path in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            last = name.rpartition(".")[2]
            if name in PATH_EDITS or last == "syspath_prepend" or last in LOAD_BY_PATH:
                found.append((node.lineno, name))
        elif isinstance(node, ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                base = t.value if isinstance(t, ast.Subscript) else t
                if _dotted(base) == "sys.path":
                    found.append((node.lineno, "sys.path ="))
    return sorted(found)


def test_nothing_edits_the_import_path_or_loads_a_file_by_path() -> None:
    found = [
        f"{path.relative_to(REPO_ROOT)}:{line}: {what}"
        for path in _python_files(SHARED)
        for line, what in path_tricks(ast.parse(path.read_text(), str(path)))
    ]
    assert found == [], "import path edits or files loaded by path (import march_harness instead):\n" + "\n".join(found)


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.lineno, "." * node.level + (node.module or "")))
    return out


def imports_of_tests(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) for every import of a test module, a conftest, a relative module or tests/."""
    return [
        (line, name)
        for line, name in _imports(tree)
        if name.startswith(".") or name.split(".")[-1].startswith("test_") or name.split(".")[-1] == "conftest"
        or name.split(".")[0] in ("tests", "support")
    ]  # fmt: skip


def test_no_test_module_imports_another() -> None:
    found = [
        f"{path.relative_to(REPO_ROOT)}:{line}: {name}"
        for path in _python_files([TESTS])
        for line, name in imports_of_tests(ast.parse(path.read_text(), str(path)))
    ]
    assert found == [], "what two test modules share belongs in march_harness:\n" + "\n".join(found)


def test_the_folders_of_tests_are_subjects() -> None:
    march_folders = {p.name for p in (REPO_ROOT / "march").iterdir() if (p / "__init__.py").is_file()}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders & KINDS == set(), "a kind of test is a marker, not a folder"
    assert folders <= march_folders | NOT_MARCH, f"not a subject: {sorted(folders - march_folders - NOT_MARCH)}"
    untested = march_folders - folders
    assert untested == set(), f"folders of march/ without their folder of tests: {sorted(untested)}"


def test_no_test_file_name_twice_and_no_package() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
    assert sorted(str(p.relative_to(REPO_ROOT)) for p in TESTS.rglob("__init__.py")) == []


def test_the_kinds_are_declared_markers() -> None:
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    declared = {line.split(":")[0] for line in config["markers"]}
    assert declared >= KINDS
    assert "--strict-markers" in config["addopts"]


def _marks(tree: ast.Module) -> set[str]:
    """The markers a module's ``pytestmark`` gives all its tests."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(_dotted(t) == "pytestmark" for t in node.targets):
            values = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
            out = set()
            for v in values:
                name = _dotted(v.func if isinstance(v, ast.Call) else v)
                if name.startswith("pytest.mark."):
                    out.add(name.removeprefix("pytest.mark."))
            return out
    return set()


def starts_processes(tree: ast.Module) -> bool:
    """Whether a test module starts real processes (see the module docstring)."""
    local_fixtures = {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and any("fixture" in _dotted(d.func if isinstance(d, ast.Call) else d)
                                                     for d in node.decorator_list)
    }  # fmt: skip
    harness = {
        a.asname or a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "march_harness"
        for a in n.names
    }
    imported = harness | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    args = {
        a.arg
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        for a in n.args.args + n.args.kwonlyargs
    }
    return bool(imported & PROCESS_NAMES) or bool((args & PROCESS_FIXTURES) - local_fixtures)


def test_a_module_is_marked_e2e_exactly_when_it_starts_processes() -> None:
    wrong = []
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text(), str(path))
        marked, starts = "e2e" in _marks(tree), starts_processes(tree)
        if marked != starts:
            wrong.append(
                f"{path.relative_to(REPO_ROOT)}: {'marked e2e, starts no process' if marked else 'not marked e2e'}"
            )
    assert wrong == [], "\n".join(wrong)


# --- the checks can fail ----------------------------------------------------------------------------


def test_the_checks_see_path_edits_and_loads_by_path() -> None:
    planted = ast.parse(
        "import sys, importlib.util, runpy\n"
        "sys.path.insert(0, 'tests')\n"
        "sys.path[:0] = ['scripts']\n"
        "def f(monkeypatch):\n    monkeypatch.syspath_prepend('x')\n"
        "spec = importlib.util.spec_from_file_location('m', 'scripts/x.py')\n"
        "runpy.run_path('scripts/x.py')\n"
    )
    assert [line for line, _ in path_tricks(planted)] == [2, 3, 5, 6, 7]
    assert path_tricks(ast.parse("import march_harness\nfrom march_harness import fuzz\n")) == []


def test_the_checks_see_a_test_module_imported() -> None:
    planted = ast.parse(
        "from .helpers import x\nfrom client.test_orm import y\nimport conftest\nfrom support import z\n"
    )
    assert [line for line, _ in imports_of_tests(planted)] == [1, 2, 3, 4]
    assert imports_of_tests(ast.parse("from march_harness.compare import same\nimport pytest\n")) == []


def test_the_checks_see_processes_and_marks() -> None:
    started = ast.parse(
        "import pytest\nfrom march_harness import MarchServer\npytestmark = [pytest.mark.e2e, pytest.mark.timeout(9)]\n"
        "def test_x(tmp_path):\n    MarchServer.in_dir(tmp_path)\n"
    )
    assert starts_processes(started) and _marks(started) == {"e2e", "timeout"}
    fixture = ast.parse("def test_x(march_server):\n    pass\n")
    assert starts_processes(fixture) and _marks(fixture) == set()
    own = ast.parse("import pytest\n@pytest.fixture\ndef server():\n    return 1\ndef test_x(server):\n    pass\n")
    assert not starts_processes(own)
