"""Raw sockets against a real process: inline commands, pipelining, split writes, malformed
input, huge lengths and clients that don't read. Wherever Redis defines the answer, the same
bytes go to a real redis-server and its reply is the expected one.

A bad request costs its sender an error or its connection, never the server: every test
ends by checking that a fresh connection still gets PONG (and `server_pair` checks at the
end of the module that march is alive and exits 0 on SIGTERM).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest
from march_harness import MarchServer, RedisServer, RespConn
from march_harness.resp import encode

pytestmark = pytest.mark.e2e

Pair = tuple[MarchServer, RedisServer]


def assert_alive(port: int) -> None:
    with RespConn(port, timeout=5) as c:
        assert c.call("PING") == "PONG"


def exchange(port: int, payload: bytes, expect_close: bool) -> tuple[bytes, bool]:
    """Send raw bytes; return (all reply bytes, whether the server closed the connection)."""
    with RespConn(port, timeout=5) as c:
        c.send(payload)
        if expect_close:
            data = b""
            closed = False
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    chunk = c.sock.recv(65536)
                except (ConnectionResetError, BrokenPipeError):
                    closed = True
                    break
                if not chunk:
                    closed = True
                    break
                data += chunk
            return data, closed
        return c.read_available(timeout=0.3), False


# --- inline commands -----------------------------------------------------------------------

INLINE = [
    b"PING\r\n",
    b"PING\n",
    b"ping\r\n",
    b"PING hello\r\n",
    b'ECHO "hello world"\r\n',
    b"ECHO 'single quoted'\r\n",
    b'ECHO "tab\\there"\r\n',
    b"   PING   \r\n",
    b"\r\n\r\nPING\r\n",
    b"INCR raw:inline\r\nINCR raw:inline\r\nGET raw:inline\r\n",
    b"INCRBY raw:inline2 five\r\n",
    b"NOSUCH a b\r\n",
]


@pytest.mark.parametrize("payload", INLINE, ids=[p.decode(errors="replace") for p in INLINE])
def test_inline_like_redis(server_pair: Pair, payload: bytes) -> None:
    march, redis = server_pair
    want = _inline_exchange(redis.port, payload)
    got = _inline_exchange(march.port, payload)
    assert got == want
    assert_alive(march.port)


def _inline_exchange(port: int, payload: bytes) -> bytes:
    # A PING marker after the payload tells us when every reply to it has arrived.
    with RespConn(port, timeout=5) as c:
        c.send(payload + b"PING __end__\r\n")
        out = b""
        while not out.endswith(b"$7\r\n__end__\r\n"):
            chunk = c.sock.recv(65536)
            assert chunk, f"connection closed after {out!r}"
            out += chunk
    return out[: -len(b"$7\r\n__end__\r\n")]


def test_inline_ping_exact_bytes(march_server: MarchServer) -> None:
    with socket.create_connection(("127.0.0.1", march_server.port), timeout=5) as s:
        s.sendall(b"PING\r\n")
        assert s.recv(100) == b"+PONG\r\n"


# --- pipelining and framing ---------------------------------------------------------------


def test_pipeline_of_many_requests_in_one_write(march_server: MarchServer) -> None:
    n = 2000
    with march_server.conn() as c:
        c.send(b"".join(encode("INCR", "raw:pipe") for _ in range(n)))
        replies = [c.read_reply() for _ in range(n)]
        assert replies == list(range(1, n + 1))
        assert c.call("PING") == "PONG"


def test_mixed_inline_and_multibulk_in_one_write(server_pair: Pair) -> None:
    payload = encode("INCR", "raw:mixed") + b"INCR raw:mixed\r\n" + encode("ECHO", "x") + b"PING\r\n"
    march, redis = server_pair
    assert _inline_exchange(march.port, payload) == _inline_exchange(redis.port, payload)


def test_request_split_into_single_bytes(march_server: MarchServer) -> None:
    payload = encode("INCRBY", "raw:split", "7") + encode("ECHO", "abc" * 100) + b"PING\r\n"
    with march_server.conn() as c:
        for i in range(len(payload)):
            c.send(payload[i : i + 1])
        assert c.read_reply() == 7
        assert c.read_reply() == b"abc" * 100
        assert c.read_reply() == "PONG"


def test_request_split_at_every_offset(march_server: MarchServer) -> None:
    """However TCP cuts a pipeline into reads, the requests parse the same.

    The short pause between the two halves makes it likely (not certain) that the server reads
    them separately; it only affects how likely a parser bug is caught, never whether a
    correct server passes.
    """
    payload = encode("INCR", "raw:cut") + b"INCR raw:cut\r\n" + encode("INCRBY", "raw:cut", "10") + b"PING\r\n"
    expected_last = 0
    for i in range(1, len(payload)):
        with march_server.conn(timeout=5) as c:
            c.send(payload[:i])
            time.sleep(0.003)
            c.send(payload[i:])
            replies = [c.read_reply() for _ in range(4)]
        assert replies == [expected_last + 1, expected_last + 2, expected_last + 12, "PONG"], (
            f"split after {payload[:i]!r}: {replies!r}"
        )
        expected_last += 12


def test_binary_safe_echo(march_server: MarchServer) -> None:
    blob = bytes(range(256)) * 64 + b"\r\n\x00$*"
    with march_server.conn() as c:
        assert c.call("ECHO", blob) == blob


# --- malformed input ----------------------------------------------------------------------

MALFORMED = {
    "multibulk-length-not-number": b"*abc\r\n",
    "multibulk-length-huge": b"*99999999999\r\n",
    "bulk-length-not-number": b"*1\r\n$abc\r\n",
    "bulk-length-huge": b"*1\r\n$999999999999\r\n",
    "bulk-length-over-512mb": b"*2\r\n$4\r\nECHO\r\n$536870913\r\n",
    "bulk-length-negative": b"*1\r\n$-5\r\n",
    "expected-dollar": b"*1\r\nPING\r\n",
    "expected-dollar-second-arg": b"*2\r\n$4\r\nECHO\r\n:12\r\n",
    "unbalanced-quotes": b'ECHO "abc\r\n',
    "unbalanced-single-quotes": b"ECHO 'abc\r\n",
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_request_like_redis(server_pair: Pair, name: str) -> None:
    """Redis answers `-ERR Protocol error: ...` and closes that one connection; so must march."""
    march, redis = server_pair
    payload = MALFORMED[name]
    with march.conn() as bystander:
        bystander.call("MULTI")
        bystander.call("INCR", f"raw:bystander:{name}")
        want = exchange(redis.port, payload, expect_close=True)
        got = exchange(march.port, payload, expect_close=True)
        assert got == want, f"payload {payload!r}: march replied {got!r}, redis {want!r}"
        # Another client, in the middle of a transaction, is not affected.
        assert bystander.call("EXEC") == [1]
    assert_alive(march.port)


def test_too_big_inline_request_like_redis(server_pair: Pair) -> None:
    march, redis = server_pair
    payload = b"PING " + b"x" * (1024 * 1024 + 10)  # no newline: an inline request that never ends
    want = _send_until_closed(redis.port, payload)
    got = _send_until_closed(march.port, payload)
    assert got == want
    assert_alive(march.port)


def _send_until_closed(port: int, payload: bytes) -> tuple[bytes, bool]:
    with RespConn(port, timeout=5) as c:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            c.send(payload)
        data = c.read_available(timeout=5)
        return data, c.is_closed_by_peer(timeout=1)


def test_garbage_then_reconnect(march_server: MarchServer) -> None:
    rng_bytes = bytes((i * 37 + 11) % 256 for i in range(4096))
    for chunk in (rng_bytes, b"\x00" * 1000, b"*1\r\n$4\r\n" + b"\xff" * 10, b"$$$$\r\n", b"*-1\r\n*0\r\n"):
        with march_server.conn() as c:
            try:
                c.send(chunk)
                c.read_available(timeout=0.2)
            except (BrokenPipeError, ConnectionResetError):
                pass
        assert_alive(march_server.port)


def test_truncated_request_then_disconnect(march_server: MarchServer) -> None:
    with march_server.conn() as c:
        c.send(b"*3\r\n$6\r\nINCRBY\r\n$9\r\nraw:trunc\r\n$2\r\n1")
    with march_server.conn() as c:
        assert c.call("GET", "raw:trunc") is None
        assert c.call("INCR", "raw:trunc") == 1


def test_client_that_never_reads(march_server: MarchServer) -> None:
    """Back-pressure: a client that only writes must not take the server down or stall others."""
    big = encode("ECHO", b"x" * 65536)
    stop = threading.Event()
    sent = [0]

    def flood() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect, so it sticks
            s.settimeout(0.5)
            s.connect(("127.0.0.1", march_server.port))
            deadline = time.monotonic() + 3
            while not stop.is_set() and time.monotonic() < deadline and sent[0] < 4000:
                try:
                    s.sendall(big)
                except (TimeoutError, OSError):
                    break  # the server stopped reading us (or dropped us): that's back-pressure working
                sent[0] += 1

    t = threading.Thread(target=flood, daemon=True)
    t.start()
    try:
        # While the flood runs, other clients are served.
        with march_server.conn(timeout=5) as c:
            for _ in range(50):
                assert c.call("INCR", "raw:others") > 0
    finally:
        stop.set()
        t.join(10)
    assert not t.is_alive()
    assert_alive(march_server.port)


def test_many_connections(march_server: MarchServer) -> None:
    conns = [march_server.conn() for _ in range(200)]
    try:
        for c in conns:
            c.send(encode("INCR", "raw:many"))
        ids = [c.read_reply() for c in conns]
    finally:
        for c in conns:
            c.close()
    assert sorted(ids) == list(range(1, 201))


def test_quit_closes_after_ok(march_server: MarchServer) -> None:
    with march_server.conn() as c:
        c.send(encode("QUIT") + encode("PING"))
        assert c.read_reply() == "OK"
        assert c.is_closed_by_peer()
