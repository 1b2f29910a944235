"""Redis' own rules where March's commands are Redis' (issue 16 §4): each scenario runs against a
March process and a real redis-server (7.0), and what the client sees must be the same.

- A command flagged ``no_multi`` (SHUTDOWN) inside MULTI is refused and dooms the transaction;
  the node keeps running. WATCH inside MULTI and MONITOR inside MULTI get Redis' answers.
- CLIENT KILL: SKIPME defaults to yes, a bad filter closes nobody, ID/TYPE/USER/LADDR filters; a
  caller that closes itself gets its reply first. CLIENT LIST TYPE and ID.
- MONITOR: RESET stops the stream; queued, discarded, refused and admin requests are not shown;
  the monitoring connection takes no keyspace command.
- CONFIG RESETSTAT: INFO commandstats (rejected and failed calls apart), errorstats and LATENCY
  HISTOGRAM start again; SLOWLOG logs the commands EXEC runs, never EXEC.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from march_harness import MarchServer, RedisServer, RespConn, RespError
from march_harness.resp import encode

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

Pair = tuple[MarchServer, RedisServer]
Server = MarchServer | RedisServer
MONITOR_LINE = re.compile(r"^\d+\.\d{6} \[0 [^\]]+\] (.*)$")


@pytest.fixture
def pair(march_server: MarchServer, redis_server: RedisServer) -> Pair:
    """A fresh march and redis-server of its own, for scenarios that close connections or stop a node."""
    return march_server, redis_server


def both(pair: Pair, scenario: Callable[[Server], Any]) -> Any:
    """Run ``scenario`` on March and on Redis; the outcomes must be equal. Returns March's."""
    march, redis_ = pair
    got, expected = scenario(march), scenario(redis_)
    assert got == expected, f"march {got!r}\nredis {expected!r}"
    return got


def script(server: Server, *commands: tuple[Any, ...]) -> list[Any]:
    with RespConn(server.port) as c:
        return [c.call(*cmd) for cmd in commands]


# --- transactions -------------------------------------------------------------------------------


def test_shutdown_inside_multi_is_refused_and_the_node_keeps_serving(pair: Pair) -> None:
    def scenario(server: Server) -> list[Any]:
        out = script(server, ("MULTI",), ("SHUTDOWN",), ("INCR", "rules:after"), ("EXEC",))
        out += script(server, ("MULTI",), ("SHUTDOWN", "NOSAVE"), ("EXEC",), ("PING",))
        return out

    assert both(pair, scenario) == [
        "OK",
        RespError("ERR Command not allowed inside a transaction"),
        "QUEUED",
        RespError("EXECABORT Transaction discarded because of previous errors."),
        "OK",
        RespError("ERR Command not allowed inside a transaction"),
        RespError("EXECABORT Transaction discarded because of previous errors."),
        "PONG",
    ]
    march, _ = pair
    assert march.running
    assert script(march, ("GET", "rules:after")) == [None]  # the doomed transaction ran nothing


def test_watch_and_monitor_inside_multi_as_redis(pair: Pair) -> None:
    def scenario(server: Server) -> list[Any]:
        return script(
            server,
            ("MULTI",),
            ("WATCH", "rules:w"),  # answered at once; the transaction goes on
            ("INCR", "rules:w"),
            ("MONITOR",),  # queued; EXEC answers it
            ("EXEC",),
            ("INCR", "rules:w"),  # not a monitor afterwards
        )

    assert both(pair, scenario) == [
        "OK",
        RespError("ERR WATCH inside MULTI is not allowed"),
        "QUEUED",
        "QUEUED",
        [1, RespError("ERR MONITOR isn't allowed for DENY BLOCKING client")],
        2,
    ]


# --- CLIENT KILL / CLIENT LIST ------------------------------------------------------------------


