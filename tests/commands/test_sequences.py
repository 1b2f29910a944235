"""March-only semantics of the sequence commands, with redis-py against a real march process:
INCR/INCRBY, GET as a watermark, MGET, SET as a floor, SEQ.CREATE / SEQ.INFO / SEQ.LIST, SEQ.ALTER
(durable, applied at once, validated), and ``auto_create`` off / ``max_incrby`` on a second server.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis
from march_harness import MarchServer, serving
from march_harness.compare import client, outcome

pytestmark = pytest.mark.e2e

MAX = 9223372036854775807
NOT_POSITIVE = ("error", "ResponseError", "increment must be a positive integer: sequences only move forwards")


# --- INCR / INCRBY ---------------------------------------------------------------------------------


def test_incr_starts_at_1(mc: redis.Redis, key: str) -> None:
    assert [mc.execute_command("INCR", key) for _ in range(5)] == [1, 2, 3, 4, 5]


def test_incrby_returns_the_last_of_n(mc: redis.Redis, key: str) -> None:
    assert mc.execute_command("INCRBY", key, "5") == 5  # 1..5 handed out
    assert mc.execute_command("INCR", key) == 6
    assert mc.execute_command("INCRBY", key, "10") == 16  # 7..16
    assert mc.execute_command("GET", key) == b"16"


@pytest.mark.parametrize("n", ["0", "-1", "-9223372036854775808"])
def test_incrby_must_be_positive(mc: redis.Redis, key: str, n: str) -> None:
    assert outcome(mc, "INCRBY", key, n) == NOT_POSITIVE
    assert mc.exists(key) == 0  # the refused request created nothing
    mc.execute_command("INCR", key)
    assert outcome(mc, "INCRBY", key, n) == NOT_POSITIVE
    assert mc.execute_command("INCR", key) == 2  # and moved nothing


def test_incrby_bounded_by_max_incrby(mc: redis.Redis, key: str) -> None:
    default_max = 1_000_000
    assert outcome(mc, "INCRBY", key, str(default_max + 1)) == (
        "error",
        "ResponseError",
        f"increment exceeds the maximum of {default_max} IDs per request (max_incrby)",
    )
    assert mc.exists(key) == 0
    assert mc.execute_command("INCRBY", key, str(default_max)) == default_max
    assert mc.execute_command("INCR", key) == default_max + 1


def test_concurrent_incr_unique_and_increasing(march_proc: MarchServer, key: str) -> None:
    results: dict[int, list[int]] = {}

    def worker(n: int) -> None:
        c = client(march_proc.port)
        try:
            results[n] = [c.execute_command("INCR", key) for _ in range(200)]
        finally:
            c.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 4
    everything = [i for ids in results.values() for i in ids]
    assert sorted(everything) == list(range(1, 801))  # unique, no gaps within one process life
    for ids in results.values():
        assert ids == sorted(ids)


def test_incr_up_to_the_top(mc: redis.Redis, key: str) -> None:
    assert mc.execute_command("SEQ.CREATE", key, "START", str(MAX - 1)) == b"OK"
    assert mc.execute_command("INCR", key) == MAX - 1
    assert mc.execute_command("INCR", key) == MAX
    assert outcome(mc, "INCR", key) == ("error", "ResponseError", "increment or decrement would overflow")
    assert mc.execute_command("GET", key) == str(MAX).encode()


# --- GET: a watermark ---------------------------------------------------------------------------------


def test_get_unknown_is_nil(mc: redis.Redis, key: str) -> None:
    assert mc.execute_command("GET", key) is None
    assert mc.exists(key) == 0  # GET creates nothing


def test_get_is_a_watermark(march_proc: MarchServer, key: str) -> None:
    """Every ID handed out before a GET is <= W; every ID handed out after it is > W (any connection)."""
    a, b = client(march_proc.port), client(march_proc.port)
    try:
        issued: list[int] = []
        for i in range(50):
            c = a if i % 2 else b
            issued.append(c.execute_command("INCRBY", key, str(1 + i % 7)))
            w = int((b if i % 2 else a).execute_command("GET", key))
            assert w >= max(issued)
            after = c.execute_command("INCR", key)
            assert after > w
            issued.append(after)
    finally:
        a.close()
        b.close()


def test_get_after_seq_create(mc: redis.Redis, key: str) -> None:
    mc.execute_command("SEQ.CREATE", key, "START", "100")
    assert int(mc.execute_command("GET", key)) < 100  # nothing handed out yet
    assert mc.execute_command("INCR", key) == 100
    assert mc.execute_command("GET", key) == b"100"


def test_mget(mc: redis.Redis, key: str) -> None:
    k1, k2 = key + ":1", key + ":2"
    mc.execute_command("INCRBY", k1, "3")
    mc.execute_command("SET", k2, "41")
    assert mc.execute_command("MGET", k1, key + ":none", k2, k1) == [b"3", None, b"41", b"3"]


# --- SET: raise the floor -----------------------------------------------------------------------------


def test_set_raises_the_floor(mc: redis.Redis, key: str) -> None:
    assert mc.execute_command("SET", key, "100") is True
    assert mc.execute_command("GET", key) == b"100"
    assert mc.execute_command("INCR", key) == 101
    assert mc.execute_command("SET", key, "1000") is True
    assert mc.execute_command("INCR", key) == 1001


def test_set_never_moves_backwards(mc: redis.Redis, key: str) -> None:
    mc.execute_command("INCRBY", key, "50")
    assert outcome(mc, "SET", key, "10") == (
        "error",
        "ResponseError",
        f"SET would move sequence '{key}' backwards: IDs up to 50 have already been handed out",
    )
    assert outcome(mc, "SET", key, "49")[0] == "error"
    assert mc.execute_command("SET", key, "50") is True  # equal to the watermark: accepted, no change
    assert mc.execute_command("INCR", key) == 51


def test_set_nx(mc: redis.Redis, key: str) -> None:
    assert mc.execute_command("SET", key, "7", "NX") is True  # new key: created with floor 7
    assert mc.execute_command("SET", key, "500", "nx") is None  # exists: nothing done
    assert mc.execute_command("INCR", key) == 8


def test_set_nx_on_an_existing_key_at_that_watermark_is_nil(mc: redis.Redis, key: str) -> None:
    assert mc.execute_command("INCRBY", key, "7") == 7
    assert mc.execute_command("SET", key, "7", "NX") is None  # exists: nil, even though 7 is its watermark
    assert mc.execute_command("INCR", key) == 8


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-1",), "a sequence floor must be a non-negative integer"),
        (("abc",), "value is not an integer or out of range"),
        (("1.5",), "value is not an integer or out of range"),
        (("9223372036854775808",), "value is not an integer or out of range"),
        (
            ("5", "EX", "10"),
            "SET on a sequence takes only NX (no expiry, GET or XX: sequences never expire or go back)",
        ),
        (("5", "XX"), "SET on a sequence takes only NX (no expiry, GET or XX: sequences never expire or go back)"),
        (("5", "GET"), "SET on a sequence takes only NX (no expiry, GET or XX: sequences never expire or go back)"),
    ],
)
def test_set_refused(mc: redis.Redis, key: str, args: tuple[str, ...], message: str) -> None:
    assert outcome(mc, "SET", key, *args) == ("error", "ResponseError", message)
    assert mc.exists(key) == 0


# --- SEQ.CREATE / SEQ.INFO / SEQ.LIST -----------------------------------------------------------------


def test_seq_create_start(mc: redis.Redis, key: str) -> None:
    assert mc.execute_command("SEQ.CREATE", key, "START", "1000") == b"OK"
    assert mc.execute_command("INCR", key) == 1000
    assert mc.execute_command("INCRBY", key, "5") == 1005


def test_seq_create_defaults(mc: redis.Redis, key: str) -> None:
    assert mc.execute_command("SEQ.CREATE", key) == b"OK"
    assert mc.exists(key) == 1
    assert mc.execute_command("INCR", key) == 1


def test_seq_create_batches_show_in_seq_info(mc: redis.Redis, key: str) -> None:
    assert mc.execute_command("SEQ.CREATE", key, "MINBATCH", "10", "MAXBATCH", "20") == b"OK"
    info = mc.execute_command("SEQ.INFO", key)
    assert (info[b"min_batch"], info[b"max_batch"]) == (10, 20)
    assert 10 <= info[b"batch"] <= 20


def test_seq_create_exists(mc: redis.Redis, key: str) -> None:
    mc.execute_command("SEQ.CREATE", key)
    assert outcome(mc, "SEQ.CREATE", key) == ("error", "ResponseError", f"sequence '{key}' already exists")
    other = key + ":auto"
    mc.execute_command("INCR", other)
    assert outcome(mc, "SEQ.CREATE", other, "START", "5") == (
        "error",
        "ResponseError",
        f"sequence '{other}' already exists",
    )
    assert mc.execute_command("INCR", other) == 2  # untouched


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("START", "0"), "START must be between 1 and 9223372036854775807"),
        (("START", "-5"), "START must be between 1 and 9223372036854775807"),
        (("MINBATCH", "30", "MAXBATCH", "20"), "MINBATCH and MAXBATCH must satisfy 1 <= MINBATCH <= MAXBATCH <= "),
        (("MINBATCH", "0"), "MINBATCH and MAXBATCH must satisfy 1 <= MINBATCH <= MAXBATCH <= "),
        (("START",), "syntax error"),
        (("BOGUS", "1"), "syntax error"),
        (("START", "x"), "value is not an integer or out of range"),
    ],
)
def test_seq_create_refused(mc: redis.Redis, key: str, args: tuple[str, ...], message: str) -> None:
    err = outcome(mc, "SEQ.CREATE", key, *args)
    assert err[:2] == ("error", "ResponseError") and err[2].startswith(message)
    assert mc.exists(key) == 0


def test_seq_info(mc: redis.Redis, key: str) -> None:
    mc.execute_command("INCRBY", key, "41")
    info = mc.execute_command("SEQ.INFO", key)
    for field in (
        b"next",
        b"ceiling",
        b"batch",
        b"min_batch",
        b"max_batch",
        b"issued",
        b"store_writes",
        b"last_write_ago_ms",
        b"last_write_latency_us",
        b"waits",
        b"wait_timeouts",
    ):
        assert field in info, field
    assert info[b"next"] == 42
    assert info[b"ceiling"] >= info[b"next"]  # what is handed out next is already below the durable ceiling
    # 41 IDs from the created range, and no store write: the sequence became a row of the compact
    # table (``march.keyspace.sequence_table``), and SEQ.INFO made it a generator again: no count of its own yet
    assert info[b"issued"] == 0


def test_seq_info_resp2(march_proc: MarchServer, key: str) -> None:
    c = client(march_proc.port, protocol=2)
    try:
        c.execute_command("INCR", key)
        flat = c.execute_command("SEQ.INFO", key)
    finally:
        c.close()
    info = dict(zip(flat[::2], flat[1::2], strict=True))
    assert info[b"next"] == 2


def test_seq_info_unknown(mc: redis.Redis, key: str) -> None:
    assert outcome(mc, "SEQ.INFO", key) == ("error", "ResponseError", f"no such sequence '{key}'")


def test_seq_list(mc: redis.Redis, key: str) -> None:
    names = [f"{key}:{i}" for i in range(3)]
    mc.execute_command("SEQ.CREATE", names[0])
    mc.execute_command("INCR", names[1])
    mc.execute_command("SET", names[2], "5")
    listed = mc.execute_command("SEQ.LIST")
    mine = [n for n in listed if n.decode().startswith(key + ":")]
    assert mine == [n.encode() for n in names]  # in creation order
    assert len(listed) == mc.dbsize()


# --- auto_create off, small max_incrby ----------------------------------------------------------------


@pytest.fixture(scope="module")
def strict_march(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MarchServer]:
    args = ["--auto-create", "no", "--max-incrby", "1000"]
    server = MarchServer.in_dir(tmp_path_factory.mktemp("strict"), extra_args=args)
    with serving(server, during="the module"):
        yield server


@pytest.fixture
def sc(strict_march: MarchServer) -> Iterator[redis.Redis]:
    with client(strict_march.port) as c:
        yield c


def test_auto_create_off(sc: redis.Redis, key: str) -> None:
    message = f"no such sequence '{key}' and auto_create is off: create it with SEQ.CREATE"
    assert outcome(sc, "INCR", key) == ("error", "ResponseError", message)
    assert outcome(sc, "INCRBY", key, "5") == ("error", "ResponseError", message)
    assert sc.exists(key) == 0
    assert sc.execute_command("SEQ.CREATE", key) == b"OK"
    assert sc.execute_command("INCR", key) == 1
    assert sc.execute_command("CONFIG", "GET", "auto-create") == {b"auto-create": b"no"}


def test_auto_create_off_in_a_transaction(sc: redis.Redis, key: str) -> None:
    with sc.pipeline(transaction=True) as p:
        p.incr(key).exists(key)
        first, exists = p.execute(raise_on_error=False)
    assert isinstance(first, redis.ResponseError) and "auto_create is off" in str(first)
    assert exists == 0


def test_max_incrby_configured(sc: redis.Redis, key: str) -> None:
    sc.execute_command("SEQ.CREATE", key)
    assert sc.execute_command("INCRBY", key, "1000") == 1000
    assert outcome(sc, "INCRBY", key, "1001") == (
        "error",
        "ResponseError",
        "increment exceeds the maximum of 1000 IDs per request (max_incrby)",
    )
    assert sc.execute_command("INCR", key) == 1001


# --- SEQ.ALTER -----------------------------------------------------------------------------------


def test_seq_alter_batch_bounds_apply_at_once_and_last(march_proc: MarchServer, mc: redis.Redis, key: str) -> None:
    mc.execute_command("SEQ.CREATE", key, "MINBATCH", "10", "MAXBATCH", "20")
    first = mc.execute_command("INCR", key)
    assert mc.execute_command("SEQ.ALTER", key, "MINBATCH", "500", "MAXBATCH", "1000") == b"OK"
    info = mc.execute_command("SEQ.INFO", key)
    assert (info[b"min_batch"], info[b"max_batch"]) == (500, 1000)
    assert 500 <= info[b"batch"] <= 1000  # the live generator's current batch, moved into the bounds
    assert mc.execute_command("SEQ.ALTER", key, "maxbatch", "600") == b"OK"  # one bound alone; the other kept
    info = mc.execute_command("SEQ.INFO", key)
    assert (info[b"min_batch"], info[b"max_batch"]) == (500, 600)
    assert mc.execute_command("INCR", key) == first + 1  # IDs carry on, nothing skipped by the change itself
    march_proc.restart()  # durable: the package's server, restarted in place (same port and data)
    with client(march_proc.port) as c:
        info = c.execute_command("SEQ.INFO", key)
        assert (info[b"min_batch"], info[b"max_batch"]) == (500, 600)
        assert c.execute_command("INCR", key) > first + 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("MINBATCH", "0"), "MINBATCH and MAXBATCH must satisfy 1 <= MINBATCH <= MAXBATCH"),
        (("MINBATCH", "30", "MAXBATCH", "20"), "MINBATCH and MAXBATCH must satisfy 1 <= MINBATCH <= MAXBATCH"),
        (("MINBATCH", "5000000"), "MINBATCH and MAXBATCH must satisfy 1 <= MINBATCH <= MAXBATCH"),  # > MAXBATCH 20
        (("MINBATCH", "x"), "value is not an integer or out of range"),
        (("MINBATCH",), "syntax error"),
        (("LOOKAHEAD", "5"), "syntax error"),
        ((), "SEQ.ALTER needs at least one of MINBATCH, MAXBATCH, MAXLEAD"),
    ],
)
def test_seq_alter_refused(mc: redis.Redis, key: str, args: tuple[str, ...], message: str) -> None:
    mc.execute_command("SEQ.CREATE", key, "MINBATCH", "10", "MAXBATCH", "20")
    with pytest.raises(redis.ResponseError, match=message):
        mc.execute_command("SEQ.ALTER", key, *args)
    info = mc.execute_command("SEQ.INFO", key)
    assert (info[b"min_batch"], info[b"max_batch"]) == (10, 20)  # nothing changed


def test_seq_alter_kinds_and_missing_keys(mc: redis.Redis, key: str) -> None:
    with pytest.raises(redis.ResponseError, match="no such sequence"):
        mc.execute_command("SEQ.ALTER", key, "MINBATCH", "5")
    mc.execute_command("INCR", key)
    with pytest.raises(redis.ResponseError, match="MAXLEAD applies to timestamp sequences only") as plain:
        mc.execute_command("SEQ.ALTER", key, "MAXLEAD", "100")
    assert str(plain.value).startswith("WRONGTYPE ")
    ts = key + ":ts"
    mc.execute_command("SEQ.CREATE", ts, "TIMESTAMP", "MAXLEAD", "250")
    assert mc.execute_command("SEQ.INFO", ts)[b"max_lead_ms"] == 250
    with pytest.raises(redis.ResponseError, match="MINBATCH and MAXBATCH apply to plain sequences only"):
        mc.execute_command("SEQ.ALTER", ts, "MINBATCH", "5")
    for bad in ("-1", "0", "99", "60001", "86400001", "x"):  # always a cap, within bounds (march.config)
        with pytest.raises(redis.ResponseError, match="MAXLEAD must be between 100 and 60000 milliseconds"):
            mc.execute_command("SEQ.ALTER", ts, "MAXLEAD", bad)
        with pytest.raises(redis.ResponseError, match="MAXLEAD must be between 100 and 60000 milliseconds"):
            mc.execute_command("SEQ.CREATE", ts + bad, "TIMESTAMP", "MAXLEAD", bad)
    assert mc.execute_command("SEQ.ALTER", ts, "MAXLEAD", "60000") == b"OK"
    assert mc.execute_command("SEQ.INFO", ts)[b"max_lead_ms"] == 60000
    mc.execute_command("SEQ.CREATE", key + ":default-ts", "TIMESTAMP")
    assert mc.execute_command("SEQ.INFO", key + ":default-ts")[b"max_lead_ms"] == 1000  # timestamp_max_lead_ms
