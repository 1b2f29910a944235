"""Worker ids (``march.keyspace.worker_ids``) across a failover.

In process (fake etcd, manual clock, real ``Node``s): what the old primary granted is in etcd, so
the new primary never hands a live id out again, keeps its floor, renews it for its holder, and
the deposed primary can never grant an id again (its guard fails). Standbys refuse the worker
commands (they are primary-only).

With processes (a real etcd, three march nodes, redis-py): acquire on the primary, ``kill -9``
it, and the new primary refuses the same id while it is live, renews it for its holder, and a
standby answers MOVED.

Clocks across a takeover: the new primary judges expiry on its own monotonic clock from the moment
it took over (every record live for TTL + margin from then), so its wall clock set two days ahead
(in process, and with processes through ``DEBUG CLOCK-OFFSET`` on a real cluster) hands out no
live id; and its sweeper deletes only free records, a deleted one's floor kept for the next holder.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis
from march_harness import wait_until
from march_harness.cluster import MarchCluster
from march_harness.etcd import EtcdCluster
from march_harness.sim import TTL, SimFactory, sims
from redis.exceptions import MovedError

from march.errors import GuardFailed
from march.generators.bound import NotServing
from march.keyspace.worker_ids import Standing
from march.store.contract import WorkerRecord

pytestmark = pytest.mark.e2e


@pytest.fixture
async def make_sim() -> AsyncIterator[SimFactory]:
    async with sims() as make:
        yield make


async def test_a_new_primary_keeps_every_live_holding_and_its_floor(make_sim: SimFactory) -> None:
    sim = await make_sim(3)
    p = sim.primary
    held = [await p.keyspace.workers.acquire(b"app", 600) for _ in range(3)]
    assert [h[0] for h in held] == [0, 1, 2]
    assert await p.keyspace.workers.renew(b"app", held[1][0], held[1][1], upto=4242) == 600
    await p.keyspace.workers.release(b"app", held[2][0], held[2][1], upto=5151)
    standby = next(n for n in sim.nodes if n is not p)
    with pytest.raises(NotServing):  # only the primary grants ids
        await standby.keyspace.workers.acquire(b"app")

    assert p.state.term is not None
    old_guard = p.state.term.guard
    p.cut()  # the primary loses etcd: its lease runs out and a standby takes over
    await sim.until(lambda: any(n.serving for n in sim.nodes if n is not p), "a standby takes over", 3 * TTL)
    q = next(n for n in sim.nodes if n is not p and n.serving)
    with pytest.raises(NotServing):  # the deposed primary grants nothing, whatever it believed
        await p.keyspace.workers.acquire(b"app")

    workers = q.keyspace.workers
    again = await workers.acquire(b"app")
    assert again[0] == 2 and again[3] == 5151  # the released id, with the floor its holder declared
    fresh = await workers.acquire(b"app")
    assert fresh[0] == 3  # 0 and 1 are still live: never handed out twice
    assert await workers.renew(b"app", held[1][0], held[1][1], upto=4343) == 600  # the holder carries on
    listed = {h.record.id: (h.record.upto_ms, h.standing) for h in await workers.list(b"app")}
    assert listed[0] == (0, Standing.LIVE) and listed[1] == (4343, Standing.LIVE)
    p.heal()
    with pytest.raises(GuardFailed):  # a late write of the old term is refused by etcd, whoever sends it
        await p.node.store.save_worker(WorkerRecord(b"app", 0, b"thief", 10**13, 0, 600), None, old_guard)
    with pytest.raises(GuardFailed):
        await q.node.store.save_worker(WorkerRecord(b"app", 4, b"thief", 10**13, 0, 600), None, old_guard)
    assert [h.record.id for h in await workers.list(b"app")] == [0, 1, 2, 3]
    await sim.advance(2 * TTL)
    assert sim.serving() == [q]
    assert sim.overlaps == []


async def test_acquires_in_one_loop_turn_get_distinct_ids(make_sim: SimFactory) -> None:
    sim = await make_sim(1)
    workers = sim.primary.keyspace.workers
    ids = await asyncio.gather(*(workers.acquire(b"burst", 60) for _ in range(40)))
    assert sorted(i for i, _, _, _ in ids) == list(range(40))
    # a writer the primary does not know of took id 40 meanwhile: the compare-and-set loses, reads again
    thief = WorkerRecord(b"burst", 40, b"thief", 10**13, 7, 60)
    store = sim.primary.node.store
    real_load = store.load_workers
    calls = 0

    async def stale_once(namespace: bytes, worker_id: int | None = None) -> list[WorkerRecord]:
        nonlocal calls
        calls += 1
        found = await real_load(namespace, worker_id)
        if calls == 1:  # the first read misses the thief's record, which lands right after it
            assert sim.primary.state.term is not None
            assert await store.save_worker(thief, None, sim.primary.state.term.guard)
        return found

    store.load_workers = stale_once  # type: ignore[method-assign]
    assert (await workers.acquire(b"burst"))[0] == 41
    assert calls == 2


@pytest.mark.e2e
def test_kill_the_primary_and_live_ids_stay_taken(march_cluster: MarchCluster) -> None:
    primary = march_cluster.wait_settled(timeout=20)
    with redis.Redis(port=primary.port, protocol=3) as c:
        held = [c.execute_command("WORKER.ACQUIRE", "svc", "TTL", 600) for _ in range(2)]
        assert [h[0] for h in held] == [0, 1]
        assert c.execute_command("WORKER.RENEW", "svc", 0, held[0][1], "UPTO", 9_999) == 600
    standby = next(n for n in march_cluster.nodes if n is not primary)
    with redis.Redis(port=standby.port, protocol=3) as c, pytest.raises(MovedError) as moved:
        c.execute_command("WORKER.ACQUIRE", "svc")
    assert str(moved.value).endswith(primary.address)
    march_cluster.kill(primary)
    new = march_cluster.wait_primary(timeout=20, exclude=[primary])
    with redis.Redis(port=new.port, protocol=3) as c:
        got = c.execute_command("WORKER.ACQUIRE", "svc")
        assert got[0] == 2  # 0 and 1 are live: the new primary never hands them out
        assert c.execute_command("WORKER.RENEW", "svc", 0, held[0][1]) == 600  # their holders carry on
        assert c.execute_command("WORKER.RENEW", "svc", 1, held[1][1], "UPTO", 1) == 600
        listed = {row[0]: row[2] for row in c.execute_command("WORKER.LIST", "svc")}
        assert listed == {0: 9_999, 1: 1, 2: 0}


async def test_a_new_primary_with_its_clock_ahead_counts_expiry_from_its_takeover(make_sim: SimFactory) -> None:
    sim = await make_sim(3, worker_margin=1.0)
    p = sim.primary
    held = await p.keyspace.workers.acquire(b"svc", 20)
    await p.keyspace.workers.renew(b"svc", held[0], held[1], upto=7_777)
    short = await p.keyspace.workers.acquire(b"svc", 1)
    p.cut()
    await sim.until(lambda: any(n.serving for n in sim.nodes if n is not p), "a standby takes over", 3 * TTL)
    q = next(n for n in sim.nodes if n is not p and n.serving)
    took_over = sim.clock.now()
    q.keyspace.wall_offset = 2 * 86_400  # the new primary's wall clock is two days ahead
    workers = q.keyspace.workers
    assert (await workers.acquire(b"svc", 600))[0] == 2  # neither 0 nor 1: both may be live
    await sim.advance(took_over + 1 + 1.0 + 0.1 - sim.clock.now())  # the short one: TTL + margin from the takeover
    assert (await workers.acquire(b"svc", 600))[0] == short[0]
    assert (await workers.acquire(b"svc", 600))[0] == 3  # id 0 is still live (its TTL is 20 s)
    q.keyspace.wall_offset = -2 * 86_400  # and two days behind: still nothing changes
    await sim.advance(took_over + 20 + 1.0 + 0.1 - sim.clock.now())
    again = await workers.acquire(b"svc", 600)
    assert again[0] == held[0] and again[3] == 7_777  # free after TTL + margin from the takeover, floor kept
    p.heal()
    await sim.advance(TTL)
    assert sim.overlaps == []


async def test_the_sweeper_deletes_free_records_and_keeps_their_floors(make_sim: SimFactory) -> None:
    sim = await make_sim(1, worker_margin=0.5)
    p = sim.primary
    workers = p.keyspace.workers
    store = p.node.store
    wall_ms = int(p.keyspace.wall() * 1000)
    held = [await workers.acquire(b"gone%d" % i, 1) for i in range(3)]
    await workers.release(b"gone0", held[0][0], held[0][1], upto=wall_ms - 120_000)  # old enough to go
    await workers.renew(b"gone1", held[1][0], held[1][1], upto=wall_ms + 3_600_000)  # an hour ahead: kept
    live = await workers.acquire(b"kept", 600)
    await sim.advance(5.0)  # the sweeper's rounds run on the clock
    assert await store.load_workers(b"gone0") == []
    assert await store.load_workers(b"gone2") == []  # expired, never declared a floor
    assert [r.id for r in await store.load_workers(b"gone1")] == [0]  # free, but its floor is in the future
    assert [r.id for r in await store.load_workers(b"kept")] == [live[0]]  # live: never deleted
    assert await store.retired_worker_upto() == wall_ms - 120_000
    assert (await workers.acquire(b"gone0"))[3] == wall_ms - 120_000  # the deleted record's floor, kept
    assert (await workers.acquire(b"gone1"))[3] == wall_ms + 3_600_000


@pytest.mark.e2e
def test_a_new_primary_with_its_clock_ahead_hands_out_no_live_id(etcd: EtcdCluster, tmp_path: Path) -> None:
    debug = ["--enable-debug-command", "yes"]
    with MarchCluster(tmp_path / "march", etcd.endpoints, extra_args=debug) as cluster:
        primary = cluster.wait_settled(timeout=20)
        with redis.Redis(port=primary.port, protocol=3) as c:
            held = c.execute_command("WORKER.ACQUIRE", "svc", "TTL", 600)  # a raw client: it trusts the TTL
        cluster.kill(primary)
        new = cluster.wait_primary(timeout=20, exclude=[primary])
        with redis.Redis(port=new.port, protocol=3) as c:
            assert c.execute_command("DEBUG", "CLOCK-OFFSET", 2 * 86_400_000) == b"OK"
            got = wait_until(lambda: _acquire_or_none(c), timeout=20, interval=0.1)
            assert got[0] == 1  # id 0 may be live: the new primary never hands it out
            assert c.execute_command("WORKER.RENEW", "svc", 0, held[1]) == 600
            listed = {row[0]: row[3] for row in c.execute_command("WORKER.LIST", "svc")}
            assert listed == {0: b"live", 1: b"live"}
            assert time.time() * 1000 < c.execute_command("WORKER.LIST", "svc")[0][1] - 86_400_000


def _acquire_or_none(c: redis.Redis) -> list[object] | None:
    try:
        reply = c.execute_command("WORKER.ACQUIRE", "svc", "TTL", 600)
    except (redis.exceptions.TryAgainError, redis.exceptions.ClusterDownError, MovedError):
        return None  # the new primary is still settling
    assert isinstance(reply, list)
    return reply
