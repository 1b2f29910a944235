"""Unit tests of what only the embedded store has: a real SQLite file in a data dir.

The store contract (round trips, ceilings only up, listing, batching) is in ``test_store_contract.py``,
which runs against this store too. Here: data survives close and reopen (the largest ceilings
too, stored as text yet compared as numbers); two servers can never share a data dir (the flock,
released on close), while a ``read_only`` store (a backup's) reads beside the owner and writes
nothing; the file is in WAL mode with ``synchronous=FULL``; no call blocks the event
loop; a data dir that cannot be created or written is a ``StoreError`` with a one-line message
and leaves nothing half-open; a full database is ``StoreFull`` and shows in ``describe()``; calls
in one loop turn share one transaction.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from march_harness.aio import finish

from march.errors import StoreError, StoreFull, StoreLocked
from march.store.contract import SINGLE_NODE, SequenceRecord
from march.store.sqlite_store import SqliteStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "data")
    await s.open()
    yield s
    await s.close()


def rec(key: bytes, ceiling: int, **settings: Any) -> SequenceRecord:
    return SequenceRecord(key, "sequence", ceiling, settings)


async def on_store_thread(store: SqliteStore, sql: str) -> Any:
    """Run ``sql`` on the store's own connection, on its own thread; the first column of the first row."""
    db = store._db
    assert db is not None
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(store._pool, lambda: db.execute(sql).fetchone()[0])


async def test_data_survives_close_and_reopen(tmp_path: Path) -> None:
    records = [rec(b"top", 2**63), rec(b"max", 2**63 - 1), rec(b"nine", 9, min_batch=10), rec(b"\xff\x00", 1)]
    first = SqliteStore(tmp_path / "data")
    await first.open()
    for r in records:
        await first.create(r, SINGLE_NODE)
    assert await first.save_ceiling(b"nine", 10, SINGLE_NODE) == 10
    await first.close()
    second = SqliteStore(tmp_path / "data")
    await second.open()
    try:
        assert [await second.load(r.key) for r in records] == [*records[:2], rec(b"nine", 10, min_batch=10), records[3]]
        assert await second.save_ceiling(b"nine", 9, SINGLE_NODE) == 10  # compared as numbers after reopen too
        assert await second.save_ceiling(b"top", 2**63 - 1, SINGLE_NODE) == 2**63
        assert await second.count() == 4
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


async def test_a_read_only_store_reads_beside_the_owner_and_writes_nothing(store: SqliteStore, tmp_path: Path) -> None:
    records = [rec(b"a", 5, min_batch=3), rec(b"b", 2**63)]
    for r in records:
        await store.create(r, SINGLE_NODE)
    await store.save_user("u", "on", 0)
    reader = SqliteStore(tmp_path / "data", read_only=True)
    await reader.open()  # no lock: the owner holds it
    try:
        assert await reader.export_sequences(None, 10) == records
        assert await reader.export_sequences(b"a", 10) == records[1:]
        assert [u.name for u in (await reader.load_users()).records] == ["u"]
        await store.create(rec(b"c", 1), SINGLE_NODE)  # the owner writes on meanwhile: the reader sees it
        assert [r.key for r in await reader.export_sequences(None, 10)] == [b"a", b"b", b"c"]
        for write in (reader.create(rec(b"x", 1), SINGLE_NODE), reader.raise_to([rec(b"a", 99)])):
            with pytest.raises(StoreError, match="readonly"):
                await write
        assert await store.load(b"a") == records[0]
    finally:
        await reader.close()
    missing = SqliteStore(tmp_path / "nothing", read_only=True)
    with pytest.raises(StoreError, match="no March store in"):
        await missing.open()
    assert not (tmp_path / "nothing").exists()  # a reader creates nothing


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
    await s.create(rec(b"k", 1), SINGLE_NODE)
    await s.close()
    with pytest.raises(StoreError):
        await s.load(b"k")
    with pytest.raises(StoreError):
        await s.save_ceiling(b"k", 5, SINGLE_NODE)
    with pytest.raises(StoreError):
        await s.create(rec(b"j", 1), SINGLE_NODE)
    with pytest.raises(StoreError):
        await s.list_keys()
    with pytest.raises(StoreError):
        await s.count()
    await s.close()  # closing twice is harmless


def broken_data_dirs(tmp_path: Path) -> dict[str, Path]:
    """Data dirs that cannot be used, even by root (chmod does not stop root)."""
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    return {
        "under a regular file": a_file / "data",
        "a regular file": a_file,
        "in /proc": Path("/proc/march-test-no-such-dir/data"),
        "unwritable (/proc/self)": Path("/proc/self"),
    }


@pytest.mark.parametrize("case", ["under a regular file", "a regular file", "in /proc", "unwritable (/proc/self)"])
async def test_a_data_dir_that_cannot_be_used_is_a_one_line_store_error(tmp_path: Path, case: str) -> None:
    data_dir = broken_data_dirs(tmp_path)[case]
    s = SqliteStore(data_dir)
    with pytest.raises(StoreError) as err:
        await s.open()
    assert type(err.value) is StoreError  # not StoreLocked: nobody else holds it
    message = str(err.value)
    assert message.startswith(f"data dir {data_dir}: ") and len(message) > len(f"data dir {data_dir}: ")
    assert "\n" not in message
    with pytest.raises(StoreError):  # nothing half-open
        await s.load(b"k")
    await s.close()


