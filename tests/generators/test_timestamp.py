"""Unit tests of the timestamp generator: memory store, fake wall clock, fake monotonic clock, fake lease.

Pinned here (docs/architecture.md section 1, issue 4): every ID's time field is below a bound the store
had already recorded when the ID was handed out; IDs never repeat and never decrease, whatever the
wall clock does (backwards by 1 ms to 1 h, stalled, forwards); a sequence overflow carries into the
time field instead of waiting; the bound is extended in the background before it is needed; a
restart starts past the saved bound; guard failures, store failures and an expired lease stop IDs.

Timing: nothing sleeps. Both clocks are ``FakeClock``s that move only when a test moves them; the
generator's bounded wait ends on the fake monotonic clock (see tests/generators/test_sequence.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from march_harness.aio import FakeClock, finish, until
from march_harness.generators import FakeLease, settle, take_checked
from march_harness.memory_store import MemoryStore

from march import errors
from march.errors import CommandError
from march.generators.bits import PRESETS, Layout, iso
from march.generators.bound import BatchPolicy, NotServing
from march.generators.timestamp import TimestampGenerator, new_record
from march.store.contract import Guard

KEY = b"ts"
EPOCH_MS = 1_600_000_000_000
START_S = EPOCH_MS / 1000 + 100.0  # the wall clock starts 100 s (100,000 units) after the epoch
# 16 slots per millisecond make carries cheap to provoke; node 5 checks that the node field is kept.
SMALL = Layout(time_bits=30, node_bits=3, seq_bits=4, order=("time", "node", "seq"), epoch=EPOCH_MS, node=5)
POLICY = BatchPolicy(max_wait=0.05, store_timeout=5.0)
LOOKAHEAD_MS = 3000


def durable(store: MemoryStore, key: bytes = KEY) -> int:
    """The highest time bound the store has recorded for ``key``."""
    return max(c for k, c in store.writes if k == key)


@dataclass
class World:
    store: MemoryStore = field(default_factory=MemoryStore)
    clock: FakeClock = field(default_factory=FakeClock)
    wall: FakeClock = field(default_factory=lambda: FakeClock(START_S))
    lease: FakeLease = field(default_factory=FakeLease)
    gens: list[TimestampGenerator] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)  # the last slot of every hand-out, in order
    layout: Layout = SMALL
    max_lead_ms: int = 0  # the lead cap of every generator made (0: none, as before the cap existed)

    async def fresh(
        self, layout: Layout = SMALL, floor: int | None = None, lookahead_ms: int = LOOKAHEAD_MS
    ) -> TimestampGenerator:
        """A brand-new key, made the way the keyspace makes one."""
        self.layout = layout
        start = 0 if floor is None else floor + 1
        record, first = new_record(KEY, layout.to_settings(), start, self.wall, lookahead_ms)
        assert await self.store.create(record, self.lease.guard)
        return self._gen(record.ceiling, first, lookahead_ms)

    async def restart(self, lookahead_ms: int = LOOKAHEAD_MS) -> TimestampGenerator:
        """A generator built from the store's record, as after a restart or on a new primary."""
        self.lease.end("restarted")  # the old generators' term is over; a new one begins
        self.lease = FakeLease(self.lease.guard)
        record = await self.store.load(KEY)
        assert record is not None and record.kind == "timestamp"
        self.layout = Layout.from_settings(record.settings)
        return self._gen(record.ceiling, None, lookahead_ms)

    def _gen(self, ceiling: int, first: int | None, lookahead_ms: int) -> TimestampGenerator:
        gen = TimestampGenerator(
            KEY, ceiling, self.layout, self.store, self.lease, POLICY, self.clock, self.wall, lookahead_ms, first,
            self.max_lead_ms,
        )  # fmt: skip
        self.gens.append(gen)
        return gen

    def got(self, id_: int, n: int = 1) -> int:
        """Check an ID when it is handed out: durable time, this node, above every earlier slot."""
        t, node, seq = self.layout.decode(id_)
        assert node == self.layout.node
        assert t < durable(self.store), f"time {t} handed out while the store's bound is {durable(self.store)}"
        slot = t << self.layout.seq_bits | seq
        assert not self.slots or slot - n + 1 > self.slots[-1], f"slots {slot - n + 1}..{slot} after {self.slots[-1]}"
        self.slots.append(slot)
        return id_

    async def take(self, gen: TimestampGenerator, n: int = 1) -> int:
        """The way INCRBY takes: the fast path, else wait (checked in the loop step that allocated)."""
        return await take_checked(gen, n, self.got)

    def fast(self, gen: TimestampGenerator, n: int = 1) -> int:
        """A take that must not wait (no store write, no clock)."""
        value = gen.take(n)
        assert value is not None, "the fast path refused"
        return self.got(value, n)

    def now_units(self) -> int:
        return self.layout.units_at(int(self.wall() * 1000))

    def time_of(self, id_: int) -> int:
        return self.layout.decode(id_)[0]


