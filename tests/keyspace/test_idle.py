"""Unit tests of ``march.keyspace.idle`` on a real ``Keyspace`` (memory store): a sequence idle across two
visits of the sweep leaves its generator for a row of the keyspace's table and goes on where it was
(one with settings of its own leaves memory, and its next ID is above every earlier one); a dropped generator
hands out nothing; a sequence with a store write in flight or a waiting request stays; a pass over
many generators takes turns with other work (sliced). The process-level test is
``tests/keyspace/test_idle_server.py``."""

from __future__ import annotations

import asyncio

from march_harness.memory_store import MemoryStore

from march.clock import SYSTEM
from march.config import Config
from march.keyspace import idle
from march.keyspace.keyspace import Keyspace
from march.keyspace.serving import ServingState
from march.store.contract import SINGLE_NODE

CONFIG = Config(min_batch=10, max_batch=1000, max_wait=0.5, sequence_idle_seconds=3600)


def keyspace(store: MemoryStore) -> Keyspace:
    return Keyspace(CONFIG, store, ServingState.forever(SYSTEM, SINGLE_NODE))


async def sweep(ks: Keyspace) -> None:
    """One pass of the sweep, now (the sweeper's own timing is the e2e test's)."""
    term = ks.state.term
    assert term is not None
    await ks.idle._pass(term)


async def test_an_idle_sequence_leaves_its_generator_for_a_row_and_continues_where_it_was() -> None:
    store = MemoryStore()
    ks = keyspace(store)
    gen = await ks.ensure(b"a")
    ids = [await gen.take_wait(1) for _ in range(15)]  # past the first range: one extension landed
    await sweep(ks)
    assert ks.generators.get(b"a") is gen  # first visit: noted
    await sweep(ks)
    assert b"a" not in ks.generators and b"a" in ks.table and (ks.idle.dropped, ks.idle.parked) == (1, 1)
    assert gen.take(1) is None and gen.take_run(3) is None  # a stale reference hands out nothing
    assert ks.parked(b"a", 1) == max(ids) + 1  # the row goes on from the range it kept (no gap)
    again = await ks.activate(b"a")  # read by a command: a generator again, made from the row
    assert again is not None and again is not gen and b"a" not in ks.table
    assert await again.take_wait(1) == max(ids) + 2


async def test_an_idle_sequence_with_settings_of_its_own_leaves_memory_and_continues_above() -> None:
    store = MemoryStore()
    ks = keyspace(store)
    gen = await ks.create(b"a", start=1, settings={"min_batch": 20})
    ids = [await gen.take_wait(1) for _ in range(25)]
    await sweep(ks)
    await sweep(ks)
    assert ks.get(b"a") is None and b"a" not in ks.table and (ks.idle.dropped, ks.idle.parked) == (1, 0)
    assert gen.take(1) is None and gen.take_run(3) is None  # a stale reference hands out nothing
    again = await ks.activate(b"a")
    assert again is not None and again is not gen
    assert await again.take_wait(1) > max(ids)


async def test_a_sequence_used_between_two_visits_stays() -> None:
    ks = keyspace(MemoryStore())
    gen = await ks.ensure(b"a")
    await sweep(ks)
    await gen.take_wait(1)
    await sweep(ks)
    await sweep(ks)  # (idle from the second visit on: dropped only at the third)
    assert ks.idle.dropped == 1
    gen2 = await ks.ensure(b"b")
    await sweep(ks)
    gen2.take(1)
    await sweep(ks)
    assert ks.get(b"b") is gen2


async def test_a_sequence_with_a_write_in_flight_or_a_waiter_stays() -> None:
    store = MemoryStore()
    ks = keyspace(store)
    gen = await ks.ensure(b"a")
    for _ in range(9):  # the whole first range (min_batch 10, from 1)
        await gen.take_wait(1)
    store.hold(reads=False)  # the next extension hangs
    waiter = asyncio.ensure_future(gen.take_wait(5))  # needs the extension: waits
    await asyncio.sleep(0.01)
    assert gen.busy
    for _ in range(3):
        await sweep(ks)
    assert ks.get(b"a") is gen and ks.idle.dropped == 0
    store.release()
    assert await waiter > 9
    assert not gen.busy


async def test_a_pass_over_many_sequences_takes_turns_with_other_work() -> None:
    ks = keyspace(MemoryStore())
    for i in range(idle.SLICE * 2 + 10):
        await ks.ensure(b"k%d" % i)
    order: list[str] = []

    async def other() -> None:
        order.append("other")

    async def a_pass() -> None:
        await sweep(ks)
        order.append("pass done")

    await asyncio.gather(a_pass(), other())
    assert order == ["other", "pass done"]
