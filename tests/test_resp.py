"""Unit tests of ``march.resp``: ``RequestParser`` (bytes in, requests out) and ``encode``.

No I/O, no server. The expected texts of protocol errors are Redis' own (``-ERR Protocol error:
<text>``); tests/transport checks the same cases against a real process and a real redis-server.

Tests marked ``xfail(strict=True)`` show a known march bug: each reason says what was fed, what
came back and what Redis does. When the bug is fixed the test passes, the strict mark turns that
into a failure, and the mark must be removed.
"""

from __future__ import annotations

import contextlib
import enum
import re
import tracemalloc

import hiredis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import march.resp
from march.errors import CommandError
from march.resp import ProtocolError, RequestParser, Verbatim, encode, split_inline

MAX_ARGS = 16
MAX_BULK = 4096
MAX_INLINE = 1024


def parser(max_args: int = MAX_ARGS, max_bulk: int = MAX_BULK, max_inline: int = MAX_INLINE) -> RequestParser:
    return RequestParser(max_args, max_bulk, max_inline)


def mb(*args: bytes | str) -> bytes:
    """One request as a RESP multibulk, the way every client library writes it."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a.encode() if isinstance(a, str) else a
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def feed_all(chunks: list[bytes], p: RequestParser | None = None) -> list[list[bytes]]:
    p = p or parser()
    out: list[list[bytes]] = []
    for c in chunks:
        out += p.feed(c)
    return out


def protocol_error(chunks: list[bytes], p: RequestParser | None = None) -> tuple[str, list[list[bytes]]]:
    """Feed ``chunks``; return (message, requests that came before the bad bytes)."""
    p = p or parser()
    before: list[list[bytes]] = []
    with pytest.raises(ProtocolError) as info:
        for c in chunks:
            before += p.feed(c)
    return str(info.value), before + info.value.requests


def march_bug(reason: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason="march bug: " + reason)


# --- multibulk -----------------------------------------------------------------------------


def test_one_multibulk_request() -> None:
    assert parser().feed(mb("SET", "k", "1")) == [[b"SET", b"k", b"1"]]


def test_multibulk_is_binary_safe() -> None:
    payload = b"\x00\r\n\xff$*\r\n"
    assert parser().feed(mb(b"ECHO", payload, b"")) == [[b"ECHO", payload, b""]]


def test_incomplete_request_needs_more() -> None:
    p = parser()
    data = mb("INCR", "orders")
    assert p.feed(data[:-1]) == []
    assert p.feed(data[-1:]) == [[b"INCR", b"orders"]]


def test_pipelined_requests_in_one_feed() -> None:
    requests = [[b"INCR", b"k%d" % i] if i % 2 else [b"PING"] for i in range(200)]
    data = b"".join(mb(*r) for r in requests)
    assert parser().feed(data) == requests


def test_pipelined_requests_then_a_partial_one() -> None:
    p = parser()
    data = mb("PING") + mb("ECHO", "hello")
    assert p.feed(data + b"*1\r\n$4\r\nPI") == [[b"PING"], [b"ECHO", b"hello"]]
    assert p.feed(b"NG\r\n") == [[b"PING"]]


def test_empty_and_null_multibulk_are_ignored() -> None:
    assert parser().feed(b"*0\r\n*-1\r\n" + mb("PING")) == [[b"PING"]]
    p = parser()
    assert p.feed(b"*0\r\n") == []
    assert p.feed(b"*-1\r\n") == []
    assert p.feed(mb("PING")) == [[b"PING"]]


# --- split at every byte boundary --------------------------------------------------------------

SPLIT_PAYLOADS = {
    "multibulk": mb("SET", "key", "12345") + mb("INCR", "key") + mb("ECHO", b"a\r\nb"),
    "inline": b'PING\r\nECHO "a b"\r\nINCRBY k 5\n',
    "inline-then-multibulk": b"PING\r\n" + mb("ECHO", "x"),
    "multibulk-then-inline": mb("ECHO", "x") + b"PING\r\n" + mb("INCR", "k") + b"INCR k\r\n",
    "empty-and-null-arrays": b"*0\r\n" + mb("PING") + b"*-1\r\n" + mb("ECHO", "") + b"*0\r\n",
    "arguments-that-look-like-resp": mb("ECHO", b"*1\r\n$4\r\nPING\r\n") + mb("ECHO", b"\r\n") + mb("PING"),
}


@pytest.mark.parametrize("name", list(SPLIT_PAYLOADS))
def test_split_at_every_byte_boundary(name: str) -> None:
    data = SPLIT_PAYLOADS[name]
    expected = parser().feed(data)
    assert expected  # the payload itself is valid
    for i in range(1, len(data)):
        assert feed_all([data[:i], data[i:]]) == expected, f"split at byte {i}: {data[:i]!r} | {data[i:]!r}"


@pytest.mark.parametrize("name", list(SPLIT_PAYLOADS))
def test_byte_by_byte_gives_the_same_requests(name: str) -> None:
    data = SPLIT_PAYLOADS[name]
    expected = parser().feed(data)
    assert feed_all([data[i : i + 1] for i in range(len(data))]) == expected


def test_multibulk_split_after_header() -> None:
    assert feed_all([b"*2\r\n", b"$4\r\nECHO\r\n$2\r\nhi\r\n"]) == [[b"ECHO", b"hi"]]


def test_multibulk_split_between_arguments() -> None:
    assert feed_all([b"*2\r\n$4\r\nECHO\r\n", b"$2\r\nhi\r\n"]) == [[b"ECHO", b"hi"]]


def test_split_after_an_argument_that_looks_like_the_previous_request() -> None:
    a, b, c = [b"x"], [b"ECHO", mb("x")], [b"PING"]
    wire = mb(*a) + mb(*b) + mb(*c)
    cut = len(mb(*a) + mb(*b)) - 2  # inside the CRLF that ends b's last argument
    assert feed_all([wire[:cut], wire[cut:]]) == [a, b, c]


def test_multibulk_split_inside_a_line() -> None:
    for chunks in ([b"*1\r", b"\n$4\r\nPING\r\n"], [b"*1\r\n$4", b"\r\nPING\r\n"], [b"*1\r\n$4\r\nPI", b"NG\r\n"]):
        assert feed_all(chunks) == [[b"PING"]], chunks


# --- inline ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"PING\r\n", [b"PING"]),
        (b"PING\n", [b"PING"]),
        (b"  ping   hello \r\n", [b"ping", b"hello"]),
        (b"PING\thello\r\n", [b"PING", b"hello"]),
        (b'ECHO "a b"\r\n', [b"ECHO", b"a b"]),
        (b"ECHO 'a b'\r\n", [b"ECHO", b"a b"]),
        (b'ECHO "\\x41\\x4a"\r\n', [b"ECHO", b"AJ"]),
        (b'ECHO "\\x4"\r\n', [b"ECHO", b"x4"]),  # not two hex digits: '\x' is just 'x'
        (b'ECHO "a\\nb\\tc\\r\\\\"\r\n', [b"ECHO", b"a\nb\tc\r\\"]),
        (b'ECHO "say \\"hi\\""\r\n', [b"ECHO", b'say "hi"']),
        (b"ECHO 'it\\'s'\r\n", [b"ECHO", b"it's"]),
        (b"ECHO 'no \\n escape'\r\n", [b"ECHO", b"no \\n escape"]),
        (b'ECHO ""\r\n', [b"ECHO", b""]),
        (b"SET k 1 NX\r\n", [b"SET", b"k", b"1", b"NX"]),
    ],
)
def test_inline(line: bytes, expected: list[bytes]) -> None:
    assert parser().feed(line) == [expected]


@pytest.mark.parametrize("line", [b'ECHO "a\r\n', b"ECHO 'a\r\n", b'ECHO "a"b\r\n', b"ECHO 'a'b\r\n", b'"\r\n'])
def test_unbalanced_quotes(line: bytes) -> None:
    message, before = protocol_error([line])
    assert message == "unbalanced quotes in request"
    assert before == []


def test_split_inline_directly() -> None:
    assert split_inline(b"") == []
    assert split_inline(b"   ") == []
    assert split_inline(b'a "b c" d') == [b"a", b"b c", b"d"]


def test_empty_inline_lines_are_ignored() -> None:
    assert parser().feed(b"\r\n\n   \r\n\t\r\nPING\r\n\r\n") == [[b"PING"]]


def test_inline_waits_for_its_newline() -> None:
    p = parser()
    assert p.feed(b"PIN") == []
    assert p.feed(b"G\r") == []
    assert p.feed(b"\n") == [[b"PING"]]


def test_pipelined_inline_requests() -> None:
    assert parser().feed(b"PING\r\nINCR a\r\nECHO 'x y'\n") == [[b"PING"], [b"INCR", b"a"], [b"ECHO", b"x y"]]


def test_multibulk_then_inline_in_one_feed() -> None:
    assert parser().feed(mb("ECHO", "x") + b"PING\r\n") == [[b"ECHO", b"x"], [b"PING"]]


# --- limits ----------------------------------------------------------------------------------


def test_max_args_multibulk() -> None:
    p = parser(max_args=3)
    assert p.feed(mb("MGET", "a", "b")) == [[b"MGET", b"a", b"b"]]
    message, before = protocol_error([mb("MGET", "a", "b", "c")], parser(max_args=3))
    assert message == "invalid multibulk length"
    assert before == []


def test_max_args_inline() -> None:
    assert parser(max_args=3).feed(b"MGET a b\r\n") == [[b"MGET", b"a", b"b"]]
    message, _ = protocol_error([b"MGET a b c\r\n"], parser(max_args=3))
    assert message == "invalid multibulk length"


def test_max_args_header_refused_at_once() -> None:
    message, _ = protocol_error([b"*4\r\n"], parser(max_args=3))
    assert message == "invalid multibulk length"


def test_multibulk_length_not_a_number() -> None:
    assert protocol_error([b"*abc\r\n"])[0] == "invalid multibulk length"


def test_huge_bulk_length_refused_before_the_body() -> None:
    message, _ = protocol_error([b"*2\r\n$4\r\nECHO\r\n$%d\r\n" % (MAX_BULK + 1)])
    assert message == "invalid bulk length"
    assert protocol_error([b"*1\r\n$999999999999\r\n"])[0] == "invalid bulk length"


def test_bulk_length_not_a_number() -> None:
    assert protocol_error([b"*1\r\n$x\r\n"])[0] == "invalid bulk length"


def test_bulk_at_the_limit_is_accepted() -> None:
    payload = b"x" * MAX_BULK
    assert parser().feed(mb(b"ECHO", payload)) == [[b"ECHO", payload]]


def test_oversized_bulk_in_one_read_is_not_run() -> None:
    message, before = protocol_error([mb("PING") + mb(b"ECHO", b"x" * (MAX_BULK + 1))])
    assert message == "invalid bulk length"
    assert before == [[b"PING"]]


def test_oversized_bulk_declared_in_a_later_read() -> None:
    p = parser()
    assert p.feed(b"*2\r\n$4\r\nECHO\r\n") == []
    body = b"x" * (MAX_BULK + 904) + b"\r\n"
    with pytest.raises(ProtocolError, match="invalid bulk length"):
        p.feed(b"$%d\r\n" % (MAX_BULK + 904))  # refused at the header, like a header at a read's start
        for i in range(0, len(body), 2000):
            assert p.feed(body[i : i + 2000]) == []


def test_too_big_inline_request() -> None:
    assert parser().feed(b"x" * MAX_INLINE) == []  # at the limit, still waiting for its newline
    message, _ = protocol_error([b"x" * (MAX_INLINE + 1)])  # refused before any newline arrives
    assert message == "too big inline request"
    message, _ = protocol_error([b"ECHO " + b"x" * MAX_INLINE + b"\r\n"])
    assert message == "too big inline request"
    message, _ = protocol_error([b"ECHO ", b"x" * 700, b"x" * 700])  # across reads
    assert message == "too big inline request"


def test_arguments_are_limited_by_the_memory_of_the_request() -> None:
    """max_held (client_query_buffer_limit) bounds an unfinished request's bytes plus ARG_OVERHEAD
    per argument: a header announcing more arguments than that can hold is refused at once; a
    request whose arguments outgrow it while arriving is refused then; ``held`` says what it holds."""
    overhead = march.resp.ARG_OVERHEAD
    limit = 100 * overhead
    p = RequestParser(1 << 20, MAX_BULK, MAX_INLINE, max_held=limit)
    assert p.feed(mb("MGET", *["k"] * 98)) == [[b"MGET", *[b"k"] * 98]]  # complete in one read
    assert protocol_error([b"*101\r\n"], RequestParser(1 << 20, MAX_BULK, MAX_INLINE, max_held=limit)) == (
        "invalid multibulk length",
        [],
    )
    p = RequestParser(1 << 20, MAX_BULK, MAX_INLINE, max_held=limit)
    wire = mb("MGET", *[b"k%03d" % i for i in range(99)])
    assert p.feed(wire[:200]) == []
    assert 200 <= p.held <= 200 + overhead * 40
    with pytest.raises(ProtocolError, match="too big request"):
        p.feed(wire[200:-3])  # 99 arguments of 4 bytes: 99 x 52 bytes, past 100 x 48
    p = RequestParser(1 << 20, MAX_BULK, MAX_INLINE, max_held=limit)
    assert feed_all([wire[:200], wire[200:]], p) == [[b"MGET", *[b"k%03d" % i for i in range(99)]]]
    assert p.held == 0  # complete within its last read: accepted


@pytest.mark.skipif(not march.resp._CURSOR_OK, reason="hiredis' reader state is not where hiredis-py 3 has it")
def test_hiredis_hands_an_unfinished_request_over_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read that ends inside a request: that request goes to the exact parser at once (found by
    parsing the read again), so ``held`` counts it; a read that ends at a boundary is parsed once."""
    parsed_again: list[int] = []
    tail = march.resp._tail
    monkeypatch.setattr(march.resp, "_tail", lambda *a: parsed_again.append(1) or tail(*a))
    p = parser()
    for _ in range(3):
        assert p.feed(mb("INCR", "k") * 3) == [[b"INCR", b"k"]] * 3
    assert parsed_again == [] and p.held == 0
    echo = mb("ECHO", "x" * 300)
    assert p.feed(mb("INCR", "k") + echo[:100]) == [[b"INCR", b"k"]]
    assert parsed_again == [1] and p.held >= 100 - 20
    assert p.feed(echo[100:] + mb("PING")) == [[b"ECHO", b"x" * 300], [b"PING"]]
    assert p.held == 0