def test_client_kill_errors_close_nobody(pair: Pair) -> None:
    def scenario(server: Server) -> list[Any]:
        with RespConn(server.port) as me, RespConn(server.port) as other:
            other_id = other.call("CLIENT", "ID")
            out = [
                me.call("CLIENT", "KILL", "ID", other_id, "SKIPME", "maybe"),
                me.call("CLIENT", "KILL", "ADDR", "1.2.3.4:5", "SKIPME", "perhaps"),
                me.call("CLIENT", "KILL", "ID", "0"),
                me.call("CLIENT", "KILL", "ID", "-1"),
                me.call("CLIENT", "KILL", "ID", "abc"),
                me.call("CLIENT", "KILL", "TYPE", "nosuch"),
                me.call("CLIENT", "KILL", "USER", "nosuch-user"),
                me.call("CLIENT", "KILL", "NOSUCH", "x"),
                me.call("CLIENT", "KILL", "ID", other_id, "SKIPME"),
                me.call("CLIENT", "KILL", "1.2.3.4:5"),
                me.call("CLIENT", "KILL"),
            ]
            out.append(other.call("PING"))  # still connected after every refused KILL
            out.append(me.call("PING"))
            return out

    assert both(pair, scenario) == [
        RespError("ERR syntax error"),
        RespError("ERR syntax error"),
        RespError("ERR client-id should be greater than 0"),
        RespError("ERR client-id should be greater than 0"),
        RespError("ERR client-id should be greater than 0"),
        RespError("ERR Unknown client type 'nosuch'"),
        RespError("ERR No such user 'nosuch-user'"),
        RespError("ERR syntax error"),
        RespError("ERR syntax error"),
        RespError("ERR No such client"),
        RespError("ERR wrong number of arguments for 'client|kill' command"),
        "PONG",
        "PONG",
    ]


def test_client_kill_skips_the_caller_unless_told(pair: Pair) -> None:
    def scenario(server: Server) -> list[Any]:
        with RespConn(server.port) as me, RespConn(server.port) as other:
            my_id, other_id = me.call("CLIENT", "ID"), other.call("CLIENT", "ID")
            laddr = _field(me.call("CLIENT", "INFO"), "laddr")
            out = [
                me.call("CLIENT", "KILL", "ID", my_id),  # SKIPME yes by default: nobody
                me.call("CLIENT", "KILL", "ID", my_id, "SKIPME", "yes"),
                me.call("CLIENT", "KILL", "TYPE", "master"),  # no such connection
                me.call("CLIENT", "KILL", "TYPE", "pubsub"),
                me.call("PING"),
                me.call("CLIENT", "KILL", "LADDR", laddr),  # every other connection, not the caller
                other.is_closed_by_peer(),
                me.call("PING"),
            ]
            with RespConn(server.port) as third:
                third_id = third.call("CLIENT", "ID")
                out += [
                    me.call("CLIENT", "KILL", "ID", third_id, "TYPE", "normal", "SKIPME", "no"),
                    third.is_closed_by_peer(),
                    me.call("CLIENT", "KILL", "ID", other_id),  # gone already
                ]
            return out

    assert both(pair, scenario) == [0, 0, 0, 0, "PONG", 1, True, "PONG", 1, True, 0]


@pytest.mark.parametrize(
    "kill",
    [("ID", "{me}", "SKIPME", "no"), ("ADDR", "{addr}", "SKIPME", "no"), ("{addr}",)],
    ids=["id-skipme-no", "addr-skipme-no", "old-form"],
)
def test_a_caller_that_closes_itself_gets_its_reply_first(pair: Pair, kill: tuple[str, ...]) -> None:
    def scenario(server: Server) -> list[Any]:
        with RespConn(server.port) as me:
            my_id = me.call("CLIENT", "ID")
            addr = _field(me.call("CLIENT", "INFO"), "addr")
            args = [a.format(me=my_id, addr=addr) for a in kill]
            me.send(encode("CLIENT", "KILL", *args) + encode("PING"))  # the PING after it never runs
            return [me.read_reply(), me.is_closed_by_peer()]

    assert both(pair, scenario) in ([1, True], ["OK", True])


def test_client_kill_user_closes_that_users_connections(pair: Pair) -> None:
    def scenario(server: Server) -> list[Any]:
        with RespConn(server.port) as admin:
            admin.call("ACL", "SETUSER", "rules-u", "on", ">pw-rules", "~*", "+@all")
            with RespConn(server.port) as u1, RespConn(server.port) as u2, RespConn(server.port) as bystander:
                assert u1.call("AUTH", "rules-u", "pw-rules") == "OK"
                assert u2.call("AUTH", "rules-u", "pw-rules") == "OK"
                return [
                    admin.call("CLIENT", "KILL", "USER", "rules-u"),
                    u1.is_closed_by_peer(),
                    u2.is_closed_by_peer(),
                    bystander.call("PING"),
                    admin.call("CLIENT", "KILL", "USER", "default", "ADDR", "1.2.3.4:5"),
                ]

    assert both(pair, scenario) == [2, True, True, "PONG", 0]


