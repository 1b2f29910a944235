"""The house has one direction: March's import graph, read from the source with ``ast``.

The folders of ``march/`` are its floors: a room is a folder (``march.commands``, every module in
it) or a module loose at the top of the package (``march.config``). Checks, over every import of a
``march`` module, whatever its kind (at the top of a module, under ``if TYPE_CHECKING:``, or inside
a function):

- no circle at all, between modules or between rooms;
- no import inside a function, unless ``INSIDE_FUNCTION_ALLOWED`` says why it must be there;
- every arrow between rooms points down the floors of ``docs/architecture.md`` (or along one
  floor between rooms that do not import each other back), unless ``UPWARD_ALLOWED`` says why;
  ``FLOORS`` here is that table, and a test holds the two equal;
- at most ``MAX_LOOSE`` modules loose at the top of the package, and no file name used twice;
- a room listed in ``ENTRY_POINTS_ONLY`` reaches the other room only through that room's package
  (what its ``__init__`` exports), never one of its modules: the transport knows the commands'
  entry points and the handler contract (``march.commands``), never a command module.

Nothing is imported or run: a module that does not import cleanly still gets checked.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "march"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_LOOSE = 15  # modules loose at the top of march/ (__init__ and __main__ not counted): the rest live in folders

# The floors, top to bottom, as docs/architecture.md's table lists them: (name, rooms). A room is a
# folder of march/ (every module in it) or a module loose at the top.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("entry", ("march.__main__", "march.cli")),
    ("backup", ("march.backup",)),
    ("assembly", ("march.server",)),
    ("metrics", ("march.metrics",)),
    ("transport", ("march.transport",)),
    ("commands", ("march.commands",)),
    ("context", ("march.client", "march.app", "march.node")),
    ("services", ("march.access", "march.cluster")),
    ("keyspace", ("march.keyspace",)),
    ("generators", ("march.generators",)),
    ("store", ("march.store",)),
    ("etcd", ("march.etcd",)),
    ("stats", ("march.stats",)),
    (
        "leaves",
        (
            "march",
            "march.clock",
            "march.config",
            "march.errors",
            "march.glob",
            "march.limits",
            "march.log",
            "march.resp",
            "march.version",
        ),
    ),
]

# (importer, imported) -> why this arrow may point up. None today; an entry needs a reason that
# docs/architecture.md gives too.
UPWARD_ALLOWED: dict[tuple[str, str], str] = {}

# (importer, imported) -> why the import must sit inside a function (never just to dodge a circle).
INSIDE_FUNCTION_ALLOWED: dict[tuple[str, str], str] = {}

# (importer room, imported room) -> why the importer may use only the imported room's package itself
# (``from march.commands import call``), never one of its modules (``march.commands.table``).
ENTRY_POINTS_ONLY: dict[tuple[str, str], str] = {
    ("march.transport", "march.commands"): (
        "the transport calls the dispatcher as uvicorn's protocol calls its app: it knows the entry points "
        "and the handler contract (march.commands exports them), never a command"
    ),
}


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


def room_of(module: str, package: Path = PACKAGE) -> str:
    """The room of a module: its folder under the package, or itself if it is loose at the top."""
    parts = module.split(".")
    if len(parts) >= 2 and (package / parts[1]).is_dir():
        return ".".join(parts[:2])
    return module


def floor_of(module: str, floors: list[tuple[str, tuple[str, ...]]] = FLOORS) -> int | None:
    room = room_of(module)
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


def side_doors(
    edges: list[Arrow], package: Path = PACKAGE, rules: dict[tuple[str, str], str] = ENTRY_POINTS_ONLY
) -> list[Arrow]:
    """The imports of a module of a room that ``rules`` limits to another room's entry points, of a
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


def test_every_room_is_on_one_floor() -> None:
    for name in modules():
        room = room_of(name)
        places = [i for i, (_, members) in enumerate(FLOORS) if room in members]
        assert len(places) == 1, (
            f"{name} (room {room}) is on floors {places}: place it in FLOORS and docs/architecture.md"
        )


def test_no_circle_between_rooms() -> None:
    found = circles(room_arrows(arrows()))
    assert found == [], f"rooms importing each other: {found}"


def test_arrows_point_down() -> None:
    up = []
    for a in arrows():
        source, target = floor_of(a.source), floor_of(a.target)
        assert source is not None and target is not None, a
        if target < source and (a.source, a.target) not in UPWARD_ALLOWED:
            up.append(f"{a}: floor '{FLOORS[source][0]}' imports floor '{FLOORS[target][0]}' above it")
    assert up == [], "arrows that run up:\n" + "\n".join(up)


def test_few_modules_loose_and_no_file_name_twice() -> None:
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert len(loose) <= MAX_LOOSE, f"{len(loose)} modules loose at the top of march/: {sorted(loose)}"
    names = Counter(p.name for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")
    assert [n for n, c in names.items() if c > 1] == []


def test_the_transport_knows_only_the_commands_entry_points() -> None:
    found = side_doors(arrows())
    assert found == [], "imports of a room's modules where only its package's exports may be used:\n" + "\n".join(
        f"{a} ({ENTRY_POINTS_ONLY[room_of(a.source), room_of(a.target)]})" for a in found
    )


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
    text = "x\n<!-- layers -->\n| floor | name | rooms |\n|---|---|---|\n| 1 | top | `march.cli`, `march.commands` |\n"
    floors = documented_floors(text + "<!-- layers -->\n")
    assert floors == [("top", ("march.cli", "march.commands"))]
    assert floor_of("march.commands.acl", floors) == 0
    assert floor_of("march.config", floors) is None


def test_a_side_door_into_the_commands_is_found(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "commands/__init__.py": "from march.commands.table import waits\n",
            "commands/table.py": "def waits() -> None: ...\n",
            "transport/__init__.py": "",
            "transport/conn.py": (
                "from march.commands import waits\n"
                "from march.commands.table import waits as w\n"
                "import march.commands.table\n"
                "from march.commands import table\n"
            ),
        },
    )
    found = side_doors(arrows(root), root)
    assert [(a.source, a.target, a.line) for a in found] == [
        ("march.transport.conn", "march.commands.table", 2),
        ("march.transport.conn", "march.commands.table", 3),
        ("march.transport.conn", "march.commands.table", 4),
    ]
    assert side_doors(arrows(root), root, rules={}) == []


def test_rooms_that_import_each_other_are_found() -> None:
    edges = [
        Arrow("march.commands.acl", "march.access.rules", "top", 1),
        Arrow("march.access.users", "march.commands.table", "top", 2),
    ]
    assert room_arrows(edges) == [
        Arrow("march.commands", "march.access", "top", 1),
        Arrow("march.access", "march.commands", "top", 2),
    ]
    assert circles(room_arrows(edges)) == [["march.access", "march.commands"]]
