"""INCR benchmark: march (sqlite store) and a real redis-server side by side, same machine, same run.

Both servers run on free loopback ports with throwaway data; redis-benchmark hits one hot key
(`-t incr`) with `-c` clients at each pipeline depth, alternating between the two servers
round by round, so drift on the machine hits both alike. Reports the median throughput, p50
and p99 per server and the march/redis throughput ratio. Run it through scripts/bench.

Then the same for a timestamp key (snowflake preset): march `INCR ts` next to redis-server's
`INCR ts`, and `INCRBY ts 1000` on both, reported also as IDs per second (the issue's bar:
more than 4,096,000 snowflake IDs per second, the most a snowflake library makes on one node).
`--no-timestamp` skips this part.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.servers import MarchServer, RedisServer  # noqa: E402

BARS = {1: 0.8, 16: 0.5}  # the acceptance bar for the march/redis throughput ratio
SNOWFLAKE_BAR = 4_096_000  # IDs/s: 4096 per millisecond, a snowflake library's ceiling on one node
INCRBY_BATCH = 1000
INCR = ("INCR",)  # redis-benchmark's own INCR test (-t incr) on its default key


def redis_benchmark(
    port: int, clients: int, pipeline: int, requests: int, command: tuple[str, ...] = INCR
) -> dict[str, float]:
    cmd = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "--csv"]
    cmd += ["-c", str(clients), "-P", str(pipeline), "-n", str(requests)]
    cmd += ["-t", "incr"] if command == INCR else list(command)
    out = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    if out.returncode != 0 or "error" in (out.stdout + out.stderr).lower():
        raise SystemExit(f"redis-benchmark failed on port {port}:\n{out.stdout}{out.stderr}")
    rows = [r for r in csv.DictReader(io.StringIO(out.stdout)) if r.get("test") == " ".join(command)]
    if not rows:
        raise SystemExit(f"no {' '.join(command)} row in redis-benchmark output:\n{out.stdout}")
    row = rows[0]
    return {"rps": float(row["rps"]), "p50": float(row["p50_latency_ms"]), "p99": float(row["p99_latency_ms"])}


def requests_for(port: int, clients: int, pipeline: int, seconds: float, command: tuple[str, ...] = INCR) -> int:
    """Calibrate: enough requests for about `seconds` of load on this server."""
    probe = redis_benchmark(port, clients, pipeline, 20_000 if pipeline == 1 else 100_000, command)
    return max(20_000, min(50_000_000, int(probe["rps"] * seconds)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds per server and setting (default 3)")
    ap.add_argument("--seconds", type=float, default=4.0, help="target length of one run (default 4)")
    ap.add_argument("--clients", type=int, default=50, help="redis-benchmark -c (default 50)")
    ap.add_argument("--pipelines", default="1,16", help="comma-separated -P values (default 1,16)")
    ap.add_argument("--no-timestamp", action="store_true", help="skip the timestamp-key runs")
    args = ap.parse_args()
    pipelines = [int(p) for p in args.pipelines.split(",")]

    def on_signal(signum: int, _frame: object) -> NoReturn:
        raise SystemExit(128 + signum)  # unwinds through `finally`, which stops both servers

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    with tempfile.TemporaryDirectory(prefix="march-bench-") as tmp:
        servers = {"march": MarchServer(Path(tmp) / "data"), "redis": RedisServer(Path(tmp) / "redis")}
        try:
            for s in servers.values():
                s.start()
            print(f"march on :{servers['march'].port} (sqlite, {tmp}/data), redis-server on :{servers['redis'].port}; "
                  f"{os.cpu_count()} CPUs; INCR on one key, -c {args.clients}, {args.rounds} rounds")  # fmt: skip
            for p in pipelines:
                report(p, args, servers)
            if not args.no_timestamp:
                with servers["march"].conn() as c:
                    c.call("SEQ.CREATE", "ts", "TIMESTAMP", "PRESET", "snowflake")
                for p in pipelines:
                    report(p, args, servers, ("INCR", "ts"), "timestamp INCR (snowflake) vs redis INCR")
                batch = ("INCRBY", "ts", str(INCRBY_BATCH))
                for p in pipelines:
                    rps = report(p, args, servers, batch, f"timestamp INCRBY ts {INCRBY_BATCH} vs redis INCRBY")
                    ids = rps * INCRBY_BATCH
                    verdict = "met" if ids > SNOWFLAKE_BAR else "NOT met"
                    print(f"  march snowflake IDs/s through INCRBY: {ids:,.0f} (bar > {SNOWFLAKE_BAR:,}: {verdict})")
        finally:
            for s in servers.values():
                s.stop()


def report(
    pipeline: int,
    args: argparse.Namespace,
    servers: dict[str, MarchServer | RedisServer],
    command: tuple[str, ...] = INCR,
    title: str = "INCR",
) -> float:
    """Run ``command`` on both servers, alternating, and print the medians; returns march's median rps."""
    n = {name: requests_for(s.port, args.clients, pipeline, args.seconds, command) for name, s in servers.items()}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
    order = list(servers)
    for r in range(args.rounds):
        for name in order if r % 2 == 0 else reversed(order):
            runs[name].append(redis_benchmark(servers[name].port, args.clients, pipeline, n[name], command))
    med = {name: {k: statistics.median(x[k] for x in rs) for k in ("rps", "p50", "p99")} for name, rs in runs.items()}
    ratio = med["march"]["rps"] / med["redis"]["rps"]
    print(f"\n{title} -c {args.clients} -P {pipeline}: median of {args.rounds} rounds")
    print(f"  {'server':<8}{'requests':>12}{'rps':>12}{'p50 ms':>9}{'p99 ms':>9}   rounds (rps)")
    for name, m in med.items():
        each = " ".join(f"{x['rps']:.0f}" for x in runs[name])
        print(f"  {name:<8}{n[name]:>12,}{m['rps']:>12,.0f}{m['p50']:>9.3f}{m['p99']:>9.3f}   {each}")
    bar = BARS.get(pipeline) if command == INCR else None
    verdict = "" if bar is None else f" (bar >= {bar}: {'met' if ratio >= bar else 'NOT met'})"
    print(f"  march/redis throughput ratio: {ratio:.3f}{verdict}")
    return med["march"]["rps"]


if __name__ == "__main__":
    main()
