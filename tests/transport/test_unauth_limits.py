"""Redis' limits for clients that have not authenticated (CVE-2021-32675), exact bytes, on march and
on a redis-server with the same password: more than 10 arguments, or an argument over 16384 bytes,
is refused at its header, so an unauthenticated client cannot make the server hold large requests.
Once AUTH succeeds (also when it is pipelined with what follows) the normal limits apply.

The parser has the limits (tests/test_resp.py); the server turns them on by pointing the parser at
the connection's client (``parser.auth_source = client``).
"""

from __future__ import annotations

import pytest
from march_harness import MarchServer, RedisServer
from march_harness.raw import PASSWORD, Raw, mb

pytestmark = pytest.mark.e2e

Server = MarchServer | RedisServer


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b"*11\r\n", b"unauthenticated multibulk length"),
        (b"*100\r\n", b"unauthenticated multibulk length"),
        (b"*2\r\n$4\r\nAUTH\r\n$16385\r\n", b"unauthenticated bulk length"),
        (mb("PING") + b"*1\r\n$100000\r\n", b"unauthenticated bulk length"),
        # over March's own max_bulk (1 MiB) but not Redis' (512 MiB): Redis' unauthenticated limit first
        (b"*1\r\n$100000000\r\n", b"unauthenticated bulk length"),
        (b"*1\r\n$600000000\r\n", b"invalid bulk length"),  # over Redis' own limit too
    ],
    ids=["11-arguments", "100-arguments", "16385-bytes", "after-a-request", "100-MB", "600-MB"],
)
def test_large_requests_before_auth_are_refused_at_the_header(locked: Server, payload: bytes, error: bytes) -> None:
    with Raw(locked.port) as c:
        c.send(payload)
        noauth = b"-NOAUTH Authentication required.\r\n" if payload.startswith(mb("PING")) else b""
        c.expect_closed(noauth + b"-ERR Protocol error: " + error + b"\r\n", timeout=2)


def test_requests_at_the_limits_before_auth(locked: Server) -> None:
    with Raw(locked.port) as c:
        c.call(mb("AUTH", "x" * 16384), b"-WRONGPASS invalid username-password pair or user is disabled.\r\n")
        c.call(mb(*["PING"] * 10), b"-NOAUTH Authentication required.\r\n")
        c.call(b"PING\r\n", b"-NOAUTH Authentication required.\r\n")  # still open


def test_after_auth_the_normal_limits_apply(locked: Server) -> None:
    big = b"y" * 20000
    with Raw(locked.port) as c:
        c.call(mb("AUTH", PASSWORD), b"+OK\r\n")
        c.call(mb("ECHO", big), b"$20000\r\n" + big + b"\r\n")
        c.call(mb("MGET", *[f"unauth:{i}" for i in range(11)]), b"*11\r\n" + b"$-1\r\n" * 11)
    with Raw(locked.port) as c:  # AUTH pipelined with a large request in the same write
        c.call(mb("AUTH", PASSWORD) + mb("ECHO", big), b"+OK\r\n$20000\r\n" + big + b"\r\n")
