"""The worker-id core (``march.keyspace.worker_ids``) against a model: no id ever has two live holders, and a new
holding's floor covers every bound an earlier holder of its id declared, whatever the clocks do.

Driven step by step with no I/O (hypothesis picks the steps): ``Workers`` over one ``MemoryStore``,
each primary with a monotonic ``ManualClock`` of its own (it only moves forwards, from an offset
of its own, as another machine's clock does) and a wall clock of its own that steps jump forwards
and backwards by up to two days. The steps:

- ACQUIRE / RENEW / RELEASE, sent at one moment and processed up to a few seconds later, now and
  then by a deposed primary that still believes it serves;
- real time passing (each primary's sweeper runs by itself as its clock moves) and explicit sweeps;
- a wall-clock jump on the primary;
- a takeover by the other primary (a new term whose guard fences the old one out of the store),
  and a restart of the primary (a new object on the same store: nothing remembered).

A holder is what a raw client would be, trusting the server fully (the Python client stops
earlier): its id is its own from each confirmed ACQUIRE or RENEW reply until that request's send
time plus the TTL, and until it sends RELEASE. The check after every step: for each id, the live
spans of its holders are disjoint; every new holding's ``floor_ms`` is at least each ``UPTO`` an
earlier holder of that id had confirmed (deleted records included: the retired floor).

``test_the_model_catches_a_wall_clock_expiry`` proves the check can fail: a server that judges
expiry on its wall clock (what ``march.keyspace.worker_ids`` did before) is caught by a forward jump.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from march_harness.manual_clock import ManualClock
from march_harness.memory_store import MemoryStore

from march.config import Config
from march.errors import CommandError
from march.generators.bound import NotServing
from march.keyspace import worker_ids as workers_module
from march.keyspace.serving import Cause, ServingState
from march.keyspace.worker_ids import Workers
from march.store.contract import Guard

MARGIN = 2.0
TTLS = (1, 3, 20)
NAMESPACES = (b"a", b"b")
CONFIG = Config(worker_margin=MARGIN, worker_max_holders=4, worker_max_namespaces=2, max_wait=30.0)
EPOCH = 1_700_000_000.0  # the real time (Unix seconds) a history starts at


@dataclass
class Holder:
    """One holding as its (raw) client sees it."""

    namespace: bytes
    id: int
    token: bytes
    ttl: int
    floor: int
    spans: list[tuple[float, float]] = field(default_factory=list)  # [reply, send + ttl) per confirmed request
    released: float = math.inf  # the send time of its RELEASE: it stops before sending it
    lost: bool = False  # the server refused its token: it stops for good
    upto: int = 0  # the highest UPTO the server confirmed

    def live(self) -> list[tuple[float, float]]:
        return [(a, min(b, self.released)) for a, b in self.spans if a < min(b, self.released)]


class Primary:
    """One server process: its clocks, its serving state, its ``Workers`` over the shared store."""

    def __init__(self, world: World, name: str, mono_offset: float) -> None:
        self.world = world
        self.name = name
        self.clock = ManualClock(now=world.real + mono_offset)
        self.wall_offset = 0.0  # seconds its wall clock is off real time
        self.state = ServingState(self.clock)
        self.workers = Workers(CONFIG, world.store, self.state, wall=self.wall, mono=self.clock.now, token=world.token)

    def wall(self) -> float:
        return EPOCH + self.world.real + self.wall_offset

    def lead(self, guard: Guard) -> None:
        if self.state.term is not None:
            self.state.step_down(Cause.SUPERSEDED)
        self.state.renewed(math.inf)  # the lease is not what is tested here: the store's guard fences
        self.state.promote(guard)
        self.state.serve()


class World:
    def __init__(self) -> None:
        self.real = 0.0  # seconds since the history began
        self.store = MemoryStore()
        self._tokens = itertools.count()
        self.revision = 1
        self.store.guard = Guard(b"p0", self.revision)
        self.primaries = [Primary(self, "p0", 5_000.0), Primary(self, "p1", -3_000.0)]
        self.current = self.primaries[0]
        self.current.lead(self.store.guard)
        self.deposed: Primary | None = None
        self.holders: list[Holder] = []
        self.confirmed_upto: dict[tuple[bytes, int], int] = {}  # (ns, id) -> highest UPTO confirmed so far
        self.dead: list[Primary] = []  # restarted processes: never asked again

    def token(self) -> bytes:
        return b"t%d" % next(self._tokens)

    async def advance(self, seconds: float) -> None:
        self.real += seconds
        for p in self.primaries:
            await p.clock.advance(seconds)

    def target(self, old: bool) -> Primary:
        return self.deposed if old and self.deposed is not None else self.current

    async def takeover(self) -> None:
        """The other primary wins a new term: the store accepts only its guard from now on. The old
        one does not know yet (it learns when a write of its is refused)."""
        old = self.current
        new = next(p for p in self.primaries if p is not old)
        self.revision += 1
        self.store.guard = Guard(new.name.encode(), self.revision)
        new.lead(self.store.guard)
        self.current, self.deposed = new, old

    async def restart(self, mono_offset: float) -> None:
        """The primary's process restarts on the same store and guard: a new object, nothing remembered."""
        old = self.current
        old.state.step_down(Cause.SHUTDOWN)
        await old.workers.drain()
        fresh = Primary(self, old.name, mono_offset)
        fresh.wall_offset = old.wall_offset
        fresh.lead(self.store.guard)
        self.primaries[self.primaries.index(old)] = fresh
        self.current = fresh
        if self.deposed is old:
            self.deposed = None

    async def close(self) -> None:
        for p in self.primaries:
            p.state.step_down(Cause.SHUTDOWN)
            await p.workers.drain()

    # --- requests ----------------------------------------------------------------------------------

    async def acquire(self, ns: bytes, ttl: int, delay: float, old: bool) -> None:
        sent = self.real
        await self.advance(delay)
        try:
            worker_id, token, granted, floor = await self.target(old).workers.acquire(ns, ttl)
        except (CommandError, NotServing):
            return
        holder = Holder(ns, worker_id, token, granted, floor, [(self.real, sent + granted)])
        earlier = self.confirmed_upto.get((ns, worker_id), 0)
        assert floor >= earlier, f"id {worker_id} of {ns!r} acquired with floor {floor} below a declared {earlier}"
        self.holders.append(holder)

    async def renew(self, holder: Holder, upto: int, delay: float, old: bool) -> None:
        if holder.lost or holder.released < math.inf:
            return
        sent = self.real
        await self.advance(delay)
        try:
            granted = await self.target(old).workers.renew(holder.namespace, holder.id, holder.token, upto)
        except NotServing:
            return
        except CommandError as exc:
            if "not held" in exc.message:
                holder.lost = True
            return
        holder.spans.append((self.real, sent + granted))
        self._declared(holder, upto)

    async def release(self, holder: Holder, upto: int, delay: float, old: bool) -> None:
        if holder.lost or holder.released < math.inf:
            return
        holder.released = self.real  # it stops before sending RELEASE, whatever the answer
        await self.advance(delay)
        try:
            await self.target(old).workers.release(holder.namespace, holder.id, holder.token, upto)
        except (CommandError, NotServing):
            return
        self._declared(holder, upto)

    def _declared(self, holder: Holder, upto: int) -> None:
        at = (holder.namespace, holder.id)
        holder.upto = max(holder.upto, upto)
        self.confirmed_upto[at] = max(self.confirmed_upto.get(at, 0), upto)

    # --- the check ---------------------------------------------------------------------------------

    def check(self) -> None:
        """No id has two holders whose live spans overlap."""
        by_id: dict[tuple[bytes, int], list[Holder]] = {}
        for h in self.holders:
            by_id.setdefault((h.namespace, h.id), []).append(h)
        for (ns, worker_id), holders in by_id.items():
            for one, other in itertools.combinations(holders, 2):
                for (a1, b1), (a2, b2) in itertools.product(one.live(), other.live()):
                    assert b1 <= a2 or b2 <= a1, (
                        f"id {worker_id} of {ns!r}: holder {one.token!r} live over [{a1:.3f}, {b1:.3f}) "
                        f"and holder {other.token!r} over [{a2:.3f}, {b2:.3f})"
                    )


