"""Bytes in, exact bytes out: PING/ECHO, inline commands, pipelining, RESP2/RESP3, malformed input,
QUIT and RESET. Tests taking ``server`` run against march and a real redis-server with the same
expected bytes, so the expected value is Redis' own.
"""

from __future__ import annotations

import threading

import pytest
from march_harness import MarchServer, RedisServer
from march_harness.raw import Raw, barrier, bulk, info_field, march_bug, mb

from march.version import REDIS_COMPAT_VERSION

pytestmark = pytest.mark.e2e

Server = MarchServer | RedisServer


def test_ping_and_echo(server: Server) -> None:
    with Raw(server.port) as c:
        c.call(mb("PING"), b"+PONG\r\n")
        c.call(mb("ping"), b"+PONG\r\n")
        c.call(mb("PING", "hi there"), b"$8\r\nhi there\r\n")
        c.call(mb("ECHO", b"\x00\r\n\xff"), b"$4\r\n\x00\r\n\xff\r\n")
        c.call(mb("ECHO", ""), b"$0\r\n\r\n")
        c.call(mb("EcHo", "x" * 300), bulk("x" * 300))


@pytest.mark.parametrize(
    ("line", "reply"),
    [
        (b"PING\r\n", b"+PONG\r\n"),
        (b"PING\n", b"+PONG\r\n"),
        (b"ping hello\r\n", b"$5\r\nhello\r\n"),
        (b"   PING   \r\n", b"+PONG\r\n"),
        (b'ECHO "a b"\r\n', b"$3\r\na b\r\n"),
        (b"ECHO 'a b'\r\n", b"$3\r\na b\r\n"),
        (b'ECHO "\\x41\\x42"\r\n', b"$2\r\nAB\r\n"),
        (b'ECHO "a\\tb\\n"\r\n', b"$4\r\na\tb\n\r\n"),
        (b"ECHO 'it\\'s'\r\n", b"$4\r\nit's\r\n"),
        (b'ECHO ""\r\n', b"$0\r\n\r\n"),
        (b"\r\n\r\n\n  \r\nPING\r\n", b"+PONG\r\n"),  # empty lines get no reply
    ],
    ids=repr,
)
def test_inline(server: Server, line: bytes, reply: bytes) -> None:
    with Raw(server.port) as c:
        c.call(line, reply)
        c.assert_open()  # and nothing else came before the next reply


def test_inline_commands_reach_the_sequences(march_proc: MarchServer, key: str) -> None:
    with Raw(march_proc.port) as c:
        c.call(b"INCR %s\r\n" % key.encode(), b":1\r\n")
        c.call(b"INCRBY %s 9\r\n" % key.encode(), b":10\r\n")
        c.call(b"GET %s\r\n" % key.encode(), b"$2\r\n10\r\n")


def test_pipeline_answered_in_order(server: Server, key: str) -> None:
    requests, replies = [], []
    for i in range(1, 301):
        requests += [mb("INCR", key), mb("ECHO", str(i)), mb("PING")]
        replies += [b":%d\r\n" % i, bulk(str(i)), b"+PONG\r\n"]
    with Raw(server.port) as c:
        c.call(b"".join(requests), b"".join(replies))  # one write in, every reply out, in order
        c.assert_open()


def test_pipelined_runs_of_incr(server: Server, key: str) -> None:
    """Runs of identical INCRs in one write (march answers a run from one range): the same replies as
    one by one, across range boundaries (default batch 1000), keys, INCRBY and inline forms."""
    other = key + ":other"
    requests = [mb("INCR", key)] * 2500 + [mb("INCRBY", key, "10")] + [mb("INCR", other)] * 300
    replies = [b":%d\r\n" % i for i in range(1, 2501)] + [b":2510\r\n"] + [b":%d\r\n" % i for i in range(1, 301)]
    requests += [b"INCR %s\r\n" % key.encode()] * 700  # inline
    replies += [b":%d\r\n" % i for i in range(2511, 3211)]
    with Raw(server.port) as c:
        c.call(b"".join(requests), b"".join(replies))
        c.call(mb("GET", key) + mb("GET", other), bulk("3210") + bulk("300"))


