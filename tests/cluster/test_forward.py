"""Forwarding (``--redirect forward``) on a real etcd and three march processes.

One cluster for the module (three nodes cost seconds to start), each test leaving it as it found
it, the destructive one last:

- a plain ``redis.Redis`` on a standby (RESP3 and RESP2) draws IDs that increase with those drawn
  on the primary; a pipeline's replies come in its order (also one that mixes forwarded requests,
  the standby's own and a forwarded MULTI/EXEC in one read); MULTI/EXEC is forwarded whole, and a
  transaction that mixes this node's commands with another primary's keys is refused at EXEC;
- ``MARCH.LINK`` (the links' internal command) is refused to a normal client, and a wrong proof is
  refused (WRONGPASS, counted); the links show as ``march-link:<node>`` in the primary's CLIENT LIST;
- ACLs are checked where the client is connected (a user without ``+incr`` is refused by the
  standby itself) and the request runs as that user on the primary (no ``SEQ.CREATE``: no new key);
- ``GET /ready`` answers 200 on every node while a primary is reachable; when the primary is
  ``kill -9``ed while a forwarded INCR waits on it (SIGSTOPped first), the client gets the
  lost-reply error, the standbys say 503 until a new primary is reachable, and the IDs drawn after
  that are above every earlier one (no duplicate);
- with ``tls_cluster`` (a cluster of its own) the links go to the primary's TLS port.

Every process is stopped by the module's fixture (or the TLS test's own); waits are conditions with deadlines.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from march_harness.cluster import ClusterNode, MarchCluster, parse_info
from march_harness.etcd import EtcdCluster
from march_harness.ports import free_port
from march_harness.resp import RespConn, RespError, encode, wait_until
from march_harness.tls import make_certs, openssl_binary

from march import errors

pytestmark = pytest.mark.e2e

SECRET = "forward-test-secret"
FORWARD = ["--redirect", "forward", "--cluster-secret", SECRET]
METRICS: dict[str, int] = {}  # node id -> its metrics port (GET /ready)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, etcd_bin: str) -> Iterator[MarchCluster]:
    base = tmp_path_factory.mktemp("forward")
    etcd = EtcdCluster(base / "etcd", size=1, binary=etcd_bin)
    etcd.start()
    march = MarchCluster(base / "march", etcd.endpoints, extra_args=FORWARD)
    for node in march.nodes:
        METRICS[node.node_id] = free_port()
        node.extra_args += ["--metrics-port", str(METRICS[node.node_id])]
    try:
        march.start()
        march.wait_settled(timeout=20)
        yield march
    finally:
        march.stop()
        etcd.stop()


def ready(node: ClusterNode) -> int:
    """The status of the node's ``GET /ready`` (0: no answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{METRICS[node.node_id]}/ready", timeout=2) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def standby_of(cluster: MarchCluster) -> tuple[ClusterNode, ClusterNode]:
    primary = cluster.wait_settled(timeout=20)
    return primary, next(n for n in cluster.nodes if n is not primary and n.alive)


