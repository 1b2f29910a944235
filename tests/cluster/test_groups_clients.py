"""Issue 17's "Done when": every kind of client draws IDs from a 3-node, 4-group cluster through a
`kill -9` of a node, with no duplicate and no ID going backwards.

One cluster (a real etcd, three `march serve --groups 4 --redirect forward` nodes) and, at once:
- redis-py `RedisCluster` (routes each key to its group's primary from `CLUSTER SLOTS`);
- ioredis `Cluster` (Node.js, installed by npm into a temporary directory as harness/march_harness/node.py
  does), a loop of INCRs that prints each request's send and reply time on `process.hrtime`,
  which is the same clock (CLOCK_MONOTONIC) as the test's `time.monotonic_ns`, so its requests
  join the same histories;
- `redis-cli -c` (one process per INCR, following MOVED itself);
- plain `redis.Redis` connections to each node in turn (`march_harness.load.ForwardClient`): a node that
  is not the key's primary relays the request to it (forward mode), so a plain client never sees
  MOVED.
All of them INCR the same keys, two per group. Under that load the node leading two groups is
killed; the others take its groups over, and every client kind must draw IDs again. Then every
key's history (all clients together) is checked: no duplicate, no real-time order violation
(guarantees 1 and 2). `CLUSTER SLOTS` must show the four ranges and more than one master, before
the kill and after.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from march_harness.cluster import MarchCluster, owners_by_group, parse_slots
from march_harness.etcd import EtcdCluster
from march_harness.history import History, analyze, group_of_key
from march_harness.load import Load, group_keys
from march_harness.node import install_ioredis, node_binary
from march_harness.resp import wait_until

pytestmark = pytest.mark.e2e

GROUPS = 4
SECRET = "groups-e2e-secret"  # the internal link's shared secret (forward mode)
BEFORE = 30  # IDs each client kind draws before the kill
AFTER = 30  # and after its groups were taken over
MAX_SECONDS = 60.0  # every client loop stops by then, whatever happens

IOREDIS_LOOP = r"""
const Redis = require(process.env.IOREDIS);
const fs = require("fs");
const [ports, keys, stopFile, maxMs] = process.argv.slice(2);
const c = new Redis.Cluster(ports.split(",").map((p) => ({ host: "127.0.0.1", port: Number(p) })), {
  redisOptions: { connectTimeout: 1000, commandTimeout: 1000, maxRetriesPerRequest: 1 },
  slotsRefreshTimeout: 1000, retryDelayOnFailover: 50, retryDelayOnClusterDown: 50,
});
c.on("error", () => {});  // connection errors are counted per request below
const end = Date.now() + Number(maxMs);
const now = () => String(process.hrtime.bigint());  // CLOCK_MONOTONIC, as Python's time.monotonic_ns
async function main() {
  const names = keys.split(",");
  for (let i = 0; Date.now() < end && !fs.existsSync(stopFile); i++) {
    const key = names[i % names.length];
    const sent = process.hrtime.bigint();
    try {
      const id = await c.incr(key);
      console.log(JSON.stringify({ key, sent: String(sent), replied: now(), id }));
    } catch (e) {
      console.log(JSON.stringify({ key, sent: String(sent), replied: now(), err: String(e) }));
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  c.disconnect();
}
main();
"""


@pytest.fixture(scope="module")
def ioredis(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if node_binary() is None:
        pytest.skip("node is not installed (scripts/_env.sh installs it)")
    package = install_ioredis(tmp_path_factory.mktemp("ioredis"))
    (package.parent.parent / "loop.js").write_text(IOREDIS_LOOP)
    return package


@pytest.fixture
def cluster(tmp_path: Path, etcd: EtcdCluster) -> Iterator[MarchCluster]:
    c = MarchCluster(
        tmp_path / "march",
        etcd.endpoints,
        groups=GROUPS,
        extra_args=["--redirect", "forward", "--cluster-secret", SECRET],
    )
    try:
        c.start()
        yield c
    except BaseException:
        print(c.describe())
        raise
    finally:
        c.stop()


class IoredisLoop:
    """The ioredis loop as a child process; `finish()` stops it and adds its requests to the histories."""

    def __init__(self, package: Path, ports: list[int], keys: list[str], workdir: Path) -> None:
        self.stop_file = workdir / "ioredis.stop"
        node = node_binary()
        assert node is not None
        self.proc = subprocess.Popen(
            [node, str(package.parent.parent / "loop.js"), ",".join(map(str, ports)), ",".join(keys),
             str(self.stop_file), str(int(MAX_SECONDS * 1000))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "IOREDIS": str(package)},
        )  # fmt: skip
        self.lines: list[dict[str, object]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(json.loads(raw))

    def ok_since(self, since: int) -> int:
        return sum(1 for x in list(self.lines) if "id" in x and int(str(x["sent"])) >= since)

    def finish(self, histories: dict[str, History]) -> str:
        self.stop_file.touch()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(5)
        for x in self.lines:
            key, sent, replied = str(x["key"]), int(str(x["sent"])), int(str(x["replied"]))
            if "id" in x:
                histories[key].record("ioredis", sent, replied, int(str(x["id"])))
            else:
                histories[key].record_error("ioredis", sent, replied, str(x["err"]))
        assert self.proc.stdout is not None and self.proc.stderr is not None
        stderr = self.proc.stderr.read().decode(errors="replace")
        self.proc.stdout.close()
        self.proc.stderr.close()
        return stderr


class RedisCliLoop(threading.Thread):
    """`redis-cli -c ... INCR key`, one process per request, over ``keys``; after a failure it
    starts from the next node."""

    def __init__(self, binary: str, ports: list[int], keys: list[str], histories: dict[str, History]) -> None:
        super().__init__(name="redis-cli", daemon=True)
        self.binary, self.ports, self.keys, self.histories = binary, ports, keys, histories
        self.stop_event = threading.Event()
        self.ok: list[int] = []  # send times of the successes

    def run(self) -> None:
        deadline = time.monotonic() + MAX_SECONDS
        port, i = 0, 0
        while not self.stop_event.is_set() and time.monotonic() < deadline:
            key = self.keys[i % len(self.keys)]
            i += 1
            sent = History.now()
            proc = subprocess.run(
                [self.binary, "-c", "-h", "127.0.0.1", "-p", str(self.ports[port]), "INCR", key],
                capture_output=True,
                timeout=10,
            )
            replied, out = History.now(), proc.stdout.decode().strip()
            if proc.returncode == 0 and out.lstrip("-").isdigit():
                self.histories[key].record("redis-cli", sent, replied, int(out), str(self.ports[port]))
                self.ok.append(sent)
            else:
                self.histories[key].record_error("redis-cli", sent, replied, out or proc.stderr.decode())
                port = (port + 1) % len(self.ports)
                self.stop_event.wait(0.02)  # no hot loop against a dead node

    def ok_since(self, since: int) -> int:
        return sum(1 for t in list(self.ok) if t >= since)


def masters(c: MarchCluster) -> dict[int, str]:
    """group -> primary address, as one live node's CLUSTER SLOTS shows it (the four ranges)."""
    node = next(n for n in c.nodes if n.alive)
    entries = parse_slots(node.call("CLUSTER", "SLOTS"))
    assert entries is not None
    owners = owners_by_group(entries, GROUPS)
    assert owners is not None, f"CLUSTER SLOTS does not cover each of {GROUPS} groups: {entries}"
    return owners


@pytest.mark.fault
@pytest.mark.timeout(180)
def test_every_client_kind_draws_ids_through_a_kill(cluster: MarchCluster, ioredis: Path, tmp_path: Path) -> None:
    redis_cli = shutil.which("redis-cli")
    assert redis_cli is not None, "redis-cli not installed (scripts/_env.sh installs it)"
    leaders = cluster.wait_leaders(20, spread=True)
    assert len(set(masters(cluster).values())) > 1, "CLUSTER SLOTS shows one master for every group"
    keys = [k for ks in group_keys(GROUPS) for k in ks if k.startswith("drill:g")]
    assert {group_of_key(k, GROUPS) for k in keys} == set(range(GROUPS))
    seeds = [n.address for n in cluster.nodes]
    ports = [n.port for n in cluster.nodes]

    load = Load(seeds, keys=keys, cluster_clients=1, plain_clients=0, forward_clients=1, max_seconds=MAX_SECONDS)
    histories = load.histories
    kinds = {c.kind: c for c in load.clients}
    cli = RedisCliLoop(redis_cli, ports, keys, histories)
    node_loop = IoredisLoop(ioredis, ports, keys, tmp_path)
    stderr = ""
    try:
        load.start()
        cli.start()

        def each_drew(n: int, since: int) -> bool:
            counts = [sum(1 for k in keys for o in histories[k].ops if o.client == c.name and o.sent >= since)
                      for c in load.clients]  # fmt: skip
            return min([*counts, cli.ok_since(since), node_loop.ok_since(since)]) >= n

        wait_until(lambda: each_drew(BEFORE, 0), timeout=30, message=f"{BEFORE} IDs for every client kind")
        old = cluster.most_leading(leaders)
        killed = cluster.led_by(old, leaders)
        assert len(killed) == 2, f"4 groups on 3 nodes: the most a node leads is 2, {old.node_id} leads {killed}"
        cluster.kill(old)
        after = cluster.wait_leaders(20, exclude=[old], spread=True)
        settled_at = History.now()
        assert all(after[g] is not old for g in killed)
        wait_until(lambda: each_drew(AFTER, settled_at), timeout=30, message=f"{AFTER} IDs after the kill, every kind")
    finally:
        cli.stop_event.set()
        load.stop(check=False)
        stderr = node_loop.finish(histories)
        cli.join(15)

    problems = {k: analyze(h) for k, h in histories.items()}
    bad = {k: [a.summary(), *a.problems] for k, a in problems.items() if not a.ok}
    assert not bad, f"guarantees broken: {bad}"
    assert not any(c.crash for c in load.clients), [repr(c.crash) for c in load.clients]
    # The plain client got IDs through each live node for keys of groups that node does not lead
    # (forwarded), and never saw MOVED.
    forward = kinds["forward"]
    relayed = {
        o.node
        for k in keys
        for o in histories[k].ops
        if o.client == forward.name and o.sent >= settled_at and o.node != after[group_of_key(k, GROUPS)].address
    }
    assert relayed == set(seeds) - {old.address}, f"forwarded through {relayed} only"
    moved = [x.error for k in keys for x in histories[k].failures if x.client == forward.name and "MOVED" in x.error]
    assert not moved, f"the plain client saw MOVED in forward mode: {moved[:3]}"
    assert len(set(masters(cluster).values())) > 1, "after the kill CLUSTER SLOTS shows one master"
    print(
        f"{sum(p.ops for p in problems.values())} IDs on {len(keys)} keys, 0 duplicates, 0 order violations; "
        f"killed {old.node_id} (groups {killed}); ioredis stderr: {stderr[-300:]!r}"
    )
