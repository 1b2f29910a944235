"""The timestamp generator: snowflake-style IDs (time | node | sequence) that survive clock jumps.

It counts in *slots* (``slot = time << seq_bits | seq``, see ``layout``); the ID of a slot grows
with the slot. State: ``last``, the last slot handed out, and ``ceiling``, an exclusive bound on
the *time field* (in layout units since the layout's epoch) that the store has confirmed.

- **Logical time** = max(wall clock, last slot's time). A request takes the slot after ``last``,
  or the first slot of the wall clock's current unit if the clock is ahead. So:
  - the sequence field overflowing simply moves to the next unit (a *carry*): under a burst,
    logical time runs ahead of the clock instead of waiting for it, and falls back to the clock
    when the burst ends;
  - a clock that jumps backwards (by any amount) is ignored until it catches up: nothing blocks,
    nothing repeats; a clock that jumps forwards is followed.
- **Durable lookahead**: every slot handed out has a time field < ``ceiling``. The ceiling is
  persisted ``lookahead`` (default 3 s) ahead of logical time, and a new write starts in the
  background once less than ``watermark`` (half) of that is left, so a busy key never waits for
  the store. When a burst spends logical time faster than the clock (INCRBY at millions of IDs
  per second), the distance stretches to what the last interval spent in ``batch_interval``
  (at most ``MAX_STRETCH`` lookaheads): still about one store write per second, as for sequences.
  A request that would pass the ceiling (a forward clock jump, a key idle for longer than its
  lookahead, a slow store) waits for the write, at most ``max_wait``, then gets TRYAGAIN: never
  an ID at or past a bound the store has not confirmed.
- **Restart / new primary**: a generator built from a stored ceiling C starts at slot ``C << seq_bits``:
  nothing at or after C was handed out, anything before may have been. Its first request
  therefore waits for one store write (persist first, serve after).
- ``take(n)`` hands out n consecutive slots and returns the last one's ID (INCRBY); ``take_run(n)``
  hands out up to n slots whose IDs are consecutive integers (a pipelined run of INCRs, whose
  replies the server writes as consecutive integers): the rest of the current time unit at most,
  and none when the sequence field is not the lowest (then the server takes them one by one).
- When the time field runs out (``layout.ends_ms``), requests get an error, never a wrapped ID.
- **Bounded lead** (``max_lead``, ms; server default ``timestamp_max_lead_ms`` = 1000, per key
  ``SEQ.CREATE ... MAXLEAD`` / ``SEQ.ALTER``, within the bounds ``march.config`` declares; 0 =
  no cap is left to unit tests): the time inside an ID may run at most
  ``max_lead`` ahead of real time. Without a cap, a key flooded with INCRBY carries into the
  future without limit (a 3 s burst once put IDs 174 s ahead), and since the durable bound is
  persisted a lookahead past logical time, a later restart or failover then starts that far in
  the future and wastes ID space. About a second bounds that, while still letting one key hand
  out ~4,096,000 IDs/s with 12 sequence bits, plus a second's worth in a burst. Past the cap a
  request waits (at most ``max_wait``) for real time to catch up, or gets TRYAGAIN naming the
  cap; an INCRBY larger than the cap could ever allow (``(max_lead / unit + 1) << seq_bits``
  slots) is an error at once. "Real time" is a clock that cannot go back: the wall clock's
  high-water mark advanced by the monotonic clock, so a wall clock jumping backwards never makes
  a request wait. The lead is measured from the later of that and the generator's *base*: the
  slot it started at (a restart starts at the stored bound, up to a lookahead ahead) or a floor
  raised by SET, so neither makes every request wait. A wall clock far behind the stored bound a
  restarted generator starts at (set back before the restart, or a new primary's clock behind
  the old one's) is not believed either: the steady clock starts at most a lookahead and a lead
  before it, so such a node waits at the cap no longer than a restart on a right clock would.
  The fast path pays one comparison (against the wall clock, which is never ahead of the steady
  one) and, when logical time runs ahead of the wall clock (a burst at the cap, a wall clock set
  back), a second against the cap as of the last steady reading (which can only have grown
  since); the steady clock is read only when both fail, about once per time unit.

Both clocks are injected: ``clock`` (monotonic seconds, for waits and write latencies) and
``wall`` (seconds since 1970, for the time field). Store writes and lease checks are
``DurableBound``'s, shared with plain sequences; the lead cap and its steady clock are
``lead.LeadCap``'s, the distance of the next bound (and its stretch) ``Lookahead``'s, SEQ.DECODE
``decode_id``. This module never reads a real clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from march import errors
from march.errors import CommandError
from march.generators.bits import Layout, iso
from march.generators.bound import BatchPolicy, Context, DurableBound, Monotonic, ServingTerm, WallClock
from march.generators.lead import LeadCap
from march.store.contract import SequenceRecord, Store

KIND = "timestamp"
MAX_STRETCH = 20  # a burst may push the bound at most 20 lookaheads ahead: a restart jumps no further


def lookahead_units(layout: Layout, lookahead_ms: int) -> int:
    """The lookahead in whole time units, rounded up, at least one."""
    return max(1, -(-lookahead_ms // layout.unit))


def new_record(
    key: bytes, settings: Mapping[str, Any], start: int, wall: WallClock, lookahead_ms: int
) -> tuple[SequenceRecord, int]:
    """The record of a new timestamp sequence whose IDs are all >= ``start``, and its first slot.

    The first slot is the later of "now" and the first slot whose ID is >= ``start`` (FLOOR); the
    stored ceiling is a lookahead past it, so the first request needs no store write.
    """
    layout = Layout.from_settings(settings)
    now_slot = layout.units_at(int(wall() * 1000)) << layout.seq_bits
    floor_slot = 0 if start <= 0 else layout.first_slot_above(start - 1)
    if floor_slot is None:
        raise CommandError(errors.TS_FLOOR.format(start - 1, layout.node))
    first = max(now_slot, floor_slot)
    ceiling = min(layout.time_top, (first >> layout.seq_bits) + lookahead_units(layout, lookahead_ms))
    if first >> layout.seq_bits >= ceiling:
        raise CommandError(errors.TS_LAYOUT_ENDED.format(iso(layout.ends_ms)))
    return SequenceRecord(key, KIND, ceiling, dict(settings)), first


def decode_id(layout: Layout, id_: int) -> dict[str, Any]:
    """SEQ.DECODE: the fields of an ID of ``layout`` and its time, readable."""
    if not 0 <= id_ <= layout.max_id:
        raise CommandError(errors.TS_NOT_AN_ID.format(id_, layout.max_id))
    time_field, node, seq = layout.decode(id_)
    ms = layout.ms_of(time_field)
    return {"time": iso(ms), "unix_ms": ms, "time_units": time_field, "node": node, "sequence": seq}


class Lookahead:
    """How far past logical time the next durable bound goes, in time units: ``units`` (the
    lookahead), stretched under a burst to what the last interval spent in ``batch_interval`` (at
    most ``MAX_STRETCH`` lookaheads); the next write starts once less than ``low`` of it is left."""

    def __init__(self, units: int, watermark: float) -> None:
        self.units = units
        self.ahead = units  # how far ahead of logical time the next bound goes (stretches)
        self.low = max(1, int(units * watermark))
        self._last: tuple[float, int] | None = None  # (clock, logical time) at the last extension

    def set_watermark(self, watermark: float) -> None:
        self.low = max(1, int(self.ahead * watermark))

    def target(self, logical: int, at: float, policy: BatchPolicy, retrying: bool) -> int:
        """The bound to persist when logical time is ``logical`` at clock ``at``."""
        previous, self._last = self._last, (at, logical)
        if previous is not None and at > previous[0] and not retrying:
            # Logical time spent per batch_interval at the recent pace: one write should last that long.
            pace = (logical - previous[1]) * policy.interval / (at - previous[0])
            self.ahead = max(self.units, min(self.units * MAX_STRETCH, int(pace)))
            self.low = max(1, int(self.ahead * policy.watermark))
        return logical + self.ahead


class TimestampGenerator(DurableBound):
    kind = KIND

    def __init__(
        self,
        key: bytes,
        ceiling: int,
        layout: Layout,
        store: Store,
        lease: ServingTerm,
        policy: BatchPolicy,
        clock: Monotonic,
        wall: WallClock,
        lookahead_ms: int,
        first_slot: int | None = None,
        max_lead_ms: int = 0,
    ) -> None:
        self.layout = layout
        self._wall = wall
        self._sb = sb = layout.seq_bits
        self._mask = (1 << sb) - 1
        self._epoch = layout.epoch
        self._unit = layout.unit
        self._time_shift = layout.shifts["time"]
        self._seq_shift = layout.shifts["seq"]
        self._node_part = layout.node << layout.shifts["node"]
        self._slot_top = layout.slot_top
        self.lookahead_ms = lookahead_ms
        self._lookahead = Lookahead(lookahead_units(layout, lookahead_ms), policy.watermark)
        self._limit = 0  # slots below this have a durable time (ceiling << seq_bits)
        self._extend_at = 0  # a slot at or past this starts the next write
        self._top = layout.time_top
        super().__init__(key, ceiling, Context.of(store, lease, clock, policy))
        self._valid = self._ctx.valid  # type: ignore[method-assign]  # bound here: the fast path calls it
        # Nothing at or after the stored ceiling was handed out before this generator was built;
        # a brand-new sequence starts at its first slot, below the ceiling stored with it.
        start = ceiling << sb if first_slot is None else min(first_slot, ceiling << sb)
        self._last = start - 1
        self._floor = -1  # the highest floor raised (SET): a GET reports at least it
        self._issued = 0
        self.carries = 0  # times the sequence field overflowed into the time field ahead of the clock
        # The lead counts from the start slot's unit (the base) or real time, whichever is later; a
        # restart (from a stored bound) believes no wall clock far behind that bound (see LeadCap).
        restart = self._lookahead.units if first_slot is None else None
        self._cap = LeadCap(layout, clock, wall, start >> sb, max_lead_ms, restart)

    @property
    def max_lead_ms(self) -> int:
        return self._cap.max_lead_ms

    @property
    def lead_waits(self) -> int:  # requests that waited at the lead cap
        return self._cap.waits

    @property
    def lead_refusals(self) -> int:  # requests refused at the lead cap (TRYAGAIN)
        return self._cap.refusals

    def set_max_lead(self, max_lead_ms: int) -> None:
        """Cap the lead of IDs over real time at ``max_lead_ms`` (0: no cap); applies at once."""
        self._cap.set(max_lead_ms)
        self._notify()  # waiting requests look again

    def set_policy(self, policy: BatchPolicy) -> None:
        super().set_policy(policy)
        self._lookahead.set_watermark(policy.watermark)  # a new watermark applies to this bound already
        self._set_ceiling(self._ceiling)

    def _set_ceiling(self, ceiling: int) -> None:
        self._ceiling = ceiling
        self._limit = ceiling << self._sb
        self._extend_at = max(0, ceiling - self._lookahead.low) << self._sb

    def _now_slot(self) -> int:
        """The first slot of the wall clock's current unit (negative before the epoch)."""
        return ((int(self._wall() * 1000) - self._epoch) // self._unit) << self._sb

    def _id(self, slot: int) -> int:
        return ((slot >> self._sb) << self._time_shift) | ((slot & self._mask) << self._seq_shift) | self._node_part

    # --- the fast path -------------------------------------------------------------------------

    def take(self, n: int) -> int | None:
        """Hand out ``n`` >= 1 consecutive slots and return the last one's ID, or None if the caller must wait."""
        now = ((int(self._wall() * 1000) - self._epoch) // self._unit) << self._sb
        last = self._last
        first = now if now > last else last + 1
        end = first + n - 1
        if end < self._limit and self._valid():
            cap = self._cap
            if end >= now + cap.span and end >= cap.ok and cap.excess(end) > 0:
                return None
            return self._hand_out(first, end, now)
        return None

    def take_run(self, n: int) -> range | None:
        """Up to ``n`` >= 1 pipelined INCRs at once: the IDs of the next slots, as many as are
        consecutive integers and allowed now (at most to the end of the current time unit; none
        when the sequence field is not the lowest), or None (the caller takes them one by one)."""
        if self._seq_shift:
            return None
        now = ((int(self._wall() * 1000) - self._epoch) // self._unit) << self._sb
        last = self._last
        first = now if now > last else last + 1
        end = min(first + n - 1, first | self._mask, self._limit - 1)
        if end >= first and self._valid():
            cap = self._cap
            if end >= now + cap.span and end >= cap.ok and cap.excess(end) > 0:
                return None
            top = self._hand_out(first, end, now)
            return range(top - (end - first), top + 1)
        return None

    def _hand_out(self, first: int, end: int, now: int) -> int:
        sb = self._sb
        # Units crossed past the clock: from the previous slot's unit when logical time was ahead.
        self.carries += (end >> sb) - ((self._last if now <= self._last else first) >> sb)
        self._last = end
        self._issued += end - first + 1
        if end >= self._extend_at and self._write is None:
            self._extend(0)
        return self._id(end)

    async def take_wait(self, n: int) -> int:
        """Like ``take``, waiting (bounded) for the bound to be extended; raises on failure."""
        deadline = self._clock() + self._policy.max_wait
        waited = False
        self._cap.check_size(n, self._name)
        while True:
            self._check_serving()
            now = self._now_slot()
            first = max(now, self._last + 1)
            end = first + n - 1
            if end >= self._slot_top:
                raise CommandError(errors.TS_EXHAUSTED.format(self._name, iso(self.layout.ends_ms)))
            excess = self._cap.excess(end) if end >= now + self._cap.span else 0
            if excess > 0:
                await self._await_lead(excess, deadline)
                continue
            if end < self._limit:
                return self._hand_out(first, end, now)
            if not waited:
                waited = True
                self.waits += 1
            await self._await_change(deadline, end >> self._sb)

    async def _await_lead(self, excess: int, deadline: float) -> None:
        """Wait until real time has caught up by ``excess`` units (or anything changed); TRYAGAIN
        when that cannot happen before the deadline."""
        needed = self._cap.admit(excess, deadline, self._name)
        await self._wait_changed(self._io_state(), max(needed, 0.001))

    async def raise_floor(self, floor: int) -> None:
        """Make every later ID > ``floor``, durably, before returning (SET key N, migration).

        ``floor`` may come from another generator (another node, another layout): the next slot
        is the first whose ID for this node is above it. ``last`` moves only once that slot's
        time is below a durable ceiling, for the same reason as with sequences (a GET must never
        report a floor that a restart could hand out IDs below).
        """
        watermark = self.watermark()
        if floor < watermark:
            raise CommandError(errors.SET_BACKWARDS.format(self._name, watermark))
        slot = self.layout.first_slot_above(floor)
        if slot is None:
            raise CommandError(errors.TS_FLOOR.format(floor, self.layout.node))
        deadline = self._clock() + self._policy.max_wait
        while True:
            self._check_serving()
            if slot < self._limit:
                break
            await self._await_change(deadline, slot >> self._sb)
        if slot - 1 > self._last:
            self._last = slot - 1
        self._cap.base = max(self._cap.base, slot >> self._sb)  # a floor in the future is not a lead to wait out
        self._floor = max(self._floor, floor)

    @property
    def _name(self) -> str:
        return self.key.decode("utf-8", "replace")

    @property
    def issued(self) -> int:
        """IDs handed out by this generator (since it was loaded)."""
        return self._issued

    def retire(self, ctx: Context) -> None:
        super().retire(ctx)
        self._valid = ctx.valid  # type: ignore[method-assign]

    def progress(self) -> int:
        return self._last

    def watermark(self) -> int:
        """W: every ID handed out so far is <= W, every later one is > W (GET); -1 before the first slot.

        After ``raise_floor(N)`` it is at least N (the slot before the next may carry another node's
        smaller ID); a restart starts past the durable bound, whose slots' IDs are all above N.
        """
        return max(self._id(self._last) if self._last >= 0 else -1, self._floor)

    def decode(self, id_: int) -> dict[str, Any]:
        """SEQ.DECODE of an ID of this generator's layout (``decode_id``)."""
        return decode_id(self.layout, id_)

    # --- extension -----------------------------------------------------------------------------

    def _next_target(self, need: int) -> int:
        """A lookahead past logical time (or past the unit a waiting request needs), stretched under a burst."""
        now = (int(self._wall() * 1000) - self._epoch) // self._unit
        logical = max(now, self._last >> self._sb, need)
        return self._lookahead.target(logical, self._clock(), self._policy, bool(self._retry_delay))

    def lead_ms(self) -> int:
        """How far (ms) logical time, the last slot handed out, runs ahead of the wall clock (0: not ahead)."""
        now_units = self.layout.units_at(int(self._wall() * 1000))
        return max(0, (self._last >> self._sb) - now_units) * self.layout.unit

    def info(self) -> dict[str, Any]:
        return describe(self)


def describe(gen: TimestampGenerator) -> dict[str, Any]:
    """SEQ.INFO's fields of a timestamp sequence: its layout, where logical time and the durable
    bound stand against the wall clock, the lead cap's counts."""
    layout = gen.layout
    now_ms = int(gen._wall() * 1000)
    now_units = layout.units_at(now_ms)
    logical = max(now_units, gen._last >> gen._sb)
    ceiling = gen.durable_ceiling
    return {
        "type": gen.kind,
        "preset": layout.preset,
        "layout": layout.describe(),
        "epoch": layout.epoch,
        "unit_ms": layout.unit,
        "node": layout.node,
        "watermark": gen.watermark(),
        "logical_time": iso(layout.ms_of(logical)),
        "wall_time": iso(now_ms),
        "lead_ms": (logical - now_units) * layout.unit,
        "ceiling": ceiling,
        "ceiling_time": iso(layout.ms_of(ceiling)),
        "bound_ahead_ms": (ceiling - logical) * layout.unit if gen._valid() else 0,
        "lookahead_ms": gen.lookahead_ms,
        "lookahead_now_ms": gen._lookahead.ahead * layout.unit,
        "max_lead_ms": gen.max_lead_ms,
        "lead_cap_waits": gen.lead_waits,
        "lead_cap_refusals": gen.lead_refusals,
        "extending_to": gen._target if gen._write is not None else 0,
        "carries": gen.carries,
        "issued": gen.issued,
        "runs_out": iso(layout.ends_ms),
        "runs_out_in_days": (layout.ends_ms - now_ms) // 86_400_000,
        **gen.store_info(),
    }
