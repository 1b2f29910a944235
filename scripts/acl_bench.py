"""What one ACL change costs a cluster with many users (issue 16 §1 row 6): a local etcd and three
march nodes on free loopback ports, throwaway data.

It creates ``--users`` users on the primary, then, while a prober on every node sends PING every
millisecond on its own connection (its worst reply time is the longest event-loop step that node
took), runs ``--changes`` ``ACL SETUSER`` on the primary (then on a standby) and a few ``ACL LIST``.
It reports, per phase: the reply time of the command (median), the primary's CPU time per command
(from /proc, all threads), and every node's worst and p99 PING. Nothing here is asserted: the
figures go into the report (docs/operations.md keeps the last ones).

    python scripts/acl_bench.py --users 10000 --changes 200
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import redis
from march_harness.cluster import ClusterNode, MarchCluster
from march_harness.etcd import EtcdCluster, etcd_binary
from march_harness.resp import RespConn, encode, wait_until


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 10 ms


class Prober(threading.Thread):
    """PING every millisecond on one connection; the reply times of the current phase."""

    def __init__(self, node: ClusterNode) -> None:
        super().__init__(daemon=True)
        self.node = node
        self.times: list[float] = []
        self.done = threading.Event()

    def run(self) -> None:
        with RespConn(self.node.port) as c:
            while not self.done.is_set():
                sent = time.perf_counter()
                c.call("PING")
                self.times.append(time.perf_counter() - sent)
                time.sleep(0.001)

    def take(self) -> list[float]:
        out, self.times = self.times, []
        return out


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def phase(name: str, probers: list[Prober], pid: int, run: Callable[[], list[float]]) -> None:
    for p in probers:
        p.take()
    cpu = cpu_seconds(pid)
    replies = run()
    spent = cpu_seconds(pid) - cpu
    print(f"{name}: {len(replies)} commands, reply median {ms(statistics.median(replies))}, "
          f"primary CPU per command {ms(spent / len(replies))}")  # fmt: skip
    for p in probers:
        t = sorted(p.take())
        p99 = t[int(len(t) * 0.99)] if t else 0.0
        print(f"  PING on {p.node.name}: worst {ms(max(t, default=0))}, p99 {ms(p99)} ({len(t)} probes)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--lists", type=int, default=5)
    args = parser.parse_args()
    binary = etcd_binary()
    if binary is None:
        sys.exit("no etcd binary")
    with tempfile.TemporaryDirectory(prefix="march-acl-bench-") as tmp:
        etcd = EtcdCluster(Path(tmp) / "etcd", size=1, binary=binary)
        etcd.start()
        try:
            with MarchCluster(Path(tmp) / "march", etcd.endpoints) as cluster:
                primary = cluster.wait_settled(timeout=20)
                standby = next(n for n in cluster.nodes if n is not primary)
                started = time.monotonic()
                with RespConn(primary.port, timeout=120) as c:
                    for first in range(0, args.users, 500):
                        names = range(first, min(args.users, first + 500))
                        for i in names:
                            rules = ("on", f">pw{i}", f"~app{i}:*", "+@read", "+@write")
                            c.send(encode("ACL", "SETUSER", f"user{i:05d}", *rules))
                        for _ in names:
                            assert c.read_reply() == "OK"
                print(f"{args.users} users created in {time.monotonic() - started:.1f} s")
                for n in cluster.nodes:
                    with RespConn(n.port, timeout=60) as c:
                        wait_until(lambda c=c: len(c.call("ACL", "USERS")) == args.users + 1, 120, 0.2, "every user")
                probers = [Prober(n) for n in cluster.nodes]
                for p in probers:
                    p.start()
                time.sleep(0.5)

                def changes(node: ClusterNode) -> list[float]:
                    out = []
                    with RespConn(node.port, timeout=60) as c:
                        for i in range(args.changes):
                            sent = time.perf_counter()
                            rule = "+incr" if i % 2 else "-incr"
                            assert c.call("ACL", "SETUSER", f"user{i % args.users:05d}", rule) == "OK"
                            out.append(time.perf_counter() - sent)
                    time.sleep(0.5)  # the watch events reach the other nodes inside the phase
                    return out

                def lists() -> list[float]:
                    out = []
                    with redis.Redis(port=primary.port, protocol=2, single_connection_client=True) as c:
                        for _ in range(args.lists):
                            sent = time.perf_counter()
                            assert len(c.execute_command("ACL", "LIST")) == args.users + 1
                            out.append(time.perf_counter() - sent)
                    return out

                phase("ACL SETUSER on the primary", probers, primary.pid, lambda: changes(primary))
                phase("ACL SETUSER on a standby", probers, primary.pid, lambda: changes(standby))
                phase("ACL LIST on the primary", probers, primary.pid, lists)
                for p in probers:
                    p.done.set()
                for p in probers:
                    p.join(5)
        finally:
            etcd.stop()


if __name__ == "__main__":
    main()
