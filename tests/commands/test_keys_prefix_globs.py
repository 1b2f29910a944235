"""KEYS and SCAN MATCH with globs that are a literal prefix and ``*`` (``user:*``, the common case), on
a real March and a real redis-server side by side: the same names, whatever bytes the names hold.

March answers these without matching a name against the glob (the store's read is narrowed to
the prefix: ``keys._prefix_only``) and KEYS encodes its reply a page at a time
(``listing.reply``); this checks that both keep Redis' answers exactly: across pages, in RESP2
and RESP3, with glob characters, escapes and binary bytes in the names and the patterns.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from march_harness import MarchServer, RedisServer

pytestmark = pytest.mark.e2e

MANY = 2_500  # names under one prefix: more than two pages of the listing (march.keyspace.listing.PAGE)


def plain(key: str) -> str:
    """The test's key without glob characters (a parametrized test's name holds ``[...]``)."""
    return key.replace("[", "(").replace("]", ")")


def names(key: str) -> list[bytes]:
    """Names whose bytes are glob characters, escapes, CR/LF, NUL, high bytes, a prefix of another."""
    k = key.encode()
    return [
        k + b":a", k + b":a*", k + b":a*b", k + b":a\\", k + b":a\\*", k + b":[x]", k + b":[x]y",
        k + b":?", k + b":\r\n$3\r\n", k + b":\x00\xff", k + b":", k + b"", k + b"::", k + b":b",
    ]  # fmt: skip


def patterns(key: str) -> list[bytes]:
    k = key.encode()
    return [
        k + b":*", k + b":**", k + b"*", k + b":a*", k + b":a\\**", k + b":[x]*", k + b":\\[x]*",
        k + b":\\?*", k + b":\r*", k + b":\x00*", k + b":zz*", k + b":a**b*", k + b"::*",
    ]  # fmt: skip


def create(c: redis.Redis, all_names: list[bytes]) -> None:
    with c.pipeline(transaction=False) as p:
        for n in all_names:
            p.incr(n)
        p.execute()


def scan_all(c: redis.Redis, pattern: bytes) -> list[bytes]:
    found: list[bytes] = []
    cursor = 0
    for _ in range(10_000):
        cursor, keys = c.execute_command("SCAN", cursor, "MATCH", pattern, "COUNT", 100)
        found += keys
        if int(cursor) == 0:
            return found
    raise AssertionError("SCAN did not finish")


@pytest.fixture(params=[2, 3])
def clients(request: pytest.FixtureRequest, march_proc: MarchServer, redis_proc: RedisServer) -> Iterator[
    tuple[redis.Redis, redis.Redis]
]:  # fmt: skip
    """A client of March and one of redis-server, both speaking RESP ``request.param``."""
    with (
        redis.Redis(port=march_proc.port, protocol=request.param) as m,
        redis.Redis(port=redis_proc.port, protocol=request.param) as r,
    ):
        yield m, r


def test_prefix_globs_list_what_redis_lists(clients: tuple[redis.Redis, redis.Redis], key: str) -> None:
    m, r = clients
    key = plain(key)
    made = names(key)
    create(m, made)
    create(r, made)
    for pattern in patterns(key):
        from_redis = sorted(r.execute_command("KEYS", pattern))
        listed = m.execute_command("KEYS", pattern)
        assert listed == from_redis, pattern  # (March's in byte order)
        assert sorted(scan_all(m, pattern)) == from_redis == sorted(scan_all(r, pattern)), pattern


def test_a_listing_of_several_pages_is_every_name_once_in_order(
    clients: tuple[redis.Redis, redis.Redis], key: str
) -> None:
    m, r = clients
    key = plain(key)
    made = [f"{key}:{i:05d}".encode() for i in range(MANY)] + [f"{key}x{i}".encode() for i in range(3)]
    create(m, made)
    create(r, made)
    wanted = sorted(n for n in made if n.startswith(f"{key}:".encode()))
    assert m.execute_command("KEYS", f"{key}:*") == wanted == sorted(r.execute_command("KEYS", f"{key}:*"))
    assert m.execute_command("KEYS", f"{key}*") == sorted(made)
    assert sorted(scan_all(m, f"{key}:*".encode())) == wanted
