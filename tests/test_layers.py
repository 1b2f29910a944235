"""The house has one direction: March's import graph, read from the source with ``ast``
(``march_harness.import_graph``, which scripts/layers.py draws).

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

from collections import Counter
from pathlib import Path

from march_harness.import_graph import (
    ARCHITECTURE,
    PACKAGE,
    Arrow,
    Floors,
    arrows,
    circles,
    documented_floors,
    floor_of,
    modules,
    room_arrows,
    room_of,
    side_doors,
)

MAX_LOOSE = 15  # modules loose at the top of march/ (__init__ and __main__ not counted): the rest live in folders

# The floors, top to bottom, as docs/architecture.md's table lists them: (name, rooms). A room is a
# folder of march/ (every module in it) or a module loose at the top.
FLOORS: Floors = [
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
            "march.build",
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
        source, target = floor_of(a.source, FLOORS), floor_of(a.target, FLOORS)
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
    found = side_doors(arrows(), ENTRY_POINTS_ONLY)
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
    found = side_doors(arrows(root), ENTRY_POINTS_ONLY, root)
    assert [(a.source, a.target, a.line) for a in found] == [
        ("march.transport.conn", "march.commands.table", 2),
        ("march.transport.conn", "march.commands.table", 3),
        ("march.transport.conn", "march.commands.table", 4),
    ]
    assert side_doors(arrows(root), {}, root) == []


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
