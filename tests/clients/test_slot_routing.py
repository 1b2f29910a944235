"""march_client routes by slot on a cluster of several leadership groups: three march processes with
``--groups 4`` on a real etcd, one cluster for the whole file (each costs seconds).

A `Sequencer` (from one thread and from four at once) and an `AsyncSequencer` draw IDs for keys of
every group (and a snowflake generator leases a worker id through the same sequencer): after a
warm-up of at most one ``MOVED`` (which fills the slot table from ``CLUSTER SLOTS``) no request is
redirected, each going straight to its group's primary. Through a ``kill -9`` of the node leading
the most groups both keep drawing IDs that increase per key, and once the survivors have settled
the table routes straight again.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from march_client import AsyncSequencer, Sequencer
from march_client.slots import SLOTS, key_slot
from march_client.snowflake import SnowflakeGenerator
from march_harness.cluster import MarchCluster
from march_harness.etcd import EtcdCluster

pytestmark = pytest.mark.e2e

GROUPS = 4
ROUNDS = 10


def key_of_group(g: int, tag: str = "") -> str:
    """A key whose slot is in group ``g`` (``tag``: its hash tag instead of the whole key)."""
    first, last = g * SLOTS // GROUPS, (g + 1) * SLOTS // GROUPS - 1
    for i in range(100_000):
        key = f"{{{tag}{i}}}.orders" if tag else f"k{i}"
        if first <= key_slot(key.encode()) <= last:
            return key
    raise AssertionError(f"no key in group {g}")


def draw_sync(seq: Sequencer, keys: list[str], last: dict[str, int]) -> None:
    for k in keys:
        value = seq.next(k)
        assert value > last[k], (k, value, last[k])
        last[k] = seq.next_range(k, 3)[-1]


async def draw_async(seq: AsyncSequencer, keys: list[str], last: dict[str, int]) -> None:
    for k in keys:
        value = await seq.next(k)
        assert value > last[k], (k, value, last[k])
        last[k] = (await seq.next_range(k, 3))[-1]


def draw_in_thread(seq: Sequencer, keys: list[str], errors: list[BaseException]) -> None:
    """One thread's rounds over every key: its own IDs increase per key."""
    mine = dict.fromkeys(keys, 0)
    try:
        for _ in range(ROUNDS):
            for k in keys:
                value = seq.next(k)
                assert value > mine[k], (k, value, mine[k])
                mine[k] = value
    except BaseException as e:  # reported by the test
        errors.append(e)


def test_requests_go_straight_to_their_groups_primary_and_follow_a_kill(tmp_path: Path, etcd: EtcdCluster) -> None:
    cluster = MarchCluster(tmp_path / "march", etcd.endpoints, groups=GROUPS)
    loop = asyncio.new_event_loop()
    try:
        cluster.start_nodes(cluster.nodes)
        leaders = cluster.wait_leaders(timeout=20, spread=True)
        keys = [key_of_group(g) for g in range(GROUPS)] + [key_of_group(g, "user") for g in range(GROUPS)]
        last = dict.fromkeys(keys, 0)
        errors: list[BaseException] = []
        seeds = [n.address for n in cluster.nodes]
        options = {"retry_for": 30.0, "socket_timeout": 1.0, "connect_timeout": 1.0}
        with Sequencer(nodes=seeds, **options) as seq:  # type: ignore[arg-type]
            aseq = AsyncSequencer(nodes=seeds, **options)  # type: ignore[arg-type]
            try:
                # warm-up: the first MOVED fills the whole table
                draw_sync(seq, keys, last)
                loop.run_until_complete(draw_async(aseq, keys, last))
                assert seq.router.redirects <= 1 and aseq.router.redirects <= 1
                for g, node in leaders.items():
                    for k in (keys[g], keys[GROUPS + g]):
                        slot = key_slot(k.encode())
                        assert seq.router.slot_owner(slot) == aseq.router.slot_owner(slot) == ("127.0.0.1", node.port)
                # then: no MOVED at all, in any order of keys, sync, asyncio and snowflake alike
                warm, awarm = seq.router.redirects, aseq.router.redirects
                for _ in range(ROUNDS):
                    draw_sync(seq, keys, last)
                    loop.run_until_complete(draw_async(aseq, keys[::-1], last))
                for g in range(GROUPS):
                    with SnowflakeGenerator(seq, key_of_group(g, "ns"), ttl=5) as gen:
                        assert gen.next() > 0
                threads = [threading.Thread(target=draw_in_thread, args=(seq, keys, errors)) for _ in range(4)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(60)
                assert not errors and not any(t.is_alive() for t in threads), errors
                for k in keys:  # the threads' IDs were all handed out before this one
                    last[k] = seq.next(k)
                assert (seq.router.redirects, aseq.router.redirects) == (warm, awarm)
                # kill -9 of the node leading the most groups: its groups move, IDs keep increasing
                victim = cluster.most_leading(leaders)
                cluster.kill(victim)
                for _ in range(3):
                    draw_sync(seq, keys, last)  # each request retries until its group has a primary
                    loop.run_until_complete(draw_async(aseq, keys, last))
                settled = cluster.wait_leaders(timeout=20, exclude=[victim], spread=True)
                draw_sync(seq, keys, last)  # a rebalancing hand-over after the takeover costs a MOVED
                loop.run_until_complete(draw_async(aseq, keys, last))
                warm, awarm = seq.router.redirects, aseq.router.redirects
                for _ in range(ROUNDS):
                    draw_sync(seq, keys, last)
                    loop.run_until_complete(draw_async(aseq, keys, last))
                assert (seq.router.redirects, aseq.router.redirects) == (warm, awarm)
                for g, node in settled.items():
                    assert seq.router.slot_owner(key_slot(keys[g].encode())) == ("127.0.0.1", node.port)
            finally:
                loop.run_until_complete(aseq.close())
    finally:
        loop.close()
        cluster.stop()
