"""PNG reports drawn with matplotlib's Agg backend (no display needed): the benchmark's
throughput and latency per setting, its memory per sequence, and a drill's timeline.

Plotting only: the figures come in already measured (`BenchRow`, `march_harness.load.Timeline`);
nothing here runs a server or a load, and nothing here decides whether a bar was met.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: files only, never a window

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter

from march_harness.load import TimeSeries

# One colour per server, the same in every chart.
COLOURS = {
    "redis-server": "#d62728",
    "march sqlite": "#1f77b4",
    "march etcd": "#2ca02c",
    "march sqlite, metrics off": "#9467bd",
    "python baseline": "#ff7f0e",
}
FALLBACK = ("#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")


@dataclass(frozen=True)
class BenchRow:
    """One server at one setting: median throughput and latency percentiles (ms)."""

    setting: str  # e.g. "INCR -c 50 -P 16"
    server: str  # a label, e.g. "march sqlite"
    rps: float
    p50: float
    p99: float
    p999: float


def _colour(server: str, order: Sequence[str]) -> str:
    return COLOURS.get(server) or FALLBACK[order.index(server) % len(FALLBACK)]


def _plain_numbers(ax: Axes) -> None:
    """Log axes read as 0.5, 2, 300k, 1.2M instead of powers of ten."""

    def fmt(v: float, _pos: object) -> str:
        for div, suffix in ((1e6, "M"), (1e3, "k")):
            if v >= div:
                return f"{v / div:g}{suffix}"
        return f"{v:g}"

    ax.yaxis.set_major_formatter(FuncFormatter(fmt))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, p: fmt(v, p) if f"{v:.0e}"[0] in "25" else ""))


def bench_png(rows: Sequence[BenchRow], path: Path, title: str) -> Path:
    """Grouped bars per setting: throughput (top); p50, p99 and p99.9 nested in one bar per server
    (bottom: the darkest part is p50, the lightest p99.9). Both on log scales: -P 1 and -P 16 differ
    tenfold in throughput, and p99.9 can be a hundred times p50."""
    settings = list(dict.fromkeys(r.setting for r in rows))
    servers = list(dict.fromkeys(r.server for r in rows))
    by = {(r.setting, r.server): r for r in rows}
    width = 0.8 / max(1, len(servers))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(8.0, 1.1 * len(settings) + 3), 9), sharex=True)
    for i, server in enumerate(servers):
        xs = [x + (i - (len(servers) - 1) / 2) * width for x in range(len(settings))]
        present = [(x, by[(s, server)]) for x, s in zip(xs, settings, strict=True) if (s, server) in by]
        if not present:
            continue
        colour = _colour(server, servers)
        px, pr = [p[0] for p in present], [p[1] for p in present]
        top.bar(px, [r.rps for r in pr], width, label=server, color=colour)
        for alpha, field in ((0.25, "p999"), (0.55, "p99"), (1.0, "p50")):
            bottom.bar(px, [getattr(r, field) for r in pr], width, color=colour, alpha=alpha)
    top.set_ylabel("requests / s (median)")
    bottom.set_ylabel("latency ms: p50 (dark) / p99 / p99.9 (light)")
    for ax in (top, bottom):
        ax.set_yscale("log")
        _plain_numbers(ax)
        ax.grid(axis="y", which="both", alpha=0.3)
    fig.suptitle(title)
    # One legend above both panels: inside either it would hide bars.
    fig.legend(*top.get_legend_handles_labels(), loc="upper center", ncol=len(servers), bbox_to_anchor=(0.5, 0.96))
    bottom.set_xticks(range(len(settings)))
    bottom.set_xticklabels(settings, rotation=35, ha="right", fontsize="small")
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


MEMORY_BARS = {  # the memory script's figure -> its bar's label and colour
    "created_bytes_per_seq": ("march: created", "#1f77b4"),
    "touched_bytes_per_seq": ("march: touched after a restart", "#17becf"),
}


def memory_png(figures: dict[str, float], path: Path, title: str, goal: float | None = None) -> Path:
    """One bar per memory figure (bytes per sequence) of ``MEMORY_BARS`` that was measured, with
    the value written on it and ``goal`` as a dashed line."""
    shown = [(label, colour, figures[k]) for k, (label, colour) in MEMORY_BARS.items() if k in figures]
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = range(len(shown))
    ax.bar(xs, [v for _, _, v in shown], 0.6, color=[c for _, c, _ in shown])
    for x, (_, _, v) in zip(xs, shown, strict=True):
        ax.annotate(f"{v:,.0f} B", (x, v), ha="center", va="bottom", xytext=(0, 2), textcoords="offset points")
    if goal is not None:
        ax.axhline(goal, color="black", linestyle="--", linewidth=1, label=f"goal: {goal:g} B")
        ax.legend(fontsize="small", loc="upper right")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([label for label, _, _ in shown], fontsize="small")
    ax.set_ylabel("RSS bytes per sequence")
    ax.set_ylim(0, max([v for _, _, v in shown] + [goal or 0, 1]) * 1.12)  # room for the values on top
    ax.set_title(title, fontsize="medium")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def drill_png(timeline: TimeSeries, path: Path, title: str) -> Path:
    """IDs/s and errors per bucket (top), latency p50/p99/max per bucket (bottom, log scale), the
    drill's events (fault, new primary, first ID after recovery, ...) as labelled vertical lines."""
    b = timeline.buckets
    w = timeline.width
    t = [x.start for x in b]
    tail = [b[-1].start + w] if b else []  # a step plot needs the right edge of the last bucket
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7), sharex=True, height_ratios=(3, 2))
    rate = [x.ok / w for x in b]
    top.step(t + tail, rate + rate[-1:], where="post", color="#1f77b4", label="IDs/s")
    top.set_ylabel("successful INCRs / s", color="#1f77b4")
    top.set_ylim(bottom=0)
    errs = top.twinx()
    errs.bar(t, [x.errors for x in b], w, align="edge", color="#d62728", alpha=0.5, label="errors")
    errs.set_ylabel(f"errors per {w * 1000:g} ms", color="#d62728")
    errs.set_ylim(bottom=0, top=max([x.errors for x in b] + [1]) * 1.15)
    top.set_zorder(errs.get_zorder() + 1)  # the IDs/s line in front of the error bars
    top.patch.set_visible(False)
    top.set_title(title)
    for name, colour in (("p50", "#2ca02c"), ("p99", "#ff7f0e"), ("max", "#7f7f7f")):
        ys = [getattr(x, name) * 1000 if x.ok else float("nan") for x in b]
        bottom.step(t + tail, ys + ys[-1:], where="post", color=colour, label=f"{name} latency")
    bottom.set_yscale("log")
    _plain_numbers(bottom)
    bottom.set_ylabel("latency ms (by reply time)")
    bottom.set_xlabel("seconds since the load started")
    bottom.legend(fontsize="small", loc="upper right")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    span = (b[-1].start + w) if b else 1.0
    for i, ev in enumerate(timeline.events):
        for ax in (top, bottom):
            ax.axvline(ev.at, color="black", linestyle="--", linewidth=0.8)
        # Labels at staggered heights so that events close in time stay readable; on the right
        # half they extend to the left of their line, so that none runs off the chart.
        right = ev.at > span / 2
        top.annotate(
            f"{ev.label} ({ev.at:.3f}s)",
            (ev.at, 1 - 0.09 * (i % 5) - 0.02),
            xycoords=("data", "axes fraction"),
            fontsize="x-small",
            ha="right" if right else "left",
            va="top",
            xytext=(-3 if right else 3, 0),
            textcoords="offset points",
            bbox={"boxstyle": "round", "fc": "white", "alpha": 0.8, "lw": 0},
        )
    handles = top.get_legend_handles_labels()[0] + errs.get_legend_handles_labels()[0]
    top.legend(handles, [str(h.get_label()) for h in handles], fontsize="small", loc="lower left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def soak_png(timeline: TimeSeries, rss: dict[str, list[tuple[float, int]]], t0: float, path: Path, title: str) -> Path:
    """The soak's well-behaved clients (IDs/s and latency per bucket, as a drill's chart) above each
    node's resident memory (MB) over the same run; ``t0``: the monotonic second the load started,
    so that the RSS samples share the chart's time axis."""
    b = timeline.buckets
    w = timeline.width
    t = [x.start for x in b]
    tail = [b[-1].start + w] if b else []
    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(11, 9), sharex=True, height_ratios=(2, 2, 2))
    rate = [x.ok / w for x in b]
    top.step(t + tail, rate + rate[-1:], where="post", color="#1f77b4", label="IDs/s (well-behaved)")
    top.bar(t, [x.errors / w for x in b], w, align="edge", color="#d62728", alpha=0.5, label="errors/s")
    top.set_ylabel("per second")
    top.set_ylim(bottom=0)
    top.set_title(title)
    top.legend(fontsize="small", loc="lower left")
    for name, colour in (("p50", "#2ca02c"), ("p99", "#ff7f0e"), ("max", "#7f7f7f")):
        ys = [getattr(x, name) * 1000 if x.ok else float("nan") for x in b]
        middle.step(t + tail, ys + ys[-1:], where="post", color=colour, label=f"{name} latency")
    middle.axhline(50, color="#d62728", linestyle=":", linewidth=1, label="50 ms goal")
    middle.set_yscale("log")
    _plain_numbers(middle)
    middle.set_ylabel("latency ms")
    middle.legend(fontsize="small", loc="upper right")
    order = sorted(rss)
    for node in order:
        samples = rss[node]
        bottom.plot([s - t0 for s, _ in samples], [kb / 1024 for _, kb in samples], label=node,
                    color=_colour(node, order))  # fmt: skip
    bottom.set_ylabel("RSS MB")
    bottom.set_ylim(bottom=0)
    bottom.set_xlabel("seconds since the load started")
    bottom.legend(fontsize="small", loc="upper left")
    for ax in (top, middle, bottom):
        ax.grid(alpha=0.3)
        for ev in timeline.events:
            ax.axvline(ev.at, color="black", linestyle="--", linewidth=0.8)
    for ev in timeline.events:
        top.annotate(ev.label, (ev.at, 0.95), xycoords=("data", "axes fraction"), fontsize="x-small",
                     xytext=(3, 0), textcoords="offset points", va="top")  # fmt: skip
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