@pytest.fixture
async def world() -> AsyncIterator[World]:
    w = World()
    yield w
    await settle(w.store, w.gens)


# --- the basics -----------------------------------------------------------------------------------


async def test_ids_carry_the_clock_the_node_and_a_sequence(world: World) -> None:
    gen = await world.fresh()
    a, b = world.fast(gen), world.fast(gen)
    assert SMALL.decode(a) == (100_000, 5, 0)
    assert SMALL.decode(b) == (100_000, 5, 1)
    world.wall.advance(0.002)
    assert SMALL.decode(world.fast(gen)) == (100_002, 5, 0)
    assert world.store.writes == [(KEY, 100_000 + 3000)]  # the record, made at creation: no write on the way
    assert gen.issued == 3


async def test_incrby_reserves_consecutive_slots_and_returns_the_last(world: World) -> None:
    gen = await world.fresh()
    world.fast(gen)
    last = world.fast(gen, 20)  # slots 1..20: 15 in unit 100000, 5 in unit 100001
    assert SMALL.decode(last) == (100_001, 5, 4)
    assert SMALL.decode(world.fast(gen)) == (100_001, 5, 5)
    assert gen.carries == 1


async def test_take_n_gives_what_n_single_takes_give(world: World) -> None:
    many = World(wall=world.wall)  # the same clock, another store
    one, other = await world.fresh(), await many.fresh()
    singles = [world.fast(one) for _ in range(37)]
    assert other.take(37) == singles[-1]
    assert one.watermark() == other.watermark()


async def test_pipelined_runs_are_consecutive_integers_or_refused(world: World) -> None:
    gen = await world.fresh(PRESETS["snowflake"])
    before = world.fast(gen)
    run = gen.take_run(10)
    assert run == range(before + 1, before + 11)  # seq is the low field: slots in one ms are consecutive IDs
    rest = gen.take_run(5000)  # up to the end of the millisecond: past it the IDs jump (a new time field)
    assert rest is not None and rest.start == before + 11 and len(rest) == 4096 - 11 - (before & 4095)
    after = world.fast(gen)
    assert after > rest[-1] + 1 and (after & 4095) == 0  # the next millisecond's first slot
    sony = World()
    gen2 = await sony.fresh(dataclasses.replace(PRESETS["sonyflake"], epoch=EPOCH_MS))
    assert gen2.take_run(2) is None  # the sequence sits above the machine id: IDs step by 2^16
    assert sony.fast(gen2) + (1 << 16) == sony.fast(gen2)  # one by one, they still come


# --- carries and bursts ---------------------------------------------------------------------------


async def test_sequence_overflow_carries_into_time_instead_of_waiting(world: World) -> None:
    gen = await world.fresh()
    ids = [world.fast(gen) for _ in range(16 * 10)]  # ten units' worth with the clock stalled
    assert world.time_of(ids[-1]) == 100_009
    assert gen.carries == 9
    assert gen.info()["lead_ms"] == 9
    assert gen.waits == 0
    world.wall.advance(0.050)  # the burst is over: logical time falls back to the clock
    assert SMALL.decode(world.fast(gen)) == (100_050, 5, 0)
    assert gen.info()["lead_ms"] == 0


async def test_a_burst_far_past_capacity_never_waits_for_the_clock(world: World) -> None:
    """4096 slots per ms (snowflake) and the clock stalled: 50 million IDs run logical time ~12 s
    ahead, four times the lookahead; the bound follows in the background and nobody waits for the
    clock (at most for a store write, here an instant one)."""
    gen = await world.fresh(PRESETS["snowflake"])
    for _ in range(50):
        await world.take(gen, 1_000_000)
    lead = gen.info()["lead_ms"]
    assert 12_000 <= lead <= 12_300
    assert gen.carries >= 12_000
    assert durable(world.store) > world.time_of(gen.watermark())
    assert len(world.store.writes) >= 5


