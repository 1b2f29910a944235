"""march_client.Sequencer / AsyncSequencer: IDs from a real march, errors that stay errors, retries
that end at their deadline, MOVED and TRYAGAIN handling (with a scripted fake node), and a cluster
whose primary is killed with SIGKILL while a client draws IDs.
"""

from __future__ import annotations

import asyncio
import binascii
import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.exceptions as rex
from march_client import AsyncSequencer, Sequencer, Unavailable
from march_client._address import Options
from march_client._retry import Action, RetryPolicy, classify
from march_client.aio import AsyncRouter
from march_client.slots import key_slot, request_slot
from march_client.sync import Router
from march_harness import MarchServer, free_port
from march_harness.cluster import MarchCluster
from march_harness.tls import make_certs, openssl_binary, wait_listening

from march.cluster.slots import key_slot as server_key_slot

pytestmark = pytest.mark.e2e

# -- against one node -----------------------------------------------------------------------------


def test_next_and_next_range(sequencer: Sequencer) -> None:
    assert sequencer.next("orders") == 1
    assert sequencer.next("orders") == 2
    r = sequencer.next_range("orders", 10)
    assert r == range(3, 13)
    assert sequencer.next("orders") == 13
    assert sequencer.next(b"binary\x00key") == 1


def test_range_size_is_checked_before_sending(sequencer: Sequencer) -> None:
    for n in (0, -1, sequencer.max_incrby + 1):
        with pytest.raises(ValueError, match="n must be between 1"):
            sequencer.next_range("r", n)
    assert sequencer.next("r") == 1  # nothing was sent


def test_a_refused_request_is_an_error_not_an_id(sequencer: Sequencer) -> None:
    sequencer.router.execute("SET", "big", 2**63 - 1)
    with pytest.raises(rex.ResponseError, match="overflow"):
        sequencer.next("big")
    with pytest.raises(rex.ResponseError):
        sequencer.router.execute("DECR", "big")  # refused by march: raised at once, not retried


def test_server_limit_on_incrby_is_an_error(march_url: str) -> None:
    with Sequencer(march_url, max_incrby=10**9) as seq, pytest.raises(rex.ResponseError):
        seq.next_range("k", 10**9)  # above the server's max_incrby (1,000,000)


def test_wrong_password_is_raised_at_once(march_factory: Callable[..., MarchServer]) -> None:
    server = march_factory(requirepass="s3cret")
    url = server.url
    with Sequencer(url, password="wrong", retry_for=60) as seq, pytest.raises(rex.AuthenticationError):
        seq.next("k")  # retry_for=60 would hang the test if this were retried
    with Sequencer(url.replace("redis://", "redis://default:s3cret@"), retry_for=5) as seq:
        assert seq.next("k") == 1


def test_nothing_listening_ends_with_unavailable() -> None:
    with Sequencer(f"redis://127.0.0.1:{free_port()}", retry_for=0.3) as seq:
        with pytest.raises(Unavailable) as err:
            seq.next("k")
        assert isinstance(err.value.__cause__, rex.ConnectionError)
        assert isinstance(err.value, rex.ConnectionError)  # callers catching redis errors still do


def test_a_request_waits_through_a_restart(march_server: MarchServer) -> None:
    with Sequencer(march_server.url, retry_for=60) as seq:
        first = seq.next("k")
        march_server.stop()
        got: list[int] = []
        errors: list[BaseException] = []
        retrying = threading.Event()  # set at the first back-off: a request really failed while down
        pause = seq.router._sleep

        def sleep(seconds: float) -> None:
            retrying.set()
            pause(seconds)

        seq.router._sleep = sleep

        def draw() -> None:
            try:
                got.append(seq.next("k"))
            except BaseException as e:
                errors.append(e)

        t = threading.Thread(target=draw)
        t.start()
        assert retrying.wait(10), "the request never failed while the server was down"
        march_server.start()
        t.join(60)
        assert not t.is_alive() and not errors, errors
        assert got[0] > first


