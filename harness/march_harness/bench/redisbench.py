"""One redis-benchmark run, parsed: throughput and latency percentiles.

redis-benchmark 7 has three outputs. `--csv` gives rps and avg/min/p50/p95/p99/max, no p99.9;
`-q` one line of rps and p50. The plain output (used here) has the same "Summary" and, above it,
"Latency by percentile distribution": HdrHistogram lines `99.902% <= 3.839 milliseconds (cumulative count ...)`, the
percentile step halving towards 100%. p99.9 is read from the first line at or above 99.9%
(the smallest latency that at least 99.9% of requests stayed within), with `--precision 3` so
that it has microseconds. Latency is per request as redis-benchmark measures it: with `-P 16`
that is the time of the pipelined batch the request was in.

So the percentiles come from the plain output, not `--csv` (no p99.9) or `-q` (rps and p50
only; both checked with 7.0.15). The summary's p99 is the tail figure the bench reports at
`-c 1000`. Every run can authenticate (`--user`/`-a`, the `Auth` the targets share) and
draw random keys (`-r N`: `__rand_int__` in the command becomes a random number below N, what
the sequence creation rate uses: an INCR on a fresh name creates a sequence). redis-benchmark
reads N as a 32-bit int: 10**12 wraps to a single key, so N stays below 2**31.

Never run against a server this process did not start (the callers pass their own ports).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

INCR = ("INCR",)  # redis-benchmark's own INCR test (-t incr) on its default key
MAX_KEYSPACE = 2**31  # redis-benchmark reads -r as a C int
TIMEOUT = 600.0  # one run; the calibrated runs last seconds, so this only catches a hung server

_PERCENTILE = re.compile(r"^\s*([\d.]+)% <= ([\d.]+) milliseconds", re.MULTILINE)
_THROUGHPUT = re.compile(r"throughput summary: ([\d.]+) requests per second")
_SUMMARY = re.compile(
    r"avg\s+min\s+p50\s+p95\s+p99\s+max\s*\n\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"
)


@dataclass(frozen=True)
class Run:
    """One run's figures; latencies in milliseconds."""

    rps: float
    p50: float
    p99: float
    p999: float
    max: float

    FIELDS = ("rps", "p50", "p99", "p999", "max")


class BenchmarkFailed(RuntimeError):
    pass


@dataclass(frozen=True)
class Auth:
    """The user every connection of a run authenticates as."""

    user: str
    password: str


def command_line(
    port: int,
    clients: int,
    pipeline: int,
    requests: int,
    command: tuple[str, ...],
    auth: Auth | None = None,
    keyspace: int = 0,
) -> list[str]:
    cmd = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "--precision", "3"]
    cmd += ["-c", str(clients), "-P", str(pipeline), "-n", str(requests)]
    if auth is not None:
        cmd += ["--user", auth.user, "-a", auth.password]
    if keyspace:
        if not 0 < keyspace < MAX_KEYSPACE:
            raise ValueError(f"-r {keyspace}: redis-benchmark needs 0 < N < {MAX_KEYSPACE} (it wraps larger ones)")
        cmd += ["-r", str(keyspace)]
    return cmd + (["-t", "incr"] if command == INCR else list(command))


def parse(text: str) -> Run:
    """The figures of one test in redis-benchmark's plain output (progress lines end in \\r)."""
    text = text.replace("\r", "\n")
    tput, summary = _THROUGHPUT.search(text), _SUMMARY.search(text)
    if tput is None or summary is None:
        raise BenchmarkFailed(f"no summary in redis-benchmark output:\n{text[-2000:]}")
    # Only the "by percentile" block: the "Cumulative distribution" block below has the same line shape.
    _, found, rest = text.partition("Latency by percentile distribution:")
    by_pct = rest.split("Cumulative distribution", 1)[0] if found else ""
    p999 = next((float(ms) for pct, ms in _PERCENTILE.findall(by_pct) if float(pct) >= 99.9), float(summary[6]))
    return Run(rps=float(tput[1]), p50=float(summary[3]), p99=float(summary[5]), p999=p999, max=float(summary[6]))


def run(
    port: int,
    clients: int,
    pipeline: int,
    requests: int,
    command: tuple[str, ...] = INCR,
    during: Callable[[], None] | None = None,
    auth: Auth | None = None,
    keyspace: int = 0,
) -> Run:
    """Run redis-benchmark to the end; ``during`` is called once while it runs (e.g. a scrape)."""
    cmd = command_line(port, clients, pipeline, requests, command, auth, keyspace)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
    try:
        if during is not None:
            during()
        out, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0 or "error" in out.lower():
        raise BenchmarkFailed(f"redis-benchmark failed on port {port} ({' '.join(cmd)}):\n{out[-2000:]}")
    return parse(out)


def requests_for(
    port: int,
    clients: int,
    pipeline: int,
    seconds: float,
    command: tuple[str, ...] = INCR,
    auth: Auth | None = None,
    keyspace: int = 0,
) -> int:
    """Calibrate: enough requests for about ``seconds`` of load on this server (a short probe first)."""
    probe_n = min(max(2_000, 20 * clients), 50_000) if pipeline == 1 else 50_000  # 20 requests a client
    probe = run(port, clients, pipeline, probe_n, command, auth=auth, keyspace=keyspace)
    return requests_at(probe.rps, seconds, clients, pipeline)


def requests_at(rps: float, seconds: float, clients: int, pipeline: int) -> int:
    """``-n`` for about ``seconds`` at ``rps``: at least 5,000, at most 50 million."""
    n = max(5_000, min(50_000_000, int(rps * seconds)))
    # A whole number of pipelines per client: redis-benchmark can end a run whose -n leaves a partial
    # last pipeline with "All clients disconnected... aborting." (seen with -c 1 -P 16).
    step = clients * pipeline
    return -(-n // step) * step
