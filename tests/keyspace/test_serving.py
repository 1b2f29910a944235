"""The serving state alone (``march.keyspace.serving``), on a ``ManualClock``: its phases and transitions,
its terms as the generators' lease, the deadline and its timer, listeners, ``settled`` and the
single-node mode. No etcd, no node: the state is driven by hand as the lease, the election and
FAILOVER drive it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import pytest
from march_harness.manual_clock import ManualClock

from march.keyspace.serving import Cause, Change, Phase, ServingState, Term
from march.store.contract import NO_GUARD, SINGLE_NODE, Guard

GUARD = Guard(b"n1", 7)
TTL = 2.5  # seconds of deadline each renewal gives in these tests


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def state(clock: ManualClock) -> ServingState:
    return ServingState(clock, "test")


def jump(clock: ManualClock, seconds: float) -> None:
    """Move the clock with no timer fired and no loop turn run (a late timer, a busy loop)."""
    clock._now += seconds


def serving_term(state: ServingState, guard: Guard = GUARD) -> Term:
    """A served term whose deadline is TTL ahead (as after a keep-alive and a won election)."""
    state.renewed(state.clock.now() + TTL)
    term = state.promote(guard)
    state.serve()
    return term


def recorder(state: ServingState) -> list[Change]:
    changes: list[Change] = []
    state.subscribe(changes.append)
    return changes


def steps(changes: list[Change]) -> list[tuple[Phase, Phase, Cause]]:
    return [(c.previous, c.phase, c.cause) for c in changes]


# --- transitions ------------------------------------------------------------------------------


async def test_a_new_state_is_a_standby_with_no_term(state: ServingState) -> None:
    assert state.phase is Phase.STANDBY
    assert state.term is None and not state.leading and not state.serving and not state.in_transition
    assert not state.valid()
    assert state.guard == NO_GUARD
    assert state.deadline == -math.inf and state.remaining() == 0


async def test_promote_serve_hold_and_serve_again_are_the_legal_path(state: ServingState) -> None:
    state.renewed(state.clock.now() + TTL)
    term = state.promote(GUARD)
    assert state.phase is Phase.PROMOTING and state.term is term and state.guard == GUARD
    assert state.leading and state.in_transition and not state.serving
    state.serve()
    assert state.phase is Phase.SERVING and state.serving and not state.in_transition and state.valid()
    state.hold()
    assert state.phase is Phase.STEPPING_DOWN and state.in_transition and state.term is term
    state.serve(Cause.ABORTED)  # a FAILOVER aborted: the same term serves again
    assert state.phase is Phase.SERVING and state.term is term and state.valid()
    assert state.promotions == 1  # serving again after a hold is not a promotion


@pytest.mark.parametrize(
    "reach",
    [
        pytest.param(lambda s: s.promote(GUARD), id="from-promoting"),
        pytest.param(lambda s: (s.promote(GUARD), s.serve()), id="from-serving"),
        pytest.param(lambda s: (s.promote(GUARD), s.serve(), s.hold()), id="from-stepping-down"),
    ],
)
async def test_step_down_ends_the_term_from_any_phase(
    state: ServingState, reach: Callable[[ServingState], object]
) -> None:
    state.renewed(state.clock.now() + TTL)
    reach(state)
    term = state.term
    assert term is not None and not term.ended
    state.step_down(Cause.SUPERSEDED, "leader key: n2 @ 9")
    assert state.phase is Phase.STANDBY and state.term is None and not state.leading
    assert state.guard == NO_GUARD and not state.valid() and not term.valid()
    assert term.ended == f"{Cause.SUPERSEDED.value}: leader key: n2 @ 9"


async def test_step_down_of_a_standby_changes_nothing(state: ServingState) -> None:
    changes = recorder(state)
    state.step_down(Cause.DEADLINE)
    assert state.phase is Phase.STANDBY and changes == [] and state.demotions == 0


async def test_promotions_and_demotions_are_counted(state: ServingState) -> None:
    state.renewed(state.clock.now() + TTL)
    state.promote(GUARD)
    state.step_down(Cause.FAILED)  # a promotion that never served is no demotion
    assert (state.promotions, state.demotions) == (0, 0)
    state.promote(GUARD)
    state.serve()
    state.step_down(Cause.REFUSED)
    assert (state.promotions, state.demotions) == (1, 1)


@pytest.mark.parametrize(
    ("reach", "illegal"),
    [
        pytest.param(lambda s: None, lambda s: s.serve(), id="serve-from-standby"),
        pytest.param(lambda s: None, lambda s: s.hold(), id="hold-from-standby"),
        pytest.param(lambda s: s.promote(GUARD), lambda s: s.promote(GUARD), id="promote-from-promoting"),
        pytest.param(lambda s: s.promote(GUARD), lambda s: s.hold(), id="hold-from-promoting"),
        pytest.param(lambda s: (s.promote(GUARD), s.serve()), lambda s: s.promote(GUARD), id="promote-from-serving"),
        pytest.param(lambda s: (s.promote(GUARD), s.serve()), lambda s: s.serve(), id="serve-from-serving"),
        pytest.param(
            lambda s: (s.promote(GUARD), s.serve(), s.hold()), lambda s: s.promote(GUARD), id="promote-from-stepping"
        ),
        pytest.param(lambda s: (s.promote(GUARD), s.serve(), s.hold()), lambda s: s.hold(), id="hold-from-stepping"),
    ],
)
async def test_an_illegal_transition_raises_and_changes_nothing(
    state: ServingState, reach: Callable[[ServingState], object], illegal: Callable[[ServingState], object]
) -> None:
    state.renewed(state.clock.now() + TTL)
    reach(state)
    before = (state.phase, state.term, state.valid())
    changes = recorder(state)
    with pytest.raises(RuntimeError):
        illegal(state)
    assert (state.phase, state.term, state.valid()) == before
    assert changes == []


async def test_each_promotion_is_a_new_term(state: ServingState) -> None:
    first = serving_term(state)
    state.step_down(Cause.DEADLINE)
    second = serving_term(state, Guard(b"n1", 12))
    assert second is not first and second.number == first.number + 1
    assert second.guard == Guard(b"n1", 12) and state.guard == second.guard


# --- a term as the generators' lease -----------------------------------------------------------


async def test_a_term_is_not_valid_before_it_serves(state: ServingState) -> None:
    state.renewed(state.clock.now() + TTL)
    term = state.promote(GUARD)
    assert not term.valid() and not state.valid()
    state.serve()
    assert term.valid() and state.valid()


async def test_a_term_is_not_valid_while_a_failover_holds_it(state: ServingState) -> None:
    term = serving_term(state)
    state.hold()
    assert not term.valid() and not state.valid()
    state.serve(Cause.ABORTED)
    assert term.valid()


async def test_a_term_is_not_valid_once_the_deadline_passed_even_before_the_timer_fires(
    state: ServingState, clock: ManualClock
) -> None:
    term = serving_term(state)
    jump(clock, TTL - 0.001)
    assert term.valid()
    jump(clock, 0.001)  # exactly at the deadline, in the same loop turn: no timer has run
    assert state.phase is Phase.SERVING  # the state has not heard of it yet...
    assert not term.valid() and not state.valid()  # ...but nothing is handed out
    await clock.advance(0)  # the overdue timer fires now
    assert state.phase is Phase.STANDBY and term.ended


async def test_an_ended_term_is_never_valid_again_even_when_a_new_term_serves(
    state: ServingState, clock: ManualClock
) -> None:
    old = serving_term(state)
    state.step_down(Cause.SUPERSEDED)
    new = serving_term(state)
    state.renewed(clock.now() + 100)
    assert new.valid() and not old.valid()
    state.hold()
    state.serve(Cause.ABORTED)
    assert new.valid() and not old.valid()
    assert old.ended == Cause.SUPERSEDED.value and new.ended == ""


async def test_lost_steps_down_a_current_term(state: ServingState) -> None:
    term = serving_term(state)
    changes = recorder(state)
    term.lost("guarded write of b'k' refused")
    assert state.phase is Phase.STANDBY and not term.valid()
    assert steps(changes) == [(Phase.SERVING, Phase.STANDBY, Cause.REFUSED)]
    assert changes[0].term is term and changes[0].detail == "guarded write of b'k' refused"


async def test_lost_from_an_ended_term_changes_nothing(state: ServingState) -> None:
    old = serving_term(state)
    state.step_down(Cause.DEADLINE)
    new = serving_term(state)
    changes = recorder(state)
    old.lost("a late refusal of a write of the old term")
    assert state.phase is Phase.SERVING and state.term is new and new.valid()
    assert changes == []
    assert old.ended == Cause.DEADLINE.value  # its first reason stays


async def test_lost_during_a_failover_hold_ends_the_term(state: ServingState) -> None:
    term = serving_term(state)
    state.hold()
    term.lost("refused")
    assert state.phase is Phase.STANDBY and term.ended


# --- the deadline and its timer ----------------------------------------------------------------


async def test_the_deadline_only_moves_forward(state: ServingState, clock: ManualClock) -> None:
    serving_term(state)
    deadline = state.deadline
    state.renewed(deadline - 1)  # a renewal that was sent earlier but answered later
    assert state.deadline == deadline
    state.renewed(deadline + 1)
    assert state.deadline == deadline + 1
    await clock.advance(TTL + 0.5)  # past the first deadline: the timer was moved with it
    assert state.phase is Phase.SERVING
    await clock.advance(0.5)
    assert state.phase is Phase.STANDBY


async def test_the_timer_steps_down_at_the_deadline(state: ServingState, clock: ManualClock) -> None:
    term = serving_term(state)
    changes = recorder(state)
    await clock.advance(TTL - 0.01)
    assert state.phase is Phase.SERVING and term.valid()
    await clock.advance(0.01)
    assert state.phase is Phase.STANDBY and term.ended
    assert steps(changes) == [(Phase.SERVING, Phase.STANDBY, Cause.DEADLINE)]


async def test_a_deadline_renewed_before_the_promotion_arms_the_timer(state: ServingState, clock: ManualClock) -> None:
    state.renewed(clock.now() + TTL)  # the lease is granted before the election is won
    await clock.advance(1)
    state.promote(GUARD)
    state.serve()
    await clock.advance(TTL - 1)
    assert state.phase is Phase.STANDBY


async def test_a_promotion_with_no_deadline_cannot_serve_for_long(state: ServingState, clock: ManualClock) -> None:
    term = state.promote(GUARD)  # no keep-alive ever acknowledged
    state.serve()
    assert not term.valid()
    await clock.advance(0)
    assert state.phase is Phase.STANDBY


async def test_a_timer_fired_early_looks_again(state: ServingState, clock: ManualClock) -> None:
    serving_term(state)
    await clock.advance(1)
    armed = state._timer
    assert armed is not None
    armed.cancel()  # the loop consumes the timer...
    state._check_deadline()  # ...and runs it 1.5 s early
    assert state.phase is Phase.SERVING and state.valid()
    assert state._timer is not None and state._timer is not armed  # armed again
    await clock.advance(TTL - 1 - 0.01)
    assert state.phase is Phase.SERVING
    await clock.advance(0.02)  # only the timer it armed again can step down now
    assert state.phase is Phase.STANDBY


async def test_the_timer_of_an_ended_term_does_nothing_to_the_next(state: ServingState, clock: ManualClock) -> None:
    serving_term(state)
    state.step_down(Cause.SUPERSEDED)
    assert state._timer is None
    state.renewed(clock.now() + 2 * TTL)
    term = state.promote(GUARD)
    state.serve()
    await clock.advance(TTL + 0.1)  # the first term's deadline passes
    assert state.phase is Phase.SERVING and term.valid()


async def test_lease_gone_steps_down_and_forgets_the_deadline(state: ServingState, clock: ManualClock) -> None:
    term = serving_term(state)
    changes = recorder(state)
    state.lease_gone("lease 7e57 expired")
    assert state.phase is Phase.STANDBY and term.ended
    assert steps(changes) == [(Phase.SERVING, Phase.STANDBY, Cause.LEASE_GONE)]
    assert state.deadline == -math.inf  # a new lease starts afresh: the old deadline is not its
    new = state.promote(GUARD)
    state.serve()
    assert not new.valid()
    state.renewed(clock.now() + 1)
    assert new.valid()


# --- listeners ----------------------------------------------------------------------------------


async def test_listeners_see_every_change_in_order_with_its_cause(state: ServingState) -> None:
    changes = recorder(state)
    seen_phase: list[Phase] = []
    state.subscribe(lambda change: seen_phase.append(state.phase))  # called after the phase moved
    state.renewed(state.clock.now() + TTL)
    first = state.promote(GUARD, Cause.ELECTED)
    state.serve(Cause.READY)
    state.hold(Cause.HANDING_OVER)
    state.serve(Cause.ABORTED)
    state.hold(Cause.HANDING_OVER)
    state.step_down(Cause.HANDED_OVER, "to n2")
    second = state.promote(GUARD, Cause.RESUMED)
    state.step_down(Cause.FAILED)
    assert steps(changes) == [
        (Phase.STANDBY, Phase.PROMOTING, Cause.ELECTED),
        (Phase.PROMOTING, Phase.SERVING, Cause.READY),
        (Phase.SERVING, Phase.STEPPING_DOWN, Cause.HANDING_OVER),
        (Phase.STEPPING_DOWN, Phase.SERVING, Cause.ABORTED),
        (Phase.SERVING, Phase.STEPPING_DOWN, Cause.HANDING_OVER),
        (Phase.STEPPING_DOWN, Phase.STANDBY, Cause.HANDED_OVER),
        (Phase.STANDBY, Phase.PROMOTING, Cause.RESUMED),
        (Phase.PROMOTING, Phase.STANDBY, Cause.FAILED),
    ]
    assert [c.term for c in changes] == [first] * 6 + [second] * 2  # a step-down names the term that ended
    assert changes[5].detail == "to n2"
    assert seen_phase == [c.phase for c in changes]


async def test_a_failing_listener_does_not_stop_the_others(state: ServingState) -> None:
    def broken(change: Change) -> None:
        raise ValueError("broken listener")

    state.subscribe(broken)
    changes = recorder(state)
    serving_term(state)
    assert state.phase is Phase.SERVING
    assert [c.phase for c in changes] == [Phase.PROMOTING, Phase.SERVING]


# --- settled ------------------------------------------------------------------------------------


async def test_settled_returns_at_once_outside_a_transition(state: ServingState) -> None:
    await asyncio.wait_for(state.settled(5), 1)  # standby
    serving_term(state)
    await asyncio.wait_for(state.settled(5), 1)  # serving


async def test_settled_returns_when_the_promotion_ends(state: ServingState, clock: ManualClock) -> None:
    state.renewed(clock.now() + 10)
    state.promote(GUARD)
    waiting = asyncio.ensure_future(state.settled(5))
    await clock.advance(4)
    assert not waiting.done()
    state.serve()
    await clock.settle()
    assert waiting.done()
    await waiting


async def test_settled_returns_when_a_hold_ends_either_way(state: ServingState, clock: ManualClock) -> None:
    serving_term(state)
    state.renewed(clock.now() + 10)
    state.hold()
    waiting = asyncio.ensure_future(state.settled(5))
    await clock.advance(1)
    assert not waiting.done()
    state.step_down(Cause.HANDED_OVER)
    await clock.settle()
    assert waiting.done() and state.phase is Phase.STANDBY
    await waiting


async def test_settled_gives_up_after_its_timeout_in_clock_time(state: ServingState, clock: ManualClock) -> None:
    state.renewed(clock.now() + 10)
    state.promote(GUARD)
    waiting = asyncio.ensure_future(state.settled(2))
    await clock.advance(1.99)
    assert not waiting.done()
    await clock.advance(0.01)
    assert waiting.done()
    await waiting
    assert state.phase is Phase.PROMOTING  # it only stopped waiting


async def test_settled_waits_through_one_transition_into_the_next(state: ServingState, clock: ManualClock) -> None:
    state.renewed(clock.now() + 10)
    state.promote(GUARD)
    waiting = asyncio.ensure_future(state.settled(3))
    await clock.advance(1)
    state.step_down(Cause.FAILED)
    state.promote(GUARD)  # promoting again: still no outcome to act on
    await clock.settle()
    assert not waiting.done()
    await clock.advance(2)  # bounded by the first call's timeout, not restarted
    assert waiting.done()
    await waiting


# --- single-node mode ---------------------------------------------------------------------------


async def test_a_single_node_serves_forever(clock: ManualClock) -> None:
    state = ServingState.forever(clock, SINGLE_NODE)
    term = state.term
    assert term is not None
    assert state.phase is Phase.SERVING and state.guard == SINGLE_NODE and term.valid()
    assert state.deadline == math.inf and state._timer is None
    await clock.advance(365 * 24 * 3600)
    assert state.phase is Phase.SERVING and term.valid()
    state.renewed(clock.now() + 1)  # nothing can bring the deadline in
    assert state.deadline == math.inf
    state.step_down(Cause.SHUTDOWN)
    assert state.phase is Phase.STANDBY and not term.valid()