def test_reads_of_identical_requests_interleaved_and_split(server: Server, key: str) -> None:
    """Reads made of identical requests (the parser shares their list: march.resp._whole_requests),
    runs broken by other requests and by a read that ends inside one: the replies of one by one."""
    twin = key[:-1] + ("y" if key[-1] != "y" else "z")  # the same length: only its last byte differs
    incr, other = mb("INCR", key), mb("INCR", twin)
    reads = [incr * 16, incr * 3 + other + incr * 2 + mb("GET", key), incr * 4 + incr[:-3], incr[-3:] + incr * 2]
    replies = [b":%d\r\n" % i for i in range(1, 17)] + [b":17\r\n:18\r\n:19\r\n:1\r\n:20\r\n:21\r\n", bulk("21")]
    replies += [b":%d\r\n" % i for i in range(22, 29)]
    with Raw(server.port) as c:
        for data in reads:
            c.sock.sendall(data)
            barrier(server.port)  # (each in a read of its own)
        c.expect(b"".join(replies))
        c.call(mb("GET", key) + mb("GET", twin), bulk("28") + bulk("1"))


def test_pipelined_run_of_incr_up_to_overflow(server: Server, key: str) -> None:
    top = 9223372036854775807
    overflow = b"-ERR increment or decrement would overflow\r\n"
    with Raw(server.port) as c:
        c.call(mb("SET", key, str(top - 3)), b"+OK\r\n")
        c.call(mb("INCR", key) * 6, b":%d\r\n:%d\r\n:%d\r\n" % (top - 2, top - 1, top) + overflow * 3)
        c.call(mb("GET", key), bulk(str(top)))


def test_pipelined_run_of_incr_inside_multi(server: Server, key: str) -> None:
    with Raw(server.port) as c:
        c.call(
            mb("MULTI") + mb("INCR", key) * 3 + mb("EXEC") + mb("INCR", key) * 2,
            b"+OK\r\n" + b"+QUEUED\r\n" * 3 + b"*3\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n",
        )


def test_inline_pipeline(server: Server, key: str) -> None:
    k = key.encode()
    with Raw(server.port) as c:
        c.call(b"PING\r\nINCR %s\r\nECHO 'a b'\r\nINCR %s\r\n" % (k, k), b"+PONG\r\n:1\r\n$3\r\na b\r\n:2\r\n")


def test_inline_then_multibulk_in_one_write(server: Server) -> None:
    with Raw(server.port) as c:
        c.call(b"PING\r\n" + mb("ECHO", "x"), b"+PONG\r\n$1\r\nx\r\n")


def test_multibulk_then_inline_in_one_write(server: Server) -> None:
    with Raw(server.port) as c:
        c.call(mb("ECHO", "x") + b"PING\r\n", b"$1\r\nx\r\n+PONG\r\n")


@pytest.mark.parametrize("cut", [4, 14, 18], ids=["after-header", "after-first-argument", "before-last-crlf"])
def test_request_split_across_reads(server: Server, cut: int) -> None:
    request = mb("ECHO", "hi")  # b"*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n"
    with Raw(server.port) as c:
        c.send(mb("PING") + request[:cut])
        c.expect(b"+PONG\r\n")
        barrier(server.port)  # the server has read the first part: the rest comes in a new read
        c.call(request[cut:] + b"PING\r\n", b"$2\r\nhi\r\n+PONG\r\n")


def test_split_after_an_argument_that_looks_like_the_previous_request(server: Server, key: str) -> None:
    first, second = mb("EXISTS", key), mb("ECHO", mb("EXISTS", key))
    with Raw(server.port) as c:
        c.send(first + second[:-2])
        c.expect(b":0\r\n")
        barrier(server.port)
        c.call(second[-2:] + mb("PING"), bulk(mb("EXISTS", key)) + b"+PONG\r\n")


def test_request_split_inside_a_line(server: Server) -> None:
    request = mb("ECHO", "hello")
    with Raw(server.port) as c:
        for cut in (2, 6, 16):  # inside '*2\r\n', inside '$4\r\n', inside the payload
            c.send(request[:cut])
            barrier(server.port)
            c.call(request[cut:], b"$5\r\nhello\r\n")


# --- RESP2 / RESP3 ----------------------------------------------------------------------------


