"""What one benchmark setting measured, and the small pure helpers of the report: medians,
throughput and latency ratios, the machine's line (cores, load), the open-file limit that -c 1000
needs, the JSON line a measuring script prints.

Pure (no server, no load), so that tests/harness/test_bench_library.py checks it quickly; scripts/bench.py runs the
loads and prints.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
from dataclasses import dataclass, field

from march_harness.bench.redisbench import Run

NOFILE_MARGIN = 256  # descriptors beyond one per client: the servers' own files, logs, the store
# A --quick run is one round of 0.25 s per setting: a smoke test of the whole bench. Its ratios swing
# by tens of percent with the machine (metrics on vs off once read -61.6%): none is held to a goal.
NOT_JUDGED = "not judged: a --quick run"


def verdict(met: bool, judged: bool) -> str:
    """``met`` / ``NOT met`` against a goal, or that a run too short to mean anything is not judged."""
    return ("met" if met else "NOT met") if judged else NOT_JUDGED


@dataclass
class Setting:
    title: str  # e.g. "INCR", "timestamp INCR"
    clients: int
    pipeline: int
    commands: dict[str, tuple[str, ...]]  # target name -> the command it runs
    keyspace: int = 0  # redis-benchmark's -r (0: none)

    @property
    def label(self) -> str:
        return f"{self.title} -c {self.clients} -P {self.pipeline}"


@dataclass
class Measured:
    setting: Setting
    requests: dict[str, int]
    runs: dict[str, list[Run]] = field(default_factory=dict)

    def median(self, name: str) -> Run:
        """Each figure's median over the rounds (figure by figure: not one round's)."""
        rs = self.runs[name]
        return Run(*(statistics.median(getattr(r, f) for r in rs) for f in Run.FIELDS))

    def ratio(self, name: str, to: str = "redis") -> float | None:
        """Median throughput of ``name`` / that of ``to``; None if either was not measured."""
        if to not in self.runs or name not in self.runs or not self.runs[name] or not self.runs[to]:
            return None
        return self.median(name).rps / self.median(to).rps

    def latency_ratio(self, name: str, to: str = "redis", figure: str = "p99") -> float | None:
        """Median ``figure`` (p50, p99, p999) of ``name`` / that of ``to``: above 1 is slower."""
        if to not in self.runs or name not in self.runs or not self.runs[name] or not self.runs[to]:
            return None
        ref = getattr(self.median(to), figure)
        return getattr(self.median(name), figure) / ref if ref else None


def machine_line() -> str:
    """Cores and load average: a busy shared machine explains a low figure."""
    load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPUs, load average {load} (1/5/15 min)"


def nofile_needed(clients: int) -> int:
    return clients + NOFILE_MARGIN


def raise_nofile(clients: int) -> tuple[int, int]:
    """Raise the soft open-file limit (inherited by redis-benchmark and the servers) to what
    ``clients`` connections need, within the hard limit; returns (soft, hard) as it is now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = nofile_needed(clients)
    if soft != resource.RLIM_INFINITY and soft < want:
        soft = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft, hard


def last_json(text: str) -> dict[str, object]:
    """The last line of ``text`` that is a JSON object (a measuring script's result)."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    raise ValueError(f"no JSON object in: {text[-500:]!r}")


def readme_figures(
    results: list[Measured], client_rates: dict[str, float], memory: dict[str, float], incrby_batch: int
) -> dict[str, float]:
    """Today's value of every ``march_harness.bench.readme.KEYS`` figure among what a run measured."""
    out = {f"prefetch.{m}": r for m, r in client_rates.items()}
    for key, name in (("memory.created", "created_bytes_per_seq"), ("memory.touched", "touched_bytes_per_seq")):
        if name in memory:
            out[key] = memory[name]
    for m in results:
        s = m.setting
        at = (s.title, s.clients, s.pipeline)
        if s.title == "INCR" and s.clients == 50 and s.pipeline in (1, 16):
            _put(out, f"incr.c50.p{s.pipeline}.ratio", m.ratio("sqlite"))
            if s.pipeline == 16:
                _put(out, "incr.c50.p16.baseline_ratio", m.ratio("sqlite", "baseline"))
        elif at == ("INCR", 1000, 1):
            _put(out, "tail.c1000.p99.ratio", m.latency_ratio("sqlite", "redis", "p99"))
            if "sqlite" in m.runs:
                out["tail.c1000.p99.ms"] = m.median("sqlite").p99
        elif at == (f"INCRBY ts {incrby_batch}", 50, 1) and "sqlite" in m.runs:
            out["incrby.ts.c50.p1.ids"] = m.median("sqlite").rps * incrby_batch
        elif s.title == "new sequences" and "sqlite" in m.runs:
            out["create.c32.rate"] = m.median("sqlite").rps
    return out


