"""The lease and the local deadline it gives (README "Lease deadline", ``march.cluster.lease``), on
the in-process cluster (``march_harness.sim``: real nodes, a fake etcd, a manual clock).

What must hold: the deadline counts from the moment a keep-alive was *sent*, not from its reply;
once it passes, not one ID is handed out, whether or not the deadline timer has fired yet;
keep-alives that fail for longer than the deadline make the primary step down before etcd can
expire its lease; a lease that etcd dropped means a new lease and a new term; and a keep-alive
that lands while the node still holds its leader key makes it serve again at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from march_harness.sim import TTL, Sim, SimFactory, SimNode, sims

from march.generators.bound import NotServing
from march.keyspace.serving import Cause, Phase

MARGIN = max(0.2, TTL / 6)  # what the README promises: the deadline ends this long before etcd's expiry
PERIOD = TTL / 3  # keep-alive period
TICK = TTL / 2  # the election's control loop looks at least this often
STEP = 0.05  # sim.until's step


@pytest.fixture
async def make_sim() -> AsyncIterator[SimFactory]:
    async with sims() as make:
        yield make


async def after_a_keep_alive(sim: Sim, node: SimNode) -> float:
    """Advance until ``node``'s next keep-alive was acknowledged; the clock time it was sent."""
    before = node.member.lease.deadline
    await sim.until(lambda: node.member.lease.deadline > before, "a keep-alive acknowledged", 2 * PERIOD)
    return node.member.lease.deadline - (TTL - MARGIN)


def causes(node: SimNode) -> list[tuple[float, Cause]]:
    return [(at, change.cause) for at, change in node.changes]


def changes(node: SimNode, cause: Cause) -> list[float]:
    """Clock times of ``node``'s changes with ``cause``."""
    return [at for at, change in node.changes if change.cause is cause]


async def test_the_margin_is_what_the_readme_says(make_sim: SimFactory) -> None:
    sim = await make_sim(1)
    lease = sim.primary.member.lease
    assert lease.margin == pytest.approx(MARGIN) and lease.ttl == TTL