# --- non-bulk elements and other malformed input ----------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"*1\r\n:5\r\n", "expected '$', got ':'"),
        (b"*1\r\n*1\r\n$1\r\na\r\n", "expected '$', got '*'"),
        (b"*1\r\n-ERR x\r\n", "expected '$', got '-'"),
        (b"*1\r\n+x\r\n", "expected '$', got '+'"),
        (b"*1\r\n$-1\r\n", "invalid bulk length"),
    ],
)
def test_non_bulk_elements(data: bytes, expected: str) -> None:
    assert protocol_error([data])[0] == expected


def test_protocol_error_keeps_the_requests_before_the_bad_bytes() -> None:
    message, before = protocol_error([mb("PING") + mb("ECHO", "x") + b"*1\r\n:5\r\n"])
    assert message == "expected '$', got ':'"
    assert before == [[b"PING"], [b"ECHO", b"x"]]
    message, before = protocol_error([b'PING\r\nINCR a\r\nECHO "oops\r\n'])
    assert message == "unbalanced quotes in request"
    assert before == [[b"PING"], [b"INCR", b"a"]]


def test_protocol_error_after_earlier_feeds() -> None:
    p = parser()
    assert p.feed(mb("PING")) == [[b"PING"]]
    message, before = protocol_error([mb("INCR", "a") + b"*x\r\n"], p)
    assert message == "invalid multibulk length"
    assert before == [[b"INCR", b"a"]]


