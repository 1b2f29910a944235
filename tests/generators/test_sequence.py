"""Unit tests of the sequence generator: the memory store, a fake clock and a fake lease, no I/O.

What is pinned here is docs/architecture.md section 1 (guarantees) as the generator sees them: an ID is handed out
only below a ceiling the store has already recorded, only while the lease is valid, and never
twice; the range is extended ahead of need and the batch follows demand.

Timing: nothing sleeps to synchronise. A test waits on a condition (``until``, bounded by a real
deadline) or on a task with ``asyncio.wait_for``. The fake clock moves only when a test advances
it. The generator measures its bounded wait (``max_wait``) on the injected clock, while each single
wait inside it also ends after ``max_wait`` of loop time; so a TRYAGAIN needs the fake clock moved
past the deadline, and the policies below keep ``max_wait`` short so that takes a few milliseconds.
``store_timeout`` is loop time only (it bounds the real store call).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from march_harness.aio import FakeClock, finish, until
from march_harness.generators import FakeLease, settle, take_checked
from march_harness.memory_store import MemoryStore

from march import errors
from march.config import MAX_ID
from march.errors import CommandError
from march.generators import bound as base_module
from march.generators.bound import BatchPolicy, Context, NotServing
from march.generators.sequence import TOP, SequenceGenerator
from march.store.contract import SINGLE_NODE, Guard, SequenceRecord

T = TypeVar("T")
KEY = b"k"
# A fixed batch of 100 (min == max) keeps the arithmetic of most tests obvious; the adaptation
# test and the property test use a range. max_wait is short (see the module docstring).
FIXED = BatchPolicy(min_batch=100, max_batch=100, interval=1.0, watermark=0.5, max_wait=0.05, store_timeout=5.0)


class RecordingStore(MemoryStore):
    """The memory store that also remembers every ceiling a generator *tried* to write, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.tried: list[int] = []

    async def save_ceiling(self, key: bytes, ceiling: int, guard: Guard) -> int:
        self.tried.append(ceiling)
        return await super().save_ceiling(key, ceiling, guard)


def durable(store: MemoryStore, key: bytes = KEY) -> int:
    """The highest ceiling the store has recorded for ``key``."""
    return max(c for k, c in store.writes if k == key)


class Ledger:
    """Every ID handed out, checked when it is handed out: below the store's ceiling, above all before."""

    def __init__(self, store: MemoryStore, key: bytes = KEY) -> None:
        self.store = store
        self.key = key
        self.ids: list[int] = []

    def got(self, last: int, n: int = 1) -> int:
        first = last - n + 1
        ceiling = durable(self.store, self.key)
        assert last < ceiling, f"ID {last} handed out while the store's ceiling is {ceiling}"
        assert not self.ids or first > self.ids[-1], f"IDs {first}..{last} after {self.ids[-1]}"
        self.ids.extend(range(first, last + 1))
        return last

    async def take(self, gen: SequenceGenerator, n: int = 1) -> int:
        """The way INCRBY takes: the fast path, else wait (checked in the loop step that allocated)."""
        return await take_checked(gen, n, self.got)


@dataclass
class World:
    store: RecordingStore = field(default_factory=RecordingStore)
    clock: FakeClock = field(default_factory=FakeClock)
    lease: FakeLease = field(default_factory=FakeLease)
    gens: list[SequenceGenerator] = field(default_factory=list)

    async def fresh(self, start: int = 1, policy: BatchPolicy = FIXED, key: bytes = KEY) -> SequenceGenerator:
        """A brand-new sequence, made the way the keyspace makes one: first range durable, next = start."""
        ceiling = min(TOP, start + policy.min_batch)
        assert await self.store.create(SequenceRecord(key, "sequence", ceiling), SINGLE_NODE)
        return self._gen(key, ceiling, policy, start)

    async def seed(self, ceiling: int, key: bytes = KEY) -> None:
        """A sequence as an earlier run of the server left it in the store."""
        assert await self.store.create(SequenceRecord(key, "sequence", ceiling), SINGLE_NODE)

    async def restart(self, policy: BatchPolicy = FIXED, key: bytes = KEY) -> SequenceGenerator:
        """A generator built from the store's record, as after a restart."""
        record = await self.store.load(key)
        assert record is not None
        return self._gen(key, record.ceiling, policy, None)

    def _gen(self, key: bytes, ceiling: int, policy: BatchPolicy, next_id: int | None) -> SequenceGenerator:
        gen = SequenceGenerator(key, ceiling, Context.of(self.store, self.lease, self.clock, policy), next_id)
        self.gens.append(gen)
        return gen


@pytest.fixture
async def world() -> AsyncIterator[World]:
    w = World()
    yield w
    await settle(w.store, w.gens)


async def fill(gen: SequenceGenerator, ledger: Ledger, upto: int) -> None:
    """Take single IDs on the fast path until ``upto`` has been handed out (no loop turn in between)."""
    while not ledger.ids or ledger.ids[-1] < upto:
        value = gen.take(1)
        assert value is not None, f"fast path refused after {ledger.ids[-1:]}"
        ledger.got(value)


async def held_at_first_write(
    world: World, work: Coroutine[Any, Any, T], what: str, *, above: int, turns: int, why: str
) -> asyncio.Task[T]:
    """Run ``work`` with every store write held: its first write (``what``) is of a ceiling above
    ``above``, and ``turns`` loop turns later ``work`` is still waiting for it (else: ``why``)."""
    world.store.hold()
    task = asyncio.create_task(work)
    await until(lambda: len(world.store.tried) == 1, what)
    assert world.store.tried[0] > above
    for _ in range(turns):
        await asyncio.sleep(0)
    assert not task.done(), why
    return task


