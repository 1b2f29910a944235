"""ACL users in cluster mode, on a real etcd and three march processes.

- A user created on the primary authenticates on a standby within a second (bar: 1 s, plus
  MARCH_DRILL_SLACK seconds, default 1), which then sends its INCR to the primary (MOVED);
  redis-py ``RedisCluster`` with that user's name and password gets IDs through a standby. A change
  made on a standby (any node may change a user) reaches the primary, and deleting a user there
  closes the user's connections on the other nodes.
- Users survive a planned FAILOVER and a ``kill -9`` of the primary: the user authenticates on
  each new primary and gets IDs above every earlier one.
- A node started while etcd is down knows no user: it answers CLUSTERDOWN (not NOAUTH or
  WRONGPASS) until it has read them, then lets them in (and password-less clients too).
- Channel rules travel with the user: ``&pattern`` set on one node reads back the same on every
  node (ACL LIST, GETUSER) and is enforced there (NOPERM for another channel); revoking a channel on
  one node closes the connections subscribed to it on every node (Redis 7 closes them on its own
  node), and leaves the others subscribed.

Every process is stopped by its fixture; waits are conditions with deadlines.
"""

from __future__ import annotations

import time

import pytest
from march_harness.cluster import ClusterNode, MarchCluster, moved_target
from march_harness.drills import env_float
from march_harness.etcd import EtcdCluster
from march_harness.resp import RespConn, RespError, encode, wait_until
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from march import errors

pytestmark = pytest.mark.e2e

SLACK = env_float("MARCH_DRILL_SLACK", 1.0)
APP_PASS = "cluster-app-Pa55"
CLUSTERDOWN = RespError(errors.CLUSTERDOWN)
WRONGPASS = RespError(errors.WRONGPASS)


def authenticates(node: ClusterNode, user: str, password: str) -> bool:
    """One AUTH on a fresh connection (a fresh one: failures on one connection are throttled)."""
    try:
        with RespConn(node.port, timeout=2.0) as c:
            return bool(c.call("AUTH", user, password) == "OK")
    except OSError:
        return False


def wait_authenticates(node: ClusterNode, user: str, password: str, timeout: float) -> float:
    """Poll until ``user`` authenticates on ``node``; the seconds it took."""
    started = time.monotonic()
    wait_until(lambda: authenticates(node, user, password), timeout, 0.01, f"{user} to authenticate on {node.name}")
    return time.monotonic() - started


def as_user(node: ClusterNode, user: str = "app", password: str = APP_PASS) -> RespConn:
    conn = RespConn(node.port)
    assert conn.call("AUTH", user, password) == "OK"
    return conn


def settled(cluster: MarchCluster) -> tuple[ClusterNode, list[ClusterNode]]:
    primary = cluster.wait_settled(timeout=20)
    return primary, [n for n in cluster.nodes if n is not primary]