async def test_under_a_burst_the_bound_stretches_to_about_one_write_per_interval(world: World) -> None:
    """4M snowflake IDs per 10 ms of (monotonic) time spend logical time ~100x faster than the clock: the
    bound stretches up to 20 lookaheads so that writes stay rare; when the burst ends it shrinks back."""
    gen = await world.fresh(PRESETS["snowflake"])
    for _ in range(30):
        await world.take(gen, 4_000_000)
        world.clock.advance(0.01)
    assert gen.info()["lookahead_now_ms"] == 20 * LOOKAHEAD_MS
    writes = len(world.store.writes)
    assert writes <= 6
    assert gen.waits <= 2  # only while the stretch grows
    for _ in range(3):  # a quiet key: the lookahead is back to its configured size
        world.clock.advance(60.0)
        world.wall.advance(60.0)  # past the burst's lead: logical time follows the clock again
        await world.take(gen)
    assert gen.info()["lookahead_now_ms"] == LOOKAHEAD_MS


async def test_the_bound_is_extended_before_it_is_needed(world: World) -> None:
    gen = await world.fresh()
    for _ in range(40):  # 40 x 100 ms of steady traffic: the bound keeps 1.5 to 3 s ahead
        world.fast(gen)
        await until(lambda: gen.write is None, "the extension to land")
        world.wall.advance(0.1)
    assert gen.waits == 0
    assert len(world.store.writes) >= 3
    assert durable(world.store) - world.now_units() >= 1500


# --- clock jumps ----------------------------------------------------------------------------------


@pytest.mark.parametrize("back_ms", [1, 2, 10, 1000, 10_000, 60_000, 3_600_000])
async def test_a_backwards_jump_neither_blocks_nor_repeats(world: World, back_ms: int) -> None:
    gen = await world.fresh()
    world.wall.advance(1.0)
    before = [world.fast(gen) for _ in range(20)]
    world.wall.advance(-back_ms / 1000)
    after = [world.fast(gen) for _ in range(100)]  # every one on the fast path: nothing waits
    assert min(after) > max(before)
    assert world.slots[20] == world.slots[19] + 1  # the very next slot: logical time did not move back
    assert gen.waits == 0
    world.wall.advance(back_ms / 1000 + 0.5)  # the clock catches up and passes: followed again
    assert world.time_of(await world.take(gen)) == world.now_units()


async def test_a_stalled_clock_is_carried_over(world: World) -> None:
    gen = await world.fresh()
    ids = [await world.take(gen) for _ in range(16 * 2000)]  # 2 s of logical time on a clock that never moves
    assert ids == sorted(set(ids))
    assert world.time_of(ids[-1]) == 100_000 + 1999
    assert gen.waits == 0


async def test_a_forward_jump_is_followed_once_the_bound_is_durable(world: World) -> None:
    gen = await world.fresh()
    world.fast(gen)
    world.wall.advance(10.0)  # past the saved bound (3 s ahead)
    assert gen.take(1) is None  # must not hand out a time the store has not confirmed
    value = await world.take(gen)
    assert world.time_of(value) == 110_000
    assert gen.waits == 1


async def test_never_past_the_saved_bound_tryagain_instead(world: World) -> None:
    gen = await world.fresh()
    world.fast(gen)
    world.store.hold()
    world.wall.advance(5.0)
    task = asyncio.ensure_future(gen.take_wait(1))
    await until(lambda: gen.write is not None and world.store.attempts > 1, "the write to be attempted")
    world.clock.advance(1.0)
    with pytest.raises(CommandError) as info:
        await finish(task)
    assert info.value.message == errors.TRYAGAIN_STORE.format("ts")
    assert gen.wait_timeouts == 1
    world.store.release()
    await until(lambda: gen.write is None, "the held write to land")
    world.got(await gen.take_wait(1))


async def test_an_idle_key_waits_for_one_write_then_serves(world: World) -> None:
    gen = await world.fresh()
    world.fast(gen)
    world.wall.advance(3600.0)
    world.got(await finish(gen.take_wait(1)))
    assert gen.waits == 1
    world.fast(gen)


# --- restarts, floors ----------------------------------------------------------------------------


async def test_a_restart_starts_past_the_saved_bound(world: World) -> None:
    gen = await world.fresh()
    [world.fast(gen) for _ in range(50)]
    saved = durable(world.store)
    world.wall.advance(-30.0)  # and the clock went back across the restart
    again = await world.restart()
    assert again.take(1) is None  # persist first, serve after
    value = await world.take(again)
    assert world.time_of(value) == saved
    assert again.info()["lead_ms"] >= 30_000


