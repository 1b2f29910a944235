"""The lead cap of timestamp sequences, against a real server flooded by real clients.

Three clients send INCRBY to one snowflake key as fast as they can for a bounded time (3 s with
the server default cap of 1000 ms, 1 s after SEQ.ALTER ... MAXLEAD 100). Every ID's decoded time
must be within the cap of the real time at which its reply arrived (plus a small tolerance for
the two processes reading the clock at different moments). The rate is printed, never asserted.
Without the cap, such a flood carried IDs minutes into the future.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import redis
from march_harness import MarchServer, RespConn, RespError

from march import errors
from march.generators.bits import PRESETS

pytestmark = pytest.mark.e2e

Factory = Callable[..., MarchServer]
SNOWFLAKE = PRESETS["snowflake"]
TOLERANCE_MS = 50  # the server reads its clock a little before the client reads its own


def flood(port: int, key: str, n: int, seconds: float, clients: int = 3) -> tuple[list[tuple[int, float]], int]:
    """(id, client's Unix ms at the reply) for every INCRBY answered, and how many got TRYAGAIN."""
    got: list[tuple[int, float]] = []
    retries = [0]
    failures: list[BaseException] = []
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def run() -> None:
        try:
            mine: list[tuple[int, float]] = []
            with RespConn(port, timeout=10) as conn:
                while time.monotonic() < end:
                    value = conn.call("INCRBY", key, n)
                    at = time.time() * 1000
                    if isinstance(value, RespError):
                        assert value.prefix == "TRYAGAIN", value
                        with lock:
                            retries[0] += 1
                        continue
                    mine.append((value, at))
            with lock:
                got.extend(mine)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 30)
    assert not any(t.is_alive() for t in threads), "a flooding client did not finish"
    assert not failures, failures
    return got, retries[0]


def check_within(got: list[tuple[int, float]], cap_ms: int) -> float:
    """Every ID's time within ``cap_ms`` (+ tolerance) of the reply's real time; the largest lead seen."""
    worst = float("-inf")
    for id_, at in got:
        time_ms = SNOWFLAKE.ms_of(SNOWFLAKE.decode(id_)[0])
        lead = time_ms - at
        worst = max(worst, lead)
        assert lead <= cap_ms + TOLERANCE_MS, f"ID {id_} carries {time_ms}, {lead:.0f} ms ahead of its reply"
    ids = sorted(i for i, _ in got)
    assert len(set(ids)) == len(ids), "duplicate IDs"
    return worst


def test_a_flooded_key_stays_within_the_default_cap(march_server: MarchServer) -> None:
    with redis.Redis(port=march_server.port, protocol=3) as c:
        assert c.execute_command("SEQ.CREATE", "flood", "TIMESTAMP") == b"OK"
        assert c.execute_command("SEQ.INFO", "flood")[b"max_lead_ms"] == 1000
    seconds = 3.0
    got, retries = flood(march_server.port, "flood", 20_000, seconds)
    assert got
    worst = check_within(got, 1000)
    with redis.Redis(port=march_server.port, protocol=3) as c:
        info = c.execute_command("SEQ.INFO", "flood")
    rate = len(got) * 20_000 / seconds
    print(
        f"lead cap 1000 ms: {rate / 1e6:.2f} M IDs/s over {seconds} s from 3 clients, largest lead {worst:.0f} ms, "
        f"{retries} TRYAGAIN, {info[b'lead_cap_waits']} waits at the cap, {info[b'carries']} carries"
    )


def test_alter_maxlead_on_a_live_key(march_server: MarchServer) -> None:
    with redis.Redis(port=march_server.port, protocol=3) as c:
        c.execute_command("SEQ.CREATE", "alt", "TIMESTAMP", "MAXLEAD", "60000")
        assert c.execute_command("SEQ.INFO", "alt")[b"max_lead_ms"] == 60000
        c.execute_command("INCR", "alt")  # live generator
        assert c.execute_command("SEQ.ALTER", "alt", "MAXLEAD", "100") == b"OK"
        assert c.execute_command("SEQ.INFO", "alt")[b"max_lead_ms"] == 100
        # (100 + 1) ms of 4096 slots is the most one request can ever get under this cap
        try:
            c.execute_command("INCRBY", "alt", 500_000)
            raise AssertionError("INCRBY past the cap's capacity was accepted")
        except redis.ResponseError as exc:
            assert str(exc) == errors.LEAD_CAP_TOO_LARGE.format(500_000, "alt", 100, 101 * 4096)[4:]
    got, retries = flood(march_server.port, "alt", 20_000, 1.0)
    assert got, "every INCRBY got TRYAGAIN"
    worst = check_within(got, 100)
    m = len(got) * 20_000 / 1e6
    print(f"lead cap 100 ms after SEQ.ALTER: {m:.1f} M IDs in 1 s, largest lead {worst:.0f} ms, {retries} TRYAGAIN")
    march_server.restart()  # the setting is durable
    with redis.Redis(port=march_server.port, protocol=3) as c:
        assert c.execute_command("SEQ.INFO", "alt")[b"max_lead_ms"] == 100
