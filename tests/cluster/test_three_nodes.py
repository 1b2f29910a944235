"""Cluster mode end to end: three march processes on a real etcd, real clients.

One primary is elected and every node reports the same topology (CLUSTER SLOTS/NODES/SHARDS/INFO,
INFO replication); standbys answer key commands with MOVED to the primary and serve everything
else; redis-py ``RedisCluster`` and ``redis-cli -c`` pointed at any node get IDs; FAILOVER moves
the primary role with IDs continuing above; a primary whose leader key is taken stops handing out
IDs. Faults under load (kill -9, SIGSTOP, cut links, etcd leader loss) are the drills
(test_cluster_drills.py, marker fault).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from pathlib import Path

import pytest
import redis
from march_harness.cluster import ClusterNode, MarchCluster
from march_harness.etcd import EtcdCluster
from march_harness.resp import RespConn, RespError
from march_harness.servers import MarchServer, RedisServer
from redis.cluster import RedisCluster

from march.cluster.slots import crc16, key_slot
from march.etcd.grpc_etcd import GrpcEtcd

pytestmark = pytest.mark.e2e

KEYS_AND_SLOTS = [(b"foo", 12182), (b"{user1000}.following", 3443), (b"user1000", 3443), (b"a", 15495)]


def settled(cluster: MarchCluster) -> tuple[ClusterNode, list[ClusterNode]]:
    primary = cluster.wait_settled(timeout=20)
    return primary, [n for n in cluster.nodes if n is not primary]


def wait_for(cond: object, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)  # polling a condition with a deadline


def test_slot_function_matches_redis_cluster() -> None:
    for key, slot in KEYS_AND_SLOTS:
        assert key_slot(key) == slot
    assert key_slot(b"foo{}{bar}") == crc16(b"foo{}{bar}") % 16384  # an empty first tag: the whole key
    assert key_slot(b"foo{bar") == crc16(b"foo{bar") % 16384  # no closing brace: the whole key
    assert key_slot(b"x{a}{b}") == key_slot(b"a")  # only the first tag counts


def test_every_node_reports_the_same_primary(march_cluster: MarchCluster) -> None:
    primary, standbys = settled(march_cluster)
    slots = [n.call("CLUSTER", "SLOTS") for n in march_cluster.nodes]
    assert all(s == slots[0] for s in slots), slots
    [[first, last, owner, *replicas]] = slots[0]  # type: ignore[misc]
    assert (first, last) == (0, 16383)
    assert owner[:2] == [b"127.0.0.1", primary.port]
    assert sorted(r[1] for r in replicas) == sorted(n.port for n in standbys)
    ids = {n.call("CLUSTER", "MYID") for n in march_cluster.nodes}
    assert len(ids) == 3 and all(re.fullmatch(rb"[0-9a-f]{40}", i) for i in ids)  # type: ignore[arg-type]
    for n in march_cluster.nodes:
        text = n.call("CLUSTER", "NODES")
        assert isinstance(text, bytes)
        lines = text.decode().splitlines()
        assert len(lines) == 3
        masters = [line for line in lines if " master " in line or ",master " in line]
        assert len(masters) == 1 and masters[0].endswith(" 0-16383") and f":{primary.port}@" in masters[0]
        assert sum("myself" in line for line in lines) == 1
        info = n.call("CLUSTER", "INFO")
        assert isinstance(info, bytes) and b"cluster_state:ok\r\n" in info
        shards = n.call("CLUSTER", "SHARDS")
        assert isinstance(shards, list) and len(shards) == 1
    assert primary.info()["role"] == "master"  # type: ignore[index]
    for s in standbys:
        assert s.master_address() == primary.address
    with RespConn(standbys[0].port) as c:
        hello = c.call("HELLO", "3")
        assert hello[b"mode"] == b"cluster" and hello[b"role"] == b"replica"
        assert c.call("INFO", "cluster").startswith(b"# Cluster\r\ncluster_enabled:1\r\n")


def test_standby_redirects_key_commands_and_serves_the_rest(march_cluster: MarchCluster) -> None:
    primary, standbys = settled(march_cluster)
    moved = f"MOVED {{}} 127.0.0.1:{primary.port}"
    with RespConn(standbys[0].port) as c:
        for key, slot in KEYS_AND_SLOTS:
            assert c.call("INCR", key) == RespError(moved.format(slot))
            assert c.call("CLUSTER", "KEYSLOT", key) == slot
        for cmd in (["GET", "a"], ["SET", "a", "5"], ["SEQ.INFO", "a"], ["MGET", "a", "b"], ["INCRBY", "a", "2"]):
            assert c.call(*cmd) == RespError(moved.format(15495)), cmd
        for cmd in (["KEYS", "*"], ["DBSIZE"], ["SCAN", "0"], ["SEQ.LIST"]):
            assert c.call(*cmd) == RespError(moved.format(0)), cmd
        assert c.call("PING") == "PONG"
        assert c.call("READONLY") == "OK" and c.call("READWRITE") == "OK" and c.call("ASKING") == "OK"
        assert c.call("INCR", "a") == RespError(moved.format(15495))  # READONLY changes nothing for IDs
        assert c.call("MULTI") == "OK"
        assert c.call("INCR", "a") == RespError(moved.format(15495))
        assert isinstance(c.call("EXEC"), RespError)  # EXECABORT: nothing ran
        assert c.call("CLUSTER", "KEYSLOT") == RespError("ERR wrong number of arguments for 'cluster|keyslot' command")
    with RespConn(primary.port) as c:
        assert c.call("INCR", "a") == 1
        assert c.call("GET", "a") == b"1"


def test_cluster_clients_get_ids_from_any_node(march_cluster: MarchCluster) -> None:
    primary, standbys = settled(march_cluster)
    last = 0
    for node in [*standbys, primary]:
        rc = RedisCluster(host="127.0.0.1", port=node.port)
        try:
            for _ in range(50):
                value = rc.incr("orders")
                assert value > last
                last = value
        finally:
            rc.close()
    out = subprocess.run(
        ["redis-cli", "-c", "-p", str(standbys[0].port), "INCR", "orders"], capture_output=True, timeout=10, text=True
    )
    assert out.returncode == 0 and int(out.stdout) > last


def test_failover_hands_the_primary_role_over(march_cluster: MarchCluster) -> None:
    primary, standbys = settled(march_cluster)
    with RespConn(primary.port) as c:
        before = c.call("INCRBY", "k", 100)
        assert c.call("FAILOVER", "TO", "127.0.0.1", "1") == RespError(
            "ERR FAILOVER target HOST and PORT is not a replica."
        )
        assert c.call("FAILOVER", "ABORT") == RespError("ERR No failover in progress.")
        assert c.call("FAILOVER", "TIMEOUT", "x") == RespError("ERR value is not an integer or out of range")
        assert c.call("FAILOVER", "NOW") == RespError("ERR syntax error")
    with RespConn(standbys[0].port) as c:
        assert c.call("FAILOVER") == RespError("ERR FAILOVER is not valid when server is a replica.")
    target = standbys[1]
    assert primary.call("FAILOVER", "TO", "127.0.0.1", target.port, "TIMEOUT", 10000, timeout=15) == "OK"
    assert march_cluster.wait_settled(timeout=10) is target
    with RespConn(primary.port) as c:
        assert c.call("INCR", "k") == RespError(f"MOVED {key_slot(b'k')} 127.0.0.1:{target.port}")
    with RespConn(target.port) as c:
        assert c.call("INCR", "k") > before  # type: ignore[operator]
    assert target.call("FAILOVER", timeout=15) == "OK"  # to the first standby, whichever it is
    assert march_cluster.wait_settled(timeout=10) is not target


def test_a_primary_whose_leader_key_is_taken_stops_at_once(march_cluster: MarchCluster) -> None:
    primary, _ = settled(march_cluster)
    with RespConn(primary.port) as c:
        last = c.call("INCR", "x")
    leader_key = f"{march_cluster.prefix}/leader".encode()
    endpoint = primary.etcd.split(",")

    async def steal(value: bytes | None) -> None:
        client = GrpcEtcd(endpoint)
        try:
            if value is None:
                await client.delete(leader_key)
            else:
                await client.put(leader_key, value)
        finally:
            await client.close()

    asyncio.run(steal(b"intruder"))  # same key, new value: the old guard no longer matches
    wait_for(lambda: all(n.role() == "slave" for n in march_cluster.nodes), "every node to step down")
    for n in march_cluster.nodes:
        with RespConn(n.port) as c:
            reply = c.call("INCR", "x")
            assert isinstance(reply, RespError) and reply.prefix in ("TRYAGAIN", "CLUSTERDOWN"), reply
    asyncio.run(steal(None))  # the intruder goes: the cluster elects a primary again
    primary = march_cluster.wait_settled(timeout=20)
    with RespConn(primary.port) as c:
        assert c.call("INCR", "x") > last  # type: ignore[operator]


def test_single_node_answers_cluster_commands_as_redis_does(
    march_server: MarchServer, redis_server: RedisServer
) -> None:
    with RespConn(march_server.port) as m, RespConn(redis_server.port) as r:
        for cmd in (
            ["CLUSTER", "SLOTS"],
            ["CLUSTER", "KEYSLOT", "foo"],
            ["CLUSTER", "NOPE"],
            ["READONLY"],
            ["FAILOVER"],
            ["FAILOVER", "ABORT"],
            ["FAILOVER", "NOW"],
        ):
            assert m.call(*cmd) == r.call(*cmd), cmd


def test_redis_cli_cluster_mode_follows_moved(march_cluster: MarchCluster, tmp_path: Path) -> None:
    _, standbys = settled(march_cluster)
    script = "\n".join(["INCR seq"] * 5) + "\n"
    out = subprocess.run(
        ["redis-cli", "-c", "-p", str(standbys[1].port)], input=script, capture_output=True, timeout=10, text=True
    )
    lines = out.stdout.splitlines()
    assert any(line.startswith("-> Redirected to slot") for line in lines), lines
    values = [int(v) for v in lines if v.isdigit()]
    assert len(values) == 5 and values == sorted(values) and len(set(values)) == 5, lines


def test_redis_py_sees_moved_as_a_redirect(march_cluster: MarchCluster) -> None:
    primary, standbys = settled(march_cluster)
    plain = redis.Redis(port=standbys[0].port)
    try:
        with pytest.raises(redis.exceptions.MovedError) as moved:
            plain.incr("a")
        assert (moved.value.slot_id, moved.value.host, moved.value.port) == (15495, "127.0.0.1", primary.port)
    finally:
        plain.close()


def test_nodes_start_in_any_order_with_etcd_late(tmp_path: Path, etcd_bin: str) -> None:
    """Nodes started before etcd is up keep trying and elect a primary once it is."""
    etcd = EtcdCluster(tmp_path / "etcd", size=1, binary=etcd_bin)
    cluster = MarchCluster(tmp_path / "march", etcd.endpoints, size=2)
    try:
        for n in cluster.nodes:
            n.start()  # answers PING before it can reach etcd
            assert n.call("INCR", "a") == RespError("CLUSTERDOWN The cluster is down")
        etcd.start()
        primary = cluster.wait_settled(timeout=20)
        assert primary.call("INCR", "a") == 1
    finally:
        cluster.stop()
        etcd.stop()
