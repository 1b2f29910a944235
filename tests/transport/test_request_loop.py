"""The request loop and what one client can make a node hold (march/server.py, march/resp.py),
against real march processes with real clients (raw sockets, redis-py, redis-cli):

- 9,000 pipelined INCRs on a new key get 1..9000 in order, and another client's request runs
  in between (its INCR of a shared key lands before the pipeline's last request).
- Unfinished requests: past ``query_buffer_budget`` the largest holders are closed; the others
  finish their requests, new clients are served. The issue's 300 connections with 2 MiB each, with
  the default limits: the node holds about its budget, and its memory returns when they go.
- A client pipelining large replies without reading is not buffered: its requests wait once the
  unsent replies pass the write high-water mark (CLIENT LIST ``omem`` stays about one reply past
  it), and every reply comes, in order, once it reads.
- Arguments are limited by memory, not a small count: MGET of 5,000 keys with redis-py and
  redis-cli; a request with more arguments than its client's query buffer limit can hold is
  refused at its header, one whose arguments outgrow it while arriving is refused then.
- A node in graceful shutdown accepts no new connection, on any port (the metrics port too).
- TLS connections count toward ``max_clients`` from their accept, as in Redis: plain and TLS
  clients together, handshakes in progress included, cannot pass it.
- Requests refused with NOAUTH are no calls (no SLOWLOG entry, no time in commandstats), as in
  Redis; the throttled wait of a failed AUTH is no slow command and no LATENCY event.

Every server is stopped by its fixture; waits are conditions with deadlines; nothing asserts speed.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from march_harness import MarchServer, RedisServer, RespConn, RespError, serving, wait_until
from march_harness.cluster import parse_info
from march_harness.ports import free_port
from march_harness.resp import encode
from march_harness.tls import Certs, TlsRespConn, make_certs, openssl_binary, wait_listening

from march import errors

pytestmark = pytest.mark.e2e

Factory = Callable[..., MarchServer]
MiB = 1 << 20
HIGH_WATER = 256 << 10  # march/server.py's write high-water mark


def info(port: int, section: str) -> dict[str, str]:
    with RespConn(port) as c:
        text = c.call("INFO", section)
    assert isinstance(text, bytes), text
    return parse_info(text)


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    """A ``/proc/<pid>/status`` field in kB (VmRSS: now, VmHWM: the peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def clients(port: int) -> dict[int, dict[str, str]]:
    """CLIENT LIST by client id: each line's fields."""
    with RespConn(port) as c:
        text = c.call("CLIENT", "LIST")
    out = {}
    for line in text.decode().splitlines():
        fields = dict(f.split("=", 1) for f in line.split())
        out[int(fields["id"])] = fields
    return out


def client_id(conn: RespConn) -> int:
    value = conn.call("CLIENT", "ID")
    assert isinstance(value, int)
    return value


# --- pipelines --------------------------------------------------------------------------------------


def test_a_pipeline_of_new_key_incrs_is_answered_in_order_and_others_run_meanwhile(march_server: MarchServer) -> None:
    """The pipeline's first INCR creates the key (a store write) and later ones wait for the range to
    be extended: another client's request, sent just after the pipeline, runs during those waits,
    before the pipeline's last request."""
    n = 9000
    with RespConn(march_server.port, timeout=30) as piped, RespConn(march_server.port) as other:
        assert other.call("INCR", "shared") == 1
        piped.send(encode("INCR", "fresh") * n + encode("INCR", "shared"))
        assert other.call("INCR", "shared") == 2  # ran before the pipeline's last request
        replies = [piped.read_reply() for _ in range(n + 1)]
    assert replies[:n] == list(range(1, n + 1))
    assert replies[n] == 3


# --- unfinished requests -------------------------------------------------------------------------


def unfinished_mget(keys: int, size: int) -> tuple[bytes, bytes]:
    """An MGET of ``keys`` keys of ``size`` bytes cut before its end: (what is sent first, the rest)."""
    request = encode("MGET", *[bytes([97 + i]) * size for i in range(keys)])
    return request[:-100], request[-100:]


class Holder:
    """A connection that sends the start of a large request (an MGET of ``keys`` keys of ``size``
    bytes) from a thread (the send blocks until the server reads it) and records whether the server
    closed it."""

    def __init__(self, port: int, keys: int, size: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.sendall(encode("CLIENT", "ID"))
        reply = b""
        while not reply.endswith(b"\r\n"):
            reply += self.sock.recv(64)
        self.id = int(reply[1:])
        self.keys = keys
        self.head, self.tail = unfinished_mget(keys, size)
        self.sent = threading.Event()
        self.closed = False
        self.thread = threading.Thread(target=self._send, daemon=True)
        self.thread.start()

    def _send(self) -> None:
        try:
            self.sock.sendall(self.head)
        except OSError:
            self.closed = True
        self.sent.set()

    def gone(self) -> bool:
        """The server closed this connection (checked without waiting)."""
        if self.closed:
            return True
        self.sock.setblocking(False)
        try:
            self.closed = self.sock.recv(1 << 16, socket.MSG_PEEK) == b""
        except BlockingIOError:
            pass
        except OSError:
            self.closed = True
        finally:
            self.sock.setblocking(True)
        return self.closed

    def read_by_the_server(self, listed: dict[int, dict[str, str]]) -> bool:
        """The server holds all that was sent of the request (CLIENT LIST ``qbuf``), or closed it."""
        if self.id not in listed:
            return self.gone()
        held = listed[self.id].get("qbuf")  # (a server that does not show it: sent is all we know)
        return held is None or int(held) >= len(self.head) - 1024

    def finish(self) -> bytes:
        """Send the rest of the request and return the reply."""
        self.sock.sendall(self.tail)
        expected = b"*%d\r\n" % self.keys + b"$-1\r\n" * self.keys  # (names that long are no sequence)
        reply = b""
        while len(reply) < len(expected):
            chunk = self.sock.recv(1 << 16)
            assert chunk, f"closed after {reply!r}"
            reply += chunk
        return reply

    def close(self) -> None:
        self.sock.close()
        self.thread.join(10)


def settled(port: int, holders: list[Holder]) -> None:
    def done() -> bool:
        listed = clients(port)
        return all(h.sent.is_set() and h.read_by_the_server(listed) for h in holders)

    wait_until(done, 30, message="every request read by the server, or refused")


def test_past_the_query_buffer_budget_the_largest_holders_are_closed(march_factory: Factory) -> None:
    budget = 16 * MiB
    server = march_factory(
        extra_args=["--client-query-buffer-limit", str(4 * MiB), "--query-buffer-budget", str(budget)]
    )
    small = [Holder(server.port, 2, MiB // 8) for _ in range(10)]  # 2.5 MiB together: within the budget
    holders = list(small)
    try:
        settled(server.port, small)
        big = [Holder(server.port, 3, MiB) for _ in range(8)]  # 24 MiB more: past the budget
        holders += big
        settled(server.port, holders)
        closed = [h for h in big if h.gone()]
        assert closed, "no holder was closed past the budget"
        assert not any(h.gone() for h in small), "a small holder was closed while larger ones held more"
        assert int(info(server.port, "clients")["client_query_buffer_budget_disconnections"]) == len(closed)
        for h in small + [h for h in big if h not in closed]:  # the others finish their requests
            assert h.finish() == b"*%d\r\n" % h.keys + b"$-1\r\n" * h.keys
        with RespConn(server.port) as c:
            assert c.call("INCR", "after-the-budget") == 1
        assert "query_buffer_budget" in server.log_tail(20000)
    finally:
        for h in holders:
            h.close()


def test_the_memory_of_clients_holding_large_requests_comes_back(march_factory: Factory) -> None:
    """The issue's case with the default limits: 300 connections each send 2 MiB of an unfinished
    request (600 MiB in all). The node holds about its budget (128 MiB) while they wait, serves
    others, and after they go its RSS is back near where it started (it kept 134 MB before)."""
    server = march_factory()
    with RespConn(server.port) as c:
        assert c.call("INCR", "warm") == 1
    start = rss_kb(server.pid)
    holders: list[Holder] = []
    try:
        for _ in range(300):
            holders.append(Holder(server.port, 2, MiB))
        settled(server.port, holders)
        held_mb = (rss_kb(server.pid, "VmHWM") - start) / 1024
        assert held_mb < 128 + 80, f"the node grew by {held_mb:.0f} MB for unfinished requests"
        with RespConn(server.port) as c:
            assert c.call("INCR", "warm") == 2
    finally:
        for h in holders:
            h.close()
    with RespConn(server.port) as c:
        wait_until(lambda: c.call("INFO", "clients").count(b"connected_clients:1\r\n") == 1, 20)
    wait_until(
        lambda: rss_kb(server.pid) - start < 30 * 1024,
        20,
        message=f"RSS back near {start // 1024} MB (now {rss_kb(server.pid) // 1024} MB)",
    )


# --- replies a client does not read ---------------------------------------------------------------


def test_a_client_pipelining_big_replies_without_reading_holds_about_one_reply(march_factory: Factory) -> None:
    """600 KEYS replies of ~112 KB (67 MB) for 8 KB of requests, with max_output_buffer 8 MiB: the
    client is not dropped, the node keeps at most about one reply past the high-water mark for it
    (CLIENT LIST ``omem``; the rest of its requests wait), its peak RSS does not follow the replies,
    and it gets every reply, in order, once it reads. (It used to buffer all 67 MB.)"""
    server = march_factory(extra_args=["--max-output-buffer", str(8 * MiB)])
    names = [f"long:{'x' * 95}{i:04d}" for i in range(1000)]
    with RespConn(server.port) as c:
        c.send(b"".join(encode("INCR", name) for name in names))
        assert [c.read_reply() for _ in names] == [1] * len(names)
        reply = c.call_raw("KEYS", "*")
        reply_size = len(reply)
    peak_before = rss_kb(server.pid, "VmHWM")
    count = 600
    with RespConn(server.port, timeout=30) as hog:
        hog_id = client_id(hog)
        hog.send(encode("KEYS", "*") * count)

        def unsent() -> int:
            listed = clients(server.port)
            assert hog_id in listed, "the client was dropped"
            return int(listed[hog_id]["omem"])

        wait_until(lambda: unsent() > HIGH_WATER // 2, 20, message="the hog's replies to pile up")
        omem = unsent()
        assert omem <= HIGH_WATER + 2 * reply_size, f"{omem} bytes unsent (a reply is {reply_size})"
        with RespConn(server.port) as other:  # served meanwhile (no new key: the hog's KEYS replies stay the same)
            assert other.call("INCR", names[0]) == 2
        received = read_exactly(hog.sock, count * reply_size)
    assert all(received[i : i + reply_size] == reply for i in range(0, len(received), reply_size))
    assert info(server.port, "clients")["client_output_limit_disconnections"] == "0"
    grown_mb = (rss_kb(server.pid, "VmHWM") - peak_before) / 1024
    assert grown_mb < 30, f"peak RSS grew by {grown_mb:.0f} MB for {count * reply_size / 1e6:.0f} MB of replies"


def read_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(min(1 << 20, n - len(out)))
        assert chunk, f"closed after {len(out)} bytes of {n}"
        out += chunk
    return bytes(out)


# --- arguments ------------------------------------------------------------------------------------


def test_mget_of_5000_keys_with_redis_py_and_redis_cli(march_server: MarchServer) -> None:
    keys = [f"mget:{i}" for i in range(5000)]
    r = redis.Redis(port=march_server.port)
    try:
        for key in (keys[0], keys[2500], keys[-1]):
            assert r.incr(key) == 1
        values = r.mget(keys)
    finally:
        r.close()
    assert len(values) == 5000
    assert {i: v for i, v in enumerate(values) if v is not None} == {0: b"1", 2500: b"1", 4999: b"1"}
    out = subprocess.run(
        ["redis-cli", "-p", str(march_server.port), "MGET", *keys], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")[:-1]
    assert len(lines) == 5000
    assert {i: v for i, v in enumerate(lines) if v} == {0: "1", 2500: "1", 4999: "1"}


def test_arguments_are_limited_by_the_memory_their_request_holds(march_factory: Factory) -> None:
    limit = 2 * MiB + (64 << 10)  # the smallest client_query_buffer_limit with the default max_bulk_len
    server = march_factory(extra_args=["--client-query-buffer-limit", str(limit)])
    refused_count = b"-ERR Protocol error: invalid multibulk length\r\n"
    with RespConn(server.port) as c:
        c.send(b"*%d\r\n" % (limit // 48 + 1))  # more arguments than the limit can ever hold: at the header
        assert c.read_available(5) == refused_count
        assert c.is_closed_by_peer()
    with RespConn(server.port, timeout=30) as c:
        many = [b"n%07d" % i for i in range(20000)]  # 20,000 arguments fit: ~1.1 MB with their overhead
        assert c.call("COMMAND", "INFO", *many) == [None] * len(many)  # (no such commands)
    with RespConn(server.port) as c:
        # 44,000 arguments pass the header check (44,000 x 48 < the limit), but with their bytes they
        # hold more than the limit: refused as they arrive, before the request is complete.
        head = encode("MGET", *[b"k%07d" % i for i in range(44000)])[:-100]
        with contextlib.suppress(OSError):  # (refused and closed while it was still being sent)
            c.send(head)
        answer = c.read_available(5)
        assert answer in (b"-ERR Protocol error: too big request\r\n", b""), answer  # b"": a reset
        assert c.is_closed_by_peer()
    assert "passed client_query_buffer_limit" in server.log_tail(20000)
    with RespConn(server.port) as c:
        assert c.call("INCR", "after") == 1


# --- shutdown -------------------------------------------------------------------------------------


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def not_served(port: int, request: bytes) -> bool:
    """A new connection to ``port`` is refused, or closed without an answer to ``request``."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=2)
    except ConnectionRefusedError:
        return True
    with sock:
        try:
            sock.sendall(request)
            return sock.recv(100) == b""
        except OSError:  # reset
            return True


def test_a_node_in_graceful_shutdown_accepts_no_new_connections(march_factory: Factory) -> None:
    metrics_port = free_port()
    server = march_factory(extra_args=["--shutdown-timeout", "30", "--metrics-port", str(metrics_port)])
    wait_until(lambda: not refused(metrics_port), 10, message="the metrics port")
    with RespConn(server.port, timeout=60) as busy, RespConn(server.port) as admin:
        # A timestamp key whose IDs may run at most 1 s ahead of real time, and INCRBYs worth ~6 s of
        # them (4,096 per ms): past the first second's worth, each waits for real time to catch up.
        # The connection stays busy with requests it has read, which a graceful shutdown lets it finish.
        assert busy.call("SEQ.CREATE", "ts", "TIMESTAMP", "MAXLEAD", "1000") == "OK"
        count = 24
        busy.send(encode("INCRBY", "ts", 1_000_000) * count)
        assert isinstance(busy.read_reply(), int)
        admin.send(encode("SHUTDOWN"))
        assert admin.is_closed_by_peer()

        def closed_to_newcomers() -> bool:
            return not_served(server.port, b"PING\r\n") and not_served(metrics_port, b"GET /metrics HTTP/1.0\r\n\r\n")

        # (the listeners close a moment after SHUTDOWN answers: a connection in between is closed unserved)
        wait_until(closed_to_newcomers, 2, message="new connections to be refused")
        for _ in range(5):
            assert closed_to_newcomers()
        assert refused(server.port) and refused(metrics_port)
        assert server.running, "the shutdown was over before the checks"
        with contextlib.suppress(OSError):
            for _ in range(count - 1):  # the busy connection is let finish (or closed at shutdown_timeout)
                busy.read_reply()
    assert server.wait(40) == 0


# --- TLS and max_clients --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    if openssl_binary() is None:
        pytest.skip("openssl not found on PATH")
    return make_certs(tmp_path_factory.mktemp("certs"))


def served(port: int) -> bool:
    with RespConn(port, timeout=5) as c:
        return bool(c.call("PING") == "PONG")


def test_tls_clients_count_toward_max_clients(march_factory: Factory, certs: Certs) -> None:
    tls_port = free_port()
    server = march_factory(extra_args=["--max-clients", "3", *certs.server_args("yes", tls_port)])
    wait_listening(tls_port)
    with RespConn(server.port) as plain:
        assert plain.call("PING") == "PONG"
        tls = redis.Redis(port=tls_port, **certs.redis_py_kwargs())  # type: ignore[arg-type]
        try:
            assert tls.ping()
            # A third connection that never starts its handshake holds the last place.
            with socket.create_connection(("127.0.0.1", tls_port), timeout=5):

                def full() -> bool:
                    with RespConn(server.port) as extra:
                        return bool(extra.call("PING") == RespError(errors.MAX_CLIENTS))

                wait_until(full, 10, message="a plain client to be refused: the TLS handshake in progress counts")
                context = certs.client_context()
                with pytest.raises((ssl.SSLError, OSError)), TlsRespConn(tls_port, context, timeout=5) as c:
                    c.call("PING")  # (the handshake fails: the connection is closed at its accept)
                assert plain.call("INCR", "in") == 1 and tls.incr("in") == 2  # those in are served
            wait_until(lambda: served(server.port), 10, message="the silent connection's place to be free")
        finally:
            tls.close()


# --- what is recorded for unauthenticated clients -------------------------------------------------


def slowlog_commands(port: int, password: str) -> list[bytes]:
    with RespConn(port) as c:
        assert c.call("AUTH", password) == "OK"
        entries = c.call("SLOWLOG", "GET", "-1")
    return [entry[3][0].upper() for entry in entries]


def commandstats(port: int, password: str) -> dict[str, str]:
    with RespConn(port) as c:
        assert c.call("AUTH", password) == "OK"
        return parse_info(c.call("INFO", "commandstats"))


def refusals_are_not_recorded(port: int) -> None:
    """Requests refused with NOAUTH, with every command slow: no SLOWLOG entry, no call in commandstats."""
    with RespConn(port) as c:
        assert c.call("AUTH", "right") == "OK"
        assert c.call("CONFIG", "SET", "slowlog-log-slower-than", "0") == "OK"  # every command is slow
        assert c.call("SLOWLOG", "RESET") == "OK"
    with RespConn(port) as c:
        c.send(encode("GET", "k") + encode("INCR", "k") + encode("MGET", "a", "b"))
        assert [c.read_reply() for _ in range(3)] == [RespError(errors.NOAUTH)] * 3
    logged = slowlog_commands(port, "right")
    assert not {b"GET", b"INCR", b"MGET"} & set(logged), logged
    stats = commandstats(port, "right")
    for name in ("get", "incr", "mget"):
        line = stats.get(f"cmdstat_{name}", "calls=0,usec=0")
        assert "calls=0,usec=0," in line + ",", f"{name}: {line}"


def test_requests_refused_with_noauth_are_not_recorded(march_factory: Factory) -> None:
    refusals_are_not_recorded(march_factory(requirepass="right").port)


def test_requests_refused_with_noauth_are_not_recorded_by_redis(tmp_path: Path, redis_binary: str) -> None:
    """Where the expected behaviour comes from (Redis 7 counts them as rejected_calls only)."""
    server = RedisServer(tmp_path / "redis", binary=redis_binary, extra_args=["--requirepass", "right"])
    with serving(server):
        refusals_are_not_recorded(server.port)


def test_throttled_auth_failures_are_not_slow_commands_or_latency_events(march_factory: Factory) -> None:
    server = march_factory(requirepass="right")  # slowlog-log-slower-than: 10 ms
    with RespConn(server.port, timeout=30) as c:
        guesses = 7  # past the first few, each answer is held back 50 ms, then longer
        c.send(b"".join(encode("AUTH", f"wrong-{i}") for i in range(guesses)))  # (a repeat is no new guess)
        assert [c.read_reply() for _ in range(guesses)] == [RespError(errors.WRONGPASS)] * guesses
    with RespConn(server.port) as c:
        assert c.call("AUTH", "right") == "OK"
        assert c.call("SLOWLOG", "GET", "-1") == []
        assert b"command-wait" not in [event[0] for event in c.call("LATENCY", "LATEST")]
        stats = parse_info(c.call("INFO", "commandstats"))
    calls = int(stats["cmdstat_auth"].split(",")[0].removeprefix("calls="))
    assert calls >= guesses, stats["cmdstat_auth"]  # failed AUTHs are calls (that failed), as in Redis
