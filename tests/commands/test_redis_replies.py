"""Where march mimics Redis, the expected reply comes from a real redis-server.

Each case is a short script of commands sent over one fresh connection to both servers;
the replies must be byte-for-byte identical (except a successful HELLO, whose values such as
the server name, version and client id differ by nature; see test_hello_*). `{k}` in a case becomes a key unique to the
case, so one pair of servers (`server_pair`) serves the whole module.
"""

from __future__ import annotations

import pytest
from march_harness import MarchServer, RedisServer, RespConn

pytestmark = pytest.mark.e2e

MAX = 2**63 - 1

# name -> list of commands; every reply is compared as raw bytes.
CASES: dict[str, list[list[str]]] = {
    # connection
    "ping": [["PING"]],
    "ping-message": [["PING", "hello world"]],
    "ping-arity": [["PING", "a", "b"]],
    "echo": [["ECHO", "hi there"]],
    "echo-empty": [["ECHO", ""]],
    "echo-arity": [["ECHO"], ["ECHO", "a", "b"]],
    "select-0": [["SELECT", "0"]],
    "select-not-integer": [["SELECT", "zero"]],
    "select-arity": [["SELECT"]],
    "hello-bad-version": [["HELLO", "4"]],
    "hello-not-integer": [["HELLO", "three"]],
    "client-name": [["CLIENT", "GETNAME"], ["CLIENT", "SETNAME", "worker-1"], ["CLIENT", "GETNAME"]],
    "client-name-with-space": [["CLIENT", "SETNAME", "a b"]],
    "auth-without-password": [["AUTH", "secret"]],
    "reset": [["CLIENT", "SETNAME", "x"], ["RESET"], ["CLIENT", "GETNAME"]],
    "quit": [["QUIT"]],
    # unknown commands
    "unknown": [["FOOBAR"]],
    "unknown-with-args": [["FOOBAR", "a", "b c"]],
    "unknown-long-args": [["NOPE", *["x" * 50 for _ in range(6)]]],
    "unknown-lowercase": [["bogus", "1"]],
    # arity
    "arity-get": [["GET"], ["GET", "{k}", "extra"]],
    "arity-incr": [["INCR"], ["INCR", "{k}", "extra"]],
    "arity-incrby": [["INCRBY", "{k}"], ["INCRBY"]],
    "arity-set": [["SET", "{k}"], ["SET"]],
    "arity-mget": [["MGET"]],
    "arity-exists": [["EXISTS"]],
    "arity-ttl": [["TTL"], ["PTTL"]],
    "arity-type": [["TYPE"]],
    # integers
    "incr-new-key": [["INCR", "{k}"], ["INCR", "{k}"], ["INCRBY", "{k}", "10"], ["INCR", "{k}"]],
    "incrby-new-key": [["INCRBY", "{k}", "5"]],
    "incrby-not-integer": [["INCRBY", "{k}", "abc"], ["INCRBY", "{k}", "1.5"], ["INCRBY", "{k}", ""]],
    "incrby-out-of-range": [["INCRBY", "{k}", str(MAX + 1)], ["INCRBY", "{k}", "99999999999999999999"]],
    "incr-overflow": [["SET", "{k}", str(MAX - 1)], ["INCR", "{k}"], ["INCR", "{k}"], ["INCR", "{k}"]],
    "incrby-overflow": [["SET", "{k}", str(MAX - 100)], ["INCRBY", "{k}", "101"], ["INCRBY", "{k}", "100"]],
    # GET / SET / MGET
    "get-unknown": [["GET", "{k}"]],
    "mget-unknown": [["MGET", "{k}", "{k}-other"]],
    "set-then-incr": [["SET", "{k}", "100"], ["INCR", "{k}"], ["INCRBY", "{k}", "9"]],
    "set-nx": [["SET", "{k}", "10", "NX"], ["SET", "{k}", "20", "NX"], ["INCR", "{k}"]],
    "set-nx-after-incr": [["INCR", "{k}"], ["SET", "{k}", "500", "NX"], ["INCR", "{k}"]],
    # keyspace
    "exists": [["EXISTS", "{k}"], ["INCR", "{k}"], ["EXISTS", "{k}"], ["EXISTS", "{k}", "{k}", "{k}-none"]],
    "ttl": [["TTL", "{k}"], ["PTTL", "{k}"], ["INCR", "{k}"], ["TTL", "{k}"], ["PTTL", "{k}"]],
    "type-unknown": [["TYPE", "{k}"]],
    # transactions
    "multi-exec": [["MULTI"], ["INCR", "{k}"], ["INCRBY", "{k}", "2"], ["EXEC"]],
    "multi-empty": [["MULTI"], ["EXEC"]],
    "multi-nested": [["MULTI"], ["MULTI"], ["DISCARD"]],
    "exec-without-multi": [["EXEC"]],
    "discard-without-multi": [["DISCARD"]],
    "multi-discard": [["MULTI"], ["INCR", "{k}"], ["DISCARD"], ["GET", "{k}"]],
    "multi-unknown-aborts": [["MULTI"], ["FOOBAR", "x"], ["INCR", "{k}"], ["EXEC"], ["GET", "{k}"]],
    "multi-arity-aborts": [["MULTI"], ["INCR"], ["INCR", "{k}"], ["EXEC"], ["GET", "{k}"]],
    "multi-runtime-error": [["MULTI"], ["INCRBY", "{k}", "x"], ["INCR", "{k}"], ["EXEC"]],
    "multi-ping-echo": [["MULTI"], ["PING"], ["ECHO", "e"], ["EXEC"]],
    # RESP3 replies after HELLO 3 (the HELLO reply itself differs in its values; see test_hello_*)
    "resp3-basics": [
        ["HELLO", "3"],
        ["PING"],
        ["INCR", "{k}"],
        ["GET", "{k}-none"],
        ["MGET", "{k}-none"],
        ["EXISTS", "{k}"],
        ["INCRBY", "{k}", "x"],
        ["FOOBAR"],
        ["MULTI"],
        ["INCR", "{k}"],
        ["EXEC"],
        ["HELLO", "2"],
        ["GET", "{k}-none"],
    ],
}


