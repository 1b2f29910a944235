"""One redis-benchmark run, parsed: throughput and latency percentiles.

redis-benchmark 7 has two outputs. `--csv` gives rps and avg/min/p50/p95/p99/max, no p99.9. The
plain output (used here) has the same "Summary" and, above it, "Latency by percentile
distribution": HdrHistogram lines `99.902% <= 3.839 milliseconds (cumulative count ...)`, the
percentile step halving towards 100%. p99.9 is read from the first line at or above 99.9%
(the smallest latency that at least 99.9% of requests stayed within), with `--precision 3` so
that it has microseconds. Latency is per request as redis-benchmark measures it: with `-P 16`
that is the time of the pipelined batch the request was in.

Never run against a server this process did not start (the callers pass their own ports).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

INCR = ("INCR",)  # redis-benchmark's own INCR test (-t incr) on its default key
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


def command_line(port: int, clients: int, pipeline: int, requests: int, command: tuple[str, ...]) -> list[str]:
    cmd = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "--precision", "3"]
    cmd += ["-c", str(clients), "-P", str(pipeline), "-n", str(requests)]
    return cmd + (["-t", "incr"] if command == INCR else list(command))


def parse(text: str) -> Run:
    """The figures of one test in redis-benchmark's plain output (progress lines end in \\r)."""
    text = text.replace("\r", "\n")
    tput, summary = _THROUGHPUT.search(text), _SUMMARY.search(text)
    if tput is None or summary is None:
        raise BenchmarkFailed(f"no summary in redis-benchmark output:\n{text[-2000:]}")
    p999 = next((float(ms) for pct, ms in _PERCENTILE.findall(text) if float(pct) >= 99.9), float(summary[6]))
    return Run(rps=float(tput[1]), p50=float(summary[3]), p99=float(summary[5]), p999=p999, max=float(summary[6]))


def run(
    port: int,
    clients: int,
    pipeline: int,
    requests: int,
    command: tuple[str, ...] = INCR,
    during: Callable[[], None] | None = None,
) -> Run:
    """Run redis-benchmark to the end; ``during`` is called once while it runs (e.g. a scrape)."""
    cmd = command_line(port, clients, pipeline, requests, command)
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


def requests_for(port: int, clients: int, pipeline: int, seconds: float, command: tuple[str, ...] = INCR) -> int:
    """Calibrate: enough requests for about ``seconds`` of load on this server (a short probe first)."""
    probe = run(port, clients, pipeline, max(2_000, 200 * clients) if pipeline == 1 else 50_000, command)
    n = max(5_000, min(50_000_000, int(probe.rps * seconds)))
    # A whole number of pipelines per client: redis-benchmark can end a run whose -n leaves a partial
    # last pipeline with "All clients disconnected... aborting." (seen with -c 1 -P 16).
    step = clients * pipeline
    return -(-n // step) * step