def test_plain_clients_on_a_standby(cluster: MarchCluster) -> None:
    primary, standby = standby_of(cluster)
    last = 0
    for protocol in (3, 2):
        with redis.Redis(port=standby.port, protocol=protocol) as r, redis.Redis(port=primary.port) as p:
            for _ in range(50):
                here, there = int(r.incr("fw")), int(p.incr("fw"))
                assert last < here < there
                last = there
            assert int(r.get("fw") or 0) >= last  # GET: the watermark, from the primary
            # a pipeline: replies in its order, each key's IDs increasing
            pipe = r.pipeline(transaction=False)
            for _ in range(20):
                pipe.incr("fw").incr("fw2").incrby("fw", 5)
            replies = [int(x) for x in pipe.execute()]
            fw = [v for i, v in enumerate(replies) if i % 3 != 1]
            fw2 = replies[1::3]
            assert fw == sorted(fw) and len(set(fw)) == len(fw) and fw[0] > last
            assert fw2 == sorted(fw2) and len(set(fw2)) == 20
            assert all(b - a >= 5 for a, b in zip(replies[0::3], replies[2::3], strict=True))  # INCRBY 5 after INCR
            last = fw[-1]
            # MULTI/EXEC forwarded whole: one transaction, its replies together
            tx = r.pipeline(transaction=True)
            tx.incr("fw").incr("fw").incrby("fw", 3)
            a, b, c = (int(x) for x in tx.execute())
            assert last < a < b < c and c - b == 3
            last = c
            # this node's own commands and another primary's keys in one transaction: refused, nothing ran
            mixed = r.pipeline(transaction=True)
            mixed.incr("fw").ping()
            with pytest.raises(redis.exceptions.ExecAbortError, match="different primaries"):
                mixed.execute()
            assert int(p.incr("fw")) > last
            last = int(p.incr("fw"))
    # one read mixing forwarded requests, this node's own (PING, ECHO) and a forwarded transaction
    with RespConn(standby.port) as c:
        mixed = [("INCR", "fw"), ("PING",), ("MULTI",), ("INCR", "fw"), ("EXEC",), ("ECHO", "e"), ("INCR", "fw")]
        mixed += [("HELLO", "3"), ("INCR", "fw")]  # (now on a RESP3 link: still after the ones before)
        c.send(b"".join(encode(*request) for request in mixed))
        replies = [c.read_reply() for _ in mixed]
        assert replies[1:4] == ["PONG", "OK", "QUEUED"] and replies[5] == b"e"
        ids = [replies[0], *replies[4], replies[6], replies[8]]
        assert last < ids[0] < ids[1] < ids[2] < ids[3], replies
    stats = parse_info(standby.call("INFO", "stats"))  # type: ignore[arg-type]
    assert int(stats["forwarded_requests"]) >= 200 and stats["forward_lost_replies"] == "0"
    links = [line for line in str(primary.call("CLIENT", "LIST")).splitlines() if "lib-name=march-link" in line]
    assert any(f"name=march-link:{standby.node_id} " in line for line in links), links


def test_the_link_command_is_for_nodes_only(cluster: MarchCluster) -> None:
    primary = cluster.wait_settled(timeout=20)
    with RespConn(primary.port) as c:
        assert isinstance(c.call("MARCH.LINK", "AS", "default"), RespError)  # no link: unknown command
        assert c.call("COMMAND", "INFO", "march.link") == [None]
        nonce = c.call("MARCH.LINK", "HELLO")
        assert isinstance(nonce, bytes) and len(nonce) == 32
        guess = ("MARCH.LINK", "AUTH", "intruder", primary.node_id, "ab" * 16, "00" * 32, 2)
        assert c.call(*guess) == RespError(errors.WRONGPASS)
        assert isinstance(c.call("1", "default", "INCR", "x"), RespError)  # still no link: no lanes
        assert "ERR unknown command" in str(c.call(*guess))  # one answer per nonce
    assert int(parse_info(primary.call("INFO", "stats"))["acl_access_denied_auth"]) >= 1  # type: ignore[arg-type]


def test_acl_is_checked_at_the_entry_node(cluster: MarchCluster) -> None:
    primary, standby = standby_of(cluster)
    assert primary.call("ACL", "SETUSER", "reader", "on", ">rpass", "~*", "+get", "+hello") == "OK"
    assert primary.call("ACL", "SETUSER", "drawer", "on", ">dpass", "~*", "+incr", "+incrby", "+hello") == "OK"
    assert primary.call("INCR", "known") is not None
    for user, password in (("reader", "rpass"), ("drawer", "dpass")):
        wait_until(lambda u=user, pw=password: _auth(standby, u, pw), 5, 0.02, f"{user} on the standby")
    with redis.Redis(port=standby.port, username="reader", password="rpass") as r:
        with pytest.raises(redis.exceptions.NoPermissionError):
            r.incr("known")
        assert int(r.get("known") or 0) >= 1
    denials = standby.call("ACL", "LOG")  # refused by the standby itself, and recorded there
    assert any(b"incrby" in entry and b"reader" in entry for entry in denials), denials  # type: ignore[attr-defined]
    with redis.Redis(port=standby.port, username="drawer", password="dpass") as r:
        assert int(r.incr("known")) > 1
        with pytest.raises(redis.exceptions.NoPermissionError, match="create"):  # checked on the primary, as drawer
            r.incr("never-created")


