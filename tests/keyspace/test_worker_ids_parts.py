"""The parts ``Workers`` is built from (``march.keyspace.worker_ids``), each on its own.

``test_worker_ids_model.py`` checks the whole against a model; here the two small jobs it hands on are
checked directly: ``_Serial`` (one namespace's operations one at a time, each within ``max_wait``)
and ``_Records`` (every store call bounded; a guard refused for leadership ends the term; the
retired UPTO read once per term). The sweeper runs through ``Workers.sweep`` in the model test.
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
from pathlib import Path

import pytest
from march_harness.manual_clock import ManualClock
from march_harness.memory_store import MemoryStore

from march import errors
from march.config import Config
from march.errors import CommandError
from march.generators.bound import NotServing
from march.keyspace.serving import ServingState, Term
from march.keyspace.worker_ids import _Known, _Records, _Serial
from march.store.contract import SINGLE_NODE, Guard, WorkerRecord
from march.store.etcd_workers import decode_worker, encode_worker
from march.store.membership import SQLITE_FILE
from march.store.sqlite_store import SqliteStore

LEADER = Guard(b"n1", 1)


async def test_one_namespace_runs_one_at_a_time_and_others_alongside() -> None:
    serial = _Serial(Config(max_wait=30.0))
    order: list[str] = []
    gate = asyncio.Event()

    async def work(name: str, wait: bool) -> str:
        order.append(f"{name} starts")
        if wait:
            await gate.wait()
        order.append(f"{name} ends")
        return name

    first = asyncio.create_task(serial.run(b"a", work("a1", wait=True)))
    second = asyncio.create_task(serial.run(b"a", work("a2", wait=False)))
    other = asyncio.create_task(serial.run(b"b", work("b1", wait=False)))
    assert await other == "b1"  # another namespace is not held up by a1
    assert order == ["a1 starts", "b1 starts", "b1 ends"]  # a2 waits for a1
    gate.set()
    assert (await first, await second) == ("a1", "a2")
    assert order[3:] == ["a1 ends", "a2 starts", "a2 ends"]
    assert serial._locks == {}  # no lock is kept for a namespace nobody uses


async def test_an_operation_past_max_wait_gets_tryagain_and_frees_its_namespace() -> None:
    serial = _Serial(Config(max_wait=0.05))
    with pytest.raises(CommandError) as caught:
        await serial.run(b"ns", asyncio.Event().wait())
    assert str(caught.value) == errors.TRYAGAIN_WORKERS.format("ns")
    assert serial._locks == {}
    assert await serial.run(b"ns", finish_with(7)) == 7


async def finish_with(value: int) -> int:
    return value


def leading() -> tuple[ServingState, Term]:
    state = ServingState(ManualClock())
    state.renewed(math.inf)
    term = state.promote(LEADER)
    state.serve()
    return state, term


RECORD = WorkerRecord(b"ns", 0, b"token", 0, 5, 10)


@pytest.mark.parametrize("call", ["swap", "delete"])
async def test_a_refused_guard_ends_the_term(call: str) -> None:
    store = MemoryStore()
    store.guard = Guard(b"n2", 2)  # another node leads now
    state, term = leading()
    records = _Records(Config(), store)
    with pytest.raises(NotServing):
        if call == "swap":
            await records.swap(RECORD, None, term)
        else:
            await records.delete(RECORD, term)
    assert not state.serving and term.ended


async def test_a_write_under_a_guard_that_holds_lands() -> None:
    store = MemoryStore()
    store.guard = LEADER
    state, term = leading()
    records = _Records(Config(), store)
    assert await records.swap(RECORD, None, term)
    assert not await records.swap(RECORD, None, term)  # the compare: it is no longer absent
    assert await records.delete(RECORD, term)
    assert state.serving
    assert await store.retired_worker_upto() == RECORD.upto_ms


async def test_a_store_call_is_bounded_by_store_timeout() -> None:
    store = MemoryStore()
    store.hold()  # a frozen disk
    records = _Records(Config(store_timeout=0.05), store)
    with pytest.raises(TimeoutError):
        await records.call(store.retired_worker_upto())
    store.release()


async def test_the_retired_floor_is_read_once_per_term() -> None:
    store = MemoryStore()
    store.retired_upto = 5
    _, term = leading()
    records = _Records(Config(), store)
    known = _Known(term, started=0.0)
    assert await records.retired(known) == 5
    store.retired_upto = 9  # written by nobody else while this term leads: it is not read again
    assert await records.retired(known) == 5
    assert await records.retired(_Known(term, started=0.0)) == 9  # a new term reads it again


async def test_a_workers_upto_keeps_its_stored_name(tmp_path: Path) -> None:
    """``WorkerRecord.upto_ms`` is stored under the name it always had, ``floor_ms`` (etcd's JSON,
    SQLite's columns): a record an earlier version wrote reads the same and is written back alike."""
    old = b'{"expires_ms":7,"floor_ms":5,"token":"t","ttl":30}'
    record = decode_worker(b"app", 3, old)
    assert record.upto_ms == 5 and encode_worker(record) == old
    store = SqliteStore(tmp_path)
    await store.open()
    try:
        assert await store.save_worker(record, None, SINGLE_NODE)
        assert await store.delete_worker(record, SINGLE_NODE)
    finally:
        await store.close()
    with sqlite3.connect(tmp_path / SQLITE_FILE) as db:
        assert db.execute("SELECT floor_ms FROM workers_retired").fetchone() == (5,)
        assert "floor_ms" in [row[1] for row in db.execute("PRAGMA table_info(workers)")]
