"""SLOWLOG, MONITOR and LATENCY next to a real redis-server: errors, help, reply shapes and the ACL
categories COMMAND INFO gives (what ``+@admin`` / ``-@dangerous`` grant or take)."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from .helpers import outcome, same


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


# --- the pieces behind them (march.diagnostics), without a server ----------------------------------


def test_redaction_of_every_password_bearing_command() -> None:
    from march.diagnostics import REDACTED as R
    from march.diagnostics import redacted

    assert redacted([b"AUTH", b"pw"]) == [b"AUTH", R]
    assert redacted([b"auth", b"user", b"pw"]) == [b"auth", R, R]
    assert redacted([b"HELLO", b"3", b"AUTH", b"u", b"pw", b"SETNAME", b"n"]) == [
        b"HELLO", b"3", b"AUTH", R, R, b"SETNAME", b"n"
    ]  # fmt: skip
    hello_without_protover = [b"HELLO", b"AUTH", b"u", b"pw"]  # refused, but MONITOR and SLOWLOG see it
    assert redacted(hello_without_protover) == [b"HELLO", b"AUTH", R, R]
    assert redacted([b"ACL", b"SETUSER", b"u", b"on", b">pw", b"#" + b"a" * 64, b"<old", b"!h", b"~*"]) == [
        b"ACL", b"SETUSER", b"u", b"on", R, R, R, R, b"~*"
    ]  # fmt: skip
    assert redacted([b"CONFIG", b"SET", b"requirepass", b"pw", b"timeout", b"5"]) == [
        b"CONFIG", b"SET", b"requirepass", R, b"timeout", b"5"
    ]  # fmt: skip
    assert redacted([b"INCR", b"auth"]) == [b"INCR", b"auth"]


def test_monitor_quoting_is_sdscatrepr() -> None:
    from march.diagnostics import quoted

    assert quoted(b"orders") == b'"orders"'
    assert quoted(b'a"b\\c\n\r\t\x07\x08\x00\xff ') == b'"a\\"b\\\\c\\n\\r\\t\\a\\b\\x00\\xff "'


def test_latency_keeps_the_worst_sample_of_each_second() -> None:
    from march.diagnostics import LatencyMonitor

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