def test_context_manager_closes(march_url: str) -> None:
    with Sequencer(march_url) as seq:
        seq.next("k")
    with pytest.raises(rex.ConnectionError):
        seq.next("k")


def test_threads_share_one_sequencer(sequencer: Sequencer) -> None:
    results: list[list[int]] = [[] for _ in range(4)]

    def work(out: list[int]) -> None:
        for _ in range(200):
            out.append(sequencer.next("shared"))

    threads = [threading.Thread(target=work, args=(r,)) for r in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    everything = [i for r in results for i in r]
    assert len(set(everything)) == 800
    assert all(r == sorted(r) for r in results)


# -- routing and retries with a scripted node -------------------------------------------------------


NOT_A_CLUSTER = rex.ResponseError("This instance has cluster support disabled")  # a single node's answer


class FakeNode:
    """Replies from a script: each item an exception to raise or a value to return; ``CLUSTER
    SLOTS`` is answered with ``slots`` (by default a single node's error) and not scripted."""

    def __init__(self, script: list[Any], slots: Any = NOT_A_CLUSTER) -> None:
        self.script = list(script)
        self.slots = slots
        self.calls: list[tuple[Any, ...]] = []
        self.refreshes = 0

    def execute_command(self, *args: Any) -> Any:
        if args == ("CLUSTER", "SLOTS"):
            self.refreshes += 1
            if isinstance(self.slots, BaseException):
                raise self.slots
            return self.slots
        self.calls.append(args)
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step

    def close(self) -> None:
        pass


def fake_router(nodes: dict[tuple[str, int], FakeNode], retry_for: float = 5.0) -> tuple[Router, list[float]]:
    slept: list[float] = []
    now = [0.0]

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    router = Router(Options(nodes=list(nodes)).target(), RetryPolicy(retry_for), clock=lambda: now[0], sleep=sleep)
    router.client = lambda address: nodes[address]  # type: ignore[method-assign,assignment,return-value]
    return router, slept


def test_classify() -> None:
    assert classify(rex.MovedError("12 127.0.0.1:7000")) is Action.REDIRECT
    assert classify(rex.TryAgainError("TRYAGAIN store slow")) is Action.WAIT
    assert classify(rex.ClusterDownError("CLUSTERDOWN no primary")) is Action.NEXT_NODE
    assert classify(rex.ConnectionError("refused")) is Action.NEXT_NODE
    assert classify(rex.TimeoutError("timeout")) is Action.NEXT_NODE
    assert classify(rex.AuthenticationError("WRONGPASS")) is Action.RAISE
    assert classify(rex.ResponseError("ERR increment or decrement would overflow")) is Action.RAISE
    assert classify(ValueError("x")) is Action.RAISE


def test_moved_is_followed_at_once_and_remembered() -> None:
    a, b = ("127.0.0.1", 1), ("127.0.0.1", 2)
    nodes = {a: FakeNode([rex.MovedError("1 127.0.0.1:2")]), b: FakeNode([41, 42])}
    router, slept = fake_router(nodes)
    assert router.execute("INCR", "k") == 41
    assert router.execute("INCR", "k") == 42
    assert slept == [] and router.current == b
    assert len(nodes[a].calls) == 1


def test_tryagain_waits_on_the_same_node() -> None:
    a, b = ("127.0.0.1", 1), ("127.0.0.1", 2)
    nodes = {a: FakeNode([rex.TryAgainError("TRYAGAIN"), rex.TryAgainError("TRYAGAIN"), 7]), b: FakeNode([])}
    router, slept = fake_router(nodes)
    assert router.execute("INCR", "k") == 7
    assert len(slept) == 2 and all(s > 0 for s in slept)
    assert nodes[b].calls == []


def test_dead_node_moves_on_to_the_next() -> None:
    a, b = ("127.0.0.1", 1), ("127.0.0.1", 2)
    nodes = {a: FakeNode([rex.ConnectionError("refused")]), b: FakeNode([9])}
    router, _ = fake_router(nodes)
    assert router.execute("INCR", "k") == 9
    assert router.current == b


def test_a_node_without_a_primary_sends_us_on_round_the_list() -> None:
    a, b = ("127.0.0.1", 1), ("127.0.0.1", 2)
    nodes = {a: FakeNode([rex.TimeoutError("timeout"), 5]), b: FakeNode([rex.ClusterDownError("CLUSTERDOWN")])}
    router, slept = fake_router(nodes)
    assert router.execute("INCR", "k") == 5  # a timed out, b knew no primary, a again
    assert router.current == a and len(slept) == 2


def test_retries_stop_at_the_deadline_and_never_return_the_error() -> None:
    a = ("127.0.0.1", 1)
    nodes = {a: FakeNode([rex.TryAgainError("TRYAGAIN")] * 1000)}
    router, slept = fake_router(nodes, retry_for=2.0)
    with pytest.raises(Unavailable, match="TRYAGAIN"):
        router.execute("INCR", "k")
    assert sum(slept) == pytest.approx(2.0)
    assert max(slept) <= RetryPolicy().cap


def test_endless_redirects_end_in_an_error() -> None:
    a, b = ("127.0.0.1", 1), ("127.0.0.1", 2)
    nodes = {a: FakeNode([rex.MovedError("1 127.0.0.1:2")] * 100), b: FakeNode([rex.MovedError("1 127.0.0.1:1")] * 100)}
    router, _ = fake_router(nodes, retry_for=0.5)
    with pytest.raises(Unavailable, match="MOVED redirects"):
        router.execute("INCR", "k")
    # every MOVED read CLUSTER SLOTS, the last one too (a refresh never stays "under way")
    assert nodes[a].refreshes + nodes[b].refreshes == router.redirects > 5


def test_non_integer_reply_is_an_error() -> None:
    a = ("127.0.0.1", 1)
    router, _ = fake_router({a: FakeNode([b"OK"])})
    seq = Sequencer(nodes=[a])
    seq.router = router
    with pytest.raises(rex.ResponseError, match="unexpected reply"):
        seq.next("k")


# -- routing by slot -------------------------------------------------------------------------------


def test_key_slot_is_redis_slot() -> None:
    assert key_slot(b"foo") == 12182  # CLUSTER KEYSLOT foo on Redis
    assert key_slot(b"somekey") == 11058
    assert key_slot(b"") == 0
    assert key_slot(b"{user1000}.following") == key_slot(b"{user1000}.followers") == key_slot(b"user1000")
    assert key_slot(b"foo{}{bar}") == binascii.crc_hqx(b"foo{}{bar}", 0) % 16384  # an empty tag: the whole key
    assert key_slot(b"foo{}{bar}") != key_slot(b"bar")
    assert key_slot(b"foo{{bar}}zap") == key_slot(b"{bar")  # the first { to the first } after it
    for i in range(2000):  # the server's own function agrees
        key = f"k{i}{{t{i % 7}}}".encode() if i % 3 else f"k{i}".encode()
        assert key_slot(key) == server_key_slot(key)


def test_request_slot_reads_the_key_of_keyed_commands() -> None:
    assert request_slot(("INCR", "foo")) == 12182
    assert request_slot((b"incrby", b"foo", 5)) == 12182
    assert request_slot(("WORKER.RENEW", "foo", 3, "token", "UPTO", 1)) == 12182
    assert request_slot(("INCR", 7)) == key_slot(b"7")  # redis-py sends an int key in decimal
    assert request_slot(("PING",)) is None
    assert request_slot(("CLUSTER", "SLOTS")) is None
    assert request_slot(("INCR", 1.5)) is None  # an encoding we would guess: the current node


def key_in(first: int, last: int) -> str:
    return next(k for i in range(100_000) if first <= key_slot((k := f"k{i}").encode()) <= last)


def slots_reply(*owners: tuple[int, int, int]) -> list[Any]:
    """A CLUSTER SLOTS reply: (first, last, port) on 127.0.0.1."""
    return [[first, last, [b"127.0.0.1", port, b"id"]] for first, last, port in owners]


def test_moved_fills_the_slot_table_once_and_requests_then_go_straight() -> None:
    a, b = ("127.0.0.1", 1), ("127.0.0.1", 2)
    table = slots_reply((0, 8191, 1), (8192, 16383, 2))
    low, high = key_in(0, 8191), key_in(8192, 16383)
    moved = rex.MovedError(f"{key_slot(high.encode())} 127.0.0.1:2")
    nodes = {a: FakeNode([1, moved, 2, 3, 4], slots=table), b: FakeNode([10, 11, 12, 13, "PONG"], slots=table)}
    router, slept = fake_router(nodes)
    assert router.execute("INCR", low) == 1
    assert router.execute("INCR", high) == 10  # MOVED, then the table from b
    assert router.redirects == 1 and nodes[b].refreshes == 1 and slept == []
    for _ in range(3):  # no MOVED any more, whatever the order of the keys
        router.execute("INCR", low)
        router.execute("INCR", high)
    assert router.redirects == 1 and nodes[a].refreshes == 0 and nodes[b].refreshes == 1
    assert router.slot_owner(0) == a and router.slot_owner(16383) == b
    assert router.execute("PING") == "PONG"  # keyless: the current node, the one the MOVED named
    assert nodes[a].script == [] and nodes[b].script == []


def test_a_failed_node_loses_its_slots_and_a_failed_refresh_is_ignored() -> None:
    a, b, c = ("127.0.0.1", 1), ("127.0.0.1", 2), ("127.0.0.1", 3)
    table = slots_reply((0, 8191, 1), (8192, 16383, 2))
    low, high = key_in(0, 8191), key_in(8192, 16383)
    slot = key_slot(high.encode())
    nodes = {
        a: FakeNode([rex.MovedError(f"{slot} 127.0.0.1:2"), 5, rex.MovedError(f"{slot} 127.0.0.1:3")], slots=table),
        b: FakeNode([1, rex.ConnectionError("refused")], slots=table),
        c: FakeNode([6], slots=rex.ConnectionError("refused")),
    }
    router, _ = fake_router({a: nodes[a], b: nodes[b]})
    router.client = lambda address: nodes[address]  # type: ignore[method-assign,assignment,return-value]
    assert router.execute("INCR", high) == 1  # a -> MOVED -> b, and the table from b
    assert router.slot_owner(0) == a and router.slot_owner(slot) == b
    assert router.execute("INCR", low) == 5  # straight to a
    # b dies: its slots are forgotten and go to the current node (b failed, so the next one: a),
    # which names c; c's CLUSTER SLOTS fails, and the MOVED entry alone routes the slot
    assert router.execute("INCR", high) == 6
    assert router.slot_owner(slot) == c and router.slot_owner(16383) is None and router.slot_owner(0) == a
    assert nodes[c].refreshes == 1 and router.redirects == 2


# -- asyncio ------------------------------------------------------------------------------------


async def test_async_next_and_range(march_url: str) -> None:
    async with AsyncSequencer(march_url, retry_for=5) as seq:
        assert await seq.next("a") == 1
        assert await seq.next_range("a", 5) == range(2, 7)
        ids = await asyncio.gather(*(seq.next("a") for _ in range(100)))
        assert sorted(ids) == list(range(7, 107))


async def test_async_prefetch_is_unique_and_increasing(march_url: str) -> None:
    async with AsyncSequencer(march_url, prefetch=True, retry_for=5) as seq:
        got = [await seq.next("p") for _ in range(5000)]
        assert got == sorted(set(got))
        concurrent = await asyncio.gather(*(seq.next("p") for _ in range(2000)))
        assert len(set(concurrent) | set(got)) == 7000
        direct = await seq.next_range("p", 3)
    async with AsyncSequencer(march_url, retry_for=5) as plain:
        after = await plain.next("p")
    assert after > max(max(got), max(concurrent), direct[-1])  # prefetched, unused IDs are never handed out again


def test_clusterdown_forgets_a_nodes_slots_only_if_the_table_sent_us_there() -> None:
    a, b = ("127.0.0.1", 1), ("127.0.0.1", 2)
    table = slots_reply((0, 8191, 1), (8192, 16383, 2))
    high = key_in(8192, 16383)
    down = rex.ClusterDownError("CLUSTERDOWN no primary")
    moved = rex.MovedError(f"{key_slot(high.encode())} 127.0.0.1:2")
    nodes = {a: FakeNode([moved, 2, down], slots=table), b: FakeNode([1, down, 3], slots=table)}
    router, _ = fake_router(nodes)
    assert router.execute("INCR", high) == 1  # the table: low half a, high half b
    # b, which the table names, knows no primary for the high half: its entries go
    assert router.execute("INCR", high) == 2  # b said CLUSTERDOWN; the current node (a) served it
    assert router.slot_owner(16383) is None and router.slot_owner(0) == a
    # a, reached as the current node for an unknown slot, knows no primary: its own entries stay
    assert router.execute("INCR", high) == 3
    assert router.slot_owner(0) == a and router.current == b


class AsyncFakeNode(FakeNode):
    async def execute_command(self, *args: Any) -> Any:
        return super().execute_command(*args)


async def test_async_router_routes_by_slot_too() -> None:
    a, b = ("127.0.0.1", 1), ("127.0.0.1", 2)
    table = slots_reply((0, 8191, 1), (8192, 16383, 2))
    low, high = key_in(0, 8191), key_in(8192, 16383)
    moved = rex.MovedError(f"{key_slot(high.encode())} 127.0.0.1:2")
    nodes = {a: AsyncFakeNode([moved, 1, 2], slots=table), b: AsyncFakeNode([10, 11, 12], slots=table)}
    router = AsyncRouter(Options(nodes=[a, b]).target(), RetryPolicy(5.0))
    router.client = lambda address: nodes[address]  # type: ignore[method-assign,assignment,return-value]
    assert await router.execute("INCR", high) == 10
    for _ in range(2):
        assert await router.execute("INCR", low) < await router.execute("INCR", high)
    assert router.redirects == 1 and nodes[b].refreshes == 1 and nodes[a].refreshes == 0


async def test_async_unavailable() -> None:
    async with AsyncSequencer(f"redis://127.0.0.1:{free_port()}", retry_for=0.2) as seq:
        with pytest.raises(Unavailable):
            await seq.next("k")


# -- a cluster through a kill -9 of its primary --------------------------------------------------------


def _follow_through_kill(march_cluster: MarchCluster, draw: Callable[[], int]) -> list[int]:
    got = [draw() for _ in range(50)]
    march_cluster.kill_primary()
    got += [draw() for _ in range(50)]  # each call retries until a standby has taken over
    return got


def test_cluster_follows_a_killed_primary(march_cluster: MarchCluster) -> None:
    primary = march_cluster.wait_primary()
    standby = next(n for n in march_cluster.nodes if n is not primary)
    seeds = [standby.address] + [n.address for n in march_cluster.nodes if n is not standby]
    with Sequencer(nodes=seeds, retry_for=30, socket_timeout=1.0, connect_timeout=1.0) as seq:
        got = _follow_through_kill(march_cluster, lambda: seq.next("orders"))
        # one client, one request at a time: the real-time guarantee makes them strictly increase
        assert got == sorted(set(got)), got
        new_primary = march_cluster.wait_primary()
        assert seq.router.current == ("127.0.0.1", new_primary.port)
        with redis.Redis(port=new_primary.port) as direct:
            assert direct.incr("orders") > got[-1]


async def test_async_prefetch_follows_a_killed_primary(march_cluster: MarchCluster) -> None:
    seeds = [n.address for n in march_cluster.nodes]
    small = {"min_range": 100, "max_range": 100}  # so that IDs after the kill need the new primary
    async with AsyncSequencer(nodes=seeds, prefetch=True, retry_for=30, socket_timeout=1.0, **small) as seq:
        got = [await seq.next("orders") for _ in range(50)]
        old = march_cluster.kill_primary()
        got += [await seq.next("orders") for _ in range(5000)]
        assert got == sorted(set(got)), "one event loop: increasing and unique"
        new = march_cluster.wait_primary(exclude=[old])
        assert seq.router.current == ("127.0.0.1", new.port)


# -- TLS ---------------------------------------------------------------------------------------------


def test_tls_with_a_client_certificate(march_factory: Callable[..., MarchServer], tmp_path: Path) -> None:
    if openssl_binary() is None:
        pytest.skip("no openssl")
    certs = make_certs(tmp_path / "certs")
    tls_port = free_port()
    march_factory(extra_args=certs.server_args("yes", tls_port))
    wait_listening(tls_port)
    url = f"rediss://127.0.0.1:{tls_port}"
    tls = {"ssl_ca_certs": certs.ca, "ssl_certfile": certs.client_cert, "ssl_keyfile": certs.client_key}
    with Sequencer(url, retry_for=5, **tls) as seq:
        assert seq.next("t") == 1
    with Sequencer(nodes=[("127.0.0.1", tls_port)], ssl=True, retry_for=5, **tls) as seq:
        assert seq.next_range("t", 2) == range(2, 4)


# -- where to connect ---------------------------------------------------------------------------------


def test_url_and_nodes_are_read() -> None:
    t = Options("rediss://app:p%40ss@db.example:7400").target()
    assert t.seeds == [("db.example", 7400)]
    assert t.options["username"] == "app" and t.options["password"] == "p@ss" and t.options["ssl"] is True
    assert Options().target().seeds == [("127.0.0.1", 7379)]  # March's default port
    assert Options(nodes=["a:1", ("b", 2), "redis://c:3", "d"]).target().seeds == [
        ("a", 1),
        ("b", 2),
        ("c", 3),
        ("d", 7379),
    ]
    assert Options("redis://h:1", password="explicit").target().options["password"] == "explicit"
    assert "ssl" not in Options("redis://h:1").target().options
    for bad_url, bad_nodes in (("redis://h:1", ["h:1"]), (None, [])):
        with pytest.raises(ValueError, match="url or a non-empty list"):
            Options(bad_url, nodes=bad_nodes).target()
    with pytest.raises(ValueError, match="scheme"):
        Options("http://h:1").target()
    with pytest.raises(ValueError, match="host:port"):
        Options(nodes=["h:notaport"]).target()


def test_both_sequencers_take_the_options_and_nothing_else() -> None:
    """One list of arguments (`Options`) for both classes: each is an `Options`, an unknown keyword
    is refused by both, and a URL's password never shows in a repr."""
    fields = [f.name for f in dataclasses.fields(Options)]
    assert fields[0] == "url" and "retry_for" in fields and "clock" in fields
    for cls in (Sequencer, AsyncSequencer):
        assert issubclass(cls, Options)
        with pytest.raises(TypeError, match="retry_seconds"):
            cls("redis://127.0.0.1:1", retry_seconds=1)  # type: ignore[call-arg]
    seq = Sequencer("redis://u:secret-pw@127.0.0.1:1", retry_for=0.5, max_incrby=7)
    try:
        assert (seq.retry_for, seq.max_incrby, seq.router.current) == (0.5, 7, ("127.0.0.1", 1))
        assert "secret-pw" not in repr(seq)
    finally:
        seq.close()
