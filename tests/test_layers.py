"""The house has one direction: March's import graph, read from the source with ``ast``.

Three checks, over every import of a ``march`` module, whatever its kind (at the top of a module,
under ``if TYPE_CHECKING:``, or inside a function):

- no circle at all;
- no import inside a function, unless ``INSIDE_FUNCTION_ALLOWED`` says why it must be there;
- every arrow points down the floors of ``docs/architecture.md`` (or along one floor), unless
  ``UPWARD_ALLOWED`` says why; ``FLOORS`` here is that table, and a test holds the two equal.

Nothing is imported or run: a module that does not import cleanly still gets checked.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "march"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# The floors, top to bottom, as docs/architecture.md's layer table lists them: (name, modules).
# ``x.*`` is every module under the package ``x`` (the package itself included).
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("entry", ("march.__main__", "march.cli", "march.backup")),
    ("assembly", ("march.server",)),
    ("assembled parts", ("march.node", "march.metrics.collector", "march.metrics.endpoint", "march.listeners")),
    ("connection", ("march.connection", "march.feed", "march.waiting", "march.timing", "march.flow")),
    ("dispatch", ("march.commands", "march.commands.dispatch", "march.commands.transactions")),
    (
        "commands",
        (
            "march.commands.acl",
            "march.commands.args",
            "march.commands.cluster",
            "march.commands.connection",
            "march.commands.debug",
            "march.commands.forward",
            "march.commands.keys",
            "march.commands.ops",
            "march.commands.permissions",
            "march.commands.pubsub",
            "march.commands.refused",
            "march.commands.sentinel",
            "march.commands.sequences",
            "march.commands.server",
            "march.commands.workers",
        ),
    ),
    ("command table", ("march.commands.table",)),
    ("client", ("march.client",)),
    ("app", ("march.app",)),
    (
        "server-wide parts",
        (
            "march.auth",
            "march.users",
            "march.diagnostics",
            "march.metrics",
            "march.counters",
            "march.limits",
            "march.links",
        ),
    ),
    (
        "serving",
        (
            "march.pubsub",
            "march.group",
            "march.keyspace",
            "march.census",
            "march.listing",
            "march.idle",
            "march.policies",
            "march.shared",
            "march.workers",
            "march.serving",
            "march.cluster.*",
        ),
    ),
    ("generators", ("march.generators.*",)),
    (
        "store",
        (
            "march.store",
            "march.store.batch",
            "march.store.cursors",
            "march.store.etcd",
            "march.store.etcd_guard",
            "march.store.etcd_users",
            "march.store.etcd_workers",
            "march.store.membership",
            "march.store.sqlite",
        ),
    ),
    ("etcd", ("march.etcd.*",)),
    ("store contract", ("march.store.base",)),
    (
        "leaves",
        (
            "march",
            "march.resp",
            "march.errors",
            "march.config",
            "march.glob",
            "march.clock",
            "march.log",
            "march.version",
        ),
    ),
]

# (importer, imported) -> why this arrow may point up. None today; an entry needs a reason that
# docs/architecture.md gives too.
UPWARD_ALLOWED: dict[tuple[str, str], str] = {}

# (importer, imported) -> why the import must sit inside a function (never just to dodge a circle).
INSIDE_FUNCTION_ALLOWED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Arrow:
    source: str
    target: str
    kind: str  # "top", "type-checking" or "function"
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({self.kind}, line {self.line})"


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _resolved(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _known(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _kind(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    kind = "top"
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return "function"
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            kind = "type-checking"
    return kind


def arrows(package: Path = PACKAGE) -> list[Arrow]:
    """Every import of one ``march`` module by another, with its kind and line."""
    known = modules(package)
    out: list[Arrow] = []
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = _resolved(name, path.name == "__init__.py", node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                found = _known(target, known)
                arrow = Arrow(name, found or "", _kind(node, parents), node.lineno)
                if found is not None and found != name and found.split(".")[0] == package.name and arrow not in out:
                    out.append(arrow)
    return out


def floor_of(module: str, floors: list[tuple[str, tuple[str, ...]]] = FLOORS) -> int | None:
    for i, (_, members) in enumerate(floors):
        for m in members:
            if module == m or (m.endswith(".*") and (module == m[:-2] or module.startswith(m[:-1]))):
                return i
    return None


def circles(edges: list[Arrow]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {}
    for a in edges:
        graph.setdefault(a.source, set()).add(a.target)
        graph.setdefault(a.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def documented_floors(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """The layer table of docs/architecture.md: rows ``| n | name | `module`, `module` | ... |``."""
    section = text.split("<!-- layers -->", 2)[1]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].isdigit():
            rows.append((cells[1], tuple(re.findall(r"`([^`]+)`", cells[2]))))
    return rows


# --- the checks -----------------------------------------------------------------------------------


def test_no_import_circle_of_any_kind() -> None:
    edges = arrows()
    found = circles(edges)
    detail = [str(a) for a in edges if any(a.source in c and a.target in c for c in found)]
    assert found == [], "import circles:\n" + "\n".join(detail)


def test_no_import_inside_a_function_without_a_reason() -> None:
    inside = [a for a in arrows() if a.kind == "function" and (a.source, a.target) not in INSIDE_FUNCTION_ALLOWED]
    assert inside == [], "imports inside functions:\n" + "\n".join(map(str, inside))


def test_every_module_is_on_one_floor() -> None:
    for name in modules():
        places = [i for i, (_, members) in enumerate(FLOORS) if floor_of(name, [FLOORS[i]]) is not None]
        assert len(places) == 1, f"{name} is on floors {places}: place it in FLOORS and docs/architecture.md"
        assert floor_of(name) == places[0]


def test_arrows_point_down() -> None:
    up = []
    for a in arrows():
        source, target = floor_of(a.source), floor_of(a.target)
        assert source is not None and target is not None, a
        if target < source and (a.source, a.target) not in UPWARD_ALLOWED:
            up.append(f"{a}: floor '{FLOORS[source][0]}' imports floor '{FLOORS[target][0]}' above it")
    assert up == [], "arrows that run up:\n" + "\n".join(up)


def test_the_allowlists_name_real_arrows() -> None:
    seen = {(a.source, a.target) for a in arrows()}
    for pair, reason in {**UPWARD_ALLOWED, **INSIDE_FUNCTION_ALLOWED}.items():
        assert pair in seen, f"{pair} is allowed ({reason}) but no longer imported: drop it"
        assert reason.strip()


def test_the_floors_are_the_documented_ones() -> None:
    assert documented_floors(ARCHITECTURE.read_text()) == FLOORS


# --- the checker can fail ----------------------------------------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "march"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_circle_held_open_by_type_checking_and_a_function_is_found(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n",
            "b.py": "def f():\n    from . import c\n",
            "c.py": "from .a import A\n",
            "d.py": "from . import a\n",
        },
    )
    edges = arrows(root)
    assert {(a.source, a.target, a.kind) for a in edges} == {
        ("march.a", "march.b", "type-checking"),
        ("march.b", "march.c", "function"),
        ("march.c", "march.a", "top"),
        ("march.d", "march.a", "top"),
    }
    assert circles(edges) == [["march.a", "march.b", "march.c"]]


def test_the_documented_table_is_read(tmp_path: Path) -> None:
    text = "x\n<!-- layers -->\n| floor | name | modules |\n|---|---|---|\n| 1 | top | `march.a`, `march.b.*` |\n"
    assert documented_floors(text + "<!-- layers -->\n") == [("top", ("march.a", "march.b.*"))]
    assert floor_of("march.b.c", [("top", ("march.a", "march.b.*"))]) == 0
