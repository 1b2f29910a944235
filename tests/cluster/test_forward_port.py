"""The forwarding port (``forward_port``): a second client port that serves every key by forwarding,
named by Sentinel replies, beside a RESP port that keeps answering MOVED; and ``link_address``.

One cluster for the module, as the README's (three nodes, three groups: each node the primary of
one; a forwarding port on each), with a password, each test leaving it as it found it, the
destructive one last:

- on every node the RESP port answers a key of another node's group with MOVED (cluster clients
  need it) and the forwarding port serves it, IDs increasing per key across both;
- every address a Sentinel reply gives for a data node (GET-MASTER-ADDR-BY-NAME, MASTERS, REPLICAS,
  ROLE) is the forwarding port (group 0's primary's for the master), the sentinels themselves are
  the RESP ports; redis-py's ``Sentinel`` finds it and draws keys of every group through it;
- the port's doors are the RESP port's: no password, NOAUTH; a wrong one, WRONGPASS; a user without
  ``+incr``, NOPERM from the node it is connected to, nothing forwarded; its connections count
  toward the one max_clients;
- a node with a forwarding port is ready (``march_ready``) once it holds links to the primaries it
  forwards to, though its RESP port still answers MOVED;
- ``+switch-master`` after a ``kill -9`` of group 0's primary names the old and new forwarding ports.

Then, on a cluster of its own, ``link_address``: nodes whose advertised address nobody listens at
(as a container's published address is, seen from another container) forward through the
addresses they link at.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from march_harness.cluster import ClusterNode, MarchCluster, parse_info
from march_harness.etcd import EtcdCluster
from march_harness.ports import free_port
from march_harness.resp import RespConn, RespError, wait_until
from redis.sentinel import Sentinel

from march import errors
from march.cluster.directory import NodeInfo

pytestmark = pytest.mark.e2e

PASSWORD = "forward-port-pw"
KEYS = {"orders": 0, "payments": 1, "invoices": 2}  # key -> its group of three (slots 105, 8507, 13262)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, etcd_bin: str) -> Iterator[MarchCluster]:
    base = tmp_path_factory.mktemp("forward-port")
    etcd = EtcdCluster(base / "etcd", size=1, binary=etcd_bin)
    etcd.start()
    march = MarchCluster(
        base / "march",
        etcd.endpoints,
        groups=3,
        forward=True,
        password=PASSWORD,
        extra_args=["--requirepass", PASSWORD],
    )
    try:
        march.start()
        march.wait_leaders(20, spread=True)
        yield march
    finally:
        march.stop()
        etcd.stop()


def call(port: int, *args: str | int, password: str | None = PASSWORD) -> object:
    with RespConn(port, timeout=5.0) as c:
        if password is not None:
            assert c.call("AUTH", password) == "OK"
        return c.call(*args)


def test_the_resp_port_moves_and_the_forwarding_port_serves_every_key(cluster: MarchCluster) -> None:
    leaders = cluster.wait_leaders(20, spread=True)
    last = dict.fromkeys(KEYS, 0)
    for node in cluster.nodes:
        assert node.forward_port
        for key, group in KEYS.items():
            here = call(node.port, "INCR", key)
            if leaders[group] is node:
                assert isinstance(here, int) and here > last[key], (node.node_id, key, here)
                last[key] = here
            else:
                assert isinstance(here, RespError) and here.prefix == "MOVED", (node.node_id, key, here)
                assert here.message.endswith(f" {leaders[group].address}")  # the RESP address, for cluster clients
            there = call(node.forward_port, "INCR", key)
            assert isinstance(there, int) and there > last[key], (node.node_id, key, there)
            last[key] = there
        with redis.Redis(port=node.forward_port, password=PASSWORD) as r:  # a pipeline: replies in its order
            pipe = r.pipeline(transaction=False)
            for key in KEYS:
                pipe.incr(key).incr(key)
            replies = [int(x) for x in pipe.execute()]
        for i, key in enumerate(KEYS):
            a, b = replies[2 * i : 2 * i + 2]
            assert last[key] < a < b, (key, replies)
            last[key] = b
    with redis.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port, password=PASSWORD) as rc:
        for key in KEYS:  # a cluster client on the RESP ports: above what the forwarding ports drew
            assert int(rc.incr(key)) > last[key]


def test_sentinel_replies_name_the_forwarding_ports(cluster: MarchCluster) -> None:
    leaders = cluster.wait_leaders(20, spread=True)
    primary = leaders[0]  # group 0's: the master
    others = [n for n in cluster.nodes if n is not primary]
    assert primary.forward_port and all(n.forward_port for n in others)
    for node in cluster.nodes:
        for port in (node.port, node.forward_port):  # asked on either port
            assert call(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "march") == [
                b"127.0.0.1", str(primary.forward_port).encode()
            ]  # fmt: skip
        master = call(node.port, "SENTINEL", "MASTER", "march")
        assert isinstance(master, list)
        fields = dict(zip(master[0::2], master[1::2], strict=True))
        assert (fields[b"ip"], fields[b"port"], fields[b"flags"]) == (
            b"127.0.0.1", str(primary.forward_port).encode(), b"master"
        )  # fmt: skip
        replicas = call(node.port, "SENTINEL", "REPLICAS", "march")
        assert isinstance(replicas, list)
        shown = {(dict(zip(r[0::2], r[1::2], strict=True))[b"port"]) for r in replicas}
        assert shown == {str(n.forward_port).encode() for n in others}
        for r in replicas:
            entry = dict(zip(r[0::2], r[1::2], strict=True))
            assert entry[b"master-port"] == str(primary.forward_port).encode()
        sentinels = call(node.port, "SENTINEL", "SENTINELS", "march")  # where the application listed them
        assert isinstance(sentinels, list)
        listed = {int(dict(zip(s[0::2], s[1::2], strict=True))[b"port"]) for s in sentinels}
        assert listed == {n.port for n in cluster.nodes if n is not node}
        info = parse_info(call(node.port, "INFO", "cluster"))  # type: ignore[arg-type]
        assert info["march_forward_address"] == node.forward_address
    standbys = [[b"127.0.0.1", str(n.forward_port).encode(), b"0"] for n in sorted(others, key=lambda n: n.node_id)]
    assert call(primary.port, "ROLE") == [b"master", 0, standbys]
    for node in others:
        assert call(node.port, "ROLE") == [b"slave", b"127.0.0.1", primary.forward_port, b"connected", 0]
    sentinel = Sentinel(
        [("127.0.0.1", n.port) for n in cluster.nodes], password=PASSWORD, sentinel_kwargs={"password": PASSWORD}
    )
    assert sentinel.discover_master("march") == ("127.0.0.1", primary.forward_port)
    assert set(sentinel.discover_slaves("march")) == {("127.0.0.1", n.forward_port) for n in others}
    master = sentinel.master_for("march")
    drawn = {key: [int(master.incr(key)) for _ in range(3)] for key in KEYS}  # every group, no MOVED
    assert all(ids == sorted(set(ids)) for ids in drawn.values()), drawn
    master.close()


def test_the_forwarding_port_keeps_the_doors(cluster: MarchCluster) -> None:
    leaders = cluster.wait_leaders(20, spread=True)
    node = next(n for n in cluster.nodes if n is not leaders[0])  # orders is forwarded from here
    assert node.forward_port
    with RespConn(node.forward_port) as c:  # a stranger
        assert c.call("INCR", "orders") == RespError(errors.NOAUTH)
        assert c.call("AUTH", "wrong") == RespError(errors.WRONGPASS)
        assert c.call("INCR", "orders") == RespError(errors.NOAUTH)
    assert call(node.port, "ACL", "SETUSER", "reader", "on", ">rpass", "~*", "+get", "+hello") == "OK"
    wait_until(lambda: call(node.forward_port, "PING", password=None) is not None, 5)
    wait_until(lambda: _auth(node.forward_port, "reader", "rpass"), 5, 0.02, "reader known on the node")
    sent = int(_stats(node)["forwarded_requests"])
    with redis.Redis(port=node.forward_port, username="reader", password="rpass") as r:
        with pytest.raises(redis.exceptions.NoPermissionError):  # refused here, never forwarded
            r.incr("orders")
        assert int(r.get("orders") or 0) >= 1  # what it may do is forwarded
    assert int(_stats(node)["forwarded_requests"]) == sent + 1
    denials = call(node.port, "ACL", "LOG")
    assert any(b"reader" in entry for entry in denials), denials  # type: ignore[attr-defined]
    # One max_clients for both ports: with room for one more client, a connection to the forwarding
    # port takes it, and the RESP port refuses the next.
    wait_until(lambda: parse_info(call(node.port, "INFO", "cluster"))["march_ready"] == "1", 10)  # type: ignore[arg-type]
    with RespConn(node.port) as admin:
        assert admin.call("AUTH", PASSWORD) == "OK"
        connected = int(parse_info(admin.call("INFO", "clients"))["connected_clients"])  # type: ignore[arg-type]
        old = admin.call("CONFIG", "GET", "maxclients")
        assert admin.call("CONFIG", "SET", "maxclients", str(connected + 1)) == "OK"
        try:
            with RespConn(node.forward_port) as taken:
                assert taken.call("PING") == RespError(errors.NOAUTH)  # in, and asked for a password
                with RespConn(node.port) as refused:
                    assert refused.read_reply() == RespError(errors.MAX_CLIENTS)
        finally:
            assert isinstance(old, list)
            assert admin.call("CONFIG", "SET", "maxclients", old[1]) == "OK"
    call(node.port, "ACL", "DELUSER", "reader")


def _auth(port: int, user: str, password: str) -> bool:
    with RespConn(port, timeout=2.0) as c:
        return bool(c.call("AUTH", user, password) == "OK")


def _stats(node: ClusterNode) -> dict[str, str]:
    return parse_info(call(node.port, "INFO", "stats"))  # type: ignore[arg-type]


def test_every_node_with_a_forwarding_port_is_ready(cluster: MarchCluster) -> None:
    """Its RESP port answers MOVED (``redirect moved``), but its forwarding port serves every key:
    ready once it holds a link to each primary it forwards to."""
    for node in cluster.nodes:
        wait_until(
            lambda n=node: parse_info(call(n.port, "INFO", "cluster"))["march_ready"] == "1",  # type: ignore[arg-type]
            10,
            0.05,
            f"{node.node_id} ready",
        )
        info = parse_info(call(node.port, "INFO", "cluster"))  # type: ignore[arg-type]
        assert info["march_redirect"] == "moved" and info["march_not_ready_because"] == ""


def test_switch_master_names_the_forwarding_ports(cluster: MarchCluster) -> None:
    """What a listening Sentinel client hears when group 0's primary dies: the forwarding ports."""
    old = cluster.wait_leaders(20, spread=True)[0]
    standby = next(n for n in cluster.nodes if n is not old)
    conn = redis.Redis(port=standby.port, password=PASSWORD)
    channel = conn.pubsub()
    channel.subscribe("+switch-master")
    assert channel.get_message(timeout=5) is not None
    try:
        cluster.kill(old)
        new = cluster.wait_leaders(20, exclude=[old])[0]
        expected = f"march 127.0.0.1 {old.forward_port} 127.0.0.1 {new.forward_port}".encode()
        deadline = time.monotonic() + 15
        message = None
        while message is None and time.monotonic() < deadline:
            message = channel.get_message(ignore_subscribe_messages=True, timeout=1)
        assert message is not None and message["data"] == expected, message
        sentinel = Sentinel(
            [("127.0.0.1", n.port) for n in cluster.nodes if n is not old],
            password=PASSWORD,
            sentinel_kwargs={"password": PASSWORD},
        )
        assert sentinel.discover_master("march") == ("127.0.0.1", new.forward_port)
    finally:
        channel.close()
        conn.close()
        cluster.restart(old)