def test_a_user_made_on_the_primary_authenticates_on_a_standby_within_a_second(march_cluster: MarchCluster) -> None:
    primary, standbys = settled(march_cluster)
    for n in standbys:
        assert not authenticates(n, "app", APP_PASS)
    with RespConn(primary.port) as adm:
        rules = ["on", f">{APP_PASS}", "~orders:*", "+@read", "+@write", "+@create", "+cluster", "+@connection"]
        assert adm.call("ACL", "SETUSER", "app", *rules) == "OK"
        took = wait_authenticates(standbys[0], "app", APP_PASS, timeout=10)
    assert took <= 1.0 + SLACK, f"the user authenticated on a standby after {took:.2f}s (bar 1 s + {SLACK} s)"
    wait_authenticates(standbys[1], "app", APP_PASS, timeout=10)

    with as_user(standbys[0]) as c:
        assert moved_target(c.call("INCR", "orders:eu")) == primary.address
        assert c.call("INCR", "invoices") == RespError(errors.NOPERM_KEY)  # checked before routing
    with as_user(primary) as c:
        first = c.call("INCR", "orders:eu")
        assert first == 1

    cluster = RedisCluster(
        host="127.0.0.1", port=standbys[1].port, username="app", password=APP_PASS, retry=Retry(NoBackoff(), 0)
    )
    try:
        values = [cluster.incr("orders:eu") for _ in range(20)]
    finally:
        cluster.close()
    assert values == list(range(2, 22))

    # any node may change a user: a change on a standby reaches the primary
    with RespConn(standbys[1].port) as adm:
        assert adm.call("ACL", "SETUSER", "app", "-@write") == "OK"
    with RespConn(primary.port) as adm:

        def changed() -> bool:
            user = adm.call("ACL", "GETUSER", "app")
            assert isinstance(user, list), user
            return b"-@write" in dict(zip(user[::2], user[1::2], strict=True))[b"commands"]

        wait_until(changed, 10, 0.01, "the standby's change to reach the primary")
    with as_user(primary) as c:
        assert c.call("INCR", "orders:eu") == RespError(errors.NOPERM_COMMAND.format("incr"))
        assert c.call("GET", "orders:eu") == b"21"

    # deleting a user on one node closes its connections on every node
    conns = [as_user(n) for n in march_cluster.nodes]
    try:
        with RespConn(standbys[0].port) as adm:
            assert adm.call("ACL", "DELUSER", "app") == 1
        for n, c in zip(march_cluster.nodes, conns, strict=True):
            assert c.is_closed_by_peer(10), f"the deleted user's connection on {n.name} stayed open"
        for n in march_cluster.nodes:
            with RespConn(n.port) as c:
                assert c.call("AUTH", "app", APP_PASS) == WRONGPASS
    finally:
        for c in conns:
            c.close()


def incr_as_app(node: ClusterNode, key: str = "orders:eu") -> int:
    with as_user(node) as c:
        value = c.call("INCR", key)
    assert isinstance(value, int), (node.name, value)
    return value


def test_users_survive_failover_and_kill_of_the_primary(march_cluster: MarchCluster) -> None:
    primary, standbys = settled(march_cluster)
    with RespConn(primary.port) as adm:
        rules = ["on", f">{APP_PASS}", "~orders:*", "+@read", "+@write", "+@create"]
        assert adm.call("ACL", "SETUSER", "app", *rules) == "OK"
    for n in standbys:
        wait_authenticates(n, "app", APP_PASS, timeout=10)
    last = incr_as_app(primary)

    # planned: FAILOVER to a standby
    target = standbys[0]
    assert primary.call("FAILOVER", "TO", "127.0.0.1", target.port, "TIMEOUT", 10000, timeout=15) == "OK"
    assert march_cluster.wait_settled(timeout=20) is target
    value = incr_as_app(target)
    assert value > last
    last = value
    with as_user(primary) as c:  # the old primary still knows the user, and sends it on
        assert moved_target(c.call("INCR", "orders:eu")) == target.address

    # unplanned: kill -9 of the primary
    march_cluster.kill(target)
    survivor = march_cluster.wait_primary(timeout=20, exclude=[target])
    value = incr_as_app(survivor)
    assert value > last
    last = value
    with RespConn(survivor.port) as c:
        assert c.call("AUTH", "app", "wrong") == WRONGPASS

    # the killed node comes back knowing the user too
    march_cluster.restart(target)
    wait_authenticates(target, "app", APP_PASS, timeout=20)
    assert march_cluster.wait_settled(timeout=20) is survivor  # it knows the primary too (CLUSTERDOWN before)
    with as_user(target) as c:
        assert moved_target(c.call("INCR", "orders:eu")) == survivor.address


