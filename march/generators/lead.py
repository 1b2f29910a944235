"""The lead cap of a timestamp generator: how far the time inside an ID may run ahead of real time.

What the cap is for, and why real time is read from a clock that cannot go back, is in
``march.generators.timestamp`` ("Bounded lead"). Here: the *steady clock* (the wall clock's
high-water mark advanced by the monotonic clock; it starts at most a lookahead and a lead below a
restarted generator's stored bound), the *base* (the slot a generator started at, or a floor
raised by SET: the lead counts from the later of it and the steady clock), and the two figures the
generator's fast path compares against without reading a clock: ``span`` (slots past the wall
clock's unit allowed unchecked) and ``ok`` (slots below it were within the cap at the last steady
reading, so they still are). It never hands out anything, and it never lets a request past the
cap: ``excess`` > 0 means wait or refuse.
"""

from __future__ import annotations

from march import errors
from march.errors import CommandError
from march.generators.bits import Layout
from march.generators.bound import Monotonic, WallClock


class LeadCap:
    """The lead cap (``max_lead_ms``, 0: none) of one generator, on its own steady clock."""

    def __init__(
        self, layout: Layout, clock: Monotonic, wall: WallClock, base: int, max_lead_ms: int, restart: int | None
    ) -> None:
        """``base``: the start slot's time unit; ``restart``: the lookahead (units) when the generator
        starts from a stored bound, None for a brand-new sequence."""
        self._sb = layout.seq_bits
        self._unit = layout.unit
        self._epoch = layout.epoch
        self._slot_top = layout.slot_top
        self._clock = clock
        self._wall = wall
        self.base = base  # time units: the lead counts from here while real time is behind it
        self._steady_ms = wall() * 1000
        if restart is not None:
            # A wall clock far behind the stored bound (set back before this restart, or a new
            # primary's clock behind the old one's) is not believed: the bound was at most a
            # lookahead and a lead ahead of real time, so real time is at least that. Such a node
            # waits at the cap no longer than a restart on a right clock would, never the whole jump.
            earliest_ms = layout.ms_of(base) - restart * layout.unit - max_lead_ms
            self._steady_ms = max(self._steady_ms, float(earliest_ms))
        self._steady_at = clock()
        self.max_lead_ms = 0
        self._units = 0
        self.span = 0  # slots past the wall clock's unit that the fast path allows unchecked
        self.ok = 0  # slots below this were within the cap at the last steady reading (still are)
        self.set(max_lead_ms)
        self.waits = 0  # requests that waited at the cap
        self.refusals = 0  # requests refused at the cap (TRYAGAIN)

    def set(self, max_lead_ms: int) -> None:
        """Cap the lead at ``max_lead_ms`` (0: no cap); the next check reads the steady clock again."""
        self.max_lead_ms = max_lead_ms
        self._units = max_lead_ms // self._unit
        self.span = (self._units + 1) << self._sb if max_lead_ms else self._slot_top
        self.ok = 0  # a new cap: read the steady clock again

    def check_size(self, n: int, name: str) -> None:
        """An INCRBY of ``n`` slots that the cap could never allow is an error at once."""
        most = (self._units + 1) << self._sb
        if self.max_lead_ms and n > most:
            raise CommandError(errors.LEAD_CAP_TOO_LARGE.format(n, name, self.max_lead_ms, most))

    def _steady_units(self) -> int:
        """Real time in layout units, from a clock that never goes back."""
        at = self._clock()
        steady = self._steady_ms + (at - self._steady_at) * 1000
        wall = self._wall() * 1000
        if wall > steady:
            steady = wall
        self._steady_ms, self._steady_at = steady, at
        return (int(steady) - self._epoch) // self._unit

    def excess(self, end: int) -> int:
        """Units by which slot ``end`` passes the lead cap now (<= 0: within it)."""
        if not self.max_lead_ms:
            return 0
        base = max(self._steady_units(), self.base)
        # Neither the steady clock nor the base goes back: slots below this stay within the cap.
        self.ok = (base + self._units + 1) << self._sb
        return (end >> self._sb) - base - self._units

    def admit(self, excess: int, deadline: float, name: str) -> float:
        """The seconds to wait for real time to catch up by ``excess`` units; TRYAGAIN when that
        cannot happen before ``deadline`` (clock seconds)."""
        needed = excess * self._unit / 1000
        remaining = deadline - self._clock()
        if needed > remaining:
            self.refusals += 1
            raise CommandError(errors.TRYAGAIN_LEAD_CAP.format(name, self.max_lead_ms))
        self.waits += 1
        return needed
