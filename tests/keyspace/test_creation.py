"""Creation by callbacks (``Creations.take_new``): an INCR on a new name, by a user who may create any
name, is read or created in one store call and answered from its done-callbacks, with no task per
request; the requests of one SQLite group commit share it; a request never waits past ``max_wait``;
concurrent requests for one new name share one creation and get distinct IDs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from march_harness.aio import FakeClock
from march_harness.memory_store import MemoryStore

from march.clock import SYSTEM
from march.config import Config
from march.errors import CommandError
from march.keyspace.keyspace import Keyspace
from march.keyspace.serving import ServingState
from march.store.contract import SINGLE_NODE, Store
from march.store.sqlite_store import SqliteStore

CONFIG = Config(min_batch=10, max_batch=1000, max_wait=0.2, store_timeout=5.0)
NEW = 300  # new names asked at once


def keyspace(store: Store) -> Keyspace:
    return Keyspace(CONFIG, store, ServingState.forever(SYSTEM, SINGLE_NODE), clock=FakeClock(50.0))


async def counted(ks: Keyspace) -> None:
    """The term's first creation counts the sequences (``census``): the ordinary way, once."""
    gen = await ks.ensure(b"first")
    await ks.take_from(gen, 1)


async def test_new_names_on_sqlite_cost_no_task_each_and_share_group_commits(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path)
    await store.open()
    try:
        ks = keyspace(store)
        await counted(ks)
        chunks: list[int] = []
        real = store._load_or_create_batch

        async def counting(records: list) -> object:  # type: ignore[type-arg]
            chunks.append(len(records))
            return await real(records)

        store._finds._run = counting  # type: ignore[assignment]
        tasks_before = len(asyncio.all_tasks())
        answers = [ks.take_new(b"new:%d" % i, 1) for i in range(NEW)]
        assert all(a is not None for a in answers)
        # the requests wait on futures: at most the group commit's own task, never one per request
        assert len(asyncio.all_tasks()) - tasks_before <= 2
        got = await asyncio.gather(*answers)  # type: ignore[arg-type]
        assert got == [1] * NEW
        assert sum(chunks) == NEW and len(chunks) <= 4, chunks  # a few transactions for them all
        assert all(b"new:%d" % i in ks.table for i in range(NEW))  # rows after their first ID
        assert ks.take_new(b"new:0", 1) is None  # a row now: the fast path serves it (``parked``)
        assert ks.parked(b"new:0", 1) == 2
    finally:
        await store.close()


async def test_concurrent_requests_for_one_new_name_share_one_creation_and_get_distinct_ids() -> None:
    store = MemoryStore()
    ks = keyspace(store)
    await counted(ks)
    first = ks.take_new(b"k", 1)
    assert first is not None
    assert ks.take_new(b"k", 1) is None  # a creation of the key is under way: the coroutine path shares it
    others = [ks.take_from(await ks.ensure(b"k"), 1) for _ in range(5)]
    got = [await first, *await asyncio.gather(*others)]
    assert sorted(got) == list(range(1, 7))  # one range for all: a second creation would only find it


async def test_a_frozen_store_answers_tryagain_within_max_wait_and_the_creation_lands_later() -> None:
    store = MemoryStore()
    ks = keyspace(store)
    await counted(ks)
    store.hold()
    loop = asyncio.get_running_loop()
    started = loop.time()
    answer = ks.take_new(b"late", 1)
    assert answer is not None
    with pytest.raises(CommandError, match=r"^TRYAGAIN"):
        await asyncio.wait_for(answer, 5.0)
    assert loop.time() - started < 2.0  # max_wait is 0.2 s
    store.release()
    gen = await ks.ensure(b"late")  # the creation went on: found, not created twice
    assert await ks.take_from(gen, 1) == 1  # (its first request got no ID: 1 is still unused)
    assert store.records[b"late"].ceiling == 1 + CONFIG.min_batch


def test_a_keyspace_used_from_a_second_event_loop_makes_its_futures_on_that_loop() -> None:
    """``take_new`` keeps the running loop (``Creations._running_loop``, no ``getpid`` a creation):
    one that no longer runs is not used again."""
    ks = keyspace(MemoryStore())

    async def first_id(key: bytes) -> int:
        answer = ks.take_new(key, 1)
        assert answer is not None
        assert answer.get_loop() is asyncio.get_running_loop()
        return await answer

    async def counted_then(key: bytes) -> int:
        await counted(ks)
        return await first_id(key)

    assert asyncio.run(counted_then(b"a")) == 1
    assert asyncio.run(first_id(b"b")) == 1
