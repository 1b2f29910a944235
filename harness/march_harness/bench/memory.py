"""Memory per sequence of a real March server, measured from outside (its RSS).

    python -m march_harness.bench.memory [--sequences 100000] [--name-len 12] [--repeat 1]

prints one JSON object: ``created_bytes_per_seq`` and ``touched_bytes_per_seq`` (the medians
over ``--repeat`` runs, each run also listed), the sequence count and the name length.

Method, on one March server on SQLite started here (loopback, throwaway data dir, defaults):

1. *created*: warm up (create ``WARMUP`` sequences, so that code paths, the allocator's arenas
   and the store's batchers exist before the baseline), read the RSS (``/proc/PID/status``
   VmRSS), create ``--sequences`` new sequences with pipelined ``INCR`` from redis-py (an INCR on
   an unknown key creates it) over ``CONNECTIONS`` connections, wait until the server's
   figures settle, read the RSS again: (after - before) / sequences.
2. *touched after a restart*: stop the server (SIGTERM), start it on the same data dir, warm up
   (touch the warm-up sequences), read the RSS, ``INCR`` every sequence of step 1 once
   (pipelined), read the RSS again: (after - before) / sequences. Each first INCR after a restart
   reads the sequence's record and persists a higher ceiling before its ID (DESIGN.md §1).

Names are ``s:`` plus a zero-padded number, ``--name-len`` bytes in all: a name's bytes are part
of what each sequence costs. Every process started here is stopped at the end, whatever happened.
Never asserts anything about memory: it measures and prints.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import redis

from march_harness.servers import MarchServer

WARMUP = 2000  # sequences made (and touched) before each baseline: first-use costs are not per sequence
PIPELINE = 100  # INCRs per pipelined round trip
CONNECTIONS = 32  # at once: new keys are created (and read after a restart) concurrently only across connections
SETTLE = 0.3  # seconds between two RSS reads that must agree before one counts (pending writes land)


def rss(pid: int) -> int:
    """The resident set of process ``pid``, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def settled_rss(pid: int, timeout: float = 10.0) -> int:
    """The RSS once two reads ``SETTLE`` apart agree within 64 KiB (or after ``timeout``)."""
    deadline = time.monotonic() + timeout
    last = rss(pid)
    while time.monotonic() < deadline:
        time.sleep(SETTLE)
        now = rss(pid)
        if abs(now - last) <= 64 << 10:
            return now
        last = now
    return last


def names(first: int, count: int, length: int) -> list[bytes]:
    width = max(1, length - 2)
    return [b"s:%0*d" % (width, i) for i in range(first, first + count)]


def incr_all(port: int, keys: list[bytes]) -> None:
    """``INCR`` each key once, over ``CONNECTIONS`` connections (each pipelining ``PIPELINE`` at a
    time: a connection's requests run one after another, so concurrency comes from connections)."""
    shares = [keys[i::CONNECTIONS] for i in range(CONNECTIONS)]
    with ThreadPoolExecutor(CONNECTIONS) as pool:
        list(pool.map(lambda share: _incr_share(port, share), shares))


def _incr_share(port: int, keys: list[bytes]) -> None:
    client = redis.Redis(port=port, protocol=2)
    try:
        for start in range(0, len(keys), PIPELINE):
            pipe = client.pipeline(transaction=False)
            for key in keys[start : start + PIPELINE]:
                pipe.execute_command("INCR", key)  # type: ignore[no-untyped-call]
            for reply in pipe.execute():
                if not isinstance(reply, int):
                    raise RuntimeError(f"INCR answered {reply!r}")
    finally:
        client.close()


def measure(base: Path, sequences: int, name_len: int) -> dict[str, float]:
    server = MarchServer.in_dir(base)
    warm, keys = names(0, WARMUP, name_len), names(WARMUP, sequences, name_len)
    try:
        server.start()
        assert server.proc is not None
        incr_all(server.port, warm)
        before = settled_rss(server.proc.pid)
        incr_all(server.port, keys)
        created = settled_rss(server.proc.pid) - before
        server.restart()
        assert server.proc is not None
        incr_all(server.port, warm)
        before = settled_rss(server.proc.pid)
        incr_all(server.port, keys)
        touched = settled_rss(server.proc.pid) - before
    finally:
        server.stop()
    return {"created_bytes_per_seq": created / sequences, "touched_bytes_per_seq": touched / sequences}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequences", type=int, default=100_000)
    parser.add_argument("--name-len", type=int, default=12, help="bytes per sequence name (s:000000000001)")
    parser.add_argument("--repeat", type=int, default=1, help="runs (each on a fresh server); medians are printed")
    args = parser.parse_args(argv)
    runs = []
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="march-memory-") as tmp:
            runs.append(measure(Path(tmp) / f"run{i}", args.sequences, args.name_len))
    out = {
        "created_bytes_per_seq": round(statistics.median(r["created_bytes_per_seq"] for r in runs), 1),
        "touched_bytes_per_seq": round(statistics.median(r["touched_bytes_per_seq"] for r in runs), 1),
        "sequences": args.sequences,
        "name_len": args.name_len,
        "runs": [{k: round(v, 1) for k, v in r.items()} for r in runs],
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
