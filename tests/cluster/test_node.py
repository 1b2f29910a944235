"""ClusterNode in-process against a real etcd: the lease deadline (DESIGN 1.4) and stepping down.

The node's monotonic clock is a FakeClock, so the test decides when a deadline passes; etcd, the
keep-alives, the watch and the election are real. What must hold: the deadline counts from the
moment a keep-alive was *sent*; once it passes, not one ID is handed out, whether or not the
deadline timer has fired yet; a lease that etcd dropped means a new lease and a new term.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from support.aio import FakeClock, finish, until
from support.etcd import EtcdCluster

import march.commands  # noqa: F401  (registers every command)
from march.app import App
from march.cluster import node as node_module
from march.cluster.node import PRIMARY, STANDBY, ClusterNode
from march.commands.registry import HOT
from march.config import Config
from march.generators.base import NotServing
from march.server import make_store

TTL = 3


@pytest.fixture
async def cluster(
    etcd: EtcdCluster, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[ClusterNode, App, FakeClock]]:
    clock = FakeClock()
    monkeypatch.setattr(node_module, "_monotonic", clock)
    prefix = f"/t-{uuid.uuid4().hex[:8]}"
    config = Config(etcd=etcd.endpoints, etcd_prefix=prefix, node_id="n1", advertise="127.0.0.1:1", lease_ttl=TTL)
    store, lease, node = make_store(config)
    assert node is not None
    app = App(config, store, lease, HOT, node)
    node.attach(app)
    await node.start(1)
    try:
        await until(lambda: node.role == PRIMARY, "the election", timeout=10)
        yield node, app, clock
    finally:
        await node.stop()


async def test_the_deadline_counts_from_the_send_time(
    cluster: tuple[ClusterNode, App, FakeClock], monkeypatch: pytest.MonkeyPatch
) -> None:
    node, _, clock = cluster
    assert node.valid()
    assert node.lease_remaining == pytest.approx(TTL - node.margin)
    real_keep_alive = node.client.keep_alive
    sent_at: list[float] = []

    async def slow_reply(lease: int, timeout: float) -> int:
        sent = clock.now
        granted = await real_keep_alive(lease, timeout)
        clock.advance(0.5)  # the reply comes back half a second after the request left
        sent_at.append(sent)
        return granted

    monkeypatch.setattr(node.client, "keep_alive", slow_reply)

    def deadline_from_send_time() -> bool:
        return len(sent_at) >= 2 and node._deadline == pytest.approx(sent_at[-1] + TTL - node.margin)

    await until(deadline_from_send_time, "a deadline counted from the send time", timeout=10)
    assert node.lease_remaining == pytest.approx(TTL - node.margin - 0.5)


async def test_no_id_once_the_deadline_passed_even_before_the_timer(
    cluster: tuple[ClusterNode, App, FakeClock],
) -> None:
    node, app, clock = cluster
    gen = await app.keyspace.ensure(b"k")
    assert await finish(gen.take_wait(1)) == 1
    assert gen.take(1) == 2  # the fast path, with a durable range
    clock.advance(TTL)  # no keep-alive acknowledged for a whole TTL: the deadline is behind us
    assert not node.valid()
    assert gen.take(1) is None  # same loop turn: no timer, no keep-alive reply has run
    with pytest.raises(NotServing):
        await finish(gen.take_wait(1))
    node._check_deadline()  # what the deadline timer does
    assert node.role == STANDBY and not app.keyspace.serving
    assert gen.take(1) is None
    # Keep-alives go on and etcd kept the lease and the leader key: the same term resumes, with
    # every ceiling reloaded and extended first.
    await until(lambda: node.role == PRIMARY, "serving again", timeout=10)
    again = await app.keyspace.ensure(b"k")
    assert await finish(again.take_wait(1)) > 2


async def test_a_deadline_timer_that_fires_early_looks_again(cluster: tuple[ClusterNode, App, FakeClock]) -> None:
    node, app, _ = cluster
    assert node.lease_remaining > 0
    node._check_deadline()  # fired before the deadline: nothing happens now...
    assert node.role == PRIMARY and app.keyspace.serving
    assert node._deadline_timer is not None  # ...but it will look again


async def test_a_lease_dropped_by_etcd_means_a_new_term(cluster: tuple[ClusterNode, App, FakeClock]) -> None:
    node, app, _ = cluster
    gen = await app.keyspace.ensure(b"k")
    first = await finish(gen.take_wait(1))
    old_guard = node.guard
    await node.client.revoke(node._lease)  # the lease ends in etcd: the leader key goes with it
    await until(lambda: node.role == PRIMARY and node.guard != old_guard, "a new term", timeout=15)
    assert node.guard.revision > old_guard.revision
    assert gen.take(1) is None  # the old term's generator is dead
    again = await app.keyspace.ensure(b"k")
    assert await finish(again.take_wait(1)) > first