async def test_a_floor_from_another_node_is_passed(world: World) -> None:
    snow = PRESETS["snowflake"]
    now = snow.units_at(int(world.wall() * 1000))
    floor = snow.encode(now + 60_000, 1023, 4095)  # an older generator, a minute ahead, on node 1023
    gen = await world.fresh(snow, floor=floor)
    value = world.fast(gen)
    assert value > floor
    assert snow.decode(value) == (now + 60_001, 0, 0)


async def test_set_raises_the_floor_durably_and_never_goes_back(world: World) -> None:
    gen = await world.fresh()
    world.fast(gen)
    floor = SMALL.encode(200_000, 7, 3)  # far past the saved bound
    await finish(gen.raise_floor(floor))
    assert durable(world.store) > 200_000
    assert gen.watermark() >= floor
    value = world.fast(gen)
    assert value > floor and SMALL.decode(value) == (200_001, 5, 0)
    with pytest.raises(CommandError) as info:
        await gen.raise_floor(floor)
    assert info.value.message == errors.SET_BACKWARDS.format("ts", gen.watermark())
    with pytest.raises(CommandError) as info:
        await gen.raise_floor(SMALL.max_id)
    assert info.value.message == errors.TS_FLOOR.format(SMALL.max_id, 5)


async def test_a_floor_past_the_layout_is_refused_at_creation(world: World) -> None:
    with pytest.raises(CommandError) as info:
        await world.fresh(SMALL, floor=SMALL.max_id)
    assert info.value.message == errors.TS_FLOOR.format(SMALL.max_id, 5)


async def test_when_time_bits_run_out_an_error_never_a_wrapped_id(world: World) -> None:
    # 12 bits of seconds: the layout ends 4096 s after its epoch; the clock is 5 s before that.
    short = Layout(time_bits=12, node_bits=0, seq_bits=2, epoch=int(START_S * 1000) - 4091 * 1000, unit=1000)
    gen = await world.fresh(short)
    ids = []
    with pytest.raises(CommandError) as info:
        while True:
            ids.append(await world.take(gen))
    assert info.value.message == errors.TS_EXHAUSTED.format("ts", iso(short.ends_ms))
    assert len(ids) == 5 * 4 and ids == sorted(ids) and ids[-1] == short.max_id
    assert gen.info()["runs_out"] == iso(short.ends_ms)


# --- failures -------------------------------------------------------------------------------------


async def test_a_refused_guard_ends_the_term(world: World) -> None:
    gen = await world.fresh()
    world.fast(gen)
    world.store.guard = Guard(b"someone-else", 7)
    world.wall.advance(10.0)
    with pytest.raises(NotServing):
        await finish(gen.take_wait(1))
    assert world.lease.lost_reasons
    assert gen.take(1) is None
    assert gen.info()["serving"] == 0


async def test_a_store_failure_backs_off_and_never_hands_out_past_the_bound(world: World) -> None:
    gen = await world.fresh()
    world.fast(gen)
    world.store.fail_next = 1
    world.wall.advance(10.0)
    value = await finish(gen.take_wait(1), timeout=5.0)  # the first write fails, the retry lands
    world.got(value)
    assert gen.write_failures == 1


async def test_an_expired_lease_stops_every_path(world: World) -> None:
    gen = await world.fresh()
    world.fast(gen)
    world.lease.is_valid = False
    assert gen.take(1) is None and gen.take_run(1) is None
    with pytest.raises(NotServing):
        await gen.take_wait(1)
    with pytest.raises(NotServing):
        await gen.raise_floor(gen.watermark() + 1)


async def test_a_generator_of_an_ended_term_hands_out_nothing(world: World) -> None:
    gen = await world.fresh()
    world.fast(gen)
    world.lease.end("demoted")
    assert gen.take(1) is None
    with pytest.raises(NotServing):
        await gen.take_wait(1)
    assert gen.info()["ceiling"] == 100_000 + 3000


# --- observability --------------------------------------------------------------------------------


