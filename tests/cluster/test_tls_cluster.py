"""TLS in cluster mode: three march nodes on a real etcd, each with its own TLS port beside its
plain port (client certificates required), certificates from ``march_harness.tls``.

A client connected over TLS is told about TLS addresses: CLUSTER SLOTS, SHARDS and NODES name
the TLS ports and a standby's MOVED names the primary's TLS address; over the plain port the
same commands name the plain ports. redis-py ``RedisCluster(ssl=True)`` and ``redis-cli --tls -c``
pointed at a standby's TLS port get IDs from the primary.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from march_harness.cluster import ClusterNode, MarchCluster, moved_target
from march_harness.etcd import EtcdCluster
from march_harness.ports import free_port
from march_harness.resp import RespConn
from march_harness.tls import Certs, TlsRespConn, make_certs, openssl_binary, wait_listening
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

pytestmark = pytest.mark.e2e


@pytest.fixture
def tls_cluster(
    tmp_path: Path, etcd: EtcdCluster, request: pytest.FixtureRequest
) -> Iterator[tuple[MarchCluster, dict[str, int], Certs]]:
    """A started cluster, every node with a TLS port; (cluster, {node_id: tls port}, certs)."""
    if openssl_binary() is None:
        pytest.skip("openssl not found on PATH")
    certs = make_certs(tmp_path / "certs")
    cluster = MarchCluster(tmp_path / "march", etcd.endpoints)
    tls_ports: dict[str, int] = {}
    for node in cluster.nodes:  # MarchCluster gives every node the same flags: each needs its own port
        tls_ports[node.node_id] = free_port()
        node.extra_args += certs.server_args("yes", tls_ports[node.node_id])
    try:
        cluster.start()
        for port in tls_ports.values():
            wait_listening(port)
        yield cluster, tls_ports, certs
    finally:
        cluster.stop()
        report = getattr(request.node, "rep_call", None)
        if report is None or report.failed:
            print(cluster.describe())


def slot_ports(reply: object) -> list[int]:
    """The ports CLUSTER SLOTS names: the owner's first, then the replicas' (sorted)."""
    assert isinstance(reply, list) and len(reply) == 1, reply
    [[first, last, owner, *replicas]] = reply
    assert (first, last) == (0, 16383)
    return [owner[1], *sorted(r[1] for r in replicas)]


def nodes_lines(reply: object) -> list[str]:
    assert isinstance(reply, bytes), reply
    return reply.decode().splitlines()


def port_of(nodes_line: str) -> int:
    """The client port of one CLUSTER NODES line (``id host:port@bus flags ...``)."""
    return int(nodes_line.split()[1].split("@")[0].rsplit(":", 1)[1])


def test_tls_clients_are_told_tls_addresses(tls_cluster: tuple[MarchCluster, dict[str, int], Certs]) -> None:
    cluster, tls_ports, certs = tls_cluster
    primary = cluster.wait_settled(timeout=20)
    standbys = [n for n in cluster.nodes if n is not primary]

    def tls(node: ClusterNode) -> TlsRespConn:
        return TlsRespConn(tls_ports[node.node_id], certs.client_context())

    want_tls = [tls_ports[primary.node_id], *sorted(tls_ports[n.node_id] for n in standbys)]
    want_plain = [primary.port, *sorted(n.port for n in standbys)]
    primary_tls = f"127.0.0.1:{tls_ports[primary.node_id]}"
    for node in cluster.nodes:
        with tls(node) as c, RespConn(node.port) as p:
            assert slot_ports(c.call("CLUSTER", "SLOTS")) == want_tls, node.name
            assert slot_ports(p.call("CLUSTER", "SLOTS")) == want_plain, node.name

            shards = c.call("CLUSTER", "SHARDS")
            assert isinstance(shards, list) and len(shards) == 1, shards
            ports = sorted(dict(zip(n[::2], n[1::2], strict=True))[b"port"] for n in shards[0][3])
            assert ports == sorted(want_tls), shards
            plain_shards = p.call("CLUSTER", "SHARDS")
            plain_ports = sorted(dict(zip(n[::2], n[1::2], strict=True))[b"port"] for n in plain_shards[0][3])
            assert plain_ports == sorted(want_plain), plain_shards

            lines = nodes_lines(c.call("CLUSTER", "NODES"))
            assert sorted(port_of(line) for line in lines) == sorted(want_tls), lines
            [master] = [line for line in lines if "master" in line.split()[2]]
            assert port_of(master) == tls_ports[primary.node_id], master
            [myself] = [line for line in lines if "myself" in line.split()[2]]
            assert port_of(myself) == tls_ports[node.node_id], myself
            plain_lines = nodes_lines(p.call("CLUSTER", "NODES"))
            assert sorted(port_of(line) for line in plain_lines) == sorted(want_plain), plain_lines

    for standby in standbys:
        with tls(standby) as c, RespConn(standby.port) as p:
            assert moved_target(c.call("INCR", "orders")) == primary_tls
            assert moved_target(p.call("INCR", "orders")) == primary.address
    with tls(primary) as c:
        assert c.call("INCR", "orders") == 1


def test_cluster_clients_over_tls_get_ids(tls_cluster: tuple[MarchCluster, dict[str, int], Certs]) -> None:
    cluster, tls_ports, certs = tls_cluster
    primary = cluster.wait_settled(timeout=20)
    standby = next(n for n in cluster.nodes if n is not primary)
    client = RedisCluster(
        host="127.0.0.1",
        port=tls_ports[standby.node_id],
        retry=Retry(NoBackoff(), 0),
        **certs.redis_py_kwargs(),  # type: ignore[arg-type]
    )
    try:
        values = [client.incr("orders") for _ in range(20)]
        node = client.get_node_from_key("orders")
        assert (node.host, node.port) == ("127.0.0.1", tls_ports[primary.node_id])
    finally:
        client.close()
    assert values == list(range(1, 21))

    tls_args = ["--tls", "--cacert", certs.ca, "--cert", certs.client_cert, "--key", certs.client_key]
    out = subprocess.run(
        ["redis-cli", *tls_args, "-c", "-p", str(tls_ports[standby.node_id])],
        input="INCR orders\nINCR orders\n",
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert out.returncode == 0, out
    lines = out.stdout.splitlines()
    assert [int(v) for v in lines if v.isdigit()] == [21, 22], out
    assert any(str(tls_ports[primary.node_id]) in line for line in lines if "Redirected" in line), out
