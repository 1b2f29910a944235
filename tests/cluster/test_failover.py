"""Planned switchover (``FAILOVER``, ``march.cluster.failover``) on the in-process cluster: to the
first standby or a named one, requests held meanwhile and then sent (MOVED) to the new primary,
the errors a client can get (not the primary, unknown target, one already running), ABORT, and a
target that never takes over (TIMEOUT). Deterministic: fake etcd, manual clock, no sleep.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from march_harness.sim import TTL, Sim, SimFactory, SimNode, sims

from march import errors
from march.cluster.slots import key_slot
from march.errors import CommandError
from march.keyspace.serving import Cause, Phase

STEP = 0.05


@pytest.fixture
async def make_sim() -> AsyncIterator[SimFactory]:
    async with sims() as make:
        yield make


def start_failover(node: SimNode, target: str | None = None, timeout: float = 5.0) -> asyncio.Task[None]:
    return asyncio.ensure_future(node.member.failover.run(target, timeout))


async def finished(sim: Sim, task: asyncio.Task[None], within: float) -> None:
    """Advance the clock until ``task`` is done (its exception, if any, is raised)."""
    await sim.until(task.done, "the FAILOVER ends", within, step=0.005)
    await task


def moved(node: SimNode, key: bytes) -> str:
    return f"MOVED {key_slot(key)} {node.addr}"


@pytest.mark.parametrize("named", [False, True], ids=["first-standby", "named-target"])
async def test_failover_hands_over_and_held_requests_are_sent_to_the_new_primary(
    make_sim: SimFactory, named: bool
) -> None:
    sim = await make_sim(3)
    p = sim.primary
    standbys = sorted((n for n in sim.nodes if n is not p), key=lambda n: n.name)
    target = standbys[1] if named else standbys[0]  # without TO: the first standby (by node id)
    other = standbys[0] if named else standbys[1]
    first = await p.incr(b"k")
    target.clients["control"].delay = 0.1  # its campaign takes clock time: the hand-over can be watched
    task = start_failover(p, target.addr if named else None)
    await sim.clock.settle()
    assert p.state.phase is Phase.STEPPING_DOWN and not task.done()
    held = [asyncio.ensure_future(p.request(key)) for key in (b"k", b"foo")]
    await sim.clock.settle()
    assert not any(r.done() for r in held)  # held, not refused, while the hand-over runs
    await finished(sim, task, 2.0)
    assert sim.serving() == [target]
    assert [c.cause for _, c in p.changes[-2:]] == [Cause.HANDING_OVER, Cause.HANDED_OVER]
    replies = await asyncio.gather(*held)
    assert [r.message if isinstance(r, CommandError) else r for r in replies] == [
        moved(target, b"k"),
        moved(target, b"foo"),
    ]
    assert p.group.redirect(b"k").message == moved(target, b"k")
    assert await target.incr(b"k") > first
    assert sim.etcd.peek(sim.keys.handoff) is None  # the hand-off key is cleaned up
    await sim.advance(2 * TTL)  # the other standby never competed, the old primary stays down
    assert sim.serving() == [target] and not other.changes and p.state.phase is Phase.STANDBY
    assert sim.overlaps == []


async def test_failover_on_a_standby_is_refused(make_sim: SimFactory) -> None:
    sim = await make_sim(3)
    p = sim.primary
    standby = next(n for n in sim.nodes if n is not p)
    with pytest.raises(CommandError) as refused:
        await standby.member.failover.run(None, 5.0)
    assert refused.value.message == errors.FAILOVER_NOT_PRIMARY
    assert sim.serving() == [p]


async def test_failover_to_an_unknown_target_is_refused_and_changes_nothing(make_sim: SimFactory) -> None:
    sim = await make_sim(3)
    p = sim.primary
    for target in ("127.0.0.1:9999", p.addr):  # not a node at all; the primary itself
        with pytest.raises(CommandError) as refused:
            await p.member.failover.run(target, 5.0)
        assert refused.value.message == errors.FAILOVER_TARGET_UNKNOWN
    assert sim.serving() == [p] and [c.cause for _, c in p.changes] == [Cause.ELECTED, Cause.READY]
    assert await p.incr(b"k") == 1


async def test_a_second_failover_while_one_runs_is_refused(make_sim: SimFactory) -> None:
    sim = await make_sim(3)
    p = sim.primary
    for n in sim.nodes:
        if n is not p:  # the target's campaign takes clock time: the second FAILOVER comes during the first
            n.clients["control"].delay = 0.1
    task = start_failover(p)
    await sim.clock.settle()
    assert p.member.failover.active is not None
    with pytest.raises(CommandError) as refused:
        await p.member.failover.run(None, 5.0)
    assert refused.value.message == errors.FAILOVER_IN_PROGRESS
    await finished(sim, task, 2.0)  # the first one completes regardless
    assert len(sim.serving()) == 1 and not p.serving


async def test_abort_before_the_hand_over_serves_again_in_the_same_term(make_sim: SimFactory) -> None:
    sim = await make_sim(3)
    p = sim.primary
    first = await p.incr(b"k")
    term, held_key = p.state.term, sim.leader_key()
    p.clients["data"].delay = 0.8  # a ceiling write in flight takes 0.8 s: the drain waits for it
    writing = asyncio.ensure_future(p.try_incr(b"k", 5000))
    await sim.clock.settle()
    assert p.keyspace.get(b"k").write is not None  # type: ignore[union-attr]
    task = start_failover(p)
    await sim.clock.settle()
    assert p.state.phase is Phase.STEPPING_DOWN and not task.done()  # draining
    held = asyncio.ensure_future(p.request(b"k"))
    p.member.failover.abort()
    with pytest.raises(CommandError) as aborted:
        await finished(sim, task, 2.0)
    assert aborted.value.message == errors.FAILOVER_ABORTED
    assert sim.serving() == [p] and p.state.term is term  # serving again, same term
    assert p.changes[-1][1].cause is Cause.ABORTED
    assert sim.leader_key() == held_key and sim.etcd.peek(sim.keys.handoff) is None
    assert await writing is None  # refused while on hold (it got no ID)
    got = await held  # the held request is served once the hold ends
    assert isinstance(got, int) and got > first
    p.clients["data"].delay = 0.0
    assert await p.incr(b"k") > got
    with pytest.raises(CommandError) as none:
        p.member.failover.abort()
    assert none.value.message == errors.FAILOVER_NONE
    await sim.advance(2 * TTL)
    assert sim.serving() == [p] and sim.overlaps == []


async def test_a_target_that_never_takes_over_times_out_and_the_cluster_recovers(make_sim: SimFactory) -> None:
    sim = await make_sim(3)
    p = sim.primary
    target = sorted((n for n in sim.nodes if n is not p), key=lambda n: n.name)[0]
    first = await p.incr(b"k")
    guard = p.state.guard
    target.cut()  # still registered (until its lease runs out), but it cannot take over
    task = start_failover(p, target.addr, timeout=1.0)
    started = sim.clock.now()
    with pytest.raises(CommandError) as timed_out:
        await finished(sim, task, 2.0)
    assert timed_out.value.message == errors.FAILOVER_TIMEOUT.format(target.addr)
    assert sim.clock.now() - started == pytest.approx(1.0, abs=0.02)
    # the old primary's term ended at the timeout (it handed the key away); then anyone may campaign
    handed = [(at, c.previous) for at, c in p.changes if c.cause is Cause.HANDED_OVER]
    assert handed == [(pytest.approx(started + 1.0, abs=0.02), Phase.STEPPING_DOWN)]
    assert sim.etcd.peek(sim.keys.handoff) is None
    await sim.until(lambda: len(sim.serving()) == 1, "someone serves again", 2 * TTL)
    new = sim.primary
    assert new is not target and new.state.term is not None
    assert new.state.guard.revision > guard.revision
    assert await new.incr(b"k") > first
    assert sim.overlaps == []


async def test_a_second_failover_to_the_same_node_gets_its_head_start_too(make_sim: SimFactory) -> None:
    sim = await make_sim(3)
    p = sim.primary
    a, b = sorted((n for n in sim.nodes if n is not p), key=lambda n: n.name)
    a.clients["control"].delay = 0.1  # a is a little slow to take over: b sees the hand-off to a
    await finished(sim, start_failover(p, a.addr), 2.0)
    a.clients["control"].delay = 0.0
    b.clients["control"].hang = True  # b does not see the hand-back
    await finished(sim, start_failover(a, p.addr), 2.0)
    b.heal()
    await sim.advance(TTL + 1)  # b saw that hand-off to a more than a TTL ago
    assert sim.serving() == [p]
    a.clients["control"].delay = 0.5  # a is slow to campaign: b must still leave it its TTL
    task = start_failover(p, a.addr)
    await finished(sim, task, 3.0)
    assert sim.serving() == [a] and not any(c.phase is Phase.PROMOTING for _, c in b.changes)
    assert sim.overlaps == []
