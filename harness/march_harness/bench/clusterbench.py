"""scripts/bench's cluster target: aggregate INCR/s of a local March cluster with one leadership
group and with N, side by side in one run.

Two clusters of `nodes` nodes each (default 3) on one local etcd (`Targets.start_clusters`), one
started with `--groups 1` and one with `--groups N` (default 3: one group per node, each node the
primary of its share, which is what C cores running C nodes want). Both run at once and rounds
alternate between them (the order reversed every other round), so that drift on the machine hits
both alike. Every key of the keyspace is created first (`clusterload.prefill`): the runs measure
INCR, not sequence creation. Each run is `clusterload.run_load`: random keys over every slot,
each INCR sent to its slot's primary, from one generator process per core by default; a batch
is split by primary (`--cluster-pipelines`, as a cluster client's pipeline), and, for the depths
of `--cluster-per-primary` (default 16), also run with each client on one primary and its batches
never split (redis-benchmark `--cluster`'s way): the difference is what splitting costs.

Cores: each run also reads the CPU time (utime + stime, /proc) of each side's server processes
before and after it; cores used = CPU seconds / the run's seconds, and the per-core efficiency is
the aggregate INCR/s / cores used. The same load also runs against one redis-server (same ACL user,
every key on it: one range of all slots), alternating with the clusters, so that its INCR/s per
core, the most one redis-server makes on its one command thread, is the denominator of the
projection to a machine with cores for the nodes (`ClusterRow.projected`, docs/performance.md).

The report (`measured.ClusterReport`): per pipeline depth the median aggregate INCR/s of each
cluster and their ratio, the cores used and INCR/s per core of each side, the projection, the
machine's cores and load, each cluster's slot ranges and primaries,
a note when a cluster does not have the layout asked (e.g. a build where `--groups` has no
effect), and the sentence saying that on a machine with fewer cores than nodes + generator
processes the gain is bounded by the generator. Never asserts a speed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from march_harness.bench import readme
from march_harness.bench.clusterload import LoadSpec, SlotRange, prefill, run_load
from march_harness.bench.creation import cpu_seconds
from march_harness.bench.measured import ClusterReport, ClusterRow, Measured, Setting, machine_line
from march_harness.bench.redisbench import INCR, Run
from march_harness.bench.targets import PASSWORD, USER, ClusterTarget, Targets

ONE, MANY = "cluster-1", "cluster-n"  # the two clusters' names (targets' and the report's columns)
TITLE = "cluster INCR"
TITLE_PER_PRIMARY = "cluster INCR, client per primary"
GROUPS = 3  # N: one group per node of the 3-node cluster, each node the primary of one
REDIS = "redis"  # the reference side: one redis-server under the same load
ALL_SLOTS = (0, 16383)


@dataclass
class Side:
    """What one run loads: a cluster or the redis-server, its slot map and its server processes."""

    name: str
    label: str
    ranges: list[SlotRange]
    pids: list[int]


def _cluster_side(c: ClusterTarget) -> Side:
    return Side(c.name, c.label, c.ranges, [n.pid for n in c.cluster.nodes])


def add_options(ap: argparse.ArgumentParser) -> None:
    """scripts/bench's options of the cluster target."""
    ap.add_argument("--no-cluster", action="store_true", help="leave the cluster target out")
    ap.add_argument("--cluster-groups", type=int, default=GROUPS, help=f"N of groups = 1 vs N (default {GROUPS})")
    ap.add_argument("--cluster-nodes", type=int, default=3, help="march nodes per cluster (default 3)")
    ap.add_argument("--cluster-clients", type=int, default=50, help="clients of the cluster load, in all (default 50)")
    ap.add_argument("--cluster-pipelines", help="comma-separated -P of the cluster runs (default: --pipelines)")
    ap.add_argument(
        "--cluster-processes",
        type=int,
        default=os.cpu_count() or 1,
        help=f"load generator processes (default: one per core, {os.cpu_count()})",
    )
    ap.add_argument(
        "--cluster-per-primary",
        default="16",
        help="-P of cluster runs with each client on one primary, batches not split ('' for none; default 16)",
    )
    ap.add_argument("--cluster-seconds", type=float, help="length of one cluster run (default: --seconds)")
    ap.add_argument(
        "--cluster-keyspace", type=int, default=10_000, help="random keys drawn from this many names (default 10000)"
    )


def finish_options(args: argparse.Namespace) -> None:
    """The cluster options' lists parsed and their defaults taken from the bench's (after --quick)."""
    given = args.cluster_pipelines
    args.cluster_pipelines = [int(p) for p in given.split(",")] if given else list(args.pipelines)
    args.cluster_per_primary = [int(p) for p in args.cluster_per_primary.split(",") if p.strip()]
    args.cluster_seconds = args.cluster_seconds or args.seconds


def png_path(png: Path) -> Path:
    """The cluster chart, beside the main one."""
    return png.with_name(f"{png.stem}-cluster.png")


def readme_block(report: ClusterReport, started: str, png: Path, root: Path) -> list[str]:
    """README.md's cluster block: the command, date and load, the report, its figures, its chart."""
    command = shlex.join(["scripts/bench", *sys.argv[1:]])  # an empty argument shows as ''
    when = time.strftime("%Y-%m-%d", time.gmtime())
    out = ["", f"`{command}`, {when}; at the start {started}, at the end {machine_line()}:", ""]
    out += ["```", *report.lines(), "```", ""]
    out += [*readme.figures_table(report.figures(), readme.CLUSTER_KEYS), ""]
    if png.resolve().is_relative_to(root):
        out.append(f"![scripts/bench: the cluster target]({png.resolve().relative_to(root)})")
    return [*out, ""]


