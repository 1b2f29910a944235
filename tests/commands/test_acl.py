"""ACL where March mimics Redis: the same ACL requests to march and to a real redis-server, and the
outcomes compared (replies, error texts, what a user may run and touch).

Both servers are this module's own (ACL changes would disturb the package's shared ones). Only
commands whose ACL categories are the same in both are probed; March's own categories (@create,
@floor) are in tests/test_auth.py and tests/e2e/test_acl.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from support import MarchServer, RedisServer, RespConn, serving

from .helpers import client, outcome, raw, same

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, redis_binary: str) -> Iterator[tuple[MarchServer, RedisServer]]:
    base = tmp_path_factory.mktemp("acl")
    with (
        serving(RedisServer(base / "redis", binary=redis_binary)) as r,
        serving(MarchServer.in_dir(base / "march"), during="the ACL tests", clean_exit=True) as m,
    ):
        yield m, r


@pytest.fixture
def admins(pair: tuple[MarchServer, RedisServer]) -> Iterator[tuple[redis.Redis, redis.Redis]]:
    m, r = pair
    with client(m.port) as mc, client(r.port) as rc:
        yield mc, rc


def both(pair: tuple[MarchServer, RedisServer], *commands: tuple[Any, ...]) -> list[Any]:
    """The raw replies of ``commands`` on one fresh connection to each server; they must be equal."""
    m, r = pair
    got, expected = raw(m.port, *commands), raw(r.port, *commands)
    assert got == expected, f"{commands!r}:\n march {got!r}\n redis {expected!r}"
    return got


SETUPS = [
    ("alice", "on", ">pw", "~orders:*", "+@read", "+@write"),
    ("bob", "on", ">pw2", "%R~r*", "%W~w*", "+get", "+incr", "+exists"),
    ("carol", "on", "nopass", "allkeys", "+@all", "-@admin", "+config|get"),
    ("dave", "off", ">pw", "~*", "+@all"),
    ("erin", "on", ">pw", "resetkeys", "~a*", "allcommands", "-incr", "nocommands", "+ping"),
]
PROBES = [
    ("GET", "orders:1"),
    ("GET", "invoices"),
    ("INCR", "orders:1"),
    ("INCR", "r1"),
    ("GET", "r1"),
    ("INCR", "w1"),
    ("GET", "w1"),
    ("EXISTS", "r1", "w1"),
    ("MGET", "orders:1", "x"),
    ("INCRBY", "orders:1", "2"),
    ("CONFIG", "GET", "maxclients"),
    ("CONFIG", "SET", "maxclients", "10"),
    ("PING",),
    ("FAILOVER",),
    ("ACL", "SETUSER", "x"),
]


@pytest.mark.parametrize("setup", SETUPS, ids=[s[0] for s in SETUPS])
def test_the_same_rules_allow_the_same_requests(pair: tuple[MarchServer, RedisServer], setup: tuple[str, ...]) -> None:
    name, *rules = setup
    assert both(pair, ("ACL", "SETUSER", name, *rules)) == ["OK"]
    for probe in PROBES:
        both(pair, ("ACL", "DRYRUN", name, *probe))
    m, r = pair
    with client(m.port) as mc, client(r.port) as rc:
        got, expected = mc.acl_getuser(name), rc.acl_getuser(name)
    for field in ("flags", "passwords", "keys"):
        assert got[field] == expected[field], (field, got, expected)


@pytest.mark.parametrize(
    "rules",
    [
        ["bogus"],
        ["#abc"],
        ["<not-a-password"],
        ["!" + "0" * 64],
        ["%X~a"],
        ["+nope"],
        ["+@nope"],
        ["+config|nope"],
        ["on", ">pw", "+@nope"],
    ],
)
def test_invalid_rules_are_the_same_errors(pair: tuple[MarchServer, RedisServer], rules: list[str]) -> None:
    replies = both(pair, ("ACL", "SETUSER", "bad", *rules), ("ACL", "GETUSER", "bad"))
    assert replies[1] is None  # nothing was created


def test_users_whoami_deluser_and_errors(pair: tuple[MarchServer, RedisServer]) -> None:
    both(
        pair,
        ("ACL", "SETUSER", "tmp1", "on"),
        ("ACL", "SETUSER", "tmp2"),
        ("ACL", "DELUSER", "tmp1", "nobody", "tmp2"),
        ("ACL", "DELUSER", "default"),
        ("ACL", "GETUSER", "nobody"),
        ("ACL", "WHOAMI"),
        ("ACL", "CAT", "nope"),
        ("ACL", "DRYRUN", "nobody", "GET", "x"),
        ("ACL", "DRYRUN", "default", "NOPE"),
        ("ACL", "SETUSER"),
        ("ACL", "NOPE"),
    )
    categories = {c.decode() for c in raw(pair[0].port, ("ACL", "CAT"))[0]}
    assert {"read", "write", "admin", "dangerous", "keyspace", "create", "floor"} <= categories


def test_noperm_and_auth_errors_as_a_user(pair: tuple[MarchServer, RedisServer]) -> None:
    both(pair, ("ACL", "SETUSER", "frank", "on", ">pw", "~orders:*", "+@read", "+@write", "+auth"))
    m, r = pair
    replies = []
    for port in (m.port, r.port):
        with RespConn(port) as c:
            replies.append(
                [
                    c.call("AUTH", "frank", "wrong"),
                    c.call("AUTH", "nobody", "pw"),
                    c.call("AUTH", "frank", "pw"),
                    c.call("ACL", "WHOAMI"),
                    c.call("GET", "invoices"),
                    c.call("CONFIG", "GET", "maxclients"),
                    c.call("MULTI"),
                    c.call("GET", "invoices"),
                    c.call("EXEC"),
                ]
            )
    assert replies[0] == replies[1]


def test_the_log_records_denials_without_secrets(
    pair: tuple[MarchServer, RedisServer], admins: tuple[redis.Redis, redis.Redis]
) -> None:
    mc, rc = admins
    for c in admins:
        c.execute_command("ACL", "LOG", "RESET")
    both(pair, ("ACL", "SETUSER", "gina", "on", ">pw", "~a*", "+get"))
    m, r = pair
    for port in (m.port, r.port):
        with RespConn(port) as c:
            c.call("AUTH", "gina", "not-the-password")
            c.call("AUTH", "gina", "pw")
            c.call("GET", "b")
            c.call("INCR", "a")
    for field in ("count", "reason", "context", "object", "username"):
        got = [e[field] for e in mc.acl_log()]
        expected = [e[field] for e in rc.acl_log()]
        assert got == expected, field
    assert b"not-the-password" not in str(mc.execute_command("ACL", "LOG")).encode()
    assert same(mc, rc, "ACL", "LOG", "RESET") == b"OK"
    assert outcome(mc, "ACL", "LOG") == [] == outcome(rc, "ACL", "LOG")
