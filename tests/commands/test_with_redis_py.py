"""redis-py, sync and asyncio, RESP2 and RESP3, against a real march process: the client
library a Python user actually has, with its handshake (`HELLO 3`, `CLIENT SETINFO`), its
`incr` (sent as `INCRBY key 1`), its pipelines (`MULTI`/`EXEC` or plain) and its exception
mapping from error prefixes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio
from march_harness import History, MarchServer, check_history

pytestmark = pytest.mark.e2e

PROTOCOLS = [2, 3]


@pytest.fixture(params=PROTOCOLS, ids=["resp2", "resp3"])
def client(request: pytest.FixtureRequest, march_server: MarchServer) -> Iterator[redis.Redis]:
    r = redis.Redis(port=march_server.port, protocol=request.param, socket_timeout=10)
    try:
        yield r
    finally:
        r.close()


def test_handshake_and_connection_commands(client: redis.Redis) -> None:
    assert client.ping() is True
    assert client.echo("héllo") == "héllo".encode()
    assert client.client_setname("worker-7") is True
    assert client.client_getname() in (b"worker-7", "worker-7")  # redis-py decodes it under RESP2
    assert isinstance(client.client_id(), int)
    assert client.execute_command("SELECT", 0) in (True, b"OK", "OK")
    assert client.dbsize() == 0
    seconds, micros = client.time()
    assert seconds > 1_600_000_000 and 0 <= micros < 1_000_000
    info = client.info()
    assert isinstance(info, dict) and info
    assert isinstance(client.info("sequences"), dict)


def test_incr_sequence(client: redis.Redis) -> None:
    assert client.incr("orders") == 1
    assert client.incr("orders") == 2
    assert client.incrby("orders", 10) == 12  # 3..12 handed out, the last one returned
    assert client.incr("orders") == 13
    assert client.exists("orders") == 1
    assert client.exists("nope") == 0
    assert client.ttl("orders") == -1
    assert client.pttl("orders") == -1
    assert client.ttl("nope") == -2
    assert client.get("nope") is None


def test_get_is_a_watermark(client: redis.Redis) -> None:
    issued = [client.incr("wm") for _ in range(5)]
    watermark = int(client.get("wm"))
    after = client.incr("wm")
    assert max(issued) <= watermark < after
    values = client.mget("wm", "nope", "wm")
    assert values[1] is None
    assert int(values[0]) >= watermark and int(values[2]) >= watermark


def test_set_raises_the_floor_and_never_lowers_it(client: redis.Redis) -> None:
    assert client.set("migrated", 1_000_000) is True
    assert client.incr("migrated") == 1_000_001
    with pytest.raises(redis.ResponseError):
        client.set("migrated", 10)  # backwards: refused
    assert client.incr("migrated") == 1_000_002
    assert client.set("migrated", 5, nx=True) is None  # exists: NX does nothing
    assert client.set("fresh", 42, nx=True) is True
    assert client.incr("fresh") == 43


def test_overflow_near_max(client: redis.Redis) -> None:
    top = 2**63 - 1
    assert client.set("big", top - 1) is True
    assert client.incr("big") == top
    with pytest.raises(redis.ResponseError, match="increment or decrement would overflow"):
        client.incr("big")


@pytest.mark.parametrize(
    "command",
    [
        ("DECR", "seq"),
        ("DECRBY", "seq", "1"),
        ("INCRBYFLOAT", "seq", "1.5"),
        ("DEL", "seq"),
        ("UNLINK", "seq"),
        ("EXPIRE", "seq", "10"),
        ("PEXPIRE", "seq", "10000"),
        ("APPEND", "seq", "x"),
        ("SETRANGE", "seq", "0", "x"),
        ("GETSET", "seq", "1"),
        ("GETDEL", "seq"),
        ("RENAME", "seq", "other"),
        ("FLUSHDB",),
        ("FLUSHALL",),
        ("INCRBY", "seq", "0"),
        ("INCRBY", "seq", "-1"),
    ],
    ids=lambda c: " ".join(c),
)
def test_refused_commands_leave_the_sequence_alone(client: redis.Redis, command: tuple[str, ...]) -> None:
    first = client.incr("seq")
    with pytest.raises(redis.ResponseError) as err:
        client.execute_command(*command)
    message = str(err.value)
    assert message.strip(), "the error must say why"
    assert "unknown command" not in message, "refused on purpose, not unknown"
    assert client.incr("seq") > first
    assert client.exists("seq") == 1
    assert client.ping() is True


def test_unknown_command_raises(client: redis.Redis) -> None:
    with pytest.raises(redis.ResponseError, match="unknown command 'NOSUCHCMD'"):
        client.execute_command("NOSUCHCMD", "a")


def test_keys_scan_type(client: redis.Redis) -> None:
    for k in ("a:1", "a:2", "b:1"):
        client.incr(k)
    assert sorted(client.keys("*")) == [b"a:1", b"a:2", b"b:1"]
    assert sorted(client.keys("a:*")) == [b"a:1", b"a:2"]
    assert sorted(client.scan_iter(match="a:*", count=1)) == [b"a:1", b"a:2"]
    assert sorted(client.scan_iter()) == [b"a:1", b"a:2", b"b:1"]
    assert client.type("a:1") in (b"string", "string", b"sequence")
    assert client.type("nope") in (b"none", "none")
    assert client.dbsize() == 3


def test_seq_commands(client: redis.Redis) -> None:
    assert client.execute_command("SEQ.CREATE", "inv", "START", 500, "MINBATCH", 10, "MAXBATCH", 1000)
    assert client.incr("inv") in (500, 501)  # START is the first ID (or the floor, if read as in SET)
    with pytest.raises(redis.ResponseError):
        client.execute_command("SEQ.CREATE", "inv")  # already exists
    info = client.execute_command("SEQ.INFO", "inv")
    assert info
    listed = client.execute_command("SEQ.LIST")
    flat = repr(listed)
    assert "inv" in flat
    with pytest.raises(redis.ResponseError):
        client.execute_command("SEQ.INFO", "nope")


@pytest.mark.parametrize("transaction", [True, False], ids=["multi", "plain"])
def test_pipeline(client: redis.Redis, transaction: bool) -> None:
    with client.pipeline(transaction=transaction) as pipe:
        for _ in range(100):
            pipe.incr("piped")
        pipe.incrby("piped", 5)
        pipe.get("piped")
        pipe.ping()
        results = pipe.execute()
    ids = results[:100]
    assert ids == list(range(1, 101))
    assert results[100] == 105
    assert int(results[101]) >= 105
    assert results[102] is True


@pytest.mark.parametrize("transaction", [True, False], ids=["multi", "plain"])
def test_pipeline_error_is_reported(client: redis.Redis, transaction: bool) -> None:
    with client.pipeline(transaction=transaction) as pipe:
        pipe.incr("pipe-err")
        pipe.execute_command("INCRBY", "pipe-err", "notanumber")
        pipe.incr("pipe-err")
        results = pipe.execute(raise_on_error=False)
    assert results[0] == 1
    assert isinstance(results[1], redis.ResponseError)
    assert results[2] == 2


def test_threads_share_a_pool(march_server: MarchServer) -> None:
    """Concurrent clients: IDs are unique and respect real-time order."""
    history = History()
    pool = redis.ConnectionPool(port=march_server.port, protocol=3, max_connections=16)
    errors: list[BaseException] = []

    def work(name: str) -> None:
        try:
            r = redis.Redis(connection_pool=pool)
            for _ in range(200):
                sent = History.now()
                value = r.incr("shared")
                history.record(name, sent, History.now(), value)
        except BaseException as e:  # reported below, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    pool.disconnect()
    assert not errors, errors
    stats = check_history(history)
    assert stats["ops"] == 1600
    assert stats["max_id"] == 1600  # no crash, so no gap


# --- asyncio --------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=["resp2", "resp3"])
async def test_asyncio_client(march_server: MarchServer, protocol: int) -> None:
    r = redis.asyncio.Redis(port=march_server.port, protocol=protocol, max_connections=20)
    try:
        assert await r.ping() is True
        assert await r.incr("async") == 1
        history = History()

        async def one(name: str) -> None:
            for _ in range(50):
                sent = History.now()
                value = await r.incr("async")
                history.record(name, sent, History.now(), value)

        await asyncio.gather(*(one(f"task{i}") for i in range(20)))
        stats = check_history(history)
        assert stats["ops"] == 1000
        assert stats["min_id"] == 2 and stats["max_id"] == 1001

        for transaction in (True, False):
            async with r.pipeline(transaction=transaction) as pipe:
                for _ in range(10):
                    pipe.incr("async-pipe")
                results = await pipe.execute()
            assert results == sorted(results) and len(set(results)) == 10

        assert int(await r.get("async")) >= 1001
        with pytest.raises(redis.ResponseError):
            await r.execute_command("DECR", "async")
    finally:
        await r.aclose()
