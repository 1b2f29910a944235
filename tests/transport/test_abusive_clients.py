"""Clients that abuse a single march process, and the limits that contain them.

- ``max_sequences``: one sequence too many is an error (INCR, SET, SEQ.CREATE alike); existing ones
  keep working, also after a restart; many clients creating at once never pass the limit.
- ``max_multi_commands``: one command too many in MULTI is an error and EXEC aborts.
- ``max_output_buffer``: a KEYS or SEQ.LIST reply that would pass it is an error; a client that
  pipelines big replies without reading is dropped while its replies are produced (the server's
  peak RSS stays far below what the replies would take), counted in INFO, others served.
- ``timeout`` counts from the last complete request: a client dripping a request a byte at a time
  is closed; one sending whole PINGs at the same pace is not.
- A low file-descriptor limit lowers ``max_clients`` (logged, in INFO), and the connection past it
  gets ``ERR max number of clients reached``.
- Connections to the TLS port that never start their handshake are closed by ``timeout`` and
  cannot take every file descriptor: they count toward ``max_clients`` from their accept.
- Unauthenticated clients cannot make the server hold large requests: 100 connections each sending
  a 2 MB ``AUTH`` grow its peak RSS by far less than 100 MB.
- Passwords (and the cluster secret) given as flags are not in ``/proc/<pid>/cmdline``, and still
  reach the server.
- Hundreds of clients that vanish right after a request leave no "never awaited" warning and no
  traceback in the log.
- KEYS with degenerate bracket patterns answers as Redis does.

Every server is stopped by its fixture; waits are conditions with deadlines.
"""

from __future__ import annotations

import contextlib
import select
import shutil
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from march_harness import MarchServer, RedisServer, RespConn, RespError, wait_until
from march_harness.cluster import parse_info
from march_harness.ports import free_port
from march_harness.resp import encode
from march_harness.tls import Certs, make_certs, openssl_binary, wait_listening

from march import errors

pytestmark = pytest.mark.e2e

Factory = Callable[..., MarchServer]


def info(port: int, section: str) -> dict[str, str]:
    with RespConn(port) as c:
        text = c.call("INFO", section)
    assert isinstance(text, bytes), text
    return parse_info(text)


