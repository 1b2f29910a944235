"""Unit tests of ``march.resp``: ``RequestParser`` (bytes in, requests out) and ``encode``.

No I/O, no server. The expected texts of protocol errors are Redis' own (``-ERR Protocol error:
<text>``); tests/protocol checks the same cases against a real process and a real redis-server.

Tests marked ``xfail(strict=True)`` show a known march bug: each reason says what was fed, what
came back and what Redis does. When the bug is fixed the test passes, the strict mark turns that
into a failure, and the mark must be removed.
"""

from __future__ import annotations

import enum

import hiredis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


# --- non-bulk elements and other malformed input ----------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"*1\r\n:5\r\n", "expected '$', got ':'"),
        (b"*1\r\n*1\r\n$1\r\na\r\n", "expected '$', got '*'"),
        (b"*1\r\n-ERR x\r\n", "expected '$', got '-'"),
        pytest.param(
            b"*1\r\n+x\r\n",
            "expected '$', got '+'",
            marks=march_bug(
                "a simple string element is accepted as an argument: feed(b'*1\\r\\n+x\\r\\n') -> [[b'x']]"
            ),
        ),
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
