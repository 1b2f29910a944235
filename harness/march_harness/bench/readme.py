"""The performance figures the documentation quotes, found by their markers, for
`scripts/bench --check-readme`.

A quoted figure carries, beside it, an HTML comment `<!-- bench: <key> <value> -->`: `key` names
a measurement this module knows (`KEYS`), `value` is the figure as quoted (a plain number; `_` and
`,` allowed). The bench measures every key it finds in one run and reports today's value and the
ratio to the quoted one. It never edits a figure in prose: a person decides whether one is stale.

The one thing it writes (`scripts/bench --write-readme`): README.md's generated block, between
`BEGIN` and `END`: the command, the date, the machine's cores and load, the run's summary table
and a table of every `KEYS` figure with its marker, so that after other work is merged one run
regenerates the report (`replace_block`, `figures_table`). The cluster target has a block of its
own (`CLUSTER_BEGIN` ... `CLUSTER_END`, its figures `CLUSTER_KEYS`), rewritten only by a run that
measured it, so that `scripts/bench --only cluster --write-readme` leaves the main block as it is.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from march_harness.bench import goals

MARKER = re.compile(r"<!--\s*bench:\s*(?P<key>[\w.]+)\s+(?P<value>[\d.,_]+)\s*-->")

# key -> what it measures (the unit of the quoted value)
KEYS = {
    "prefetch.next": "Python client, prefetch: seq.next(key) calls per second, one process (IDs/s)",
    "prefetch.ids": "Python client, prefetch: next(it) on seq.ids(key) per second, one process (IDs/s)",
    "incr.c50.p1.ratio": "INCR -c 50 -P 1: march on SQLite / redis-server throughput",
    "incr.c50.p16.ratio": "INCR -c 50 -P 16: march on SQLite / redis-server throughput",
    "incrby.ts.c50.p1.ids": "INCRBY ts 1000 -c 50 -P 1 on a snowflake key, march on SQLite: IDs/s",
    "prefetch.bare": "a bare Python function doing prefetch's look-up, calls per second (the baseline)",
    "incr.c50.p16.baseline_ratio": "INCR -c 50 -P 16: march on SQLite / the Python baseline throughput",
    "tail.c1000.p99.ratio": "INCR -c 1000 -P 1: march on SQLite's p99 latency / redis-server's",
    "tail.c1000.p99.ms": "INCR -c 1000 -P 1: march on SQLite's p99 latency (ms)",
    "create.c32.rate": "new sequences per second, 32 connections, march on SQLite",
    "memory.created": "RSS per sequence created (bytes), march on SQLite",
    "memory.touched": "RSS per sequence touched after a restart (bytes), march on SQLite",
    "create.ratio": "new sequences/s / INCR/s on existing names, -c 32, march on SQLite",
    "flood.p99.ms": "new-key INCR p99 (ms) while 20 connections flood DBSIZE / SCAN / unread KEYS, march on SQLite",
}
# The 1,000,000-sequence node's figures, measured by march_harness.bench.million.measure: figures (and
# quotable) once that module is in the build, so that a build without it quotes none of them.
MILLION_KEYS = {
    "million.takeover.s": "a node holding 1,000,000 sequences: takeover after kill -9 (s)",
    "million.lease_ttl.s": "that node's lease TTL (s): the takeover goal is TTL + 1 s",
    "million.rss.mb": "a node holding 1,000,000 sequences: RSS (MB, 10^6 bytes)",
}
if importlib.util.find_spec("march_harness.bench.million") is not None:
    KEYS |= MILLION_KEYS
# key -> what it measures: the cluster target's figures (its own generated block)
CLUSTER_KEYS = {
    "cluster.p1.groups_ratio": "cluster INCR -P 1: aggregate INCR/s with groups = N / with groups = 1 (3 nodes)",
    "cluster.p16.groups_ratio": "cluster INCR -P 16: aggregate INCR/s with groups = N / with groups = 1 (3 nodes)",
    "cluster.p16.per_primary.groups_ratio": "the same, each client on one primary (batches not split by primary)",
    "cluster.p1.projected4": "cluster INCR -P 1 projected to 4 cores for 4 nodes: 4 x INCR/s per core / redis-server's",
    "cluster.p16.projected4": "the same at -P 16 (batches split by primary)",
}
DOCUMENTS = ("README.md", "clients/python/README.md")
BEGIN = "<!-- bench-report: begin (scripts/bench --write-readme replaces this block) -->"
END = "<!-- bench-report: end -->"
CLUSTER_BEGIN = "<!-- bench-cluster: begin (scripts/bench --write-readme replaces this block after a cluster run) -->"
CLUSTER_END = "<!-- bench-cluster: end -->"
# key -> its goal, as written in the figures table (issue 27's table: march_harness.bench.goals)
GOALS = {g.key: g.goal_text({}) for g in goals.GOALS} | {
    "cluster.p1.projected4": ">= 1.5",  # "a one-machine cluster on >= 4 cores gives >= 1.5x one redis-server's INCR/s"
    "cluster.p16.projected4": ">= 1.5",
}


@dataclass(frozen=True)
class Quoted:
    key: str
    value: float
    path: Path
    line: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def quoted_figures(root: Path, documents: tuple[str, ...] = DOCUMENTS) -> list[Quoted]:
    """Every marked figure of the documents, in order; an unknown key is an error (a typo would
    otherwise never be checked)."""
    out: list[Quoted] = []
    for name in documents:
        path = root / name
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for m in MARKER.finditer(line):
                if m["key"] not in KEYS and m["key"] not in CLUSTER_KEYS:
                    known = ", ".join([*KEYS, *CLUSTER_KEYS])
                    raise ValueError(f"{name}:{n}: unknown bench key {m['key']!r}; known: {known}")
                out.append(Quoted(m["key"], float(m["value"].replace(",", "").replace("_", "")), Path(name), n))
    return out


def report(quoted: list[Quoted], measured: dict[str, float]) -> list[str]:
    """One line per quoted figure: today's value and its ratio to the quote."""
    lines = [f"{'figure':<24}{'quoted':>16}{'today':>16}{'ratio':>8}  where"]
    for q in quoted:
        now = measured.get(q.key)
        if now is None:
            lines.append(f"{q.key:<24}{q.value:>16,.3f}{'not measured':>16}{'':>8}  {q.where}")
            continue
        ratio = now / q.value if q.value else float("nan")
        lines.append(f"{q.key:<24}{_fmt(q.value):>16}{_fmt(now):>16}{ratio:>8.2f}  {q.where}")
    return lines


def _fmt(x: float) -> str:
    return f"{x:,.3f}" if x < 100 else f"{x:,.0f}"


def figures_table(measured: Mapping[str, float], keys: Mapping[str, str] = KEYS) -> list[str]:
    """A Markdown table of every figure of ``keys``: what it is, today's value with its marker, the goal."""
    lines = ["| figure | value | goal |", "|---|---|---|"]
    for key, what in keys.items():
        if key in measured:
            shown = _fmt(measured[key])
            value = f"{shown} <!-- bench: {key} {shown.replace(',', '_')} -->"
        else:
            value = "not measured"
        lines.append(f"| {what} | {value} | {GOALS.get(key, '')} |")
    return lines


def replace_block(text: str, block: list[str], begin: str = BEGIN, end: str = END) -> str:
    """``text`` with the lines between ``begin`` and ``end`` replaced by ``block``."""
    at, stop = text.find(begin), text.find(end)
    if at < 0 or stop < at:
        raise ValueError(f"no generated block: expected {begin!r} ... {end!r}")
    return text[: at + len(begin)] + "\n" + "\n".join(block) + "\n" + text[stop:]
