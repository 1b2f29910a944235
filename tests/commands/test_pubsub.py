"""SUBSCRIBE / PSUBSCRIBE / (P)UNSUBSCRIBE (``march.commands.pubsub``) against a real redis-server.

The same requests, on one connection each, to March and to Redis 7: the replies byte for byte
(confirmations, UNSUBSCRIBE with nothing subscribed, the subscribed-mode error for a command and a
subcommand, PING's ``["pong", ""]``, RESET leaving subscribed mode; RESP3 push frames). Then what
March adds: the bound on subscriptions per connection. The message itself (``+switch-master``) is
tested on a cluster (``tests/cluster/test_sentinel.py``).
"""

from __future__ import annotations

from support.resp import RespConn, encode
from support.servers import MarchServer, RedisServer

from march.pubsub import MAX_SUBSCRIPTIONS

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
