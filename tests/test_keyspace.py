"""Unit tests of the keyspace: creating, auto-creating, loading and stopping sequences.

The keyspace is driven on the memory store with a fake clock and a lease that is always valid,
as the single-node server drives it. Nothing sleeps to synchronise: tests wait on a condition
with a real deadline, or on tasks with ``asyncio.wait_for``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable

import pytest
from support.aio import FakeClock, finish, until

from march import errors
from march.config import Config
from march.errors import CommandError
from march.generators.base import NotServing, SingleNodeLease
from march.keyspace import Keyspace
from march.store.base import SINGLE_NODE, SequenceRecord, StoreError
from march.store.memory import MemoryStore

# Small batches keep the numbers readable; max_wait is short because a wait that is meant to end
# in TRYAGAIN has to run out on the loop's clock too (see tests/generators/test_sequence.py).
CONFIG = Config(min_batch=10, max_batch=1000, max_wait=0.05, store_timeout=5.0)


def ceilings(store: MemoryStore, key: bytes) -> list[int]:
    return [c for k, c in store.writes if k == key]


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
async def make(store: MemoryStore) -> AsyncIterator[Callable[..., Keyspace]]:
    """``make(config=CONFIG, store=store)`` -> a Keyspace, drained at teardown."""
    made: list[Keyspace] = []

    def build(config: Config = CONFIG, on: MemoryStore | None = None) -> Keyspace:
        ks = Keyspace(config, on or store, SingleNodeLease(), clock=FakeClock(50.0))
        made.append(ks)
        return ks

    yield build
    store.release()
    for ks in made:
        await asyncio.wait_for(ks.drain(), 5.0)


@pytest.fixture
async def ks(make: Callable[..., Keyspace]) -> Keyspace:
    keyspace = make()
    await keyspace.start_serving()
    return keyspace


async def incr(ks: Keyspace, key: bytes, n: int = 1) -> int:
    """What INCRBY does: the fast path, else create if needed and wait."""
    gen = ks.get(key)
    if gen is not None:
        value = gen.take(n)
        if value is not None:
            return value
    gen = await ks.ensure(key)
    result: int = await finish(gen.take_wait(n))
    return result


# --- create -----------------------------------------------------------------------------------


async def test_create_stores_the_first_range_before_serving_from_start(ks: Keyspace, store: MemoryStore) -> None:
    gen = await finish(ks.create(b"orders", start=42, settings={}))
    assert store.records[b"orders"] == SequenceRecord(b"orders", "sequence", 52, {})  # start + min_batch
    assert gen.take(1) == 42  # served from the stored range: no second write for the first INCR
    assert ceilings(store, b"orders") == [52]
    assert ks.get(b"orders") is gen
    assert ks.order == [b"orders"]


async def test_create_twice_is_an_error_unless_exist_ok(ks: Keyspace, store: MemoryStore) -> None:
    gen = await finish(ks.create(b"a", start=1, settings={}))
    with pytest.raises(CommandError) as err:
        await finish(ks.create(b"a", start=500, settings={}))
    assert err.value.message == errors.KEY_EXISTS.format("a") == "ERR sequence 'a' already exists"
    assert await finish(ks.create(b"a", start=500, settings={}, exist_ok=True)) is gen
    assert store.records[b"a"].ceiling == 11  # the second create wrote nothing
    assert await incr(ks, b"a") == 1


async def test_create_with_settings_uses_and_stores_them(ks: Keyspace, store: MemoryStore) -> None:
    settings = {"min_batch": 3, "max_batch": 5}
    gen = await finish(ks.create(b"small", start=7, settings=settings))
    assert store.records[b"small"].ceiling == 10
    assert dict(store.records[b"small"].settings) == settings
    info = gen.info()
    assert (info["min_batch"], info["max_batch"]) == (3, 5)
    got = [await incr(ks, b"small") for _ in range(12)]
    assert got == list(range(7, 19))
    steps = [b - a for a, b in itertools.pairwise(ceilings(store, b"small"))]
    # batches of 3 to 5 (plus the ID a waiting request needs), not the config's 10
    assert steps and all(3 <= b <= 5 + 1 for b in steps), steps


async def test_create_near_the_top_clamps_the_ceiling(ks: Keyspace, store: MemoryStore) -> None:
    top = 2**63
    await finish(ks.create(b"end", start=top - 3, settings={}))
    assert store.records[b"end"].ceiling == top
    assert [await incr(ks, b"end") for _ in range(3)] == [top - 3, top - 2, top - 1]
    with pytest.raises(CommandError, match=r"^ERR increment or decrement would overflow$"):
        await incr(ks, b"end")


# --- ensure (INCR on an unknown key) ----------------------------------------------------------


async def test_ensure_creates_a_new_key_at_1(ks: Keyspace, store: MemoryStore) -> None:
    assert await incr(ks, b"fresh") == 1
    assert await incr(ks, b"fresh") == 2
    assert await incr(ks, b"fresh", 5) == 7
    assert ceilings(store, b"fresh")[0] == 11


async def test_ensure_with_auto_create_off_refuses_unknown_keys(
    make: Callable[..., Keyspace], store: MemoryStore
) -> None:
    ks = make(Config(min_batch=10, max_batch=1000, auto_create=False))
    await ks.start_serving()
    with pytest.raises(CommandError) as err:
        await finish(ks.ensure(b"nope"))
    assert err.value.message == errors.AUTO_CREATE_OFF.format("nope")
    assert err.value.message == "ERR no such sequence 'nope' and auto_create is off: create it with SEQ.CREATE"
    assert store.attempts == 0 and b"nope" not in store.records
    assert ks.get(b"nope") is None and ks.order == []
    gen = await finish(ks.create(b"made", start=1, settings={}))  # explicit creation still works
    assert await finish(ks.ensure(b"made")) is gen


async def test_concurrent_ensure_of_one_key_creates_it_once(ks: Keyspace, store: MemoryStore) -> None:
    store.hold()
    tasks = [asyncio.create_task(ks.ensure(b"hot")) for _ in range(20)]
    await until(lambda: store.attempts == 1, "the create to reach the store")
    for _ in range(20):
        await asyncio.sleep(0)
    assert store.attempts == 1, "a second create was sent while the first was in flight"
    assert not any(t.done() for t in tasks)
    store.release()
    gens = [await finish(t) for t in tasks]
    assert all(g is gens[0] for g in gens)
    assert ceilings(store, b"hot") == [11]
    assert ks.order == [b"hot"]
    assert sorted([await incr(ks, b"hot") for _ in range(20)]) == list(range(1, 21))


async def test_concurrent_create_one_wins_the_others_are_told(ks: Keyspace, store: MemoryStore) -> None:
    store.hold()
    tasks = [asyncio.create_task(ks.create(b"x", start=100 + i, settings={})) for i in range(5)]
    await until(lambda: store.attempts == 1, "the create to reach the store")
    store.release()
    results = await finish(asyncio.gather(*tasks, return_exceptions=True))
    assert not isinstance(results[0], BaseException)
    assert all(isinstance(r, CommandError) and r.message == errors.KEY_EXISTS.format("x") for r in results[1:])
    assert store.attempts == 1
    assert await incr(ks, b"x") == 100  # the first creator's start


async def test_a_creation_shared_with_a_waiter_tells_each_caller_the_truth(ks: Keyspace, store: MemoryStore) -> None:
    store.hold()
    first = asyncio.create_task(ks.create_or_get(b"y", start=5, settings={}))
    await until(lambda: store.attempts == 1, "the create to reach the store")
    waiter = asyncio.create_task(ks.ensure(b"y"))  # an INCR arriving while the create is in flight
    second = asyncio.create_task(ks.create_or_get(b"y", start=9, settings={}))
    store.release()
    (gen, created), ensured, (gen2, created2) = await finish(asyncio.gather(first, waiter, second))
    assert created is True and created2 is False
    assert ensured is gen is gen2
    assert store.attempts == 1
    assert await incr(ks, b"y") == 5


async def test_ensure_of_a_key_someone_else_created_continues_from_its_ceiling(
    ks: Keyspace, store: MemoryStore
) -> None:
    # Stored after this keyspace loaded (another node, before a failover): the create finds it.
    assert await store.create(SequenceRecord(b"theirs", "sequence", 5000), SINGLE_NODE)
    assert await incr(ks, b"theirs") == 5000  # not 1: IDs below 5000 may have been handed out
    assert max(ceilings(store, b"theirs")) > 5000
    with pytest.raises(CommandError, match="already exists"):
        await finish(ks.create(b"theirs", start=1, settings={}))


async def test_a_failed_create_reaches_every_waiter_and_can_be_retried(ks: Keyspace, store: MemoryStore) -> None:
    store.hold()
    store.fail_next = 1
    tasks = [asyncio.create_task(ks.ensure(b"flaky")) for _ in range(3)]
    await until(lambda: store.attempts == 1, "the create to reach the store")
    store.release()
    results = await finish(asyncio.gather(*tasks, return_exceptions=True))
    assert all(isinstance(r, StoreError) for r in results), results
    assert ks.get(b"flaky") is None and b"flaky" not in store.records
    assert await incr(ks, b"flaky") == 1  # nothing is stuck: the next INCR creates it


# --- start and stop ---------------------------------------------------------------------------


async def test_start_serving_loads_every_record(make: Callable[..., Keyspace], store: MemoryStore) -> None:
    for key, ceiling, settings in [(b"a", 300, {}), (b"b", 17, {"min_batch": 2, "max_batch": 4}), (b"c", 9, {})]:
        assert await store.create(SequenceRecord(key, "sequence", ceiling, settings), SINGLE_NODE)
    ks = make()
    assert ks.get(b"a") is None
    await ks.start_serving()
    assert ks.serving
    assert ks.order == [b"a", b"b", b"c"]
    for key, ceiling in [(b"a", 300), (b"b", 17), (b"c", 9)]:
        gen = ks.get(key)
        assert gen is not None
        assert gen.take(1) is None  # a loaded sequence serves only after persisting a higher ceiling
        assert gen.watermark() == ceiling - 1
        assert await incr(ks, key) == ceiling
    b_gen = ks.get(b"b")
    assert b_gen is not None and b_gen.info()["batch"] == 2  # its own settings, not the config's


async def test_nothing_is_created_before_start_serving(make: Callable[..., Keyspace], store: MemoryStore) -> None:
    ks = make()
    with pytest.raises(NotServing):
        await finish(ks.create(b"early", start=1, settings={}))
    with pytest.raises(NotServing):
        await finish(ks.ensure(b"early"))
    assert store.attempts == 0


async def test_stop_serving_kills_every_generator_and_wakes_waiters(ks: Keyspace, store: MemoryStore) -> None:
    assert await incr(ks, b"a") == 1
    gen = ks.get(b"a")
    assert gen is not None
    other = await finish(ks.ensure(b"b"))
    store.hold()
    while gen.take(1) is not None:  # spend the durable range; the extension hangs in the store
        pass
    waiters = [asyncio.create_task(gen.take_wait(1)) for _ in range(3)]
    await until(lambda: gen.info()["waits"] == 3, "three waiting requests")
    ks.stop_serving("demoted")
    for w in waiters:
        with pytest.raises(NotServing, match="demoted"):
            await finish(w)
    assert not ks.serving
    assert gen.take(1) is None and other.take(1) is None  # stale references serve nothing
    assert ks.get(b"a") is None and ks.order == []
    with pytest.raises(NotServing):
        await finish(ks.ensure(b"a"))
    with pytest.raises(NotServing):
        await finish(ks.create(b"new", start=1, settings={}))
    store.release()
    await finish(ks.drain())  # the hung write of a stopped generator is still waited for at shutdown
    assert gen.take(1) is None  # and landing does not revive it


async def test_a_create_in_flight_when_serving_stops_serves_nothing(ks: Keyspace, store: MemoryStore) -> None:
    store.hold()
    task = asyncio.create_task(ks.ensure(b"late"))
    await until(lambda: store.attempts == 1, "the create to reach the store")
    ks.stop_serving("demoted")
    store.release()
    with pytest.raises(NotServing):
        await finish(task)
    assert ks.get(b"late") is None


async def test_a_restarted_keyspace_continues_above_everything_handed_out(
    make: Callable[..., Keyspace], store: MemoryStore
) -> None:
    first = make()
    await first.start_serving()
    handed = [await incr(first, b"k", n) for n in (1, 1, 7, 30, 1, 2)]
    await incr(first, b"j")
    first.stop_serving("shutting down")
    await finish(first.drain())
    stored = store.records[b"k"].ceiling
    assert stored > max(handed)
    second = make()
    await second.start_serving()
    assert second.order == [b"k", b"j"]
    after = await incr(second, b"k")
    assert after == stored  # the unspent part of the old range is skipped, never repeated
