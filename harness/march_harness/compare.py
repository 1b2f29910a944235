"""Helpers for command tests: outcomes that compare equal across servers."""

from __future__ import annotations

from typing import Any

import redis

from march_harness import RespConn


def client(port: int, protocol: int = 3) -> redis.Redis:
    """A redis-py client on one connection (RESP3 is redis-py 8's default)."""
    return redis.Redis(port=port, protocol=protocol, single_connection_client=True, socket_timeout=10)


def outcome(client: redis.Redis, *args: Any) -> Any:
    """The reply, or ``("error", exception class, message)``: what a redis-py user sees."""
    try:
        return client.execute_command(*args)  # type: ignore[no-untyped-call]
    except redis.RedisError as exc:
        return ("error", type(exc).__name__, str(exc))


def same(mc: redis.Redis, rc: redis.Redis, *args: Any) -> Any:
    """Send one command to march and to Redis; the outcomes must be equal. Returns march's."""
    got, expected = outcome(mc, *args), outcome(rc, *args)
    assert got == expected, f"{args!r}: march {got!r}, redis {expected!r}"
    return got


def raw(port: int, *commands: tuple[Any, ...]) -> list[Any]:
    """Replies (errors as ``RespError`` with their full text) to commands on one fresh RESP2 connection."""
    with RespConn(port) as c:
        return [c.call(*cmd) for cmd in commands]
