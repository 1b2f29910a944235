"""SLOWLOG, MONITOR and LATENCY next to a real redis-server: errors, help, reply shapes and the ACL
categories COMMAND INFO gives (what ``+@admin`` / ``-@dangerous`` grant or take)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from march_harness.compare import outcome, same

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    "args",
    [
        ("SLOWLOG", "HELP"),
        ("SLOWLOG", "GET", "-2"),
        ("SLOWLOG", "GET", "abc"),
        ("SLOWLOG", "GET", "1", "2"),
        ("SLOWLOG", "FOO"),
        ("SLOWLOG",),
        ("SLOWLOG", "LEN", "x"),
        ("SLOWLOG", "RESET", "x"),
        ("LATENCY", "FOO"),
        ("LATENCY",),
        ("LATENCY", "LATEST", "x"),
        ("LATENCY", "HISTORY"),
        ("LATENCY", "HISTORY", "no-such-event"),
        ("MONITOR", "x"),
    ],
)
def test_like_redis(mc: redis.Redis, rc: redis.Redis, args: tuple[str, ...]) -> None:
    same(mc, rc, *args)


def test_slowlog_len_and_reset_like_redis(mc: redis.Redis, rc: redis.Redis) -> None:
    assert same(mc, rc, "SLOWLOG", "RESET") == b"OK"
    assert isinstance(outcome(mc, "SLOWLOG", "LEN"), int)
    assert isinstance(outcome(mc, "SLOWLOG", "GET"), list)


def test_latency_reset_and_latest_shapes(mc: redis.Redis) -> None:
    assert isinstance(outcome(mc, "LATENCY", "RESET"), int)
    assert outcome(mc, "LATENCY", "LATEST") == []
    assert outcome(mc, "LATENCY", "RESET", "store-write", "nothing") == 0


def _categories(client: redis.Redis, name: str) -> dict[str, set[str]]:
    """COMMAND INFO's ACL categories of ``name`` and of each of its subcommands."""
    info: Any = client.execute_command("COMMAND", "INFO", name)
    entry = info[name] if isinstance(info, dict) else info[0]
    if isinstance(entry, dict):  # redis-py's parsed form
        out = {name: {c.decode() if isinstance(c, bytes) else c for c in entry["acl_categories"]}}
        for sub in entry.get("subcommands", []):
            out[_text(sub[0])] = {_text(c) for c in sub[6]}
        return out
    out = {name: {_text(c) for c in entry[6]}}
    for sub in entry[9]:
        out[_text(sub[0])] = {_text(c) for c in sub[6]}
    return out


def _text(b: Any) -> str:
    return b.decode() if isinstance(b, bytes) else str(b)


@pytest.mark.parametrize("name", ["slowlog", "monitor", "latency"])
def test_acl_categories_like_redis(mc: redis.Redis, rc: redis.Redis, name: str) -> None:
    ours, theirs = _categories(mc, name), _categories(rc, name)
    if name == "latency":
        theirs.pop("latency|graph")  # not in March
    assert ours == theirs


# --- the pieces behind them (march.stats.diagnostics), without a server ----------------------------------


def test_redaction_of_every_password_bearing_command() -> None:
    """From each command's declared secrets (``table.Secrets``), as Redis redacts them."""
    from march.commands.table import redacted
    from march.stats.diagnostics import REDACTED as R

    assert redacted([b"AUTH", b"pw"]) == [b"AUTH", R]
    assert redacted([b"auth", b"user", b"pw"]) == [b"auth", R, R]
    assert redacted([b"HELLO", b"3", b"AUTH", b"u", b"pw", b"SETNAME", b"n"]) == [
        b"HELLO", b"3", b"AUTH", R, R, b"SETNAME", b"n"
    ]  # fmt: skip
    hello_without_protover = [b"HELLO", b"AUTH", b"u", b"pw"]  # refused, but MONITOR and SLOWLOG see it
    assert redacted(hello_without_protover) == [b"HELLO", b"AUTH", R, R]
    assert redacted([b"ACL", b"SETUSER", b"u", b"on", b">pw", b"(>pw2 ~k)", b"~*"]) == [b"ACL", b"SETUSER", *[R] * 5]
    assert redacted([b"CONFIG", b"SET", b"requirepass", b"pw", b"timeout", b"5", b"etcd-password", b"e"]) == [
        b"CONFIG", b"SET", b"requirepass", R, b"timeout", b"5", b"etcd-password", R
    ]  # fmt: skip
    assert redacted([b"INCR", b"auth"]) == [b"INCR", b"auth"]
    assert redacted([b"ECHO", b"pw"]) == [b"ECHO", b"pw"]  # nothing declared: shown as sent


