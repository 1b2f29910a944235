"""March's import graph, read from the source with ``ast``: what tests/test_layers.py checks and
scripts/layers.py draws (docs/img/layers.png).

A room is a folder of ``march/`` (every module in it) or a module loose at the top of the package; a
floor is a row of docs/architecture.md's table (``documented_floors``), a list of rooms. Every
import of one ``march`` module by another is an `Arrow`, whatever its kind: at the top of a module,
under ``if TYPE_CHECKING:`` or inside a function. Nothing is imported or run: a module that does not
import cleanly is still read.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from march_harness.servers import REPO_ROOT

PACKAGE = REPO_ROOT / "march"
ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"

Floors = list[tuple[str, tuple[str, ...]]]  # (name, rooms), top to bottom


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
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = _resolved(name, path.name == "__init__.py", node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            else:
                targets = [a.name for a in node.names]
            for target in targets:
                found = _known(target, known)
                arrow = Arrow(name, found or "", _kind(node, parents), node.lineno)
                if found is not None and found != name and found.split(".")[0] == package.name and arrow not in out:
                    out.append(arrow)
    return out


def room_of(module: str, package: Path = PACKAGE) -> str:
    """The room of a module: its folder under the package, or itself if it is loose at the top."""
    parts = module.split(".")
    if len(parts) >= 2 and (package / parts[1]).is_dir():
        return ".".join(parts[:2])
    return module


def floor_of(module: str, floors: Floors, package: Path = PACKAGE) -> int | None:
    """The index of the floor ``module``'s room is on, or None."""
    room = room_of(module, package)
    for i, (_, members) in enumerate(floors):
        if room in members:
            return i
    return None


def room_arrows(edges: list[Arrow]) -> list[Arrow]:
    """The arrows between rooms (one per pair, the first import that draws it)."""
    seen: dict[tuple[str, str], Arrow] = {}
    for a in edges:
        pair = (room_of(a.source), room_of(a.target))
        if pair[0] != pair[1] and pair not in seen:
            seen[pair] = Arrow(pair[0], pair[1], a.kind, a.line)
    return list(seen.values())


def side_doors(edges: list[Arrow], rules: dict[tuple[str, str], str], package: Path = PACKAGE) -> list[Arrow]:
    """The imports, by a module of a room that ``rules`` limits to another room's entry points, of a
    module inside that room (not the room's package itself)."""
    out = []
    for a in edges:
        target = room_of(a.target, package)
        if (room_of(a.source, package), target) in rules and a.target != target:
            out.append(a)
    return out


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


def documented_floors(text: str) -> Floors:
    """The layer table of docs/architecture.md: rows ``| n | name | `module`, `module` | ... |``."""
    section = text.split("<!-- layers -->", 2)[1]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].isdigit():
            rows.append((cells[1], tuple(re.findall(r"`([^`]+)`", cells[2]))))
    return rows
