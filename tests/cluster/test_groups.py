"""Leadership groups end to end: three march processes with ``--groups 4`` on a real etcd.

One cluster per test (each costs seconds), so each test checks several things: every node reports
the same four slot ranges, contiguous over 0..16383, with their primaries spread (no node leads
more than ceil(4/3) = 2); redis-py ``RedisCluster`` and ``redis-cli -c`` draw IDs for keys of every
group, each from its group's primary; a node not serving a key's group answers MOVED naming that group's
primary; ``FAILOVER GROUP g`` moves one group only; ``kill -9`` of a node pauses only its groups,
which resume elsewhere with IDs above every one handed out before; SIGTERM hands every group of a
node over at once.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from march_harness.cluster import ClusterNode, MarchCluster
from march_harness.etcd import EtcdCluster
from march_harness.resp import RespConn, RespError
from redis.cluster import RedisCluster

from march.cluster.slots import SLOTS, key_slot

pytestmark = pytest.mark.e2e

GROUPS = 4
SHARE = 2  # ceil(4 groups / 3 nodes)


def ranges(n: int) -> list[tuple[int, int]]:
    return [(g * SLOTS // n, (g + 1) * SLOTS // n - 1) for g in range(n)]


def key_of_group(g: int, n: int = GROUPS) -> str:
    """A key whose slot is in group ``g``."""
    first, last = ranges(n)[g]
    return next(k for i in range(10_000) if first <= key_slot((k := f"k{i}").encode()) <= last)


def wait_for(cond: object, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)  # polling a condition with a deadline


def owners(node: ClusterNode) -> dict[tuple[int, int], int] | None:
    """(first, last) -> primary port, from CLUSTER SLOTS (None if the node does not answer)."""
    try:
        reply = node.call("CLUSTER", "SLOTS", timeout=1.0)
    except OSError:
        return None
    if not isinstance(reply, list):
        return None
    return {(r[0], r[1]): r[2][1] for r in reply}


def stable(nodes: list[ClusterNode]) -> dict[tuple[int, int], int] | None:
    """The owners every node reports, once all agree, every group has a primary and the groups are
    spread evenly (so none leads more than ceil(N/M)); else None."""
    seen = [owners(n) for n in nodes]
    first = seen[0]
    if first is None or any(s != first for s in seen) or sorted(first) != ranges(GROUPS):
        return None
    counts = [list(first.values()).count(n.port) for n in nodes]
    return first if max(counts) - min(counts) <= 1 else None  # (else a rebalancing hand-over is due)


@pytest.fixture
def grouped(tmp_path: Path, etcd: EtcdCluster) -> Iterator[MarchCluster]:
    cluster = MarchCluster(tmp_path / "march", etcd.endpoints, extra_args=["--groups", str(GROUPS)])
    try:
        cluster.start_nodes(cluster.nodes)
        wait_for(lambda: stable(cluster.nodes), "4 groups spread over 3 nodes")
        yield cluster
    finally:
        cluster.stop()


def test_groups_spread_route_and_fail_over_one_at_a_time(grouped: MarchCluster) -> None:
    nodes = grouped.nodes
    layout = stable(nodes)
    assert layout is not None
    assert len(set(layout.values())) >= 2  # several masters
    assert max(list(layout.values()).count(n.port) for n in nodes) <= SHARE
    by_port = {n.port: n for n in nodes}
    keys = [key_of_group(g) for g in range(GROUPS)]
    # CLUSTER NODES and CLUSTER INFO agree with SLOTS; a node lists the groups it leads
    for n in nodes:
        text = n.call("CLUSTER", "NODES")
        assert isinstance(text, bytes)
        masters = [line for line in text.decode().splitlines() if "master" in line.split()[2]]
        assert 2 <= len(masters) <= 3
        info = n.call("CLUSTER", "INFO")
        assert isinstance(info, bytes) and b"cluster_state:ok\r\n" in info and b"march_groups:4\r\n" in info
        led = [g for g, r in enumerate(ranges(GROUPS)) if layout[r] == n.port]
        assert f"march_groups_led:{','.join(map(str, led))}\r\n".encode() in info
        led_info = n.info("cluster")
        assert led_info is not None and led_info["march_groups_led"] == ",".join(map(str, led))
        if led:  # Redis' replica-side CLUSTER FAILOVER is refused on a primary, as in Redis
            assert n.call("CLUSTER", "FAILOVER") == RespError("ERR You should send CLUSTER FAILOVER to a replica")
    # MOVED names the key's group's primary; the primary serves it
    for g, key in enumerate(keys):
        primary = by_port[layout[ranges(GROUPS)[g]]]
        other = next(n for n in nodes if n is not primary)
        assert other.call("INCR", key) == RespError(f"MOVED {key_slot(key.encode())} 127.0.0.1:{primary.port}")
        assert isinstance(primary.call("INCR", key), int)
        with RespConn(primary.port) as c:
            info = c.call("SEQ.INFO", key)
            assert isinstance(info, list)
            fields = dict(zip(info[::2], info[1::2], strict=True))
            assert fields[b"group"] == g and fields[b"slot"] == key_slot(key.encode())
    # redis-py RedisCluster draws IDs for keys of every group, increasing per key
    last = {k: 0 for k in keys}
    rc = RedisCluster(host="127.0.0.1", port=nodes[0].port)
    try:
        for _ in range(20):
            for k in keys:
                value = rc.incr(k)
                assert value > last[k]
                last[k] = value
    finally:
        rc.close()
    # redis-cli -c follows MOVED to each group's primary
    for k in keys:
        out = subprocess.run(
            ["redis-cli", "-c", "-p", str(nodes[0].port), "INCR", k], capture_output=True, timeout=10, text=True
        )
        assert out.returncode == 0 and int(out.stdout) > last[k], out
        last[k] = int(out.stdout)
    # FAILOVER GROUP g moves group g only (from a node leading two: the spread stays even, so no
    # rebalancing hand-over follows)
    holder = max(nodes, key=lambda n: list(layout.values()).count(n.port))
    g = next(i for i, r in enumerate(ranges(GROUPS)) if layout[r] == holder.port)
    assert holder.call("FAILOVER", "GROUP", 9) == RespError("ERR FAILOVER GROUP must be a group number from 0 to 3")
    assert holder.call("FAILOVER", "GROUP", g, timeout=10) == "OK"
    after = owners(holder)
    assert after is not None and after[ranges(GROUPS)[g]] != holder.port
    assert {r: p for r, p in after.items() if r != ranges(GROUPS)[g]} == {
        r: p for r, p in layout.items() if r != ranges(GROUPS)[g]
    }
    with RespConn(after[ranges(GROUPS)[g]]) as c:
        assert c.call("INCR", keys[g]) > last[keys[g]]
        last[keys[g]] = c.call("INCR", keys[g])
    # kill -9 of a node leading groups: only its groups pause; they resume elsewhere, IDs above
    wait_for(lambda: stable(nodes), "stable again after the FAILOVER")
    layout = stable(nodes)
    assert layout is not None
    victim = next(n for n in nodes if n.port in layout.values())
    lost = [g for g, r in enumerate(ranges(GROUPS)) if layout[r] == victim.port]
    kept = [g for g in range(GROUPS) if g not in lost]
    for g in range(GROUPS):
        with RespConn(layout[ranges(GROUPS)[g]]) as c:
            last[keys[g]] = c.call("INCR", keys[g])
    grouped.kill(victim)
    alive = [n for n in nodes if n is not victim]
    for g in kept:  # the other groups keep serving at once, on the same primary
        with RespConn(layout[ranges(GROUPS)[g]]) as c:
            value = c.call("INCR", keys[g])
            assert isinstance(value, int) and value > last[keys[g]]
            last[keys[g]] = value
    taken = lambda: (seen := stable(alive)) is not None and victim.port not in seen.values()  # noqa: E731
    wait_for(taken, "the dead node's groups taken over", timeout=20)
    layout = stable(alive)
    assert layout is not None and victim.port not in layout.values()
    for g in range(GROUPS):
        with RespConn(layout[ranges(GROUPS)[g]]) as c:
            value = c.call("INCR", keys[g])
            assert isinstance(value, int) and value > last[keys[g]], (g, value, last[keys[g]])
            last[keys[g]] = value
    # SIGTERM hands every group of a node over at once
    # through planned hand-overs: a cluster client drawing IDs of its groups meanwhile sees no error
    leaving = next(n for n in alive if n.port in layout.values())
    rest = [n for n in alive if n is not leaving]
    its_keys = [keys[g] for g, r in enumerate(ranges(GROUPS)) if layout[r] == leaving.port]
    client = RedisCluster(host="127.0.0.1", port=rest[0].port, socket_timeout=5)
    drawn: list[tuple[str, int]] = []
    failures: list[Exception] = []
    stop = threading.Event()

    def draw() -> None:
        for i in range(100_000):  # bounded; stopped once the groups are handed over
            if stop.is_set():
                return
            key = its_keys[i % len(its_keys)]
            try:
                drawn.append((key, int(client.incr(key))))  # type: ignore[arg-type]
            except Exception as exc:  # counted: the test wants none
                failures.append(exc)

    drawer = threading.Thread(target=draw, daemon=True)
    drawer.start()
    try:
        wait_for(lambda: len(drawn) >= 20, "IDs drawn from the leaving node's groups")
        leaving.kill(signal.SIGTERM)
        gone = lambda: (seen := stable(rest)) is not None and leaving.port not in seen.values()  # noqa: E731
        wait_for(gone, "the stopped node's groups handed over", timeout=20)
        wait_for(lambda: leaving.proc is not None and leaving.proc.poll() is not None, "the node stopped", timeout=20)
        count = len(drawn)
        wait_for(lambda: len(drawn) >= count + 20, "IDs drawn after the hand-over")
    finally:  # the drawer stops whatever happened
        stop.set()
        drawer.join(10)
        client.close()
    assert failures == [], [str(f) for f in failures[:3]]
    for key in its_keys:
        ids = [v for k, v in drawn if k == key]
        assert ids == sorted(set(ids)) and ids[0] > last[key], (key, ids[:5])
        last[key] = ids[-1]
    layout = stable(rest)
    assert layout is not None
    for g in range(GROUPS):
        with RespConn(layout[ranges(GROUPS)[g]]) as c:
            value = c.call("INCR", keys[g])
            assert isinstance(value, int) and value > last[keys[g]]
