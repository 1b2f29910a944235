"""Memory per sequence, measured from outside (the server's RSS): the bench's own simple version,
used by scripts/bench when `benchlib/memory.py` (the fuller one) is not there.

    python scripts/benchlib/memory_simple.py [--sequences 100000]

prints one JSON object: ``created_bytes_per_seq`` (RSS after creating ``--sequences`` sequences
with pipelined INCRs on fresh names, minus before, per sequence), ``touched_bytes_per_seq``
(the same after a restart on the same data, each sequence INCRed once), ``redis_bytes_per_key``
(redis-server, same user, same INCRs: the reference) and the sequence count. March runs as the
bench runs it (ACL, TLS listener, metrics; `benchlib.targets`). A warm-up of `WARMUP` names comes
before each baseline, so that first-use costs are not counted per sequence. Every process started
here is stopped at the end. Measures and prints; never asserts.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))

import redis  # noqa: E402

from benchlib.targets import PASSWORD, USER, Targets  # noqa: E402

WARMUP = 2000  # names created (and touched) before each baseline
PIPELINE = 1000  # INCRs per round trip
SETTLE = 0.3  # seconds between two RSS reads that must agree (pending store writes land)


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def settled_rss(pid: int, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    last = rss(pid)
    while time.monotonic() < deadline:
        time.sleep(SETTLE)
        now = rss(pid)
        if abs(now - last) <= 64 << 10:
            return now
        last = now
    return last


def incr_all(port: int, first: int, count: int) -> None:
    client = redis.Redis(port=port, username=USER, password=PASSWORD, protocol=2)
    try:
        for start in range(first, first + count, PIPELINE):
            pipe = client.pipeline(transaction=False)
            for i in range(start, min(start + PIPELINE, first + count)):
                pipe.execute_command("INCR", b"s:%010d" % i)
            for reply in pipe.execute():
                if not isinstance(reply, int):
                    raise RuntimeError(f"INCR answered {reply!r}")
    finally:
        client.close()


def grown(port: int, pid: int, sequences: int) -> float:
    """Warm up, then the RSS growth per name of ``sequences`` INCRs on names after the warm-up's."""
    incr_all(port, 0, WARMUP)
    before = settled_rss(pid)
    incr_all(port, WARMUP, sequences)
    return (settled_rss(pid) - before) / sequences


def measure(base: Path, sequences: int) -> dict[str, float]:
    targets = Targets(base)
    try:
        march = targets.start("sqlite").server
        created = grown(march.port, march.pid, sequences)
        march.restart()
        touched = grown(march.port, march.pid, sequences)
        redis_server = targets.start("redis").server
        per_key = grown(redis_server.port, redis_server.pid, sequences)
    finally:
        targets.stop()
    return {
        "created_bytes_per_seq": round(created, 1),
        "touched_bytes_per_seq": round(touched, 1),
        "redis_bytes_per_key": round(per_key, 1),
        "sequences": sequences,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequences", type=int, default=100_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="march-memory-") as tmp:
        print(json.dumps(measure(Path(tmp), args.sequences)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
