"""WORKER.ACQUIRE / RENEW / RELEASE / LIST from redis-py against a real server process.

Pinned: 1024 distinct ids per namespace then an error naming it; namespaces are independent and
never show in KEYS/DBSIZE; the reply shapes of the protocol (``march.keyspace.worker_ids``); a wrong token
fails RENEW and RELEASE; a released id comes back at once with its floor; an expired id comes
back only after its TTL plus the margin, carrying the previous holder's UPTO; floors never go
down; floors and holdings survive a restart. Expiry tests run their own server with a 0.5 s margin
and wait on a condition with a deadline (never a bare sleep).

Clocks (``DEBUG CLOCK-OFFSET`` moves the server's wall clock, as the machine's clock being set
would): a live id stays held when the clock jumps an hour or two days ahead (the issue's +41 s
gave a raw client a second live holder of id 0), an expired id is free again after TTL + margin
when the clock jumped back an hour, and after a restart every record stays live for TTL + margin
from the restart, whatever the clock says. Limits: ``worker_max_namespaces`` stops a client
creating namespaces in a loop with a clear error, and the namespace's slot comes back once the
sweeper deleted its records; ``worker_max_holders`` caps one namespace; the floor of a deleted
record is still the next holder's floor (the retired floor), across a restart.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from march_harness import MarchServer, serving, wait_until
from march_harness.compare import client

pytestmark = pytest.mark.e2e


def acquire(c: redis.Redis, ns: str, *extra: object) -> tuple[int, bytes, int, int]:
    reply = c.execute_command("WORKER.ACQUIRE", ns, *extra)
    assert isinstance(reply, list) and len(reply) == 4, reply
    worker_id, token, ttl, floor = reply
    assert isinstance(worker_id, int) and isinstance(token, bytes) and isinstance(ttl, int) and isinstance(floor, int)
    return worker_id, token, ttl, floor


def test_acquire_shape_and_distinct_ids(mc: redis.Redis, key: str) -> None:
    held = [acquire(mc, key) for _ in range(100)]
    assert [h[0] for h in held] == list(range(100))  # the lowest free id each time
    assert len({h[1] for h in held}) == 100  # every holding has its own token
    assert all(h[2] == 30 and h[3] == 0 for h in held)  # worker_ttl default, never held before
    # another namespace starts at 0 again; namespaces are not sequences
    assert acquire(mc, key + ":other")[0] == 0
    assert key.encode() not in mc.keys("*")
    with pytest.raises(redis.ResponseError, match="no such sequence"):
        mc.execute_command("SEQ.INFO", key)


def test_1025th_acquire_fails(mc: redis.Redis, key: str) -> None:
    pipe = mc.pipeline(transaction=False)
    for _ in range(1024):
        pipe.execute_command("WORKER.ACQUIRE", key, "TTL", 600)
    ids = [r[0] for r in pipe.execute()]
    assert sorted(ids) == list(range(1024))
    with pytest.raises(redis.ResponseError, match=f"no free worker id in namespace '{key}'"):
        mc.execute_command("WORKER.ACQUIRE", key)


def test_renew_and_release(mc: redis.Redis, key: str) -> None:
    worker_id, token, ttl, _ = acquire(mc, key, "TTL", 5)
    assert ttl == 5
    assert mc.execute_command("WORKER.RENEW", key, worker_id, token) == 5
    assert mc.execute_command("WORKER.RENEW", key, worker_id, token, "UPTO", 1_000) == 5
    listed = mc.execute_command("WORKER.LIST", key)
    assert len(listed) == 1 and listed[0][0] == worker_id and listed[0][2] == 1_000 and listed[0][3] == b"live"
    assert listed[0][1] > time.time() * 1000  # expires in the future (server Unix ms)
    for bad in (b"nope", b"", token + b"x"):
        with pytest.raises(redis.ResponseError, match="not held with this token"):
            mc.execute_command("WORKER.RENEW", key, worker_id, bad)
        with pytest.raises(redis.ResponseError, match="not held with this token"):
            mc.execute_command("WORKER.RELEASE", key, worker_id, bad)
    with pytest.raises(redis.ResponseError, match="not held with this token"):
        mc.execute_command("WORKER.RENEW", key, worker_id + 1, token)  # never held
    # floors never decrease: a lower UPTO keeps the higher floor
    assert mc.execute_command("WORKER.RELEASE", key, worker_id, token, "UPTO", 500) == b"OK"
    assert mc.execute_command("WORKER.LIST", key) == []
    with pytest.raises(redis.ResponseError, match="not held with this token"):
        mc.execute_command("WORKER.RENEW", key, worker_id, token)  # released: the holder must stop
    again, token2, _, floor = acquire(mc, key)
    assert (again, floor) == (worker_id, 1_000) and token2 != token  # free at once, floor kept


def test_argument_errors(mc: redis.Redis, key: str) -> None:
    cases = [
        (("WORKER.ACQUIRE", key, "TTL", 0), "TTL must be between 1 and 86400"),
        (("WORKER.ACQUIRE", key, "TTL", 86_401), "TTL must be between 1 and 86400"),
        (("WORKER.ACQUIRE", key, "TTL"), "syntax error"),
        (("WORKER.ACQUIRE", key, "FOO", 1), "syntax error"),
        (("WORKER.ACQUIRE", ""), "namespace must be 1 to"),
        (("WORKER.ACQUIRE", "x" * 1025), "namespace must be 1 to"),
        (("WORKER.RENEW", key, 1024, "t"), "worker id must be an integer between 0 and 1023"),
        (("WORKER.RENEW", key, -1, "t"), "worker id must be an integer between 0 and 1023"),
        (("WORKER.RENEW", key, "x", "t"), "worker id must be an integer between 0 and 1023"),
        (("WORKER.RENEW", key, 0, "t", "UPTO", -1), "UPTO must be a non-negative integer"),
        (("WORKER.RENEW", key, 0, "t", "UPTO"), "syntax error"),
        (("WORKER.RELEASE", key, 0, "t", "AFTER", 1), "syntax error"),
        (("WORKER.RENEW", key, 0), "wrong number of arguments"),
    ]
    for args, message in cases:
        with pytest.raises(redis.ResponseError, match=message):
            mc.execute_command(*args)


@pytest.fixture
def short(tmp_path: Path) -> Iterator[MarchServer]:
    """A server whose expired ids rest only 0.5 s."""
    server = MarchServer.in_dir(tmp_path, extra_args=["--worker-margin", "0.5"])
    with serving(server, during="the worker expiry test", clean_exit=True):
        yield server


def test_expired_id_recycled_after_margin_with_floor(short: MarchServer) -> None:
    with client(short.port) as c:
        worker_id, token, _, _ = acquire(c, "app", "TTL", 1)
        assert c.execute_command("WORKER.RENEW", "app", worker_id, token, "UPTO", 123_456) == 1
        renewed_at = time.monotonic()
        # while it is live (and resting) nobody else gets it
        other = acquire(c, "app", "TTL", 60)
        assert other[0] != worker_id
        # recycled only after TTL + margin: the next ACQUIRE gets it back with the floor
        got = wait_until(lambda: acquire(c, "app", "TTL", 60)[0] == worker_id or None, timeout=10, interval=0.05)
        assert got
        assert time.monotonic() - renewed_at >= 1.5 - 0.1  # 1 s TTL + 0.5 s margin (server clock vs ours)
        listed = {row[0]: row for row in c.execute_command("WORKER.LIST", "app")}
        assert listed[worker_id][2] == 123_456
        with pytest.raises(redis.ResponseError, match="not held with this token"):
            c.execute_command("WORKER.RENEW", "app", worker_id, token)  # re-acquired: the old holder stops


def test_expired_but_not_reacquired_renews(short: MarchServer) -> None:
    with client(short.port) as c:
        worker_id, token, _, _ = acquire(c, "app2", "TTL", 1)
        wait_until(lambda: c.execute_command("WORKER.LIST", "app2")[0][3] == b"expired", timeout=10, interval=0.05)
        assert c.execute_command("WORKER.RENEW", "app2", worker_id, token) == 1
        assert c.execute_command("WORKER.LIST", "app2")[0][3] == b"live"


def test_holdings_and_floors_survive_restart(tmp_path: Path) -> None:
    server = MarchServer.in_dir(tmp_path)
    with serving(server, during="the restart test", clean_exit=True):
        with client(server.port) as c:
            a = acquire(c, "svc", "TTL", 600)
            b = acquire(c, "svc", "TTL", 600)
            assert c.execute_command("WORKER.RELEASE", "svc", a[0], a[1], "UPTO", 777) == b"OK"
        server.restart()
        with client(server.port) as c:
            assert c.execute_command("WORKER.RENEW", "svc", b[0], b[1], "UPTO", 888) == 600  # still held
            again = acquire(c, "svc")
            assert (again[0], again[3]) == (a[0], 777)  # the released id, its floor kept
            assert acquire(c, "svc")[0] == 2  # b's id is still live


DEBUG = ["--enable-debug-command", "yes"]
HOUR_MS = 3_600_000


@pytest.fixture
def jumpy(tmp_path: Path) -> Iterator[MarchServer]:
    """A server whose clock a test may move, with a 0.5 s margin."""
    server = MarchServer.in_dir(tmp_path, extra_args=[*DEBUG, "--worker-margin", "0.5"])
    with serving(server, during="the worker clock test", clean_exit=True):
        yield server


def test_a_clock_jumping_ahead_frees_no_live_id(jumpy: MarchServer) -> None:
    with client(jumpy.port) as c:
        worker_id, token, _, _ = acquire(c, "jump")  # worker_ttl, 30 s; a raw client: no UPTO, no floor of its own
        for offset in (41_000, HOUR_MS, 48 * HOUR_MS):
            assert c.execute_command("DEBUG", "CLOCK-OFFSET", offset) == b"OK"
            other = acquire(c, "jump", "TTL", 60)
            assert other[0] != worker_id, f"id {worker_id} handed out again while live (clock +{offset} ms)"
        listed = {row[0]: row for row in c.execute_command("WORKER.LIST", "jump")}
        assert listed[worker_id][3] == b"live"
        assert listed[worker_id][1] > (time.time() + 47 * 3600) * 1000  # shown on the server's (moved) clock
        assert c.execute_command("WORKER.RENEW", "jump", worker_id, token) == 30  # its holder carries on


def test_a_clock_jumping_back_does_not_keep_an_expired_id(jumpy: MarchServer) -> None:
    with client(jumpy.port) as c:
        worker_id, _, _, _ = acquire(c, "back", "TTL", 1)
        acquired = time.monotonic()
        assert c.execute_command("DEBUG", "CLOCK-OFFSET", -HOUR_MS) == b"OK"
        again = wait_until(
            lambda: (got := acquire(c, "back", "TTL", 60))[0] == worker_id and got, timeout=10, interval=0.05
        )
        assert again
        assert time.monotonic() - acquired >= 1.5 - 0.1  # not before TTL + margin all the same


def test_after_a_restart_every_record_is_live_for_ttl_and_margin(tmp_path: Path) -> None:
    server = MarchServer.in_dir(tmp_path, extra_args=[*DEBUG, "--worker-margin", "0.5"])
    with serving(server, during="the worker restart test", clean_exit=True):
        with client(server.port) as c:
            worker_id, token, _, _ = acquire(c, "boot", "TTL", 2)
        server.restart()
        started = time.monotonic()
        with client(server.port) as c:
            assert c.execute_command("DEBUG", "CLOCK-OFFSET", HOUR_MS) == b"OK"  # the new process' clock is off
            assert acquire(c, "boot", "TTL", 60)[0] != worker_id  # still live: its holder may be issuing
            got = wait_until(lambda: acquire(c, "boot", "TTL", 60)[0] == worker_id, timeout=10, interval=0.05)
            assert got
            assert time.monotonic() - started >= 2.5 - 0.1  # TTL + margin from the restart
            with pytest.raises(redis.ResponseError, match="not held with this token"):
                c.execute_command("WORKER.RENEW", "boot", worker_id, token)


@pytest.fixture
def small(tmp_path: Path) -> Iterator[MarchServer]:
    """A server with room for 3 worker namespaces of 5 ids each, a 0.2 s margin."""
    args = ["--worker-margin", "0.2", "--worker-max-namespaces", "3", "--worker-max-holders", "5"]
    server = MarchServer.in_dir(tmp_path, extra_args=args)
    with serving(server, during="the worker limits test", clean_exit=True):
        yield server


def test_namespaces_and_holders_are_limited(small: MarchServer) -> None:
    with client(small.port) as c:
        for n in range(3):
            acquire(c, f"loop:{n}", "TTL", 1)
        with pytest.raises(redis.ResponseError, match=r"max number of worker namespaces reached: 3 \(worker_max_"):
            c.execute_command("WORKER.ACQUIRE", "loop:3")
        held = [acquire(c, "loop:0", "TTL", 600) for _ in range(4)]
        assert sorted(h[0] for h in held) == [1, 2, 3, 4]
        with pytest.raises(redis.ResponseError, match="no free worker id in namespace 'loop:0': 5 are held"):
            c.execute_command("WORKER.ACQUIRE", "loop:0")
        # loop:1 and loop:2 expire; once the sweeper deleted their records (their floors were 0, long
        # past), a new namespace fits again. loop:0 keeps its live holders.
        got = wait_until(lambda: _acquired(c, "loop:3"), timeout=90, interval=0.2)
        assert got[0] == 0
        assert c.execute_command("WORKER.LIST", "loop:1") == []


def _acquired(c: redis.Redis, ns: str) -> list[object] | None:
    try:
        reply = c.execute_command("WORKER.ACQUIRE", ns, "TTL", 600)
    except redis.ResponseError as exc:
        assert "max number of worker namespaces" in str(exc)
        return None
    assert isinstance(reply, list)
    return reply


def test_a_deleted_records_floor_is_the_next_holders_floor(tmp_path: Path) -> None:
    server = MarchServer.in_dir(tmp_path, extra_args=["--worker-max-namespaces", "1"])
    with serving(server, during="the retired floor test", clean_exit=True):
        with client(server.port) as c:
            worker_id, token, _, _ = acquire(c, "old")
            floor = int(time.time() * 1000) - 120_000  # two minutes ago: old enough to go at once
            assert c.execute_command("WORKER.RELEASE", "old", worker_id, token, "UPTO", floor) == b"OK"
            # the only namespace slot comes back once the sweeper deleted the released record
            got = wait_until(lambda: _acquired(c, "new"), timeout=30, interval=0.1)
            assert got is not None and got[3] == floor  # a new namespace, and still above the old floor
            assert c.execute_command("WORKER.RELEASE", "new", got[0], got[1]) == b"OK"
        server.restart()  # the retired floor is in the store, not in the process
        with client(server.port) as c:
            third = wait_until(lambda: _acquired(c, "third"), timeout=30, interval=0.1)
            assert third is not None and third[3] == floor