def hello_map(proto: int, client_id: int, version: str = REDIS_COMPAT_VERSION) -> bytes:
    """HELLO's reply as Redis 7.0 sends it (bulk strings for keys and text values)."""
    fields = [
        (bulk("server"), bulk("redis")),
        (bulk("version"), bulk(version)),
        (bulk("proto"), b":%d\r\n" % proto),
        (bulk("id"), b":%d\r\n" % client_id),
        (bulk("mode"), bulk("standalone")),
        (bulk("role"), bulk("master")),
        (bulk("modules"), b"*0\r\n"),
    ]
    head = b"%7\r\n" if proto == 3 else b"*14\r\n"
    return head + b"".join(k + v for k, v in fields)


def test_hello_exact_bytes(server: Server) -> None:
    with Raw(server.port) as c:
        c.send(mb("CLIENT", "ID"))
        client_id = c.read_int()
        if isinstance(server, RedisServer):  # the one field allowed to differ
            c.send(mb("INFO", "server"))
            version = c.read_bulk().split(b"redis_version:")[1].split(b"\r\n")[0].decode()
        else:
            version = REDIS_COMPAT_VERSION
        c.call(mb("HELLO"), hello_map(2, client_id, version))
        c.call(mb("HELLO", "3"), hello_map(3, client_id, version))
        c.call(mb("HELLO"), hello_map(3, client_id, version))  # no argument: stays on the current protocol
        c.call(mb("HELLO", "2"), hello_map(2, client_id, version))


def test_resp3_after_hello_3(server: Server) -> None:
    with Raw(server.port) as c:
        c.call(mb("GET", "proto:nokey"), b"$-1\r\n")
        c.call(mb("MGET", "proto:nokey", "proto:nokey2"), b"*2\r\n$-1\r\n$-1\r\n")
        c.call(mb("CLIENT", "GETNAME"), b"$-1\r\n")
        c.call(mb("CONFIG", "GET", "no-such-option-*"), b"*0\r\n")
        c.send(mb("HELLO", "3"))
        assert c.read_reply().startswith(b"%7\r\n")
        c.call(mb("GET", "proto:nokey"), b"_\r\n")
        c.call(mb("MGET", "proto:nokey", "proto:nokey2"), b"*2\r\n_\r\n_\r\n")
        c.call(mb("CLIENT", "GETNAME"), b"_\r\n")
        c.call(mb("CONFIG", "GET", "no-such-option-*"), b"%0\r\n")
        c.send(mb("INFO", "server"))
        reply = c.read_reply()
        assert reply.startswith(b"=") and b"\r\ntxt:# Server\r\n" in reply
        c.send(mb("HELLO", "2"))
        assert c.read_reply().startswith(b"*14\r\n")
        c.call(mb("GET", "proto:nokey"), b"$-1\r\n")


def test_resp3_maps_and_verbatim(march_proc: MarchServer, key: str) -> None:
    with Raw(march_proc.port) as c:
        c.call(mb("CONFIG", "GET", "max-args"), b"*2\r\n$8\r\nmax-args\r\n$7\r\n1048576\r\n")
        c.send(mb("INFO", "server"))
        assert c.read_reply().startswith(b"$")
        c.send(mb("HELLO", "3"))
        c.read_reply()
        c.call(mb("CONFIG", "GET", "max-args"), b"%1\r\n$8\r\nmax-args\r\n$7\r\n1048576\r\n")
        c.send(mb("INFO", "server"))
        reply = c.read_reply()
        assert reply.startswith(b"=") and b"\r\ntxt:# Server\r\n" in reply
        c.call(mb("INCR", key), b":1\r\n")
        c.send(mb("SEQ.INFO", key))
        reply = c.read_reply()
        assert reply.startswith(b"%") and b"$4\r\nnext\r\n:2\r\n" in reply