Step = tuple[Any, ...]

_delay = st.sampled_from([0.0, 0.0, 0.3, 1.0, 2.5])
_acquire = st.tuples(st.just("acquire"), st.sampled_from(NAMESPACES), st.sampled_from(TTLS), _delay, st.booleans())
_wait = st.tuples(st.just("wait"), st.sampled_from([0.2, 0.9, 1.5, 3.0, 7.0, 25.0, 90.0]))
_steps: st.SearchStrategy[Step] = st.one_of(
    _acquire,
    _acquire,
    _acquire,
    _wait,
    st.tuples(st.just("renew"), st.integers(0, 50), st.integers(-10_000, 90_000), _delay, st.booleans()),
    st.tuples(st.just("renew"), st.integers(0, 50), st.integers(-10_000, 90_000), _delay, st.booleans()),
    st.tuples(st.just("release"), st.integers(0, 50), st.integers(-10_000, 90_000), _delay, st.booleans()),
    _wait,
    st.tuples(st.just("wall"), st.sampled_from([-172_800.0, -3_600.0, -41.0, -2.0, 2.0, 41.0, 3_600.0, 172_800.0])),
    st.just(("takeover",)),
    st.tuples(st.just("restart"), st.sampled_from([-1e6, 0.0, 1e6])),
    st.just(("sweep",)),
)