def test_a_node_started_while_etcd_is_down_answers_clusterdown_until_it_knows_its_users(
    march_cluster: MarchCluster, etcd: EtcdCluster
) -> None:
    primary, standbys = settled(march_cluster)
    with RespConn(primary.port) as adm:
        assert adm.call("ACL", "SETUSER", "app", "on", f">{APP_PASS}", "~orders:*", "+@all") == "OK"
    late = standbys[0]
    wait_authenticates(late, "app", APP_PASS, timeout=10)
    late.stop()
    etcd.stop()
    late.start()  # up (it answers), but it cannot read its users
    held = RespConn(late.port)
    try:
        assert held.call("PING") == CLUSTERDOWN
        assert held.call("AUTH", "app", APP_PASS) == CLUSTERDOWN
        assert held.call("AUTH", "app", "wrong") == CLUSTERDOWN
        assert held.call("AUTH", "default-password") == CLUSTERDOWN  # not "no password configured"
        assert held.call("HELLO", "3", "AUTH", "app", APP_PASS) == CLUSTERDOWN
        assert held.call("HELLO", "3") == CLUSTERDOWN
        assert held.call("INCR", "orders:eu") == CLUSTERDOWN
        with RespConn(late.port) as c:
            assert c.call("AUTH", "app", APP_PASS) == CLUSTERDOWN

        etcd.restart_all()
        wait_authenticates(late, "app", APP_PASS, timeout=20)
        # the connection that waited: no password needed for default (nopass), and app gets in
        assert held.call("PING") == "PONG"
        assert held.call("AUTH", "app", "wrong") == WRONGPASS
        assert held.call("AUTH", "app", APP_PASS) == "OK"
        assert held.call("ACL", "WHOAMI") == b"app"
        new_primary = march_cluster.wait_settled(timeout=20)
        if new_primary is not late:
            assert moved_target(held.call("INCR", "orders:eu")) == new_primary.address
        with as_user(new_primary) as c:
            assert isinstance(c.call("INCR", "orders:eu"), int)
    finally:
        held.close()


def subscribed(node: ClusterNode, *channels: str) -> RespConn:
    conn = as_user(node)
    conn.send(b"".join(encode("SUBSCRIBE", ch) for ch in channels))
    for ch in channels:
        assert conn.read_reply()[:2] == [b"subscribe", ch.encode()], node.name
    return conn


def test_channel_rules_are_synced_and_a_revoke_drops_subscribers_on_every_node(march_cluster: MarchCluster) -> None:
    primary, standbys = settled(march_cluster)
    rules = ["on", f">{APP_PASS}", "resetchannels", "&news.*", "&+switch-master", "+@app"]
    with RespConn(standbys[0].port) as adm:
        assert adm.call("ACL", "SETUSER", "app", *rules) == "OK"
        line = next(u for u in adm.call("ACL", "LIST") if u.startswith(b"user app "))
    assert line.endswith(b" resetchannels &news.* &+switch-master -@all +@app"), line
    for n in march_cluster.nodes:
        wait_authenticates(n, "app", APP_PASS, timeout=10)
        with RespConn(n.port) as adm:
            assert next(u for u in adm.call("ACL", "LIST") if u.startswith(b"user app ")) == line, n.name
        with as_user(n) as c:
            assert c.call("SUBSCRIBE", "other") == RespError(errors.NOPERM_CHANNEL), n.name

    news = [subscribed(n, "news.eu") for n in march_cluster.nodes]
    sentinel = [subscribed(n, "+switch-master") for n in march_cluster.nodes]
    try:
        with RespConn(primary.port) as adm:  # revoked on the primary: every node drops news.eu's listeners
            assert adm.call("ACL", "SETUSER", "app", "resetchannels", "&+switch-master") == "OK"
        for n, c in zip(march_cluster.nodes, news, strict=True):
            assert c.is_closed_by_peer(10), f"a subscriber to a revoked channel stayed on {n.name}"
        for n, c in zip(march_cluster.nodes, sentinel, strict=True):
            assert c.call("PING") == [b"pong", b""], f"a subscriber to an allowed channel was dropped on {n.name}"
    finally:
        for c in news + sentinel:
            c.close()
