"""Unit tests of the keyspace: activating, creating, auto-creating, listing, and following the
serving state's terms.

The keyspace is driven on the memory store with a fake clock, under a ``ServingState`` as the
server drives it (single node: a lease that never ends; a new term: a step-down and a promotion).
Nothing sleeps to synchronise: tests wait on a condition with a real deadline, or on tasks with
``asyncio.wait_for``. ``max_wait`` is short, since a wait meant to end in TRYAGAIN runs out on the
loop's clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from march_harness.aio import FakeClock, finish, until
from march_harness.memory_store import MemoryStore

from march import errors
from march.clock import SYSTEM
from march.commands.keys import LOOKUP_CHUNK, _activate_all
from march.config import Config
from march.errors import CommandError, StoreError
from march.generators.bits import preset
from march.generators.bound import NotServing
from march.keyspace.keyspace import PAGE, SLICE, Keyspace, Selection
from march.keyspace.serving import Cause, ServingState
from march.store import sqlite_store
from march.store.contract import SINGLE_NODE, SequenceRecord
from march.store.sqlite_store import SqliteStore

CONFIG = Config(min_batch=10, max_batch=1000, max_wait=0.05, store_timeout=5.0, max_key_len=64)


def ceilings(store: MemoryStore, key: bytes) -> list[int]:
    return [c for k, c in store.writes if k == key]


def serving_state() -> ServingState:
    """A single node's state: serving at once, under a lease that never ends."""
    return ServingState.forever(SYSTEM, SINGLE_NODE)


def new_term(state: ServingState) -> None:
    """What a failover back to this node does: the term ends, a new one begins."""
    state.step_down(Cause.SUPERSEDED)
    state.promote(SINGLE_NODE)
    state.serve()


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
async def make(store: MemoryStore) -> AsyncIterator[Callable[..., Keyspace]]:
    """``make(config=CONFIG, state=None)`` -> a Keyspace on ``store``, drained at teardown."""
    made: list[Keyspace] = []

    def build(config: Config = CONFIG, state: ServingState | None = None) -> Keyspace:
        ks = Keyspace(config, store, state or serving_state(), clock=FakeClock(50.0))
        made.append(ks)
        return ks

    yield build
    store.release()
    for ks in made:
        await asyncio.wait_for(ks.drain(), 5.0)


@pytest.fixture
def ks(make: Callable[..., Keyspace]) -> Keyspace:
    return make()


async def incr(ks: Keyspace, key: bytes, n: int = 1) -> int:
    """What INCRBY does: the fast path, else activate or create, and wait."""
    gen = ks.get(key)
    if gen is not None:
        value = gen.take(n)
        if value is not None:
            return value
    gen = await finish(ks.ensure(key))
    result: int = await finish(gen.take_wait(n))
    return result


# --- create -----------------------------------------------------------------------------------


async def test_create_stores_the_first_range_before_serving_from_start(ks: Keyspace, store: MemoryStore) -> None:
    gen = await finish(ks.create(b"orders", start=42, settings={}))
    assert store.records[b"orders"] == SequenceRecord(b"orders", "sequence", 52, {})  # start + min_batch
    assert gen.take(1) == 42  # served from the stored range: no second write for the first INCR
    assert ceilings(store, b"orders") == [52]
    assert ks.get(b"orders") is gen


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


async def test_a_name_longer_than_max_key_len_cannot_exist_or_be_created(ks: Keyspace, store: MemoryStore) -> None:
    long = b"k" * (CONFIG.max_key_len + 1)
    assert await finish(ks.activate(long)) is None  # no store call: no such sequence can exist
    assert store.reads == 0
    for attempt in (ks.ensure(long), ks.create(long, start=1, settings={})):
        with pytest.raises(CommandError) as err:
            await finish(attempt)
        assert err.value.message == errors.KEY_TOO_LONG.format(CONFIG.max_key_len)
    assert store.attempts == 0 and store.records == {}
    assert await incr(ks, b"k" * CONFIG.max_key_len) == 1  # the longest allowed name works


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
    with pytest.raises(CommandError) as err:
        await finish(ks.ensure(b"nope"))
    assert err.value.message == errors.AUTO_CREATE_OFF.format("nope")
    assert err.value.message == "ERR no such sequence 'nope' and auto_create is off: create it with SEQ.CREATE"
    assert store.attempts == 0 and b"nope" not in store.records
    assert ks.get(b"nope") is None
    gen = await finish(ks.create(b"made", start=1, settings={}))  # explicit creation still works
    assert await finish(ks.ensure(b"made")) is gen