def test_redaction_follows_the_commands_a_request_carries() -> None:
    from march.commands.table import redacted
    from march.stats.diagnostics import REDACTED as R

    assert redacted([b"ACL", b"DRYRUN", b"u", b"AUTH", b"pw"]) == [b"ACL", b"DRYRUN", b"u", b"AUTH", R]
    assert redacted([b"acl", b"dryrun", b"u", b"hello", b"3", b"auth", b"u", b"pw"])[-2:] == [R, R]
    assert redacted([b"COMMAND", b"GETKEYS", b"AUTH", b"pw"]) == [b"COMMAND", b"GETKEYS", b"AUTH", R]
    assert redacted([b"COMMAND", b"GETKEYS", b"INCR", b"k"]) == [b"COMMAND", b"GETKEYS", b"INCR", b"k"]
    assert redacted([b"ACL", b"DRYRUN", b"u", b"CONFIG", b"SET", b"requirepass", b"pw"])[-1] == R
    # what March does not know: every argument after the name (or after the unknown subcommand)
    assert redacted([b"MIGRATE", b"h", b"1", b"k", b"0", b"10", b"AUTH", b"pw"]) == [b"MIGRATE", *[R] * 7]
    assert redacted([b"COMMAND", b"GETKEYSANDFLAGS", b"AUTH", b"pw"]) == [b"COMMAND", b"GETKEYSANDFLAGS", R, R]
    assert redacted([b"ACL", b"DRYRUN", b"u", b"NOSUCH", b"pw"]) == [b"ACL", b"DRYRUN", b"u", b"NOSUCH", R]
    # nested thousands deep (max_args allows it): a loop, no recursion limit
    deep = [b"ACL", b"DRYRUN", b"u"] * 1300 + [b"AUTH", b"pw"]
    assert redacted(deep)[-2:] == [b"AUTH", R]
    assert deep[-2:] == [b"AUTH", b"pw"]  # a copy: the request itself is untouched


def test_container_tables_cover_their_subcommands() -> None:
    """Every container runs its subcommands from one table: each row has its handler, HELP is one
    of them, and COMMAND INFO's subcommands are exactly the table's (test_subcommands runs them)."""
    from march.commands.table import COMMANDS

    containers = {name for name, spec in COMMANDS.items() if spec.subcommands}
    assert containers == {"acl", "client", "cluster", "command", "config", "debug", "latency", "sentinel", "slowlog"}
    for name in containers:
        rows = COMMANDS[name].subcommands
        assert all(callable(row.handler) for row in rows), name
        assert [row.name for row in rows].count("help") == 1 and rows[-1].name == "help", name
        assert len({row.name for row in rows}) == len(rows), name


def test_acl_log_entries_are_capped_and_still_parse() -> None:
    """Object and user name cut as SLOWLOG cuts arguments; each client-info field cut with no space,
    so clients still split it on spaces and '=' (redis-py's parse_client_info)."""
    from redis._parsers.helpers import parse_client_info

    from march.access.acl_log import LOG_SIZE, AclLog

    log = AclLog()
    info = f"id=7 addr=127.0.0.1:5 name={'n' * 5000} user=u lib-name={'l' * 300} lib-ver=1 resp=2"
    for i in range(LOG_SIZE + 5):
        log.add("key", "toplevel", f"{i:04d}" + "k" * 1_000_000, "u" * 10_000, info)
    assert len(log.entries) == LOG_SIZE
    entry = log.entries[0]
    assert entry.subject == f"{LOG_SIZE + 4:04d}" + "k" * 124 + f"... ({1_000_004 - 128} more bytes)"
    assert entry.username == "u" * 128 + f"... ({10_000 - 128} more bytes)"
    parsed = parse_client_info(entry.client_info)
    assert parsed["name"] == "n" * 128 + "..." and parsed["lib-name"] == "l" * 128 + "..."
    assert parsed["id"] == 7 and parsed["user"] == "u" and parsed["resp"] == "2"
    assert sum(len(e.subject) + len(e.username) + len(e.client_info) for e in log.entries) < 100_000


def test_monitor_quoting_is_sdscatrepr() -> None:
    from march.stats.diagnostics import quoted

    assert quoted(b"orders") == b'"orders"'
    assert quoted(b'a"b\\c\n\r\t\x07\x08\x00\xff ') == b'"a\\"b\\\\c\\n\\r\\t\\a\\b\\x00\\xff "'


def test_latency_keeps_the_worst_sample_of_each_second() -> None:
    from march.stats.diagnostics import LatencyMonitor

    now = [100.2]
    monitor = LatencyMonitor(clock=lambda: now[0])
    monitor.add("store-write", 3)
    monitor.add("store-write", 9)
    monitor.add("store-write", 1)
    now[0] = 101.5
    monitor.add("store-write", 2)
    assert monitor.history("store-write") == [(100, 9), (101, 2)]
    assert monitor.latest() == [("store-write", 101, 2, 9)]
    assert monitor.reset(["store-write", "other"]) == 1