def run(args: argparse.Namespace, targets: Targets) -> tuple[list[Measured], ClusterReport]:
    """Start both clusters, prefill, measure every pipeline depth; print each block as it goes."""
    a = args
    print(
        f"\n== cluster: {a.cluster_nodes} nodes on one etcd, groups = 1 vs groups = {a.cluster_groups}, "
        f"load from {a.cluster_processes} processes (march_harness.bench.clusterload)",
        flush=True,
    )
    clusters = targets.start_clusters({ONE: 1, MANY: a.cluster_groups}, a.cluster_nodes)
    redis = targets.started.get(REDIS) or targets.start(REDIS)
    sides = [_cluster_side(c) for c in clusters]
    sides.append(Side(REDIS, redis.label, [SlotRange(*ALL_SLOTS, "127.0.0.1", redis.port)], [redis.server.pid]))
    base = LoadSpec(a.cluster_processes, a.cluster_clients, 1, a.cluster_seconds, a.cluster_keyspace, USER, PASSWORD)
    report = ClusterReport(
        cores=os.cpu_count() or 1, load=os.getloadavg(), nodes=a.cluster_nodes, groups=a.cluster_groups,
        processes=min(a.cluster_processes, a.cluster_clients), clients=a.cluster_clients,
        keyspace=a.cluster_keyspace, rounds=a.rounds, seconds=a.cluster_seconds,
    )  # fmt: skip
    for c in clusters:
        report.layouts[f"groups = {c.groups}"] = c.layout()
        if c.note:
            report.notes.append(f"groups = {c.groups}: {c.note}")
        refused = prefill(c.ranges, base)
        if refused:
            raise SystemExit(f"{c.label}: error replies while creating the keys: {refused}")
        print(f"  {c.label}: primaries {c.layout()}{'; ' + c.note if c.note else ''}", flush=True)
    refused = prefill(sides[-1].ranges, base)
    if refused:
        raise SystemExit(f"{redis.label}: error replies while creating the keys: {refused}")
    results = []
    errors: Counter[str] = Counter()
    settings = [(p, False) for p in a.cluster_pipelines] + [(p, True) for p in a.cluster_per_primary]
    for p, per_primary in settings:
        title = TITLE_PER_PRIMARY if per_primary else TITLE
        # per_primary with one redis-server is the plain load: every client on the one primary
        m, cores = _measure(Setting(title, a.cluster_clients, p, {s.name: INCR for s in sides}, a.cluster_keyspace),
                            sides, replace(base, pipeline=p, per_primary=per_primary), a.rounds, errors)  # fmt: skip
        results.append(m)
        row = ClusterRow(p, m.median(ONE).rps, m.median(MANY).rps, per_primary, cores[ONE], cores[MANY],
                         m.median(REDIS).rps, cores[REDIS])  # fmt: skip
        report.rows.append(row)
        ratio = f"groups = {a.cluster_groups} / groups = 1 aggregate INCR/s at {row.label}: {row.ratio:.2f}"
        per_core = (
            f"INCR/s per core used: groups = 1 {row.per_core_one:,.0f} ({row.cores_one:.2f} cores), "
            f"groups = {a.cluster_groups} {row.per_core_n:,.0f} ({row.cores_n:.2f} cores), "
            f"redis-server {row.per_core_redis:,.0f} ({row.cores_redis:.2f} cores)"
        )
        print(f"  {ratio}; {per_core}", flush=True)
    report.errors = dict(errors)
    report.load = os.getloadavg()
    return results, report


def _measure(
    setting: Setting, sides: list[Side], spec: LoadSpec, rounds: int, errors: Counter[str]
) -> tuple[Measured, dict[str, float]]:
    """``rounds`` rounds alternating between the sides; the Measured and each side's median cores used."""
    runs: dict[str, list[Run]] = {s.name: [] for s in sides}
    cores: dict[str, list[float]] = {s.name: [] for s in sides}
    ok: dict[str, int] = dict.fromkeys(runs, 0)
    for r in range(rounds):
        for side in sides if r % 2 == 0 else sides[::-1]:
            cpu = sum(cpu_seconds(pid) for pid in side.pids)
            res = run_load(side.ranges, spec)
            cpu = sum(cpu_seconds(pid) for pid in side.pids) - cpu
            runs[side.name].append(Run(res.rps, res.p50, res.p99, res.p999, res.max))
            cores[side.name].append(cpu / res.seconds if res.seconds else 0.0)
            ok[side.name] += res.ok
            errors.update(res.errors)
    m = Measured(setting, {n: ok[n] // max(1, rounds) for n in runs}, runs)  # requests: replies per round
    _print_block(m, sides)
    return m, {n: statistics.median(c) for n, c in cores.items()}


def _print_block(m: Measured, clusters: list[Side]) -> None:
    s = m.setting
    print(f"\n{s.label}: median of {len(next(iter(m.runs.values())))} rounds", flush=False)
    print(f"  {'cluster':<26}{'replies':>12}{'INCR/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'p99.9 ms':>9}   rounds (INCR/s)")
    for c in clusters:
        med, each = m.median(c.name), " ".join(f"{x.rps:.0f}" for x in m.runs[c.name])
        print(
            f"  {c.label:<26}{m.requests[c.name]:>12,}{med.rps:>12,.0f}{med.p50:>9.3f}{med.p99:>9.3f}"
            f"{med.p999:>9.3f}   {each}",
            flush=True,
        )