async def test_concurrent_ensure_of_one_key_reads_and_creates_it_once(ks: Keyspace, store: MemoryStore) -> None:
    store.hold()
    tasks = [asyncio.create_task(ks.ensure(b"hot")) for _ in range(20)]
    await until(lambda: store.reads == 1, "the read to reach the store")
    for _ in range(20):
        await asyncio.sleep(0)
    assert store.reads == 1, "a second read was sent while the first was in flight"
    assert not any(t.done() for t in tasks)
    store.release()
    gens = [await finish(t) for t in tasks]
    assert all(g is gens[0] for g in gens)
    assert store.attempts == 1
    assert ceilings(store, b"hot") == [11]
    assert sorted([await incr(ks, b"hot") for _ in range(20)]) == list(range(1, 21))


async def test_concurrent_create_one_wins_the_others_are_told(ks: Keyspace, store: MemoryStore) -> None:
    store.hold()
    tasks = [asyncio.create_task(ks.create(b"x", start=100 + i, settings={})) for i in range(5)]
    await until(lambda: store.reads == 1, "the read to reach the store")
    store.release()
    results = await finish(asyncio.gather(*tasks, return_exceptions=True))
    assert not isinstance(results[0], BaseException)
    assert all(isinstance(r, CommandError) and r.message == errors.KEY_EXISTS.format("x") for r in results[1:])
    assert store.attempts == 1
    assert await incr(ks, b"x") == 100  # the first creator's start


async def test_a_creation_shared_with_a_waiter_tells_each_caller_the_truth(ks: Keyspace, store: MemoryStore) -> None:
    store.hold()
    first = asyncio.create_task(ks.create_or_get(b"y", start=5, settings={}))
    await until(lambda: store.reads == 1, "the read to reach the store")
    store.release()
    await until(lambda: store.attempts == 1, "the create to reach the store")
    store.hold()  # (the create already passed the gate; this holds nothing new)
    waiter = asyncio.create_task(ks.ensure(b"y"))  # an INCR arriving while the create is in flight
    second = asyncio.create_task(ks.create_or_get(b"y", start=9, settings={}))
    store.release()
    (gen, created), ensured, (gen2, created2) = await finish(asyncio.gather(first, waiter, second))
    assert created is True and created2 is False
    assert ensured is gen is gen2
    assert store.attempts == 1
    assert await incr(ks, b"y") == 5


async def test_a_key_someone_else_created_continues_from_its_ceiling(ks: Keyspace, store: MemoryStore) -> None:
    # Stored by another node before a failover: the first request reads it.
    assert await store.create(SequenceRecord(b"theirs", "sequence", 5000), SINGLE_NODE)
    assert await incr(ks, b"theirs") == 5000  # not 1: IDs below 5000 may have been handed out
    assert max(ceilings(store, b"theirs")) > 5000
    with pytest.raises(CommandError, match="already exists"):
        await finish(ks.create(b"theirs", start=1, settings={}))


async def test_a_failed_create_reaches_every_waiter_and_can_be_retried(ks: Keyspace, store: MemoryStore) -> None:
    store.fail_next = 1
    tasks = [asyncio.create_task(ks.ensure(b"flaky")) for _ in range(3)]
    results = await finish(asyncio.gather(*tasks, return_exceptions=True))
    assert all(isinstance(r, StoreError) for r in results), results
    assert store.attempts == 1
    assert ks.get(b"flaky") is None and b"flaky" not in store.records
    assert await incr(ks, b"flaky") == 1  # nothing is stuck: the next INCR creates it


# --- a frozen store: every wait is bounded by max_wait -----------------------------------------


