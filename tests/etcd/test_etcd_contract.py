"""The ``Etcd`` contract, run against both implementations: ``FakeEtcd`` and a real etcd (``GrpcEtcd``).

Every test here takes the ``env`` fixture, once with the fake (on a ``ManualClock``) and once with
a real one-member etcd (the ``etcd`` fixture). What passes on one must pass on the other: that is
what lets the cluster tests trust the fake. Each test uses its own key prefix. Revisions are
asserted relative to what the test itself read, never as absolute numbers.

A lease runs out with ``env.expire``: the fake's clock is advanced past the TTL; the real etcd is
polled (with a deadline) until the key is gone. Real TTLs are whole seconds and the test etcd
accepts 2 s (election timeout 500 ms), so the expiry tests cost about 2.5 s each on the real one.

The fake's own switches (unreachable, hang, delay, lost replies, NOSPACE) are in ``tests/harness/test_fake_etcd.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest
from march_harness.aio import finish
from march_harness.etcd import EtcdCluster
from march_harness.fake_etcd import FakeEtcd
from march_harness.manual_clock import ManualClock

from march.errors import StoreError, StoreRejected
from march.etcd.api import (
    KV,
    Compare,
    Delete,
    Etcd,
    Event,
    Get,
    Op,
    Put,
    Range,
    Request,
    Target,
    created_at,
    modified_at,
    none_in,
    value_below,
    value_is,
)
from march.etcd.grpc_etcd import GrpcEtcd

pytestmark = pytest.mark.e2e

TTL = 2  # the shortest TTL the test etcd grants as asked (its minimum is 1.5 x election timeout, rounded up)


@dataclass
class Env:
    etcd: Etcd
    prefix: bytes
    clock: ManualClock | None  # None: a real etcd, on real time

    def k(self, name: str) -> bytes:
        return self.prefix + name.encode()

    @property
    def end(self) -> bytes:
        """The end of this test's prefix range."""
        return self.prefix[:-1] + bytes([self.prefix[-1] + 1])

    async def revision(self) -> int:
        return (await self.etcd.range(Get(self.k("any")))).revision

    async def expire(self, key: bytes, ttl: int = TTL) -> None:
        """Let the lease that ``key`` is attached to run out, until ``key`` is gone."""
        if self.clock is not None:
            await self.clock.advance(ttl + 1)
            assert await self.etcd.get(key) is None
            return
        await eventually(lambda: self.gone(key), f"{key!r} to expire", timeout=ttl + 3)

    def watch(self, start: bytes, end: bytes, start_revision: int = 0) -> AsyncGenerator[int, None]:
        """``etcd.watch``: both implementations give an async generator, closed when the test is done."""
        watch = self.etcd.watch(start, end, start_revision)
        assert isinstance(watch, AsyncGenerator)
        return watch

    def watch_events(self, start: bytes, end: bytes, start_revision: int = 0) -> AsyncGenerator[list[Event], None]:
        watch = self.etcd.watch_events(start, end, start_revision)
        assert isinstance(watch, AsyncGenerator)
        return watch

    async def gone(self, key: bytes) -> bool:
        return await self.etcd.get(key) is None


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout: float) -> None:
    """Poll an async condition until it holds, up to a real deadline (for the real etcd's TTLs)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@pytest.fixture(params=["fake", "real"])
def backend(request: pytest.FixtureRequest) -> EtcdCluster | None:
    """None for the fake; the real etcd (started only for the "real" runs)."""
    if request.param == "fake":
        return None
    cluster: EtcdCluster = request.getfixturevalue("etcd")
    return cluster


@pytest.fixture
async def env(backend: EtcdCluster | None) -> AsyncIterator[Env]:
    prefix = f"/contract-{uuid.uuid4().hex[:8]}/".encode()
    if backend is None:
        clock = ManualClock()
        fake = FakeEtcd(clock).client("n1")
        yield Env(fake, prefix, clock)
        await fake.close()
        return
    real = GrpcEtcd(backend.endpoints.split(","), timeout=5.0)
    try:
        yield Env(real, prefix, None)
    finally:
        await real.close()


def kv_of(found: Range) -> list[tuple[bytes, bytes]]:
    return [(kv.key, kv.value) for kv in found.kvs]


# --- keys and revisions --------------------------------------------------------------------------


async def test_put_get_delete(env: Env) -> None:
    e, key = env.etcd, env.k("a")
    assert await e.get(key) is None
    rev = await e.put(key, b"one")
    assert await e.get(key) == KV(key, b"one", rev, rev, 1, 0)
    await e.delete(key)
    assert await e.get(key) is None
    await e.delete(key)  # deleting a missing key is no error


async def test_revisions_follow_the_writes(env: Env) -> None:
    e, a, b = env.etcd, env.k("a"), env.k("b")
    start = await env.revision()
    r1 = await e.put(a, b"1")
    assert r1 == start + 1  # every write request moves the revision by one
    r2 = await e.put(a, b"2")
    assert r2 == r1 + 1
    assert await e.get(a) == KV(a, b"2", r1, r2, 2, 0)
    r3 = await e.put(b, b"x")
    assert await e.get(a) == KV(a, b"2", r1, r2, 2, 0)  # another key's write leaves it alone
    assert await e.get(b) == KV(b, b"x", r3, r3, 1, 0)
    assert await env.revision() == r3

    await e.delete(a)
    assert await env.revision() == r3 + 1
    await e.delete(a)
    assert await env.revision() == r3 + 1  # deleting nothing changes nothing
    r5 = await e.put(a, b"again")
    assert await e.get(a) == KV(a, b"again", r5, r5, 1, 0)  # a new life: new create revision, version 1


async def test_range_options(env: Env) -> None:
    e = env.etcd
    revs = {name: await e.put(env.k(name), name.encode() * 2) for name in ["d", "b", "a", "c"]}
    after = env.end + b"after"  # sorts after every key of the prefix
    await e.put(after, b"outside")
    rev = await env.revision()

    found = await e.range(Get(env.k("a"), env.end))
    assert kv_of(found) == [(env.k(n), n.encode() * 2) for n in "abcd"]  # key order, not write order
    assert (found.count, found.more, found.revision) == (4, False, rev)
    assert found.kvs[2] == KV(env.k("c"), b"cc", revs["c"], revs["c"], 1, 0)

    limited = await e.range(Get(env.k("a"), env.end, limit=2))
    assert kv_of(limited) == [(env.k("a"), b"aa"), (env.k("b"), b"bb")]
    assert (limited.count, limited.more) == (4, True)
    exact = await e.range(Get(env.k("a"), env.end, limit=4))
    assert (len(exact.kvs), exact.count, exact.more) == (4, 4, False)

    keys = await e.range(Get(env.k("b"), env.k("d"), keys_only=True))
    assert keys.kvs == [KV(env.k(n), b"", revs[n], revs[n], 1, 0) for n in "bc"]  # [b, d): d excluded
    assert keys.count == 2

    counted = await e.range(Get(env.prefix, env.end, count_only=True))
    assert (counted.kvs, counted.count, counted.more) == ([], 4, False)

    rest = await e.range(Get(env.k("c"), b"\0"))  # "\0": every key from c on, the outside one too
    assert kv_of(rest) == [(env.k("c"), b"cc"), (env.k("d"), b"dd"), (after, b"outside")]

    one = await e.range(Get(env.k("b")))
    assert (kv_of(one), one.count) == ([(env.k("b"), b"bb")], 1)
    none = await e.range(Get(env.k("zz")))
    assert (none.kvs, none.count, none.more, none.revision) == ([], 0, False, rev)
    empty = await e.range(Get(env.k("c"), env.k("a")))  # end before start: nothing
    assert (empty.kvs, empty.count) == ([], 0)


async def test_an_empty_key_is_rejected(env: Env) -> None:
    with pytest.raises(StoreRejected):
        await env.etcd.put(b"", b"v")
    with pytest.raises(StoreRejected):
        await env.etcd.txn([value_is(b"", b"v")], [])


# --- transactions --------------------------------------------------------------------------------


async def test_compares_on_every_target_and_op(env: Env) -> None:
    e, key, missing = env.etcd, env.k("k"), env.k("missing")
    lease, _ = await e.grant(TTL)
    create = await e.put(key, b"5", lease)
    mod = await e.put(key, b"5", lease)  # version 2, mod after create
    V, C, M, L, VAL = Target.VERSION, Target.CREATE, Target.MOD, Target.LEASE, Target.VALUE
    EQ, LT, GT, NE = Op.EQUAL, Op.LESS, Op.GREATER, Op.NOT_EQUAL
    cases: list[tuple[Compare, bool]] = [
        (Compare(key, VAL, EQ, b"5"), True),
        (Compare(key, VAL, EQ, b"4"), False),
        (Compare(key, VAL, LT, b"6"), True),
        (Compare(key, VAL, LT, b"5"), False),
        (Compare(key, VAL, LT, b"10"), False),  # bytewise: "5" > "10"
        (Compare(key, VAL, GT, b"4"), True),
        (Compare(key, VAL, GT, b"5"), False),
        (Compare(key, VAL, NE, b"4"), True),
        (Compare(key, VAL, NE, b"5"), False),
        (Compare(key, V, EQ, 2), True),
        (Compare(key, V, EQ, 1), False),
        (Compare(key, V, LT, 3), True),
        (Compare(key, V, LT, 2), False),
        (Compare(key, V, GT, 1), True),
        (Compare(key, V, GT, 2), False),
        (Compare(key, V, NE, 1), True),
        (Compare(key, V, NE, 2), False),
        (Compare(key, C, EQ, create), True),
        (Compare(key, C, EQ, mod), False),
        (Compare(key, C, LT, mod), True),
        (Compare(key, C, LT, create), False),
        (Compare(key, C, GT, 0), True),
        (Compare(key, C, GT, create), False),
        (Compare(key, C, NE, 0), True),
        (Compare(key, C, NE, create), False),
        (Compare(key, M, EQ, mod), True),
        (Compare(key, M, EQ, create), False),
        (Compare(key, M, LT, mod + 1), True),
        (Compare(key, M, LT, mod), False),
        (Compare(key, M, GT, create), True),
        (Compare(key, M, GT, mod), False),
        (Compare(key, M, NE, create), True),
        (Compare(key, M, NE, mod), False),
        (Compare(key, L, EQ, lease), True),
        (Compare(key, L, EQ, 0), False),
        (Compare(key, L, LT, lease + 1), True),
        (Compare(key, L, LT, lease), False),
        (Compare(key, L, GT, 0), True),
        (Compare(key, L, GT, lease), False),
        (Compare(key, L, NE, 0), True),
        (Compare(key, L, NE, lease), False),
        (value_is(key, b"5"), True),
        (value_below(key, b"6"), True),
        (value_below(key, b"5"), False),
        (created_at(key, create), True),
        (created_at(key, 0), False),
        (modified_at(key, mod), True),
        (modified_at(key, create), False),
        # A missing key: version, revisions and lease are 0; no VALUE compare holds, whatever the op.
        *[(Compare(missing, VAL, op, operand), False) for op in Op for operand in (b"", b"5", b"\xff")],
        (Compare(missing, V, EQ, 0), True),
        (Compare(missing, V, GT, 0), False),
        (Compare(missing, V, LT, 1), True),
        (Compare(missing, V, NE, 0), False),
        (created_at(missing, 0), True),
        (created_at(missing, create), False),
        (Compare(missing, C, LT, 1), True),
        (modified_at(missing, 0), True),
        (Compare(missing, M, GT, 0), False),
        (Compare(missing, L, EQ, 0), True),
        (Compare(missing, L, NE, 0), False),
    ]
    wrong = []
    for compare, expected in cases:
        result = await e.txn([compare], [])
        if result.succeeded is not expected:
            wrong.append((compare, expected))
    assert wrong == []
    # A range compare: every key in [start, end) must hold it; an empty range holds as a missing key.
    rng, stop = env.k("r/"), env.k("r0")
    assert (await e.txn([none_in(rng, stop)], [])).succeeded
    await e.put(env.k("r/a"), b"1")
    assert not (await e.txn([none_in(rng, stop)], [])).succeeded
    assert (await e.txn([none_in(env.k("r/b"), stop)], [])).succeeded
    assert (await e.txn([Compare(rng, VAL, EQ, b"1", stop)], [])).succeeded
    await e.put(env.k("r/c"), b"2")
    assert not (await e.txn([Compare(rng, VAL, EQ, b"1", stop)], [])).succeeded
    assert not (await e.txn([Compare(env.k("r/x"), VAL, EQ, b"", stop)], [])).succeeded  # empty: no value
    # Several compares: all must hold.
    assert (await e.txn([value_is(key, b"5"), created_at(missing, 0)], [])).succeeded
    assert not (await e.txn([value_is(key, b"5"), created_at(missing, 1)], [])).succeeded
    await e.revoke(lease)


async def test_a_txn_runs_one_branch_at_one_revision(env: Env) -> None:
    e, flag, a, b, c = env.etcd, env.k("flag"), env.k("a"), env.k("b"), env.k("c")
    await e.put(flag, b"on")
    await e.put(c, b"old")
    start = await env.revision()
    success: list[Request] = [Put(a, b"s"), Get(a), Delete(c), Put(b, b"s"), Get(env.prefix, env.end, keys_only=True)]
    failure: list[Request] = [Put(a, b"f"), Get(a)]

    won = await e.txn([value_is(flag, b"on")], success, failure)
    assert won.succeeded
    assert won.revision == start + 1  # all writes of the transaction: one revision
    assert won.ranges[0] is None and won.ranges[2] is None and won.ranges[3] is None
    seen_a = won.ranges[1]
    assert seen_a is not None
    assert seen_a.kvs == [KV(a, b"s", won.revision, won.revision, 1, 0)]  # a Get sees the writes before it
    listed = won.ranges[4]
    assert listed is not None
    assert [kv.key for kv in listed.kvs] == [a, b, flag]  # c deleted, b put after the first Get
    assert all(kv.value == b"" for kv in listed.kvs)
    assert await e.get(c) is None
    assert (await e.get(b)) == KV(b, b"s", won.revision, won.revision, 1, 0)

    lost = await e.txn([value_is(flag, b"off")], success, failure)
    assert not lost.succeeded
    assert lost.revision == won.revision + 1
    assert len(lost.ranges) == 2 and lost.ranges[0] is None
    seen = lost.ranges[1]
    assert seen is not None
    assert kv_of(seen) == [(a, b"f")]
    assert seen.kvs[0].version == 2
    assert (await e.get(b)) == KV(b, b"s", won.revision, won.revision, 1, 0)  # the success branch did not run


async def test_a_compare_and_delete_that_raises_another_key(env: Env) -> None:
    """What ``EtcdStore.delete_worker`` sends: delete a key only if its value is exactly the one read,
    and create (or raise, comparing its value) another key in the same revision; a repeat finds the
    key gone (a VALUE compare never matches a missing key) and the failure branch's reads say why."""
    e, rec, floor = env.etcd, env.k("rec"), env.k("floor")
    await e.put(rec, b"held")
    start = await env.revision()
    ops: list[Request] = [Delete(rec), Put(floor, b"00000000000000000500")]
    reads: list[Request] = [Get(rec), Get(floor)]
    stale = await e.txn([value_is(rec, b"other"), created_at(floor, 0)], ops, reads)
    assert not stale.succeeded and stale.revision == start
    first = stale.ranges[0]
    assert first is not None and kv_of(first) == [(rec, b"held")]
    done = await e.txn([value_is(rec, b"held"), created_at(floor, 0)], ops, reads)
    assert done.succeeded and done.revision == start + 1  # the delete and the put: one revision
    assert await e.get(rec) is None
    assert await e.get(floor) == KV(floor, b"00000000000000000500", done.revision, done.revision, 1, 0)
    again = await e.txn([value_is(rec, b"held")], [Delete(rec)], reads)
    assert not again.succeeded and again.revision == done.revision
    gone, kept = again.ranges
    assert gone is not None and gone.kvs == [] and kept is not None and kept.kvs[0].value.endswith(b"500")
    await e.put(rec, b"held")
    raced = await e.txn([value_is(rec, b"held"), created_at(floor, 0)], ops, reads)  # the floor exists now
    assert not raced.succeeded
    raised = await e.txn(
        [value_is(rec, b"held"), value_is(floor, b"00000000000000000500")],
        [Delete(rec), Put(floor, b"00000000000000000900")],
    )
    assert raised.succeeded and (await e.get(floor) or KV(b"", b"", 0, 0, 0, 0)).value.endswith(b"900")


