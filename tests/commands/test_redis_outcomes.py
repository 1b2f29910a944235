"""Where march mimics Redis, the same request goes to march and to a real redis-server and the
outcomes must be equal (redis-py's value or exception class and message; for error texts also the
full line on a raw RESP2 connection). Keys are fresh on both servers, so INCR starts at 1 on both.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from march_harness import MarchServer, RedisServer, RespConn
from march_harness.compare import client, raw, same

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

MAX = 9223372036854775807


# --- errors -----------------------------------------------------------------------------------

ARITY = [
    ("GET",),
    ("GET", "a", "b"),
    ("INCR",),
    ("INCR", "a", "b"),
    ("INCRBY", "a"),
    ("INCRBY", "a", "1", "2"),
    ("MGET",),
    ("SET", "a"),
    ("EXISTS",),
    ("TYPE",),
    ("TYPE", "a", "b"),
    ("TTL",),
    ("PTTL", "a", "b"),
    ("KEYS",),
    ("SCAN",),
    ("DBSIZE", "x"),
    ("TIME", "x"),
    ("ECHO",),
    ("ECHO", "a", "b"),
    ("PING", "a", "b"),
    ("SELECT",),
    ("MULTI", "x"),
    ("DISCARD", "x"),
    ("CLIENT",),
    ("CONFIG",),
    ("DECR",),
    ("DEL",),
    ("AUTH",),
]


@pytest.mark.parametrize("args", ARITY, ids=" ".join)
def test_wrong_arity(march_proc: MarchServer, redis_proc: RedisServer, args: tuple[str, ...]) -> None:
    (got,) = raw(march_proc.port, args)
    (expected,) = raw(redis_proc.port, args)
    assert got == expected
    assert got.message.startswith("ERR wrong number of arguments for '")


@pytest.mark.parametrize(
    "args",
    [
        ("CLIENT", "SETNAME", "a", "b"),
        ("CLIENT", "GETNAME", "x"),
        ("CLIENT", "ID", "x"),
        ("COMMAND", "GETKEYS"),
        ("COMMAND", "COUNT", "x"),
        ("CONFIG", "GET"),
        ("EXEC", "x"),
    ],
    ids=" ".join,
)
def test_wrong_arity_of_subcommands(march_proc: MarchServer, redis_proc: RedisServer, args: tuple[str, ...]) -> None:
    assert raw(march_proc.port, args) == raw(redis_proc.port, args)


@pytest.mark.parametrize(
    "args",
    [("NOSUCH",), ("nosuch", "a", "b"), ("FOO", "x" * 200, "y"), ("FOO", *[str(i) for i in range(60)]), ("foo", "")],
    ids=["bare", "args", "long-arg", "many-args", "empty-arg"],
)
def test_unknown_command(march_proc: MarchServer, redis_proc: RedisServer, args: tuple[str, ...]) -> None:
    (got,) = raw(march_proc.port, args)
    assert got == raw(redis_proc.port, args)[0]
    assert got.message.startswith(f"ERR unknown command '{args[0]}', with args beginning with: ")


@pytest.mark.parametrize("value", ["abc", "1.5", "", " 1", "1 ", "+1", "01", "0x10", "99999999999999999999", "-"])
def test_incrby_not_an_integer(mc: redis.Redis, rc: redis.Redis, key: str, value: str) -> None:
    err = same(mc, rc, "INCRBY", key, value)
    assert err == ("error", "ResponseError", "value is not an integer or out of range")
    assert same(mc, rc, "EXISTS", key) == 0  # the failed request created nothing


def test_error_texts_on_the_wire(march_proc: MarchServer, redis_proc: RedisServer, key: str) -> None:
    commands = [("INCRBY", key, "abc"), ("SELECT", "16"), ("SELECT", "abc"), ("EXEC",), ("DISCARD",)]
    assert raw(march_proc.port, *commands) == raw(redis_proc.port, *commands)


# --- INCR near the top of the range ---------------------------------------------------------------


def test_overflow(mc: redis.Redis, rc: redis.Redis, key: str) -> None:
    assert same(mc, rc, "SET", key, str(MAX - 1)) is True
    assert same(mc, rc, "INCR", key) == MAX
    assert same(mc, rc, "INCR", key) == ("error", "ResponseError", "increment or decrement would overflow")
    assert same(mc, rc, "INCRBY", key, "1") == ("error", "ResponseError", "increment or decrement would overflow")
    assert same(mc, rc, "GET", key) == str(MAX).encode()


def test_set_to_the_maximum(mc: redis.Redis, rc: redis.Redis, key: str) -> None:
    assert same(mc, rc, "SET", key, str(MAX)) is True
    assert same(mc, rc, "GET", key) == str(MAX).encode()
    assert same(mc, rc, "INCR", key) == ("error", "ResponseError", "increment or decrement would overflow")


def test_incrby_overflow(mc: redis.Redis, rc: redis.Redis, key: str) -> None:
    same(mc, rc, "SET", key, str(MAX - 10))
    assert same(mc, rc, "INCRBY", key, "11")[0] == "error"
    assert same(mc, rc, "INCRBY", key, "10") == MAX
    assert same(mc, rc, "GET", key) == str(MAX).encode()


def test_overflow_on_the_wire(march_proc: MarchServer, redis_proc: RedisServer, key: str) -> None:
    commands = [("SET", key, str(MAX - 1)), ("INCR", key), ("INCR", key)]
    assert raw(march_proc.port, *commands) == raw(redis_proc.port, *commands)


def test_set_then_incr(mc: redis.Redis, rc: redis.Redis, key: str) -> None:
    assert same(mc, rc, "SET", key, "41") is True
    assert same(mc, rc, "INCR", key) == 42
    assert same(mc, rc, "INCRBY", key, "8") == 50
    assert same(mc, rc, "GET", key) == b"50"


def test_incr_from_nothing(mc: redis.Redis, rc: redis.Redis, key: str) -> None:
    assert [same(mc, rc, "INCR", key) for _ in range(3)] == [1, 2, 3]
    assert mc.incr(key) == rc.incr(key) == 4  # redis-py sends INCRBY key 1
    assert mc.incrby(key, 6) == rc.incrby(key, 6) == 10


# --- transactions ---------------------------------------------------------------------------------


def test_multi_exec(mc: redis.Redis, rc: redis.Redis, key: str) -> None:
    assert same(mc, rc, "MULTI") == b"OK"
    assert same(mc, rc, "INCR", key) == b"QUEUED"
    assert same(mc, rc, "INCRBY", key, "4") == b"QUEUED"
    same(mc, rc, "ECHO", "x")
    assert same(mc, rc, "EXEC") == [1, 5, b"x"]


def test_exec_with_a_runtime_error(march_proc: MarchServer, redis_proc: RedisServer, key: str) -> None:
    commands = [("MULTI",), ("INCR", key), ("INCRBY", key, "abc"), ("INCR", key), ("EXEC",)]
    got = raw(march_proc.port, *commands)
    assert got == raw(redis_proc.port, *commands)
    assert got[-1][0] == 1 and got[-1][2] == 2  # the other commands ran


def test_exec_and_discard_without_multi(mc: redis.Redis, rc: redis.Redis) -> None:
    assert same(mc, rc, "EXEC") == ("error", "ResponseError", "EXEC without MULTI")
    assert same(mc, rc, "DISCARD") == ("error", "ResponseError", "DISCARD without MULTI")


def test_nested_multi(mc: redis.Redis, rc: redis.Redis, key: str) -> None:
    same(mc, rc, "MULTI")
    assert same(mc, rc, "MULTI") == ("error", "ResponseError", "MULTI calls can not be nested")
    same(mc, rc, "INCR", key)
    assert same(mc, rc, "EXEC") == [1]  # the transaction survived the nested MULTI


@pytest.mark.parametrize("bad", [("NOSUCH", "x"), ("INCR",), ("GET", "a", "b")], ids=" ".join)
def test_execabort_after_a_bad_queued_command(mc: redis.Redis, rc: redis.Redis, key: str, bad: tuple[str]) -> None:
    same(mc, rc, "MULTI")
    same(mc, rc, "INCR", key)
    assert same(mc, rc, *bad)[0] == "error"
    same(mc, rc, "INCR", key)
    assert same(mc, rc, "EXEC") == (
        "error",
        "ExecAbortError",
        "Transaction discarded because of previous errors.",
    )
    assert same(mc, rc, "EXISTS", key) == 0  # nothing ran
    assert same(mc, rc, "EXEC") == ("error", "ResponseError", "EXEC without MULTI")  # and MULTI is over


def test_discard(mc: redis.Redis, rc: redis.Redis, key: str) -> None:
    same(mc, rc, "MULTI")
    same(mc, rc, "INCR", key)
    assert same(mc, rc, "DISCARD") == b"OK"
    assert same(mc, rc, "GET", key) is None
    assert same(mc, rc, "INCR", key) == 1


@pytest.mark.parametrize("transaction", [True, False])
def test_redis_py_pipeline(mc: redis.Redis, rc: redis.Redis, key: str, transaction: bool) -> None:
    results = []
    for c in (mc, rc):
        with c.pipeline(transaction=transaction) as p:
            p.incr(key).incrby(key, 5).get(key).exists(key, "cmd:nothing").ttl(key).type(key)
            results.append(p.execute())
    assert results[0] == results[1] == [1, 6, b"6", 1, -1, b"string"]


def test_redis_py_pipeline_error(mc: redis.Redis, rc: redis.Redis, key: str) -> None:
    results = []
    for c in (mc, rc):
        with c.pipeline(transaction=True) as p:
            p.incr(key).execute_command("INCRBY", key, "x").incr(key)
            out = p.execute(raise_on_error=False)
        results.append([str(v) if isinstance(v, Exception) else v for v in out])
    assert results[0] == results[1]


# --- connection commands -----------------------------------------------------------------------------


def test_ping_echo(march_proc: MarchServer, redis_proc: RedisServer, mc: redis.Redis, rc: redis.Redis) -> None:
    assert same(mc, rc, "PING") is True
    assert same(mc, rc, "ECHO", b"\x00bin\xff\r\n") == b"\x00bin\xff\r\n"
    assert same(mc, rc, "ECHO", "") == b""
    commands = [("PING",), ("PING", "hi"), ("ECHO", "x y")]
    assert raw(march_proc.port, *commands) == raw(redis_proc.port, *commands) == ["PONG", b"hi", b"x y"]


def test_select(mc: redis.Redis, rc: redis.Redis) -> None:
    assert same(mc, rc, "SELECT", "0") is True
    assert same(mc, rc, "SELECT", "16") == ("error", "ResponseError", "DB index is out of range")
    assert same(mc, rc, "SELECT", "-1") == ("error", "ResponseError", "DB index is out of range")
    assert same(mc, rc, "SELECT", "abc") == ("error", "ResponseError", "value is not an integer or out of range")


@pytest.mark.parametrize("index", ["+0", " 0", "0 ", "00", "0_0", "-0"])
def test_select_index_is_a_strict_integer(mc: redis.Redis, rc: redis.Redis, index: str) -> None:
    assert same(mc, rc, "SELECT", index) == ("error", "ResponseError", "value is not an integer or out of range")


def test_client_name(mc: redis.Redis, rc: redis.Redis) -> None:
    assert same(mc, rc, "CLIENT", "GETNAME") is None
    assert same(mc, rc, "CLIENT", "SETNAME", "worker-1") == b"OK"
    assert same(mc, rc, "CLIENT", "GETNAME") == b"worker-1"
    assert same(mc, rc, "CLIENT", "SETNAME", "a b")[0] == "error"
    assert same(mc, rc, "CLIENT", "SETNAME", "a\nb")[0] == "error"
    assert same(mc, rc, "CLIENT", "GETNAME") == b"worker-1"  # unchanged by the refused names
    assert same(mc, rc, "CLIENT", "SETNAME", "") == b"OK"  # an empty name clears it
    assert same(mc, rc, "CLIENT", "GETNAME") is None
    assert same(mc, rc, "CLIENT", "NOSUCH")[0] == "error"


@pytest.mark.parametrize("which", ["march", "redis"])
def test_client_id(march_proc: MarchServer, redis_proc: RedisServer, which: str) -> None:
    port = march_proc.port if which == "march" else redis_proc.port
    first, second = client(port), client(port)
    try:
        a, b = first.client_id(), second.client_id()
        assert isinstance(a, int) and a > 0 and b > a
        assert first.client_id() == a  # stable for the connection
        assert f"id={a} " in first.execute_command("CLIENT", "INFO").decode()
    finally:
        first.close()
        second.close()


def test_hello_from_redis_py(mc: redis.Redis, rc: redis.Redis) -> None:
    got, expected = mc.execute_command("HELLO", "3"), rc.execute_command("HELLO", "3")
    assert set(got) == set(expected)
    for field in (b"server", b"proto", b"mode", b"role", b"modules"):
        assert got[field] == expected[field]


# --- keyspace commands on sequences ------------------------------------------------------------------


def test_ttl_exists_type(mc: redis.Redis, rc: redis.Redis, key: str) -> None:
    assert same(mc, rc, "TTL", key) == -2
    assert same(mc, rc, "PTTL", key) == -2
    assert same(mc, rc, "TYPE", key) == b"none"
    assert same(mc, rc, "EXISTS", key) == 0
    same(mc, rc, "INCR", key)
    assert same(mc, rc, "TTL", key) == -1
    assert same(mc, rc, "PTTL", key) == -1
    assert same(mc, rc, "TYPE", key) == b"string"
    assert same(mc, rc, "EXISTS", key, key, "cmd:nothing", key) == 3


def test_dbsize_counts_new_keys(mc: redis.Redis, rc: redis.Redis, key: str) -> None:
    before = (mc.dbsize(), rc.dbsize())
    same(mc, rc, "INCR", key)
    same(mc, rc, "INCR", key)
    assert (mc.dbsize(), rc.dbsize()) == (before[0] + 1, before[1] + 1)


def test_mget(mc: redis.Redis, rc: redis.Redis, key: str) -> None:
    same(mc, rc, "SET", key, "7")
    assert same(mc, rc, "MGET", key, "cmd:nothing", key) == [b"7", None, b"7"]


def test_get_unknown(mc: redis.Redis, rc: redis.Redis, key: str) -> None:
    assert same(mc, rc, "GET", key) is None


@pytest.mark.parametrize("protocol", [2, 3])
def test_time(march_proc: MarchServer, redis_proc: RedisServer, protocol: int) -> None:
    for port in (march_proc.port, redis_proc.port):
        c = client(port, protocol)
        try:
            seconds, micros = c.time()
        finally:
            c.close()
        assert abs(seconds - time.time()) < 5
        assert 0 <= micros < 1_000_000
    with RespConn(march_proc.port) as m, RespConn(redis_proc.port) as r:
        got, expected = m.call("TIME"), r.call("TIME")
    assert [type(v) for v in got] == [type(v) for v in expected] == [bytes, bytes]


def test_scan_errors(march_proc: MarchServer, redis_proc: RedisServer) -> None:
    commands: list[tuple[Any, ...]] = [
        ("SCAN", "abc"),
        ("SCAN", "0", "COUNT"),
        ("SCAN", "0", "COUNT", "0"),
        ("SCAN", "0", "COUNT", "x"),
        ("SCAN", "0", "MATCH"),
        ("SCAN", "0", "BOGUS", "1"),
    ]
    assert raw(march_proc.port, *commands) == raw(redis_proc.port, *commands)


# --- COMMAND ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("MGET", "a", "b"),
        ("INCR", "k"),
        ("INCRBY", "k", "1"),
        ("GET", "k"),
        ("SET", "k", "1"),
        ("EXISTS", "a", "b", "c"),
    ],
    ids=" ".join,
)
def test_command_getkeys(march_proc: MarchServer, redis_proc: RedisServer, args: tuple[str, ...]) -> None:
    (got,) = raw(march_proc.port, ("COMMAND", "GETKEYS", *args))
    assert got == raw(redis_proc.port, ("COMMAND", "GETKEYS", *args))[0]
    if args[0] == "MGET":
        assert got == [b"a", b"b"]


def test_command_getkeys_errors(march_proc: MarchServer, redis_proc: RedisServer) -> None:
    commands = [("COMMAND", "GETKEYS", "NOSUCH", "a"), ("COMMAND", "GETKEYS", "PING", "x")]
    assert raw(march_proc.port, *commands) == raw(redis_proc.port, *commands)


@pytest.mark.parametrize("name", ["incr", "incrby", "get", "mget", "set", "exists", "ttl", "type", "ping", "echo"])
def test_command_info_key_positions(march_proc: MarchServer, redis_proc: RedisServer, name: str) -> None:
    ((got,),) = raw(march_proc.port, ("COMMAND", "INFO", name))
    ((expected,),) = raw(redis_proc.port, ("COMMAND", "INFO", name))
    # name, arity, first key, last key, step
    assert [got[0], got[1], got[3], got[4], got[5]] == [expected[0], expected[1], expected[3], expected[4], expected[5]]
    if name == "incr":
        assert got[3:6] == [1, 1, 1]


def test_command_info_unknown(march_proc: MarchServer, redis_proc: RedisServer) -> None:
    assert raw(march_proc.port, ("COMMAND", "INFO", "nosuch")) == raw(redis_proc.port, ("COMMAND", "INFO", "nosuch"))