async def test_a_new_key_on_a_frozen_store_gets_tryagain_within_max_wait(ks: Keyspace, store: MemoryStore) -> None:
    """A frozen disk (fsfreeze) used to hold INCR on a new key for as long as the freeze lasted."""
    store.hold()
    loop = asyncio.get_running_loop()
    for attempt in (ks.ensure(b"new"), ks.create(b"other", start=1, settings={}), ks.activate(b"third")):
        started = loop.time()
        with pytest.raises(CommandError) as err:
            await asyncio.wait_for(attempt, 5.0)
        assert err.value.message.startswith("TRYAGAIN"), err.value.message
        assert loop.time() - started < 1.0  # max_wait is 0.05 s; nowhere near the freeze
    store.release()
    assert await incr(ks, b"new") == 1  # the store came back: the same key works


async def test_a_new_key_on_a_frozen_sqlite_disk_gets_tryagain_within_max_wait(tmp_path: Path) -> None:
    """The same on the real embedded store: its one thread is stuck in the kernel (``fsfreeze``),
    here stuck on an event, so nothing the store is asked can come back until it is released."""
    store = SqliteStore(tmp_path)
    await store.open()
    thawed = threading.Event()
    loop = asyncio.get_running_loop()
    stuck = loop.run_in_executor(store._pool, thawed.wait)  # the store's only thread, frozen
    try:
        ks = Keyspace(CONFIG, store, serving_state(), clock=FakeClock(50.0))
        started = loop.time()
        with pytest.raises(CommandError, match=r"^TRYAGAIN"):
            await asyncio.wait_for(ks.ensure(b"new"), 5.0)
        assert loop.time() - started < 1.0  # max_wait is 0.05 s
    finally:
        thawed.set()
        await stuck
    assert await incr(ks, b"new") == 1
    ks.state.step_down(Cause.SHUTDOWN)
    await finish(ks.drain())
    await store.close()


