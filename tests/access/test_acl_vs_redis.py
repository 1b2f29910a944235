"""ACL where March mimics Redis: the same ACL requests to march and to a real redis-server, and the
outcomes compared (replies, error texts, what a user may run and touch).

Redis 7.0's rules in detail, each compared byte for byte: channel rules (``&pattern``,
``allchannels``, ``resetchannels``) as ACL LIST and GETUSER show them, enforced on SUBSCRIBE and
PSUBSCRIBE (NOPERM text, ACL LOG entry, DRYRUN), subscribers dropped when their channels are
revoked, ``acl-pubsub-default``; first-argument rules (``+select|0``); key patterns merged
(``%R~foo %W~foo``); ``ACL CAT`` keeping the case of an unknown category; ACL LOG's default count.

Both servers are this module's own (ACL changes would disturb the package's shared ones). Only
commands whose ACL categories are the same in both are probed; March's own categories (@create,
@floor) are in tests/access/test_rules.py and tests/access/test_acl.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from march_harness import Pair, RespConn, RespError
from march_harness.compare import client, outcome, raw, same
from march_harness.resp import encode

from march import errors

pytestmark = [pytest.mark.e2e, pytest.mark.redis]


@pytest.fixture
def admins(server_pair: Pair) -> Iterator[tuple[redis.Redis, redis.Redis]]:
    m, r = server_pair
    with client(m.port) as mc, client(r.port) as rc:
        yield mc, rc


def both(server_pair: Pair, *commands: tuple[Any, ...]) -> list[Any]:
    """The raw replies of ``commands`` on one fresh connection to each server; they must be equal."""
    m, r = server_pair
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
def test_the_same_rules_allow_the_same_requests(server_pair: Pair, setup: tuple[str, ...]) -> None:
    name, *rules = setup
    assert both(server_pair, ("ACL", "SETUSER", name, *rules)) == ["OK"]
    for probe in PROBES:
        both(server_pair, ("ACL", "DRYRUN", name, *probe))
    m, r = server_pair
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
        # a pattern after allkeys / allchannels, malformed patterns
        ["~*", "~x"],
        ["allkeys", "%R~x"],
        ["allchannels", "&x"],
        ["&*", "&x"],
        ["&a b"],
        ["~a b"],
        ["%RR~x"],
        # first-argument rules
        ["+config|get|appendonly"],
        ["+config|get|"],
        ["+select|"],
        ["-select|0"],
        ["-config|get|x"],
        ["+get|x|y"],
        ["+nope|x"],
    ],
)
def test_invalid_rules_are_the_same_errors(server_pair: Pair, rules: list[str]) -> None:
    replies = both(server_pair, ("ACL", "SETUSER", "bad", *rules), ("ACL", "GETUSER", "bad"))
    assert replies[1] is None  # nothing was created


def test_users_whoami_deluser_and_errors(server_pair: Pair) -> None:
    both(
        server_pair,
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
    categories = {c.decode() for c in raw(server_pair[0].port, ("ACL", "CAT"))[0]}
    assert {"read", "write", "admin", "dangerous", "keyspace", "create", "floor"} <= categories


def test_noperm_and_auth_errors_as_a_user(server_pair: Pair) -> None:
    both(server_pair, ("ACL", "SETUSER", "frank", "on", ">pw", "~orders:*", "+@read", "+@write", "+auth"))
    m, r = server_pair
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


def test_the_log_records_denials_without_secrets(server_pair: Pair, admins: tuple[redis.Redis, redis.Redis]) -> None:
    mc, rc = admins
    for c in admins:
        c.execute_command("ACL", "LOG", "RESET")
    both(server_pair, ("ACL", "SETUSER", "gina", "on", ">pw", "~a*", "+get"))
    m, r = server_pair
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


def acl_list_line(server_pair: Pair, name: str) -> str:
    """The user's ACL LIST line on both servers (they must be equal; other users' lines may differ:
    March shows the command rules as given, Redis 7.0 recomputes them)."""
    got, expected = (
        next(line.decode() for line in raw(port, ("ACL", "LIST"))[0] if line.startswith(f"user {name} ".encode()))
        for port in (server_pair[0].port, server_pair[1].port)
    )
    assert got == expected, f"march {got!r}, redis {expected!r}"
    return got


READ_BACK = [
    ("ch1", "resetchannels", "&foo", "+@all"),
    ("ch2", "&foo", "&bar", "&foo"),
    ("ch3", "allchannels"),
    ("ch4", "&a", "allchannels"),
    ("ch5", "allchannels", "resetchannels", "&x*", "&[ab]?"),
    ("ch6", "&a", "resetchannels"),
    ("k1", "%R~foo", "%W~foo", "%RW~bar"),
    ("k2", "~a", "~a", "%R~b", "%W~b", "%R~c"),
    ("k3", "%W~x", "%R~x", "%rw~y"),
    ("f1", "+select|0"),
    ("f2", "+select|0", "+select|0", "+SELECT|1", "+select|Ab"),
]


@pytest.mark.parametrize("rules", READ_BACK, ids=[r[0] for r in READ_BACK])
def test_rules_read_back_as_redis(server_pair: Pair, rules: tuple[str, ...]) -> None:
    """ACL LIST and ACL GETUSER show channel rules, merged key patterns and first arguments as Redis 7.0."""
    name, *given = rules
    both(server_pair, ("ACL", "DELUSER", name), ("ACL", "SETUSER", name, *given))
    acl_list_line(server_pair, name)
    m, r = server_pair
    with client(m.port) as mc, client(r.port) as rc:
        got, expected = mc.acl_getuser(name), rc.acl_getuser(name)
    for field in ("flags", "passwords", "keys", "channels", "commands"):
        assert got[field] == expected[field], (field, got, expected)


def test_the_channels_field_and_line_of_the_issue(server_pair: Pair) -> None:
    both(server_pair, ("ACL", "SETUSER", "issue", "resetchannels", "&foo", "+@all"))
    assert acl_list_line(server_pair, "issue") == "user issue off resetchannels &foo +@all"
    both(server_pair, ("ACL", "SETUSER", "issue2", "%R~foo", "%W~foo", "%RW~bar"))
    assert acl_list_line(server_pair, "issue2") == "user issue2 off ~foo ~bar resetchannels -@all"


CHANNEL_PROBES = [
    ("SUBSCRIBE", "news.eu"),
    ("SUBSCRIBE", "news.eu", "other", "alerts"),
    ("SUBSCRIBE", "alerts"),
    ("SUBSCRIBE", "alerts2"),
    ("PSUBSCRIBE", "news.*"),  # one of the user's patterns, as a string: allowed
    ("PSUBSCRIBE", "news*"),  # a pattern its patterns would match is not it: refused
    ("PSUBSCRIBE", "alerts"),
    ("PSUBSCRIBE", "*"),
    ("UNSUBSCRIBE", "other"),  # never checked
    ("PUNSUBSCRIBE", "*"),
    ("SELECT", "0"),
    ("SELECT", "1"),
    ("select", "0"),
]


@pytest.mark.parametrize(
    "rules",
    [
        ("on", "nopass", "&news.*", "&alerts", "+@all"),
        ("on", "nopass", "resetchannels", "+@all"),
        ("on", "nopass", "allchannels", "+@all"),
        ("on", "nopass", "&*", "-@all", "+subscribe", "+select|0"),
        ("on", "nopass", "&[n]ews.??", "-@all", "+@pubsub", "+select|0", "+select|1"),
    ],
)
def test_channel_and_first_arg_rules_allow_what_redis_allows(server_pair: Pair, rules: tuple[str, ...]) -> None:
    both(server_pair, ("ACL", "DELUSER", "lis"), ("ACL", "SETUSER", "lis", *rules))
    for probe in CHANNEL_PROBES:
        both(server_pair, ("ACL", "DRYRUN", "lis", *probe))


def test_subscribe_refused_and_logged_as_redis(server_pair: Pair, admins: tuple[redis.Redis, redis.Redis]) -> None:
    """NOPERM with Redis' text for a channel or a pattern, at top level and inside MULTI; the ACL LOG
    entries (reason ``channel``, the first channel refused, the context) as Redis writes them."""
    mc, rc = admins
    for c in admins:
        c.execute_command("ACL", "LOG", "RESET")
    both(server_pair, ("ACL", "DELUSER", "lis"), ("ACL", "SETUSER", "lis", "on", ">pw", "&news.*", "&alerts", "+@all"))
    m, r = server_pair
    replies = []
    for port in (m.port, r.port):
        with RespConn(port) as c:
            replies.append(
                [
                    c.call("AUTH", "lis", "pw"),
                    c.call("SUBSCRIBE", "news.eu", "other", "more"),
                    c.call("PSUBSCRIBE", "news*"),
                    c.call("MULTI"),
                    c.call("SUBSCRIBE", "elsewhere"),
                    c.call("EXEC"),
                    c.call("SUBSCRIBE", "news.eu"),
                    c.call("PSUBSCRIBE", "news.*"),
                ]
            )
    assert replies[0] == replies[1]
    assert replies[0][1] == RespError(errors.NOPERM_CHANNEL)
    assert errors.NOPERM_CHANNEL == (
        "NOPERM this user has no permissions to access one of the channels used as arguments"
    )
    fields = ("count", "reason", "context", "object", "username")
    got = [{f: e[f] for f in fields} for e in mc.acl_log()]
    assert got == [{f: e[f] for f in fields} for e in rc.acl_log()]
    assert [(e["reason"], e["object"], e["context"]) for e in got] == [
        ("channel", "elsewhere", "multi"),
        ("channel", "news*", "toplevel"),
        ("channel", "other", "toplevel"),
    ]


def subscribed(port: int, user: str, *names: str, pattern: bool = False) -> RespConn:
    """A RESP2 connection authenticated as ``user`` and subscribed to ``names``."""
    c = RespConn(port)
    assert c.call("AUTH", user, "pw") == "OK"
    c.send(encode("PSUBSCRIBE" if pattern else "SUBSCRIBE", *names))
    for _ in names:
        reply = c.read_reply()
        assert isinstance(reply, list), reply
    return c


def test_a_revoke_drops_the_subscribers_it_forbids(server_pair: Pair) -> None:
    """As Redis 7: ACL SETUSER closes the user's connections subscribed to a channel or a pattern its
    new rules do not allow; the others stay, and so do other users' connections."""
    outcomes = []
    for port in (server_pair[0].port, server_pair[1].port):
        with RespConn(port) as admin:
            admin.call("ACL", "DELUSER", "rev", "other")
            admin.call("ACL", "SETUSER", "rev", "on", ">pw", "&news.*", "&alerts", "&x*", "+@all")
            admin.call("ACL", "SETUSER", "other", "on", ">pw", "&news.*", "+@all")
            conns = {
                "news": subscribed(port, "rev", "news.eu"),
                "alerts": subscribed(port, "rev", "alerts"),
                "both": subscribed(port, "rev", "alerts", "news.us"),
                "pattern": subscribed(port, "rev", "x*", pattern=True),
                "other user": subscribed(port, "other", "news.eu"),
            }
            try:
                assert admin.call("ACL", "SETUSER", "rev", "resetchannels", "&alerts", "&x") == "OK"
                outcome = {name: c.is_closed_by_peer(3) for name, c in conns.items() if name != "alerts"}
                outcome["alerts"] = conns["alerts"].call("PING") != [b"pong", b""]
                outcome["still allowed after a widening"] = admin.call(
                    "ACL", "SETUSER", "rev", "&more"
                ) == "OK" and conns["alerts"].call("PING") == [b"pong", b""]
                outcomes.append(outcome)
            finally:
                for c in conns.values():
                    c.close()
    assert outcomes[0] == outcomes[1]
    assert outcomes[0] == {
        "news": True,
        "both": True,
        "pattern": True,
        "other user": False,
        "alerts": False,
        "still allowed after a widening": True,
    }