# --- RESP3 and other non-bulk types (Redis: `expected '$', got '<byte>'`) ----------------------

INCR = mb("INCR", "k")

# One element of each RESP2/RESP3 type but the bulk string, complete.
ELEMENTS = {
    "%": b"%1\r\n$1\r\na\r\n$1\r\nb\r\n",
    "~": b"~1\r\n$1\r\na\r\n",
    "|": b"|1\r\n$1\r\na\r\n$1\r\nb\r\n",
    ">": b">1\r\n$1\r\na\r\n",
    "(": b"(12345678901234567890\r\n",
    ",": b",1.5\r\n",
    "#": b"#t\r\n",
    "_": b"_\r\n",
    "=": b"=5\r\ntxt:a\r\n",
    "!": b"!3\r\nerr\r\n",
    ":": b":1\r\n",
    "+": b"+x\r\n",
    "-": b"-ERR x\r\n",
    "*": b"*1\r\n$1\r\na\r\n",
}


@pytest.mark.parametrize("kind", list(ELEMENTS))
def test_non_bulk_element_of_every_type(kind: str) -> None:
    """Redis reads the type byte of each element and refuses anything but `$`; the requests before
    it in the same read still run (they are returned with the error)."""
    element = ELEMENTS[kind]
    expected = f"expected '$', got '{kind}'"
    for data in (b"*1\r\n" + element, b"*2\r\n$4\r\nECHO\r\n" + element):
        assert protocol_error([data]) == (expected, [])
        assert protocol_error([INCR + data + mb("PING")]) == (expected, [[b"INCR", b"k"]])
        for cut in range(1, len(data)):  # however the request is split across reads
            assert protocol_error([INCR + data[:cut], data[cut:] + mb("PING")]) == (expected, [[b"INCR", b"k"]])


@pytest.mark.parametrize(
    "data",
    [
        b"*1\r\n%1\r\n*1\r\n$1\r\na\r\n$1\r\nb\r\n",  # a map with an array as its key
        b"*1\r\n%1\r\n*0\r\n:1\r\n",
        b"*1\r\n%1\r\n%1\r\n:1\r\n:1\r\n:1\r\n",  # a map as a map's key
        b"*1\r\n~1\r\n%1\r\n$1\r\na\r\n$1\r\nb\r\n",
    ],
    ids=repr,
)
def test_maps_that_hiredis_cannot_build(data: bytes) -> None:
    """hiredis raises TypeError building these (unhashable keys): a clean protocol error, and the
    INCR before it in the same read is not lost."""
    kind = chr(data[4])
    assert protocol_error([INCR + data]) == (f"expected '$', got '{kind}'", [[b"INCR", b"k"]])