async def waiting_on_a_held_write(
    world: World, policy: BatchPolicy = FIXED
) -> tuple[SequenceGenerator, Ledger, asyncio.Task[int]]:
    """A fresh generator that handed out 1..100 with every store write held, and a request for the
    next ID waiting on the extension that hangs."""
    gen = await world.fresh(policy=policy)
    ledger = Ledger(world.store)
    world.store.hold()
    await fill(gen, ledger, 100)
    waiter = asyncio.create_task(gen.take_wait(1))
    await until(lambda: gen.info()["waits"] == 1, "the request to wait")
    return gen, ledger, waiter


# --- guarantee 3: never at or above the durable ceiling ----------------------------------------


async def test_every_id_is_below_the_stored_ceiling_at_the_moment_it_is_handed_out(world: World) -> None:
    policy = BatchPolicy(min_batch=16, max_batch=4096, max_wait=0.05)
    gen = await world.fresh(policy=policy)
    ledger = Ledger(world.store)
    sizes = [1, 1, 3, 7, 1, 50, 1, 200, 2, 1, 999, 5]
    total = 0
    for i in range(600):
        n = sizes[i % len(sizes)]
        await ledger.take(gen, n)
        total += n
        assert gen.info()["ceiling"] <= durable(world.store)
        world.clock.advance(0.01 if i % 100 else 30.0)  # the batch grows, and now and then shrinks
        if i % 7 == 0:
            await asyncio.sleep(0)  # sometimes let a pending extension land, sometimes not
    # one generator life, no failure: exactly 1..total, nothing skipped, nothing twice
    assert ledger.ids == list(range(1, total + 1))


async def test_a_restarted_generator_serves_nothing_until_a_higher_ceiling_is_durable(world: World) -> None:
    await world.seed(5000)
    gen = await world.restart()
    assert gen.watermark() == 4999  # everything before the restart was below 5000
    assert gen.take(1) is None
    why = "an ID was handed out before the new ceiling was durable"
    waiter = await held_at_first_write(world, gen.take_wait(1), "the first extension", above=5000, turns=50, why=why)
    assert gen.take(1) is None
    assert durable(world.store) == 5000
    world.store.release()
    assert await finish(waiter) == 5000  # the first ID after a restart is the old stored ceiling
    assert durable(world.store) == world.store.tried[0] == 5101  # room for the request, plus a batch
    assert gen.take(1) == 5001


# --- extension ahead of need ------------------------------------------------------------------


async def test_extension_starts_below_the_watermark_and_requests_do_not_wait(world: World) -> None:
    gen = await world.fresh()  # IDs 1..100 durable (ceiling 101), batch 100, watermark 50
    ledger = Ledger(world.store)
    await fill(gen, ledger, 50)
    await asyncio.sleep(0)
    assert world.store.tried == [] and gen.info()["extending_to"] == 0  # 51 left: not yet
    assert gen.take(1) == 51  # 50 left, fewer than half a batch would be after it: extend now
    assert gen.write is not None  # (its target is chosen when its task first runs, a loop turn later)
    assert durable(world.store) == 101  # the extension is asynchronous: the take did not wait for it
    ledger.got(51)
    await until(lambda: gen.write is None, "the extension to land")
    assert world.store.tried == [201]
    assert durable(world.store) == gen.info()["ceiling"] == 201
    await fill(gen, ledger, 150)
    assert gen.write is None
    assert gen.take(1) == 151
    ledger.got(151)
    assert gen.write is not None
    await until(lambda: gen.write is None, "the second extension to land")
    assert durable(world.store) == gen.info()["ceiling"] == 301
    await fill(gen, ledger, 250)
    assert world.store.tried == [201, 301]
    assert gen.info()["waits"] == 0  # no request ever waited for the store


# --- batch adaptation -------------------------------------------------------------------------


