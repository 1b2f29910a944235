"""Worker ids (``march.workers``) across a failover.

In process (fake etcd, manual clock, real ``Node``s): what the old primary granted is in etcd, so
the new primary never hands a live id out again, keeps its floor, renews it for its holder, and
the deposed primary can never grant an id again (its guard fails). Standbys refuse the worker
commands (they are primary-only).

With processes (a real etcd, three march nodes, redis-py): acquire on the primary, ``kill -9``
it, and the new primary refuses the same id while it is live, renews it for its holder, and a
standby answers MOVED.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis
from redis.exceptions import MovedError
from support.cluster import MarchCluster
from support.sim import TTL, SimFactory, sims

from march.generators.base import NotServing
from march.store.base import GuardFailed, WorkerRecord


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
    listed = {r.id: (r.floor_ms, live) for r, live in await workers.list(b"app")}
    assert listed[0] == (0, True) and listed[1] == (4343, True)
    p.heal()
    with pytest.raises(GuardFailed):  # a late write of the old term is refused by etcd, whoever sends it
        await p.node.store.save_worker(WorkerRecord(b"app", 0, b"thief", 10**13, 0, 600), None, old_guard)
    with pytest.raises(GuardFailed):
        await q.node.store.save_worker(WorkerRecord(b"app", 4, b"thief", 10**13, 0, 600), None, old_guard)
    assert [r.id for r, _ in await workers.list(b"app")] == [0, 1, 2, 3]
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
