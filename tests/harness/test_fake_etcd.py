"""The fake etcd's own behaviour, which a real etcd cannot be made to show on demand (fake only).

``tests/etcd/test_etcd_contract.py`` checks that the fake answers like etcd; these check its switches, which the
cluster tests use to play failures: an unreachable link or etcd (calls fail at once, watches
break), a hung one (calls fail at their deadline on the clock, unapplied), a slow one (calls land
late, even after their caller gave up), lost replies (applied, yet an error), the NOSPACE alarm,
the call counters, and lease TTLs on the ``ManualClock``. Nothing here waits on real time: a call
that must block is a task, and the test moves the clock and looks at it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from march_harness.aio import finish
from march_harness.fake_etcd import FakeEtcd, FakeEtcdClient
from march_harness.manual_clock import ManualClock

from march.errors import StoreError, StoreFull, StoreRejected
from march.etcd.api import KV, Get, Put, created_at, value_is


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def server(clock: ManualClock) -> FakeEtcd:
    return FakeEtcd(clock)


@pytest.fixture
async def client(server: FakeEtcd) -> AsyncIterator[FakeEtcdClient]:
    c = server.client("n1", timeout=5.0)
    yield c
    await c.close()


async def test_clients_share_one_store(server: FakeEtcd) -> None:
    n1, n2 = server.client("n1"), server.client("n2")
    assert (n1.endpoint, n2.endpoint, server.client().endpoint) == ("fake:n1", "fake:n2", "fake")
    rev = await n1.put(b"k", b"v")
    assert rev == 2  # etcd starts at revision 1
    assert await n2.get(b"k") == KV(b"k", b"v", 2, 2, 1, 0)
    assert server.peek(b"k") == KV(b"k", b"v", 2, 2, 1, 0)
    assert server.revision == 2


# --- unreachable ---------------------------------------------------------------------------------


async def test_an_unreachable_client_fails_at_once_and_others_do_not(server: FakeEtcd, clock: ManualClock) -> None:
    n1, n2 = server.client("n1"), server.client("n2")
    lease, _ = await n1.grant(3)
    n1.unreachable = True
    with pytest.raises(StoreError, match="unreachable"):
        await n1.put(b"k", b"v")  # no clock movement needed: it fails at once
    with pytest.raises(StoreError, match="unreachable"):
        await n1.keep_alive(lease, timeout=1.0)
    with pytest.raises(StoreError, match="unreachable"):
        await anext(n1.watch(b"a", b"z"))
    assert server.peek(b"k") is None
    assert await n2.put(b"k", b"2") == 2
    n1.unreachable = False
    assert await n1.get(b"k") == KV(b"k", b"2", 2, 2, 1, 0)
    assert await n1.keep_alive(lease, timeout=1.0) == 3


async def test_an_unreachable_server_fails_every_client(server: FakeEtcd) -> None:
    n1, n2 = server.client("n1"), server.client("n2")
    server.unreachable = True
    for c in (n1, n2):
        with pytest.raises(StoreError):
            await c.get(b"k")
    server.unreachable = False
    assert await n1.get(b"k") is None


@pytest.mark.parametrize("where", ["client", "server"])
async def test_unreachable_breaks_open_watches(server: FakeEtcd, clock: ManualClock, where: str) -> None:
    n1, n2 = server.client("n1"), server.client("n2")
    watch = n1.watch(b"a", b"z")
    async with contextlib.aclosing(watch):
        waiting = asyncio.ensure_future(anext(watch))
        await clock.settle()  # the watch is in place once it waits
        rev = await n2.put(b"k", b"1")
        assert await finish(waiting) == rev
        waiting = asyncio.ensure_future(anext(watch))
        await clock.settle()
        if where == "client":
            n1.unreachable = True
        else:
            server.unreachable = True
        with pytest.raises(StoreError, match="watch broke"):
            await finish(waiting)


# --- hang and delay ------------------------------------------------------------------------------


async def test_a_hung_call_fails_at_its_deadline_unapplied(client: FakeEtcdClient, clock: ManualClock) -> None:
    client.hang = True
    put = asyncio.ensure_future(client.put(b"k", b"v", timeout=2.0))
    await clock.advance(1.9)
    assert not put.done()
    await clock.advance(0.2)
    with pytest.raises(StoreError, match="deadline exceeded"):
        await finish(put)
    default = asyncio.ensure_future(client.get(b"k"))  # no timeout given: the client's 5 s
    await clock.advance(4.9)
    assert not default.done()
    await clock.advance(0.2)
    with pytest.raises(StoreError, match="deadline exceeded"):
        await finish(default)
    client.hang = False
    await clock.advance(10)
    assert client.server.peek(b"k") is None  # never applied, not even later
    assert await client.put(b"k", b"v") == 2


async def test_a_hung_server_hangs_every_client_and_holds_watch_events(server: FakeEtcd, clock: ManualClock) -> None:
    n1, n2 = server.client("n1"), server.client("n2")
    watch = n1.watch(b"a", b"z")
    async with contextlib.aclosing(watch):
        waiting = asyncio.ensure_future(anext(watch))
        await clock.settle()
        server.hang = True
        calls = [asyncio.ensure_future(c.get(b"k", timeout=1.0)) for c in (n1, n2)]
        await clock.advance(1.0)
        for call in calls:
            with pytest.raises(StoreError):
                await finish(call)
        n2.hang = False  # a client switch does not lift the server's
        still = asyncio.ensure_future(n2.get(b"k", timeout=1.0))
        await clock.advance(1.0)
        with pytest.raises(StoreError):
            await finish(still)
        server.hang = False
        rev = await n2.put(b"k", b"1")
        assert await finish(waiting) == rev

        n1.hang = True  # a hung link delivers no watch events ...
        later = await n2.put(b"k", b"2")
        waiting = asyncio.ensure_future(anext(watch))
        await clock.advance(10)
        assert not waiting.done()
        n1.hang = False  # ... until it is lifted
        assert await finish(waiting) == later


async def test_a_delay_lands_the_call_late(client: FakeEtcdClient, clock: ManualClock) -> None:
    client.delay = 1.0
    put = asyncio.ensure_future(client.put(b"k", b"v", timeout=2.0))
    await clock.advance(0.9)
    assert not put.done()
    assert client.server.peek(b"k") is None
    await clock.advance(0.2)
    assert await finish(put) == 2
    assert client.server.peek(b"k") is not None


async def test_a_delay_past_the_timeout_fails_but_still_lands(server: FakeEtcd, clock: ManualClock) -> None:
    client = server.client("n1")
    server.delay = 3.0  # the server's delay adds to the link's
    client.delay = 0.5
    campaign = asyncio.ensure_future(client.txn([created_at(b"leader", 0)], [Put(b"leader", b"n1")], timeout=1.0))
    await clock.advance(1.0)
    with pytest.raises(StoreError, match="deadline exceeded"):
        await finish(campaign)
    assert server.peek(b"leader") is None
    await clock.advance(2.4)
    assert server.peek(b"leader") is None
    await clock.advance(0.2)  # 3.5 s after the call: it lands although its caller gave up
    found = server.peek(b"leader")
    assert found is not None and found.value == b"n1"


async def test_a_delayed_call_is_dropped_if_the_link_is_cut_meanwhile(
    client: FakeEtcdClient, clock: ManualClock
) -> None:
    client.delay = 1.0
    late = asyncio.ensure_future(client.put(b"k", b"v", timeout=0.5))
    answered = asyncio.ensure_future(client.put(b"j", b"v", timeout=2.0))
    await clock.advance(0.5)
    client.unreachable = True
    await clock.advance(1.0)
    for call in (late, answered):
        with pytest.raises(StoreError):
            await finish(call)
    assert client.server.peek(b"k") is None and client.server.peek(b"j") is None


# --- lost replies --------------------------------------------------------------------------------


async def test_a_lost_reply_is_applied_yet_an_error(server: FakeEtcd) -> None:
    n1, n2 = server.client("n1"), server.client("n2")
    n1.lose_replies = 1
    with pytest.raises(StoreError, match="reply was lost"):
        await n1.txn([created_at(b"leader", 0)], [Put(b"leader", b"n1")])  # a campaign whose reply was lost
    found = await n1.get(b"leader")  # the next call is answered
    assert found is not None and found.value == b"n1"
    assert n1.lose_replies == 0
    server.lose_replies = 2  # on the server: the next calls of any client
    with pytest.raises(StoreError):
        await n2.put(b"a", b"1")
    with pytest.raises(StoreError):
        await n1.put(b"b", b"1")
    assert server.peek(b"a") is not None and server.peek(b"b") is not None
    assert await n1.put(b"c", b"1") > 0


async def test_a_lost_keep_alive_reply_still_renews(client: FakeEtcdClient, clock: ManualClock) -> None:
    lease, _ = await client.grant(3)
    await client.put(b"k", b"v", lease)
    await clock.advance(2)
    client.lose_replies = 1
    with pytest.raises(StoreError):
        await client.keep_alive(lease, timeout=1.0)
    await clock.advance(2)  # 4 s after the grant, 2 s after the renewal
    assert await client.get(b"k") is not None
    await clock.advance(1.1)
    assert await client.get(b"k") is None


# --- NOSPACE -------------------------------------------------------------------------------------


async def test_full_refuses_what_takes_space(server: FakeEtcd, client: FakeEtcdClient) -> None:
    lease, _ = await client.grant(10)
    rev = await client.put(b"k", b"v", lease)
    await client.put(b"j", b"v")
    server.full = True
    with pytest.raises(StoreFull, match="database space exceeded"):
        await client.put(b"x", b"v")
    with pytest.raises(StoreFull):
        await client.grant(10)
    with pytest.raises(StoreFull):  # over quota etcd 3.5 refuses every transaction, even a read-only one
        await client.txn([value_is(b"k", b"v")], [Get(b"k")], [])
    assert server.peek(b"x") is None
    # What reads or frees space still works.
    assert await client.get(b"k") == KV(b"k", b"v", rev, rev, 1, lease)
    await client.delete(b"j")
    assert await client.keep_alive(lease, timeout=1.0) == 10
    await client.revoke(lease)
    assert server.peek(b"k") is None and server.peek(b"j") is None
    server.full = False
    assert await client.put(b"x", b"v") > rev


# --- limits, counters, leases and watches on the clock -------------------------------------------


async def test_limits_are_settable(clock: ManualClock) -> None:
    small = FakeEtcd(clock, max_txn_ops=2, max_request_bytes=100).client()
    await small.txn([created_at(b"a", 0), created_at(b"b", 0)], [Put(b"a", b""), Put(b"b", b"")])
    with pytest.raises(StoreRejected, match="too many operations"):
        await small.txn([], [Put(b"a", b""), Put(b"b", b""), Put(b"c", b"")])
    with pytest.raises(StoreRejected, match="too large"):
        await small.put(b"k", b"x" * 100)
    with pytest.raises(StoreRejected, match="duplicate key"):
        await small.txn([], [Put(b"a", b""), Put(b"a", b"")])


async def test_calls_are_counted_per_client_and_in_all(server: FakeEtcd) -> None:
    n1, n2 = server.client("n1"), server.client("n2")
    await n1.txn([], [Get(b"k")])
    await n1.txn([], [Get(b"k")])
    await n1.get(b"k")
    await n2.put(b"k", b"v")
    n2.unreachable = True
    with pytest.raises(StoreError):
        await n2.txn([], [])  # a failed call is a call
    assert n1.calls == {"txn": 2, "get": 1}
    assert n2.calls == {"put": 1, "txn": 1}
    assert server.calls == {"txn": 3, "get": 1, "put": 1}


async def test_a_lease_expires_on_the_clock_unless_kept_alive(client: FakeEtcdClient, clock: ManualClock) -> None:
    server = client.server
    lease, ttl = await client.grant(3)
    assert ttl == 3
    await client.put(b"k", b"v", lease)
    await clock.advance(2.9)
    assert await client.keep_alive(lease, timeout=1.0) == 3  # expires at 5.9 now
    await clock.advance(2.9)
    assert server.peek(b"k") is not None and server.has_lease(lease)
    await clock.advance(0.2)
    assert server.peek(b"k") is None and not server.has_lease(lease)
    assert await client.keep_alive(lease, timeout=1.0) == 0
    revision = server.revision
    lone, _ = await client.grant(1)
    await clock.advance(2)
    assert not server.has_lease(lone)
    assert server.revision == revision  # a lease with no keys goes without a change


async def test_a_watch_from_a_past_revision_replays_the_changes(client: FakeEtcdClient, clock: ManualClock) -> None:
    r1 = await client.put(b"a", b"1")
    await client.put(b"x", b"1")
    r3 = await client.put(b"b", b"1")
    watch = client.watch(b"a", b"c", r1)
    async with contextlib.aclosing(watch):
        assert await finish(anext(watch)) == r1
        assert await finish(anext(watch)) == r3
        waiting = asyncio.ensure_future(anext(watch))
        r4 = await client.put(b"a", b"2")
        assert await finish(waiting) == r4
    future = client.watch(b"a", b"c", r4 + 2)  # from a revision still to come
    async with contextlib.aclosing(future):
        waiting = asyncio.ensure_future(anext(future))
        await clock.settle()  # in place before the changes: r5 comes live, and is before its start
        await client.put(b"a", b"3")
        r6 = await client.put(b"b", b"3")
        assert await finish(waiting) == r6


async def test_a_watch_without_start_revision_sees_only_later_changes(
    client: FakeEtcdClient, clock: ManualClock
) -> None:
    await client.put(b"a", b"1")
    watch = client.watch(b"a", b"\0")
    async with contextlib.aclosing(watch):
        waiting = asyncio.ensure_future(anext(watch))
        await clock.settle()  # the watch is in place once it waits
        rev = await client.put(b"zzz", b"1")
        assert await finish(waiting) == rev