async def test_a_txn_that_writes_nothing_keeps_the_revision(env: Env) -> None:
    e, key = env.etcd, env.k("a")
    rev = await e.put(key, b"v")
    read = await e.txn([value_is(key, b"v")], [Get(key)], [])
    assert read.succeeded and read.revision == rev
    assert read.ranges[0] == Range([KV(key, b"v", rev, rev, 1, 0)], 1, False, rev)
    failed = await e.txn([value_is(key, b"x")], [Put(key, b"no")], [])  # an empty failure branch
    assert not failed.succeeded and failed.revision == rev and failed.ranges == []
    nothing = await e.txn([], [Delete(env.k("missing"))])  # a delete that finds nothing
    assert nothing.succeeded and nothing.revision == rev
    assert await env.revision() == rev
    assert await e.get(key) == KV(key, b"v", rev, rev, 1, 0)


async def test_a_txn_writing_one_key_twice_is_rejected(env: Env) -> None:
    e, a, b = env.etcd, env.k("a"), env.k("b")
    rev = await e.put(a, b"0")
    refused: list[tuple[list[Request], list[Request]]] = [
        ([Put(a, b"1"), Put(a, b"2")], []),
        ([Put(a, b"1"), Delete(a)], []),
        ([Delete(env.prefix, env.end), Put(b, b"1")], []),  # a put inside a deleted range
        ([Put(b, b"1")], [Put(a, b"1"), Put(a, b"2")]),  # checked in the branch that would not run too
    ]
    for success, failure in refused:
        with pytest.raises(StoreRejected):
            await e.txn([], success, failure)
    assert await e.get(a) == KV(a, b"0", rev, rev, 1, 0)
    assert await e.get(b) is None
    assert await env.revision() == rev
    # Reading a key twice, or deleting it twice, is fine.
    fine = await e.txn([], [Get(a), Get(a), Delete(a), Delete(a)])
    assert fine.succeeded and fine.revision == rev + 1