def test_client_list_type_and_id(pair: Pair) -> None:
    def scenario(server: Server) -> list[Any]:
        with RespConn(server.port) as me, RespConn(server.port) as other:
            my_id, other_id = me.call("CLIENT", "ID"), other.call("CLIENT", "ID")

            def ids(reply: Any) -> Any:
                return [int(_field(line, "id")) for line in reply.splitlines()] if isinstance(reply, bytes) else reply

            return [
                sorted(ids(me.call("CLIENT", "LIST"))) == sorted([my_id, other_id]),
                sorted(ids(me.call("CLIENT", "LIST", "TYPE", "normal"))) == sorted([my_id, other_id]),
                sorted(ids(me.call("CLIENT", "LIST", "TYPE", "NORMAL"))) == sorted([my_id, other_id]),
                me.call("CLIENT", "LIST", "TYPE", "master"),
                me.call("CLIENT", "LIST", "TYPE", "replica"),
                me.call("CLIENT", "LIST", "TYPE", "slave"),
                me.call("CLIENT", "LIST", "TYPE", "pubsub"),
                me.call("CLIENT", "LIST", "TYPE", "nosuch"),
                ids(me.call("CLIENT", "LIST", "ID", my_id)) == [my_id],
                ids(me.call("CLIENT", "LIST", "ID", other_id, "999999", my_id)) == [other_id, my_id],
                me.call("CLIENT", "LIST", "ID", "0", "-5"),
                me.call("CLIENT", "LIST", "ID", my_id, "abc"),
                me.call("CLIENT", "LIST", "ID"),
                me.call("CLIENT", "LIST", "TYPE"),
                me.call("CLIENT", "LIST", "TYPE", "normal", "x"),
                me.call("CLIENT", "LIST", "x"),
            ]

    assert both(pair, scenario) == [
        True,
        True,
        True,
        b"",
        b"",
        b"",
        b"",
        RespError("ERR Unknown client type 'nosuch'"),
        True,
        True,
        b"",
        RespError("ERR Invalid client ID"),
        RespError("ERR syntax error"),
        RespError("ERR syntax error"),
        RespError("ERR syntax error"),
        RespError("ERR syntax error"),
    ]


@pytest.mark.parametrize(
    "args",
    [
        ("CLIENT", "NOSUCH"),
        ("CLIENT", "HELP", "x"),
        ("CLIENT", "ID", "x"),
        ("CLIENT", "NO-EVICT", "maybe"),
        ("CLIENT", "NO-EVICT", "on"),
        ("CONFIG", "NOSUCH"),
        ("CONFIG", "HELP", "x"),
        ("CONFIG", "RESETSTAT", "x"),
        ("SLOWLOG", "NOSUCH", "x"),
        ("SLOWLOG", "HELP", "x"),
        ("LATENCY", "NOSUCH"),
        ("LATENCY", "HELP", "x"),
        ("LATENCY", "HISTORY"),
    ],
    ids=" ".join,
)
def test_container_subcommand_errors_as_redis(server_pair: Pair, args: tuple[str, ...]) -> None:
    assert script(server_pair[0], args) == script(server_pair[1], args)


# --- MONITOR ------------------------------------------------------------------------------------


def shown(server: Server, *commands: tuple[Any, ...]) -> list[str]:
    """What a MONITOR connection shows of ``commands`` sent by another connection (arguments only)."""
    with RespConn(server.port) as monitor, RespConn(server.port) as c:
        assert monitor.call("MONITOR") == "OK"
        for cmd in commands:
            c.call(*cmd)
        c.call("ECHO", "rules:end")
        lines: list[str] = []
        while not lines or lines[-1] != '"ECHO" "rules:end"':  # (each read bounded by the socket's timeout)
            match = MONITOR_LINE.match(monitor.read_reply())
            assert match is not None
            lines.append(match.group(1))
    return lines[:-1]


