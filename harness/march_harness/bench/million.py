"""One node holding a million sequences: its RSS, and the takeover after its ``kill -9``, from outside.

    python -m march_harness.bench.million [--sequences 1000000] [--ttl 2] [--touch 1000000]

prints one JSON object, ``measure``'s: ``takeover_s`` (from the ``kill -9`` of the primary to the
first ID the other node hands out), ``rss_mb`` (the primary's RSS holding ``touched`` sequences),
and how it got there (``ttl_s``, ``seed_s``, ``touch_s``, ``rss_before_mb``, ``violations``).

Method (``measure``), on processes started here (loopback, free ports, throwaway directories):

1. one etcd member, two March nodes in cluster mode (lease TTL ``ttl``);
2. ``sequences`` sequences written straight into etcd in the store's own record format
   (``march.store.etcd_values.encode_record``, what ``SEQ.CREATE name`` leaves: ceiling
   ``1 + min_batch``), ``MAX_OPS`` puts a transaction, ``SEED_CONCURRENCY`` transactions at once
   (``seed``): making them one by one through a node would measure creation, not holding;
3. the primary's RSS (``rss_before_mb``), then one ``INCR`` of each of the first ``touch``
   sequences on it (``CONNECTIONS`` connections, each pipelining ``PIPELINE``): each is read, its
   ceiling raised, its ID handed out, and it ends as a row of the compact table; its RSS again once
   settled (``rss_mb``);
4. ``kill -9`` of the primary; the other node is asked ``INCR`` of one old sequence after another
   until it answers an ID (``takeover_s`` from the kill). That ID, and the first ID of each of
   ``PROBES`` old sequences asked at once right after, must be above the old primary's for that
   sequence (guarantees 1 and 2); anything else is listed in ``violations``.

Never asserts anything about speed or memory: it measures and prints (the test at a smaller scale,
``tests/cluster/test_takeover_at_scale.py``, holds the guarantees and a generous time bound).
Every process started here is stopped at the end, whatever happened.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from march.etcd.api import Put
from march.etcd.grpc_etcd import GrpcEtcd
from march.etcd.keypath import KeyPaths
from march.store.contract import SequenceRecord
from march.store.etcd_store import MAX_OPS
from march.store.etcd_values import encode_record
from march_harness.bench.memory import settled_rss
from march_harness.cluster import ClusterNode, MarchCluster
from march_harness.etcd import EtcdCluster
from march_harness.resp import RespConn, encode

SEED_CONCURRENCY = 8  # etcd transactions in flight while seeding (etcd batches their commits)
CONNECTIONS = 32  # clients touching the sequences at once (each pipelining PIPELINE INCRs)
PIPELINE = 200
PROBES = 2_000  # old sequences asked at once on the new primary right after the takeover
POLL = 0.005  # seconds between two INCRs asking whether the other node serves yet
MIN_BATCH = 1000  # the default: a seeded sequence's ceiling is 1 + MIN_BATCH, as SEQ.CREATE leaves it
TOUCH_TIMEOUT = 900.0  # seconds: a touch pass that has not ended by then failed (it says so)


def name(i: int) -> bytes:
    return b"m:%07d" % i


def seed(endpoints: str, prefix: str, sequences: int) -> float:
    """Write ``sequences`` sequences into etcd under ``prefix``; the seconds it took."""
    started = time.monotonic()
    asyncio.run(_seed(endpoints.split(","), KeyPaths.of(prefix), sequences))
    return time.monotonic() - started


async def _seed(endpoints: list[str], keys: KeyPaths, sequences: int) -> None:
    client = GrpcEtcd(endpoints, name="bench seed")
    chunks = iter(range(0, sequences, MAX_OPS))

    async def writer() -> None:
        for start in chunks:
            puts = [
                Put(keys.seq(name(i)), encode_record(SequenceRecord(name(i), "sequence", 1 + MIN_BATCH)))
                for i in range(start, min(start + MAX_OPS, sequences))
            ]
            await client.txn([], puts, [], 30.0)

    try:
        await asyncio.gather(*(writer() for _ in range(SEED_CONCURRENCY)))
    finally:
        await client.close()


def incr_each(port: int, names: list[bytes], timeout: float = TOUCH_TIMEOUT) -> list[Any]:
    """One INCR of each of ``names`` on ``port`` over ``CONNECTIONS`` connections: the replies, in order."""
    replies: list[Any] = [None] * len(names)
    failures: list[BaseException] = []

    def client(first: int) -> None:
        mine = range(first, len(names), CONNECTIONS)
        try:
            with RespConn(port, timeout=60) as c:
                for i in range(0, len(mine), PIPELINE):
                    chunk = mine[i : i + PIPELINE]
                    c.send(b"".join(encode("INCR", names[j]) for j in chunk))
                    for j in chunk:
                        replies[j] = c.read_reply()
        except BaseException as exc:  # (reported by the caller: a touch that failed is a result)
            failures.append(exc)

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(min(CONNECTIONS, len(names)))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    if failures or any(t.is_alive() for t in threads):
        raise RuntimeError(f"touching {len(names)} sequences failed: {failures[:1] or 'timed out'}")
    return replies


def first_id(node: ClusterNode, key: bytes, deadline: float) -> int | None:
    """Ask ``node`` for an ID of ``key`` until it hands one out (None at ``deadline``)."""
    while time.monotonic() < deadline:
        try:
            with RespConn(node.port, timeout=1.0) as c:
                while time.monotonic() < deadline:
                    reply = c.call("INCR", key)
                    if isinstance(reply, int):
                        return reply
                    time.sleep(POLL)  # (MOVED, CLUSTERDOWN, TRYAGAIN: not serving yet; a poll, not a sync)
        except OSError:
            time.sleep(POLL)
    return None


def measure(
    sequences: int = 1_000_000, ttl: int = 2, touch: int | None = None, base: Path | None = None
) -> dict[str, Any]:
    """``{"takeover_s", "rss_mb", ...}`` of one node holding ``sequences`` sequences (``touch`` of
    them handed out an ID on it: all by default); see the module docstring. The bench's entry point."""
    touch = sequences if touch is None else min(touch, sequences)
    with tempfile.TemporaryDirectory(prefix="march-million-") as tmp:
        root = base or Path(tmp)
        etcd = EtcdCluster(root / "etcd", 1)
        cluster: MarchCluster | None = None
        try:
            etcd.start()
            cluster = MarchCluster(root / "march", etcd.endpoints, size=2, lease_ttl=ttl)
            seed_s = seed(etcd.endpoints, cluster.prefix, sequences)
            old = cluster.start()
            assert old.proc is not None
            before = settled_rss(old.proc.pid)
            names = [name(i) for i in range(sequences)]
            started = time.monotonic()
            handed = incr_each(old.port, names[:touch])
            touch_s = time.monotonic() - started
            held = settled_rss(old.proc.pid)
            info = old.info("sequences") or {}
            violations = [f"{names[i]!r}: {r!r}" for i, r in enumerate(handed) if not isinstance(r, int)][:5]
            other = next(n for n in cluster.nodes if n is not old)
            probe = names[(touch - 1) if touch else 0]
            last = handed[touch - 1] if touch else 0
            old.kill(signal.SIGKILL)
            killed = time.monotonic()
            got = first_id(other, probe, killed + 10 * ttl + 30)
            takeover_s = time.monotonic() - killed if got is not None else float("inf")
            if got is None:
                violations.append("the other node never handed out an ID")
            elif isinstance(last, int) and got <= last:
                violations.append(f"{probe!r}: {got} after {last} on the old primary")
            probes = names[: min(PROBES, touch)]
            for key, was, now in zip(probes, handed, incr_each(other.port, probes), strict=False):
                if not isinstance(now, int) or (isinstance(was, int) and now <= was):
                    violations.append(f"{key!r}: {now!r} after {was!r} on the old primary")
            return {
                "takeover_s": round(takeover_s, 3),
                "rss_mb": round(held / 2**20, 1),
                "ttl_s": ttl,
                "sequences": sequences,
                "touched": touch,
                "rss_before_mb": round(before / 2**20, 1),
                "bytes_per_touched": round((held - before) / touch, 1) if touch else 0.0,
                "rows": int(info.get("parked_sequences", -1)),  # held as rows of the compact table
                "generators": int(info.get("active_sequences", -1)),
                "seed_s": round(seed_s, 1),
                "touch_s": round(touch_s, 1),
                "violations": violations[:10],
            }
        finally:
            if cluster is not None:
                cluster.stop()
            etcd.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequences", type=int, default=1_000_000)
    parser.add_argument("--ttl", type=int, default=2, help="lease TTL, seconds")
    parser.add_argument("--touch", type=int, default=None, help="sequences handed out an ID on the primary (all)")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.sequences, args.ttl, args.touch)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