async def test_auto_creation_on_sqlite_reads_or_creates_in_one_store_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the term has counted (its first creation), ``ensure`` reads or creates a name in one
    ``load_or_create`` (no ``load``): new names start at 1, an existing one keeps its ceiling,
    concurrent ensures of one name share one call, the count stays exact, and a batch that fails
    fails every waiter in it and creates nothing."""
    store = SqliteStore(tmp_path)
    await store.open()
    await store.create(SequenceRecord(b"old", "sequence", 500, {}), SINGLE_NODE)
    await store.save_ceiling(b"old", 900, SINGLE_NODE)
    ks = Keyspace(CONFIG, store, serving_state(), clock=FakeClock(50.0))
    try:
        assert await incr(ks, b"first") == 1  # the term's first creation: counts, then creates
        loads = 0
        load = store.load

        async def counted_load(key: bytes) -> SequenceRecord | None:
            nonlocal loads
            loads += 1
            return await load(key)

        monkeypatch.setattr(store, "load", counted_load)
        names = [b"old", b"old", *(b"n%d" % i for i in range(50)), b"twice", b"twice"]
        gens = await finish(asyncio.gather(*(ks.ensure(name) for name in names)))
        assert gens[0] is gens[1] and gens[-1] is gens[-2]
        assert loads == 0
        assert await incr(ks, b"old") == 900  # found, never reset
        assert [await incr(ks, b"n%d" % i) for i in range(50)] == [1] * 50
        assert await ks.count() == await store.count() == 1 + 1 + 50 + 1

        def broken(db: object, records: list[SequenceRecord]) -> list[tuple[SequenceRecord, bool]]:
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(sqlite_store, "_insert_or_select", broken)
        results = await asyncio.gather(*(ks.ensure(b"f%d" % i) for i in range(5)), return_exceptions=True)
        assert all(isinstance(r, StoreError) for r in results), results
        monkeypatch.undo()
        assert await ks.count() == await store.count() == 53
        assert await store.load(b"f0") is None
        assert await incr(ks, b"f0") == 1
        assert await ks.count() == await store.count() == 54
    finally:
        ks.state.step_down(Cause.SHUTDOWN)
        await finish(ks.drain())
        await store.close()


async def test_a_creation_that_lands_after_its_caller_gave_up_is_found_by_the_next(
    ks: Keyspace, store: MemoryStore
) -> None:
    store.hold(reads=False)
    with pytest.raises(CommandError, match=r"^TRYAGAIN"):
        await asyncio.wait_for(ks.ensure(b"late"), 5.0)
    store.release()
    await until(lambda: b"late" in store.records, "the abandoned creation to land")
    assert await incr(ks, b"late") == 1  # its first range was never used: the next INCR gets 1
    assert store.attempts == 1


# --- activation: lazy, per term -----------------------------------------------------------------


async def test_nothing_is_read_until_a_key_is_used(make: Callable[..., Keyspace], store: MemoryStore) -> None:
    for key, ceiling, settings in [(b"a", 300, {}), (b"b", 17, {"min_batch": 2, "max_batch": 4}), (b"c", 9, {})]:
        assert await store.create(SequenceRecord(key, "sequence", ceiling, settings), SINGLE_NODE)
    reads = store.reads
    ks = make()
    assert store.reads == reads and ks.generators == {}
    for key, ceiling in [(b"a", 300), (b"b", 17), (b"c", 9)]:
        gen = await finish(ks.activate(key))
        assert gen is not None
        assert gen.take(1) is None  # read, not yet raised: nothing is spendable before a new write
        assert gen.watermark() == ceiling - 1
        assert await incr(ks, key) == ceiling
    b_gen = ks.get(b"b")
    assert b_gen is not None and b_gen.info()["batch"] == 2  # its own settings, not the config's
    assert store.reads == reads + 3


async def test_a_missing_key_is_read_and_stays_unknown(ks: Keyspace, store: MemoryStore) -> None:
    assert await finish(ks.activate(b"nope")) is None
    assert ks.get(b"nope") is None and store.attempts == 0


async def test_nothing_is_served_or_created_while_standing_by(
    make: Callable[..., Keyspace], store: MemoryStore
) -> None:
    ks = make(state=ServingState(SYSTEM))
    for attempt in (ks.create(b"early", start=1, settings={}), ks.ensure(b"early"), ks.activate(b"early")):
        with pytest.raises(NotServing):
            await finish(attempt)
    assert store.attempts == 0 and store.reads == 0


async def test_a_step_down_drops_every_generator_and_wakes_its_waiters(ks: Keyspace, store: MemoryStore) -> None:
    assert await incr(ks, b"a") == 1
    gen = ks.get(b"a")
    assert gen is not None
    other = await finish(ks.ensure(b"b"))
    store.hold()
    while gen.take(1) is not None:  # spend the durable range; the extension hangs in the store
        pass
    waiters = [asyncio.create_task(gen.take_wait(1)) for _ in range(3)]
    await until(lambda: gen.info()["waits"] == 3, "three waiting requests")
    ks.state.step_down(Cause.SUPERSEDED, "demoted")
    for w in waiters:
        with pytest.raises(NotServing, match="demoted"):
            await finish(w)
    assert not ks.serving
    assert gen.take(1) is None and other.take(1) is None  # stale references serve nothing
    assert ks.get(b"a") is None and ks.generators == {}
    for attempt in (ks.ensure(b"a"), ks.create(b"new", start=1, settings={})):
        with pytest.raises(NotServing):
            await finish(attempt)
    store.release()
    await finish(ks.drain())  # the hung write of the ended term is still waited for at shutdown
    assert gen.take(1) is None  # and landing does not revive it


async def test_a_new_term_reads_every_key_again_and_raises_its_ceiling(ks: Keyspace, store: MemoryStore) -> None:
    handed = [await incr(ks, b"k") for _ in range(5)]
    old = ks.get(b"k")
    assert old is not None
    new_term(ks.state)
    assert ks.get(b"k") is None and old.take(1) is None
    after = await incr(ks, b"k")
    assert after == 11 > max(handed)  # the stored ceiling: the unspent part of the old range is skipped
    assert ks.get(b"k") is not old


async def test_a_read_in_flight_when_the_term_ends_serves_nothing(ks: Keyspace, store: MemoryStore) -> None:
    assert await store.create(SequenceRecord(b"old", "sequence", 100), SINGLE_NODE)
    reads = store.reads
    store.hold()
    reading = asyncio.create_task(ks.activate(b"old"))
    await until(lambda: store.reads == reads + 1, "the read to reach the store")
    new_term(ks.state)
    store.release()
    with pytest.raises(NotServing):
        await finish(reading)
    assert ks.get(b"old") is None
    assert await incr(ks, b"old") == 100  # read again in the new term


async def test_a_creation_in_flight_when_the_term_ends_serves_nothing(ks: Keyspace, store: MemoryStore) -> None:
    store.hold(reads=False)
    creating = asyncio.create_task(ks.ensure(b"late"))
    await until(lambda: store.attempts == 1, "the creation to reach the store")
    new_term(ks.state)
    store.release()
    with pytest.raises(NotServing):
        await finish(creating)
    assert ks.get(b"late") is None
    assert await incr(ks, b"late") == 11  # created by the old term, read in the new one: past its first range


async def test_a_restarted_keyspace_continues_above_everything_handed_out(
    make: Callable[..., Keyspace], store: MemoryStore
) -> None:
    first = make()
    handed = [await incr(first, b"k", n) for n in (1, 1, 7, 30, 1, 2)]
    await incr(first, b"j")
    first.state.step_down(Cause.SHUTDOWN)
    await finish(first.drain())
    stored = store.records[b"k"].ceiling
    assert stored > max(handed)
    second = make()
    after = await incr(second, b"k")
    assert after == stored  # the unspent part of the old range is skipped, never repeated


# --- listing: a page at a time, in slices -------------------------------------------------------


def keeping(accept: Callable[[bytes], bool], cost: int = 1) -> Selection:
    return Selection(accept, lambda n: cost)


async def test_keys_scan_and_count_read_the_store_in_pages(ks: Keyspace, store: MemoryStore) -> None:
    names = sorted(b"seq:%05d" % i for i in range(2 * PAGE + 500))
    for name in reversed(names):
        assert await store.create(SequenceRecord(name, "sequence", 10), SINGLE_NODE)
    assert await store.create(SequenceRecord(b"other", "sequence", 10), SINGLE_NODE)
    assert await finish(ks.count()) == len(names) + 1
    assert await finish(ks.keys(keeping(lambda k: k.startswith(b"seq:")), b"seq:")) == names
    assert await finish(ks.keys(keeping(lambda k: k.endswith(b"7")))) == [n for n in names if n.endswith(b"7")]
    seen: list[bytes] = []
    cursor, rounds = 0, 0
    while True:
        cursor, page = await finish(ks.scan(cursor, 100))
        seen.extend(page)
        rounds += 1
        if cursor == 0:
            break
    assert seen == [*reversed(names), b"other"] and rounds == 26  # the memory store's positions: creation order
    assert ks.generators == {}  # listing activates nothing


async def test_a_scan_resumed_elsewhere_or_with_keys_added_misses_nothing(
    make: Callable[..., Keyspace], store: MemoryStore
) -> None:
    for i in range(0, 1000, 2):
        assert await store.create(SequenceRecord(b"k%04d" % i, "sequence", 10), SINGLE_NODE)
    first = make()
    cursor, page = await finish(first.scan(0, 300))
    seen = list(page)
    for i in range(1, 1000, 2):  # keys created during the scan, before and after its position
        assert await store.create(SequenceRecord(b"k%04d" % i, "sequence", 10), SINGLE_NODE)
    other = make()  # another keyspace (a restart): it never saw this cursor
    while cursor:
        cursor, page = await finish(other.scan(cursor, 300))
        seen.extend(page)
    assert {b"k%04d" % i for i in range(0, 1000, 2)} <= set(seen)  # every key that existed throughout
    assert len(seen) == len(set(seen))  # positions never move on this store: each name once


async def test_a_cursor_past_the_end_finishes_the_scan(ks: Keyspace, store: MemoryStore) -> None:
    assert await store.create(SequenceRecord(b"a", "sequence", 10), SINGLE_NODE)
    assert await finish(ks.scan(1 << 64, 10)) == (0, [])
    assert await finish(ks.scan(0, 10)) == (0, [b"a"])


async def test_a_long_listing_takes_turns_with_other_work(ks: Keyspace, store: MemoryStore) -> None:
    """Deciding on names yields to the event loop every SLICE units of work: another task runs while
    one page of names is being matched, not after the listing."""
    names = [b"n%04d" % i for i in range(PAGE)]
    for name in names:
        assert await store.create(SequenceRecord(name, "sequence", 10), SINGLE_NODE)
    events: list[str] = []

    def keep(name: bytes) -> bool:
        events.append("match")
        return name.endswith(b"1")

    listing = asyncio.ensure_future(ks.keys(keeping(keep, cost=SLICE // 10)))  # ten names a slice

    async def other() -> None:
        for _ in range(10 * PAGE):  # bounded: a turn of the loop each
            if listing.done():
                return
            events.append("other")
            await asyncio.sleep(0)

    task = asyncio.ensure_future(other())
    found = await finish(listing)
    await task
    assert found == [n for n in names if n.endswith(b"1")]
    first, last = events.index("match"), len(events) - 1 - events[::-1].index("match")
    assert "other" in events[first:last], "the other task ran only before or after the whole page"
    assert events.count("match") == PAGE


async def test_a_listing_past_its_budget_is_an_error_before_it_is_built(ks: Keyspace, store: MemoryStore) -> None:
    for i in range(300):
        assert await store.create(SequenceRecord(b"name:%04d" % i, "sequence", 10), SINGLE_NODE)
    assert len(await finish(ks.keys(budget=300 * 30))) == 300
    with pytest.raises(CommandError, match="max_output_buffer"):
        await finish(ks.keys(budget=1000))


async def test_the_count_is_kept_in_memory(ks: Keyspace, store: MemoryStore) -> None:
    """Counted once per term; creations add themselves; DBSIZE never waits for the store again."""
    for i in range(5):
        assert await store.create(SequenceRecord(b"pre%d" % i, "sequence", 10), SINGLE_NODE)
    assert ks.known_count() is None
    assert await finish(ks.count()) == 5
    assert ks.known_count() == 5
    for i in range(3):
        await incr(ks, b"new%d" % i)
    assert ks.known_count() == 8
    store.hold()  # a store that does not answer: the count does not need it
    try:
        assert await finish(ks.count(), 1.0) == 8
    finally:
        store.release()
    new_term(ks.state)  # another node may have created sequences meanwhile: counted again
    assert ks.known_count() is None
    assert await store.create(SequenceRecord(b"elsewhere", "sequence", 10), SINGLE_NODE)
    assert await finish(ks.count()) == 9


class SlowCount(MemoryStore):
    """A memory store whose count answers only when the test opens ``counted``."""

    def __init__(self) -> None:
        super().__init__()
        self.counted = asyncio.Event()
        self.counts = 0

    async def count(self) -> int:
        self.counts += 1
        await self.counted.wait()
        return await super().count()


async def test_a_terms_first_creation_waits_for_its_count() -> None:
    """No creation of a term starts before the term's count is known (so the count never misses one
    in flight or counts it twice), and concurrent requests share that one count."""
    store = SlowCount()
    assert await store.create(SequenceRecord(b"old", "sequence", 10), SINGLE_NODE)
    ks = Keyspace(CONFIG, store, serving_state(), clock=FakeClock(50.0))
    creating = asyncio.ensure_future(incr(ks, b"first"))
    counting = asyncio.ensure_future(ks.count())
    await until(lambda: store.counts == 1 and store.reads >= 1, "the count and the new key's read")
    for _ in range(50):
        await asyncio.sleep(0)
    assert store.attempts == 1 and not creating.done()  # the seed's write only: the new key waits for the count
    store.counted.set()
    assert await finish(creating) == 1
    assert await finish(counting) in (1, 2)  # the term's count (1), or already with the creation added
    assert ks.known_count() == 2 and store.counts == 1
    await finish(ks.drain())


def test_the_single_node_lease_never_ends() -> None:
    state = serving_state()
    assert state.serving and state.valid() and state.deadline == math.inf


async def test_settings_stored_before_the_bounds_are_clamped_into_them(ks: Keyspace, store: MemoryStore) -> None:
    # A batch of 2^62 (set through SEQ.ALTER before it was @seqadmin and bounded) and MAXLEAD 0 ("no cap").
    huge = {"min_batch": 1 << 62, "max_batch": 1 << 62}
    store.records[b"old"] = SequenceRecord(b"old", "sequence", 1 << 62, huge)
    gen = await finish(ks.activate(b"old"))
    assert gen is not None
    info = gen.info()
    assert (info["min_batch"], info["max_batch"]) == (1_000_000_000, 1_000_000_000)
    ts = await finish(ks.create(b"ts", start=0, settings=preset("snowflake").to_settings(), kind="timestamp"))
    store.records[b"ts2"] = SequenceRecord(
        b"ts2", "timestamp", store.records[b"ts"].ceiling, {**ts.settings, "max_lead": 0}
    )
    old_ts = await finish(ks.activate(b"ts2"))
    assert old_ts is not None and old_ts.info()["max_lead_ms"] == 60_000  # the largest cap, never "none"


async def test_mget_of_thousands_of_unknown_keys_reads_them_a_chunk_at_a_time(
    make: Callable[..., Keyspace], store: MemoryStore
) -> None:
    """MGET/EXISTS of many keys not active yet: at most LOOKUP_CHUNK store reads (each a few
    tasks, all woken together when the store answers) are in flight at once, so other clients'
    requests never queue behind thousands of them (5,000 at once before)."""
    ks = make(config=dataclasses.replace(CONFIG, max_wait=30.0))  # a busy machine must not make it TRYAGAIN
    for i in range(0, 5000, 7):
        await incr(ks, b"k%d" % i)
    in_flight = peak = 0
    real = store.load

    async def counting(key: bytes) -> SequenceRecord | None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            await asyncio.sleep(0)  # a real store answers later: every read started meanwhile is in flight
            return await real(key)
        finally:
            in_flight -= 1

    store.load = counting  # type: ignore[method-assign]
    client = SimpleNamespace(generators=ks.generators, app=SimpleNamespace(keyspace=ks))
    keys = [b"k%d" % i for i in range(5000)] + [b"k0", b"k1", b"k1"]
    found = await _activate_all(client, keys)  # type: ignore[arg-type]
    assert [g is not None for g in found] == [i % 7 == 0 for i in range(5000)] + [True, False, False]
    assert 0 < peak <= LOOKUP_CHUNK


async def test_incr_on_an_unknown_key_reads_it_once_then_creates_it(ks: Keyspace, store: MemoryStore) -> None:
    # What the INCR path does (``commands.sequences._take``): activate, then ensure.
    assert await finish(ks.activate(b"new")) is None
    gen = await finish(ks.ensure(b"new"))
    assert store.reads == 1, "ensure read the key again after it was just found absent"
    assert store.attempts == 1 and await incr(ks, b"new") == 1 and gen is ks.get(b"new")


async def test_a_key_found_absent_then_created_elsewhere_is_found_not_created(ks: Keyspace, store: MemoryStore) -> None:
    assert await finish(ks.activate(b"k")) is None
    await store.create(SequenceRecord(b"k", "sequence", 501, {}), SINGLE_NODE)  # behind the keyspace's back
    gen = await finish(ks.ensure(b"k"))
    assert await gen.take_wait(1) >= 501  # the stored record, not a new one from 1


async def test_with_auto_create_off_a_key_found_absent_is_read_again(
    make: Callable[..., Keyspace], store: MemoryStore
) -> None:
    ks = make(dataclasses.replace(CONFIG, auto_create=False))
    assert await finish(ks.activate(b"k")) is None
    await store.create(SequenceRecord(b"k", "sequence", 501, {}), SINGLE_NODE)
    gen = await finish(ks.ensure(b"k"))  # found: no AUTO_CREATE_OFF error
    assert await gen.take_wait(1) >= 501
