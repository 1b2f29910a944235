"""SLOWLOG, MONITOR and LATENCY against a real march process, from redis-py, redis-cli and a raw
RESP client: Redis' reply shapes, truncation, redaction of passwords, and MONITOR's line format as
redis-cli and redis-py read it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from queue import Empty, Queue

import pytest
import redis
from march_harness import MarchServer, RedisServer, RespConn, RespError

pytestmark = pytest.mark.e2e

PASSWORD = "ops-Secret-9917"


@pytest.fixture
def slow_all(march_factory: Callable[..., MarchServer]) -> MarchServer:
    """A march whose SLOWLOG keeps every request (threshold 0), at most 5 of them."""
    return march_factory(extra_args=["--slowlog-log-slower-than", "0", "--slowlog-max-len", "5"])


def entries(conn: RespConn) -> list[list[object]]:
    got = conn.call("SLOWLOG", "GET", "-1")
    assert isinstance(got, list), got
    return got


def test_slowlog_entries_have_redis_shape(slow_all: MarchServer) -> None:
    with RespConn(slow_all.port) as c:
        assert c.call("CLIENT", "SETNAME", "ops-test") == "OK"
        assert c.call("SLOWLOG", "RESET") == "OK"
        before = int(time.time())
        assert c.call("INCR", "ops:a") == 1
        (newest, *_) = entries(c)
    # id, unix time, µs, arguments, address, name; newest first (the RESET is not in it: it ran before)
    ident, when, micros, args, addr, name = newest
    assert isinstance(ident, int) and isinstance(micros, int) and micros >= 0
    assert before - 1 <= int(when) <= time.time() + 1  # type: ignore[call-overload]
    assert args == [b"INCR", b"ops:a"]
    assert re.fullmatch(rb"127\.0\.0\.1:\d+", addr)  # type: ignore[arg-type]
    assert name == b"ops-test"


def test_slowlog_truncates_like_redis_and_keeps_max_len(slow_all: MarchServer) -> None:
    with RespConn(slow_all.port) as c:
        c.call("ECHO", "x" * 200)
        c.call("COMMAND", "INFO", *(["get"] * 40))
        got = entries(c)
        echo = next(e for e in got if e[3][0] == b"ECHO")  # type: ignore[index]
        info = next(e for e in got if e[3][0] == b"COMMAND")  # type: ignore[index]
        assert echo[3][1] == b"x" * 128 + b"... (72 more bytes)"  # type: ignore[index]
        assert len(info[3]) == 32  # type: ignore[arg-type]
        assert info[3][-1] == b"... (11 more arguments)"  # type: ignore[index]  (42 arguments: 31 shown + 1)
        for _ in range(10):
            c.call("PING")
        assert c.call("SLOWLOG", "LEN") == 5  # slowlog_max_len
        assert len(entries(c)) == 5
        assert len(c.call("SLOWLOG", "GET")) == 5  # default count: 10, fewer kept
        assert len(c.call("SLOWLOG", "GET", "2")) == 2
        ids = [e[0] for e in entries(c)]
        assert ids == sorted(ids, reverse=True)  # newest first
        assert c.call("SLOWLOG", "RESET") == "OK"
        assert c.call("SLOWLOG", "LEN") in (0, 1)  # (the RESET itself may be logged after it ran)


def test_slowlog_off_and_unknown_commands_are_not_logged(march_factory: Callable[..., MarchServer]) -> None:
    off = march_factory(extra_args=["--slowlog-log-slower-than", "-1"])
    with RespConn(off.port) as c:
        c.call("INCR", "ops:off")
        c.call("PING")
        assert c.call("SLOWLOG", "LEN") == 0
    every = march_factory(extra_args=["--slowlog-log-slower-than", "0"])
    with RespConn(every.port) as c:
        c.call("SLOWLOG", "RESET")
        assert isinstance(c.call("NOSUCHCOMMAND", "x"), RespError)
        assert all(e[3][0] != b"NOSUCHCOMMAND" for e in entries(c))  # type: ignore[index]


def test_slowlog_and_monitor_never_show_a_password(march_factory: Callable[..., MarchServer]) -> None:
    server = march_factory(requirepass=PASSWORD, extra_args=["--slowlog-log-slower-than", "0"])
    with RespConn(server.port) as watcher, RespConn(server.port) as c:
        assert watcher.call("AUTH", PASSWORD) == "OK"
        assert watcher.call("MONITOR") == "OK"
        assert isinstance(c.call("AUTH", "not-it"), RespError)
        assert c.call("AUTH", PASSWORD) == "OK"
        assert c.call("AUTH", "default", PASSWORD) == "OK"
        assert isinstance(c.call("HELLO", "2", "AUTH", "default", PASSWORD), list)
        assert c.call("ACL", "SETUSER", "carol", "on", ">carol-Pass-55", "~*", "+@all") == "OK"
        assert c.call("INCR", "ops:after-auth") == 1
        lines: list[str] = []
        while not any("ops:after-auth" in ln for ln in lines):  # (the socket's timeout bounds each read)
            lines.append(watcher.read_reply())
        log = c.call("SLOWLOG", "GET", "-1")
    seen = "\n".join(lines) + repr(log)
    assert PASSWORD not in seen and "carol-Pass-55" not in seen and "not-it" not in seen
    assert '"AUTH" "(redacted)"' in seen
    assert '"AUTH" "(redacted)" "(redacted)"' in seen
    assert '"HELLO" "2" "AUTH" "(redacted)" "(redacted)"' in seen
    assert "SETUSER" not in "\n".join(lines)  # ACL is an admin command: MONITOR never shows it (Redis neither)
    logged = [e[3] for e in log]
    assert [b"AUTH", b"(redacted)"] in logged
    assert [
        b"ACL",
        b"SETUSER",
        *[b"(redacted)"] * 5,
    ] in logged  # every argument, as Redis (tests/stats/test_redaction.py)


MONITOR_LINE = re.compile(r'^\+?\d{10}\.\d{6} \[0 127\.0\.0\.1:\d+\] "INCR" "ops:cli"$')


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli not installed")
def test_redis_cli_monitor_sees_other_clients(march_server: MarchServer) -> None:
    proc = subprocess.Popen(
        ["redis-cli", "-p", str(march_server.port), "monitor"],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    lines: Queue[str] = Queue()

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.put(raw.decode(errors="replace").rstrip("\r\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert _next_line(lines) == "OK"
        with RespConn(march_server.port) as c:
            c.call("CONFIG", "GET", "port")  # an admin command: not shown, as in Redis
            assert c.call("INCR", "ops:cli") == 1
        line = _next_line(lines)
        assert MONITOR_LINE.match(line), line
    finally:
        proc.kill()
        proc.wait(10)
        reader.join(10)
        assert proc.stdout is not None
        proc.stdout.close()


def _next_line(lines: Queue[str], timeout: float = 10.0) -> str:
    try:
        return lines.get(timeout=timeout)
    except Empty:
        raise AssertionError(f"no MONITOR line within {timeout}s") from None


def monitored(port: int) -> list[dict[str, object]]:
    """What redis-py's MONITOR reader makes of another client's INCR and ECHO on ``port``."""
    r = redis.Redis(port=port, socket_timeout=10)
    other = redis.Redis(port=port, socket_timeout=10, single_connection_client=True)
    try:
        other.ping()  # connected (its handshake is shown before the monitor starts)
        with r.monitor() as m:
            other.execute_command("INCR", "ops:py")
            other.execute_command("ECHO", 'say "hi"\n\x01')
            return [m.next_command() for _ in range(2)]
    finally:
        r.close()
        other.close()


def test_redis_py_monitor_reads_what_it_reads_from_redis(march_server: MarchServer, redis_server: RedisServer) -> None:
    got, expected = monitored(march_server.port), monitored(redis_server.port)
    assert [g["command"] for g in got] == [e["command"] for e in expected]
    assert got[0]["command"] == "INCR ops:py"
    assert [(g["db"], g["client_type"]) for g in got] == [(0, "tcp")] * 2


def test_latency_events_after_a_store_write(march_server: MarchServer) -> None:
    with RespConn(march_server.port) as c:
        assert c.call("INCR", "ops:lat") == 1  # a new key: created in the store first, the request waits
        latest = {e[0]: e for e in c.call("LATENCY", "LATEST")}
        assert {b"store-write", b"command-wait"} <= set(latest), latest
        _, at, ms, worst = latest[b"store-write"]
        assert abs(int(at) - time.time()) < 60 and 0 <= ms <= worst  # type: ignore[call-overload, operator]
        history = c.call("LATENCY", "HISTORY", "store-write")
        assert history and all(len(s) == 2 for s in history)
        assert c.call("LATENCY", "HISTORY", "no-such-event") == []
        doctor = c.call("LATENCY", "DOCTOR")
        assert b"store-write" in doctor
        hist = c.call("LATENCY", "HISTOGRAM", "incr")
        assert hist[0] == b"incr" and hist[1][0] == b"calls" and hist[1][1] >= 1, hist
        assert c.call("LATENCY", "RESET", "store-write") == 1
        assert c.call("LATENCY", "RESET") >= 1
        assert c.call("LATENCY", "LATEST") == []
        assert b"No latency event" in c.call("LATENCY", "DOCTOR")


def test_latency_histogram_from_redis_py(march_server: MarchServer) -> None:
    r = redis.Redis(port=march_server.port, socket_timeout=10, protocol=3)
    try:
        for _ in range(3):
            r.execute_command("INCR", "ops:h")
        got = r.execute_command("LATENCY", "HISTOGRAM", "incr", "nosuch")
    finally:
        r.close()
    assert set(got) == {b"incr"}
    assert got[b"incr"][b"calls"] == 3
    buckets = got[b"incr"][b"histogram_usec"]
    assert list(buckets.values()) == sorted(buckets.values()) and max(buckets.values()) == 3


@pytest.fixture
def raw(march_server: MarchServer) -> Iterator[RespConn]:
    with RespConn(march_server.port) as c:
        yield c


def test_monitor_inside_multi_is_refused_at_exec(raw: RespConn) -> None:
    """As Redis 7.0: queued, then refused by EXEC (one reply per command); the connection stays plain."""
    assert raw.call("MULTI") == "OK"
    assert raw.call("MONITOR") == "QUEUED"
    assert raw.call("EXEC") == [RespError("ERR MONITOR isn't allowed for DENY BLOCKING client")]
    assert raw.call("INCR", "ops:after-multi-monitor") == 1  # not a monitor: it may use the keyspace


def test_monitor_shows_every_request_of_a_pipelined_run(march_server: MarchServer) -> None:
    """A run of identical pipelined INCRs is answered from one call; MONITOR still shows each one."""
    with RespConn(march_server.port) as watcher, RespConn(march_server.port) as c:
        assert watcher.call("MONITOR") == "OK"
        assert c.call("INCR", "ops:run") == 1  # the sequence exists: the run below is answered at once
        c.send(b"*2\r\n$4\r\nINCR\r\n$7\r\nops:run\r\n" * 5)
        assert [c.read_reply() for _ in range(5)] == [2, 3, 4, 5, 6]
        assert c.call("ECHO", "ops:run:done") == b"ops:run:done"
        lines: list[str] = []
        while not lines or "ops:run:done" not in lines[-1]:  # (the socket's timeout bounds each read)
            lines.append(watcher.read_reply())
    assert sum('"INCR" "ops:run"' in ln for ln in lines) == 6, lines
