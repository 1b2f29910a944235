"""Unit tests of the memory store: the test double the generator tests lean on.

It must follow the store contract (create once, ceilings only move up, a wrong guard is refused)
and its knobs must do exactly what the generator tests assume: ``fail_next`` fails that many
writes, ``hold()`` hangs writes until ``release()``, ``delay`` makes them late, ``writes`` records
only what landed.
"""

from __future__ import annotations

import asyncio

import pytest
from support.aio import until

from march.store.base import SINGLE_NODE, Guard, GuardFailed, SequenceRecord, StoreError
from march.store.memory import MemoryStore


def rec(key: bytes, ceiling: int) -> SequenceRecord:
    return SequenceRecord(key, "sequence", ceiling, {"min_batch": 4})


async def test_follows_the_store_contract() -> None:
    store = MemoryStore()
    await store.open()
    assert await store.load(b"k") is None
    assert await store.create(rec(b"k", 10), SINGLE_NODE) is True
    assert await store.create(rec(b"k", 99), SINGLE_NODE) is False
    assert await store.load(b"k") == rec(b"k", 10)
    await store.save_ceiling(b"k", 11, SINGLE_NODE)
    for not_greater in (11, 10, 0):
        with pytest.raises(GuardFailed):
            await store.save_ceiling(b"k", not_greater, SINGLE_NODE)
    with pytest.raises(GuardFailed):
        await store.save_ceiling(b"unknown", 5, SINGLE_NODE)
    assert await store.load(b"k") == rec(b"k", 11)  # settings kept
    assert await store.create(rec(b"j", 1), SINGLE_NODE)
    assert [r.key for r in await store.load_all()] == [b"k", b"j"]
    assert store.writes == [(b"k", 10), (b"k", 11), (b"j", 1)]  # only what landed
    await store.close()


async def test_a_different_guard_is_refused() -> None:
    store = MemoryStore()
    await store.create(rec(b"k", 10), SINGLE_NODE)
    store.guard = Guard(b"node-2", 3)
    with pytest.raises(GuardFailed):
        await store.save_ceiling(b"k", 20, SINGLE_NODE)
    with pytest.raises(GuardFailed):
        await store.create(rec(b"j", 1), SINGLE_NODE)
    await store.save_ceiling(b"k", 20, Guard(b"node-2", 3))
    assert store.writes == [(b"k", 10), (b"k", 20)]


async def test_fail_next_fails_exactly_that_many_writes() -> None:
    store = MemoryStore()
    await store.create(rec(b"k", 10), SINGLE_NODE)
    store.fail_next = 2
    for ceiling in (11, 12):
        with pytest.raises(StoreError) as err:
            await store.save_ceiling(b"k", ceiling, SINGLE_NODE)
        assert not isinstance(err.value, GuardFailed)  # transient, not "step down"
    await store.save_ceiling(b"k", 13, SINGLE_NODE)
    assert store.writes == [(b"k", 10), (b"k", 13)]
    assert store.attempts == 4


async def test_hold_hangs_writes_until_release() -> None:
    store = MemoryStore()
    await store.create(rec(b"k", 10), SINGLE_NODE)
    store.hold()
    write = asyncio.create_task(store.save_ceiling(b"k", 20, SINGLE_NODE))
    await until(lambda: store.attempts == 2, "the write to start")
    for _ in range(50):
        await asyncio.sleep(0)
    assert not write.done() and store.writes == [(b"k", 10)]
    assert await store.load(b"k") == rec(b"k", 10)  # reads are not held
    store.release()
    await asyncio.wait_for(write, 2.0)
    assert store.writes[-1] == (b"k", 20)
    await asyncio.wait_for(store.save_ceiling(b"k", 30, SINGLE_NODE), 2.0)  # released for good


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
    await store.save_ceiling(b"k", 15, SINGLE_NODE)  # so a lower, later write is not refused


async def test_delay_makes_writes_land_late() -> None:
    store = MemoryStore()
    await store.create(rec(b"k", 10), SINGLE_NODE)
    store.delay = 0.02
    loop = asyncio.get_running_loop()
    write = asyncio.create_task(store.save_ceiling(b"k", 20, SINGLE_NODE))
    started = loop.time()
    await asyncio.sleep(0)
    assert not write.done()
    await asyncio.wait_for(write, 2.0)
    assert loop.time() - started >= 0.015
    assert store.writes[-1] == (b"k", 20)