async def test_txn_limits(env: Env) -> None:
    e, key = env.etcd, env.k("a")
    many = [created_at(env.k(f"c{i}"), 0) for i in range(128)]
    assert (await e.txn(many, [Put(env.k(f"p{i}"), b"") for i in range(128)])).succeeded  # 128: the default limit
    with pytest.raises(StoreRejected):
        await e.txn([*many, created_at(key, 0)], [])
    with pytest.raises(StoreRejected):
        await e.txn([], [Put(env.k(f"q{i}"), b"") for i in range(129)])
    with pytest.raises(StoreRejected):
        await e.txn([], [], [Get(key)] * 129)
    with pytest.raises(StoreRejected):
        await e.put(key, b"x" * (1600 << 10))  # over etcd's default 1.5 MiB request limit
    assert await e.get(key) is None
    assert (await e.range(Get(env.k("q"), env.k("r"), count_only=True))).count == 0


# --- leases --------------------------------------------------------------------------------------


async def test_lease_grant_keep_alive_and_revoke(env: Env) -> None:
    e, a, b, kept = env.etcd, env.k("a"), env.k("b"), env.k("kept")
    lease, ttl = await e.grant(TTL)
    assert lease != 0 and ttl == TTL
    other, _ = await e.grant(TTL)
    assert other != lease
    await e.put(a, b"1", lease)
    await e.put(b, b"2", lease)
    await e.put(kept, b"3", lease)
    await e.put(kept, b"4")  # a put without the lease detaches the key from it
    found = await e.get(a)
    assert found is not None and found.lease == lease
    assert await e.keep_alive(lease, timeout=5.0) == TTL

    before = await env.revision()
    await e.revoke(lease)
    assert await e.get(a) is None and await e.get(b) is None
    assert await env.revision() == before + 1  # both keys went in one revision
    found = await e.get(kept)
    assert found is not None and found.lease == 0
    assert await e.keep_alive(lease, timeout=5.0) <= 0
    assert await e.keep_alive(lease ^ 0x5A5A, timeout=5.0) <= 0  # never granted
    with pytest.raises(StoreRejected):
        await e.revoke(lease)
    with pytest.raises(StoreRejected):
        await e.put(a, b"x", lease)  # a put under a lease that is gone
    with pytest.raises(StoreRejected):
        await e.txn([], [Put(a, b"x", lease)])
    assert await e.get(a) is None
    await e.revoke(other)


