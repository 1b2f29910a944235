"""COMMAND, CONFIG GET, CLIENT and INFO: the introspection that client libraries and tools read.
Key positions and flags come from a real redis-server: cluster clients route by them."""

from __future__ import annotations

import pytest
import redis
from march_harness import MarchServer, RedisServer, RespConn, RespError

pytestmark = pytest.mark.e2e

Pair = tuple[MarchServer, RedisServer]

KEY_COMMANDS = ["get", "incr", "incrby", "mget", "set", "exists", "ttl", "pttl", "type"]


def command_info(port: int, name: str) -> list[object] | None:
    with RespConn(port) as c:
        reply = c.call("COMMAND", "INFO", name)
    assert isinstance(reply, list) and len(reply) == 1, reply
    return reply[0]  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", KEY_COMMANDS)
def test_command_info_key_positions_like_redis(server_pair: Pair, name: str) -> None:
    march, redis_ = server_pair
    want, got = command_info(redis_.port, name), command_info(march.port, name)
    assert isinstance(got, list), got
    assert isinstance(want, list)
    # name, arity, first key, last key, step
    assert [got[0], got[1], got[3], got[4], got[5]] == [want[0], want[1], want[3], want[4], want[5]]
    for flag in ("readonly", "write"):
        assert (flag in got[2]) == (flag in want[2]), f"flag {flag}: march {got[2]}, redis {want[2]}"


def test_command_info_unknown_is_nil(server_pair: Pair) -> None:
    march, redis_ = server_pair
    assert command_info(march.port, "nosuchcommand") is None
    assert command_info(redis_.port, "nosuchcommand") is None


@pytest.mark.parametrize(
    "args",
    [["SET", "k", "1"], ["MGET", "a", "b", "c"], ["INCRBY", "k", "5"], ["EXISTS", "a", "b"], ["NOSUCH", "x"]],
    ids=lambda a: " ".join(a),
)
def test_command_getkeys_like_redis(server_pair: Pair, args: list[str]) -> None:
    march, redis_ = server_pair
    with RespConn(redis_.port) as r, RespConn(march.port) as m:
        assert m.call_raw("COMMAND", "GETKEYS", *args) == r.call_raw("COMMAND", "GETKEYS", *args)


def test_command_table(march_server: MarchServer) -> None:
    with march_server.conn() as c:
        count = c.call("COMMAND", "COUNT")
        table = c.call("COMMAND")
        names = c.call("COMMAND", "LIST")
        docs = c.call("COMMAND", "DOCS", "incr")
    assert isinstance(count, int) and count == len(table)  # (COMMAND LIST: subcommands too, as Redis 7)
    listed = {n.decode().lower() for n in names}
    for cmd in ["ping", "incr", "incrby", "get", "mget", "set", "multi", "exec", "seq.create", "hello", "command"]:
        assert cmd in listed, f"{cmd} missing from COMMAND LIST"
    assert {row[0].decode().lower() for row in table} == {name for name in listed if "|" not in name}
    assert docs, "COMMAND DOCS incr is empty"


def test_command_docs_shape_like_redis(server_pair: Pair) -> None:
    """redis-cli (reading commands from stdin) asserts that every name and every doc field name in
    `COMMAND DOCS` is a bulk string, so the reply types matter, not only the values."""
    march, redis_ = server_pair
    for server in (redis_, march):
        with server.conn() as c:
            reply = c.call("COMMAND", "DOCS", "incr")
        assert isinstance(reply, list) and len(reply) == 2, reply
        name, doc = reply
        assert name == b"incr"
        assert all(isinstance(k, bytes) for k in doc[0::2]), f"{server.name}: doc field names must be bulk: {doc}"
        assert b"summary" in doc[0::2]


def test_redis_py_reads_the_command_table(march_server: MarchServer) -> None:
    with redis.Redis(port=march_server.port) as r:
        table = r.command()
    assert table["incr"]["arity"] == 2
    assert table["get"]["first_key_pos"] == 1


def test_config_get(server_pair: Pair) -> None:
    march, redis_ = server_pair
    with RespConn(march.port) as m, RespConn(redis_.port) as r:
        # What redis-benchmark and other tools read at start-up: a name/value pair each.
        for name in ("save", "appendonly"):
            reply = m.call("CONFIG", "GET", name)
            assert isinstance(reply, list | dict) and len(reply) in (1, 2), reply
        assert m.call_raw("CONFIG", "GET", "no-such-option") == r.call_raw("CONFIG", "GET", "no-such-option")
        assert m.call_raw("CONFIG") == r.call_raw("CONFIG")
        port = m.call("CONFIG", "GET", "port")
        assert port == [b"port", str(march.port).encode()], port
        assert isinstance(m.call("CONFIG", "SET", "port", "1"), RespError), "CONFIG is a read-only view"


def test_client_commands(march_server: MarchServer) -> None:
    with march_server.conn() as a, march_server.conn() as b:
        a.call("CLIENT", "SETNAME", "alpha")
        id_a, id_b = a.call("CLIENT", "ID"), b.call("CLIENT", "ID")
        assert isinstance(id_a, int) and isinstance(id_b, int) and id_a != id_b
        info = a.call("CLIENT", "INFO").decode()
        assert f"id={id_a} " in info and "name=alpha" in info and "addr=127.0.0.1:" in info
        listing = b.call("CLIENT", "LIST").decode()
        assert f"id={id_a} " in listing and f"id={id_b} " in listing
    with redis.Redis(port=march_server.port) as r:
        clients = r.client_list()
        assert clients and all("id" in c and "addr" in c for c in clients)


def test_client_unknown_subcommand_like_redis(server_pair: Pair) -> None:
    march, redis_ = server_pair
    with RespConn(march.port) as m, RespConn(redis_.port) as r:
        assert m.call_raw("CLIENT", "NOSUCH") == r.call_raw("CLIENT", "NOSUCH")


SECTIONS = ["server", "clients", "stats", "persistence", "replication", "keyspace", "sequences"]


def test_info_sections(march_server: MarchServer) -> None:
    with march_server.conn() as c:
        c.call("INCR", "info:key")
        everything = c.call("INFO").decode()
        for section in SECTIONS:
            text = c.call("INFO", section).decode()
            assert text.startswith("# "), f"INFO {section}: {text[:200]!r}"
            assert text.splitlines()[0][2:].lower() == section, text.splitlines()[0]
            assert text.splitlines()[0] in everything, f"INFO without arguments lacks the {section} section"
        keyspace = c.call("INFO", "keyspace").decode()
    assert "db0:keys=1" in keyspace, keyspace
    with redis.Redis(port=march_server.port) as r:
        parsed = r.info("server")
        assert "redis_version" in parsed or "march_version" in parsed, parsed
