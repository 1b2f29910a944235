"""Changing the number of leadership groups on a running cluster (docs/groups.md), end to end:
three march processes on a real etcd, a client drawing IDs all along, `march groups N --yes`.

Each node sees the new layout, steps down from every group, gives their leader keys back and
starts again in the new layout in the same process (same pid); the new groups elect their
primaries. Through it, every key's IDs keep rising and none repeats: a key's first ID in its new
group is above the ceiling its old group stored.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from march_harness.cluster import MarchCluster
from march_harness.etcd import EtcdCluster
from march_harness.resp import wait_until
from march_harness.servers import REPO_ROOT
from march_harness.stops import StopRound, sigterm_round
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError

pytestmark = pytest.mark.e2e

KEYS = [f"order:{i}" for i in range(400)]  # about 400 slots: every group of every layout has some


class Drawer(threading.Thread):
    """One client drawing IDs of random keys, one request at a time, until stopped: what it got
    for each key, in the order it got them (a failed request is skipped: its ID, if any, is a gap)."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.stop = threading.Event()
        self.got: dict[str, list[int]] = {k: [] for k in KEYS}
        self.failed = 0
        self.last_error: Exception | None = None

    def run(self) -> None:
        rng = random.Random(17)
        client: RedisCluster | None = None
        for _ in range(1_000_000):  # bounded; the test stops it long before
            if self.stop.is_set():
                break
            try:
                if client is None:
                    client = RedisCluster(host="127.0.0.1", port=self.port, socket_timeout=5)
                key = rng.choice(KEYS)
                self.got[key].append(int(client.incr(key)))  # type: ignore[arg-type]
            except (RedisError, RedisClusterException, OSError) as exc:  # (no slot map while nodes restart)
                self.failed += 1
                self.last_error = exc
                client = None  # a fresh slot map from a fresh client
                self.stop.wait(0.05)  # (a pause between retries, not a synchronisation)
        if client is not None:
            client.close()

    def total(self) -> int:
        return sum(map(len, self.got.values()))


def change(cluster: MarchCluster, etcd: EtcdCluster, groups: int) -> None:
    """``march groups N --yes``, as an operator runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARCH_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    args = ["groups", str(groups), "--yes", "--etcd", etcd.endpoints, "--etcd-prefix", cluster.prefix]
    done = subprocess.run([sys.executable, "-m", "march", *args], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0 and done.stdout.splitlines()[-1].startswith(f"changed: {groups} group"), done
    cluster.groups = groups


@pytest.mark.timeout(180)
def test_a_running_cluster_changes_its_number_of_groups(tmp_path: Path, etcd: EtcdCluster) -> None:
    with MarchCluster(tmp_path, etcd.endpoints) as cluster:
        pids = [n.pid for n in cluster.nodes]
        drawer = Drawer(cluster.nodes[0].port)
        drawer.start()
        try:
            for groups in (4, 2):
                before = drawer.total()
                change(cluster, etcd, groups)
                leaders = cluster.wait_leaders(timeout=60, spread=True)
                assert len(set(map(id, leaders.values()))) > 1  # several masters
                assert [n.pid for n in cluster.nodes] == pids and all(n.running for n in cluster.nodes)
                seen = drawer.total()  # IDs drawn in the new layout too
                wait_until(
                    lambda seen=seen: drawer.total() >= seen + 200,
                    timeout=30,
                    message=f"IDs in the new layout ({drawer.failed} failed, the last with {drawer.last_error!r})",
                )
                assert drawer.total() > before
        finally:
            drawer.stop.set()
            drawer.join(30)
        for n in cluster.nodes:
            assert n.slots() is not None and len(n.slots() or []) == 2
    for key, ids in drawer.got.items():
        assert ids == sorted(set(ids)), f"{key}: an ID repeated or went backwards: {ids}"


@pytest.mark.timeout(400)
def test_a_sigterm_around_a_layout_change_always_ends_in_an_orderly_stop(tmp_path: Path, etcd: EtcdCluster) -> None:
    """Issue 25 (6): SIGTERMs at random moments around layout changes (before the change, while
    the node steps down, during its restart in the same process, after it) each end the node with
    the orderly stop and exit status 0; and a node SIGSTOPped across a change, then given SIGCONT
    and SIGTERM, stops instead of starting again (it used to serve on). scripts/drill's
    ``sigterm`` drill runs 50 such rounds."""
    rng = random.Random(int(os.environ.get("MARCH_SIGTERM_SEED", "25")))
    rounds: list[StopRound] = []
    with MarchCluster(tmp_path, etcd.endpoints) as cluster:
        for i in range(int(os.environ.get("MARCH_SIGTERM_ROUNDS", "6"))):
            rounds.append(sigterm_round(cluster, etcd.endpoints, rng, paused=i % 3 == 0))
            print(rounds[-1].line().splitlines()[0])
    bad = [r for r in rounds if r.problems]
    assert not bad, "\n".join(r.line() for r in bad)
