"""SUBSCRIBE / PSUBSCRIBE / (P)UNSUBSCRIBE (``march.commands.pubsub``) against a real redis-server.

The same requests, on one connection each, to March and to Redis 7: the replies byte for byte
(confirmations, UNSUBSCRIBE with nothing subscribed, the subscribed-mode error for a command and a
subcommand, PING's ``["pong", ""]``, RESET leaving subscribed mode; RESP3 push frames), long
patterns too (decided in slices: the replies are the same). Then what March adds: the bounds on
subscriptions per connection (count, name length, bytes held) and the memory they take; which
subscriptions hear ``+switch-master`` (decided when they are made, as a glob match would). The
message itself is tested on a cluster (``tests/cluster/test_sentinel.py``); the flood in
``tests/commands/test_pubsub_flood.py``.
"""

from __future__ import annotations

import tracemalloc

import pytest
from march_harness.resp import RespConn, RespError, encode
from march_harness.servers import MarchServer, RedisServer

from march.cluster.announce import MAX_HELD, MAX_NAME, MAX_SUBSCRIPTIONS, SWITCH_MASTER, PubSub, Subscriber, hears
from march.cluster.directory import NodeInfo
from march.commands.pubsub import SLICE_BYTES, SYNC_BYTES
from march.glob import compile_glob

pytestmark = pytest.mark.e2e

SESSION = [
    ["UNSUBSCRIBE"],
    ["PUNSUBSCRIBE"],
    ["SUBSCRIBE", "a", "b"],
    ["INCR", "pubsub:x"],
    ["PING"],
    ["PING", "hi"],
    ["CONFIG", "GET", "maxclients"],
    ["PSUBSCRIBE", "*"],
    ["SUBSCRIBE", "a"],
    ["UNSUBSCRIBE", "a"],
    ["PUNSUBSCRIBE", "q"],
    ["UNSUBSCRIBE"],
    ["PUNSUBSCRIBE"],
    ["PING"],  # out of subscribed mode: +PONG again
    ["SUBSCRIBE", "c"],
    ["RESET"],
    ["PING"],
]


def session(port: int, requests: list[list[str]], hello3: bool = False) -> bytes:
    """The replies to ``requests`` sent one at a time (each SUBSCRIBE answers one frame per name)."""
    out = []
    with RespConn(port) as c:
        if hello3:
            c.call("HELLO", "3")
        for r in requests:
            c.send(encode(*r))
            frames = max(1, len(r) - 1) if r[0].endswith("SUBSCRIBE") and len(r) > 1 else 1
            if r[0] in ("UNSUBSCRIBE", "PUNSUBSCRIBE") and len(r) == 1:
                frames = -1  # as many as were held: read what arrives
            if frames < 0:
                out.append(c.read_available(0.3))
            else:
                out.extend(c.read_reply_raw() for _ in range(frames))
    return b"".join(out)


def test_replies_and_subscribed_mode_are_redis_own(march_proc: MarchServer, redis_proc: RedisServer) -> None:
    theirs = session(redis_proc.port, SESSION)
    ours = session(march_proc.port, SESSION)
    assert ours == theirs
    assert b"Can't execute 'incr'" in ours and b"Can't execute 'config|get'" in ours
    assert b"*2\r\n$4\r\npong\r\n$0\r\n\r\n" in ours


def test_resp3_pushes_and_no_subscribed_mode(march_proc: MarchServer, redis_proc: RedisServer) -> None:
    requests = [["SUBSCRIBE", "a"], ["PING"], ["PSUBSCRIBE", "x*"], ["UNSUBSCRIBE", "a"]]
    theirs = session(redis_proc.port, requests, hello3=True)
    ours = session(march_proc.port, requests, hello3=True)
    assert ours == theirs
    assert ours.startswith(b">3\r\n$9\r\nsubscribe\r\n") and b"+PONG\r\n" in ours


def test_subscriptions_per_connection_are_bounded(march_proc: MarchServer) -> None:
    with RespConn(march_proc.port) as c:
        names = [f"ch{i}" for i in range(MAX_SUBSCRIPTIONS)]
        c.send(encode("SUBSCRIBE", *names))
        last = [c.read_reply() for _ in names][-1]
        assert last == [b"subscribe", names[-1].encode(), MAX_SUBSCRIPTIONS]
        refused = c.call("PSUBSCRIBE", "one-more*")
        assert type(refused).__name__ == "RespError" and "too many subscriptions" in str(refused)
        assert c.call("SUBSCRIBE", "ch0") == [b"subscribe", b"ch0", MAX_SUBSCRIPTIONS]  # held already: fine
        assert c.call("PING") == [b"pong", b""]  # still subscribed, still answered
        long = c.call("SUBSCRIBE", "x" * 2000)
        assert type(long).__name__ == "RespError" and "too long" in str(long)


