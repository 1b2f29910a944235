"""The two small parts of the timestamp generator on their own: ``LeadCap`` (``march.generators.lead``:
the steady clock and the cap on how far IDs run ahead of real time) and ``Lookahead``
(``march.generators.timestamp``: how far past logical time the next durable bound goes).

``test_timestamp.py`` checks them through the generator (waits and refusals at the cap, bursts,
clock jumps, restarts); here each rule is pinned where it is decided, on clocks the test sets.
"""

from __future__ import annotations

import pytest

from march import errors
from march.errors import CommandError
from march.generators.bits import preset
from march.generators.bound import BatchPolicy
from march.generators.lead import LeadCap
from march.generators.timestamp import MAX_STRETCH, Lookahead

LAYOUT = preset("snowflake")  # 1 ms units, 12 sequence bits
SB = LAYOUT.seq_bits
NOW_MS = LAYOUT.epoch + 1_000_000  # a wall-clock instant: 1,000,000 units after the epoch


class Clocks:
    """A monotonic clock and a wall clock (seconds) the test moves."""

    def __init__(self) -> None:
        self.mono = 50.0
        self.wall_s = NOW_MS / 1000

    def clock(self) -> float:
        return self.mono

    def wall(self) -> float:
        return self.wall_s


def a_cap(clocks: Clocks, base: int = 0, max_lead_ms: int = 100, restart: int | None = None) -> LeadCap:
    return LeadCap(LAYOUT, clocks.clock, clocks.wall, base, max_lead_ms, restart)


def slot(units: int) -> int:
    return units << SB


def test_the_cap_counts_from_real_time_and_remembers_what_is_within_it() -> None:
    clocks = Clocks()
    cap = a_cap(clocks)
    assert cap.excess(slot(1_000_100)) == 0  # exactly the cap ahead: allowed
    assert cap.excess(slot(1_000_101)) == 1
    assert cap.ok == slot(1_000_101)  # below this nothing can pass the cap until the clocks move
    assert cap.span == slot(101)


def test_a_wall_clock_set_back_is_not_believed() -> None:
    clocks = Clocks()
    cap = a_cap(clocks)
    cap.excess(0)  # a steady reading at the wall clock
    clocks.wall_s -= 3600  # set back an hour
    clocks.mono += 0.010  # while 10 ms pass
    assert cap.excess(slot(1_000_110)) == 0  # steady: 1,000,010 + 100
    assert cap.excess(slot(1_000_111)) == 1


def test_a_wall_clock_set_forwards_is_followed() -> None:
    clocks = Clocks()
    cap = a_cap(clocks)
    clocks.wall_s += 5
    assert cap.excess(slot(1_005_100)) == 0


def test_the_lead_counts_from_the_base_while_real_time_is_behind_it() -> None:
    clocks = Clocks()
    cap = a_cap(clocks, base=1_002_000)  # a floor raised by SET, two seconds ahead
    assert cap.excess(slot(1_002_100)) == 0
    assert cap.excess(slot(1_002_101)) == 1


def test_a_restart_does_not_believe_a_wall_clock_far_behind_its_bound() -> None:
    clocks = Clocks()
    base = 1_000_000 + 3_600_000  # the stored bound is an hour ahead of this node's wall clock
    cap = a_cap(clocks, base=base, restart=3000)  # a lookahead of 3000 units
    # The steady clock starts a lookahead and a lead below the bound; the lead counts from the base.
    assert cap._steady_units() == base - 3000 - 100
    fresh = a_cap(clocks, base=base, restart=None)  # a brand-new sequence: the wall clock is believed
    assert fresh._steady_units() == 1_000_000


def test_no_cap_means_no_excess_and_any_size() -> None:
    clocks = Clocks()
    cap = a_cap(clocks, max_lead_ms=0)
    assert cap.excess(LAYOUT.slot_top - 1) == 0
    assert cap.span == LAYOUT.slot_top
    cap.check_size(10**12, "k")


def test_setting_the_cap_again_forgets_what_was_within_it() -> None:
    clocks = Clocks()
    cap = a_cap(clocks)
    cap.excess(0)
    assert cap.ok
    cap.set(50)
    assert (cap.max_lead_ms, cap.ok, cap.span) == (50, 0, slot(51))


def test_a_request_larger_than_the_cap_could_ever_allow_is_refused_with_redis_style_text() -> None:
    cap = a_cap(Clocks())
    cap.check_size(slot(101), "k")  # the whole cap: allowed
    with pytest.raises(CommandError) as caught:
        cap.check_size(slot(101) + 1, "k")
    assert str(caught.value) == errors.LEAD_CAP_TOO_LARGE.format(slot(101) + 1, "k", 100, slot(101))


def test_admit_waits_when_real_time_can_catch_up_before_the_deadline() -> None:
    clocks = Clocks()
    cap = a_cap(clocks)
    assert cap.admit(20, deadline=clocks.mono + 0.5, name="k") == pytest.approx(0.020)
    with pytest.raises(CommandError) as caught:
        cap.admit(600, deadline=clocks.mono + 0.5, name="k")
    assert str(caught.value) == errors.TRYAGAIN_LEAD_CAP.format("k", 100)
    assert (cap.waits, cap.refusals) == (1, 1)


POLICY = BatchPolicy(interval=1.0, watermark=0.5)


def test_the_lookahead_starts_at_its_units() -> None:
    ahead = Lookahead(3000, 0.5)
    assert (ahead.ahead, ahead.low) == (3000, 1500)
    assert ahead.target(1_000_000, 10.0, POLICY, retrying=False) == 1_003_000


def test_a_burst_stretches_the_lookahead_to_one_interval_of_its_pace() -> None:
    ahead = Lookahead(3000, 0.5)
    ahead.target(1_000_000, 10.0, POLICY, retrying=False)
    # 8000 units spent in 0.5 s: 16000 per interval
    assert ahead.target(1_008_000, 10.5, POLICY, retrying=False) == 1_008_000 + 16_000
    assert (ahead.ahead, ahead.low) == (16_000, 8000)
    # a pace beyond MAX_STRETCH lookaheads is capped; a slow pace falls back to the lookahead
    ahead.target(1_008_000 + 10**9, 11.0, POLICY, retrying=False)
    assert ahead.ahead == 3000 * MAX_STRETCH
    ahead.target(1_008_000 + 10**9, 12.0, POLICY, retrying=False)
    assert ahead.ahead == 3000


def test_no_stretch_while_retrying_after_a_failed_write() -> None:
    ahead = Lookahead(3000, 0.5)
    ahead.target(1_000_000, 10.0, POLICY, retrying=False)
    assert ahead.target(1_100_000, 10.1, POLICY, retrying=True) == 1_103_000


def test_a_new_watermark_applies_to_the_current_distance() -> None:
    ahead = Lookahead(3000, 0.5)
    ahead.set_watermark(0.25)
    assert ahead.low == 750
