"""CONFIG SET, CONFIG REWRITE and CONFIG RESETSTAT on a real march process, and the INFO that
``redis-cli --stat`` reads.

CONFIG SET is all or nothing, changes only live options, and never costs a guarantee: IDs handed out
after lowering the batch bounds (and after a restart) still only go up.
"""

from __future__ import annotations

import os
import pty
import select
import shutil
import socket
import subprocess
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from march_harness import MarchServer, wait_until

pytestmark = pytest.mark.e2e

REPO_TOML = Path(__file__).resolve().parents[2] / "config" / "march.toml"

Factory = Callable[..., MarchServer]


@contextmanager
def client(port: int, password: str | None = None) -> Iterator[redis.Redis]:
    r = redis.Redis(
        port=port, password=password, single_connection_client=True, decode_responses=True, socket_timeout=10
    )
    try:
        yield r
    finally:
        r.close()


def error_of(r: redis.Redis, *args: str) -> str:
    with pytest.raises(redis.ResponseError) as info:
        r.execute_command(*args)
    return str(info.value)


def test_set_rewrite_and_restart(march_factory: Factory, tmp_path: Path) -> None:
    file = tmp_path / "march.toml"
    shutil.copy(REPO_TOML, file)
    server = march_factory(extra_args=["--config", str(file)])
    with client(server.port) as r:
        assert r.execute_command("CONFIG", "SET", "max-batch", "5000") == "OK"
        assert r.config_get("max-batch") == {"max-batch": "5000"}
        assert r.execute_command("CONFIG", "REWRITE") == "OK"
    text = file.read_text()
    data = tomllib.loads(text)
    assert data["sequences"]["max_batch"] == 5000
    want = "# largest range of IDs persisted at a time\n# range: 1 .. 1000000000\nmax_batch = 5000\n"
    assert want in text  # comments kept
    assert text.replace("max_batch = 5000", "max_batch = 1000000") == REPO_TOML.read_text()
    assert data["server"]["port"] == 7379  # the flags it was started with are not written
    server.restart()
    with client(server.port) as r:
        assert r.config_get("max-batch") == {"max-batch": "5000"}
        assert r.info("server")["config_file"] == str(file)


def test_set_is_all_or_nothing(march_server: MarchServer) -> None:
    with client(march_server.port) as r:
        message = error_of(r, "CONFIG", "SET", "min-batch", "5", "bind", "0.0.0.0")
        assert message.startswith(
            "CONFIG SET failed (possibly related to argument 'bind') - can't set immutable config"
        )
        assert "restart" in message
        message = error_of(r, "CONFIG", "SET", "min-batch", "50", "max-batch", "20")
        assert "min_batch <= max_batch" in message
        message = error_of(r, "CONFIG", "SET", "max-batch", "many")
        assert message == (  # Redis' text
            "CONFIG SET failed (possibly related to argument 'max-batch') - argument couldn't be parsed into an integer"
        )
        assert r.config_get("*-batch") == {"min-batch": "1000", "max-batch": "1000000"}  # nothing applied
        assert r.execute_command("CONFIG", "SET", "MIN_BATCH", "50", "max-batch", "60") == "OK"  # either spelling
        assert r.config_get("*-batch") == {"min-batch": "50", "max-batch": "60"}


def test_lower_batches_keep_ids_increasing_across_a_restart(march_server: MarchServer) -> None:
    with client(march_server.port) as r:
        first = [r.incr("live:seq") for _ in range(3)]
        r.execute_command("SEQ.CREATE", "live:own", "MINBATCH", "7", "MAXBATCH", "9")
        r.incr("live:own")
        assert r.execute_command("CONFIG", "SET", "min-batch", "10", "max-batch", "20", "watermark", "0.25") == "OK"
        info = r.execute_command("SEQ.INFO", "live:seq")
        assert (int(info["min_batch"]), int(info["max_batch"])) == (10, 20) and int(info["batch"]) <= 20
        own = r.execute_command("SEQ.INFO", "live:own")
        assert (int(own["min_batch"]), int(own["max_batch"])) == (7, 9)  # its own bounds stay
        pipe = r.pipeline(transaction=False)
        for _ in range(200):  # many small extensions under the new bounds
            pipe.incr("live:seq")
        more = pipe.execute()
    assert first + more == list(range(first[0], first[0] + 203))
    march_server.restart()
    with client(march_server.port) as r:
        assert r.incr("live:seq") > more[-1]
        assert r.config_get("max-batch") == {"max-batch": "1000000"}  # CONFIG SET alone does not outlive a restart


