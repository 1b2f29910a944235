"""What one benchmark setting measured, and the small pure helpers of the report: medians,
throughput and latency ratios, the machine's line (cores, load), the open-file limit that -c 1000
needs, the JSON line a measuring script prints.

Pure (no server, no load), so that tests/test_bench.py checks it quickly; scripts/bench.py runs the
loads and prints.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
from dataclasses import dataclass, field

from benchlib.redisbench import Run

NOFILE_MARGIN = 256  # descriptors beyond one per client: the servers' own files, logs, the store


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
    """Today's value of every ``benchlib.readme.KEYS`` figure among what a run measured."""
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
                _put(out, "incr.c50.p16.floor_ratio", m.ratio("sqlite", "floor"))
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