async def test_keys_go_when_their_lease_expires(env: Env) -> None:
    e, a, b, other = env.etcd, env.k("a"), env.k("b"), env.k("other")
    lease, _ = await e.grant(TTL)
    await e.put(a, b"1", lease)
    await e.put(b, b"2", lease)
    await e.put(other, b"3")
    rev = await env.revision()
    watch = env.watch(env.prefix, env.end, rev + 1)
    async with contextlib.aclosing(watch):
        await env.expire(a)
        assert await e.get(b) is None
        assert await e.get(other) is not None
        assert await env.revision() == rev + 1  # one revision for every key of the lease
        assert await finish(anext(watch), 5.0) == rev + 1  # watches see the expiry
    assert await e.keep_alive(lease, timeout=5.0) <= 0


# --- watches -------------------------------------------------------------------------------------


async def test_a_watch_reports_changes_in_its_range_only(env: Env) -> None:
    e = env.etcd
    rev = await env.revision()
    # From the revision after the one read: no change can slip in before the watch is in place.
    watch = env.watch(env.k("b"), env.k("d"), rev + 1)
    async with contextlib.aclosing(watch):
        await e.put(env.k("a"), b"outside")
        await e.put(env.k("d"), b"outside")  # the end is excluded
        inside = await e.put(env.k("b"), b"inside")
        assert await finish(anext(watch), 5.0) == inside
        await e.put(env.k("e"), b"outside")
        both = await e.txn([], [Put(env.k("c"), b"1"), Put(env.k("z"), b"1")])
        assert await finish(anext(watch), 5.0) == both.revision
        await e.delete(env.k("a"))
        await e.delete(env.k("b"))
        assert await finish(anext(watch), 5.0) == both.revision + 2