@pytest.mark.parametrize(
    ("request_", "reply"),
    [
        (b"HELLO 4\r\n", b"-NOPROTO unsupported protocol version\r\n"),
        (b"HELLO 1\r\n", b"-NOPROTO unsupported protocol version\r\n"),
        (b"HELLO abc\r\n", b"-ERR Protocol version is not an integer or out of range\r\n"),
        (b"HELLO 3 SETNAME\r\n", b"-ERR Syntax error in HELLO option 'SETNAME'\r\n"),
        (b"HELLO 3 BOGUS\r\n", b"-ERR Syntax error in HELLO option 'BOGUS'\r\n"),
    ],
)
def test_hello_errors(server: Server, request_: bytes, reply: bytes) -> None:
    with Raw(server.port) as c:
        c.call(request_, reply)
        c.call(mb("GET", "proto:nokey"), b"$-1\r\n")  # still RESP2


def test_hello_setname(server: Server) -> None:
    with Raw(server.port) as c:
        c.send(mb("HELLO", "2", "SETNAME", "proto-client"))
        c.read_reply()
        c.call(mb("CLIENT", "GETNAME"), b"$12\r\nproto-client\r\n")


# --- malformed input ----------------------------------------------------------------------------

MALFORMED = [
    ("non-bulk-element", b"*1\r\n:5\r\n", b"-ERR Protocol error: expected '$', got ':'\r\n", None),
    ("array-element", b"*1\r\n*1\r\n$1\r\na\r\n", b"-ERR Protocol error: expected '$', got '*'\r\n", None),
    ("multibulk-length", b"*abc\r\n", b"-ERR Protocol error: invalid multibulk length\r\n", None),
    ("bulk-length", b"*1\r\n$x\r\n", b"-ERR Protocol error: invalid bulk length\r\n", None),
    ("unbalanced-quotes", b'ECHO "a\r\n', b"-ERR Protocol error: unbalanced quotes in request\r\n", None),
    ("quote-then-text", b"ECHO 'a'b\r\n", b"-ERR Protocol error: unbalanced quotes in request\r\n", None),
    (
        "after-good-requests",
        mb("PING") + mb("ECHO", "x") + b"*1\r\n:5\r\n" + mb("PING"),
        b"+PONG\r\n$1\r\nx\r\n-ERR Protocol error: expected '$', got ':'\r\n",
        None,
    ),
    (
        "inline-after-good-requests",
        b'PING\r\nECHO "a\r\nPING\r\n',
        b"+PONG\r\n-ERR Protocol error: unbalanced quotes in request\r\n",
        None,
    ),
    (
        "simple-string-element",
        b"*1\r\n+PING\r\n",
        b"-ERR Protocol error: expected '$', got '+'\r\n",
        None,
    ),
    (
        "null-bulk-element",
        b"*1\r\n$-1\r\n",
        b"-ERR Protocol error: invalid bulk length\r\n",
        None,
    ),
]


def _malformed_params() -> list[object]:
    out: list[object] = []
    for name, payload, reply, bug in MALFORMED:
        for server_name in ("march", "redis"):
            marks = [march_bug(bug)] if bug and server_name == "march" else []
            out.append(pytest.param(server_name, payload, reply, marks=marks, id=f"{server_name}-{name}"))
    return out


@pytest.mark.parametrize(("server", "payload", "reply"), _malformed_params(), indirect=["server"])
def test_malformed_input_closes_only_that_connection(server: Server, payload: bytes, reply: bytes, key: str) -> None:
    with Raw(server.port) as other:
        other.call(mb("INCR", key), b":1\r\n")
        with Raw(server.port) as bad:
            bad.send(payload)
            bad.expect_closed(reply)
        other.call(mb("INCR", key), b":2\r\n")  # the other connection carries on
    with Raw(server.port) as fresh:
        fresh.call(mb("INCR", key), b":3\r\n")  # and the server keeps serving IDs


def test_protocol_errors_are_counted(march_proc: MarchServer) -> None:
    before = int(info_field(march_proc.port, "stats", "protocol_errors"))
    with Raw(march_proc.port) as bad:
        bad.send(b"*1\r\n:5\r\n")
        bad.read_until_closed()
    assert int(info_field(march_proc.port, "stats", "protocol_errors")) == before + 1


def test_client_disconnecting_mid_request(server: Server, key: str) -> None:
    with Raw(server.port) as c:
        c.send(mb("INCRBY", key, "5")[:-6])  # the last argument never completes
    barrier(server.port)
    with Raw(server.port) as c:
        c.call(mb("EXISTS", key), b":0\r\n")  # the partial request did not run
        c.call(mb("INCR", key), b":1\r\n")