def test_bytes_held_per_connection_are_bounded(march_proc: MarchServer) -> None:
    """16 names of 1 KiB each pass the count and the length, not the bytes: refused whole."""
    with RespConn(march_proc.port) as c:
        refused = c.call("PSUBSCRIBE", *[f"{i:04d}".encode() * 256 for i in range(16)])
        assert refused == RespError(
            f"ERR too many subscription bytes on this connection (names of at most {MAX_HELD} bytes together)"
        )
        assert c.call("PING") == "PONG"  # nothing subscribed
        full = [f"{i}".encode() * MAX_NAME for i in range(MAX_HELD // MAX_NAME)]
        c.send(encode("PSUBSCRIBE", *full))
        assert [c.read_reply()[2] for _ in full] == list(range(1, len(full) + 1))
        assert c.call("PSUBSCRIBE", full[0]) == [b"psubscribe", full[0], len(full)]  # held already: no new bytes
        assert isinstance(c.call("SUBSCRIBE", "x"), RespError)  # a channel's bytes count too
        assert c.call("PUNSUBSCRIBE", full[0]) == [b"punsubscribe", full[0], len(full) - 1]
        assert c.call("SUBSCRIBE", "x") == [b"subscribe", b"x", len(full)]


def long_patterns() -> list[list[str]]:
    """PSUBSCRIBE requests past ``SYNC_BYTES`` (decided in slices, the third over several steps), with
    a repeat and a held one: under ``MAX_HELD`` in all (past it, March refuses what Redis takes)."""
    kib = ["[ab]*" * 100, "x" * 500, "*" * 499 + "?", "a?" * 250]
    return [
        ["PSUBSCRIBE", "p" * (SYNC_BYTES + 1)],
        ["PSUBSCRIBE", *kib[:2], kib[0], "short"],
        ["PSUBSCRIBE", *kib[2:], "q" * SLICE_BYTES],
        ["PSUBSCRIBE", "p" * (SYNC_BYTES + 1), "+switch-*"],
        ["PUNSUBSCRIBE", kib[1]],
        ["PING"],
    ]


def test_long_patterns_answer_as_redis(march_proc: MarchServer, redis_proc: RedisServer) -> None:
    requests = long_patterns()
    assert session(march_proc.port, requests) == session(redis_proc.port, requests)
    assert session(march_proc.port, requests, hello3=True) == session(redis_proc.port, requests, hello3=True)


class Sent(list[bytes]):
    def __call__(self, data: bytes) -> None:
        self.append(data)


HEARS = [b"*", b"+switch-master", b"+switch-*", b"*master", b"[+]s?itch-m*r", b"\\+switch-master", b"*-*"]
DEAF = [b"+switch", b"switch-master", b"x*", b"*+switch-master?", b"+switch-master" * 70, b"[ab]" * 256, b"?" * 15]


def test_which_subscriptions_hear_switch_master() -> None:
    """Decided once per pattern, as matching it against ``+switch-master`` would: a publish sends one
    message per subscription that hears, looking at each subscriber once."""
    for pattern in HEARS + DEAF:
        assert hears(pattern) == compile_glob(pattern).match(SWITCH_MASTER), pattern
    pubsub, sent = PubSub(), Sent()
    listener = pubsub.get(1, lambda: Subscriber(sent, lambda: 2, False))
    for pattern in HEARS + DEAF:
        listener.psubscribe(pattern, hears(pattern))
    listener.subscribe(SWITCH_MASTER)
    listener.subscribe(b"other")
    pubsub.get(2, lambda: Subscriber(sent, lambda: 3, False)).psubscribe(b"nothing*", False)
    old, new = NodeInfo("a", "10.0.0.1:7379"), NodeInfo("b", "10.0.0.2:7379")
    assert pubsub.switch_master(b"march", old, new) == len(HEARS) + 1
    body = b"march 10.0.0.1 7379 10.0.0.2 7379"
    assert sent[0] == encode("message", SWITCH_MASTER, body)
    assert sent[1:] == [encode("pmessage", p, SWITCH_MASTER, body) for p in HEARS]
    listener.unsubscribe(SWITCH_MASTER)
    for pattern in HEARS:
        listener.punsubscribe(pattern)
    assert listener.hearing == 0 and pubsub.switch_master(b"march", old, new) == 0


def test_the_memory_of_a_full_subscription_is_bounded() -> None:
    """What one connection holds at its bounds (the names, a bool per pattern, the structure): under
    6 KB, as ``march.cluster.announce`` documents; compiled, 16 patterns of 1 KiB took 117 KB."""
    shapes = [
        [(b"%04d" % i) * (MAX_HELD // 4 // MAX_SUBSCRIPTIONS) for i in range(MAX_SUBSCRIPTIONS)],
        [(b"%d" % i) * MAX_NAME for i in range(MAX_HELD // MAX_NAME)],
    ]
    for names in shapes:
        names = [bytes(n) for n in names]  # (fresh objects, counted below)
        pubsub = PubSub()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            sub = pubsub.get(7, lambda: Subscriber(lambda data: None, lambda: 2, False))
            for i, name in enumerate(names):
                if i % 2:
                    sub.psubscribe(bytes(name), hears(name))
                else:
                    sub.subscribe(bytes(name))
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert sub.held <= MAX_HELD
        assert held < 6000, held


@pytest.mark.parametrize("size", [SYNC_BYTES, SYNC_BYTES + 1, 4 * SLICE_BYTES])
def test_a_psubscribe_of_any_size_is_one_answer_per_pattern(march_proc: MarchServer, size: int) -> None:
    """At the sync bound, past it and sliced over several steps: a reply per pattern, in order,
    with the requests pipelined behind it answered after it."""
    names = [b"%d-" % i + b"z" * (size // 4 - 3) for i in range(4)]
    with RespConn(march_proc.port) as c:
        c.send(encode("PSUBSCRIBE", *names) + encode("PING") + encode("PUNSUBSCRIBE") + encode("PING"))
        assert [c.read_reply() for _ in names] == [[b"psubscribe", n, i + 1] for i, n in enumerate(names)]
        assert c.read_reply() == [b"pong", b""]
        assert [c.read_reply() for _ in names] == [[b"punsubscribe", n, 3 - i] for i, n in enumerate(names)]
        assert c.read_reply() == "PONG"


def pipelined(port: int) -> bytes:
    """SUBSCRIBE and the commands after it in one write (the server reads them at once), then
    SUBSCRIBE inside MULTI (Redis runs it in EXEC: the connection is subscribed after it)."""
    with RespConn(port) as c:
        c.send(b"".join(encode(*r) for r in (["SUBSCRIBE", "a"], ["INCR", "pubsub:y"], ["PING"], ["UNSUBSCRIBE", "a"])))
        replies = [c.read_reply_raw() for _ in range(4)]
        c.send(b"".join(encode(*r) for r in (["MULTI"], ["SUBSCRIBE", "m"], ["EXEC"], ["GET", "pubsub:y"])))
        replies += [c.read_reply_raw() for _ in range(4)]
        return b"".join(replies)


def test_pipelined_requests_after_subscribe_are_checked(march_proc: MarchServer, redis_proc: RedisServer) -> None:
    """The INCR read with the SUBSCRIBE is refused too (a subscribed connection leaves the fast path)."""
    ours = pipelined(march_proc.port)
    assert ours == pipelined(redis_proc.port)
    assert b"Can't execute 'incr'" in ours and b"Can't execute 'get'" in ours


def client_line(port: int) -> dict[str, str]:
    """The CLIENT LIST fields of a connection subscribed to two channels and one pattern."""
    with RespConn(port) as sub, RespConn(port) as other:
        sub.call("CLIENT", "SETNAME", "listener")
        sub.send(encode("SUBSCRIBE", "a", "b"))
        sub.read_reply(), sub.read_reply()
        sub.call("PSUBSCRIBE", "x*")
        lines = other.call("CLIENT", "LIST").decode().splitlines()
        line = next(line for line in lines if "name=listener" in line)
        return {k: v for k, _, v in (f.partition("=") for f in line.split()) if k in ("flags", "sub", "psub")}


def test_client_list_counts_subscriptions(march_proc: MarchServer, redis_proc: RedisServer) -> None:
    assert client_line(march_proc.port) == client_line(redis_proc.port) == {"flags": "P", "sub": "2", "psub": "1"}
