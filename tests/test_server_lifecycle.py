"""Process lifecycle: restarts continue above every earlier ID, one data dir serves one process,
SIGTERM / SIGINT / SHUTDOWN are graceful (exit 0, state durable), and `requirepass` gives
Redis' own NOAUTH / WRONGPASS answers."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable

import pytest
from march_harness import History, MarchServer, RedisServer, RespConn, RespError, check_history, wait_until
from march_harness.resp import encode

pytestmark = pytest.mark.e2e

Factory = Callable[..., MarchServer]


def incr_many(server: MarchServer, key: str, n: int) -> list[int]:
    with server.conn() as c:
        return [c.call("INCR", key) for _ in range(n)]


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_restart_continues_above_every_earlier_id(march_server: MarchServer, how: str) -> None:
    seen: list[int] = []
    for _ in range(3):
        ids = incr_many(march_server, "orders", 50)
        with march_server.conn() as c:
            ids.append(c.call("INCRBY", "orders", 1000))
            watermark = int(c.call("GET", "orders"))
        assert watermark >= max(ids)
        assert min(ids) > max(seen, default=0)
        seen += ids
        if how == "sigterm":
            assert march_server.stop() == 0, march_server.describe()
        else:
            march_server.kill(signal.SIGKILL)
        march_server.start()
        with march_server.conn() as c:
            assert int(c.call("GET", "orders")) >= max(seen), "GET after restart is below an issued ID"
            assert c.call("EXISTS", "orders") == 1
    after = incr_many(march_server, "orders", 1)[0]
    assert after > max(seen)
    assert len(set(seen)) == len(seen)


def test_state_survives_restart(march_server: MarchServer) -> None:
    with march_server.conn() as c:
        assert c.call("SET", "floor", "5000") == "OK"
        c.call("SEQ.CREATE", "custom", "START", "700", "MINBATCH", "10", "MAXBATCH", "100")
        c.call("INCR", "custom")
        c.call("INCR", "plain")
    march_server.restart()
    with march_server.conn() as c:
        assert c.call("INCR", "floor") > 5000
        assert c.call("INCR", "custom") > 700
        assert sorted(c.call("KEYS", "*")) == [b"custom", b"floor", b"plain"]
        info = c.call("SEQ.INFO", "custom")
        assert not isinstance(info, RespError), info
        assert c.call("SET", "floor", "10") != "OK", "SET must not move a sequence backwards after a restart"


def test_second_server_on_same_data_dir_is_refused(march_factory: Factory) -> None:
    first = march_factory()
    first_ids = incr_many(first, "k", 3)
    second = march_factory(first.data_dir, start=False)
    proc = second.spawn()
    try:
        code = proc.wait(20)
    except subprocess.TimeoutExpired:
        pytest.fail(f"second server on the same data dir is still running\n{second.describe()}")
    log = second.log_tail()
    assert code != 0, f"second server exited with 0\n{log}"
    message = log.split("\n", 1)[1].lower()  # skip our own "=== start" header
    assert any(w in message for w in ("lock", "already", "in use", str(first.data_dir).lower())), log
    assert "traceback" not in message, f"a clear message, not a traceback:\n{log}"
    # The refusal comes before any serving state: the log never reads as if it had served.
    assert "promoting" not in message and "serving" not in message, log
    # The first server is unaffected and its state is intact.
    assert incr_many(first, "k", 1)[0] > max(first_ids)
    assert first.stop() == 0
    # Once the first is gone, the data dir can be opened again and continues above.
    second.start()
    assert incr_many(second, "k", 1)[0] > max(first_ids)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_under_load_is_graceful_and_durable(march_server: MarchServer, sig: int) -> None:
    history = History()
    stop = threading.Event()
    errors: list[BaseException] = []

    def client(name: str) -> None:
        try:
            with RespConn(march_server.port, timeout=10) as c:
                while not stop.is_set():
                    sent = History.now()
                    value = c.call("INCR", "load")
                    if isinstance(value, RespError):
                        continue  # e.g. a shutting-down error: no ID was handed out
                    history.record(name, sent, History.now(), value)
        except (ConnectionError, OSError):
            pass  # the server went away mid-request: that request got no ID
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=client, args=(f"c{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: len(history) >= 500, timeout=30, message="500 IDs under load")
        march_server.send_signal(sig)
        code = march_server.wait()
    finally:
        stop.set()
        for t in threads:
            t.join(20)
    assert not errors, errors
    assert code == 0, f"exit code {code} after {signal.Signals(sig).name}\n{march_server.describe()}"
    before = check_history(history)
    march_server.start()
    with march_server.conn() as c:
        sent = History.now()
        after = c.call("INCR", "load")
        history.record("after-restart", sent, History.now(), after)
    assert after > before["max_id"]
    check_history(history)


def test_shutdown_command(march_server: MarchServer) -> None:
    ids = incr_many(march_server, "sd", 10)
    with march_server.conn() as c:
        c.send(encode("SHUTDOWN"))
        assert c.is_closed_by_peer(timeout=15)
    code = march_server.wait(timeout=15)
    assert code == 0, march_server.describe()
    march_server.start()
    assert incr_many(march_server, "sd", 1)[0] > max(ids)


def test_sigterm_with_idle_clients_exits_promptly(march_server: MarchServer) -> None:
    idle = [march_server.conn() for _ in range(5)]
    try:
        with march_server.conn() as c:
            c.call("MULTI")  # a client stuck mid-transaction must not hold shutdown forever
            started = time.monotonic()
            march_server.send_signal(signal.SIGTERM)
            code = march_server.wait(timeout=15)
        assert code == 0, march_server.describe()
        assert time.monotonic() - started < 15
    finally:
        for c in idle:
            c.close()


# --- requirepass ------------------------------------------------------------------------------


@pytest.fixture
def pass_pair(march_factory: Factory, redis_factory: Callable[..., RedisServer]) -> tuple[MarchServer, RedisServer]:
    return (
        march_factory(requirepass="s3cret"),
        redis_factory(extra_args=["--requirepass", "s3cret"]),
    )


AUTH_SCRIPTS = {
    "noauth": [["PING"], ["INCR", "k"], ["GET", "k"]],
    "wrongpass": [["AUTH", "nope"], ["INCR", "k"]],
    "wrongpass-user": [["AUTH", "default", "nope"]],
    "auth-ok": [["AUTH", "s3cret"], ["PING"], ["INCR", "k"]],
    "auth-user-ok": [["AUTH", "default", "s3cret"], ["INCR", "k2"]],
    "auth-arity": [["AUTH"], ["AUTH", "a", "b", "c"]],
    "hello-auth": [["HELLO", "2", "AUTH", "default", "nope"], ["PING"]],
    "allowed-before-auth": [["QUIT"]],
}


@pytest.mark.parametrize("name", sorted(AUTH_SCRIPTS))
def test_auth_like_redis(pass_pair: tuple[MarchServer, RedisServer], name: str) -> None:
    march, redis = pass_pair
    results = []
    for server in (redis, march):
        with server.conn() as c:
            results.append([c.call_raw(*cmd) for cmd in AUTH_SCRIPTS[name]])
    want, got = results
    assert got == want


def test_redis_cli_with_password(pass_pair: tuple[MarchServer, RedisServer]) -> None:
    march, _ = pass_pair
    out = subprocess.run(
        ["redis-cli", "-p", str(march.port), "--no-auth-warning", "-a", "s3cret", "INCR", "x"],
        capture_output=True, stdin=subprocess.DEVNULL, timeout=30,
    )  # fmt: skip
    assert out.stdout == b"1\n", out