async def test_a_data_file_that_cannot_be_opened_is_a_store_error_and_releases_the_lock(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    (data_dir / "march.sqlite3").mkdir(parents=True)  # a directory where the database file should be
    s = SqliteStore(data_dir)
    with pytest.raises(StoreError) as err:
        await s.open()
    assert str(s.path) in str(err.value) and "\n" not in str(err.value)
    (data_dir / "march.sqlite3").rmdir()
    again = SqliteStore(data_dir)
    await again.open()  # the failed open let go of the lock
    try:
        assert await again.create(rec(b"k", 1), SINGLE_NODE)
    finally:
        await again.close()


async def test_the_file_is_in_wal_mode_with_full_sync(store: SqliteStore) -> None:
    assert store.path == store.dir / "march.sqlite3" and store.path.exists()
    outside = sqlite3.connect(store.path)
    try:
        assert outside.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # a property of the file
    finally:
        outside.close()
    assert await on_store_thread(store, "PRAGMA synchronous") == 2  # per connection: 2 = FULL


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
        assert await finish(write, 5.0) == 20
    finally:
        outside.close()
    assert await store.load(b"k") == rec(b"k", 20)


async def test_listing_and_counting_never_wait_for_a_write(store: SqliteStore, tmp_path: Path) -> None:
    """KEYS/SCAN read on their own connection and thread, DBSIZE from memory: with the writer's thread
    stuck (a write that takes forever: a frozen disk), they still answer, and see what was committed."""
    names = [b"k%03d" % i for i in range(120)]
    assert all(await asyncio.gather(*(store.create(rec(k, 1), SINGLE_NODE) for k in names)))
    gate = threading.Event()
    assert store._pool is not None
    stuck = asyncio.get_running_loop().run_in_executor(store._pool, gate.wait, 10.0)  # the writer's one thread
    write = asyncio.create_task(store.create(rec(b"late", 1), SINGLE_NODE))  # queued behind it
    try:
        assert await finish(store.count(), 1.0) == 120
        assert await finish(store.list_keys(b"k", None, 1000), 1.0) == names
        cursor, page = await finish(store.scan(0, 100, SINGLE_NODE), 1.0)
        assert page == names[:100] and cursor != 0  # rowids: in creation order
        assert (await finish(store.scan(cursor, 100, SINGLE_NODE), 1.0)) == (0, names[100:])
        assert not write.done(), "the write went through while the writer's thread was stuck"
    finally:
        gate.set()
    await stuck
    assert await finish(write, 5.0) is True
    assert await store.count() == 121
    await store.close()
    again = SqliteStore(tmp_path / "data")
    await again.open()
    try:
        assert await again.count() == 121  # counted once at open
    finally:
        await again.close()


async def test_calls_in_one_loop_turn_share_one_transaction(store: SqliteStore) -> None:
    await store.create(rec(b"seed", 1), SINGLE_NODE)
    commits: list[int] = []
    db = store._db
    assert db is not None
    db.set_trace_callback(lambda sql: commits.append(1) if sql.strip().upper() == "COMMIT" else None)
    try:
        created = await asyncio.gather(*(store.create(rec(b"k%d" % i, 1), SINGLE_NODE) for i in range(300)))
        saved = await asyncio.gather(*(store.save_ceiling(b"k%d" % i, 5 + i, SINGLE_NODE) for i in range(300)))
    finally:
        db.set_trace_callback(None)
    assert created == [True] * 300 and saved == [5 + i for i in range(300)]
    assert len(commits) == 2, f"{len(commits)} commits for two loop turns of writes"


async def test_a_full_database_is_store_full_until_there_is_room(store: SqliteStore) -> None:
    await store.create(rec(b"k", 1), SINGLE_NODE)
    pages = await on_store_thread(store, "PRAGMA page_count")
    assert await on_store_thread(store, f"PRAGMA max_page_count = {pages}") == pages  # the "disk" is full now
    big = [rec(b"big%d" % i, 1, pad="x" * 2000) for i in range(50)]
    results = await asyncio.gather(*(store.create(r, SINGLE_NODE) for r in big), return_exceptions=True)
    assert all(isinstance(r, StoreFull) for r in results), results[:3]
    assert "full" in str(results[0])
    assert store.out_of_space and store.describe()["store_out_of_space"] == 1
    assert store.describe()["store_last_error"] == str(results[0])
    assert await store.load(b"big0") is None  # nothing of the failed transaction stayed
    await on_store_thread(store, "PRAGMA max_page_count = 1000000")
    assert await store.save_ceiling(b"k", 2, SINGLE_NODE) == 2
    assert not store.out_of_space and store.describe() == {
        "store": "sqlite",
        "store_path": str(store.path),
        "store_out_of_space": 0,
        "store_last_error": "",
    }


async def test_users_of_a_data_dir_from_before_revisions_come_at_revision_1(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    old = sqlite3.connect(data / "march.sqlite3")
    old.executescript("CREATE TABLE users (name TEXT PRIMARY KEY, rules TEXT NOT NULL);")
    old.execute("INSERT INTO users VALUES ('app', 'on #ab ~* +@all'), ('default', 'on nopass ~* +@all')")
    old.commit()
    old.close()
    s = SqliteStore(data)
    await s.open()
    try:
        read = await s.load_users()
        assert [(r.name, r.rules, r.revision) for r in read.records] == [
            ("app", "on #ab ~* +@all", 1),
            ("default", "on nopass ~* +@all", 1),
        ]
        assert read.revision == 1
        assert await s.save_user("app", "off", 0) is None  # it exists
        assert await s.save_user("app", "off", 1) == 2  # past every revision there is
    finally:
        await s.close()