def test_rewrite_needs_a_config_file(march_server: MarchServer) -> None:
    with client(march_server.port) as r:
        assert error_of(r, "CONFIG", "REWRITE") == "The server is running without a config file"


def test_requirepass_is_the_default_users_password(march_server: MarchServer) -> None:
    with client(march_server.port) as admin:
        assert admin.execute_command("CONFIG", "SET", "requirepass", "s3cret pass") == "OK"
        assert admin.ping()  # connections already in stay in, as in Redis
        with pytest.raises(redis.AuthenticationError), client(march_server.port) as r:  # (connects at once)
            r.ping()
        with client(march_server.port, password="s3cret pass") as r:
            assert r.ping()
        assert admin.config_get("requirepass") == {"requirepass": "********"}
        assert admin.execute_command("CONFIG", "SET", "requirepass", "") == "OK"
        with client(march_server.port) as r:
            assert r.ping()


def test_maxclients_applies_to_the_next_connection(march_server: MarchServer) -> None:
    with client(march_server.port) as admin:
        assert admin.execute_command("CONFIG", "SET", "maxclients", "1") == "OK"
        with pytest.raises(redis.ConnectionError, match="max number of clients"), client(march_server.port) as r:
            r.ping()
        assert admin.execute_command("CONFIG", "SET", "maxclients", "100") == "OK"
        with client(march_server.port) as r:
            assert r.ping()


def test_timeout_turns_on_while_running(march_server: MarchServer) -> None:
    with client(march_server.port) as admin:
        assert admin.execute_command("CONFIG", "SET", "timeout", "0.5") == "OK"
        with socket.create_connection(("127.0.0.1", march_server.port), timeout=10) as idle:
            assert idle.recv(16) == b""  # closed by the server, well before the socket's own timeout
        assert admin.execute_command("CONFIG", "SET", "timeout", "0") == "OK"
        assert wait_until(lambda: admin.info("stats")["idle_timeouts"] >= 1, message="the idle client counted")


def test_resetstat(march_server: MarchServer) -> None:
    with client(march_server.port) as r:
        for _ in range(20):
            r.incr("live:stats")
        errors_before = r.info("errorstats").get("errorstat_ERR", {"count": 0})["count"]  # (the client's handshake)
        with pytest.raises(redis.ResponseError):
            r.execute_command("CONFIG", "SET", "nosuch", "1")
        assert r.info("stats")["total_commands_processed"] > 20
        assert r.info("commandstats")["cmdstat_incrby"]["calls"] == 20  # redis-py's incr() sends INCRBY
        assert r.info("errorstats")["errorstat_ERR"]["count"] == errors_before + 1
        assert r.execute_command("CONFIG", "RESETSTAT") == "OK"
        stats = r.info("stats")
        assert stats["total_commands_processed"] <= 2 and stats["total_connections_received"] == 0
        r.incr("live:stats")
        assert r.info("commandstats")["cmdstat_incrby"]["calls"] == 1
        assert "errorstat_ERR" not in r.info("errorstats")
        assert "cmdstat_incrby" not in r.info() and "errorstat_ERR" not in r.info()  # INFO: errorstats, no commandstats


def test_redis_cli_stat(march_server: MarchServer) -> None:
    """``redis-cli --stat`` reads keys, memory, clients, requests and connections out of INFO."""
    binary = shutil.which("redis-cli")
    if binary is None:
        pytest.skip("redis-cli not installed (scripts/test installs it)")
    with client(march_server.port) as r:
        for i in range(3):
            r.incr(f"live:stat:{i}")
        keys = r.dbsize()
    master, slave = pty.openpty()  # a terminal: redis-cli's output is line-buffered, not held back
    proc = subprocess.Popen(
        [binary, "-h", "127.0.0.1", "-p", str(march_server.port), "--stat", "-i", "0.1"],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.STDOUT,
    )
    os.close(slave)
    out = b""
    try:
        deadline = time.monotonic() + 20
        while out.count(b"\n") < 5 and time.monotonic() < deadline and proc.poll() is None:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                out += os.read(master, 4096)
    finally:
        proc.terminate()
        proc.wait(10)
        os.close(master)
    lines = out.decode(errors="replace").splitlines()
    assert len(lines) >= 5, out
    assert lines[1].split()[:6] == ["keys", "mem", "clients", "blocked", "requests", "connections"], lines
    for row in lines[2:5]:
        cols = row.split()
        assert cols[0] == str(keys) and cols[1][-1] in "BKMG" and cols[1] != "-", row  # keys, memory
        assert int(cols[2]) >= 1 and cols[3] == "0", row  # clients, blocked
    assert "ERROR" not in out.decode(errors="replace")
