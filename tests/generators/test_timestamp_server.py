"""Timestamp sequences against a real server process: every command and every bad input, restarts
that continue above the saved bound, and the server's clock moved backwards (and forwards again)
under load from concurrent clients with the history checked for duplicates and decreases.

The clock is moved with ``DEBUG CLOCK-OFFSET ms`` (only with ``--enable-debug-command yes``):
the machine's clock is left alone. Nothing sleeps to synchronise: waits are on conditions.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

import pytest
from march_harness import History, MarchServer, RespConn, RespError, check_history, wait_until
from march_harness.resp import encode

from march import errors
from march.generators.bits import PRESETS, Layout, iso

pytestmark = pytest.mark.e2e

Factory = Callable[..., MarchServer]
DEBUG = ["--enable-debug-command", "yes"]


def layout_of(c: RespConn, key: str) -> Layout:
    info = c.call("SEQ.INFO", key)
    fields = dict(zip(info[::2], info[1::2], strict=True)) if isinstance(info, list) else info
    bits = dict(f.split(":") for f in fields[b"layout"].decode().split(","))
    return Layout(
        time_bits=int(bits["time"]),
        node_bits=int(bits["node"]),
        seq_bits=int(bits["seq"]),
        order=tuple(bits),
        epoch=fields[b"epoch"],
        unit=fields[b"unit_ms"],
        node=fields[b"node"],
        preset=fields[b"preset"].decode(),
    )


def as_dict(reply: object) -> dict[bytes, object]:
    assert isinstance(reply, list | dict), reply
    return dict(zip(reply[::2], reply[1::2], strict=True)) if isinstance(reply, list) else reply


@pytest.mark.parametrize(
    ("options", "preset", "shape"),
    [
        ([], "snowflake", "time:41,node:10,seq:12"),
        (["PRESET", "snowflake", "NODE", "1023"], "snowflake", "time:41,node:10,seq:12"),
        (["PRESET", "sonyflake", "NODE", "65535"], "sonyflake", "time:39,seq:8,node:16"),
        (["PRESET", "js53"], "js53", "time:41,node:0,seq:12"),
        (
            # 256 IDs per 1 s unit: INCRBY 10000 needs 40 s of lead, past the default cap (the largest: a minute)
            ["TIMEBITS", "40", "NODEBITS", "0", "SEQBITS", "8", "UNIT", "1000", "EPOCH", "0", "MAXLEAD", "60000"],
            "custom",
            "time:40,node:0,seq:8",
        ),
        (["ORDER", "node,time,seq", "NODE", "3"], "custom", "node:10,time:41,seq:12"),
    ],
)
def test_every_preset_and_a_custom_layout(
    march_server: MarchServer, options: list[str], preset: str, shape: str
) -> None:
    with march_server.conn() as c:
        assert c.call("SEQ.CREATE", "ts", "TIMESTAMP", *options) == "OK"
        layout = layout_of(c, "ts")
        assert (layout.preset, layout.describe()) == (preset, shape)
        ids = [c.call("INCR", "ts") for _ in range(50)]
        ids.append(c.call("INCRBY", "ts", 10_000))
        ids += [c.call("INCR", "ts") for _ in range(5)]
        assert ids == sorted(set(ids)), "IDs must strictly increase"
        assert int(c.call("GET", "ts")) == ids[-1]
        assert c.call("TYPE", "ts") == "string"
        for id_ in ids:
            decoded = as_dict(c.call("SEQ.DECODE", "ts", id_))
            t, node, seq = layout.decode(id_)
            assert layout.encode(t, node, seq) == id_
            assert (decoded[b"time_units"], decoded[b"node"], decoded[b"sequence"]) == (t, layout.node, seq)
            assert decoded[b"time"] == iso(layout.ms_of(t)).encode()
            assert decoded[b"unix_ms"] == layout.ms_of(t)
        if preset == "js53":
            assert max(ids) < 1 << 53


def test_seq_info_shows_layout_lead_bound_and_carries(march_server: MarchServer) -> None:
    with march_server.conn() as c:
        c.call("SEQ.CREATE", "ts", "TIMESTAMP", "PRESET", "js53", "LOOKAHEAD", "5000")
        c.call("INCRBY", "ts", 100_000)  # 24 ms of 4096 slots: at least 24 carries
        info = as_dict(c.call("SEQ.INFO", "ts"))
        assert info[b"type"] == b"timestamp" and info[b"preset"] == b"js53"
        assert info[b"lookahead_ms"] == 5000
        assert info[b"carries"] >= 24 and info[b"issued"] == 100_000
        assert 0 <= info[b"lead_ms"] <= 5000
        assert 0 < info[b"bound_ahead_ms"] <= 5000 + 100
        assert info[b"runs_out"].startswith(b"2089-")
        for field in (b"logical_time", b"wall_time", b"ceiling", b"ceiling_time", b"watermark", b"store_writes"):
            assert field in info


def test_pipelined_incrs_stay_unique_and_increasing(march_server: MarchServer) -> None:
    with march_server.conn() as c:
        c.call("SEQ.CREATE", "snow", "TIMESTAMP")
        c.call("SEQ.CREATE", "sony", "TIMESTAMP", "PRESET", "sonyflake")
        for key in ("snow", "sony"):
            c.send(encode("INCR", key) * 5000)  # runs of identical INCRs take the server's batch path
            ids = [c.read_reply() for _ in range(5000)]
            assert ids == sorted(set(ids)), key
        replies = c.call("MULTI"), c.call("INCR", "snow"), c.call("INCRBY", "snow", 3), c.call("EXEC")
        assert replies[-1][0] < replies[-1][1]


ERR_CASES = [
    (("SEQ.CREATE", "x", "TIMESTAMP", "PRESET"), errors.SYNTAX),
    (("SEQ.CREATE", "x", "TIMESTAMP", "PRESET", "twitter"), errors.TS_PRESET.format("twitter")),
    (("SEQ.CREATE", "x", "TIMESTAMP", "TIMEBITS", "42", "SEQBITS", "12"), errors.TS_BITS.format("42+10+12")),
    (("SEQ.CREATE", "x", "TIMESTAMP", "TIMEBITS", "0"), errors.TS_BITS.format("0+10+12")),
    (("SEQ.CREATE", "x", "TIMESTAMP", "NODEBITS", "-1"), errors.TS_BITS.format("41+-1+12")),
    (("SEQ.CREATE", "x", "TIMESTAMP", "NODE", "1024"), errors.TS_NODE.format(1024, 10, 1023)),
    (("SEQ.CREATE", "x", "TIMESTAMP", "PRESET", "js53", "NODE", "1"), errors.TS_NODE.format(1, 0, 0)),
    (("SEQ.CREATE", "x", "TIMESTAMP", "EPOCH", "-5"), errors.TS_EPOCH),
    (("SEQ.CREATE", "x", "TIMESTAMP", "ORDER", "seq,node,time"), errors.TS_ORDER),
    (("SEQ.CREATE", "x", "TIMESTAMP", "ORDER", "time,seq"), errors.TS_ORDER),
    (("SEQ.CREATE", "x", "TIMESTAMP", "UNIT", "0"), errors.TS_UNIT),
    (("SEQ.CREATE", "x", "TIMESTAMP", "UNIT", "1.5"), errors.NOT_INTEGER),
    (("SEQ.CREATE", "x", "TIMESTAMP", "NODE", "one"), errors.NOT_INTEGER),
    (("SEQ.CREATE", "x", "TIMESTAMP", "EPOCH", "99999999999999999999"), errors.NOT_INTEGER),
    (("SEQ.CREATE", "x", "TIMESTAMP", "LOOKAHEAD", "0"), errors.TS_LOOKAHEAD.format(1, 86400000)),
    (("SEQ.CREATE", "x", "TIMESTAMP", "LOOKAHEAD", "86400001"), errors.TS_LOOKAHEAD.format(1, 86400000)),
    (("SEQ.CREATE", "x", "TIMESTAMP", "FLOOR", "-1"), errors.SET_NEGATIVE),
    (("SEQ.CREATE", "x", "TIMESTAMP", "PRESET", "js53", "FLOOR", str(1 << 53)), errors.TS_FLOOR.format(1 << 53, 0)),
    (("SEQ.CREATE", "x", "TIMESTAMP", "START", "5"), errors.SYNTAX),
    (("SEQ.CREATE", "x", "TIMESTAMP", "TIMEBITS", "10", "UNIT", "1000"), None),  # ended in 1970 + 17 min
    (("SEQ.CREATE",), errors.WRONG_ARITY.format("seq.create")),
    (("SEQ.DECODE", "ts"), errors.WRONG_ARITY.format("seq.decode")),
    (("SEQ.DECODE", "ts", "1", "2"), errors.WRONG_ARITY.format("seq.decode")),
    (("SEQ.DECODE", "nope", "1"), errors.NO_SUCH_KEY.format("nope")),
    (("SEQ.DECODE", "plain", "1"), errors.WRONGTYPE),
    (("SEQ.DECODE", "ts", "-1"), errors.TS_NOT_AN_ID.format(-1, (1 << 63) - 1)),
    (("SEQ.DECODE", "js", str(1 << 53)), errors.TS_NOT_AN_ID.format(1 << 53, (1 << 53) - 1)),
    (("SEQ.DECODE", "ts", "abc"), errors.NOT_INTEGER),
    (("SEQ.CREATE", "ts", "TIMESTAMP"), errors.KEY_EXISTS.format("ts")),
    (("INCRBY", "ts", "0"), errors.INCRBY_NOT_POSITIVE),
    (("SET", "ts", "1"), None),  # below the watermark: refused (message carries the watermark)
    (("DEBUG", "CLOCK-OFFSET", "-5"), errors.DEBUG_DISABLED),
    (("DEBUG",), errors.WRONG_ARITY.format("debug")),
]


def test_bad_inputs_get_redis_style_errors_and_the_server_lives_on(march_server: MarchServer) -> None:
    with march_server.conn() as c:
        assert c.call("SEQ.CREATE", "ts", "TIMESTAMP") == "OK"
        assert c.call("SEQ.CREATE", "js", "TIMESTAMP", "PRESET", "js53") == "OK"
        assert c.call("INCR", "plain") == 1
        for args, expected in ERR_CASES:
            reply = c.call(*args)
            assert isinstance(reply, RespError), (args, reply)
            if expected is None:
                assert reply.prefix == "ERR", (args, reply)
            else:
                assert reply.message == expected, args
        assert c.call("PING") == "PONG"
        assert c.call("SEQ.LIST") == [b"js", b"plain", b"ts"]  # no failed create left a key behind
        assert c.call("SEQ.CREATE", "seq", "START", "5") == "OK"  # the sequence form still works
        assert c.call("INCR", "seq") == 5


def test_floor_and_set_migrate_from_an_older_snowflake_generator(march_server: MarchServer) -> None:
    snow = PRESETS["snowflake"]
    now = snow.units_at(int(time.time() * 1000))
    old_max = snow.encode(now + 60_000, 1023, 4095)  # the table's highest ID: node 1023, a minute ahead
    with march_server.conn() as c:
        assert c.call("SEQ.CREATE", "orders", "TIMESTAMP", "FLOOR", old_max) == "OK"
        first = c.call("INCR", "orders")
        assert first > old_max
        assert snow.decode(first)[1:] == (0, 0)
        later = snow.encode(now + 120_000, 7, 0)  # a second import, further ahead
        assert c.call("SET", "orders", later) == "OK"
        assert int(c.call("GET", "orders")) >= later
        assert c.call("INCR", "orders") > later
        assert c.call("SET", "orders", first).prefix == "ERR"  # never backwards
        assert c.call("SET", "orders", 1, "NX") is None


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_a_restart_continues_above_the_saved_bound(march_server: MarchServer, how: str) -> None:
    with march_server.conn() as c:
        c.call("SEQ.CREATE", "ts", "TIMESTAMP", "LOOKAHEAD", "60000")  # a bound a minute ahead: easy to see
        seen = [c.call("INCR", "ts") for _ in range(100)]
        saved = as_dict(c.call("SEQ.INFO", "ts"))[b"ceiling"]
        layout = layout_of(c, "ts")
    if how == "sigterm":
        assert march_server.stop() == 0
    else:
        march_server.kill(signal.SIGKILL)
    march_server.start()
    with march_server.conn() as c:
        assert int(c.call("GET", "ts")) >= max(seen)
        after = c.call("INCR", "ts")
        assert after > max(seen)
        assert isinstance(saved, int) and layout.decode(after)[0] >= saved  # nothing below the saved bound
        assert as_dict(c.call("SEQ.INFO", "ts"))[b"lead_ms"] > 50_000


def test_debug_clock_offset(march_factory: Factory) -> None:
    server = march_factory(extra_args=DEBUG)
    with server.conn() as c:
        assert c.call("DEBUG", "CLOCK-OFFSET") == 0
        assert c.call("DEBUG", "CLOCK-OFFSET", "-3600000") == "OK"
        assert c.call("DEBUG", "CLOCK-OFFSET") == -3_600_000
        assert c.call("DEBUG", "CLOCK-OFFSET", "x") == RespError(errors.NOT_INTEGER)
        assert c.call("DEBUG", "CLOCK-OFFSET", "1", "2") == RespError(errors.WRONG_ARITY.format("debug|clock-offset"))
        assert c.call("DEBUG", "NOPE").message == errors.UNKNOWN_SUBCOMMAND.format("NOPE", "DEBUG")
        # A layout whose epoch is later than the moved clock is "in the future".
        epoch = int(time.time() * 1000) - 60_000
        assert c.call("SEQ.CREATE", "ts", "TIMESTAMP", "EPOCH", epoch).message.startswith("ERR EPOCH")


def test_the_clock_jumps_back_10_s_under_load(march_factory: Factory) -> None:
    """Four clients INCR and one INCRBY while the server's clock goes back 10 s, then forwards again:
    0 duplicates, 0 decreases, real-time order kept (``check_history``)."""
    server = march_factory(extra_args=DEBUG)
    with server.conn() as c:
        c.call("SEQ.CREATE", "ts", "TIMESTAMP")
    history = History()
    stop = threading.Event()
    failures: list[BaseException] = []
    slowest = [0.0]

    def client(name: str, args: tuple[str, ...]) -> None:
        try:
            with RespConn(server.port, timeout=10) as conn:
                while not stop.is_set():
                    sent = History.now()
                    value = conn.call(*args)
                    replied = History.now()
                    assert isinstance(value, int), value
                    history.record(name, sent, replied, value)
                    slowest[0] = max(slowest[0], (replied - sent) / 1e9)
        except BaseException as e:
            failures.append(e)

    threads = [threading.Thread(target=client, args=(f"c{i}", ("INCR", "ts"))) for i in range(4)]
    threads.append(threading.Thread(target=client, args=("batch", ("INCRBY", "ts", "100"))))
    for t in threads:
        t.start()

    def grow(by: int) -> None:
        goal = len(history) + by
        wait_until(lambda: len(history) >= goal or failures, timeout=60, message=f"{by} more IDs")

    try:
        grow(1000)
        with server.conn() as c:
            assert c.call("DEBUG", "CLOCK-OFFSET", "-10000") == "OK"
            lead = as_dict(c.call("SEQ.INFO", "ts"))[b"lead_ms"]
            assert isinstance(lead, int) and lead >= 9000  # logical time stayed put: 10 s ahead of the clock
        grow(3000)
        with server.conn() as c:
            assert c.call("DEBUG", "CLOCK-OFFSET", "0") == "OK"  # and forwards again
        grow(1000)
    finally:
        stop.set()
        for t in threads:
            t.join(20)
    assert not failures, failures
    counts = check_history(history)
    print(f"clock jump under load: {counts}, slowest request {slowest[0] * 1000:.1f} ms")