async def run(steps: list[Step]) -> World:
    world = World()
    try:
        for step in steps:
            kind = step[0]
            live = [h for h in world.holders if not h.lost and h.released == math.inf]
            if kind == "acquire":
                await world.acquire(step[1], step[2], step[3], step[4])
            elif kind in ("renew", "release") and live:
                holder = live[step[1] % len(live)]
                upto = int((EPOCH + world.real) * 1000) + step[2]
                if kind == "renew":
                    await world.renew(holder, upto, step[3], step[4])
                else:
                    await world.release(holder, upto, step[3], step[4])
            elif kind == "wait":
                await world.advance(step[1])
            elif kind == "wall":
                world.current.wall_offset += step[1]
            elif kind == "takeover":
                await world.takeover()
            elif kind == "restart":
                await world.restart(step[1])
            elif kind == "sweep":
                await world.current.workers.sweep()
            world.check()
    finally:
        await world.close()
    return world


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(_steps, min_size=10, max_size=60))
def test_no_id_ever_has_two_live_holders(steps: list[Step]) -> None:
    world = asyncio.run(run(steps))
    ids = [(h.namespace, h.id) for h in world.holders]
    event(f"holdings: {min(len(ids), 5)}{'+' if len(ids) >= 5 else ''}")
    event(f"an id held again: {len(set(ids)) < len(ids)}")
    event(f"a record deleted: {world.store.retired_upto > 0}")


def test_a_history_with_every_step_hands_ids_out_again() -> None:
    """The model does reach the interesting states: ids are taken over after expiry, across a
    takeover and a restart, with the wall clock moved both ways, and records get deleted."""
    steps: list[Step] = [
        ("acquire", b"a", 3, 0.0, False),
        ("renew", 0, 60_000, 0.0, False),
        ("wall", 3_600.0),  # the primary's wall clock jumps an hour ahead: the id stays held
        ("acquire", b"a", 20, 0.0, False),
        ("takeover",),
        ("wall", -172_800.0),  # the new primary's clock is two days behind
        ("acquire", b"a", 20, 0.0, False),
        ("wait", 90.0),
        ("acquire", b"a", 1, 0.0, False),
        ("restart", -1e6),
        ("wait", 90.0),
        ("sweep",),
        ("acquire", b"b", 1, 0.0, False),
    ]

    async def go() -> World:
        world = await run(steps)
        return world

    world = asyncio.run(go())
    ids = [(h.namespace, h.id) for h in world.holders]
    assert ids[:3] == [(b"a", 0), (b"a", 1), (b"a", 2)]  # none handed out while live, whatever the clocks
    assert (b"a", 0) in ids[3:]  # and handed out again once expired, by a restarted primary
    reused = [h for h in world.holders if (h.namespace, h.id) == (b"a", 0)][-1]
    assert reused.floor >= world.holders[0].upto > 0  # the first holder's bound, kept across everything


def test_the_model_catches_a_wall_clock_expiry() -> None:
    """The check can fail: judge expiry by the wall clock (as before) and a forward jump gives one
    id two live holders."""

    def wall_standing(self: Any, record: Any, now: float, margin: float) -> workers_module.Standing:
        wall_now = wall_of[0]()
        if not record.token or wall_now * 1000 >= record.expires_ms + margin * 1000:
            return workers_module.Standing.FREE
        return workers_module.Standing.LIVE if wall_now * 1000 < record.expires_ms else workers_module.Standing.RESTING

    wall_of: list[Any] = []

    async def go() -> None:
        world = World()
        wall_of.append(world.current.wall)
        try:
            await world.acquire(b"a", 20, 0.0, False)
            world.current.wall_offset += 41  # the server's clock moves 41 s ahead
            await world.acquire(b"a", 20, 0.0, False)
            world.check()
        finally:
            await world.close()

    with patch_standing(wall_standing), pytest.raises(AssertionError, match="id 0 of b'a': holder"):
        asyncio.run(go())


@contextmanager
def patch_standing(standing: Any) -> Iterator[None]:
    with mock.patch.object(workers_module._Known, "standing", standing):
        yield