@pytest.mark.parametrize("kind", list(ELEMENTS))
def test_resp3_frame_as_a_whole_request_is_inline(kind: str) -> None:
    """At a request boundary Redis reads anything but `*` as an inline command: `%1` is the command
    "%1" (checked against redis-server in tests/transport), so each line is a request."""
    frame = ELEMENTS[kind]
    if kind == "*":
        return  # a multibulk request
    lines = [split_inline(line.rstrip(b"\r")) for line in frame.split(b"\n")[:-1]]
    expected = [line for line in lines if line]
    assert parser().feed(frame) == expected
    assert parser().feed(INCR + frame + INCR) == [[b"INCR", b"k"], *expected, [b"INCR", b"k"]]
    assert feed_all([INCR + frame[:2], frame[2:] + INCR]) == [[b"INCR", b"k"], *expected, [b"INCR", b"k"]]


def test_huge_multibulk_count_is_refused_before_hiredis_sees_it() -> None:
    # hiredis raises MemoryError allocating a list of 2**32 - 1 elements.
    p = RequestParser(1 << 40, MAX_BULK, MAX_INLINE)
    assert protocol_error([INCR + b"*4294967295\r\n"], p) == ("invalid multibulk length", [[b"INCR", b"k"]])
    assert protocol_error([b"*2147483648\r\n"], RequestParser(1 << 40, MAX_BULK, MAX_INLINE))[0] == (
        "invalid multibulk length"
    )


@pytest.mark.parametrize("header", [b"*-1\r\n", b"*-5\r\n", b"*0\r\n"])
def test_empty_and_negative_multibulk_are_ignored(header: bytes) -> None:
    """Redis' own test suite: "Negative multibulk length" (`*-10`) is ignored, not an error."""
    assert parser().feed(header + mb("PING")) == [[b"PING"]]
    assert parser().feed(INCR + header + mb("PING")) == [[b"INCR", b"k"], [b"PING"]]
    assert feed_all([INCR + header[:2], header[2:] + mb("PING")]) == [[b"INCR", b"k"], [b"PING"]]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"*01\r\n$1\r\na\r\n", "invalid multibulk length"),  # string2ll: no leading zero, sign or space
        (b"*+1\r\n$1\r\na\r\n", "invalid multibulk length"),
        (b"* 1\r\n$1\r\na\r\n", "invalid multibulk length"),
        (b"*1\r\n$01\r\na\r\n", "invalid bulk length"),
        (b"*1\r\n$-0\r\n", "invalid bulk length"),
        (b"*1\r\n$99999999999999999999\r\n", "invalid bulk length"),
        (b"*1\r\n\r\n", "expected '$', got '\r'"),
        (b"*1\r\nx\r\n", "expected '$', got 'x'"),
    ],
    ids=repr,
)
def test_malformed_headers(data: bytes, expected: str) -> None:
    assert protocol_error([INCR + data]) == (expected, [[b"INCR", b"k"]])


def test_header_lines_are_read_as_redis_reads_them() -> None:
    """Redis ends a header line at its '\r' and skips the byte after it; it skips the two bytes after
    a bulk body without looking at them. Same requests, however the input is split."""
    for data in (b"*1\rX$4\r\nPING\r\n", b"*1\r\n$4\r\nPINGXY" + mb("PING")):
        expected = [[b"PING"]] * data.count(b"PING")
        assert parser().feed(data) == expected
        assert feed_all([data[i : i + 1] for i in range(len(data))]) == expected


def test_header_line_without_end_is_bounded() -> None:
    message, _ = protocol_error([b"*" + b"1" * MAX_INLINE, b"1"])
    assert message == "too big mbulk count string"
    message, _ = protocol_error([b"*1\r\n$" + b"1" * MAX_INLINE, b"1"])
    assert message == "too big bulk count string"