def _auth(node: ClusterNode, user: str, password: str) -> bool:
    with RespConn(node.port, timeout=2.0) as c:
        return bool(c.call("AUTH", user, password) == "OK")


def test_ready_and_a_lost_reply(cluster: MarchCluster) -> None:
    primary, standby = standby_of(cluster)
    for node in cluster.nodes:
        wait_until(lambda n=node: ready(n) == 200, 5, 0.02, f"{node.name} ready")
    with redis.Redis(port=standby.port) as r:
        before = int(r.incr("lost"))
        sent = int(_info(standby)["forwarded_requests"])
        primary.pause()  # the forwarded INCR is written to the link and waits there
        outcome: list[object] = []
        waiter = threading.Thread(target=lambda: outcome.append(_incr(standby)))
        waiter.start()
        wait_until(lambda: int(_info(standby)["forwarded_requests"]) > sent, 5, 0.02, "the INCR forwarded")
        cluster.kill(primary)  # the link breaks before the reply
        primary.paused = False
        waiter.join(10)
        assert outcome and isinstance(outcome[0], redis.exceptions.ResponseError)
        assert "may have run" in str(outcome[0])
        assert int(_info(standby)["forward_lost_replies"]) == 1
        wait_until(lambda: ready(standby) == 503, 5, 0.02, "the standby not ready")
        new = cluster.wait_primary(timeout=20, exclude=[primary])
        wait_until(lambda: ready(standby) == 200 and ready(new) == 200, 20, 0.05, "ready again")
        after = int(wait_until(lambda: _try_incr(r), 10, 0.05, "an ID through the standby"))
        assert after > before
    for node in (n for n in cluster.nodes if n.alive):  # a plain client on each node in turn: still increasing
        with redis.Redis(port=node.port) as each:
            drawn = int(each.incr("lost"))
            assert drawn > after
            after = drawn


def _info(node: ClusterNode) -> dict[str, str]:
    return parse_info(node.call("INFO", "stats"))  # type: ignore[arg-type]


def _incr(node: ClusterNode) -> object:
    try:
        with redis.Redis(port=node.port, socket_timeout=15) as c:
            return c.incr("lost")
    except redis.exceptions.RedisError as exc:
        return exc


def _try_incr(r: redis.Redis) -> int | None:
    try:
        return int(r.incr("lost"))
    except redis.exceptions.ResponseError:
        return None


def test_tls_links(tmp_path: Path, etcd: EtcdCluster) -> None:
    """With ``tls_cluster`` the links go to the primary's TLS port (its certificate checked, the
    node's client certificate shown); a plain client and a TLS client of a standby get IDs."""
    if openssl_binary() is None:
        pytest.skip("openssl not found on PATH")
    certs = make_certs(tmp_path / "certs")
    links = ["--tls-cluster", "yes", "--tls-client-cert-file", certs.client_cert]
    links += ["--tls-client-key-file", certs.client_key]
    cluster = MarchCluster(tmp_path / "march", etcd.endpoints, extra_args=FORWARD + links)
    tls_ports: dict[str, int] = {}
    for node in cluster.nodes:
        tls_ports[node.node_id] = free_port()
        node.extra_args += certs.server_args("yes", tls_ports[node.node_id])
    try:
        cluster.start()
        primary, standby = standby_of(cluster)
        tls_client = redis.Redis(port=tls_ports[standby.node_id], **certs.redis_py_kwargs())  # type: ignore[arg-type]
        with redis.Redis(port=standby.port) as plain, redis.Redis(port=primary.port) as p, tls_client as tls:
            ids = [int(plain.incr("t")), int(tls.incr("t")), int(p.incr("t")), int(plain.incr("t"))]
        assert ids == sorted(ids) and len(set(ids)) == 4
        listed = str(primary.call("CLIENT", "LIST")).splitlines()
        links_in = [line for line in listed if "lib-name=march-link" in line]
        assert links_in and all(f"laddr=127.0.0.1:{tls_ports[primary.node_id]} " in line for line in links_in)
    finally:
        cluster.stop()