# --- QUIT and RESET -----------------------------------------------------------------------------


@pytest.mark.parametrize("request_", [b"QUIT\r\n", mb("QUIT"), mb("quit", "extra")])
def test_quit_closes_after_ok(server: Server, request_: bytes) -> None:
    with Raw(server.port) as c:
        c.send(request_ + mb("PING"))
        c.expect_closed(b"+OK\r\n")  # the PING behind it is not answered


def test_quit_after_pipelined_requests(server: Server, key: str) -> None:
    with Raw(server.port) as c:
        c.send(mb("INCR", key) + mb("INCR", key) + mb("QUIT") + mb("INCR", key))
        c.expect_closed(b":1\r\n:2\r\n+OK\r\n")
    with Raw(server.port) as c:
        c.call(mb("GET", key), b"$1\r\n2\r\n")


def test_reset(server: Server) -> None:
    with Raw(server.port) as c:
        c.call(mb("CLIENT", "SETNAME", "before-reset"), b"+OK\r\n")
        c.send(mb("HELLO", "3"))
        c.read_reply()
        c.call(mb("MULTI"), b"+OK\r\n")
        c.call(mb("PING"), b"+QUEUED\r\n")
        c.call(mb("RESET"), b"+RESET\r\n")  # runs at once inside MULTI
        c.call(mb("GET", "proto:nokey"), b"$-1\r\n")  # back to RESP2
        c.call(mb("CLIENT", "GETNAME"), b"$-1\r\n")  # name forgotten
        c.call(mb("EXEC"), b"-ERR EXEC without MULTI\r\n")  # transaction discarded
        c.call(mb("RESET"), b"+RESET\r\n")
        c.assert_open()


# --- transactions on the wire ---------------------------------------------------------------------


def test_multi_exec_bytes(server: Server, key: str) -> None:
    with Raw(server.port) as c:
        c.call(mb("MULTI"), b"+OK\r\n")
        c.call(mb("INCR", key), b"+QUEUED\r\n")
        c.call(mb("INCRBY", key, "abc"), b"+QUEUED\r\n")
        c.call(mb("ECHO", "x"), b"+QUEUED\r\n")
        c.call(mb("EXEC"), b"*3\r\n:1\r\n-ERR value is not an integer or out of range\r\n$1\r\nx\r\n")
        c.call(
            mb("MULTI") + mb("MULTI") + mb("NOPE", "a") + mb("INCR", key) + mb("EXEC") + mb("EXEC"),
            b"+OK\r\n-ERR MULTI calls can not be nested\r\n"
            b"-ERR unknown command 'NOPE', with args beginning with: 'a' \r\n+QUEUED\r\n"
            b"-EXECABORT Transaction discarded because of previous errors.\r\n-ERR EXEC without MULTI\r\n",
        )
        c.call(mb("GET", key), b"$1\r\n1\r\n")  # the aborted INCR did not run


def test_long_pipeline_read_in_arbitrary_chunks(server: Server) -> None:
    """6 MB of pipelined multibulk requests, written while the replies are read: the server's reads
    end at arbitrary bytes, so requests are split everywhere."""
    payloads = [b"%08d" % i + bytes(range(256)) * 3 + b"\r\n*1\r\n" * 20 for i in range(6000)]
    requests = b"".join(mb(b"ECHO", p) for p in payloads)
    expected = b"".join(bulk(p) for p in payloads)
    errors: list[BaseException] = []
    with Raw(server.port, timeout=30) as c:

        def send_all() -> None:
            try:
                c.sock.sendall(requests)
            except BaseException as exc:  # reported below
                errors.append(exc)

        sender = threading.Thread(target=send_all, daemon=True)
        sender.start()
        try:
            received = c.read_exact(len(expected), timeout=30)
        finally:
            sender.join(timeout=30)
        assert not errors, errors
        if received != expected:
            at = next(i for i, (a, b) in enumerate(zip(received, expected, strict=True)) if a != b)
            raise AssertionError(f"replies differ at byte {at}: {received[max(0, at - 60) : at + 60]!r}")
        c.assert_open()
