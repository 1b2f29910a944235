"""Grants mean what the README's table says (issue 16 §2), on real march processes with real clients.

- ``+@read +@write`` draws IDs and nothing more: ``SEQ.ALTER`` is ``@seqadmin`` (not ``@write``), and
  ``SEQ.CREATE`` with its own MINBATCH/MAXBATCH/LOOKAHEAD/MAXLEAD needs that right too, so such a
  user cannot set a batch of 2^62, a lead cap of 0 or a batch of 1 on a shared sequence.
- Every setting has bounds, the same from every source: ``CONFIG SET max-wait inf``, a batch of
  2^62, ``MAXLEAD 0`` are refused by CONFIG SET, SEQ.CREATE and SEQ.ALTER alike, and the server
  goes on with the old values.
- The documented application grant ``~orders:* +@read +@write +@app`` works with the clients
  people use: redis-py pipelines with ``transaction=True`` (MULTI/EXEC), redis-cli (also MULTI
  typed in), ioredis (commands, ``multi()``, ``pipeline()``); and on a three-node cluster
  redis-py ``RedisCluster``, ``redis-cli -c`` and ioredis ``Cluster`` (CLUSTER SLOTS/INFO,
  COMMAND) through a standby. ``+@read +@write`` alone gets NOPERM for MULTI, as the README says.

ioredis is installed with npm into the session's temporary directory; the ioredis tests skip
only when node is not installed. Every server is stopped by its fixture.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import redis
from march_harness import MarchServer, RespConn, RespError
from march_harness.cluster import MarchCluster
from march_harness.node import install_ioredis, node_binary, run_ioredis
from march_harness.resp import wait_until
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from march import errors

pytestmark = pytest.mark.e2e

APP_RULES = ("on", ">app-pw", "~orders:*", "+@read", "+@write", "+@app")


@pytest.fixture(scope="session")
def ioredis(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if node_binary() is None:
        pytest.skip("node is not installed")
    return install_ioredis(tmp_path_factory.mktemp("ioredis"))


@pytest.fixture(scope="module")
def redis_cli() -> str:
    path = shutil.which("redis-cli")
    if path is None:
        pytest.skip("redis-cli not installed (scripts/test installs it)")
    return path


def cli(redis_cli: str, port: int, *args: str, stdin: bytes | None = None) -> str:
    proc = subprocess.run(
        [redis_cli, "-h", "127.0.0.1", "-p", str(port), "--no-auth-warning", *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    return proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")


def test_read_write_draws_ids_and_changes_no_settings(march_server: MarchServer) -> None:
    with RespConn(march_server.port) as adm:
        assert adm.call("SEQ.CREATE", "orders:eu", "MINBATCH", "100", "MAXBATCH", "1000") == "OK"
        assert adm.call("SEQ.CREATE", "orders:ts", "TIMESTAMP") == "OK"
        rules = ["on", ">pw", "~orders:*", "+@read", "+@write", "+@create"]
        assert adm.call("ACL", "SETUSER", "app", *rules) == "OK"
    with RespConn(march_server.port) as app:
        assert app.call("AUTH", "app", "pw") == "OK"
        assert app.call("INCR", "orders:eu") == 1
        assert isinstance(app.call("INCR", "orders:ts"), int)
        denied = RespError(errors.NOPERM_COMMAND.format("seq.alter"))
        assert app.call("SEQ.ALTER", "orders:eu", "MINBATCH", str(1 << 30), "MAXBATCH", str(1 << 30)) == denied
        assert app.call("SEQ.ALTER", "orders:eu", "MINBATCH", "1", "MAXBATCH", "1") == denied
        assert app.call("SEQ.ALTER", "orders:ts", "MAXLEAD", "60000") == denied
        for options in (("MINBATCH", "1"), ("MAXBATCH", "5000")):
            assert app.call("SEQ.CREATE", "orders:new", *options) == RespError(
                errors.NOPERM_SETTINGS.format("orders:new")
            )
        assert app.call("SEQ.CREATE", "orders:ts2", "TIMESTAMP", "MAXLEAD", "60000") == RespError(
            errors.NOPERM_SETTINGS.format("orders:ts2")
        )
        assert app.call("SEQ.CREATE", "orders:new") == "OK"  # creating with the server's settings: @create
        assert app.call("ACL", "DRYRUN", "app", "SEQ.ALTER", "orders:eu", "MINBATCH", "5") != "OK"
    with RespConn(march_server.port) as adm:
        info = adm.call("SEQ.INFO", "orders:eu")
        fields = dict(zip(info[::2], info[1::2], strict=True))
        assert (fields[b"min_batch"], fields[b"max_batch"]) == (100, 1000)  # nothing changed
        assert adm.call("ACL", "SETUSER", "ops", "on", ">ops", "~orders:*", "+@seqadmin") == "OK"
    with RespConn(march_server.port) as ops:  # the category that may
        assert ops.call("AUTH", "ops", "ops") == "OK"
        assert ops.call("SEQ.ALTER", "orders:eu", "MINBATCH", "10") == "OK"


def test_settings_have_the_same_bounds_from_every_source(march_server: MarchServer) -> None:
    with RespConn(march_server.port) as c:
        assert c.call("SEQ.CREATE", "plain") == "OK"
        assert c.call("SEQ.CREATE", "ts", "TIMESTAMP") == "OK"
        for name, value in (
            ("max-wait", "inf"),
            ("max-wait", "nan"),
            ("batch-interval", "inf"),
            ("min-batch", str(1 << 62)),
            ("max-batch", str(1 << 62)),
            ("timestamp-max-lead-ms", "0"),
            ("timestamp-max-lead-ms", "57600000"),
        ):
            reply = c.call("CONFIG", "SET", name, value)
            assert isinstance(reply, RespError), (name, value, reply)
            assert reply.message.startswith(f"ERR CONFIG SET failed (possibly related to argument '{name}')"), reply
        assert c.call("CONFIG", "GET", "max-wait") == [b"max-wait", b"2"]  # whole seconds as Redis shows them
        batch = RespError(errors.BATCH_RANGE.format(1_000_000_000))
        assert c.call("SEQ.ALTER", "plain", "MAXBATCH", str(1 << 62)) == batch
        assert c.call("SEQ.ALTER", "plain", "MINBATCH", str(1 << 62), "MAXBATCH", str(1 << 62)) == batch
        assert c.call("SEQ.CREATE", "big", "MINBATCH", str(1 << 62), "MAXBATCH", str(1 << 62)) == batch
        lead = RespError(errors.TS_MAXLEAD.format(100, 60000))
        assert c.call("SEQ.ALTER", "ts", "MAXLEAD", "0") == lead
        assert c.call("SEQ.CREATE", "ts0", "TIMESTAMP", "MAXLEAD", "0") == lead
        assert c.call("SEQ.ALTER", "ts", "MAXLEAD", str(16 * 3600 * 1000)) == lead
        assert c.call("INCR", "plain") == 1 and c.call("EXISTS", "big", "ts0") == 0
        assert c.call("CONFIG", "SET", "max-wait", "0.5") == "OK"  # a finite value within bounds still works


def test_the_app_grant_works_with_redis_py_redis_cli_and_ioredis(
    march_server: MarchServer, redis_cli: str, ioredis: Path
) -> None:
    port = march_server.port
    with RespConn(port) as adm:
        assert adm.call("SEQ.CREATE", "orders:eu") == "OK"
        assert adm.call("ACL", "SETUSER", "app", *APP_RULES) == "OK"
        assert adm.call("ACL", "SETUSER", "bare", "on", ">bare-pw", "~orders:*", "+@read", "+@write") == "OK"
    app = redis.Redis(port=port, username="app", password="app-pw", retry=Retry(NoBackoff(), 0))
    try:
        assert app.incr("orders:eu") == 1
        with app.pipeline(transaction=True) as pipe:  # MULTI ... EXEC
            assert pipe.incr("orders:eu").incr("orders:eu").get("orders:eu").execute() == [2, 3, b"3"]
        with app.pipeline(transaction=False) as pipe:
            assert pipe.incr("orders:eu").execute() == [4]
        app.client_setname("orders-service")
        assert app.client_getname() == "orders-service"
    finally:
        app.close()
    bare = redis.Redis(port=port, username="bare", password="bare-pw", retry=Retry(NoBackoff(), 0))
    try:  # what the README says +@read +@write alone gives: IDs, but no transactions
        assert bare.incr("orders:eu") == 5
        with pytest.raises(redis.exceptions.NoPermissionError), bare.pipeline(transaction=True) as pipe:
            pipe.incr("orders:eu").execute()  # (as with Redis: MULTI refused, the INCR runs alone: 6)
    finally:
        bare.close()

    auth = ("--user", "app", "--pass", "app-pw")
    assert cli(redis_cli, port, *auth, "INCR", "orders:eu") == "7\n"
    out = cli(redis_cli, port, *auth, stdin=b"MULTI\nINCR orders:eu\nINCR orders:eu\nEXEC\n")
    assert out.split() == ["OK", "QUEUED", "QUEUED", "8", "9"], out
    assert "NOPERM" in cli(redis_cli, port, *auth, "SEQ.ALTER", "orders:eu", "MINBATCH", "1")

    result = run_ioredis(ioredis, "standalone", port, "app", "app-pw")
    assert result == {"ids": [10, 11, 12], "tx": [13, 14], "piped": [15, "15"], "warnings": []}, result
    # With its ready check on, ioredis asks INFO (not part of @app: @dangerous in Redis); it warns and goes on.
    result = run_ioredis(ioredis, "standalone", port, "app", "app-pw", ready_check=True)
    assert result["ids"] == [16, 17, 18] and result["tx"] == [19, 20], result
    assert len(result["warnings"]) == 1 and "INFO" in result["warnings"][0], result


def test_the_app_grant_works_with_cluster_clients(march_cluster: MarchCluster, redis_cli: str, ioredis: Path) -> None:
    primary = march_cluster.wait_settled(timeout=20)
    standby = next(n for n in march_cluster.nodes if n is not primary)
    with RespConn(primary.port) as adm:
        assert adm.call("SEQ.CREATE", "orders:eu") == "OK"
        assert adm.call("ACL", "SETUSER", "app", *APP_RULES) == "OK"
    for n in march_cluster.nodes:  # (every node follows the users through the watch)
        with RespConn(n.port) as c:
            wait_until(lambda c=c: c.call("ACL", "GETUSER", "app") is not None, 10, 0.01, f"app on {n.name}")

    cluster = RedisCluster(
        host="127.0.0.1", port=standby.port, username="app", password="app-pw", retry=Retry(NoBackoff(), 0)
    )
    try:
        assert [cluster.incr("orders:eu") for _ in range(3)] == [1, 2, 3]
        with cluster.pipeline() as pipe:
            assert pipe.incr("orders:eu").incr("orders:eu").execute() == [4, 5]
    finally:
        cluster.close()

    out = cli(redis_cli, standby.port, "-c", "--user", "app", "--pass", "app-pw", "INCR", "orders:eu")
    assert out == "6\n", out

    result = run_ioredis(ioredis, "cluster", standby.port, "app", "app-pw", ready_check=True)
    assert result["ids"] == [7, 8, 9] and result["tx"] == [10, 11] and result["piped"] == [12, "12"], result
    assert result["warnings"] == [], result  # its cluster ready check (CLUSTER INFO) is part of @app