# --- link_address ---------------------------------------------------------------------------------


class Published(ClusterNode):
    """A node that advertises an address nobody listens at (as a container's published address is,
    seen from another container), and takes links at its own (``--link-address``)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.published = free_port()  # free: nothing listens there

    def command(self) -> list[str]:
        cmd = super().command()
        cmd[cmd.index("--advertise") + 1] = f"127.0.0.1:{self.published}"
        return [*cmd, "--link-address", self.address]


def test_links_go_to_the_link_address(tmp_path: Path, etcd: EtcdCluster) -> None:
    cluster = MarchCluster(tmp_path / "march", etcd.endpoints, groups=3, forward=True)
    cluster.nodes = [
        Published(
            n.data_dir,
            node_id=n.node_id,
            etcd=n.etcd,
            prefix=n.prefix,
            lease_ttl=n.lease_ttl,
            extra_args=n.extra_args,
            log_path=n.log_path,
            forward_port=n.forward_port,
        )
        for n in cluster.nodes
    ]
    try:
        cluster.start_nodes(cluster.nodes)

        def every_key_everywhere() -> bool:
            for node in cluster.nodes:
                assert node.forward_port
                for key in KEYS:
                    if not isinstance(call(node.forward_port, "INCR", key, password=None), int):
                        return False
            return True

        wait_until(every_key_everywhere, 30, 0.1, "every key through every forwarding port")
        for node in cluster.nodes:  # clients are told the advertised host, at the forwarding port
            master = call(node.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "march", password=None)
            assert master in [[b"127.0.0.1", str(n.forward_port).encode()] for n in cluster.nodes], master
            assert int(_stats_of(node)["forward_link_failures"]) == 0
    finally:
        cluster.stop()


def _stats_of(node: ClusterNode) -> dict[str, str]:
    return parse_info(call(node.port, "INFO", "stats", password=None))  # type: ignore[arg-type]


# --- the node record's addresses ------------------------------------------------------------------


def test_what_sentinel_replies_and_links_use_of_a_node_record() -> None:
    plain = NodeInfo("n1", "10.0.0.1:7001")
    full = NodeInfo(
        "n2",
        "10.0.0.2:7001",
        tls_addr="10.0.0.2:7443",
        forward_addr="10.0.0.2:7101",
        link_addr="march2:7379",
        link_tls_addr="march2:7443",
    )
    assert plain.for_sentinel(False).addr == plain.for_sentinel(True).addr == "10.0.0.1:7001"
    assert full.for_sentinel(False).addr == "10.0.0.2:7101"  # the port that serves every key
    assert full.for_sentinel(True).addr == "10.0.0.2:7443"  # a TLS client: the TLS port (no TLS forwarding port)
    assert (plain.link(False), plain.link(True)) == ("10.0.0.1:7001", "10.0.0.1:7001")
    assert (full.link(False), full.link(True)) == ("march2:7379", "march2:7443")
