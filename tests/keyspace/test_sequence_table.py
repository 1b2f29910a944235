"""The compact sequence table (``march.keyspace.sequence_table``) and the keyspace's use of it: a sequence not
in use is a row (one packed int), the INCR fast path takes from it without a generator, a row that
would need a store write becomes a generator again, and a term's end forgets every row.

The property test drives a ``Keyspace`` on the memory store through random interleavings of what
the server does (INCR and INCRBY through the commands' own fast path, a first request through
``take_from``, GET reading a key, an idle sweep, a new term) and checks every ID a key got: never
twice, always above every earlier one, always below a ceiling the store had confirmed when it was
handed out.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from march_harness.aio import FakeClock
from march_harness.memory_store import MemoryStore

from march.clock import SYSTEM
from march.commands.sequences import incr as incr_command
from march.commands.sequences import incrby as incrby_command
from march.config import Config
from march.keyspace.keyspace import Keyspace
from march.keyspace.sequence_table import ROOM, SequenceTable
from march.keyspace.serving import Cause, ServingState
from march.store.contract import SINGLE_NODE

CONFIG = Config(min_batch=10, max_batch=1000, max_wait=0.5, sequence_idle_seconds=3600, max_incrby=1000)
KEYS = [b"a", b"b", b"c"]


def keyspace(store: MemoryStore) -> Keyspace:
    return Keyspace(CONFIG, store, ServingState.forever(SYSTEM, SINGLE_NODE), clock=FakeClock(50.0))


def client(ks: Keyspace) -> SimpleNamespace:
    user = SimpleNamespace(unrestricted=True)
    return SimpleNamespace(generators=ks.generators, app=SimpleNamespace(keyspace=ks, config=CONFIG), user=user)


async def request(ks: Keyspace, key: bytes, n: int = 1) -> int:
    """INCR / INCRBY as the server runs them: the handler's value, or what it returned awaited."""
    c = client(ks)
    result = incr_command(c, [b"incr", key]) if n == 1 else incrby_command(c, [b"incrby", key, b"%d" % n])  # type: ignore[arg-type]
    if isinstance(result, int):
        return result
    value: int = await result
    return value


def test_a_row_packs_next_and_room_and_refuses_what_needs_a_write() -> None:
    table = SequenceTable()
    table.valid = lambda: True
    table.low = 5
    table.put(b"k", 1, 11)
    assert table.peek(b"k") == (1, 11)
    assert table.take(b"k", 5) == 5  # 1..5; 6 left, at least low
    assert table.take(b"k", 2) is None  # would leave 4 < low: a store write is needed
    assert table.take(b"other", 1) is None
    assert table.pop(b"k") == (6, 11) and table.pop(b"k") is None and len(table) == 0
    table.put(b"big", 2**62, 2**62 + 10 * ROOM)  # a longer range keeps ROOM of it (the rest: a gap)
    assert table.peek(b"big") == (2**62, 2**62 + ROOM)
    table.valid = lambda: False
    assert table.take(b"big", 1) is None  # never without a valid lease
    table.clear()
    assert b"big" not in table


async def test_a_new_key_is_a_row_after_its_first_id_and_its_next_ids_come_from_it() -> None:
    store = MemoryStore()
    ks = keyspace(store)
    assert await request(ks, b"k") == 1
    assert b"k" not in ks.generators and ks.table.peek(b"k") == (2, 11)  # created with 1 + min_batch
    assert [await request(ks, b"k") for _ in range(4)] == [2, 3, 4, 5]
    assert store.writes == [(b"k", 11)]  # the creation's range only: no ceiling write yet
    # the sixth would leave fewer than low (5) unspent: the row becomes a generator, which extends
    assert await request(ks, b"k") == 6 and b"k" in ks.generators and b"k" not in ks.table
    assert [await request(ks, b"k") for _ in range(20)] == list(range(7, 27))
    assert store.records[b"k"].ceiling >= 27


async def test_a_new_term_forgets_every_row_and_starts_above_the_stored_ceiling() -> None:
    store = MemoryStore()
    ks = keyspace(store)
    assert await request(ks, b"k") == 1 and b"k" in ks.table
    stored = store.records[b"k"].ceiling
    ks.state.step_down(Cause.SUPERSEDED)
    assert b"k" not in ks.table and ks.table.take(b"k", 1) is None
    ks.state.promote(SINGLE_NODE)
    ks.state.serve()
    assert await request(ks, b"k") >= stored == 11  # the row's range (2..10) is a gap


async def test_a_read_makes_a_generator_from_the_row_and_a_stale_one_hands_out_nothing() -> None:
    ks = keyspace(MemoryStore())
    await request(ks, b"k")
    gen = await ks.activate(b"k")  # GET, SEQ.INFO: a generator made from the row
    assert gen is not None and gen.watermark() == 1 and b"k" not in ks.table
    ks.settle(gen)  # nothing under way: a row again
    assert b"k" in ks.table and gen.take(1) is None  # the retired generator serves nothing
    assert await request(ks, b"k") == 2


Op = tuple[str, int, int]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("incr"), st.integers(0, len(KEYS) - 1), st.integers(1, 1)),
        st.tuples(st.just("incrby"), st.integers(0, len(KEYS) - 1), st.integers(2, 40)),
        st.tuples(st.just("burst"), st.integers(0, len(KEYS) - 1), st.integers(2, 30)),
        st.tuples(st.just("get"), st.integers(0, len(KEYS) - 1), st.just(0)),
        st.tuples(st.just("sweep"), st.just(0), st.just(0)),
        st.tuples(st.just("term"), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_random_interleavings_never_repeat_an_id_go_backwards_or_pass_a_durable_ceiling(plan: list[Op]) -> None:
    asyncio.run(_run(plan))


async def _run(plan: list[Op]) -> None:
    store = MemoryStore()
    ks = keyspace(store)
    last: dict[bytes, int] = {}
    durable: dict[bytes, int] = {}  # the highest ceiling the store confirmed, per key

    def confirmed(key: bytes) -> int:
        record = store.records.get(key)
        return record.ceiling if record is not None else 0

    def check(key: bytes, got: list[int]) -> None:
        for value in got:
            assert value > last.get(key, 0), f"{key!r}: {value} after {last.get(key)}"
            assert value < durable[key], f"{key!r}: {value} at or above the durable ceiling {durable[key]}"
            last[key] = value

    for kind, k, n in plan:
        key = KEYS[k]
        if kind in ("incr", "incrby"):
            value = await request(ks, key, n)
            durable[key] = confirmed(key)
            check(key, [value])
        elif kind == "burst":  # concurrent requests on one key, answered in any order they land
            got = await asyncio.gather(*(request(ks, key) for _ in range(n)))
            durable[key] = confirmed(key)
            assert len(set(got)) == len(got), f"a repeated ID: {sorted(got)}"
            check(key, sorted(got))
        elif kind == "get":
            row = ks.row(key)  # GET on a row reads it where it is: W >= every ID so far, every later one > W
            if row is not None:
                assert row[0] - 1 >= last.get(key, 0), (row, last.get(key))
                last[key] = row[0] - 1
            gen = await ks.activate(key)
            if gen is not None:
                assert gen.watermark() >= last.get(key, 0)
                ks.settle(gen)
        elif kind == "sweep":
            term = ks.state.term
            assert term is not None
            await ks.idle._pass(term)
        else:
            ks.state.step_down(Cause.SUPERSEDED)
            ks.state.promote(SINGLE_NODE)
            ks.state.serve()
    await asyncio.wait_for(ks.drain(), 5.0)
    ks.idle.stop()
