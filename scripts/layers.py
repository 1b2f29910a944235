"""Draw the floors of the house: ``docs/img/layers.png``, from the code's own imports.

    .venv/bin/python scripts/layers.py [--out docs/img/layers.png]

The floors are docs/architecture.md's table (which ``tests/test_layers.py`` holds equal to the
code's) and the import graph is ``march_harness.import_graph``'s (read with ``ast``: top-level,
``TYPE_CHECKING`` and function-level imports alike), the one the test checks. One row per floor, top to bottom,
one box per room (a folder of march/, or a module loose at its top); grey arrows point down
or along a floor, red ones run up (there should be none: the test fails on them). Prints what it
drew: floors, modules, arrows and arrows that run up.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: files only, never a window

import matplotlib.pyplot as plt
from march_harness import REPO_ROOT as ROOT
from march_harness.import_graph import ARCHITECTURE, PACKAGE, arrows, documented_floors, floor_of, modules, room_of
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch


def _box(module: str) -> str:
    """The box a module is drawn in: its room (a folder, drawn ``name/``, or a loose module)."""
    room = room_of(module)
    name = room.removeprefix("march.") or "march"
    return name + "/" if (PACKAGE / name).is_dir() and room != "march" else name


def draw(out: Path) -> str:
    floors = documented_floors(ARCHITECTURE.read_text())
    rows: list[list[str]] = [[] for _ in floors]
    where: dict[str, tuple[int, int]] = {}
    for name in sorted(modules()):
        box = _box(name)
        floor = floor_of(name, floors)
        assert floor is not None, f"{name} is on no floor of {ARCHITECTURE.name}'s table"
        if box not in rows[floor]:
            rows[floor].append(box)
    width = max(len(r) for r in rows)
    for i, row in enumerate(rows):
        for j, box in enumerate(row):
            where[box] = (i, j)
    edges = {(_box(a.source), _box(a.target)) for a in arrows()}
    edges = {(s, t) for s, t in edges if s != t}
    up = sorted((s, t) for s, t in edges if where[t][0] < where[s][0])

    fig, ax = plt.subplots(figsize=(max(12, width * 1.7), len(rows) * 1.05 + 1))
    ax.set_xlim(-2.6, width * 1.7)
    ax.set_ylim(-len(rows) * 1.0 - 0.2, 0.8)
    ax.axis("off")

    def centre(box: str) -> tuple[float, float]:
        i, j = where[box]
        n = len(rows[i])
        return (j + (width - n) / 2) * 1.7 + 0.7, -i * 1.0

    for s, t in sorted(edges):
        (x1, y1), (x2, y2) = centre(s), centre(t)
        upward = (s, t) in up
        ax.add_patch(
            FancyArrowPatch(
                (x1, y1 - 0.18 if not upward else y1 + 0.18),
                (x2, y2 + 0.18 if not upward else y2 - 0.18),
                arrowstyle="-|>",
                mutation_scale=7,
                color="#d62728" if upward else "#b0b0b0",
                linewidth=1.4 if upward else 0.5,
                connectionstyle="arc3,rad=0.25" if y1 == y2 else "arc3,rad=0.0",
                zorder=1,
            )
        )
    for i, (name, _) in enumerate(floors):
        ax.text(-2.5, -i * 1.0, f"{i + 1}  {name}", va="center", ha="left", fontsize=9, weight="bold")
        for box in rows[i]:
            x, y = centre(box)
            ax.add_patch(
                FancyBboxPatch(
                    (x - 0.75, y - 0.18),
                    1.5,
                    0.36,
                    boxstyle="round,pad=0.02",
                    facecolor="#dbe7f3",
                    edgecolor="#4a6a8a",
                    zorder=2,
                )
            )
            ax.text(x, y, box, ha="center", va="center", fontsize=7, zorder=3)
    summary = f"{len(floors)} floors, {len(where)} boxes, {len(edges)} arrows, {len(up)} running up"
    ax.set_title(f"march: the floors of the house ({summary}; from march_harness.import_graph)", fontsize=11)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return summary + "".join(f"\n  up: {s} -> {t}" for s, t in up)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "layers.png")
    args = parser.parse_args()
    print(f"{args.out}: {draw(args.out)}")


if __name__ == "__main__":
    main()