def test_monitor_shows_what_runs_as_redis(pair: Pair) -> None:
    commands = [
        ("INCR", "rules:m"),
        ("MULTI",),
        ("INCR", "rules:m"),  # queued, then discarded: never shown
        ("CLIENT", "ID"),
        ("DISCARD",),
        ("MULTI",),
        ("INCR", "rules:m"),  # shown when EXEC runs it, before EXEC
        ("EXEC",),
        ("MULTI",),
        ("GET",),  # refused: the transaction is doomed
        ("EXEC",),  # shown (it ran, and failed)
        ("EXEC",),  # without MULTI: shown too
        ("CLIENT", "LIST"),  # admin subcommands: never shown
        ("CLIENT", "KILL", "ID", "999999"),
        ("CLIENT", "NO-EVICT", "on"),
        ("CLIENT", "ID"),  # not admin: shown
        ("CONFIG", "GET", "port"),
        ("SLOWLOG", "LEN"),
        ("NOSUCH", "x"),  # unknown and refused requests: not shown
        ("INCR",),
        ("CLIENT", "NOSUCH"),
        ("ECHO", "x"),
    ]
    assert both(pair, lambda server: shown(server, *commands)) == [
        '"INCR" "rules:m"',
        '"MULTI"',
        '"DISCARD"',
        '"MULTI"',
        '"INCR" "rules:m"',
        '"EXEC"',
        '"MULTI"',
        '"EXEC"',
        '"EXEC"',
        '"CLIENT" "ID"',
        '"ECHO" "x"',
    ]


def replies(conn: RespConn, *commands: tuple[Any, ...]) -> list[Any]:
    """The replies to ``commands`` on a MONITOR connection, its monitor lines left out. MONITOR
    itself is only sent: on a monitor it gets no reply (the next command's reply comes next)."""
    out = []
    for cmd in commands:
        conn.send(encode(*cmd))
        if cmd == ("MONITOR",):
            continue
        while True:
            reply = conn.read_reply()
            if not (isinstance(reply, str) and MONITOR_LINE.match(reply)):
                break
        out.append(reply)
    return out


def test_a_monitor_takes_only_what_redis_lets_it(pair: Pair) -> None:
    def scenario(server: Server) -> list[Any]:
        with RespConn(server.port) as monitor:
            assert monitor.call("MONITOR") == "OK"
            out = replies(
                monitor,
                ("PING",),
                ("INCR", "rules:mon"),
                ("GET", "rules:mon"),
                ("EXISTS", "rules:mon"),
                ("TYPE", "rules:mon"),
                ("DBSIZE",),
                ("KEYS", "*"),
                ("SCAN", "0"),
                ("ECHO", "e"),
                ("CLIENT", "SETNAME", "watcher"),
                ("CLIENT", "GETNAME"),
                ("MULTI",),
                ("INCR", "rules:mon"),
                ("EXEC",),
                ("MONITOR",),  # already a monitor: no reply at all, as in Redis (none in the list)
                ("PING", "after-monitor"),
                ("RESET",),  # the stream stops
                ("INCR", "rules:mon"),
            )
            with RespConn(server.port) as other:
                other.call("ECHO", "rules:not-shown")
            out.append(monitor.call("ECHO", "last"))  # the next thing read: no monitor line before it
            return out

    keyspace = RespError("ERR Replica can't interact with the keyspace")
    assert both(pair, scenario) == [
        "PONG",
        keyspace,
        keyspace,
        keyspace,
        keyspace,
        keyspace,
        keyspace,
        keyspace,
        b"e",
        "OK",
        b"watcher",
        "OK",
        keyspace,
        RespError("EXECABORT Transaction discarded because of previous errors."),
        b"after-monitor",
        "RESET",
        1,
        b"last",
    ]


def test_a_request_pipelined_after_monitor_is_checked_too(pair: Pair) -> None:
    """MONITOR and INCR in one read: the INCR must not take the server's fast path."""

    def scenario(server: Server) -> list[Any]:
        with RespConn(server.port) as monitor:
            monitor.send(encode("MONITOR") + encode("INCR", "rules:pipelined") + encode("RESET"))
            return [monitor.read_reply() for _ in range(3)]

    assert both(pair, scenario) == ["OK", RespError("ERR Replica can't interact with the keyspace"), "RESET"]


# --- CONFIG RESETSTAT, commandstats, SLOWLOG and EXEC --------------------------------------------

STATS_OF = ("get", "incr", "incrby", "multi", "exec", "shutdown")


def commandstats(conn: RespConn) -> dict[str, tuple[str, str, str]]:
    """calls, rejected_calls, failed_calls of the commands ``STATS_OF`` (usec differ by nature)."""
    out = {}
    for line in conn.call("INFO", "commandstats").decode().splitlines():
        name, _, values = line.partition(":")
        fields = dict(v.split("=") for v in values.split(",")) if values else {}
        if name.removeprefix("cmdstat_") in STATS_OF:
            out[name] = (fields["calls"], fields["rejected_calls"], fields["failed_calls"])
    return out


