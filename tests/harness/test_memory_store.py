"""Unit tests of the memory store's knobs: the test double the generator tests lean on.

The store contract itself (create once, ceilings only move up, the guard, listing) is in
``tests/store/test_store_contract.py``, which runs against this store too. Here: the knobs do exactly what the
generator tests assume. ``writes`` records only what landed and ``attempts`` counts every write
tried; ``reads`` counts loads; ``fail_next`` fails exactly that many writes with a transient
``StoreError``; ``hold()`` hangs every call (reads and writes) until ``release()``, and a held
write whose caller gives up never lands; ``delay`` makes writes land late.
"""

from __future__ import annotations

import asyncio

import pytest
from march_harness.aio import finish, until
from march_harness.memory_store import MemoryStore

from march.errors import GuardFailed, StoreError
from march.store.contract import SINGLE_NODE, SequenceRecord


def rec(key: bytes, ceiling: int) -> SequenceRecord:
    return SequenceRecord(key, "sequence", ceiling, {"min_batch": 4})


async def test_writes_records_only_what_landed_and_attempts_counts_every_write() -> None:
    store = MemoryStore()
    assert await store.create(rec(b"k", 10), SINGLE_NODE)
    assert not await store.create(rec(b"k", 99), SINGLE_NODE)  # exists: nothing written
    assert await store.save_ceiling(b"k", 11, SINGLE_NODE) == 11
    assert await store.save_ceiling(b"k", 5, SINGLE_NODE) == 11  # answered from what is stored: no write
    with pytest.raises(GuardFailed):
        await store.save_ceiling(b"unknown", 5, SINGLE_NODE)
    assert await store.create(rec(b"j", 1), SINGLE_NODE)
    assert store.writes == [(b"k", 10), (b"k", 11), (b"j", 1)]
    assert store.attempts == 6


async def test_reads_counts_loads() -> None:
    store = MemoryStore()
    await store.create(rec(b"k", 10), SINGLE_NODE)
    assert store.reads == 0
    await store.load(b"k")
    await store.load(b"missing")
    assert store.reads == 2


async def test_fail_next_fails_exactly_that_many_writes() -> None:
    store = MemoryStore()
    await store.create(rec(b"k", 10), SINGLE_NODE)
    store.fail_next = 2
    with pytest.raises(StoreError) as err:
        await store.create(rec(b"j", 1), SINGLE_NODE)
    assert not isinstance(err.value, GuardFailed)  # transient, not "step down"
    with pytest.raises(StoreError) as err:
        await store.save_ceiling(b"k", 12, SINGLE_NODE)
    assert not isinstance(err.value, GuardFailed)
    assert await store.save_ceiling(b"k", 13, SINGLE_NODE) == 13
    assert await store.load(b"j") is None  # the failed create wrote nothing
    assert store.writes == [(b"k", 10), (b"k", 13)]
    assert store.attempts == 4


async def test_hold_hangs_every_call_until_release() -> None:
    store = MemoryStore()
    await store.create(rec(b"k", 10), SINGLE_NODE)
    store.hold()
    calls = [
        asyncio.create_task(store.save_ceiling(b"k", 20, SINGLE_NODE)),
        asyncio.create_task(store.create(rec(b"j", 1), SINGLE_NODE)),
        asyncio.create_task(store.load(b"k")),
        asyncio.create_task(store.list_keys()),
        asyncio.create_task(store.count()),
    ]
    await until(lambda: store.attempts == 3 and store.reads == 1, "the calls to start")
    for _ in range(50):  # let the loop turn: a call that is not held would finish meanwhile
        await asyncio.sleep(0)
    assert not any(c.done() for c in calls)
    assert store.writes == [(b"k", 10)]
    store.release()
    assert await finish(asyncio.gather(*calls)) == [20, True, rec(b"k", 20), [b"j", b"k"], 2]
    assert await finish(store.save_ceiling(b"k", 30, SINGLE_NODE)) == 30  # released for good


async def test_a_held_write_that_is_abandoned_never_lands() -> None:
    store = MemoryStore()
    await store.create(rec(b"k", 10), SINGLE_NODE)
    store.hold()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(store.save_ceiling(b"k", 20, SINGLE_NODE), 0.01)
    store.release()
    for _ in range(20):
        await asyncio.sleep(0)
    assert store.writes == [(b"k", 10)]
    assert await store.save_ceiling(b"k", 15, SINGLE_NODE) == 15  # the abandoned 20 is not stored


async def test_delay_makes_writes_land_late() -> None:
    store = MemoryStore()
    await store.create(rec(b"k", 10), SINGLE_NODE)
    store.delay = 0.02
    loop = asyncio.get_running_loop()
    started = loop.time()
    write = asyncio.create_task(store.save_ceiling(b"k", 20, SINGLE_NODE))
    await asyncio.sleep(0)
    assert not write.done() and store.writes == [(b"k", 10)]
    assert await finish(write) == 20
    assert loop.time() - started >= 0.015
    assert store.writes[-1] == (b"k", 20)
