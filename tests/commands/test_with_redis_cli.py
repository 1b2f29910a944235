"""redis-cli against a real march process. The expected output of every invocation is what the
same redis-cli prints against a real redis-server (same keys, fresh servers)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

import pytest
from march_harness import MarchServer, RedisServer

pytestmark = pytest.mark.e2e

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


# --- operations commands from redis-cli (what an operator types) ---------------------------------

OPS_INVOCATIONS = {
    "slowlog-len-empty": ["SLOWLOG", "LEN"],
    "slowlog-reset": ["SLOWLOG", "RESET"],
    "slowlog-get-empty": ["SLOWLOG", "GET"],
    "slowlog-bad-count-no-raw": ["--no-raw", "SLOWLOG", "GET", "x"],
    "config-set-unknown-no-raw": ["--no-raw", "CONFIG", "SET", "no-such-option", "1"],
    "config-set-odd-no-raw": ["--no-raw", "CONFIG", "SET", "maxclients"],
    "config-rewrite-no-file-no-raw": ["--no-raw", "CONFIG", "REWRITE"],
}


@pytest.mark.parametrize("name", sorted(OPS_INVOCATIONS))
def test_ops_commands_print_what_redis_prints(server_pair: Pair, redis_cli: str, name: str) -> None:
    march, redis = server_pair
    args = OPS_INVOCATIONS[name]
    assert cli(redis_cli, march.port, *args) == cli(redis_cli, redis.port, *args), f"redis-cli {' '.join(args)}"


def test_slowlog_from_redis_cli(march_factory: Callable[..., MarchServer], redis_cli: str) -> None:
    """With a threshold of 0 every command is recorded; redis-cli prints the entries and their args."""
    server = march_factory()
    port = server.port
    assert cli(redis_cli, port, "CONFIG", "SET", "slowlog-log-slower-than", "0") == (0, "OK\n", "")
    assert cli(redis_cli, port, "INCR", "cli:slow")[0] == 0
    code, out, err = cli(redis_cli, port, "--no-raw", "SLOWLOG", "GET", "5")
    assert code == 0, err
    assert '"INCR"' in out and '"cli:slow"' in out, out
    _, out, _ = cli(redis_cli, port, "SLOWLOG", "LEN")
    assert int(out) >= 1
    # As in Redis, a command is judged against the threshold once it has run: turn it off, then reset.
    assert cli(redis_cli, port, "CONFIG", "SET", "slowlog-log-slower-than", "-1") == (0, "OK\n", "")
    assert cli(redis_cli, port, "SLOWLOG", "RESET") == (0, "OK\n", "")
    assert cli(redis_cli, port, "INCR", "cli:slow")[0] == 0
    assert cli(redis_cli, port, "SLOWLOG", "LEN") == (0, "0\n", "")


def test_config_set_from_redis_cli(march_server: MarchServer, redis_cli: str) -> None:
    """A live setting changes and reads back; a setting that needs a restart is refused with why."""
    port = march_server.port
    assert cli(redis_cli, port, "CONFIG", "SET", "max-batch", "5000", "min-batch", "10") == (0, "OK\n", "")
    assert cli(redis_cli, port, "CONFIG", "GET", "max-batch") == (0, "max-batch\n5000\n", "")
    code, out, _ = cli(redis_cli, port, "CONFIG", "SET", "port", "1")
    assert code == 0 and out.startswith("ERR CONFIG SET failed") and "restart" in out, out
    assert cli(redis_cli, port, "CONFIG", "GET", "port") == (0, f"port\n{port}\n", "")


def test_seq_alter_from_redis_cli(march_server: MarchServer, redis_cli: str) -> None:
    """SEQ.ALTER changes one sequence's bounds (SEQ.INFO shows them), and IDs go on from where they were."""
    port = march_server.port
    assert cli(redis_cli, port, "INCR", "cli:alter") == (0, "1\n", "")
    assert cli(redis_cli, port, "SEQ.ALTER", "cli:alter", "MINBATCH", "7", "MAXBATCH", "70") == (0, "OK\n", "")
    _, out, _ = cli(redis_cli, port, "SEQ.INFO", "cli:alter")
    fields = out.splitlines()
    info = dict(zip(fields[::2], fields[1::2], strict=True))
    assert (info["min_batch"], info["max_batch"]) == ("7", "70"), info
    assert cli(redis_cli, port, "INCR", "cli:alter") == (0, "2\n", "")
    _, out, _ = cli(redis_cli, port, "SEQ.ALTER", "cli:alter", "MINBATCH", "9", "MAXBATCH", "3")
    assert out.startswith("ERR"), out
    _, out, _ = cli(redis_cli, port, "SEQ.ALTER", "cli:alter", "MAXLEAD", "500")
    assert out.startswith("WRONGTYPE"), out