def errorstats(conn: RespConn) -> list[str]:
    return sorted(conn.call("INFO", "errorstats").decode().splitlines()[1:])


def test_resetstat_and_commandstats_as_redis(pair: Pair) -> None:
    def scenario(server: Server) -> list[Any]:
        with RespConn(server.port) as c:
            c.call("INCR", "rules:before-reset")
            assert c.call("CONFIG", "RESETSTAT") == "OK"
            after_reset = [commandstats(c), errorstats(c), c.call("LATENCY", "HISTOGRAM", "incr")]
            for cmd in [
                ("GET", "a", "b"),  # rejected (arity)
                ("INCR", "rules:n"),
                ("INCRBY", "rules:n", "x"),  # failed
                ("MULTI",),
                ("INCRBY", "rules:n", "y"),  # queued, then failed inside EXEC
                ("INCR", "rules:n"),
                ("EXEC",),
                ("MULTI",),
                ("SHUTDOWN",),  # rejected: not allowed in a transaction
                ("EXEC",),  # failed: EXECABORT
                ("MULTI",),
                ("GET",),  # rejected
                ("EXEC",),
                ("NOSUCH",),
            ]:
                c.call(*cmd)
            return [*after_reset, commandstats(c), errorstats(c)]

    after_reset_stats, after_reset_errors, histogram, stats, errors = both(pair, scenario)
    assert after_reset_stats == {} and after_reset_errors == [] and histogram == []
    assert stats == {
        "cmdstat_get": ("0", "2", "0"),
        "cmdstat_incr": ("2", "0", "0"),
        "cmdstat_incrby": ("2", "0", "2"),
        "cmdstat_multi": ("3", "0", "0"),
        "cmdstat_exec": ("3", "0", "2"),
        "cmdstat_shutdown": ("0", "1", "0"),
    }
    assert errors == ["errorstat_ERR:count=6", "errorstat_EXECABORT:count=2"]


def test_slowlog_logs_what_exec_ran_never_exec(pair: Pair) -> None:
    def scenario(server: Server) -> list[Any]:
        with RespConn(server.port) as c:
            assert c.call("CONFIG", "SET", "slowlog-log-slower-than", "0") == "OK"
            c.call("SLOWLOG", "RESET")
            for cmd in [("MULTI",), ("INCR", "rules:s"), ("ECHO", "in-exec"), ("EXEC",), ("PING",)]:
                c.call(*cmd)
            return [entry[3] for entry in c.call("SLOWLOG", "GET", "-1")]

    assert both(pair, scenario) == [
        [b"PING"],
        [b"ECHO", b"in-exec"],
        [b"INCR", b"rules:s"],
        [b"MULTI"],
        [b"SLOWLOG", b"RESET"],
    ]


def test_latency_histogram_counts_from_resetstat(march_server: MarchServer) -> None:
    with RespConn(march_server.port) as c:
        for _ in range(3):
            c.call("INCR", "rules:h")
        assert c.call("LATENCY", "HISTOGRAM", "incr")[1][1] == 3  # [b"incr", [b"calls", 3, ...]]
        assert c.call("CONFIG", "RESETSTAT") == "OK"
        assert c.call("LATENCY", "HISTOGRAM", "incr") == []
        c.call("INCR", "rules:h")
        assert c.call("LATENCY", "HISTOGRAM", "incr")[1][1] == 1


def test_a_deleted_caller_gets_its_reply_before_the_close(pair: Pair) -> None:
    def scenario(server: Server) -> list[Any]:
        with RespConn(server.port) as admin, RespConn(server.port) as me:
            admin.call("ACL", "SETUSER", "rules-gone", "on", ">pw-gone", "~*", "+@all")
            assert me.call("AUTH", "rules-gone", "pw-gone") == "OK"
            return [me.call("ACL", "DELUSER", "rules-gone"), me.is_closed_by_peer(), admin.call("PING")]

    assert both(pair, scenario) == [1, True, "PONG"]


def _field(line: Any, name: str) -> str:
    text = line.decode() if isinstance(line, bytes) else str(line)
    found = re.search(rf"(?:^| ){re.escape(name)}=(\S*)", text)
    assert found is not None, (name, text)
    return found.group(1)
