"""Unit tests of the embedded store: a real SQLite file in a temporary data dir.

What matters for the guarantees: a ceiling only moves up (a write that would not raise it is
refused with GuardFailed), the largest ceiling 2**63 survives, data survives close/reopen, two
servers can never share a data dir, and no call blocks the event loop.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from march.generators.base import BatchPolicy, SingleNodeLease
from march.generators.sequence import MAX_ID, TOP, SequenceGenerator
from march.store.base import SINGLE_NODE, GuardFailed, SequenceRecord, StoreError, StoreLocked
from march.store.sqlite import SqliteStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "data")
    await s.open()
    yield s
    await s.close()


def rec(key: bytes, ceiling: int, **settings: int) -> SequenceRecord:
    return SequenceRecord(key, "sequence", ceiling, settings)


async def test_create_load_and_load_all_round_trip(store: SqliteStore) -> None:
    assert await store.load(b"a") is None
    assert await store.load_all() == []
    records = [rec(b"b", 11), rec(b"a", 1001, min_batch=5, max_batch=50), rec(b"\xff\x00bin\r\n", 7)]
    for r in records:
        assert await store.create(r, SINGLE_NODE) is True
    for r in records:
        assert await store.load(r.key) == r
    assert await store.load_all() == records  # in creation order
    loaded = await store.load(b"a")
    assert loaded is not None and type(loaded.key) is bytes and loaded.settings == {"min_batch": 5, "max_batch": 50}


async def test_create_of_an_existing_key_changes_nothing(store: SqliteStore) -> None:
    assert await store.create(rec(b"k", 100), SINGLE_NODE) is True
    assert await store.create(rec(b"k", 5, min_batch=1), SINGLE_NODE) is False
    assert await store.create(rec(b"k", 10**6), SINGLE_NODE) is False
    assert await store.load(b"k") == rec(b"k", 100)
    assert len(await store.load_all()) == 1


async def test_save_ceiling_only_moves_up(store: SqliteStore) -> None:
    await store.create(rec(b"k", 100, min_batch=3), SINGLE_NODE)
    await store.save_ceiling(b"k", 101, SINGLE_NODE)
    assert await store.load(b"k") == rec(b"k", 101, min_batch=3)  # settings untouched
    for lower_or_equal in (101, 100, 0):
        with pytest.raises(GuardFailed):
            await store.save_ceiling(b"k", lower_or_equal, SINGLE_NODE)
    assert (await store.load(b"k")) == rec(b"k", 101, min_batch=3)
    await store.save_ceiling(b"k", 10**12, SINGLE_NODE)
    record = await store.load(b"k")
    assert record is not None and record.ceiling == 10**12


async def test_save_ceiling_of_an_unknown_key_is_refused(store: SqliteStore) -> None:
    with pytest.raises(GuardFailed):
        await store.save_ceiling(b"ghost", 10, SINGLE_NODE)
    assert await store.load(b"ghost") is None


async def test_the_largest_ceilings_round_trip(store: SqliteStore, tmp_path: Path) -> None:
    # 2**63 does not fit SQLite's INTEGER; the comparison must still be numeric, not textual.
    await store.create(rec(b"top", MAX_ID - 5), SINGLE_NODE)
    await store.create(rec(b"created-at-top", TOP), SINGLE_NODE)
    await store.create(rec(b"max", MAX_ID), SINGLE_NODE)  # not a float: 2**63 - 1 must not round
    await store.save_ceiling(b"top", TOP, SINGLE_NODE)
    with pytest.raises(GuardFailed):
        await store.save_ceiling(b"top", TOP, SINGLE_NODE)
    await store.create(rec(b"nine", 9), SINGLE_NODE)
    await store.save_ceiling(b"nine", 10, SINGLE_NODE)  # "10" < "9" as text; 10 > 9 as numbers
    with pytest.raises(GuardFailed):
        await store.save_ceiling(b"nine", 9, SINGLE_NODE)
    await store.close()
    again = SqliteStore(tmp_path / "data")
    await again.open()
    try:
        assert [(r.key, r.ceiling) for r in await again.load_all()] == [
            (b"top", 2**63),
            (b"created-at-top", 2**63),
            (b"max", 2**63 - 1),
            (b"nine", 10),
        ]
    finally:
        await again.close()


async def test_data_survives_close_and_reopen(tmp_path: Path) -> None:
    first = SqliteStore(tmp_path / "data")
    await first.open()
    await first.create(rec(b"k", 11, min_batch=10), SINGLE_NODE)
    await first.save_ceiling(b"k", 5000, SINGLE_NODE)
    await first.close()
    second = SqliteStore(tmp_path / "data")
    await second.open()
    try:
        assert await second.load(b"k") == rec(b"k", 5000, min_batch=10)
        with pytest.raises(GuardFailed):
            await second.save_ceiling(b"k", 4999, SINGLE_NODE)
    finally:
        await second.close()


async def test_a_second_store_on_the_same_data_dir_is_refused(store: SqliteStore, tmp_path: Path) -> None:
    other = SqliteStore(tmp_path / "data")
    with pytest.raises(StoreLocked) as err:
        await other.open()
    message = str(err.value)
    assert str(tmp_path / "data") in message
    assert "in use by another March server" in message
    assert f"pid {os.getpid()}" in message  # who holds it
    assert "same IDs" in message  # and why that is refused
    with pytest.raises(StoreError):  # the refused store is not half-open
        await other.load(b"k")
    await store.create(rec(b"k", 1), SINGLE_NODE)  # the owner is unaffected
    assert await store.load(b"k") == rec(b"k", 1)


async def test_close_releases_the_lock(tmp_path: Path) -> None:
    first = SqliteStore(tmp_path / "data")
    await first.open()
    await first.create(rec(b"k", 1), SINGLE_NODE)
    await first.close()
    second = SqliteStore(tmp_path / "data")
    await second.open()
    try:
        assert await second.load(b"k") == rec(b"k", 1)
        third = SqliteStore(tmp_path / "data")
        with pytest.raises(StoreLocked):
            await third.open()
    finally:
        await second.close()


async def test_calls_after_close_raise_store_error(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "data")
    await s.open()
    await s.close()
    with pytest.raises(StoreError):
        await s.load(b"k")
    with pytest.raises(StoreError):
        await s.save_ceiling(b"k", 5, SINGLE_NODE)
    await s.close()  # closing twice is harmless


async def test_the_file_is_in_wal_mode_with_full_sync(store: SqliteStore) -> None:
    assert store.path == store.dir / "march.sqlite3" and store.path.exists()
    outside = sqlite3.connect(store.path)
    try:
        assert outside.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # a property of the file
    finally:
        outside.close()
    # synchronous is per connection: ask the store's own (2 = FULL)
    db = store._db
    assert db is not None
    assert (
        await asyncio.get_running_loop().run_in_executor(
            store._pool, lambda: db.execute("PRAGMA synchronous").fetchone()[0]
        )
        == 2
    )


async def test_a_slow_write_does_not_block_the_event_loop(store: SqliteStore) -> None:
    await store.create(rec(b"k", 10), SINGLE_NODE)
    # Another connection holds the database's write lock, so the store's write has to wait for it.
    outside = sqlite3.connect(store.path, isolation_level=None)
    try:
        outside.execute("BEGIN IMMEDIATE")
        write = asyncio.create_task(store.save_ceiling(b"k", 20, SINGLE_NODE))
        turns = 0
        for _ in range(2000):  # the loop keeps turning while the write is stuck
            await asyncio.sleep(0)
            turns += 1
        assert not write.done(), "the write finished while the database was locked"
        assert turns == 2000
        outside.execute("ROLLBACK")
        await asyncio.wait_for(write, 5.0)
    finally:
        outside.close()
    assert await store.load(b"k") == rec(b"k", 20)


async def test_a_generator_on_sqlite_continues_above_its_ids_after_reopen(tmp_path: Path) -> None:
    policy = BatchPolicy(min_batch=10, max_batch=10, max_wait=2.0)
    handed: list[int] = []
    for life in range(3):
        s = SqliteStore(tmp_path / "data")
        await s.open()
        try:
            if life == 0:
                await s.create(rec(b"k", 11), SINGLE_NODE)
                gen = SequenceGenerator(b"k", 11, s, SingleNodeLease(), policy, lambda: 0.0, next_id=1)
            else:
                record = await s.load(b"k")
                assert record is not None
                gen = SequenceGenerator(b"k", record.ceiling, s, SingleNodeLease(), policy, lambda: 0.0)
            for n in (1, 4, 1, 25, 1):
                value = gen.take(n)
                if value is None:
                    value = await asyncio.wait_for(gen.take_wait(n), 5.0)
                stored = await s.load(b"k")
                assert stored is not None and value < stored.ceiling
                assert not handed or value - n + 1 > handed[-1]
                handed.append(value)
            await asyncio.wait_for(gen.drain(), 5.0)
        finally:
            await s.close()
    assert handed[0] == 1 and len(set(handed)) == len(handed)
