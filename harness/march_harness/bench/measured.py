"""What one benchmark setting measured, and the small pure helpers of the report: medians and
spreads (min-max over the rounds), throughput and latency ratios (of medians, and round by round),
the machine's line (cores, load) and its warning when the machine is busy, the open-file limit that
-c 1000 needs, the JSON line a measuring script prints.

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
# Load average per core above which the figures are not a quiet machine's: at 0.5 a core (1.0 on a
# 2-core box) other work takes about half of what the servers and redis-benchmark would share.
BUSY_LOAD_PER_CORE = 0.5


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

    def spread(self, name: str, figure: str = "rps") -> tuple[float, float]:
        """(min, max) of ``figure`` over the rounds of ``name``."""
        values = [getattr(r, figure) for r in self.runs[name]]
        return min(values), max(values)

    def round_ratios(self, name: str, to: str = "redis", figure: str = "rps") -> list[float]:
        """``figure`` of ``name`` / that of ``to``, round by round (the rounds ran back to back in
        alternating order, so each pair saw the same machine); empty if either was not measured."""
        if to not in self.runs or name not in self.runs:
            return []
        pairs = zip(self.runs[name], self.runs[to], strict=False)
        return [getattr(a, figure) / getattr(b, figure) for a, b in pairs if getattr(b, figure)]

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


def load_warning(cores: int | None = None, load: float | None = None) -> str | None:
    """A warning when the 1-minute load average is above ``BUSY_LOAD_PER_CORE`` a core, else None."""
    cores = cores or os.cpu_count() or 1
    load = os.getloadavg()[0] if load is None else load
    limit = BUSY_LOAD_PER_CORE * cores
    if load <= limit:
        return None
    return (
        f"WARNING: load average {load:.2f} is above {limit:g} on {cores} cores: other work shares the "
        "cores, so every figure is lower and noisier than on a quiet machine (compare ratios within this run)"
    )


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


NEW_SEQUENCES = "new sequences"  # the creation settings' titles: INCR on a fresh name, on an existing one
EXISTING_SEQUENCES = "existing sequences"
FLOOD = "new-key INCR under flood"  # march_harness.bench.flood's setting (one client, one round trip each)


def readme_figures(
    results: list[Measured], client_rates: dict[str, float], memory: dict[str, float], incrby_batch: int
) -> dict[str, float]:
    """Today's value of every ``march_harness.bench.readme.KEYS`` figure among what a run measured
    (all but the 1,000,000-sequence node's, which scripts/bench.py adds)."""
    return {k: v for k, (v, _) in figures_with_spread(results, client_rates, memory, incrby_batch).items()}


Spread = tuple[float, float] | None  # (min, max) over the rounds; None: one figure, no rounds


def figures_with_spread(
    results: list[Measured], client_rates: dict[str, float], memory: dict[str, float], incrby_batch: int
) -> dict[str, tuple[float, Spread]]:
    """``readme_figures`` with each figure's spread: a ratio's min-max over the rounds' own ratios
    (each round's pair ran back to back), a rate's or a latency's min-max over the rounds."""
    out: dict[str, tuple[float, Spread]] = {f"prefetch.{m}": (r, None) for m, r in client_rates.items()}
    for key, name in (("memory.created", "created_bytes_per_seq"), ("memory.touched", "touched_bytes_per_seq")):
        if name in memory:
            out[key] = (memory[name], None)
    by_title = {m.setting.title: m for m in results if m.setting.clients == 32}
    for m in results:
        s = m.setting
        at = (s.title, s.clients, s.pipeline)
        if s.title == "INCR" and s.clients == 50 and s.pipeline in (1, 16):
            _put(out, f"incr.c50.p{s.pipeline}.ratio", m, "sqlite", "redis")
            if s.pipeline == 16:
                _put(out, "incr.c50.p16.baseline_ratio", m, "sqlite", "baseline")
        elif at == ("INCR", 1000, 1):
            _put(out, "tail.c1000.p99.ratio", m, "sqlite", "redis", "p99")
            if "sqlite" in m.runs:
                out["tail.c1000.p99.ms"] = (m.median("sqlite").p99, m.spread("sqlite", "p99"))
        elif at == (f"INCRBY ts {incrby_batch}", 50, 1) and "sqlite" in m.runs:
            lo, hi = m.spread("sqlite")
            out["incrby.ts.c50.p1.ids"] = (
                m.median("sqlite").rps * incrby_batch,
                (lo * incrby_batch, hi * incrby_batch),
            )
        elif s.title == FLOOD and "sqlite" in m.runs:
            out["flood.p99.ms"] = (m.median("sqlite").p99, m.spread("sqlite", "p99"))
        elif s.title == NEW_SEQUENCES and "sqlite" in m.runs:
            out["create.c32.rate"] = (m.median("sqlite").rps, m.spread("sqlite"))
            old = by_title.get(EXISTING_SEQUENCES)
            if old is not None and "sqlite" in old.runs:
                each = [a.rps / b.rps for a, b in zip(m.runs["sqlite"], old.runs["sqlite"], strict=False) if b.rps]
                ratio = m.median("sqlite").rps / old.median("sqlite").rps
                out["create.ratio"] = (ratio, (min(each), max(each)) if each else None)
    return out


def _put(out: dict[str, tuple[float, Spread]], key: str, m: Measured, name: str, to: str, figure: str = "rps") -> None:
    """``key``: the ratio of medians of ``figure``, with the round-by-round ratios' min-max."""
    value = m.ratio(name, to) if figure == "rps" else m.latency_ratio(name, to, figure)
    if value is not None:
        each = m.round_ratios(name, to, figure)
        out[key] = (value, (min(each), max(each)) if each else None)


def million_figures(result: dict[str, object]) -> dict[str, float]:
    """The ``million.*`` figures from ``march_harness.bench.million.measure``'s dict: takeover in
    seconds (``takeover_seconds``), the lease TTL (``lease_ttl``), RSS (``rss_bytes`` or ``rss_mb``)."""
    out = {}
    for key, names, scale in (
        ("million.takeover.s", ("takeover_seconds", "takeover_s"), 1.0),
        ("million.lease_ttl.s", ("lease_ttl", "lease_ttl_seconds", "ttl", "ttl_s"), 1.0),
        ("million.rss.mb", ("rss_mb",), 1.0),
        ("million.rss.mb", ("rss_bytes",), 1 / 1e6),
    ):
        for name in names:
            value = result.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[key] = float(value) * scale
                break
    return out


PROJECTED_CORES = 4  # the cores of the goal "a one-machine cluster on >= 4 cores gives >= 1.5x redis-server"
PROJECTED_GOAL = 1.5  # that goal: aggregate INCR/s / one redis-server's


@dataclass(frozen=True)
class ClusterRow:
    """One cluster setting: the median aggregate INCR/s with one group and with N, and their ratio;
    the cores each side used (its nodes' CPU seconds / the run's seconds, median over the rounds),
    and the same load on one redis-server (0: not measured)."""

    pipeline: int
    rps_one: float
    rps_n: float
    per_primary: bool = False  # each client on one primary (batches never split), not split by primary
    cores_one: float = 0.0
    cores_n: float = 0.0
    rps_redis: float = 0.0
    cores_redis: float = 0.0

    @property
    def per_core_one(self) -> float:
        """Aggregate INCR/s / cores used (0: not measured)."""
        return self.rps_one / self.cores_one if self.cores_one else 0.0

    @property
    def per_core_n(self) -> float:
        return self.rps_n / self.cores_n if self.cores_n else 0.0

    @property
    def per_core_redis(self) -> float:
        return self.rps_redis / self.cores_redis if self.cores_redis else 0.0

    @property
    def projected(self) -> float | None:
        """On ``PROJECTED_CORES`` cores for the nodes (the load elsewhere), groups = one per core:
        ``PROJECTED_CORES`` x the N-group cluster's INCR/s per core, over one redis-server's best
        (one core: redis-server runs commands on one thread), i.e. its INCR/s per core. None
        without both figures."""
        if not self.per_core_n or not self.per_core_redis:
            return None
        return PROJECTED_CORES * self.per_core_n / self.per_core_redis

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
            f"{'setting':<48}{'groups = 1':>14}{n:>14}{'ratio':>8}   INCR/s per core used (cores used): "
            f"groups = 1, {n}, redis-server",
        ]
        for r in self.rows:
            label = f"cluster INCR -c {self.clients} {r.label}"
            per_core = ", ".join(
                f"{rate:,.0f} ({cores:.2f})" if cores else "-"
                for rate, cores in (
                    (r.per_core_one, r.cores_one),
                    (r.per_core_n, r.cores_n),
                    (r.per_core_redis, r.cores_redis),
                )
            )
            out.append(f"{label:<48}{r.rps_one:>14,.0f}{r.rps_n:>14,.0f}{r.ratio:>8.2f}   {per_core}")
        for r in self.rows:
            if r.projected is not None:
                out.append(
                    f"projected at {r.label} on {PROJECTED_CORES} cores for the nodes ({PROJECTED_CORES} nodes, "
                    f"groups = {PROJECTED_CORES}, the load elsewhere): {PROJECTED_CORES} x {r.per_core_n:,.0f} INCR/s "
                    f"per core / redis-server's {r.per_core_redis:,.0f} per core (its one core) = "
                    f"{r.projected:.2f}x one redis-server (goal >= {PROJECTED_GOAL}x, ACL + TLS + metrics on)"
                )
        out += [f"{k}: primaries {v}" for k, v in self.layouts.items()]
        out += [f"note: {x}" for x in self.notes]
        if self.errors:
            out.append(f"error replies during the runs: {self.errors}")
        return [*out, self.shared_cores()]

    def figures(self) -> dict[str, float]:
        """The cluster keys of ``march_harness.bench.readme.CLUSTER_KEYS`` this report has."""
        out = {r.key: r.ratio for r in self.rows if r.pipeline in (1, 16)}
        for r in self.rows:
            if r.pipeline in (1, 16) and not r.per_primary and r.projected is not None:
                out[f"cluster.p{r.pipeline}.projected{PROJECTED_CORES}"] = r.projected
        return out