def _make_script(name: str, case: list[list[str]]) -> list[list[str]]:
    return [[a.replace("{k}", f"compat:{name}") for a in cmd] for cmd in case]


def run_script(port: int, script: list[list[str]]) -> list[bytes]:
    replies = []
    with RespConn(port) as c:
        for cmd in script:
            replies.append(c.call_raw(*cmd))
    return replies


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_replies_as_redis(server_pair: tuple[MarchServer, RedisServer], name: str) -> None:
    march, redis = server_pair
    script = _make_script(name, CASES[name])
    expected = run_script(redis.port, script)
    got = run_script(march.port, script)
    for cmd, want, have in zip(script, expected, got, strict=True):
        if cmd[0].upper() == "HELLO" and not want.startswith(b"-"):
            continue
        assert have == want, f"{' '.join(cmd)!r}: march sent {have!r}, redis sends {want!r}"


def _hello_keys(port: int, version: str) -> tuple[set[str], dict[str, object]]:
    with RespConn(port) as c:
        reply = c.call("HELLO", version)
    if isinstance(reply, list):  # RESP2: flat key/value list
        reply = dict(zip(reply[::2], reply[1::2], strict=True))
    assert isinstance(reply, dict), reply
    decoded = {(k.decode() if isinstance(k, bytes) else k): v for k, v in reply.items()}
    return set(decoded), decoded


@pytest.mark.parametrize("version", ["2", "3"])
def test_hello_reply_has_redis_keys(server_pair: tuple[MarchServer, RedisServer], version: str) -> None:
    march, redis = server_pair
    want_keys, want = _hello_keys(redis.port, version)
    got_keys, got = _hello_keys(march.port, version)
    assert got_keys == want_keys
    assert got["proto"] == want["proto"] == int(version)
    for key in ("mode", "role", "modules"):  # same values and reply types as a standalone Redis
        assert got[key] == want[key], f"HELLO {version} {key}: march {got[key]!r}, redis {want[key]!r}"
    assert isinstance(got["id"], int)
    assert isinstance(got["server"], bytes) and isinstance(got["version"], bytes)


def test_hello_3_is_a_resp3_map(server_pair: tuple[MarchServer, RedisServer]) -> None:
    march, _ = server_pair
    with RespConn(march.port) as c:
        raw = c.call_raw("HELLO", "3")
    assert raw.startswith(b"%"), raw  # redis-py 8 refuses anything but a real map


def test_time_like_redis(server_pair: tuple[MarchServer, RedisServer]) -> None:
    march, redis = server_pair
    with RespConn(redis.port) as r, RespConn(march.port) as m:
        want, got = r.call("TIME"), m.call("TIME")
    assert len(got) == len(want) == 2
    seconds, micros = int(got[0]), int(got[1])
    assert abs(seconds - int(want[0])) <= 5
    assert 0 <= micros < 1_000_000


def test_type_of_a_sequence(server_pair: tuple[MarchServer, RedisServer]) -> None:
    march, _ = server_pair
    with RespConn(march.port) as c:
        c.call("INCR", "compat:type")
        reply = c.call("TYPE", "compat:type")
    assert isinstance(reply, str) and reply  # a status reply; Redis says "string" for a counter