def test_acl_pubsub_default_as_redis(server_pair: Pair) -> None:
    """Redis 7's default (resetchannels), shown by CONFIG GET; allchannels applies to the users
    created (or reset) after it is set, in any case, not to the others."""
    assert both(server_pair, ("CONFIG", "GET", "acl-pubsub-default")) == [[b"acl-pubsub-default", b"resetchannels"]]
    both(server_pair, ("ACL", "DELUSER", "before", "after", "after2"), ("ACL", "SETUSER", "before", "on"))
    try:
        both(
            server_pair,
            ("CONFIG", "SET", "acl-pubsub-default", "ALLCHANNELS"),
            ("CONFIG", "GET", "acl-pubsub-default"),
            ("ACL", "SETUSER", "after"),
            ("ACL", "SETUSER", "after2", "&foo"),  # a pattern after allchannels: refused, as Redis
            ("ACL", "GETUSER", "after2"),
        )
        assert acl_list_line(server_pair, "after") == "user after off &* -@all"
        assert acl_list_line(server_pair, "before") == "user before on resetchannels -@all"
        both(server_pair, ("ACL", "SETUSER", "before", "resetchannels", "&b", "+@all"), ("ACL", "GETUSER", "before"))
        for name in ("after", "before"):
            both(server_pair, ("ACL", "DRYRUN", name, "SUBSCRIBE", "b"), ("ACL", "DRYRUN", name, "PSUBSCRIBE", "c"))
    finally:
        both(server_pair, ("CONFIG", "SET", "acl-pubsub-default", "resetchannels"))
    both(server_pair, ("ACL", "SETUSER", "after2", "on"))
    assert acl_list_line(server_pair, "after2") == "user after2 on resetchannels -@all"


def test_cat_keeps_the_case_and_log_shows_ten(server_pair: Pair, admins: tuple[redis.Redis, redis.Redis]) -> None:
    assert both(server_pair, ("ACL", "CAT", "NON_EXISTS")) == [RespError("ERR Unknown category 'NON_EXISTS'")]
    for port in (server_pair[0].port, server_pair[1].port):  # (the commands differ: the category is found in any case)
        assert b"get" in raw(port, ("ACL", "CAT", "Read"))[0]
    both(server_pair, ("ACL", "SETUSER", "tenant", "on", ">pw", "~a*", "+get"), ("ACL", "LOG", "RESET"))
    m, r = server_pair
    for port in (m.port, r.port):
        with RespConn(port) as c:
            c.call("AUTH", "tenant", "pw")
            for i in range(13):
                c.call("GET", f"b{i}")  # 13 entries: each a different key
    mc, rc = admins
    for count in (None, 12, 0, -1):
        got, expected = mc.acl_log(count), rc.acl_log(count)
        assert [e["object"] for e in got] == [e["object"] for e in expected], count
    assert len(mc.acl_log()) == 10