@pytest.fixture(params=["maxelements", "scan"])
def count_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of keeping hiredis from large aggregate counts: its maxelements (set where this
    hiredis build has it), or the scan of each read used when it cannot be set."""
    if request.param == "scan":
        monkeypatch.setattr(march.resp, "_MAX_ELEMENTS_AT", 0)
        monkeypatch.setattr(march.resp, "_COUNTS_UNCHECKED", True)
    else:
        assert march.resp._MAX_ELEMENTS_AT, "hiredis-py's reader layout was not recognised"
    return str(request.param)


@pytest.mark.parametrize(
    "header",
    [b"*2147483647\r\n", b">2147483647\r\n", b"~2147483647\r\n", b"|2147483647\r\n", b"*1\r\n>999999999\r\n"],
    ids=repr,
)
def test_large_aggregate_counts_allocate_nothing(header: bytes, count_guard: str) -> None:
    """hiredis allocated the list a header declares, and freed it slot by slot: `*2147483647` and a
    bad byte cost the event loop 4 s (and `>2147483647` a minute). Now nothing that size is
    allocated, whether the header is refused, left unfinished, or split across reads."""
    for chunks in (
        [INCR + header + b"!x\r\n"],
        [INCR + header],
        [INCR + header[:5], header[5:] + b":1\r\n"],
        [INCR, header, b"x"],
    ):
        for max_args in (MAX_ARGS, 1 << 40):  # even when max_args allows such a count
            tracemalloc.start()
            try:
                p = parser(max_args=max_args)
                with contextlib.suppress(ProtocolError):
                    for c in chunks:
                        p.feed(c)
                del p
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert peak < 1 << 20, (chunks, max_args, peak)


def test_count_guard_gives_the_same_requests(count_guard: str) -> None:
    wire = mb("PING") + b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$6\r\n123456\r\n" + mb("KEYS", "*") + b"*0\r\n" + INCR
    expected = [[b"PING"], [b"SET", b"k", b"123456"], [b"KEYS", b"*"], [b"INCR", b"k"]]
    assert parser().feed(wire) == expected
    assert feed_all([wire[i : i + 7] for i in range(0, len(wire), 7)]) == expected
    assert protocol_error([INCR + b"*1\r\n~99999999\r\n"]) == ("expected '$', got '~'", [[b"INCR", b"k"]])


def _line_events(chunks: list[bytes]) -> int:
    """Lines of march/resp.py run while feeding ``chunks`` (a deterministic count of the work)."""
    import sys

    import march.resp

    count = 0
    target = march.resp.__file__

    def tracer(frame, event, arg):  # type: ignore[no-untyped-def]
        nonlocal count
        if frame.f_code.co_filename != target:
            return None
        if event == "line":
            count += 1
        return tracer

    p = parser(max_bulk=1 << 22)
    sys.settrace(tracer)
    try:
        for c in chunks:
            p.feed(c)
    except ProtocolError:
        pass
    finally:
        sys.settrace(None)
    return count


@pytest.mark.parametrize(
    "tail",
    [b"*x\r\n", b"!x\r\n", b":1\r\n", b"*1\r\n:1\r\n", b"PING\r\n", b"*1\r\n$x\r\n"],
    ids=repr,
)
@pytest.mark.timeout(60)
def test_error_path_is_linear(tail: bytes) -> None:
    """A large argument whose read ends with bad bytes: the work does not grow with its size (it
    used to try every possible start of the read, copying the read each time: quadratic)."""

    def chunks(n: int) -> list[bytes]:
        return [b"*2\r\n$4\r\nECHO\r\n$%d\r\n" % n, b"x" * (n // 2), b"x" * (n - n // 2) + b"\r\n" + tail]

    small, large = _line_events(chunks(1 << 12)), _line_events(chunks(1 << 20))
    assert large <= small + 10, (small, large)


# --- before AUTH: Redis' limits for unauthenticated clients -------------------------------------


def locked(max_args: int = MAX_ARGS, max_bulk: int = 1 << 20) -> RequestParser:
    return RequestParser(max_args, max_bulk, MAX_INLINE, authenticated=False)


def test_unauthenticated_limits() -> None:
    assert protocol_error([b"*11\r\n"], locked()) == ("unauthenticated multibulk length", [])
    assert protocol_error([b"*1\r\n$16385\r\n"], locked()) == ("unauthenticated bulk length", [])
    assert protocol_error([INCR + b"*2\r\n$4\r\nAUTH\r\n$16385\r\n"], locked()) == (
        "unauthenticated bulk length",
        [[b"INCR", b"k"]],
    )
    ten = [b"%d" % i for i in range(10)]
    big = b"x" * 16384
    assert locked().feed(mb(*ten) + mb(b"AUTH", big)) == [ten, [b"AUTH", big]]  # at the limits
    # Redis' own limits come first (as in Redis): a count over max_args but not INT_MAX is unauthenticated,
    # and so is a length over max_bulk but within Redis' 512 MiB; past that it is invalid.
    assert protocol_error([b"*100\r\n"], locked())[0] == "unauthenticated multibulk length"
    assert protocol_error([b"*1\r\n$99999999\r\n"], locked(max_bulk=1 << 20))[0] == "unauthenticated bulk length"
    assert protocol_error([b"*1\r\n$536870913\r\n"], locked(max_bulk=1 << 20))[0] == "invalid bulk length"
    assert protocol_error([b"*1\r\n$99999999\r\n"], RequestParser(1024, 1 << 20, 65536))[0] == "invalid bulk length"


def test_unauthenticated_limits_apply_at_the_header() -> None:
    """The body of an oversized argument is never held: the header alone is refused."""
    p = locked()
    assert p.feed(b"*2\r\n$4\r\nAUTH\r\n") == []
    with pytest.raises(ProtocolError, match="unauthenticated bulk length"):
        p.feed(b"$1048576\r\n")
    p = locked()
    with pytest.raises(ProtocolError, match="unauthenticated multibulk length"):
        p.feed(b"*1000000\r\n")


def test_bytes_held_before_auth_stay_small() -> None:
    """Whatever an unauthenticated client sends, the parser holds at most about 10 arguments of 16 KiB."""
    p = locked()
    held = 0
    sent = mb(*[b"x" * 16384] * 10)[:-1]  # all but its last byte
    for i in range(0, len(sent), 1000):
        assert p.feed(sent[i : i + 1000]) == []
        held = max(held, len(p._part) + p._held)  # what the parser holds
    assert held <= 10 * 16384 + 200


def test_authenticating_lifts_the_limits() -> None:
    p = locked()
    assert p.feed(mb("AUTH", "pw")) == [[b"AUTH", b"pw"]]
    p.authenticated = True  # the server says AUTH succeeded
    big = b"x" * 20000
    assert p.feed(mb(b"ECHO", big) + mb(*[b"a"] * 12)) == [[b"ECHO", big], [b"a"] * 12]
    p.authenticated = False  # RESET
    assert protocol_error([mb(*[b"a"] * 12)], p)[0] == "unauthenticated multibulk length"


def test_limits_back_on_while_hiredis_holds_a_request() -> None:
    """RESET in the middle of a pipeline: the request after it is parsed again, with the limits."""
    p = parser(max_bulk=1 << 20)
    assert p.feed(mb("RESET") + b"*1\r\n$20000\r\nxx") == [[b"RESET"]]
    p.authenticated = False
    assert protocol_error([b"x" * 100], p)[0] == "unauthenticated bulk length"


def test_requests_behind_auth_in_the_same_read() -> None:
    """Redis checks each header after running the requests before it: behind an AUTH that succeeds,
    the normal limits apply. The parser lets them through and rechecks an unfinished one at the next
    read if the connection is still not authenticated."""
    big = b"x" * 20000
    p = locked()
    assert p.feed(mb("AUTH", "pw") + mb(b"ECHO", big)) == [[b"AUTH", b"pw"], [b"ECHO", big]]
    p = locked()
    assert p.feed(b"AUTH pw\r\n" + mb(*[b"a"] * 12)) == [[b"AUTH", b"pw"], [b"a"] * 12]
    wire = mb("AUTH", "pw") + mb(b"ECHO", big)
    p = locked()
    assert p.feed(wire[:5000]) == [[b"AUTH", b"pw"]]
    p.authenticated = True  # AUTH succeeded
    assert p.feed(wire[5000:]) == [[b"ECHO", big]]
    p = locked()
    assert p.feed(wire[:5000]) == [[b"AUTH", b"pw"]]
    assert protocol_error([wire[5000:]], p) == ("unauthenticated bulk length", [])  # AUTH failed


class _Client:
    authenticated = False


def test_parser_follows_the_client() -> None:
    """With ``auth_source`` the parser reads the client's state itself: strict from the start, and
    lifted at the first read after the client authenticated, however that happened."""
    client = _Client()
    p = parser(max_bulk=1 << 20)
    p.auth_source = client
    assert not p.authenticated
    assert p.feed(mb("AUTH", "pw")) == [[b"AUTH", b"pw"]]
    client.authenticated = True  # AUTH ran and succeeded (the parser is not told)
    big = b"x" * 20000
    assert p.feed(mb(b"ECHO", big)) == [[b"ECHO", big]]
    assert p.authenticated
    client.authenticated = False  # RESET ran: seen when the parser is told, or at its next exact read
    p.authenticated = client.authenticated
    assert protocol_error([mb(b"ECHO", big)], p)[0] == "unauthenticated bulk length"


def test_inline_commands_before_auth() -> None:
    assert locked().feed(b"AUTH pw\r\nPING\r\n") == [[b"AUTH", b"pw"], [b"PING"]]
    assert protocol_error([b"x" * (MAX_INLINE + 1)], locked())[0] == "too big inline request"


# --- property: any requests, any split ---------------------------------------------------------

_args = st.lists(st.binary(max_size=40), min_size=1, max_size=6)
_requests = st.lists(_args, min_size=1, max_size=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=_requests, data=st.data())
def test_random_requests_random_splits_round_trip(requests: list[list[bytes]], data: st.DataObject) -> None:
    wire = b"".join(mb(*r) for r in requests)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(wire) - 1), max_size=10), label="cuts")))
    chunks = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]  # never empty: asyncio
    assert feed_all(chunks) == requests  # never delivers an empty read


@settings(max_examples=200, deadline=None)
@given(requests=_requests, data=st.data())
def test_random_requests_split_at_request_boundaries(requests: list[list[bytes]], data: st.DataObject) -> None:
    """What works today: reads that end between requests (or the whole pipeline in one read)."""
    encoded = [mb(*r) for r in requests]
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(encoded)), max_size=5), label="cuts")))
    chunks = [b"".join(encoded[a:b]) for a, b in zip([0, *cuts], [*cuts, len(encoded)], strict=True)]
    assert feed_all([c for c in chunks if c]) == requests


# --- property: the parser reads any stream as Redis does, however it is split ----------------------


def redis_reads(stream: bytes, authenticated: bool = True) -> tuple[list[list[bytes]], str | None, bool]:
    """What Redis' processInputBuffer makes of the whole of ``stream`` with this module's limits:
    (requests, protocol error or None, whether a bulk body was followed by something else than
    CRLF). A plain transcription of networking.c, kept apart from the parser on purpose."""
    integer = re.compile(rb"(-?[1-9][0-9]{0,18}|0)\Z")

    def string2ll(b: bytes) -> int | None:
        return int(b) if integer.match(b) and -(1 << 63) <= int(b) < (1 << 63) else None

    requests: list[list[bytes]] = []
    pos, n, junk = 0, len(stream), False
    while pos < n:
        if stream[pos] != ord("*"):  # inline
            nl = stream.find(b"\n", pos)
            if nl < 0:
                return requests, "too big inline request" if n - pos > MAX_INLINE else None, junk
            if nl - pos > MAX_INLINE:
                return requests, "too big inline request", junk
            try:
                args = split_inline(stream[pos:nl].rstrip(b"\r"))
            except ProtocolError as exc:
                return requests, str(exc), junk
            if len(args) > MAX_ARGS:
                return requests, "invalid multibulk length", junk
            if args:
                requests.append(args)
            pos = nl + 1
            continue
        nl = stream.find(b"\r", pos)
        if nl < 0 or nl + 1 >= n:
            return requests, None, junk
        count = string2ll(stream[pos + 1 : nl])
        if count is None or count > (1 << 31) - 1:
            return requests, "invalid multibulk length", junk
        if count > 10 and not authenticated:
            return requests, "unauthenticated multibulk length", junk
        if count > MAX_ARGS:
            return requests, "invalid multibulk length", junk
        pos = nl + 2
        args = []
        for _ in range(count):
            nl = stream.find(b"\r", pos)
            if nl < 0 or nl + 1 >= n:
                return requests, None, junk
            if stream[pos] != ord("$"):
                return requests, f"expected '$', got '{chr(stream[pos])}'", junk
            length = string2ll(stream[pos + 1 : nl])
            if length is None or length < 0 or length > MAX_BULK:
                return requests, "invalid bulk length", junk
            if length > 16384 and not authenticated:
                return requests, "unauthenticated bulk length", junk
            pos = nl + 2
            if n - pos < length + 2:
                return requests, None, junk
            args.append(stream[pos : pos + length])
            junk = junk or stream[pos + length : pos + length + 2] != b"\r\n"
            pos += length + 2
        if args:
            requests.append(args)
    return requests, None, junk


_arg = st.binary(max_size=30) | st.sampled_from(
    [b"", b"\r\n", b"*1\r\n$4\r\nPING\r\n", b"x\n+y", b"a\n~b", b"+", b"(", b"=", b"|", b"~", b"$", b"*", b"\r"]
)
_valid = st.lists(_arg, min_size=1, max_size=5).map(lambda a: mb(*a))
_inline = st.lists(
    st.sampled_from([b"PING", b"ECHO", b"'a b'", b'"x\\ny"', b"k", b"INCR", b"+x", b"%1", b"$3", b'"', b""]),
    max_size=4,
).map(lambda words: b" ".join(words) + b"\r\n")
_element = st.sampled_from([*ELEMENTS.values(), b"$-1\r\n", b"$x\r\n", b"$01\r\na\r\n", b"\r\n", b"x\r\n"])
_bad_request = st.tuples(st.lists(_arg, max_size=2), _element).map(
    lambda t: b"*%d\r\n" % (len(t[0]) + 1) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in t[0]) + t[1]
)
_header = st.sampled_from(
    [b"*0\r\n", b"*-1\r\n", b"*-5\r\n", b"*abc\r\n", b"*01\r\n", b"*99999999999\r\n", b"*17\r\n", b"*11\r\n", b"*\r\n"]
)
_frame = st.one_of(
    _valid,
    _valid,
    _valid,
    _inline,
    _bad_request,
    _element,
    _header,
    st.binary(max_size=12),
    _valid.flatmap(lambda f: st.integers(1, len(f) - 1).map(lambda i: f[:i])),  # truncated
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames=st.lists(_frame, min_size=1, max_size=10), authenticated=st.booleans(), data=st.data())
def test_any_stream_any_split_reads_as_redis_reads_it(
    frames: list[bytes], authenticated: bool, data: st.DataObject
) -> None:
    stream = b"".join(frames)
    if not stream or (not authenticated and (b"auth" in stream.lower() or b"hello" in stream.lower())):
        return
    expected, error, junk = redis_reads(stream, authenticated)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(stream) - 1)), max_size=8), label="cuts")))
    chunks = [c for c in (stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)) if c]
    p = RequestParser(MAX_ARGS, MAX_BULK, MAX_INLINE, authenticated=authenticated)
    got: list[list[bytes]] = []
    got_error = None
    try:
        for c in chunks:
            got += p.feed(c)
    except ProtocolError as exc:
        got += exc.requests
        got_error = str(exc)
    if junk:  # a request boundary after such a body may be misjudged (see _unfinished): no crash is enough
        return
    assert (got, got_error) == (expected, error)


# --- encode ------------------------------------------------------------------------------------


class Color(enum.IntEnum):
    RED = 7


@pytest.mark.parametrize(
    ("value", "resp2", "resp3"),
    [
        (0, b":0\r\n", b":0\r\n"),
        (-42, b":-42\r\n", b":-42\r\n"),
        (9223372036854775807, b":9223372036854775807\r\n", b":9223372036854775807\r\n"),
        (Color.RED, b":7\r\n", b":7\r\n"),
        (1 << 63, b"$19\r\n9223372036854775808\r\n", b"(9223372036854775808\r\n"),  # past 64 bits
        (-(1 << 63), b":-9223372036854775808\r\n", b":-9223372036854775808\r\n"),
        (-(1 << 63) - 1, b"$20\r\n-9223372036854775809\r\n", b"(-9223372036854775809\r\n"),
        (b"abc", b"$3\r\nabc\r\n", b"$3\r\nabc\r\n"),
        (b"", b"$0\r\n\r\n", b"$0\r\n\r\n"),
        (b"a\r\nb", b"$4\r\na\r\nb\r\n", b"$4\r\na\r\nb\r\n"),
        ("OK", b"+OK\r\n", b"+OK\r\n"),
        (None, b"$-1\r\n", b"_\r\n"),
        (True, b":1\r\n", b"#t\r\n"),
        (False, b":0\r\n", b"#f\r\n"),
        (1.5, b"$3\r\n1.5\r\n", b",1.5\r\n"),
        (float("inf"), b"$3\r\ninf\r\n", b",inf\r\n"),
        (float("-inf"), b"$4\r\n-inf\r\n", b",-inf\r\n"),
        (float("nan"), b"$3\r\nnan\r\n", b",nan\r\n"),
        ([], b"*0\r\n", b"*0\r\n"),
        ([1, b"x", None], b"*3\r\n:1\r\n$1\r\nx\r\n$-1\r\n", b"*3\r\n:1\r\n$1\r\nx\r\n_\r\n"),
        ((b"a", [2, []]), b"*2\r\n$1\r\na\r\n*2\r\n:2\r\n*0\r\n", b"*2\r\n$1\r\na\r\n*2\r\n:2\r\n*0\r\n"),
        ({}, b"*0\r\n", b"%0\r\n"),
        ({b"a": 1, "b": None}, b"*4\r\n$1\r\na\r\n:1\r\n+b\r\n$-1\r\n", b"%2\r\n$1\r\na\r\n:1\r\n+b\r\n_\r\n"),
        (
            {b"m": {b"k": [1]}},
            b"*2\r\n$1\r\nm\r\n*2\r\n$1\r\nk\r\n*1\r\n:1\r\n",
            b"%1\r\n$1\r\nm\r\n%1\r\n$1\r\nk\r\n*1\r\n:1\r\n",
        ),
        ({b"x"}, b"*1\r\n$1\r\nx\r\n", b"~1\r\n$1\r\nx\r\n"),
        (frozenset({1}), b"*1\r\n:1\r\n", b"~1\r\n:1\r\n"),
        (set(), b"*0\r\n", b"~0\r\n"),
        (Verbatim("abc"), b"$3\r\nabc\r\n", b"=7\r\ntxt:abc\r\n"),
        (Verbatim("a\r\nb:1"), b"$6\r\na\r\nb:1\r\n", b"=10\r\ntxt:a\r\nb:1\r\n"),
        (Verbatim(""), b"$0\r\n\r\n", b"=4\r\ntxt:\r\n"),
        (CommandError("ERR boom"), b"-ERR boom\r\n", b"-ERR boom\r\n"),
        (CommandError("ERR two\r\nlines\n"), b"-ERR two  lines \r\n", b"-ERR two  lines \r\n"),
        ([CommandError("WRONGTYPE no"), 1], b"*2\r\n-WRONGTYPE no\r\n:1\r\n", b"*2\r\n-WRONGTYPE no\r\n:1\r\n"),
    ],
    ids=repr,
)
def test_encode(value: object, resp2: bytes, resp3: bytes) -> None:
    assert encode(value, 2) == resp2
    assert encode(value, 3) == resp3


def test_encode_non_ascii_text() -> None:
    assert encode("é", 2) == b"+\xc3\xa9\r\n"
    assert encode(Verbatim("é"), 3) == b"=6\r\ntxt:\xc3\xa9\r\n"  # the length counts bytes, not characters


def test_encode_unknown_type() -> None:
    with pytest.raises(TypeError):
        encode(object(), 2)


_values = st.recursive(
    st.none() | st.integers(-(1 << 63), (1 << 63) - 1) | st.binary(max_size=30),
    lambda children: st.lists(children, max_size=5),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(value=_values)
def test_encode_round_trips_through_hiredis(value: object) -> None:
    for proto in (2, 3):
        reader = hiredis.Reader()
        reader.feed(encode(value, proto))
        assert reader.gets() == value
        assert reader.gets() is False  # exactly one reply, nothing left over


# --- whole reads of plain requests (``_whole_requests``), repeated requests sharing one list ----------
# Compiled, ``feed`` tries this path first; interpreted it uses hiredis (``_FAST``). These tests force
# the path on, so both builds run it, and off, where the answers must be the same.


@pytest.fixture(params=[True, False], ids=["whole_reads", "hiredis_first"])
def fast(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    monkeypatch.setattr(march.resp, "_FAST", request.param)
    return bool(request.param)


INCR = mb("INCR", "k")


def test_a_pipeline_of_identical_requests_is_one_list(fast: bool) -> None:
    got = parser().feed(INCR * 16)
    assert got == [[b"INCR", b"k"]] * 16
    if fast:  # the same list: Connection.run finds the run with ``is``
        assert all(r is got[0] for r in got)


def test_identical_requests_interleaved_with_others(fast: bool) -> None:
    other = mb("INCR", "kk")  # one byte longer: a prefix of it is INCR k's bytes but for the CRLF
    wire = INCR * 3 + other + INCR * 2 + mb("INCR", "j") + mb("GET", "k") * 2 + mb("INCR", "k", "x")
    expected = [[b"INCR", b"k"]] * 3 + [[b"INCR", b"kk"]] + [[b"INCR", b"k"]] * 2
    expected += [[b"INCR", b"j"], [b"GET", b"k"], [b"GET", b"k"], [b"INCR", b"k", b"x"]]
    assert parser().feed(wire) == expected
    assert feed_all([wire[:7], wire[7:]]) == expected
    # The same length and the same start as the run before it: only its last argument differs.
    assert parser().feed(INCR * 2 + mb("INCR", "j")) == [[b"INCR", b"k"]] * 2 + [[b"INCR", b"j"]]


def test_a_read_that_ends_inside_a_repeated_request(fast: bool) -> None:
    p = parser()
    assert p.feed(INCR * 3 + INCR[:-3]) == [[b"INCR", b"k"]] * 3
    assert p.held > 0
    assert p.feed(INCR[-3:] + INCR * 2) == [[b"INCR", b"k"]] * 3
    assert p.held == 0
    assert p.feed(INCR * 4) == [[b"INCR", b"k"]] * 4


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (mb("GET", "x" * (MAX_BULK + 1)), "invalid bulk length"),
        (mb(*["a"] * (MAX_ARGS + 1)), "invalid multibulk length"),
        (b"*2\r\n$4\r\nINCR\r\n$01\r\nk\r\n", "invalid bulk length"),
        (b"*2\r\n$4\r\nINCR\r\n%1\r\n", "expected '$', got '%'"),
    ],
)
def test_a_limit_broken_after_a_run_of_identical_requests(fast: bool, bad: bytes, error: str) -> None:
    assert protocol_error([INCR * 5 + bad + INCR]) == (error, [[b"INCR", b"k"]] * 5)


def test_repeated_requests_before_auth_keep_the_strict_limits(fast: bool) -> None:
    big = mb("SET", "k", "v" * (march.resp.UNAUTH_MAX_BULK + 1))
    assert protocol_error([big * 3], locked()) == ("unauthenticated bulk length", [])
    many = mb(*["a"] * 11)
    refused = ("unauthenticated multibulk length", [[b"PING"]] * 2)
    assert protocol_error([mb("PING") * 2 + many * 2], locked()) == refused


@pytest.mark.parametrize(
    "data",
    [
        b"",
        INCR[:-1],  # ends inside a request
        INCR + b"PING\r\n",  # an inline command
        b"*1\r\n+PING\r\n",  # another type than a bulk string
        b"*0\r\n",
        b"*-1\r\n",
        b"*01\r\n$1\r\nx\r\n",  # a leading zero
        b"*1\r\n$01\r\nx\r\n",
        b"*1\r\n$-1\r\n",
        b"*1\n$1\r\nx\r\n",  # a header line without its CR
        b"*1\r\n$1\r\nxy\r\n",  # a body not followed by CRLF
        b"*1\r\n$1\r\nx\rx",
        b"*%d\r\n" % (MAX_ARGS + 1) + b"$1\r\nx\r\n" * (MAX_ARGS + 1),
        b"*1\r\n$%d\r\n" % (MAX_BULK + 1) + b"x" * (MAX_BULK + 1) + b"\r\n",
    ],
)
def test_whole_reads_leave_anything_else_to_the_parser(data: bytes) -> None:
    assert march.resp._whole_requests(data, MAX_ARGS, MAX_BULK) == ([] if not data else None)


_repeated_frames = st.lists(st.tuples(_frame, st.integers(1, 4)), min_size=1, max_size=6).map(
    lambda runs: [f for f, k in runs for _ in range(k)]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames=_repeated_frames, authenticated=st.booleans(), data=st.data())
def test_any_stream_of_repeats_reads_as_redis_reads_it(
    frames: list[bytes], authenticated: bool, data: st.DataObject
) -> None:
    """The property above, with runs of repeated frames, through the whole-read path (forced on)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(march.resp, "_FAST", True)
        test_any_stream_any_split_reads_as_redis_reads_it.hypothesis.inner_test(frames, authenticated, data)  # type: ignore[attr-defined]


