"""redis-cli against a real march process. The expected output of every invocation is what the
same redis-cli prints against a real redis-server (same keys, fresh servers)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from support import MarchServer, RedisServer

Pair = tuple[MarchServer, RedisServer]


@pytest.fixture(scope="module")
def redis_cli() -> str:
    path = shutil.which("redis-cli")
    if path is None:
        pytest.skip("redis-cli not installed (scripts/test installs it)")
    return path


def cli(redis_cli: str, port: int, *args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    proc = subprocess.run(
        [redis_cli, "-h", "127.0.0.1", "-p", str(port), *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    return proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")


def test_incr_prints_plain_integers(march_server: MarchServer, redis_cli: str) -> None:
    outputs = [cli(redis_cli, march_server.port, "INCR", "x") for _ in range(3)]
    assert outputs == [(0, "1\n", ""), (0, "2\n", ""), (0, "3\n", "")]


def test_no_raw_output(march_server: MarchServer, redis_cli: str) -> None:
    assert cli(redis_cli, march_server.port, "--no-raw", "INCR", "x") == (0, "(integer) 1\n", "")


INVOCATIONS = {
    "ping": ["PING"],
    "ping-no-raw": ["--no-raw", "PING"],
    "echo": ["ECHO", "hello world"],
    "incr": ["INCR", "cli:a"],
    "incrby-no-raw": ["--no-raw", "INCRBY", "cli:b", "41"],
    "get-missing": ["GET", "cli:none"],
    "get-missing-no-raw": ["--no-raw", "GET", "cli:none"],
    "mget-no-raw": ["--no-raw", "MGET", "cli:none", "cli:none2"],
    "exists": ["EXISTS", "cli:none"],
    "ttl-missing": ["--no-raw", "TTL", "cli:none"],
    "unknown": ["FOOBAR", "a"],
    "unknown-no-raw": ["--no-raw", "FOOBAR", "a"],
    "not-integer": ["INCRBY", "cli:c", "abc"],
    "not-integer-no-raw": ["--no-raw", "INCRBY", "cli:c", "abc"],
    "wrong-arity-no-raw": ["--no-raw", "GET"],
    "resp3-incr": ["-3", "INCR", "cli:d"],
    "resp3-get-missing-no-raw": ["-3", "--no-raw", "GET", "cli:none"],
    "repeat": ["-r", "5", "INCR", "cli:e"],
    "set-then-incr": ["SET", "cli:f", "99"],
}


@pytest.mark.parametrize("name", sorted(INVOCATIONS))
def test_same_output_as_against_redis(server_pair: Pair, redis_cli: str, name: str) -> None:
    march, redis = server_pair
    args = INVOCATIONS[name]
    want = cli(redis_cli, redis.port, *args)
    got = cli(redis_cli, march.port, *args)
    assert got == want, f"redis-cli {' '.join(args)}"


def test_commands_from_stdin(march_server: MarchServer, redis_cli: str) -> None:
    _code, out, err = cli(redis_cli, march_server.port, stdin=b"INCR s\nINCR s\nINCRBY s 3\nGET s\nDECR s\n")
    lines = out.splitlines()
    assert lines[:3] == ["1", "2", "5"], (out, err)
    assert int(lines[3]) >= 5
    assert lines[4].startswith("ERR"), lines


def test_mass_insert_with_pipe(march_server: MarchServer, redis_cli: str) -> None:
    n = 1000
    payload = b"".join(b"*2\r\n$4\r\nINCR\r\n$4\r\nmass\r\n" for _ in range(n))
    code, out, err = cli(redis_cli, march_server.port, "--pipe", stdin=payload)
    assert code == 0, (out, err)
    assert f"errors: 0, replies: {n}" in out, out
    assert cli(redis_cli, march_server.port, "INCR", "mass") == (0, f"{n + 1}\n", "")
