"""New sequences created per second by a real March server on SQLite, measured from outside.

    python -m march_harness.bench.creation [--requests 100000] [--clients 32] [--repeat 1]

prints one JSON object: ``creations_per_second`` and ``server_cpu_us_per_creation`` (the server
process's CPU time, all threads, over the run, per sequence created: steadier than the rate on a
busy machine), the medians over ``--repeat`` runs (each run listed), with the client count and
the requests per run.

Method: one March server on SQLite started here (loopback, throwaway data dir, defaults: every
write durable before its reply). ``redis-benchmark -c CLIENTS -n REQUESTS -r 100000000 INCR
key:__rand_int__`` sends INCRs on random names: an INCR on an unknown key creates it (auto_create,
on by default), and with 10^8 names nearly every request creates a new sequence. The rate is the
number of sequences that exist afterwards (DBSIZE, so a repeated name is not counted twice)
divided by redis-benchmark's run time (requests / its requests per second). Each run uses a
fresh server. Every process started here is stopped at the end, whatever happened. Never asserts
anything about speed: it measures and prints.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from march_harness.bench import redisbench
from march_harness.servers import MarchServer

NAMES = 100_000_000  # redis-benchmark's -r: random names drawn from this many (repeats are rare)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(base: Path, requests: int, clients: int) -> tuple[float, float]:
    """(creations per second, server CPU microseconds per creation)."""
    server = MarchServer.in_dir(base)
    try:
        server.start()
        assert server.proc is not None
        command = ("-r", str(NAMES), "INCR", "key:__rand_int__")
        cpu = cpu_seconds(server.proc.pid)
        run = redisbench.run(server.port, clients, 1, requests, command)
        cpu = cpu_seconds(server.proc.pid) - cpu
        with server.conn() as conn:
            created = conn.call("DBSIZE")
        assert isinstance(created, int), created
    finally:
        server.stop()
    return created / (requests / run.rps), cpu / created * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=1, help="runs (each on a fresh server); the median is printed")
    args = parser.parse_args(argv)
    runs = []
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="march-creation-") as tmp:
            runs.append(measure(Path(tmp) / f"run{i}", args.requests, args.clients))
    out = {
        "creations_per_second": round(statistics.median(r for r, _ in runs)),
        "server_cpu_us_per_creation": round(statistics.median(c for _, c in runs)),
        "clients": args.clients,
        "requests": args.requests,
        "runs": [[round(r), round(c)] for r, c in runs],
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