def _put(out: dict[str, float], key: str, value: float | None) -> None:
    if value is not None:
        out[key] = value


@dataclass(frozen=True)
class ClusterRow:
    """One cluster setting: the median aggregate INCR/s with one group and with N, and their ratio."""

    pipeline: int
    rps_one: float
    rps_n: float
    per_primary: bool = False  # each client on one primary (batches never split), not split by primary

    @property
    def label(self) -> str:
        return f"-P {self.pipeline}{', client per primary' if self.per_primary else ''}"

    @property
    def key(self) -> str:
        return f"cluster.p{self.pipeline}{'.per_primary' if self.per_primary else ''}.groups_ratio"

    @property
    def ratio(self) -> float:
        return self.rps_n / self.rps_one if self.rps_one else float("nan")


@dataclass
class ClusterReport:
    """What the cluster target measured, with what it needs to be read: the machine's cores and
    load, the clusters' layouts, the generator's size, the errors (none on a stable cluster)."""

    cores: int
    load: tuple[float, float, float]
    nodes: int
    groups: int  # N, the groups of the second cluster
    processes: int  # load generator processes
    clients: int
    keyspace: int
    rounds: int
    seconds: float
    rows: list[ClusterRow] = field(default_factory=list)
    layouts: dict[str, str] = field(default_factory=dict)  # "groups = 1" -> "0-16383 n2"
    notes: list[str] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def shared_cores(self) -> str:
        """The sentence that says what bounds the gain on this machine."""
        if self.cores < self.nodes + self.processes:
            return (
                f"On this {self.cores}-core machine the load generator ({self.processes} processes) and the "
                f"{self.nodes} nodes share the cores, so the gain of groups = {self.groups} is bounded by the "
                "generator (its Python per request costs about what a node's does), not by the nodes."
            )
        return (
            f"This machine has {self.cores} cores: each of the {self.nodes} nodes and each of the "
            f"{self.processes} generator processes can have one of its own."
        )

    def lines(self) -> list[str]:
        load = "/".join(f"{x:.2f}" for x in self.load)
        n = f"groups = {self.groups}"
        out = [
            f"== cluster: aggregate INCR/s, {self.nodes} nodes on one etcd, groups = 1 vs {n}; "
            f"{self.cores} CPUs, load average {load} (1/5/15 min)",
            f"load: march_harness.bench.clusterload, {self.processes} processes, {self.clients} clients in all, "
            f"INCR on random keys of {self.keyspace:,} names (all slots), each sent to its slot's primary "
            "(a batch split by primary, as a cluster client's pipeline; 'client per primary': each client on "
            f"one primary with keys of its slots, as redis-benchmark --cluster); median of {self.rounds} rounds "
            f"of {self.seconds:g}s",
            f"{'setting':<48}{'groups = 1':>14}{n:>14}{'ratio':>8}",
        ]
        for r in self.rows:
            label = f"cluster INCR -c {self.clients} {r.label}"
            out.append(f"{label:<48}{r.rps_one:>14,.0f}{r.rps_n:>14,.0f}{r.ratio:>8.2f}")
        out += [f"{k}: primaries {v}" for k, v in self.layouts.items()]
        out += [f"note: {x}" for x in self.notes]
        if self.errors:
            out.append(f"error replies during the runs: {self.errors}")
        return [*out, self.shared_cores()]

    def figures(self) -> dict[str, float]:
        """The cluster keys of ``march_harness.bench.readme.CLUSTER_KEYS`` this report has."""
        return {r.key: r.ratio for r in self.rows if r.pipeline in (1, 16)}
