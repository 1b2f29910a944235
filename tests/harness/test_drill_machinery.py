"""The drills' own machinery, without a March cluster: etcd processes (one and three members,
leader kill and restart), the TCP proxy (bytes, HTTP and gRPC through it; a cut holds
everything, a restore delivers it), the load harness against a single node, and the figures
computed from hand-made histories."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import aetcd
import pytest
from march_harness import History, MarchServer, wait_until
from march_harness.etcd import EtcdCluster, _http
from march_harness.load import Load, figures
from march_harness.proxy import TcpProxy

pytestmark = pytest.mark.e2e

# -- etcd ----------------------------------------------------------------------------------------


def test_one_member_is_healthy_and_leader(etcd: EtcdCluster) -> None:
    (member,) = etcd.members
    assert member.healthy()
    assert etcd.leader() is member
    assert etcd.endpoints == f"127.0.0.1:{member.port}"


def test_three_members_survive_the_leader_kill_and_take_it_back(etcd3: EtcdCluster) -> None:
    leader = etcd3.wait_leader()
    etcd3.kill(leader)
    new = etcd3.wait_leader(exclude=leader)
    assert new is not leader and new.running
    etcd3.restart(leader)
    assert leader.healthy()
    assert etcd3.wait_leader() in etcd3.members
    assert len(etcd3.endpoints.split(",")) == 3


def test_restarted_member_keeps_its_data(etcd: EtcdCluster) -> None:
    async def put_get(port: int, value: bytes | None) -> bytes | None:
        async with aetcd.Client("127.0.0.1", port, timeout=5) as client:
            if value is not None:
                await client.put(b"/t/k", value)
            got = await client.get(b"/t/k")
            return None if got is None else got.value

    (m,) = etcd.members
    assert asyncio.run(put_get(m.port, b"v1")) == b"v1"
    etcd.kill(m)
    etcd.restart(m)
    assert asyncio.run(put_get(m.port, None)) == b"v1"


# -- proxy ---------------------------------------------------------------------------------------


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A tiny echo server on a free loopback port (a thread per connection), closed at teardown."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    done = threading.Event()

    def serve_one(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(0.1)
            while not done.is_set():
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                conn.sendall(data)

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield listener.getsockname()[1]
    finally:
        done.set()
        listener.close()
        t.join(5)


def _recv_exactly(s: socket.socket, n: int, timeout: float = 5.0) -> bytes:
    s.settimeout(timeout)
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return out


def _nothing_arrives(s: socket.socket, within: float = 0.3) -> bool:
    s.settimeout(within)
    try:
        s.recv(1)  # a byte, or b"" for a close: either way something arrived
    except TimeoutError:
        return True
    return False


def test_proxy_forwards_and_a_cut_holds_bytes_until_restored(echo_port: int) -> None:
    with TcpProxy(echo_port) as proxy, socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as s:
        s.sendall(b"hello")
        assert _recv_exactly(s, 5) == b"hello"
        proxy.cut()
        s.sendall(b"during the cut")
        assert _nothing_arrives(s), "a cut proxy delivered bytes"
        proxy.restore()
        assert _recv_exactly(s, 14) == b"during the cut"  # held, not lost, in order


def test_connection_made_during_a_cut_waits_for_the_restore(echo_port: int) -> None:
    with TcpProxy(echo_port) as proxy:
        proxy.cut()
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as s:  # accepted, not forwarded
            s.sendall(b"x")
            assert _nothing_arrives(s)
            proxy.restore()
            assert _recv_exactly(s, 1) == b"x"


def test_proxy_reset_and_close_end_connections(echo_port: int) -> None:
    proxy = TcpProxy(echo_port)
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as s:
            s.sendall(b"a")
            assert _recv_exactly(s, 1) == b"a"
            wait_until(lambda: proxy.accepted == 1, timeout=5)
            proxy.reset()
            assert _recv_exactly(s, 1) == b""  # closed by the proxy
    finally:
        proxy.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=1).close()


def test_etcd_http_and_grpc_through_the_proxy(etcd: EtcdCluster) -> None:
    (m,) = etcd.members
    with TcpProxy(m.port) as proxy:
        assert _http(proxy.port, "/health")["health"] == "true"

        async def grpc_through_proxy() -> None:
            async with aetcd.Client("127.0.0.1", proxy.port, timeout=1) as client:
                await client.put(b"/t/p", b"1")
                got = await client.get(b"/t/p")
                assert got is not None and got.value == b"1"
                proxy.cut()
                started = time.monotonic()
                with pytest.raises(Exception):  # noqa: B017 - aetcd wraps the deadline in its own class
                    await client.get(b"/t/p")
                assert time.monotonic() - started < 5
                proxy.restore()
                await client.put(b"/t/p", b"2")
                got = await client.get(b"/t/p")
                assert got is not None and got.value == b"2"

        asyncio.run(grpc_through_proxy())


# -- load harness and figures --------------------------------------------------------------------


def test_plain_clients_record_a_clean_history(march_server: MarchServer) -> None:
    # A single node answers no CLUSTER commands, so only plain clients here.
    with Load([f"127.0.0.1:{march_server.port}"], cluster_clients=0, plain_clients=3, max_seconds=30) as load:
        load.wait_ops(500)
        since = History.now()
        node = load.wait_success(since)[1]
    f = figures(load.histories)
    assert node == f"127.0.0.1:{march_server.port}"
    assert f.ops >= 500 and f.errors == 0 and f.duplicates == 0 and f.order_violations == 0
    assert all(op.node == node for h in load.histories.values() for op in h.ops)


def test_plain_clients_record_errors_and_move_on_when_the_node_dies(march_server: MarchServer) -> None:
    with Load([f"127.0.0.1:{march_server.port}"], cluster_clients=0, plain_clients=2, max_seconds=30) as load:
        load.wait_ops(100)
        march_server.kill()
        wait_until(lambda: load.errors >= 2, timeout=10)
        march_server.start()
        load.wait_ops(100)
    f = figures(load.histories)
    assert f.errors >= 2 and f.duplicates == 0 and f.order_violations == 0
    assert any("ConnectionError" in x.error for h in load.histories.values() for x in h.failures)


def test_figures_of_a_hand_made_failover() -> None:
    ms = 1_000_000
    h = History()
    h.record("c", 0, 1 * ms, 1, "old:1")
    h.record("c", 2 * ms, 3 * ms, 2, "old:1")
    # fault at 5 ms; errors from 6 to 40 ms; the new primary answers at 50 ms
    h.record_error("c", 6 * ms, 20 * ms, "ConnectionError: refused", "old:1")
    h.record_error("c", 25 * ms, 40 * ms, "TRYAGAIN no primary", "new:2")
    h.record("c", 41 * ms, 50 * ms, 1000, "new:2")
    h.record("d", 45 * ms, 52 * ms, 1001, "new:2")
    f = figures({"k": h}, fault_at=5 * ms, old_primary="old:1")
    assert f.ops == 4 and f.errors == 2
    assert f.failover == pytest.approx(0.045)
    assert f.error_window == pytest.approx(0.034)
    assert f.longest_delay == pytest.approx(0.015)
    assert f.longest_gap == pytest.approx(0.047)
    assert f.old_primary_last is None
    assert f.duplicates == 0 and f.order_violations == 0
    assert f.error_kinds == {"ConnectionError": 1, "TRYAGAIN": 1}


def test_figures_count_duplicates_and_order_violations() -> None:
    h = History()
    h.record("a", 0, 10, 5)
    h.record("b", 20, 30, 5)  # duplicate, and not above 5 though sent after its reply
    f = figures({"k": h})
    assert f.duplicates == 1 and f.order_violations >= 1 and f.problems
