"""Every container command's table through a real server with redis-py: an unknown subcommand, and
each subcommand with one argument too many or too few, next to a real redis-server (7.0) where Redis
has the subcommand, else against Redis' own wording. The cases come from the registry, so a new
row is tested as soon as it is added.

Redis 7.0's texts: ``ERR unknown subcommand 'NoSuch'. Try CLIENT HELP.`` (the name as sent) and
``ERR wrong number of arguments for 'client|setname' command``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from march_harness import MarchServer, RedisServer, serving
from march_harness.compare import client, outcome, raw, same

from march.commands.table import COMMANDS

pytestmark = pytest.mark.e2e

# Containers redis-server 7.0 has too; SENTINEL (a Sentinel's, tests/cluster/test_sentinel.py) and
# DEBUG (refused unless enabled, in both) are checked against the wording below.
IN_REDIS = ("acl", "client", "cluster", "command", "config", "latency", "slowlog")
NOT_IN_REDIS_70 = {"client|setinfo", "client|no-touch"}  # (Redis 7.2's)


def wrong_counts() -> Iterator[tuple[str, tuple[str, ...]]]:
    """(``name|sub``, a request with a wrong number of arguments) for every row of every container."""
    for name, spec in sorted(COMMANDS.items()):
        for row in spec.subcommands:
            words = (name.upper(), row.name.upper())
            if row.arity > 0:
                yield f"{name}|{row.name}", (*words, *["x"] * (row.arity - 1))  # one too many
            if row.arity > 2 or row.arity < -2:
                yield f"{name}|{row.name}", (*words, *["x"] * (abs(row.arity) - 3))  # one too few


CASES = list(wrong_counts())


def error(client: redis.Redis, *args: Any) -> str:
    got = outcome(client, *args)
    assert got[0] == "error", f"{args!r}: {got!r}"
    return str(got[2])


@pytest.mark.parametrize("name", IN_REDIS)
def test_unknown_subcommand_as_redis(mc: redis.Redis, rc: redis.Redis, name: str) -> None:
    got = same(mc, rc, name.upper(), "NoSuch", "x")
    assert got == ("error", "ResponseError", f"unknown subcommand 'NoSuch'. Try {name.upper()} HELP.")


@pytest.mark.parametrize(("full", "args"), [c for c in CASES if c[0].split("|")[0] in IN_REDIS], ids=str)
def test_wrong_arity_as_redis(mc: redis.Redis, rc: redis.Redis, full: str, args: tuple[str, ...]) -> None:
    text = error(mc, *args)
    assert text == f"wrong number of arguments for '{full}' command"
    if full not in NOT_IN_REDIS_70:
        assert text == error(rc, *args)


def test_every_container_has_help_as_redis(march_proc: MarchServer, redis_proc: RedisServer) -> None:
    for name in IN_REDIS:
        (ours,) = raw(march_proc.port, (name.upper(), "HELP"))  # (raw: redis-py parses COMMAND's replies)
        assert ours[0] == f"{name.upper()} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
        assert ours[-2:] == ["HELP", "    Prints this help."]
        if name != "cluster":  # (a redis-server without cluster support refuses every CLUSTER subcommand)
            assert raw(redis_proc.port, (name.upper(), "HELP"))[0][-2:] == ours[-2:]
    assert raw(march_proc.port, ("SLOWLOG", "HELP")) == raw(redis_proc.port, ("SLOWLOG", "HELP"))  # word for word


@pytest.fixture(scope="module")
def debug_march(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MarchServer]:
    server = MarchServer.in_dir(tmp_path_factory.mktemp("subcommands"), extra_args=["--enable-debug-command", "yes"])
    with serving(server, during="the subcommand tests"):
        yield server


@pytest.mark.parametrize("name", ["sentinel", "debug"])
def test_march_only_containers(debug_march: MarchServer, name: str) -> None:
    with client(debug_march.port) as c:
        assert error(c, name.upper(), "NoSuch") == f"unknown subcommand 'NoSuch'. Try {name.upper()} HELP."
        for full, args in CASES:
            if full.startswith(name + "|"):
                assert error(c, *args) == f"wrong number of arguments for '{full}' command"
        assert c.execute_command(name.upper(), "help")[-1] == b"    Prints this help."


def test_debug_refuses_everything_while_off(mc: redis.Redis, rc: redis.Redis) -> None:
    """As Redis: DEBUG is refused before its subcommand is looked at (HELP and unknown ones too)."""
    for args in (("DEBUG", "NoSuch"), ("DEBUG", "HELP"), ("DEBUG", "CLOCK-OFFSET", "1", "2")):
        assert error(mc, *args).startswith("DEBUG command not allowed.")
        assert error(rc, *args).startswith("DEBUG command not allowed.")


@pytest.mark.parametrize(
    "args",
    [
        ("ACL", "CAT", "read", "x"),
        ("ACL", "LOG", "1", "2"),
        ("ACL", "LOG", "RESET", "x"),
        ("ACL", "LOG", "x"),
        ("ACL", "LOG", "-1"),
        ("ACL", "GENPASS", "8", "x"),
        ("ACL", "GENPASS", "x"),
        ("SLOWLOG", "GET", "1", "2"),
        ("CLIENT", "NO-EVICT", "maybe"),
        ("CLIENT", "KILL", "ID", "x", "ID"),
        ("CLIENT", "KILL", "ID", "1", "SKIPME", "maybe"),
        ("CLIENT", "LIST", "TYPE"),
        ("CLIENT", "LIST", "ID", "x"),
        ("COMMAND", "LIST", "FILTERBY", "nosuch", "x"),
        ("COMMAND", "LIST", "FILTERBY", "PATTERN"),
        ("CONFIG", "SET", "maxclients", "10", "maxclients"),
        ("HELLO", "03"),
        ("HELLO", "3", "SETNAME"),
        ("SCAN", "0", "COUNT"),
        ("SCAN", "0", "COUNT", "x"),
        ("FAILOVER", "TIMEOUT", "x"),
        ("FAILOVER", "TO", "h"),
    ],
    ids=" ".join,
)
def test_option_errors_as_redis(mc: redis.Redis, rc: redis.Redis, args: tuple[str, ...]) -> None:
    same(mc, rc, *args)


def test_unknown_subcommand_dooms_a_transaction_as_redis(march_proc: MarchServer, redis_proc: RedisServer) -> None:
    """Refused when sent, as an unknown command is, not queued to fail at EXEC."""
    requests = [("MULTI",), ("CLIENT", "NoSuch"), ("CLIENT", "SETNAME"), ("CLIENT", "ID"), ("EXEC",)]
    ours = raw(march_proc.port, *requests)
    assert ours == raw(redis_proc.port, *requests)
    assert ours[-1].message == "EXECABORT Transaction discarded because of previous errors."


def test_unknown_subcommand_before_permissions_as_redis(mc: redis.Redis, rc: redis.Redis) -> None:
    """A user who may run nothing hears about an unknown subcommand or a wrong arity, not NOPERM
    (nor does ACL LOG record a denial), as Redis."""
    for c in (mc, rc):
        assert c.execute_command("ACL", "SETUSER", "sub:nobody", "on", "nopass", "-@all") == b"OK"
    try:
        for server in (mc, rc):
            with client(server.get_connection_kwargs()["port"]) as c:
                assert c.execute_command("AUTH", "sub:nobody", "x")
                assert error(c, "CLIENT", "NoSuch") == "unknown subcommand 'NoSuch'. Try CLIENT HELP."
                assert error(c, "CONFIG", "GET") == "wrong number of arguments for 'config|get' command"
                assert error(c, "CLIENT", "ID").startswith("this user has no permissions to run the 'client|id'")
    finally:
        for c in (mc, rc):
            c.execute_command("ACL", "DELUSER", "sub:nobody")
