"""The election (``march.cluster.election``) and what follows from it: one primary, redirects from
the standbys, a won key whose reply was lost, a leader key that changed hands, a refused guarded
write, fencing of an old primary, and a partitioned primary replaced without a duplicate ID.

In process (``march_harness.sim``: real nodes, a fake etcd, a manual clock): deterministic, no sleep.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from march_harness.sim import TTL, SimFactory, SimNode, sims

from march import errors
from march.cluster.slots import key_slot
from march.errors import GuardFailed
from march.etcd.api import Delete, Put
from march.generators.bits import preset
from march.generators.bound import NotServing
from march.keyspace.serving import Cause, Phase

MARGIN = max(0.2, TTL / 6)
STEP = 0.05


@pytest.fixture
async def make_sim() -> AsyncIterator[SimFactory]:
    async with sims() as make:
        yield make


def causes(node: SimNode, phase: Phase) -> list[tuple[float, Cause]]:
    return [(at, c.cause) for at, c in node.changes if c.phase is phase]


def first_serve(node: SimNode, since: float = -1.0) -> float:
    return next(at for at, c in node.changes if c.phase is Phase.SERVING and at >= since)


# --- one primary, and where the others send clients --------------------------------------------


async def test_exactly_one_node_serves_and_holds_the_leader_key(make_sim: SimFactory) -> None:
    sim = await make_sim(3)
    p = sim.primary
    assert sim.leader_key() == (p.name, p.state.guard.revision)
    assert p.state.guard.owner == p.name.encode()
    for _ in range(int(3 * TTL / 0.15)):
        await sim.advance(0.15)
        assert sim.serving() == [p]
        assert all(n.state.phase is Phase.STANDBY and n.state.term is None for n in sim.nodes if n is not p)
    assert p.state.promotions == 1 and p.state.demotions == 0  # no flapping
    for n in sim.nodes:
        assert n.member.directory.topology.leader == p.name
        primary, standbys = n.member.directory.members()
        assert primary is not None and primary.addr == p.addr
        assert sorted(s.addr for s in standbys) == sorted(m.addr for m in sim.nodes if m is not p)
    assert sim.overlaps == []


async def test_standbys_redirect_with_moved_to_the_primary(make_sim: SimFactory) -> None:
    sim = await make_sim(3)
    p = sim.primary
    # slots as Redis Cluster computes them (CRC16/XMODEM mod 16384; only the hash tag counts)
    known = {b"foo": 12182, b"bar": 5061, b"hello": 866, b"{user1000}.following": key_slot(b"user1000")}
    assert key_slot(b"{user1000}.followers") == key_slot(b"{user1000}.following")
    for n in sim.nodes:
        if n is p:
            continue
        for key, slot in known.items():
            assert n.group.redirect(key).message == f"MOVED {slot} {p.addr}"
        reply = await n.request(b"foo")
        assert isinstance(reply, errors.CommandError) and reply.message == f"MOVED 12182 {p.addr}"
        assert n.keyspace.generators == {}  # a standby activates nothing
    assert await p.request(b"foo") == 1


async def test_no_primary_means_clusterdown(make_sim: SimFactory) -> None:
    sim = await make_sim(3)
    p = sim.primary
    sim.etcd.full = True  # etcd's NOSPACE alarm: no campaign can put the leader key
    sim.etcd.txn([], [Delete(sim.keys.leader)], quota=False)  # (a delete passes the quota)
    await sim.advance(2 * TTL)
    assert sim.serving() == [] and sim.leader_key() is None
    assert causes(p, Phase.STANDBY)[-1][1] is Cause.SUPERSEDED
    for n in sim.nodes:
        assert n.group.redirect(b"foo").message == errors.CLUSTERDOWN
        reply = await n.request(b"foo")
        assert isinstance(reply, errors.CommandError) and reply.message == errors.CLUSTERDOWN
        assert n.member.directory.members()[0] is None
    sim.etcd.full = False
    await sim.until(lambda: len(sim.serving()) == 1, "a primary again", TTL)
    q = sim.primary
    assert all(n.group.redirect(b"foo").message == f"MOVED 12182 {q.addr}" for n in sim.nodes if n is not q)


async def test_a_campaign_whose_reply_was_lost_is_adopted(
    make_sim: SimFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim = await make_sim(3, start=False)
    lost: list[tuple[str, tuple[str, int] | None]] = []  # (node, the leader key after its lost campaign)

    def lose_the_first_campaign_reply(node: SimNode) -> None:
        client = node.clients["control"]
        real = client.txn

        async def txn(compare: Any, success: Any, failure: Any = (), timeout: float | None = None) -> Any:
            campaign = any(isinstance(op, Put) and op.key == sim.keys.leader for op in success)
            if campaign and not lost:
                client.lose_replies = 1
                try:
                    return await real(compare, success, failure, timeout)
                finally:
                    lost.append((node.name, sim.leader_key()))
            return await real(compare, success, failure, timeout)

        monkeypatch.setattr(client, "txn", txn)

    for n in sim.nodes:
        lose_the_first_campaign_reply(n)
    await sim.start()
    assert lost, "no campaign was made"
    name, key = lost[0]
    assert key is not None and key[0] == name  # it won, and was told it failed
    revision = key[1]
    winner = sim.node(name)
    assert winner.clients["control"].lose_replies == 0  # the reply was lost indeed
    await sim.until(lambda: winner.serving, "the winner adopts its key", TTL)
    for _ in range(int(2 * TTL / STEP)):
        assert sim.serving() == [winner]
        assert sim.leader_key() == (name, revision)  # adopted, never deleted and won again
        await sim.advance(STEP)
    assert winner.state.guard.revision == revision and winner.member.election.held_revision == revision
    assert [cause for _, cause in causes(winner, Phase.PROMOTING)] == [Cause.RESUMED]  # adopted, once
    assert await winner.incr(b"k") == 1
    assert sim.overlaps == []


@pytest.mark.parametrize("how", ["value", "recreated"])
async def test_a_stolen_leader_key_steps_the_primary_down_at_once(make_sim: SimFactory, how: str) -> None:
    sim = await make_sim(3)
    p = sim.primary
    first = await p.incr(b"k")
    gen = p.keyspace.get(b"k")
    assert gen is not None and gen.take(1) == first + 1
    if how == "value":  # overwritten: same create revision, another value
        sim.etcd.txn([], [Put(sim.keys.leader, b"intruder")])
    else:  # deleted and created again by someone else: another create revision
        sim.etcd.txn([], [Delete(sim.keys.leader)])
        sim.etcd.txn([], [Put(sim.keys.leader, b"intruder")])
    await sim.clock.advance(0)  # no time passes: the watch wakes the election, which looks now
    assert p.state.phase is Phase.STANDBY
    assert causes(p, Phase.STANDBY) == [(sim.clock.now(), Cause.SUPERSEDED)]
    assert gen.take(1) is None
    with pytest.raises(NotServing):
        await gen.take_wait(1)
    assert await p.try_incr(b"k") is None
    # the leader key names a node that is not registered: nobody to send clients to yet
    for n in sim.nodes:
        assert n.group.redirect(b"k").message == errors.TRYAGAIN_NO_PRIMARY
    assert sim.serving() == []
    sim.etcd.txn([], [Delete(sim.keys.leader)])  # the intruder goes: an election follows
    await sim.until(lambda: len(sim.serving()) == 1, "a new primary", TTL)
    assert await sim.primary.incr(b"k") > first + 1
    assert sim.overlaps == []


async def test_a_leader_key_given_to_another_node_makes_that_node_the_primary(make_sim: SimFactory) -> None:
    sim = await make_sim(3)
    p = sim.primary
    q = next(n for n in sim.nodes if n is not p)
    first = await p.incr(b"k")
    sim.etcd.txn([], [Delete(sim.keys.leader)])
    sim.etcd.txn([], [Put(sim.keys.leader, q.name.encode(), q.member.lease.id)])  # q's, under q's lease
    await sim.clock.advance(0)
    assert sim.serving() == [q]  # q adopts the key (its name, its lease); p stood down first
    assert causes(p, Phase.STANDBY)[-1][1] is Cause.SUPERSEDED
    assert q.state.guard.revision == sim.etcd.peek(sim.keys.leader).create_revision  # type: ignore[union-attr]
    assert await q.incr(b"k") > first
    assert sim.overlaps == []


async def test_a_topology_read_from_before_a_failover_does_not_bring_the_key_back(make_sim: SimFactory) -> None:
    """The control loop's read may have been issued before a FAILOVER deleted this node's leader
    key and land after it: it still shows the key as this node's, under its lease. That key was
    given back: it must not be adopted (which would promote the node again, RESUMED, in a term whose
    first write fails its guard)."""
    sim = await make_sim(3)
    p = sim.primary
    q = next(n for n in sim.nodes if n is not p)
    before = p.member.directory.topology  # what a read issued now returns, whenever it lands
    assert before.leader == p.name and before.leader_lease == p.member.election.lease.id
    await p.member.failover.run(q.addr, 5.0)
    assert p.state.phase is Phase.STANDBY and p.member.election.held_revision == 0
    await p.member.election.step_group(before)  # the late reply of the earlier read
    assert p.member.election.held_revision == 0 and p.state.phase is Phase.STANDBY
    await sim.clock.advance(0)
    assert sim.serving() == [q] and causes(p, Phase.SERVING)[-1][1] is not Cause.RESUMED
    assert sim.overlaps == []


# --- a refused guarded write --------------------------------------------------------------------


async def test_a_refused_write_gives_the_key_back_and_pauses_campaigning(make_sim: SimFactory) -> None:
    sim = await make_sim(1)  # nobody else to campaign: the leader key shows what this node does
    p = sim.primary
    assert await p.incr(b"k") == 1
    revision = p.state.guard.revision
    sim.etcd.txn([], [Delete(sim.keys.seq(b"k"))])  # the record changed behind the primary's back
    assert await p.try_incr(b"k", 5000) is None  # its next ceiling write is refused: no ID
    refused_at = sim.clock.now()
    assert causes(p, Phase.STANDBY) == [(refused_at, Cause.REFUSED)]
    await sim.clock.advance(0)
    assert sim.leader_key() is None  # given back at once: it was still this node's
    while not p.serving:
        assert sim.leader_key() is None, "campaigned during the pause"
        await sim.advance(STEP)
        assert sim.clock.now() - refused_at <= 2 * TTL + TTL / 2 + STEP, "never campaigned again"
    elected = causes(p, Phase.PROMOTING)[-1]
    assert elected[1] is Cause.ELECTED and elected[0] - refused_at >= 2 * TTL
    assert p.state.guard.revision > revision
    assert await p.incr(b"other") == 1


async def test_a_refused_write_leaves_a_leader_key_that_is_no_longer_its_own(make_sim: SimFactory) -> None:
    sim = await make_sim(3)
    p = sim.primary
    q = next(n for n in sim.nodes if n is not p)
    first = await p.incr(b"k")
    p.clients["control"].hang = True  # p hears nothing of the change below...
    sim.etcd.txn([], [Delete(sim.keys.leader)])
    sim.etcd.txn([], [Put(sim.keys.leader, q.name.encode(), q.member.lease.id)])
    taken = sim.leader_key()
    await sim.clock.advance(0)
    assert q.serving
    got = await p.try_incr(b"k", 5000)  # ...until its next guarded write is refused
    assert got is None and causes(p, Phase.STANDBY)[-1][1] is Cause.REFUSED
    p.clients["control"].hang = False
    await sim.advance(TTL)  # p resigns: a guarded delete, which must not remove q's key
    assert sim.leader_key() == taken
    assert sim.serving() == [q] and p.member.election.held_revision == 0
    assert await q.incr(b"k") > first


async def test_a_leader_key_recreated_for_this_node_under_its_lease_is_adopted_in_a_new_term(
    make_sim: SimFactory,
) -> None:
    sim = await make_sim(3)
    p = sim.primary
    first = await p.incr(b"k")
    gen, term = p.keyspace.get(b"k"), p.state.term
    assert gen is not None and term is not None
    p.clients["control"].hang = True  # p hears nothing of the change below...
    sim.etcd.txn([], [Delete(sim.keys.leader)])
    sim.etcd.txn([], [Put(sim.keys.leader, p.name.encode(), p.member.lease.id)])  # its name, its lease
    recreated = sim.leader_key()
    assert recreated is not None and recreated[1] != term.guard.revision
    assert await p.try_incr(b"k", 5000) is None  # ...until its guarded write is refused (other revision)
    assert causes(p, Phase.STANDBY)[-1][1] is Cause.REFUSED and gen.take(1) is None
    p.clients["control"].hang = False
    await sim.until(lambda: p.serving, "p adopts the key", TTL)
    assert sim.leader_key() == recreated  # not given back: it was not the key p's term held
    assert p.state.term is not term and p.state.guard.revision == recreated[1]
    assert causes(p, Phase.PROMOTING)[-1][1] is Cause.RESUMED
    assert gen.take(1) is None and await p.incr(b"k") > first
    assert sim.serving() == [p] and sim.overlaps == []


# --- fencing and partitions ---------------------------------------------------------------------


async def test_an_old_primarys_generator_hands_out_nothing_once_another_term_began(make_sim: SimFactory) -> None:
    sim = await make_sim(2)
    p = sim.primary
    q = next(n for n in sim.nodes if n is not p)
    first = await p.incr(b"k")
    gen = p.keyspace.get(b"k")
    old_guard = p.state.guard
    assert gen is not None
    p.cut()
    await sim.until(lambda: q.serving, "the standby takes over", 2 * TTL)
    assert gen.take(1) is None and not gen.serving
    taken = await q.incr(b"k")
    assert taken > first
    with pytest.raises(GuardFailed):  # etcd refuses a write under the old term's guard, whoever sends it
        await q.node.store.save_ceiling(b"k", 10**9, old_guard)
    p.heal()
    await sim.until(lambda: p.member.directory.topology.leader == q.name, "p rejoins", 2 * TTL)
    await q.node.stop()  # q leaves: p is elected again, in a new term
    q.running = False
    await sim.until(lambda: p.serving, "p primary again", 2 * TTL)
    assert gen.take(1) is None  # the stale reference stays dead in p's new term
    with pytest.raises(NotServing):
        await gen.take_wait(1)
    assert await p.incr(b"k") > taken


async def test_a_partitioned_primary_stops_before_another_serves_and_no_id_repeats(make_sim: SimFactory) -> None:
    sim = await make_sim(3)
    p = sim.primary
    snowflake = preset("snowflake").to_settings()
    await p.keyspace.create(b"ts", start=0, settings=snowflake, kind="timestamp")
    keys = [b"a", b"b", b"ts"]
    history: dict[bytes, list[tuple[float, str, int]]] = {key: [] for key in keys}

    async def load(node: SimNode) -> None:
        for key in keys:
            got = await node.try_incr(key)
            if got is not None:
                history[key].append((sim.clock.now(), node.name, got))

    for _ in range(10):
        await asyncio.gather(*(load(n) for n in sim.nodes))
        await sim.advance(STEP)
    deadline = p.state.deadline
    p.cut()
    cut_at = sim.clock.now()
    last_valid = cut_at
    while not any(n.serving for n in sim.nodes if n is not p):
        if p.state.valid():
            last_valid = sim.clock.now()
        await asyncio.gather(*(load(n) for n in sim.nodes))
        await sim.advance(STEP)
        assert sim.clock.now() - cut_at < 2 * TTL, "nobody took over"
    q = sim.primary
    began = first_serve(q, cut_at)
    assert causes(p, Phase.STANDBY)[-1] == (pytest.approx(deadline), Cause.DEADLINE)
    assert last_valid < deadline <= began  # the old term ended before the new one began
    assert began - cut_at <= TTL + 1
    assert sim.overlaps == []
    for _ in range(10):
        await asyncio.gather(*(load(n) for n in sim.nodes))
        await sim.advance(STEP)
    for key in keys:
        ids = [got for _, _, got in history[key]]
        assert len(set(ids)) == len(ids), f"{key!r}: an ID was handed out twice"
        assert ids == sorted(ids), f"{key!r}: IDs went backwards"
        served_by = {name for _, name, _ in history[key]}
        assert served_by == {p.name, q.name}, f"{key!r}: {served_by}"
        assert all(at < deadline for at, name, _ in history[key] if name == p.name)
    # after the heal the old primary rejoins as a standby
    p.heal()
    await sim.until(
        lambda: p.member.directory.topology.leader == q.name and p.member.directory.registered, "p rejoins", 2 * TTL
    )
    await sim.advance(2 * TTL)
    assert sim.serving() == [q] and p.state.phase is Phase.STANDBY
    assert p.group.redirect(b"a").message == f"MOVED {key_slot(b'a')} {q.addr}"
    record = sim.etcd.peek(sim.keys.node(p.name))
    assert record is not None and b'"role": "standby"' in record.value


# --- what a node cut off from etcd tells its clients (issue 25) ----------------------------------


async def follow(sim: Any, node: SimNode, key: bytes, hops: int = 6) -> tuple[int | errors.CommandError, list[str]]:
    """A request as a client that follows MOVED sends it: the final reply and the nodes it went through."""
    by_addr = {n.addr: n for n in sim.nodes}
    path = [node.name]
    reply = await node.request(key)
    for _ in range(hops):
        if not (isinstance(reply, errors.CommandError) and reply.message.startswith("MOVED ")):
            break
        node = by_addr[reply.message.split()[-1]]
        path.append(node.name)
        reply = await node.request(key)
    return reply, path


async def test_a_primary_cut_off_from_etcd_sends_clients_on_once_its_lease_has_ended(make_sim: SimFactory) -> None:
    """A cut-off primary used to answer CLUSTERDOWN until the partition healed: a client that only
    follows MOVED (redis-cli -c) got nothing from it. Once its own lease must have ended in etcd it
    names no primary (empty CLUSTER SLOTS) and sends each key request on, MOVED to the other nodes
    in turn, which know who leads now; before that (the others may still name it) CLUSTERDOWN."""
    sim = await make_sim(3)
    p = sim.primary
    p.cut()
    await sim.until(lambda: not p.serving, "the cut-off primary steps down", TTL)
    early = await p.request(b"k")
    assert isinstance(early, errors.CommandError) and early.message.startswith("CLUSTERDOWN"), early
    await sim.until(lambda: any(n.serving for n in sim.nodes if n is not p), "a standby takes over", 2 * TTL)
    q = sim.primary
    await sim.advance(TTL)  # by now its old lease has ended in etcd, whenever etcd last answered it
    assert p.member.directory.members()[0] is None  # CLUSTER SLOTS: nobody
    seen = set()
    for _ in range(4):
        reply, path = await follow(sim, p, b"k")
        assert isinstance(reply, int), (reply, path)
        assert path[-1] == q.name and len(path) <= 3, path
        seen.add(path[1])
    assert seen == {n.name for n in sim.nodes if n is not p}  # each other node in turn
    p.heal()
    await sim.until(lambda: p.member.directory.topology.leader == q.name, "it rejoins", 2 * TTL)
    reply = await p.request(b"k")
    assert isinstance(reply, errors.CommandError) and reply.message == errors.MOVED.format(key_slot(b"k"), q.addr)
    assert sim.overlaps == []


async def test_nodes_that_all_lost_etcd_never_send_a_client_back_and_forth(make_sim: SimFactory) -> None:
    """etcd gone for everyone: nobody may serve, and whatever each node answers, a client that
    follows MOVED ends on an error within two hops, never in a loop between two nodes (a cut-off
    node that led sends clients on, but one that did not names nobody: it cannot send them back)."""
    sim = await make_sim(3)
    sim.primary  # noqa: B018 - one primary before the outage
    sim.etcd.unreachable = True
    await sim.until(lambda: not sim.serving(), "the primary steps down", TTL)
    for _ in range(int(3 * TTL / 0.25)):
        await sim.advance(0.25)
        for n in sim.nodes:
            reply, path = await follow(sim, n, b"k")
            assert isinstance(reply, errors.CommandError) and not reply.message.startswith("MOVED"), (reply, path)
            assert len(path) <= 3, path
    assert sim.serving() == []
