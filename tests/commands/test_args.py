"""The argument cursor (``march.commands.args.Args``) on its own: typed reads, options, the end, and
the error text each raises (Redis' own, from ``march.errors``). Pure: no server."""

from __future__ import annotations

import pytest

from march import errors
from march.commands.args import Args, parse_float, parse_int
from march.errors import CommandError


def request(*words: str) -> Args:
    """A cursor after the command's name (``CMD`` then ``words``)."""
    return Args([b"CMD", *(w.encode() for w in words)])


def error_of(read: object) -> str:
    with pytest.raises(CommandError) as raised:
        read()  # type: ignore[operator]
    return raised.value.message


@pytest.mark.parametrize("text", ["0", "1", "-1", "42", str(2**63 - 1), str(-(2**63))])
def test_integer_reads_what_redis_reads(text: str) -> None:
    assert request(text).integer() == int(text)


@pytest.mark.parametrize(
    "text", ["", " 1", "1 ", "+1", "01", "-0", "0x10", "1.0", "1e3", str(2**63), str(-(2**63) - 1)]
)
def test_integer_refuses_what_redis_refuses(text: str) -> None:
    assert error_of(request(text).integer) == errors.NOT_INTEGER == "ERR value is not an integer or out of range"
    with pytest.raises(CommandError):
        parse_int(text.encode())


def test_integer_bounds_and_own_text() -> None:
    assert request("5").integer(low=1, high=5) == 5
    assert error_of(lambda: request("0").integer(errors.CLIENT_ID, low=1)) == errors.CLIENT_ID
    assert error_of(lambda: request("x").integer(errors.CLIENT_ID, low=1)) == errors.CLIENT_ID
    assert error_of(lambda: request("6").integer(low=1, high=5)) == errors.NOT_INTEGER
    assert request("0").nonneg() == 0
    assert error_of(lambda: request("-1").nonneg(errors.WORKER_UPTO)) == errors.WORKER_UPTO


@pytest.mark.parametrize("text", ["1", "-1.5", "1e3", ".5", "0"])
def test_double_reads_finite_numbers(text: str) -> None:
    assert request(text).double() == float(text)


@pytest.mark.parametrize("text", ["", "x", " 1", "1 ", "nan", "inf", "-inf", "1e999", "infinity"])
def test_double_refuses_the_rest(text: str) -> None:
    assert error_of(request(text).double) == errors.NOT_FLOAT == "ERR value is not a valid float"
    with pytest.raises(CommandError):
        parse_float(text.encode())


def test_reading_past_the_end_is_a_syntax_error() -> None:
    cursor = request("a")
    assert cursor.next() == b"a" and len(cursor) == 0 and not cursor.more()
    for read in (cursor.next, cursor.integer, cursor.text, cursor.name, cursor.key, cursor.double):
        assert error_of(read) == errors.SYNTAX == "ERR syntax error"
    assert error_of(lambda: cursor.next(errors.WORKER_ID)) == errors.WORKER_ID


def test_text_and_name_keep_or_replace_bad_bytes() -> None:
    cursor = Args([b"CMD", b"caf\xc3\xa9", b"\xff", b"\xff"])
    assert cursor.text() == "café"
    assert cursor.text() == "\ufffd"  # shown: replaced
    assert cursor.name().encode("utf-8", "surrogateescape") == b"\xff"  # kept: it round-trips


def test_choice_and_flag_ignore_case() -> None:
    cursor = request("On", "NX", "maybe")
    assert cursor.choice(b"on", b"off") == b"on"
    assert not cursor.flag(b"xx") and cursor.flag(b"nx")
    assert error_of(lambda: cursor.choice(b"yes", b"no")) == errors.SYNTAX
    assert error_of(lambda: request().choice(b"yes", message=errors.CLIENT_TYPE)) == errors.CLIENT_TYPE


def test_options_in_any_order_each_value_read_by_the_caller() -> None:
    cursor = request("MATCH", "a*", "count", "5", "TYPE", "string")
    seen = {}
    for option in cursor.options(b"count", b"match", b"type"):
        seen[option] = cursor.integer() if option == b"count" else cursor.next()
    assert seen == {b"match": b"a*", b"count": 5, b"type": b"string"}
    cursor.finish()


def test_options_refuse_an_unknown_name_and_a_missing_value() -> None:
    def read(*words: str, message: str = errors.SYNTAX) -> None:
        cursor = request(*words)
        for _ in cursor.options(b"count", message=message):
            cursor.integer()

    assert error_of(lambda: read("COUNT", "1", "LIMIT", "2")) == errors.SYNTAX
    assert error_of(lambda: read("COUNT")) == errors.SYNTAX
    assert error_of(lambda: read("COUNT", "x")) == errors.NOT_INTEGER
    assert error_of(lambda: read("XX", message=errors.SET_OPTION)) == errors.SET_OPTION


def test_finish_and_rest() -> None:
    cursor = request("a", "b", "c")
    assert cursor.peek() == b"a"
    cursor.next()
    assert error_of(cursor.finish) == errors.SYNTAX
    assert error_of(lambda: cursor.finish(errors.WRONG_ARITY.format("ping"))) == errors.WRONG_ARITY.format("ping")
    assert cursor.rest() == [b"b", b"c"] and cursor.rest() == [] and cursor.peek() == b""
    cursor.finish()