async def test_the_deadline_counts_from_the_send_time_of_the_keep_alive(
    make_sim: SimFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim = await make_sim(1)
    p = sim.primary
    client = p.clients["lease"]
    client.delay = 0.3  # each keep-alive's reply comes back 0.3 s of clock time after it was sent
    real = client.keep_alive
    trips: list[tuple[float, float]] = []

    async def timed(lease: int, timeout: float) -> int:
        sent = sim.clock.now()
        granted = await real(lease, timeout)
        trips.append((sent, sim.clock.now()))
        return granted

    monkeypatch.setattr(client, "keep_alive", timed)
    await sim.until(lambda: len(trips) >= 3, "three slow keep-alives", 4 * PERIOD)
    sent, answered = trips[-1]
    assert answered - sent == pytest.approx(0.3)
    assert p.member.lease.deadline == pytest.approx(sent + TTL - MARGIN)
    assert p.state.deadline == pytest.approx(sent + TTL - MARGIN)  # what the serving state goes by
    assert p.state.deadline < answered + TTL - MARGIN - 0.25  # not counted from the reply
    # and it ends before etcd can expire the lease (etcd renewed it when the request arrived)
    assert p.state.deadline < answered + TTL


async def test_no_id_once_the_deadline_passed_even_before_the_timer_fires(make_sim: SimFactory) -> None:
    sim = await make_sim(1)
    p = sim.primary
    keys = [b"a", b"b", b"c"]
    gens = []
    for key in keys:
        assert await p.incr(key) == 1
        gens.append(p.keyspace.get(key))
    p.clients["lease"].hang = True  # no keep-alive lands any more
    await sim.advance(p.state.deadline - sim.clock.now() - 0.01)
    assert all(gen is not None and gen.take(1) == 2 for gen in gens)  # still valid: 10 ms left
    sim.jump(0.02)  # past the deadline, with no timer fired and no loop turn run
    assert p.state.phase is Phase.SERVING  # the state machine has not heard of it yet...
    assert not p.state.valid()
    for key, gen in zip(keys, gens, strict=True):
        assert gen is not None
        assert gen.take(1) is None  # ...but the fast path hands out nothing
        assert gen.take_run(1) is None
        with pytest.raises(NotServing):
            await gen.take_wait(1)
        assert await p.try_incr(key) is None
    await sim.clock.advance(0)  # the overdue timer fires
    assert p.state.phase is Phase.STANDBY
    assert changes(p, Cause.DEADLINE) == [sim.clock.now()]


async def test_failing_keep_alives_step_down_at_the_deadline_before_etcd_expires_the_lease(
    make_sim: SimFactory,
) -> None:
    sim = await make_sim(3)
    p = sim.primary
    sent = await after_a_keep_alive(sim, p)
    held = sim.leader_key()
    p.clients["lease"].unreachable = True  # keep-alives fail; the election and the data link still work
    last_valid = sim.clock.now()
    while not any(n.serving for n in sim.nodes if n is not p):
        if p.state.valid():
            last_valid = sim.clock.now()
        await sim.advance(STEP)
        assert sim.clock.now() - sent < 2 * TTL, "nobody took over"
    stepped_down = changes(p, Cause.DEADLINE)
    assert stepped_down == [pytest.approx(sent + TTL - MARGIN)]
    assert last_valid < sent + TTL - MARGIN
    new = sim.primary
    elected = changes(new, Cause.ELECTED)[-1]
    assert elected >= sent + TTL  # only once etcd expired the old lease
    assert stepped_down[0] < elected
    assert sim.leader_key() != held and sim.leader_key() == (new.name, new.state.guard.revision)


async def test_a_lease_etcd_drops_means_a_step_down_and_a_new_term(make_sim: SimFactory) -> None:
    sim = await make_sim(1)
    p = sim.primary
    first = await p.incr(b"k")
    gen = p.keyspace.get(b"k")
    old_term, old_lease = p.state.term, p.member.lease.id
    assert old_term is not None and gen is not None
    sim.etcd.revoke(old_lease)  # etcd drops the lease, and the leader key with it
    await sim.clock.advance(0)
    assert p.state.phase is Phase.STANDBY  # at once: the watch saw the leader key go
    assert gen.take(1) is None
    await sim.until(lambda: p.serving, "serving again", TTL)
    term = p.state.term
    assert term is not None and term is not old_term and old_term.ended
    assert p.member.lease.id != old_lease and sim.etcd.has_lease(p.member.lease.id)
    assert term.guard.revision > old_term.guard.revision
    assert sim.leader_key() == (p.name, term.guard.revision)
    assert gen.take(1) is None  # the old term's generator stays dead
    assert await p.incr(b"k") > first


async def test_a_lease_gone_in_etcd_is_noticed_by_the_keep_alive_alone(make_sim: SimFactory) -> None:
    sim = await make_sim(1)
    p = sim.primary
    sent = await after_a_keep_alive(sim, p)
    old_lease, deadline = p.member.lease.id, p.state.deadline
    p.clients["control"].hang = True  # no watch event, no topology read: only the keep-alive can tell
    sim.etcd.revoke(old_lease)
    await sim.advance(0.1)
    assert p.serving  # the deadline is still ahead and nobody told it
    await sim.until(lambda: not p.serving, "the keep-alive finds the lease gone", PERIOD)
    assert changes(p, Cause.LEASE_GONE) == [pytest.approx(sent + PERIOD)]  # the next keep-alive
    assert sent + PERIOD < deadline  # well before the deadline would have ended the term
    p.clients["control"].hang = False
    await sim.until(lambda: p.serving, "a new lease and a new term", 2 * TTL)
    assert p.member.lease.id != old_lease


async def test_a_keep_alive_that_lands_while_the_leader_key_is_held_serves_again_at_once(
    make_sim: SimFactory,
) -> None:
    sim = await make_sim(3)
    p = sim.primary
    first = await p.incr(b"k")
    held = sim.leader_key()
    sent = await after_a_keep_alive(sim, p)
    lease = p.clients["lease"]
    # A slow link: each keep-alive takes 1.6 s, longer than its timeout (TTL/3). The node gives up
    # on each and steps down at its deadline, while etcd applies each late and keeps the lease.
    lease.delay = 1.6
    await sim.advance(sent + 2.8 - sim.clock.now())
    assert changes(p, Cause.DEADLINE) == [pytest.approx(sent + TTL - MARGIN)]
    assert not p.serving and sim.leader_key() == held
    lease.delay = 0.3  # the link recovers: the next keep-alive (sent at sent + 3 s) lands 0.3 s later
    landed: list[float] = []
    p.member.lease.on_renewed(lambda deadline: landed.append(sim.clock.now()))
    await sim.until(lambda: bool(landed), "a keep-alive lands", 2 * PERIOD)
    assert landed[0] == pytest.approx(sent + 3 + 0.3)
    # In the very step the keep-alive landed, it serves again: the renewal woke the election,
    # which did not wait for its next tick (TTL/2 after its last look, at the step-down).
    assert p.serving
    assert changes(p, Cause.RESUMED) == [landed[0]]
    assert landed[0] < sent + TTL - MARGIN + TICK
    assert sim.leader_key() == held  # the same leader key, in a new term
    assert held is not None and p.state.guard.revision == held[1]
    assert [n for n in sim.nodes if n.serving] == [p]
    assert await p.incr(b"k") > first


async def test_a_link_healed_between_the_deadline_and_etcds_expiry_resumes_the_leader_key(
    make_sim: SimFactory,
) -> None:
    sim = await make_sim(3)
    p = sim.primary
    held = sim.leader_key()
    sent = await after_a_keep_alive(sim, p)
    p.cut()
    await sim.advance(sent + 2.6 - sim.clock.now())  # past the local deadline (sent + 2.5 s)
    assert not p.serving
    p.heal()
    # etcd still holds the lease and the leader key until sent + TTL: a keep-alive retried soon after
    # the heal (not a whole period after the last failure, which falls on etcd's expiry) keeps them
    took = await sim.until(lambda: p.serving, "serving again before etcd's expiry", TTL - 2.6 - STEP)
    assert sim.clock.now() < sent + TTL
    assert took <= PERIOD / 3 + STEP  # the keep-alive is retried soon after a failure
    assert [c for _, c in causes(p) if c in (Cause.DEADLINE, Cause.RESUMED)] == [Cause.DEADLINE, Cause.RESUMED]
    assert sim.leader_key() == held and sim.serving() == [p] and sim.overlaps == []