def proc_status_kb(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` field in kB (VmRSS: now, VmHWM: the peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


# --- max_sequences ------------------------------------------------------------------------------


def test_max_sequences(march_factory: Factory) -> None:
    limit = 50
    server = march_factory(extra_args=["--max-sequences", str(limit)])
    full = RespError(errors.MAX_SEQUENCES.format(limit))
    with RespConn(server.port) as c:
        c.send(b"".join(encode("INCR", f"seq:{i}") for i in range(limit)))
        assert [c.read_reply() for _ in range(limit)] == [1] * limit
        assert c.call("INCR", f"seq:{limit}") == full
        assert c.call("INCRBY", "seq:new", 5) == full
        assert c.call("SET", "seq:new", 5) == full
        assert c.call("SEQ.CREATE", "seq:new") == full
        assert c.call("SEQ.CREATE", "seq:ts", "TIMESTAMP") == full
        assert c.call("EXISTS", "seq:new", f"seq:{limit}", "seq:ts") == 0
        assert c.call("DBSIZE") == limit
        assert c.call("INCR", "seq:0") == 2  # existing sequences keep working
        assert c.call("SET", "seq:1", 100) == "OK"
        assert c.call("INCR", "seq:1") == 101
    server.restart()  # the count comes from the store
    with RespConn(server.port) as c:
        assert c.call("INCR", "seq:after-restart") == full
        assert c.call("INCR", "seq:0") > 2


def test_max_sequences_with_many_clients_creating_at_once(march_factory: Factory) -> None:
    limit, clients, each = 50, 20, 10
    server = march_factory(extra_args=["--max-sequences", str(limit)])
    conns = [RespConn(server.port) for _ in range(clients)]
    try:
        payloads = [
            b"".join(encode("INCR", f"race:{c}:{i}") for i in range(each)) + encode("SEQ.CREATE", f"race:{c}:x")
            for c in range(clients)
        ]
        for conn, payload in zip(conns, payloads, strict=True):
            conn.send(payload)  # every client's requests are in before any reply is read
        replies = [conn.read_reply() for conn in conns for _ in range(each + 1)]
    finally:
        for conn in conns:
            conn.close()
    created = [r for r in replies if r in (1, "OK")]
    refused = [r for r in replies if r == RespError(errors.MAX_SEQUENCES.format(limit))]
    assert len(created) + len(refused) == len(replies), set(map(repr, replies))
    assert len(created) == limit
    with RespConn(server.port) as c:
        assert c.call("DBSIZE") == limit


# --- max_multi_commands ---------------------------------------------------------------------------


def test_max_multi_commands(march_factory: Factory) -> None:
    limit = 5
    server = march_factory(extra_args=["--max-multi-commands", str(limit)])
    with RespConn(server.port) as c:
        assert c.call("MULTI") == "OK"
        for _ in range(limit):
            assert c.call("INCR", "tx") == "QUEUED"
        assert c.call("INCR", "tx") == RespError(errors.MULTI_TOO_LONG.format(limit))
        assert c.call("PING") == RespError(errors.MULTI_TOO_LONG.format(limit))  # still in MULTI, still full
        assert c.call("EXEC") == RespError(errors.EXECABORT)
        assert c.call("EXISTS", "tx") == 0  # nothing ran
        assert c.call("MULTI") == "OK"  # exactly the limit is fine
        for _ in range(limit):
            assert c.call("INCR", "tx") == "QUEUED"
        assert c.call("EXEC") == [1, 2, 3, 4, 5]


# --- max_output_buffer ----------------------------------------------------------------------------

OUTPUT_LIMIT = 65536  # the smallest max_output_buffer march accepts
LONG = "long:" + "x" * 95  # 100-byte names: 1,000 of them make a 108 KB KEYS reply


def long_name(i: int) -> str:
    return f"{LONG}{i:04d}"


def test_big_listings_are_an_error(march_factory: Factory) -> None:
    server = march_factory(extra_args=["--max-output-buffer", str(OUTPUT_LIMIT)])
    too_large = RespError(errors.REPLY_TOO_LARGE.format(OUTPUT_LIMIT))
    with RespConn(server.port) as c:
        c.send(b"".join(encode("INCR", long_name(i)) for i in range(1000)))
        assert [c.read_reply() for _ in range(1000)] == [1] * 1000
        assert c.call("KEYS", "*") == too_large
        assert c.call("KEYS", "long:*") == too_large
        assert c.call("SEQ.LIST") == too_large
        assert c.call("PING") == "PONG"  # the connection goes on
        assert len(c.call("KEYS", "long:*0")) == 100
        seen: set[bytes] = set()
        cursor = b"0"
        for _ in range(1000):
            cursor, page = c.call("SCAN", cursor, "COUNT", 100)
            seen.update(page)
            if cursor == b"0":
                break
        assert len(seen) == 1000


def pipeline_and_never_read(port: int, payload: bytes) -> RespConn:
    """A connection with a tiny receive buffer that sends ``payload`` (all it can) and reads nothing."""
    hog = RespConn(port, timeout=10)
    hog.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    assert hog.call("PING") == "PONG"
    with contextlib.suppress(OSError):  # dropped while we were still sending: what the test wants
        hog.sock.sendall(payload)
    return hog


def closed_soon(conn: RespConn, timeout: float = 20.0) -> int:
    """Read (and discard) until the server closes ``conn``; the bytes received."""
    received = 0
    deadline = time.monotonic() + timeout
    conn.sock.settimeout(1.0)
    while time.monotonic() < deadline:
        try:
            chunk = conn.sock.recv(1 << 16)
        except TimeoutError:
            continue
        except OSError:
            return received
        if not chunk:
            return received
        received += len(chunk)
    raise AssertionError(f"the connection was not closed within {timeout}s ({received} bytes received)")


NAMED = 500  # KEYS long:* is then a 54 KB reply: big, but within the limit


def test_a_client_over_the_output_limit_is_dropped_while_replies_are_made(march_factory: Factory) -> None:
    server = march_factory(extra_args=["--max-output-buffer", str(OUTPUT_LIMIT)])
    with RespConn(server.port) as c:
        c.send(b"".join(encode("INCR", long_name(i)) for i in range(NAMED)))
        assert [c.read_reply() for _ in range(NAMED)] == [1] * NAMED
        command_reply = len(c.call_raw("COMMAND"))
        keys_reply = len(c.call_raw("KEYS", "long:*"))
    assert 4096 < keys_reply < OUTPUT_LIMIT and command_reply > 4096, (keys_reply, command_reply)
    peak_before = proc_status_kb(server.pid, "VmHWM")
    drops_before = int(info(server.port, "clients")["client_output_limit_disconnections"])

    # 1. Replies made synchronously, many in one read: COMMAND x 7,000 (63 KB of requests) would be
    #    more than 100 MB of replies if the read's replies were all built before any check.
    commands = 7000
    hog = pipeline_and_never_read(server.port, b"COMMAND\r\n" * commands)
    with RespConn(server.port) as other:
        received = closed_soon(hog)
        assert other.call("INCR", "served") == 1
    hog.close()
    assert received < commands * command_reply // 10

    # 2. A mix of big and small replies, some made after a store read: SEQ.INFO, CLIENT LIST, KEYS.
    rounds = 2000
    mix = b"".join(
        encode("SEQ.INFO", long_name(i % NAMED)) + b"CLIENT LIST\r\nKEYS long:*\r\nCOMMAND\r\n" for i in range(rounds)
    )
    errors_seen: list[BaseException] = []

    def hog_it() -> None:
        try:
            conn = pipeline_and_never_read(server.port, mix)
            closed_soon(conn)
            conn.close()
        except BaseException as exc:  # reported by the main thread
            errors_seen.append(exc)

    thread = threading.Thread(target=hog_it, daemon=True)
    thread.start()
    with RespConn(server.port) as other:
        while True:  # at least once, however soon the hog is done
            assert other.call("INCR", "served") > 1  # served while the hog is being dealt with
            if not thread.is_alive():
                break
            thread.join(0.05)
    assert not errors_seen, errors_seen

    drops = int(info(server.port, "clients")["client_output_limit_disconnections"])
    assert drops >= drops_before + 2, drops
    grown_mb = (proc_status_kb(server.pid, "VmHWM") - peak_before) / 1024
    would_be_mb = (commands * command_reply + rounds * (keys_reply + command_reply)) / 1e6
    assert grown_mb < 40, f"peak RSS grew by {grown_mb:.0f} MB (the replies would take {would_be_mb:.0f} MB)"
    assert "replies of one read over max_output_buffer" in server.log_tail(20000)
    with RespConn(server.port) as c:
        assert c.call("INCR", long_name(1)) == 2


# --- timeout ------------------------------------------------------------------------------------


def closed_now(sock: socket.socket) -> bool:
    """The peer has closed ``sock`` (checked without waiting)."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1 << 16, socket.MSG_PEEK) == b""
    except OSError:
        return True


def test_timeout_counts_from_the_last_complete_request(march_factory: Factory) -> None:
    server = march_factory(extra_args=["--timeout", "1"])
    request = encode("ECHO", "x" * 200)  # 219 bytes: at one byte per 0.3 s, never complete here
    pace = 0.3
    with RespConn(server.port) as drip, RespConn(server.port) as talker:
        assert drip.call("PING") == "PONG"
        assert talker.call("PING") == "PONG"
        started = time.monotonic()
        closed_after = None
        for i in range(len(request)):
            try:
                drip.send(request[i : i + 1])
            except OSError:
                closed_after = time.monotonic() - started
                break
            assert talker.call("PING") == "PONG"  # complete requests at the same pace: never idle
            if closed_now(drip.sock):
                closed_after = time.monotonic() - started
                break
            assert time.monotonic() - started < 8, "the dripping client was not closed within 8 s"
            time.sleep(pace)  # the client's pace, not a synchronisation: the server's timer decides
        assert closed_after is not None
        assert closed_after >= 0.9, f"closed after {closed_after:.2f}s, before --timeout"
        assert talker.call("PING") == "PONG"
        assert int(info(server.port, "stats")["idle_timeouts"]) == 1


# --- file descriptors ---------------------------------------------------------------------------


class LowFdMarch(MarchServer):
    """march started under ``prlimit --nofile=soft:hard``."""

    def __init__(self, *args: object, nofile: str, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.nofile = nofile

    def command(self) -> list[str]:
        return ["prlimit", f"--nofile={self.nofile}", *super().command()]


def test_a_low_fd_limit_lowers_max_clients(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if shutil.which("prlimit") is None:
        pytest.skip("prlimit (util-linux) not found")
    low = LowFdMarch(tmp_path / "low", nofile="64:64", extra_args=["--max-clients", "1000"])
    raised = LowFdMarch(tmp_path / "raised", nofile="64:4096", extra_args=["--max-clients", "1000"])
    conns: list[RespConn] = []
    try:
        low.start()
        raised.start()
        allowed = int(info(low.port, "clients")["maxclients"])
        assert 1 <= allowed < 1000
        assert "max_clients lowered from 1000" in low.log_tail(20000)
        for _ in range(allowed):
            conns.append(RespConn(low.port))
            assert conns[-1].call("PING") == "PONG"
        with RespConn(low.port) as extra:
            assert extra.call("PING") == RespError(errors.MAX_CLIENTS)
        assert conns[0].call("INCR", "fd") == 1  # those in are served
        # a soft limit below the hard one is raised instead: nothing lowered
        assert info(raised.port, "clients")["maxclients"] == "1000"
        assert "lowered" not in raised.log_tail(20000)
    finally:
        for c in conns:
            c.close()
        for s in (low, raised):
            s.stop()
            if getattr(request.node, "rep_call", None) is None or request.node.rep_call.failed:
                print(s.describe())


# --- TLS connections that never handshake ---------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    if openssl_binary() is None:
        pytest.skip("openssl not found on PATH")
    return make_certs(tmp_path_factory.mktemp("certs"))


def test_a_tls_connection_that_never_handshakes_is_closed_by_timeout(march_factory: Factory, certs: Certs) -> None:
    tls_port = free_port()
    march_factory(extra_args=["--timeout", "1", *certs.server_args("yes", tls_port)])
    wait_listening(tls_port)
    silent = [socket.create_connection(("127.0.0.1", tls_port), timeout=5) for _ in range(3)]
    try:
        deadline = time.monotonic() + 4  # --timeout 1, checked every 0.5 s: closed by about 1.5 s
        while not all(closed_now(s) for s in silent):
            assert time.monotonic() < deadline, "TLS connections with no handshake outlived --timeout 1 by 3 s"
            select.select(silent, [], [], 0.1)  # wake on a close (or after 0.1 s)
    finally:
        for s in silent:
            s.close()


def unaccepted(port: int) -> int:
    """Connections to 127.0.0.1:``port`` still in the listen backlog (the kernel shows them with inode 0)."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if int(local.split(":")[1], 16) == port and state == "01" and inode == "0":
            count += 1
    return count


def open_files(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def test_tls_connections_in_their_handshake_cannot_starve_the_server(tmp_path: Path, certs: Certs) -> None:
    if shutil.which("prlimit") is None:
        pytest.skip("prlimit (util-linux) not found")
    tls_port = free_port()
    server = LowFdMarch(tmp_path / "low", nofile="64:64", extra_args=certs.server_args("yes", tls_port))
    silent: list[socket.socket] = []
    try:
        server.start()
        wait_listening(tls_port)
        allowed = int(info(server.port, "clients")["maxclients"])
        assert allowed < 64
        for _ in range(64):  # more than the process may open files: only max_clients of them may stay
            silent.append(socket.create_connection(("127.0.0.1", tls_port), timeout=5))
        # the server has dealt with them: each accepted (or refused), or it cannot open one more file
        wait_until(lambda: not unaccepted(tls_port) or open_files(server.pid) >= 63, 10, 0.01, "the accepts to be done")
        try:
            with RespConn(server.port, timeout=5) as c:
                reply = c.call("PING")
        except OSError as exc:
            reply = exc
        assert reply in ("PONG", RespError(errors.MAX_CLIENTS)), f"a plain client got {reply!r}"
    finally:
        for s in silent:
            s.close()
        server.stop()


# --- passwords out of the process list ------------------------------------------------------------


def test_passwords_given_as_flags_are_not_in_the_process_list(march_factory: Factory) -> None:
    secret, etcd_secret, links = "s3cret-requirepass", "etcd-s3cret-pw", "cluster-s3cret-links"
    flags = ["--etcd-user", "root", f"--etcd-password={etcd_secret}", "--cluster-secret", links]
    server = march_factory(requirepass=secret, extra_args=flags)
    cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes()
    assert b"march" in cmdline and b"serve" in cmdline, cmdline
    assert not any(s.encode() in cmdline for s in (secret, etcd_secret, links)), cmdline
    assert not any(f in cmdline for f in (b"--requirepass", b"--etcd-password", b"--cluster-secret")), cmdline
    with RespConn(server.port) as c:
        assert c.call("PING") == RespError(errors.NOAUTH)  # the server has the password...
        assert c.call("AUTH", "wrong") == RespError(errors.WRONGPASS)
        assert c.call("AUTH", secret) == "OK"  # ...and it is this one
        assert c.call("CONFIG", "GET", "etcd-password") == [b"etcd-password", b"********"]  # set, masked
        assert c.call("CONFIG", "GET", "cluster-secret") == [b"cluster-secret", b"********"]
        assert c.call("CONFIG", "GET", "etcd-user") == [b"etcd-user", b"root"]


def until_closed(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """What the server sent before closing ``sock`` (b"reset" if the close was a reset, as when it
    closes with unread input); fails if it is still open after ``timeout``."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(1 << 16):
            data += chunk
    except TimeoutError:
        raise AssertionError(f"still open after {timeout} s (received {data[:80]!r})") from None
    except ConnectionResetError:
        return data or b"reset"
    return data


# --- large requests before AUTH -------------------------------------------------------------------


def test_unauthenticated_clients_cannot_make_the_server_hold_large_requests(march_factory: Factory) -> None:
    """100 connections each send (or try to) a 2 MB ``AUTH user pass``, all held open at once: each
    argument is under ``max_bulk_len`` (1 MB), so only Redis' 16384-byte limit before AUTH refuses
    it, at its bulk header; the server's peak RSS grows by far less than the 200 MB it would
    otherwise read and keep."""
    server = march_factory(requirepass="right")
    size = 1_000_000
    arg = b"$%d\r\n" % size + b"x" * size + b"\r\n"
    request = b"*3\r\n$4\r\nAUTH\r\n" + arg + arg
    peak_before = proc_status_kb(server.pid, "VmHWM")
    socks: list[socket.socket] = []
    try:
        for _ in range(100):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=2)
            socks.append(sock)
            with contextlib.suppress(OSError):  # refused at the header: the rest meets a closed socket
                sock.sendall(request)
        answers = [until_closed(sock) for sock in socks]
        grown_mb = (proc_status_kb(server.pid, "VmHWM") - peak_before) / 1024
    finally:
        for sock in socks:
            sock.close()
    refused = b"-ERR Protocol error: unauthenticated bulk length\r\n"
    assert all(a in (refused, b"reset") for a in answers), {a[:80] for a in answers}
    assert grown_mb < 100, f"peak RSS grew by {grown_mb:.0f} MB for 100 unauthenticated 2 MB requests"
    with RespConn(server.port) as c:
        assert c.call("PING") == RespError(errors.NOAUTH)
        assert c.call("AUTH", "right") == "OK"
        assert c.call("INCR", "after-big-auths") == 1


# --- clients that vanish --------------------------------------------------------------------------


def vanish(port: int, payload: bytes) -> None:
    """Connect, send ``payload``, and reset the connection at once (SO_LINGER 0: an RST, no FIN)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.sendall(payload)
    finally:
        sock.close()


def test_clients_vanishing_mid_request_leave_no_warning(march_server: MarchServer) -> None:
    port = march_server.port
    for i in range(300):
        payloads = [
            encode("INCR", f"vanish:{i}"),
            encode("INCR", f"vanish:a{i}") + encode("INCR", f"vanish:b{i}") + encode("GET", f"vanish:c{i}"),
            encode("SET", f"vanish:s{i}", 10) + encode("INCR", f"vanish:s{i}"),
            encode("SEQ.CREATE", f"vanish:t{i}", "TIMESTAMP") + encode("INCR", f"vanish:t{i}"),
        ]
        vanish(port, payloads[i % len(payloads)])
    with RespConn(port) as c:
        assert c.call("INCR", "vanish:after") == 1  # alive and serving
        wait_until(lambda: c.call("INFO", "clients").count(b"connected_clients:1\r\n") == 1, 10)
    code = march_server.stop()
    assert code == 0
    log = march_server.log_path.read_text()
    for bad in ("never awaited", "Traceback", "never retrieved", "Exception in callback"):
        assert bad not in log, f"{bad!r} in the server log:\n{log[-4000:]}"


# --- KEYS with degenerate patterns ----------------------------------------------------------------

NAMES = ["a", "b", "m", "z", "ab", "]", "[", "^", "-", "[]", "x]", "\\", "^a", "]a"]
PATTERNS = ["[]", "[z-a]", "[^]", "[]]", "[^]]", "[]a]", "[a-]", "[\\]]", "[", "[a", "\\", "[!a]", "[^a]",
            "a[", "[]*", "*[]", "[-]", "[z-a]*", "[^]a]", "[a-z-]", "*[", "[[]", "[^"]  # fmt: skip


def test_keys_with_degenerate_patterns_answers_as_redis(march_server: MarchServer, redis_server: RedisServer) -> None:
    with RespConn(march_server.port) as m, RespConn(redis_server.port) as r:
        for name in NAMES:
            assert m.call("INCR", name) == 1
            assert r.call("SET", name, 1) == "OK"
        for pattern in PATTERNS:
            mine, theirs = m.call("KEYS", pattern), r.call("KEYS", pattern)
            assert not isinstance(mine, RespError), (pattern, mine)
            assert sorted(mine) == sorted(theirs), pattern
            assert sorted(m.call("SCAN", 0, "MATCH", pattern, "COUNT", 1000)[1]) == sorted(theirs), pattern
        assert m.call("PING") == "PONG"
