"""KEYS and SCAN over sequences (MATCH, COUNT, TYPE), and SCAN's guarantee while keys are created:
every key that exists for the whole iteration is returned, and no key is returned twice.
"""

from __future__ import annotations

import pytest
import redis
from march_harness.compare import outcome

pytestmark = pytest.mark.e2e


def make_keys(c: redis.Redis, names: list[str]) -> None:
    with c.pipeline(transaction=False) as p:
        for n in names:
            p.incr(n)
        p.execute()


def scan_all(c: redis.Redis, *options: str) -> list[bytes]:
    found: list[bytes] = []
    cursor = 0
    for _ in range(1000):
        cursor, keys = c.execute_command("SCAN", cursor, *options)  # redis-py makes the cursor an int
        found += keys
        if cursor == 0:
            return found
    raise AssertionError("SCAN did not finish")


def test_keys_patterns(mc: redis.Redis, key: str) -> None:
    names = [f"{key}:a", f"{key}:b", f"{key}:c1", f"{key}:[x]"]
    make_keys(mc, names)
    assert set(mc.execute_command("KEYS", f"{key}:*")) == {n.encode() for n in names}
    assert set(mc.execute_command("KEYS", f"{key}:?")) == {f"{key}:a".encode(), f"{key}:b".encode()}
    assert set(mc.execute_command("KEYS", f"{key}:[ab]")) == {f"{key}:a".encode(), f"{key}:b".encode()}
    assert set(mc.execute_command("KEYS", f"{key}:[^a]")) == {f"{key}:b".encode()}
    assert mc.execute_command("KEYS", f"{key}:\\[x\\]") == [f"{key}:[x]".encode()]
    assert mc.execute_command("KEYS", f"{key}:nothing*") == []
    assert set(mc.execute_command("KEYS", "*")) >= {n.encode() for n in names}


def test_scan_match_and_count(mc: redis.Redis, key: str) -> None:
    names = {f"{key}:{i}".encode() for i in range(25)}
    make_keys(mc, [n.decode() for n in names])
    found = scan_all(mc, "MATCH", f"{key}:*", "COUNT", "7")
    assert sorted(found) == sorted(names)  # each exactly once
    cursor, batch = mc.execute_command("SCAN", "0", "COUNT", "5")
    assert len(batch) <= 5 and cursor != 0
    assert sorted(scan_all(mc, "MATCH", f"{key}:*", "TYPE", "string")) == sorted(names)
    assert [k for k in scan_all(mc, "TYPE", "hash") if k.startswith(key.encode())] == []


def test_scan_while_keys_are_created(mc: redis.Redis, key: str) -> None:
    before = {f"{key}:old:{i}".encode() for i in range(40)}
    make_keys(mc, [n.decode() for n in before])
    found: list[bytes] = []
    cursor = 0
    created = 0
    for _ in range(1000):
        cursor, keys = mc.execute_command("SCAN", cursor, "MATCH", f"{key}:*", "COUNT", "6")
        found += keys
        if cursor == 0:
            break
        for _ in range(3):  # new keys appear during the iteration
            mc.execute_command("INCR", f"{key}:new:{created}")
            created += 1
    else:
        raise AssertionError("SCAN did not finish")
    assert len(found) == len(set(found)), "a key was returned twice"
    assert before <= set(found), "a key that existed all along was missed"
    assert set(found) <= before | {f"{key}:new:{i}".encode() for i in range(created)}


def test_scan_with_a_redis_py_iterator(mc: redis.Redis, key: str) -> None:
    names = {f"{key}:{i}".encode() for i in range(12)}
    make_keys(mc, [n.decode() for n in names])
    assert set(mc.scan_iter(match=f"{key}:*", count=5)) == names


def test_scan_cursor_past_the_end(mc: redis.Redis) -> None:
    cursor, keys = mc.execute_command("SCAN", str(10**12))
    assert (cursor, keys) == (0, [])


@pytest.mark.parametrize("cursor", ["abc", "1.5", "0x1"])
def test_scan_invalid_cursor(mc: redis.Redis, cursor: str) -> None:
    assert outcome(mc, "SCAN", cursor) == ("error", "ResponseError", "invalid cursor")


def test_dbsize_matches_keys_and_info(mc: redis.Redis, key: str) -> None:
    make_keys(mc, [f"{key}:{i}" for i in range(3)])
    n = mc.dbsize()
    assert n == len(mc.execute_command("KEYS", "*")) == len(mc.execute_command("SEQ.LIST"))
    assert mc.info("keyspace")["db0"]["keys"] == n
