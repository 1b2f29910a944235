"""The goals of issue 27's table, each a figure scripts/bench measures, and the verdict on one run:
met, NOT met, not measured, or not judged (a --quick run).

One row per line of the issue's table, in its order; a row names the `readme.KEYS` figures it
reads (a ratio, and for some a second figure shown beside it). Pure: no server, no load; the bench
measures and passes the figures in, this module only compares. Never a verdict on a figure the run
did not measure (it says "not measured"), and never a verdict on a --quick run (`NOT_JUDGED`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from march_harness.bench.measured import NOT_JUDGED, Spread

LEASE_TTL_KEY = "million.lease_ttl.s"  # the 1,000,000-sequence node's lease TTL: its takeover goal is TTL + 1 s
OPS: dict[str, Callable[[float, float], bool]] = {"<=": operator.le, ">=": operator.ge, "<": operator.lt}


@dataclass(frozen=True)
class Goal:
    row: str  # the row, short
    key: str  # the figure judged (a readme.KEYS key)
    op: str  # "<=", ">=" or "<"
    bound: float
    unit: str = ""  # shown after the value and the bound ("x", " B", " ms", " s", " MB")
    beside: str = ""  # another figure shown beside the value (e.g. the rate behind a ratio)
    bound_plus: str = ""  # a figure added to ``bound`` (the lease TTL of the takeover goal)

    def limit(self, figures: Mapping[str, float]) -> float | None:
        if not self.bound_plus:
            return self.bound
        extra = figures.get(self.bound_plus)
        return None if extra is None else self.bound + extra

    def goal_text(self, figures: Mapping[str, float]) -> str:
        limit = self.limit(figures)
        if self.bound_plus:
            ttl = "TTL" if limit is None else f"TTL + {self.bound:g} s = {limit:g}"
            return f"{self.op} {ttl}{self.unit if limit is not None else ' + 1 s'}"
        return f"{self.op} {self.bound:g}{self.unit}"

    def verdict(self, figures: Mapping[str, float], judged: bool) -> str:
        value, limit = figures.get(self.key), self.limit(figures)
        if value is None or limit is None:
            return "not measured"
        if not judged:
            return NOT_JUDGED
        return "met" if OPS[self.op](value, limit) else "NOT met"


GOALS = (
    Goal("p99 at -c 1000 -P 1, march ÷ redis-server", "tail.c1000.p99.ratio", "<=", 1.2, "x", "tail.c1000.p99.ms"),
    Goal("-c 50 -P 16 throughput, march ÷ python baseline", "incr.c50.p16.baseline_ratio", ">=", 1.1),
    Goal("-c 50 -P 16 throughput, march ÷ redis-server", "incr.c50.p16.ratio", ">=", 0.9),
    Goal("-c 50 -P 1 throughput, march ÷ redis-server", "incr.c50.p1.ratio", ">=", 1.1),
    Goal("RSS per sequence created (100 K)", "memory.created", "<=", 150, " B"),
    Goal("RSS per sequence touched after a restart", "memory.touched", "<=", 150, " B"),
    Goal("new sequences/s ÷ INCR/s on existing names (-c 32)", "create.ratio", ">=", 0.25, "", "create.c32.rate"),
    Goal("new-key INCR p99 while 20 connections flood", "flood.p99.ms", "<", 50, " ms"),
    Goal("1,000,000 sequences: takeover after kill -9", "million.takeover.s", "<=", 1, " s", "", LEASE_TTL_KEY),
    Goal("1,000,000 sequences: RSS", "million.rss.mb", "<=", 250, " MB"),
)


def bound(key: str) -> float:
    """The bound of the goal on ``key`` (a fixed one: not the takeover's, which adds the TTL)."""
    return next(g.bound for g in GOALS if g.key == key and not g.bound_plus)


BESIDE = {  # how a ``beside`` figure is shown
    "tail.c1000.p99.ms": "p99 {} ms",
    "create.c32.rate": "{}/s new",
}


def lines(figures: Mapping[str, float], spreads: Mapping[str, Spread], judged: bool) -> list[str]:
    """The goals table as text: row, median (and the rounds' min-max), goal, verdict."""
    out = [f"{'goal (issue 27)':<54}{'median':>10}  {'rounds min-max':<20}{'goal':<20}verdict"]
    for g in GOALS:
        value = figures.get(g.key)
        shown = "-" if value is None else f"{_fmt(value)}{g.unit}"
        rounds, verdict = _rounds_and_verdict(g, figures, spreads, judged)
        out.append(f"{g.row:<54}{shown:>10}  {rounds:<20}{g.goal_text(figures):<20}{verdict}")
    return out


def markdown(figures: Mapping[str, float], spreads: Mapping[str, Spread], judged: bool) -> list[str]:
    """The goals table as Markdown, each measured value with its ``<!-- bench: key value -->`` marker."""
    out = ["| goal (issue 27) | median | rounds min-max | goal | verdict |", "|---|---|---|---|---|"]
    for g in GOALS:
        value = figures.get(g.key)
        if value is None:
            shown = "not measured"
        else:
            v = _fmt(value)
            shown = f"{v}{g.unit} <!-- bench: {g.key} {v.replace(',', '_')} -->"
        rounds, verdict = _rounds_and_verdict(g, figures, spreads, judged)
        out.append(f"| {g.row} | {shown} | {rounds} | {g.goal_text(figures)} | {verdict} |")
    return out


def _rounds_and_verdict(
    g: Goal, figures: Mapping[str, float], spreads: Mapping[str, Spread], judged: bool
) -> tuple[str, str]:
    """A row's rounds min-max (blank without one) and its verdict, with the figure shown beside it if any."""
    spread = spreads.get(g.key)
    rounds = "" if spread is None else f"{_fmt(spread[0])}-{_fmt(spread[1])}"
    verdict = g.verdict(figures, judged)
    beside = figures.get(g.beside) if g.beside else None
    if beside is not None:
        verdict += f" ({BESIDE.get(g.beside, '{}').format(_fmt(beside))})"
    return rounds, verdict


def _fmt(x: float) -> str:
    return f"{x:,.3f}" if abs(x) < 10 else f"{x:,.1f}" if abs(x) < 100 else f"{x:,.0f}"