async def test_info_and_decode(world: World) -> None:
    gen = await world.fresh(lookahead_ms=500)
    value = world.fast(gen)
    info = gen.info()
    assert info["type"] == "timestamp"
    assert info["layout"] == "time:30,node:3,seq:4"
    assert info["node"] == 5 and info["unit_ms"] == 1 and info["lookahead_ms"] == 500
    assert info["ceiling"] == 100_500 and info["bound_ahead_ms"] == 500
    assert info["watermark"] == value
    assert info["wall_time"] == info["logical_time"] == iso(EPOCH_MS + 100_000)
    assert gen.decode(value) == {
        "time": iso(EPOCH_MS + 100_000),
        "unix_ms": EPOCH_MS + 100_000,
        "time_units": 100_000,
        "node": 5,
        "sequence": 0,
    }
    for bad in (-1, SMALL.max_id + 1):
        with pytest.raises(CommandError) as err:
            gen.decode(bad)
        assert err.value.message == errors.TS_NOT_AN_ID.format(bad, SMALL.max_id)


# --- the property ---------------------------------------------------------------------------------

Op = tuple[str, int]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("take"), st.integers(1, 40)),
        st.tuples(st.just("run"), st.integers(1, 40)),  # a pipelined run of INCRs (take_run)
        st.tuples(st.just("wall"), st.integers(-3_600_000, 10_000)),  # ms; back up to an hour, forward 10 s
        st.tuples(st.just("land"), st.just(0)),
        st.tuples(st.just("restart"), st.just(0)),
        st.tuples(st.just("floor"), st.integers(0, 5000)),  # SET key (watermark + 37 * arg)
    ),
    max_size=60,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=ops, lookahead=st.sampled_from([1, 5, 3000]))
async def test_property_unique_increasing_and_durable_whatever_the_clock_does(script: list[Op], lookahead: int) -> None:
    world = World()
    gen = await world.fresh(lookahead_ms=lookahead)
    try:
        for op, arg in script:
            if op == "take":
                await world.take(gen, arg)
            elif op == "run":
                ids = gen.take_run(arg)
                if ids is not None:  # consecutive integers, the next slots, within one time unit
                    assert 1 <= len(ids) <= arg and ids.step == 1
                    world.got(ids[-1], len(ids))
                    assert world.layout.decode(ids[0])[0] == world.layout.decode(ids[-1])[0]
            elif op == "wall":
                world.wall.advance(arg / 1000)
            elif op == "land":
                await gen.drain()  # let the write in flight land
            elif op == "restart":
                await gen.drain()
                gen = await world.restart(lookahead)
            else:
                floor = max(gen.watermark(), 0) + arg * 37  # any ID, not only this node's
                await finish(gen.raise_floor(floor))
                assert gen.watermark() >= floor
                assert await world.take(gen) > floor
    finally:
        for g in world.gens:
            await g.drain()


# --- the lead cap (MAXLEAD) -----------------------------------------------------------------------


async def test_the_lead_never_exceeds_the_cap(world: World) -> None:
    """Cap 5 ms, 16 slots per ms, the clock stalled: 6 units' worth (the current one and 5 ahead) go
    on the fast path, then it refuses; every ID's time is within the cap of the clock."""
    world.max_lead_ms = 5
    gen = await world.fresh()
    ids = []
    while (value := gen.take(1)) is not None:
        ids.append(world.got(value))
    assert len(ids) == 6 * 16
    assert all(world.time_of(i) - world.now_units() <= 5 for i in ids)
    assert gen.info()["lead_ms"] == 5 and gen.info()["max_lead_ms"] == 5
    assert gen.take_run(1) is None  # pipelined runs too
    world.wall.advance(0.002)
    world.clock.advance(0.002)
    more = [world.fast(gen) for _ in range(32)]  # two more units as real time moves two
    assert all(world.time_of(i) - world.now_units() <= 5 for i in more)
    assert gen.take(1) is None


async def test_past_the_cap_a_request_waits_for_real_time_then_proceeds(world: World) -> None:
    world.max_lead_ms = 5
    gen = await world.fresh()
    while gen.take(1) is not None:
        pass
    waiting = asyncio.ensure_future(gen.take_wait(3))
    await until(lambda: gen.lead_waits > 0, "the request to wait at the cap")
    assert not waiting.done()
    world.wall.advance(0.001)  # real time catches up by one unit
    world.clock.advance(0.001)
    gen.wake()
    value = await finish(waiting)
    assert world.time_of(value) == world.now_units() + 5
    assert gen.waits == 0  # it never waited for the store