async def test_watch_events_carry_each_changed_key_its_value_and_revision(env: Env) -> None:
    e, a, b, c = env.etcd, env.k("a"), env.k("b"), env.k("c")
    await e.put(a, b"before")
    rev = await env.revision()
    watch = env.watch_events(env.k("a"), env.k("c"), rev + 1)  # c is outside
    async with contextlib.aclosing(watch):
        first = await e.put(b, b"1")
        assert await finish(anext(watch), 5.0) == [Event(b, b"1", first)]
        both = await e.txn([], [Put(a, b"2"), Put(b, b"3"), Put(c, b"outside")])
        assert await finish(anext(watch), 5.0) == [Event(a, b"2", both.revision), Event(b, b"3", both.revision)]
        await e.delete(a)
        assert await finish(anext(watch), 5.0) == [Event(a, None, both.revision + 1)]
    # From a revision in the past: the same changes again, in order.
    replay = env.watch_events(env.k("a"), env.k("c"), first)
    async with contextlib.aclosing(replay):
        seen: list[Event] = []
        while len(seen) < 4:
            seen += await finish(anext(replay), 5.0)
    assert [(ev.key, ev.value) for ev in seen] == [(b, b"1"), (a, b"2"), (b, b"3"), (a, None)]
    assert [ev.revision for ev in seen] == sorted(ev.revision for ev in seen)


async def test_a_closed_client_fails_every_call(env: Env) -> None:
    e = env.etcd
    await e.put(env.k("a"), b"1")
    await e.close()
    with pytest.raises(StoreError):
        await e.get(env.k("a"))
    with pytest.raises(StoreError):
        await e.put(env.k("a"), b"2")
    with pytest.raises(StoreError):
        await anext(env.watch(env.prefix, env.end))


@pytest.mark.parametrize("backend", ["fake", "real"], indirect=True)
async def test_an_open_watch_breaks_when_the_client_closes(env: Env) -> None:
    e = env.etcd
    watch = env.watch(env.prefix, env.end, await env.revision() + 1)
    async with contextlib.aclosing(watch):
        first = await e.put(env.k("a"), b"1")
        assert await finish(anext(watch), 5.0) == first  # the watch is in place
        waiting = asyncio.ensure_future(anext(watch))
        await e.close()
        with pytest.raises(StoreError):
            await finish(waiting, 5.0)