async def test_batch_doubles_when_batches_go_fast_and_halves_when_they_last(world: World) -> None:
    policy = BatchPolicy(min_batch=100, max_batch=800, interval=1.0, watermark=0.5, max_wait=0.05)
    gen = await world.fresh(policy=policy)
    ledger = Ledger(world.store)
    left_at_trigger: list[int] = []

    async def one_extension() -> None:
        # spend IDs until an extension starts, then let it land
        while gen.info()["extending_to"] == 0:
            value = gen.take(1)
            assert value is not None
            ledger.got(value)
        left_at_trigger.append(gen.info()["remaining"])
        await until(lambda: gen.info()["extending_to"] == 0, "the extension to land")

    await one_extension()  # the first extension has nothing to compare with: batch stays 100
    for lasted in [0.1, 0.1, 0.1, 0.1, 5.0, 5.0, 5.0, 5.0, 2.0, 0.5, 4.0, 0.49, 4.01]:
        world.clock.advance(lasted)
        await one_extension()
    ceilings = [c for k, c in world.store.writes if k == KEY]
    batches = [b - a for a, b in itertools.pairwise(ceilings)]
    first = [100]  # nothing to compare with yet
    grow = [200, 400, 800, 800]  # lasted < interval/2: double, up to max_batch
    shrink = [400, 200, 100, 100]  # lasted > 4 intervals: halve, down to min_batch
    band = [100, 100, 100]  # 2.0, exactly 0.5 and exactly 4.0: unchanged
    edges = [200, 100]  # 0.49 grows, 4.01 shrinks
    assert batches == first + grow + shrink + band + edges
    # an extension starts once fewer than half of the current batch are left
    assert left_at_trigger == [b // 2 - 1 for b in [100, *batches[:-1]]]
    assert gen.info()["batch"] == 100


# --- batches sized by demand -------------------------------------------------------------------

# min_batch 100: the doubling alone would need 4 writes to reach 1,000
DEMAND = BatchPolicy(min_batch=100, max_batch=1_000_000, interval=1.0, watermark=0.5, max_wait=0.05)


async def test_a_thousand_waiters_on_a_fresh_key_are_served_by_its_first_extension(world: World) -> None:
    """A crowd that finds the range spent is one store write, sized for all of it, and answered in order."""
    gen = await world.fresh(policy=DEMAND)  # IDs 1..100 durable
    got = await finish(asyncio.gather(*(gen.take_wait(1) for _ in range(1000))), 5.0)
    assert got == list(range(1, 1001))  # in the order the requests came
    assert len(world.store.tried) == 1, world.store.tried  # one write for the crowd
    assert world.store.tried[0] - 101 >= 1000, world.store.tried  # it holds every one of them, and more
    assert gen.info()["waits"] == 900  # (the first 100 were in the range)
    assert gen.info()["batch"] >= 900 / DEMAND.watermark  # the next crowd is expected too
    assert gen.take(1) == 1001  # no wait for the next one: the range holds a batch past the crowd


async def test_a_thousand_waiters_after_a_restart_cost_one_store_write(world: World) -> None:
    await world.seed(5000)
    gen = await world.restart(policy=DEMAND)  # nothing spendable: every request waits
    got = await finish(asyncio.gather(*(gen.take_wait(1) for _ in range(1000))), 5.0)
    assert got == list(range(5000, 6000))
    assert len(world.store.tried) == 1 and world.store.tried[0] > 6000 + 1000


async def test_a_round_trip_s_demand_sizes_the_next_batch_and_refills_earlier(world: World) -> None:
    """Requests that queued while a write was on its way (1,000 of them) make the batch at least
    their number / watermark, so the next write starts while a round trip's demand is left."""
    gen = await world.fresh(policy=DEMAND)
    ledger = Ledger(world.store)
    world.store.hold()
    await fill(gen, ledger, 51)  # the extension starts (and hangs) at 51
    await until(lambda: world.store.tried == [201], "the first extension to be on its way")
    await fill(gen, ledger, 100)
    crowd = [gen.later(1) for _ in range(1000)]
    assert not any(f.done() for f in crowd)
    world.store.release()
    await finish(asyncio.gather(*crowd), 5.0)
    assert [f.result() for f in crowd] == list(range(101, 1101))
    assert gen.info()["batch"] >= 2 * 1000  # demand (49 handed out + 1,000 queued) / watermark
    assert len(world.store.tried) == 2  # the 900 the first range could not hold: one more write
    assert gen.info()["remaining"] >= 1000  # and the range left holds another round trip's demand


class ClockedStore(RecordingStore):
    """A store whose writes take three loop turns (requests go on meanwhile), then ``latency`` of the fake clock."""

    def __init__(self, clock: FakeClock, latency: float) -> None:
        super().__init__()
        self.clock = clock
        self.latency = latency

    async def save_ceiling(self, key: bytes, ceiling: int, guard: Guard) -> int:
        for _ in range(3):
            await asyncio.sleep(0)
        stored = await super().save_ceiling(key, ceiling, guard)
        self.clock.advance(self.latency)
        return stored


async def test_a_climbing_rate_is_followed_within_a_few_writes() -> None:
    """40,000 IDs a second from a standing start (min_batch 100): the batch follows the rate seen
    during a write's round trip (at most 8x per write) instead of doubling once per write."""
    clock = FakeClock()
    store = ClockedStore(clock, 0.002)
    await store.create(SequenceRecord(KEY, "sequence", 1 + DEMAND.min_batch), SINGLE_NODE)
    gen = SequenceGenerator(KEY, 1 + DEMAND.min_batch, Context.of(store, FakeLease(), clock, DEMAND), 1)
    ledger = Ledger(store)
    seen: list[tuple[int, int]] = []  # (batch, store writes) after each 5 ms
    try:
        for _ in range(200):  # 200 IDs per 5 ms of the fake clock
            for _ in range(200):
                await ledger.take(gen)
            clock.advance(0.005)
            await asyncio.sleep(0)
            seen.append((gen.info()["batch"], gen.info()["store_writes"]))
    finally:
        await settle(store, [gen])
    assert ledger.ids == list(range(1, 40_001))
    batch, writes = seen[19]  # after 100 ms
    assert batch >= 20_000 and writes <= 6, seen[:20]  # doubling alone: 3,200 after 6 writes
    assert seen[-1][1] <= 8, seen  # 1 s of load: a handful of writes


# --- the shared wait ---------------------------------------------------------------------------


async def test_waiters_share_one_write_and_a_cancelled_one_stops_nobody(world: World) -> None:
    """N requests waiting for the same extension: one store write and no task of their own; one
    whose client went away is cancelled alone, the others are answered in order."""
    await world.seed(5000)
    gen = await world.restart()
    world.store.hold()
    waiting = [gen.later(1) for _ in range(5)]
    await until(lambda: len(world.store.tried) == 1, "the write to start")
    tasks = len(asyncio.all_tasks())  # the test's, and the store write's
    waiting += [gen.later(1) for _ in range(50)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(asyncio.all_tasks()) == tasks  # 50 more waiting requests, not one more task
    assert gen.busy and gen.info()["waits"] == 55
    waiting[2].cancel()  # its client disconnected
    for _ in range(5):
        await asyncio.sleep(0)
    assert gen.write is not None  # the store write goes on
    world.store.release()
    answered = [w for i, w in enumerate(waiting) if i != 2]
    await finish(asyncio.gather(*answered))
    assert [w.result() for w in answered] == list(range(5000, 5054))  # in order, none skipped
    assert waiting[2].cancelled()
    assert len(world.store.tried) == 1 and durable(world.store) > 5053
    assert not gen.busy  # nothing left queued (the generator may be dropped when idle)


async def test_queued_requests_get_tryagain_at_their_deadline_and_the_queue_goes_on(world: World) -> None:
    gen = await world.fresh()
    ledger = Ledger(world.store)
    world.store.hold()
    await fill(gen, ledger, 100)
    early = [gen.later(1) for _ in range(3)]
    world.clock.advance(FIXED.max_wait / 2)
    late = gen.later(1)  # its deadline comes later
    world.clock.advance(FIXED.max_wait / 2 + 0.001)
    for f in early:
        with pytest.raises(CommandError) as err:
            await finish(f)
        assert err.value.message == errors.TRYAGAIN_STORE.format("k")
    assert not late.done()
    world.store.release()
    assert await finish(late) == 101  # the ones that timed out got nothing
    assert gen.info()["wait_timeouts"] == 3


# --- a late, a failed and a hung store write --------------------------------------------------


async def test_requests_wait_for_a_late_write_then_get_ids(world: World) -> None:
    gen = await world.fresh()
    ledger = Ledger(world.store)
    world.store.hold()
    await fill(gen, ledger, 100)  # the extension started at 51 hangs in the store
    assert gen.take(1) is None
    waiters = [asyncio.create_task(gen.take_wait(1)) for _ in range(5)]
    await until(lambda: gen.info()["waits"] == 5, "five waiting requests")
    assert not any(w.done() for w in waiters)
    assert durable(world.store) == 101
    world.store.release()
    got = [await finish(w) for w in waiters]
    assert got == [101, 102, 103, 104, 105]
    for value in got:
        ledger.got(value)
    assert gen.info()["wait_timeouts"] == 0


async def test_requests_wait_for_a_slow_store(world: World) -> None:
    gen = await world.fresh()
    ledger = Ledger(world.store)
    world.store.delay = 0.02  # every write lands 20 ms late, well within max_wait's repeated waits
    for _ in range(350):
        await ledger.take(gen)
    assert ledger.ids == list(range(1, 351))
    assert gen.info()["waits"] > 0


async def test_a_request_gets_tryagain_when_the_write_is_later_than_max_wait(world: World) -> None:
    gen, ledger, waiter = await waiting_on_a_held_write(world)
    world.clock.advance(FIXED.max_wait + 0.01)
    with pytest.raises(CommandError) as err:
        await finish(waiter)
    assert err.value.message.startswith("TRYAGAIN")
    assert err.value.message == errors.TRYAGAIN_STORE.format("k")
    assert gen.info()["wait_timeouts"] == 1
    assert gen.take(1) is None  # still nothing past the durable ceiling
    assert durable(world.store) == 101 and ledger.ids[-1] == 100
    world.store.release()
    assert await ledger.take(gen) == 101


async def test_a_failed_write_never_lets_ids_pass_the_ceiling_and_a_greater_one_follows(world: World) -> None:
    gen = await world.fresh()
    ledger = Ledger(world.store)
    world.store.fail_next = 1
    await fill(gen, ledger, 51)  # extension to 201 starts and fails
    await until(lambda: gen.info()["store_write_failures"] == 1, "the failed write")
    await until(lambda: gen.info()["extending_to"] == 0, "the failed write to be given up")
    assert durable(world.store) == 101
    await fill(gen, ledger, 100)  # what was durable is still served
    assert gen.take(1) is None
    assert await ledger.take(gen) == 101  # waits for a new write, to a strictly greater target
    # ...aimed at what is needed now (the waiting ID plus a batch), not one batch past the failed one
    assert world.store.tried == [201, 202]
    assert [c for _, c in world.store.writes] == [101, 202]
    for _ in range(300):
        await ledger.take(gen)
    assert ledger.ids == list(range(1, 402))


async def test_a_long_outage_leaves_the_stored_ceiling_about_one_batch_above_the_last_id(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every failed attempt used to raise the target by a whole batch: a 15 s outage left the
    stored ceiling ten batches ahead, all skipped by the next crash. A retry aims at what is needed."""
    monkeypatch.setattr(base_module, "_RETRY_MIN", 0.001)  # the back-off is real time: keep it short
    monkeypatch.setattr(base_module, "_RETRY_MAX", 0.002)
    gen = await world.fresh()  # batch 100
    ledger = Ledger(world.store)
    await fill(gen, ledger, 100)  # the durable range is spent
    world.store.fail_next = 10**6  # the store is down
    for _ in range(25):  # requests keep coming, each retrying the extension, each timing out
        waiter = asyncio.create_task(gen.take_wait(1))
        failures = gen.info()["store_write_failures"]
        await until(lambda f=failures: gen.info()["store_write_failures"] > f, "another failed attempt")
        world.clock.advance(1.0)
        with pytest.raises(CommandError, match=r"^TRYAGAIN"):
            await finish(waiter)
        await until(lambda: gen.info()["extending_to"] == 0, "the failed write to be given up")
    world.store.fail_next = 0  # the store is back
    assert await ledger.take(gen) == 101
    last_target = world.store.tried[-1]
    assert durable(world.store) == last_target
    assert last_target <= 101 + 100 + 25 + 1, world.store.tried  # one batch, plus one per failed attempt
    assert world.store.tried == sorted(set(world.store.tried)), "targets still strictly increase"


async def test_a_waiting_request_rides_out_failed_writes(world: World) -> None:
    await world.seed(1000)
    gen = await world.restart()
    world.store.fail_next = 2
    assert await finish(gen.take_wait(3)) == 1002  # IDs 1000..1002
    assert gen.info()["store_write_failures"] == 2
    tried = world.store.tried
    assert len(tried) == 3 and tried[0] < tried[1] < tried[2]
    assert durable(world.store) == tried[2] > 1002


async def test_a_hung_write_gives_tryagain_and_never_an_unpersisted_id(world: World) -> None:
    policy = BatchPolicy(min_batch=100, max_batch=100, max_wait=0.05, store_timeout=0.05)
    gen, ledger, waiter = await waiting_on_a_held_write(world, policy)  # every write hangs until release()
    # the hung write is abandoned after store_timeout and a greater one is tried, which hangs too
    await until(lambda: gen.info()["store_write_failures"] >= 1 and len(world.store.tried) >= 2, "a retry")
    assert not waiter.done()
    world.clock.advance(1.0)
    with pytest.raises(CommandError) as err:
        await finish(waiter)
    assert err.value.message.startswith("TRYAGAIN")
    assert gen.take(1) is None
    again = asyncio.create_task(gen.take_wait(1))
    await until(lambda: gen.info()["waits"] == 2, "the second request to wait")
    world.clock.advance(1.0)  # the deadline is on the fake clock
    with pytest.raises(CommandError, match=r"^TRYAGAIN"):
        await finish(again)
    assert durable(world.store) == 101 and ledger.ids[-1] == 100
    tried = list(world.store.tried)
    assert tried == sorted(set(tried)), "every new attempt aims strictly higher"
    world.store.release()
    for _ in range(250):
        await ledger.take(gen)
    assert ledger.ids == list(range(1, 351))
    assert world.store.tried[len(tried)] > tried[-1]


# --- leadership -------------------------------------------------------------------------------


async def test_guard_failed_ends_the_term_and_the_generator_serves_no_more(world: World) -> None:
    await world.seed(1000)
    gen = await world.restart()
    world.store.guard = Guard(b"another-node", 7)  # someone else leads now
    with pytest.raises(NotServing):
        await finish(gen.take_wait(1))
    assert len(world.lease.lost_reasons) == 1
    assert gen.info()["serving"] == 0
    attempts = world.store.attempts
    assert gen.take(1) is None
    with pytest.raises(NotServing):
        await finish(gen.take_wait(1))
    with pytest.raises(NotServing):
        await finish(gen.raise_floor(5000))
    assert world.store.attempts == attempts, "a generator of an ended term must not retry the write"
    assert world.store.records[KEY].ceiling == 1000
    assert gen.watermark() == 999


async def test_after_guard_failed_the_fast_path_hands_out_nothing(world: World) -> None:
    gen = await world.fresh()
    ledger = Ledger(world.store)
    world.store.guard = Guard(b"another-node", 7)
    await fill(gen, ledger, 51)  # the extension starts and is refused: leadership is gone
    await until(lambda: gen.info()["serving"] == 0, "the guard failure")
    assert world.lease.lost_reasons
    # The term ended: its generator must not serve 52..100, although they are below its ceiling.
    assert gen.take(1) is None


async def test_a_refused_write_of_an_ended_term_does_not_report_a_lost_lease(world: World) -> None:
    """A demoted node's generators may have writes in flight, refused later. That refusal must not
    make the node step down again (it may lead a new term by then)."""
    gen = await world.fresh()
    world.store.hold()
    ledger = Ledger(world.store)
    await fill(gen, ledger, 51)  # the extension starts and hangs in the store
    assert gen.write is not None
    world.lease.end("demoted")
    world.store.guard = Guard(b"another-node", 7)  # the next term, elsewhere
    world.store.release()
    await finish(gen.drain())
    assert world.lease.lost_reasons == []


async def test_a_generator_of_an_ended_term_hands_out_nothing(world: World) -> None:
    gen = await world.fresh()
    assert gen.take(1) == 1
    world.lease.end("demoted")
    assert gen.take(1) is None
    assert gen.take(1) is None
    with pytest.raises(NotServing, match="demoted"):
        await finish(gen.take_wait(1))
    assert gen.watermark() == 1
    assert gen.info()["ceiling"] == 101  # still reports the durable ceiling it had


async def test_a_write_that_lands_after_the_term_ended_does_not_revive_the_generator(world: World) -> None:
    gen = await world.fresh()
    ledger = Ledger(world.store)
    world.store.hold()
    await fill(gen, ledger, 51)
    await until(lambda: world.store.tried == [201], "the extension to 201 to be in flight")
    world.lease.end("demoted")
    world.store.release()
    await finish(gen.drain())
    assert durable(world.store) == 201  # it did land in the store...
    assert gen.take(1) is None  # ...but an ended term serves nothing, not even below it
    with pytest.raises(NotServing):
        await finish(gen.take_wait(1))


async def test_an_invalid_lease_serves_nothing(world: World) -> None:
    gen = await world.fresh()
    world.lease.is_valid = False
    assert gen.take(1) is None
    with pytest.raises(NotServing):
        await finish(gen.take_wait(1))
    with pytest.raises(NotServing):
        await finish(gen.raise_floor(10))
    assert gen.watermark() == 0
    world.lease.is_valid = True  # renewed in time: the term did not end, it serves again
    assert gen.take(1) == 1


async def test_a_lease_that_expires_while_a_request_waits_gives_no_id(world: World) -> None:
    gen, _, waiter = await waiting_on_a_held_write(world)
    world.lease.is_valid = False
    world.store.release()
    with pytest.raises(NotServing):
        await finish(waiter)
    assert gen.watermark() == 100


# --- INCRBY, overflow -------------------------------------------------------------------------


async def test_take_n_hands_out_n_consecutive_ids_and_returns_the_last(world: World) -> None:
    gen = await world.fresh()
    ledger = Ledger(world.store)
    assert gen.take(10) == 10
    ledger.got(10, 10)
    assert await ledger.take(gen) == 11
    assert gen.watermark() == 11


async def test_a_pipelined_run_takes_what_the_range_holds_and_asks_for_the_rest(world: World) -> None:
    """take_run: as many of the run's IDs as are below the durable ceiling now, at once; the store
    write it starts is sized for the rest of the run, so the rest waits for one write, not many."""
    gen = await world.fresh()  # batch 100: 1..100 durable
    ledger = Ledger(world.store)
    world.store.hold()
    run = gen.take_run(1000)
    assert run == range(1, 101)  # all the range holds, no more
    ledger.got(run[-1], len(run))
    assert world.store.tried == [] or world.store.tried[-1] >= 1000
    assert gen.take_run(900) is None  # nothing left below the ceiling: the caller waits
    await until(lambda: len(world.store.tried) == 1, "the extension to be tried")
    assert world.store.tried[0] >= 1001 + 100  # the rest of the run and a batch, in one write
    world.store.release()
    assert await ledger.take(gen, 900) == 1000
    assert durable(world.store) > 1000


async def test_take_n_larger_than_the_batch_extends_far_enough(world: World) -> None:
    gen = await world.fresh()  # batch 100
    ledger = Ledger(world.store)
    await fill(gen, ledger, 5)
    assert gen.take(1000) is None
    assert await finish(gen.take_wait(1000)) == 1005
    ledger.got(1005, 1000)
    assert durable(world.store) > 1005
    assert await ledger.take(gen) == 1006
    assert await ledger.take(gen, 5000) == 6006


async def test_the_last_id_is_max_int64_then_overflow(world: World) -> None:
    await world.seed(MAX_ID - 2)
    gen = await world.restart()
    ledger = Ledger(world.store)
    assert await ledger.take(gen) == MAX_ID - 2
    assert durable(world.store) == TOP == 2**63  # the extension is clamped at 2**63, not past it
    assert await ledger.take(gen) == MAX_ID - 1
    with pytest.raises(CommandError) as err:
        await finish(gen.take_wait(2))  # would end at 2**63: refused, nothing handed out
    assert err.value.message == "ERR increment or decrement would overflow"
    assert await ledger.take(gen) == MAX_ID
    assert gen.take(1) is None
    with pytest.raises(CommandError) as err:
        await finish(gen.take_wait(1))
    assert err.value.message == errors.OVERFLOW == "ERR increment or decrement would overflow"
    assert max(world.store.tried) == TOP
    assert gen.watermark() == MAX_ID


async def test_a_run_at_the_top_stops_at_max_int64(world: World) -> None:
    """The fast path's integers (C integers when compiled: ``sequence.pxd``) hold the top: a run and
    a large n at ``next`` = 2**63 - 3 hand out the last IDs and nothing past them."""
    await world.seed(MAX_ID - 2)
    gen = await world.restart()
    ledger = Ledger(world.store)
    assert await ledger.take(gen) == MAX_ID - 2
    assert durable(world.store) == TOP
    assert gen.take(1_000_000) is None  # would pass 2**63: nothing handed out
    ids = gen.take_run(16)
    assert ids == range(MAX_ID - 1, TOP)
    assert gen.take_run(16) is None and gen.take(1) is None
    assert gen.watermark() == MAX_ID == gen.info()["watermark"]
    assert gen.info()["next"] == TOP


async def test_a_failed_write_of_the_top_ceiling_is_tried_again(world: World) -> None:
    await world.seed(TOP - 150)
    gen = await world.restart()
    ledger = Ledger(world.store)
    assert await ledger.take(gen) == TOP - 150
    assert durable(world.store) == TOP - 49
    world.store.fail_next = 1  # the extension to 2**63, started at the watermark, fails once
    while (value := gen.take(1)) is not None:
        ledger.got(value)
    await until(lambda: gen.info()["store_write_failures"] == 1, "the failed write")
    await until(lambda: gen.info()["extending_to"] == 0, "the failed write to be given up")
    assert ledger.ids[-1] == TOP - 50 and world.store.tried[-1] == TOP
    # The store works again. The 49 IDs below 2**63 can still be made durable and served; at worst
    # the client could be told the sequence is exhausted. A retryable error for ever is neither.
    outcomes: list[object] = []
    for _ in range(3):
        before = gen.info()["waits"]
        waiter = asyncio.create_task(gen.take_wait(1))
        await until(lambda b=before, w=waiter: gen.info()["waits"] > b or w.done(), "the request to wait or finish")
        world.clock.advance(1.0)
        try:
            outcomes.append(await finish(waiter))
        except CommandError as exc:
            outcomes.append(exc.message)
    assert outcomes == [TOP - 49, TOP - 48, TOP - 47], outcomes


async def test_a_top_ceiling_another_leader_wrote_is_refused_not_adopted(world: World) -> None:
    """After a failed write of 2**63 the same target is tried again, guarded like every write: a
    stored top counts as this node's only while its guard holds, never on a plain read-back."""
    await world.seed(TOP - 150)
    gen = await world.restart()
    ledger = Ledger(world.store)
    assert await ledger.take(gen) == TOP - 150
    world.store.fail_next = 1  # the extension to 2**63, started at the watermark, fails once
    while (value := gen.take(1)) is not None:
        ledger.got(value)
    await until(lambda: gen.info()["extending_to"] == 0, "the failed write to be given up")
    assert ledger.ids[-1] == TOP - 50
    # Meanwhile another node leads and has written the top itself.
    world.store.records[KEY] = dataclasses.replace(world.store.records[KEY], ceiling=TOP)
    world.store.guard = Guard(b"another-node", 7)
    with pytest.raises(NotServing):
        await finish(gen.take_wait(1))
    assert len(world.lease.lost_reasons) == 1
    assert gen.take(1) is None and ledger.ids[-1] == TOP - 50


# --- SET key N --------------------------------------------------------------------------------


async def test_raise_floor_is_durable_before_it_returns(world: World) -> None:
    gen = await world.fresh()
    ledger = Ledger(world.store)
    await fill(gen, ledger, 5)
    why = "SET returned before a ceiling above N was durable"
    task = await held_at_first_write(
        world, gen.raise_floor(10_000), "the floor's write", above=10_000, turns=20, why=why
    )
    world.store.release()
    await finish(task)
    assert durable(world.store) > 10_000
    assert gen.watermark() == 10_000
    assert await ledger.take(gen) == 10_001


@pytest.mark.parametrize("floor", [99, 100, 101, 102])
async def test_raise_floor_around_the_current_ceiling(world: World, floor: int) -> None:
    gen = await world.fresh()  # ceiling 101: IDs up to 100 are durable
    await finish(gen.raise_floor(floor))
    assert durable(world.store) > floor
    assert gen.watermark() == floor
    assert await Ledger(world.store).take(gen) == floor + 1


async def test_raise_floor_refuses_to_go_backwards_and_accepts_the_watermark(world: World) -> None:
    gen = await world.fresh()
    ledger = Ledger(world.store)
    await fill(gen, ledger, 7)
    with pytest.raises(CommandError) as err:
        await finish(gen.raise_floor(6))
    assert err.value.message.startswith("ERR SET would move")
    assert err.value.message == errors.SET_BACKWARDS.format("k", 7)
    assert gen.watermark() == 7
    writes = len(world.store.writes)
    await finish(gen.raise_floor(7))  # equal to the watermark: accepted, a no-op
    assert len(world.store.writes) == writes
    assert await ledger.take(gen) == 8
    with pytest.raises(CommandError) as err:
        await finish(gen.raise_floor(MAX_ID + 1))
    assert err.value.message == errors.NOT_INTEGER


async def test_raise_floor_to_max_int64_leaves_only_overflow(world: World) -> None:
    gen = await world.fresh()
    await finish(gen.raise_floor(MAX_ID))
    assert durable(world.store) == TOP
    assert gen.take(1) is None
    with pytest.raises(CommandError, match=r"^ERR increment or decrement would overflow$"):
        await finish(gen.take_wait(1))


async def test_raise_floor_on_a_restarted_generator(world: World) -> None:
    await world.seed(500)
    gen = await world.restart()
    with pytest.raises(CommandError, match=r"^ERR SET would move"):
        await finish(gen.raise_floor(498))  # 499 may have been handed out before the restart
    await finish(gen.raise_floor(499))
    await finish(gen.raise_floor(2000))
    assert await finish(gen.take_wait(1)) == 2001
    assert durable(world.store) > 2001


# --- GET --------------------------------------------------------------------------------------


async def test_watermark_separates_ids_before_from_ids_after(world: World) -> None:
    gen = await world.fresh()
    ledger = Ledger(world.store)
    assert gen.watermark() == 0  # a new sequence's first ID is 1
    marks: list[tuple[int, int]] = []  # (watermark, number of IDs handed out before it)
    for i, n in enumerate([1, 3, 1, 150, 2, 1, 40]):
        await ledger.take(gen, n)
        marks.append((gen.watermark(), len(ledger.ids)))
        if i == 3:
            await finish(gen.raise_floor(gen.watermark() + 500))
            marks.append((gen.watermark(), len(ledger.ids)))
    for w, count in marks:
        assert all(x <= w for x in ledger.ids[:count])
        assert all(x > w for x in ledger.ids[count:])
    before = gen.watermark()
    restarted = await world.restart()
    after_restart = restarted.watermark()
    assert after_restart >= before
    assert await ledger.take(restarted) == after_restart + 1


# --- property: any interleaving ---------------------------------------------------------------

# max_wait (5 ms) and store_timeout (10 ms) are short so that a "stall" of real time lets a held write
# be abandoned and a waiting request's deadline come round; every "advance" passes every deadline.
PROP_POLICY = BatchPolicy(min_batch=8, max_batch=256, interval=1.0, watermark=0.5, max_wait=0.005, store_timeout=0.01)

_ARGS: dict[str, st.SearchStrategy[Any]] = {
    "take": st.integers(1, 40),  # the fast path: INCRBY's first try
    "wait": st.one_of(st.integers(1, 20), st.integers(1, 300)),  # a request that waits, in a task
    "queue": st.integers(1, 40),  # an INCRBY the fast path refused, as the connection waits: a future, no task
    "crowd": st.integers(2, 60),  # that many INCRs at once (a crowd: demand sizing)
    "cancel": st.integers(0, 1000),  # a waiting request's client goes away (which one: this, modulo)
    "run": st.integers(1, 400),  # a pipelined run of INCRs: what the range holds now (take_run)
    "floor": st.integers(-20, 600),  # SET to the watermark + this, in a task
    "fail": st.integers(1, 3),  # the next store writes fail
    "hold": st.just(0),  # store writes hang...
    "release": st.just(0),  # ...until this
    "stall": st.just(0),  # real time passes: held writes are abandoned, due deadlines come round
    "tick": st.integers(1, 30),  # the loop turns: writes land, waiters run
    "advance": st.sampled_from([0.01, 0.3, 1.0, 5.0]),  # the fake clock moves: batch adapts, deadlines pass
    "restart": st.just(0),  # a crash: a new generator from what the store holds
}
# weights: outages (hold, stall, advance) often enough that waits end in TRYAGAIN in many histories
_KINDS = (
    ["take"] * 3
    + ["run"] * 2
    + ["wait"] * 3
    + ["queue"] * 2
    + ["crowd", "cancel"]
    + ["floor", "fail", "hold", "hold", "release", "restart"]
    + ["stall", "tick", "advance"] * 2
)
_ops = st.sampled_from(_KINDS).flatmap(lambda kind: st.tuples(st.just(kind), _ARGS[kind]))


async def _run_history(ops: list[tuple[str, Any]]) -> None:
    store, clock = RecordingStore(), FakeClock()
    lease = FakeLease()  # one term per generator life: a restart is a new term

    class Recorded(SequenceGenerator):  # (the module's, looked up now: the checker's own test swaps it)
        """A request that waited is recorded when its IDs are handed out (``_hand``, the step of
        ``later``, of its queue and of ``take_wait``), not when its future's callback runs."""

        def _hand(self, n: int) -> int | None:
            value = super()._hand(n)
            if value is not None:
                got(value, n)
            return value

    await store.create(SequenceRecord(KEY, "sequence", 1 + PROP_POLICY.min_batch), SINGLE_NODE)
    gen = Recorded(KEY, 1 + PROP_POLICY.min_batch, Context.of(store, lease, clock, PROP_POLICY), 1)
    gens = [gen]
    terms: list[FakeLease] = []
    killed: list[SequenceGenerator] = []
    # In allocation order: ("ids", first, last) or ("bound", n) meaning "every later ID is > n and
    # every earlier one <= n" (a watermark) or only the first half (a raised floor).
    history: list[tuple[str, int, int]] = []
    tasks: set[asyncio.Task[None]] = set()
    queued: dict[asyncio.Future[int], SequenceGenerator] = {}  # futures of ``later`` not yet settled
    held = False

    def got(last: int, n: int) -> None:
        ceiling = durable(store)
        assert last < ceiling, f"ID {last} handed out while the store's ceiling is {ceiling}"
        history.append(("ids", last - n + 1, last))

    async def waiter(g: SequenceGenerator, n: int) -> None:
        try:
            await g.take_wait(n)  # (recorded when handed out: ``Recorded``)
        except CommandError as exc:
            assert exc.message.startswith("TRYAGAIN"), exc.message
        except NotServing:
            assert g in killed, "the live generator stopped serving"

    def check_queued(answer: asyncio.Future[int], g: SequenceGenerator) -> None:
        if answer.cancelled():
            return
        exc = answer.exception()
        if isinstance(exc, CommandError):
            assert exc.message.startswith("TRYAGAIN"), exc.message
        elif isinstance(exc, NotServing):
            assert g in killed, "the live generator stopped serving"
        else:
            assert exc is None, repr(exc)

    async def floor(g: SequenceGenerator, delta: int) -> None:
        n = g.watermark() + delta
        try:
            await g.raise_floor(n)
        except CommandError as exc:
            if delta < 0:
                assert exc.message.startswith("ERR SET would move"), exc.message
            else:
                assert exc.message.startswith("TRYAGAIN"), exc.message
            return
        except NotServing:
            assert g in killed, "the live generator stopped serving"
            return
        assert delta >= 0, "SET moved a sequence backwards"
        assert durable(store) > n, "SET returned before a ceiling above N was durable"
        history.append(("floor", n, 0))

    def spawn(coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def settle() -> None:
        nonlocal held
        store.release()
        held = False
        if tasks:
            done, _ = await asyncio.wait(set(tasks), timeout=10)
            for t in done:
                t.result()  # re-raise a failed check
        assert not tasks, "requests still waiting after the store recovered"
        if queued:
            await asyncio.wait(set(queued), timeout=10)
            for answer, g in list(queued.items()):
                assert answer.done(), "a queued request still waits after the store recovered"
                check_queued(answer, g)
            queued.clear()

    for op, arg in ops:
        if op == "take":
            value = gen.take(arg)
            if value is not None:
                got(value, arg)
        elif op == "run":
            ids = gen.take_run(arg)
            if ids is not None:
                assert 1 <= len(ids) <= arg and ids.step == 1
                got(ids[-1], len(ids))
        elif op == "wait":
            spawn(waiter(gen, arg))
        elif op in ("queue", "crowd"):
            for n in [arg] if op == "queue" else [1] * arg:
                queued[gen.later(n)] = gen
        elif op == "cancel":
            pending = [f for f in queued if not f.done()]
            if pending:
                pending[arg % len(pending)].cancel()
        elif op == "floor":
            spawn(floor(gen, arg))
        elif op == "fail":
            store.fail_next += arg
        elif op == "hold" and not held:
            store.hold()
            held = True
        elif op == "release":
            store.release()
            held = False
        elif op == "stall":
            await asyncio.sleep(PROP_POLICY.store_timeout * 1.5)  # lets a held write be abandoned
        elif op == "tick":
            for _ in range(arg):
                await asyncio.sleep(0)
        elif op == "advance":
            clock.advance(arg)
        elif op == "restart":
            # A crash: the old generator stops; its write in flight lands or not (here: it is let
            # finish); the new one starts from whatever the store holds.
            killed.append(gen)
            lease.end("restart")
            gen.wake()  # (as the keyspace does when a term ends: its waiting requests look again)
            store.release()
            held = False
            await asyncio.wait_for(gen.drain(), 5)
            await settle()
            record = await store.load(KEY)
            assert record is not None
            terms.append(lease)
            lease = FakeLease()
            gen = Recorded(KEY, record.ceiling, Context.of(store, lease, clock, PROP_POLICY))
            gens.append(gen)
        batch = gen.info()["batch"]
        assert PROP_POLICY.min_batch <= batch <= PROP_POLICY.max_batch, f"batch {batch} out of its bounds"
        history.append(("bound", gen.watermark(), 1))
    await settle()
    for g in gens:
        await asyncio.wait_for(g.drain(), 5)

    assert all(t.lost_reasons == [] for t in [*terms, lease]), "a single writer never fails its guard"
    last = 0  # the highest ID handed out so far
    lower = 0  # every later ID must be above this
    for kind, a, b in history:
        if kind == "ids":
            assert a > last, f"IDs {a}..{b} after {last}: a repeat or a decrease"
            assert a > lower, f"IDs {a}..{b} not above a watermark or floor of {lower}"
            last = b
        else:
            if kind == "bound" and b == 1:
                assert a >= last, f"watermark {a} below an ID already handed out ({last})"
            lower = max(lower, a)


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(ops=st.lists(_ops, min_size=1, max_size=60))
def test_no_interleaving_repeats_decreases_or_passes_the_ceiling(ops: list[tuple[str, Any]]) -> None:
    # Retry pacing after a failed write is a real sleep of 50 ms and more; shorten it so that many
    # histories fit in a few seconds. Nothing else in the generator reads these constants.
    with (
        mock.patch.object(base_module, "_RETRY_MIN", 0.001),
        mock.patch.object(base_module, "_RETRY_MAX", 0.004),
    ):
        asyncio.run(_run_history(ops))


@pytest.mark.parametrize(
    ("lie", "caught"),
    [
        (lambda v: 4 if v == 5 else v, "a repeat or a decrease"),
        (lambda v: v + 1000 if v == 5 else v, "handed out while the store's ceiling is"),
    ],
    ids=["repeat", "past-the-ceiling"],
)
def test_the_history_checker_can_fail(lie: Callable[[int], int], caught: str) -> None:
    """The property above must be able to fail: feed it a generator that lies about its fifth ID."""

    class Lying(SequenceGenerator):
        def take(self, n: int) -> int | None:
            value = super().take(n)
            return None if value is None else lie(value)

    with (
        mock.patch(f"{__name__}.SequenceGenerator", Lying),
        pytest.raises(AssertionError, match=caught),
    ):
        asyncio.run(_run_history([("take", 1)] * 8))
