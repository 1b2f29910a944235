"""Takeover costs the same whatever the number of sequences (``march.keyspace.keyspace``: lazy, per term),
and listing many sequences reads them a page at a time. In process (``march_harness.sim``).

20,000 sequences are written straight into the fake etcd in the store's own record format
(``march.store.etcd_values.encode_record``; checked against a sequence created the ordinary way), which
is what creating them one by one would leave behind, in a fraction of the time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from march_harness.sim import TTL, EtcdLog, Sim, SimFactory, SimNode, sims

from march.etcd.api import Put
from march.keyspace.keyspace import PAGE, Selection
from march.keyspace.serving import Phase
from march.store.contract import SequenceRecord
from march.store.etcd_store import MAX_OPS
from march.store.etcd_values import decode_record, encode_record

SEQUENCES = 20_000
HOT = 2_000  # keys with a first request right after the takeover
STEP = 0.05


@pytest.fixture
async def make_sim() -> AsyncIterator[SimFactory]:
    async with sims() as make:
        yield make


def name(i: int) -> bytes:
    return b"seq:%05d" % i


async def seed(sim: Sim, primary: SimNode) -> list[bytes]:
    """``SEQUENCES`` sequences in etcd, as ``SEQ.CREATE name`` leaves them; their names, sorted."""
    names = [name(i) for i in range(SEQUENCES)]
    created = await primary.keyspace.create(names[0], start=1, settings={})  # the ordinary way, as a model
    stored = sim.etcd.peek(sim.keys.seq(names[0]))
    assert stored is not None and created is not None
    model = SequenceRecord(names[0], "sequence", 1 + primary.config.min_batch, {})
    assert stored.value == encode_record(model)
    for i in range(1, SEQUENCES, MAX_OPS):
        chunk = names[i : i + MAX_OPS]
        sim.etcd.txn(
            [], [Put(sim.keys.seq(n), encode_record(SequenceRecord(n, "sequence", model.ceiling))) for n in chunk]
        )
    return names


def one_primary_other_than(sim: Sim, old: SimNode) -> bool:
    return any(n.serving for n in sim.nodes if n is not old)


async def test_takeover_with_many_sequences_costs_a_constant_and_first_requests_are_batched(
    make_sim: SimFactory,
) -> None:
    sim = await make_sim(3)
    p = sim.primary
    names = await seed(sim, p)
    hot = names[:: SEQUENCES // HOT]
    assert len(hot) == HOT
    warm = hot[:: HOT // 200]  # some of them were served by the old primary too
    old = dict(zip(warm, await asyncio.gather(*(p.incr(key) for key in warm)), strict=True))
    stored = {key: decode_record(key, sim.etcd.peek(sim.keys.seq(key)).value).ceiling for key in hot}  # type: ignore[union-attr]

    with EtcdLog(sim) as sent:
        cost: dict[str, dict[str, int]] = {}
        for n in sim.nodes:
            if n is not p:

                def at_change(change: object, n: SimNode = n) -> None:
                    if n.state.phase in (Phase.PROMOTING, Phase.SERVING):
                        cost[f"{n.name}:{n.state.phase.value}"] = n.calls()

                n.state.subscribe(at_change)
        p.cut()
        cut_at = sim.clock.now()
        took = await sim.until(lambda: one_primary_other_than(sim, p), "a standby takes over", TTL + 1)
        q = sim.primary
        assert took <= TTL + 1
        # promotion itself: not one etcd call between winning and serving
        assert cost[f"{q.name}:promoting"] == cost[f"{q.name}:serving"]
        # and from the cut to serving, no sequence record read or written, a handful of calls in all
        by_q = sent.by(q, since=cut_at)
        assert sent.touching(sim.keys.seqs, by_q) == []
        assert len(by_q) <= 12, [s.keys[:2] for s in by_q]
        assert q.clients["data"].calls["txn"] == 0 and q.keyspace.generators == {}

        # 2,000 concurrent first requests on the new primary: each key read and its ceiling raised,
        # the reads (and the writes) of keys requested in the same loop turn sharing transactions
        txns = q.clients["data"].calls["txn"]
        new = await asyncio.gather(*(q.incr(key) for key in hot))
        used = q.clients["data"].calls["txn"] - txns
        assert used <= HOT // 50 + 4, f"{used} transactions for {HOT} first requests"
        ids = dict(zip(hot, new, strict=True))
        assert all(ids[key] > got for key, got in old.items()), "an ID at or below one the old primary gave"
        assert all(ids[key] >= stored[key] for key in hot), "an ID below a ceiling stored before the takeover"
        assert len(sent.touching(sim.keys.seqs, sent.by(q, since=cut_at))) == used

    await sim.advance(3 * TTL)  # nothing flaps
    assert sim.serving() == [q] and q.state.promotions == 1 and q.state.demotions == 0
    assert sim.overlaps == []


async def test_listing_many_sequences_reads_pages(make_sim: SimFactory) -> None:
    sim = await make_sim(1)
    p = sim.primary
    names = await seed(sim, p)
    keyspace = p.keyspace
    with EtcdLog(sim) as sent:
        assert await keyspace.store.count() == SEQUENCES  # the seed wrote behind the keyspace's count
        everything = await keyspace.keys()
        assert everything == names
        evens = await keyspace.keys(Selection(lambda key: key.endswith((b"0", b"2", b"4", b"6", b"8")), lambda n: n))
        assert evens == names[::2]
        assert await keyspace.keys(prefix=b"seq:1") == names[10_000:]
        scanned: list[bytes] = []
        cursor, scans = 0, 0
        while True:
            cursor, page = await keyspace.scan(cursor, PAGE)
            scanned.extend(page)
            scans += 1
            assert scans <= SEQUENCES // PAGE + 1
            if cursor == 0:
                break
        assert scanned == names
        keyspace.store.cursors._points.clear()  # type: ignore[attr-defined]  # a cursor this node never gave out: found
        keyspace.store.cursors._offsets.clear()  # type: ignore[attr-defined]  # by a walk from the start
        cursor, page = await keyspace.scan(5_000, PAGE)
        assert page == names[5_000:6_000] and cursor == 6_000
    reads = [s for s in sent.by(p) if s.endpoint.endswith("-data")]
    assert reads and max(s.returned for s in reads) <= PAGE  # no read returned more than a page
    assert len(reads) >= 3 * SEQUENCES // PAGE  # keys() three times and a scan, a page per read