def test_one_integer_reply_is_what_encode_makes_of_it() -> None:
    """``integer_reply`` (compiled: digits written into a C buffer) is ``encode``'s bytes for every int
    of 64 bits: each digit count, both signs, the bounds; past them, the format's ``:v``."""
    values = [0, 1, -1, 9, 10, -10, 99, 100, 12345, -98765, 1 << 62, (1 << 63) - 1, -(1 << 63)]
    values += [10**k + d for k in range(19) for d in (-1, 0, 1)] + [-(10**k) for k in range(19)]
    values += [1 << 63, -(1 << 63) - 1, 1 << 64, -(10**30)]
    for v in values:
        assert march.resp.integer_reply(v) == b":%d\r\n" % v, v
        if -(1 << 63) <= v < 1 << 63:
            assert march.resp.integer_reply(v) == encode(v, 2), v


def test_integer_runs_encode_as_one_by_one(fast: bool) -> None:
    for first in (0, 1, 7, 95, 999, 123456789, (1 << 63) - 20):
        for count in (1, 2, 16, 100):
            assert march.resp.encode_integers(range(first, first + count)) == b"".join(
                b":%d\r\n" % v for v in range(first, first + count)
            )
    assert march.resp._integer_run(9998, 3) == b":9998\r\n:9999\r\n:10000\r\n"
    for values in ([], [1], list(range(5, 21)), list(range(-3, 200)), [1 << 63, -(1 << 63), 7]):
        assert march.resp.encode_integers(values) == b"".join(b":%d\r\n" % v for v in values)
    assert march.resp.encode_integers(range(10, 150)) == b"".join(b":%d\r\n" % v for v in range(10, 150))