async def test_a_cap_that_cannot_be_met_in_time_is_tryagain_and_a_huge_incrby_an_error(world: World) -> None:
    world.max_lead_ms = 500
    gen = await world.fresh(dataclasses.replace(SMALL, unit=100))  # 100 ms units: one unit is past max_wait
    while gen.take(1) is not None:
        pass
    with pytest.raises(CommandError) as caught:
        await finish(gen.take_wait(1))
    assert caught.value.message == errors.TRYAGAIN_LEAD_CAP.format("ts", 500)
    assert gen.lead_refusals == 1
    with pytest.raises(CommandError) as too_large:
        await finish(gen.take_wait(6 * 16 + 1))  # more slots than the cap can ever hold
    assert too_large.value.message == errors.LEAD_CAP_TOO_LARGE.format(97, "ts", 500, 96)


async def test_a_wall_clock_jumping_back_never_makes_a_request_wait(world: World) -> None:
    world.max_lead_ms = 5
    gen = await world.fresh()
    world.wall.advance(1.0)
    world.clock.advance(1.0)
    before = [world.fast(gen) for _ in range(20)]
    world.wall.advance(-10.0)  # the wall clock is now 10 s behind logical time: the cap must not see a lead
    after = [world.fast(gen) for _ in range(60)]  # all on the fast path, within the steady clock's cap
    assert min(after) > max(before)
    assert gen.lead_waits == 0 and gen.waits == 0
    steady_units = 100_000 + 1000
    assert all(world.time_of(i) <= steady_units + 5 for i in after)
    world.clock.advance(0.003)  # the steady clock moves on with monotonic time
    assert world.fast(gen)


async def test_a_restart_ahead_of_real_time_does_not_wait_out_its_lookahead(world: World) -> None:
    """A restarted generator starts at the stored bound, a lookahead (3 s) ahead: the cap counts from
    there, so it serves at once, and waits only once it runs the cap past that point."""
    world.max_lead_ms = 5
    await world.fresh()
    gen = await world.restart()
    first = await world.take(gen)
    assert world.time_of(first) == 100_000 + LOOKAHEAD_MS
    ids = [first]
    while (value := gen.take(1)) is not None:
        ids.append(world.got(value))
    assert world.time_of(ids[-1]) == 100_000 + LOOKAHEAD_MS + 5
    assert gen.lead_waits == 0


async def test_a_restart_on_a_wall_clock_set_back_waits_no_longer_than_on_a_right_one(world: World) -> None:
    """The wall clock was set back 10 s before the restart: the stored bound is 13 s ahead of it.
    Real time cannot be that far behind a bound that was a lookahead ahead of it, so a key at the cap
    waits about a lookahead (as after any restart), not until the wall clock has caught up."""
    world.max_lead_ms = 5
    await world.fresh()
    world.wall.advance(-10.0)
    gen = await world.restart()
    last = await world.take(gen)
    assert world.time_of(last) == 100_000 + LOOKAHEAD_MS
    while (value := gen.take(1)) is not None:
        last = world.got(value)
    assert world.time_of(last) == 100_000 + LOOKAHEAD_MS + 5
    world.clock.advance(0.002)
    world.wall.advance(0.002)
    assert gen.take(1) is None  # at the cap, as after a restart on a right clock
    world.clock.advance(LOOKAHEAD_MS / 1000 + 0.01)  # about a lookahead later, the wall still 10 s behind
    world.wall.advance(LOOKAHEAD_MS / 1000 + 0.01)
    more = [world.fast(gen) for _ in range(16)]  # a unit's worth more (it used to wait 10 s more)
    assert world.time_of(more[-1]) > 100_000 + LOOKAHEAD_MS + 5
    assert world.now_units() < 100_000 + LOOKAHEAD_MS - 5_000


async def test_a_floor_in_the_future_does_not_make_requests_wait(world: World) -> None:
    world.max_lead_ms = 5
    gen = await world.fresh()
    floor = SMALL.encode(world.now_units() + 2000, 7, 0)  # 2 s ahead (another node's ID)
    await finish(gen.raise_floor(floor))
    assert world.time_of(await world.take(gen)) >= world.now_units() + 2000
    assert gen.lead_waits == 0


async def test_changing_the_cap_applies_at_once(world: World) -> None:
    world.max_lead_ms = 5
    gen = await world.fresh()
    while gen.take(1) is not None:
        pass
    waiting = asyncio.ensure_future(gen.take_wait(1))
    await until(lambda: gen.lead_waits > 0, "the request to wait at the cap")
    gen.set_max_lead(0)  # SEQ.ALTER key MAXLEAD 0: no cap, the waiting request goes at once
    world.got(await finish(waiting))
    assert gen.take(100) is not None
    gen.set_max_lead(5)
    assert gen.take(1) is None  # and back: far ahead now, so it waits for real time again
