"""RESP3 types and other odd input sent *to* the server, exact bytes, on march and on a real
redis-server: inside a request every type but the bulk string is refused with the byte Redis names
(``expected '$', got '%'``) after the requests before it ran; at a request boundary, anything but
``*`` is an inline command, as Redis reads it. Also the multibulk headers Redis ignores or reads
leniently, and the bytes hiredis (march's fast parser) could not be trusted with.
"""

from __future__ import annotations

import pytest
from march_harness import MarchServer, RedisServer
from march_harness.raw import Raw, barrier, mb

pytestmark = pytest.mark.e2e

Server = MarchServer | RedisServer

# One element of each RESP2/RESP3 type but the bulk string.
ELEMENTS = {
    "map": (b"%1\r\n$1\r\na\r\n$1\r\nb\r\n", "%"),
    "map-with-an-array-key": (b"%1\r\n*1\r\n$1\r\na\r\n:1\r\n", "%"),  # hiredis raised TypeError
    "set": (b"~1\r\n$1\r\na\r\n", "~"),
    "attribute": (b"|1\r\n$1\r\na\r\n$1\r\nb\r\n", "|"),
    "push": (b">1\r\n$1\r\na\r\n", ">"),
    "big-number": (b"(12345678901234567890\r\n", "("),
    "double": (b",1.5\r\n", ","),
    "boolean": (b"#t\r\n", "#"),
    "null": (b"_\r\n", "_"),
    "verbatim": (b"=5\r\ntxt:a\r\n", "="),
    "blob-error": (b"!3\r\nerr\r\n", "!"),
    "simple-string": (b"+x\r\n", "+"),
    "integer": (b":1\r\n", ":"),
    "array": (b"*1\r\n$1\r\na\r\n", "*"),
    "huge-array": (b"*2147483647\r\n", "*"),  # hiredis allocated 2**31 slots for it
    "huge-push": (b">2147483647\r\n", ">"),
}


@pytest.mark.parametrize("name", list(ELEMENTS))
def test_non_bulk_element_after_a_request(server: Server, key: str, name: str) -> None:
    element, byte = ELEMENTS[name]
    with Raw(server.port) as c:
        c.send(mb("INCR", key) + b"*2\r\n$4\r\nECHO\r\n" + element + mb("INCR", key))
        c.expect_closed(b":1\r\n-ERR Protocol error: expected '$', got '%s'\r\n" % byte.encode())
    with Raw(server.port) as c:
        c.call(mb("GET", key), b"$1\r\n1\r\n")  # the INCR before it ran, the one after it did not


@pytest.mark.parametrize("name", ["map", "map-with-an-array-key", "set", "huge-array"])
def test_non_bulk_element_in_a_later_read(server: Server, key: str, name: str) -> None:
    element, byte = ELEMENTS[name]
    with Raw(server.port) as c:
        c.send(mb("INCR", key) + b"*2\r\n$4\r\nECHO\r\n")
        c.expect(b":1\r\n")
        barrier(server.port)
        c.send(element)
        c.expect_closed(b"-ERR Protocol error: expected '$', got '%s'\r\n" % byte.encode())


def unknown(name: bytes, *args: bytes) -> bytes:
    return b"-ERR unknown command '%s', with args beginning with: %s\r\n" % (name, b"".join(b"'%s' " % a for a in args))


@pytest.mark.parametrize(
    ("frame", "replies"),
    [
        (ELEMENTS["map"][0], unknown(b"%1") + unknown(b"$1") + unknown(b"a") + unknown(b"$1") + unknown(b"b")),
        (ELEMENTS["set"][0], unknown(b"~1") + unknown(b"$1") + unknown(b"a")),
        (ELEMENTS["push"][0], unknown(b">1") + unknown(b"$1") + unknown(b"a")),
        (b"+INCR\r\n", unknown(b"+INCR")),
        (b":1\r\n#t\r\n_\r\n,1.5\r\n", unknown(b":1") + unknown(b"#t") + unknown(b"_") + unknown(b",1.5")),
    ],
    ids=["map", "set", "push", "simple-string", "scalars"],
)
def test_resp3_frame_as_a_request_is_inline(server: Server, key: str, frame: bytes, replies: bytes) -> None:
    """Redis decides by the first byte of a request: not `*`, so an inline command (here unknown)."""
    with Raw(server.port) as c:
        c.call(mb("INCR", key) + frame + mb("INCR", key), b":1\r\n" + replies + b":2\r\n")
        c.assert_open()


@pytest.mark.parametrize("header", [b"*0\r\n", b"*-1\r\n", b"*-10\r\n"])
def test_empty_and_negative_multibulk_are_ignored(server: Server, header: bytes) -> None:
    """Redis' own test suite: "Negative multibulk length" is ignored, the connection carries on."""
    with Raw(server.port) as c:
        c.call(header + mb("PING"), b"+PONG\r\n")
        c.call(mb("PING") + header + mb("PING"), b"+PONG\r\n+PONG\r\n")


def test_header_lines_end_at_their_cr(server: Server) -> None:
    """Redis ends a header line at its '\r' and skips the next byte whatever it is, and skips the
    two bytes after a bulk body without looking at them."""
    with Raw(server.port) as c:
        c.call(b"*1\rX$4\r\nPING\r\n", b"+PONG\r\n")
        c.call(b"*1\r\n$4\r\nPINGXY" + mb("PING"), b"+PONG\r\n+PONG\r\n")


@pytest.mark.parametrize(
    ("payload", "reply"),
    [
        (b"*01\r\n$4\r\nPING\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
        (b"*1\r\n$04\r\nPING\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
        (b"*1\r\n$-0\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
        (b"*1\r\nx\r\n", b"-ERR Protocol error: expected '$', got 'x'\r\n"),
    ],
    ids=repr,
)
def test_numbers_in_headers_are_read_as_redis_reads_them(server: Server, payload: bytes, reply: bytes) -> None:
    with Raw(server.port) as c:
        c.send(mb("PING") + payload)
        c.expect_closed(b"+PONG\r\n" + reply)


def test_a_large_argument_then_a_bad_header(server: Server, key: str) -> None:
    """A 1 MiB argument over many reads, then a bad header in the read that completes it: the request
    runs and the error follows (march used to search that read for the request's start quadratically)."""
    value = b"7" * (1 << 20)
    request = mb("SET", key, value)
    with Raw(server.port) as c:
        for i in range(0, len(request) - 1000, 1 << 16):
            c.send(request[i : min(i + (1 << 16), len(request) - 1000)])
        c.send(request[len(request) - 1000 :] + b"*x\r\n")
        reply = c.read_until_closed(timeout=10)
    assert reply.endswith(b"-ERR Protocol error: invalid multibulk length\r\n")
