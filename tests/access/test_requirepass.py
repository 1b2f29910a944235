"""``--requirepass``: NOAUTH before AUTH, WRONGPASS, AUTH in both forms, HELLO 3 AUTH, RESET and QUIT
without authentication; and AUTH on a server with no password. Exact bytes, the same on march and on a
redis-server started with the same password.
"""

from __future__ import annotations

import pytest
from march_harness import MarchServer, Pair, RedisServer
from march_harness.raw import PASSWORD, Raw, mb

pytestmark = pytest.mark.e2e

NOAUTH = b"-NOAUTH Authentication required.\r\n"
WRONGPASS = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
# Redis 7.0 says "the HELLO AUTH <user> <pass> option", 7.2 and march "the HELLO <proto> AUTH ...":
# only the part both share is compared.
HELLO_NOAUTH = b"-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO "

Server = MarchServer | RedisServer


def test_noauth_before_auth(locked: Server) -> None:
    with Raw(locked.port) as c:
        c.call(mb("PING"), NOAUTH)
        c.call(mb("INCR", "auth:k"), NOAUTH)
        c.call(b"GET auth:k\r\n", NOAUTH)
        c.call(mb("MULTI"), NOAUTH)
        c.call(mb("NOSUCHCOMMAND"), b"-ERR unknown command 'NOSUCHCOMMAND', with args beginning with: \r\n")
        c.call(mb("PING"), NOAUTH)  # the connection stays open


def test_wrong_password(locked: Server) -> None:
    with Raw(locked.port) as c:
        c.call(mb("AUTH", "nope"), WRONGPASS)
        c.call(mb("AUTH", "default", "nope"), WRONGPASS)
        c.call(mb("AUTH", "someone", PASSWORD), WRONGPASS)
        c.call(mb("AUTH", "a", "b", "c"), b"-ERR syntax error\r\n")
        c.call(mb("AUTH"), b"-ERR wrong number of arguments for 'auth' command\r\n")
        c.call(mb("PING"), NOAUTH)


@pytest.mark.parametrize("auth", [mb("AUTH", PASSWORD), mb("AUTH", "default", PASSWORD)], ids=["pass", "user-pass"])
def test_auth_then_commands(locked: Server, auth: bytes) -> None:
    with Raw(locked.port) as c:
        c.call(auth, b"+OK\r\n")
        c.call(mb("PING"), b"+PONG\r\n")
        c.call(mb("EXISTS", "auth:none"), b":0\r\n")
        c.call(mb("AUTH", "wrong"), WRONGPASS)  # a failed AUTH does not log an authenticated client out
        c.call(mb("PING"), b"+PONG\r\n")


def test_pipelined_authentication(locked: Server) -> None:
    # one write: the state each request sees is the one left by the request before it
    with Raw(locked.port) as c:
        c.call(
            mb("INCR", "auth:pipe")
            + mb("AUTH", PASSWORD)
            + mb("INCR", "auth:pipe")
            + mb("GET", "auth:pipe")
            + mb("RESET")
            + mb("INCR", "auth:pipe")
            + mb("GET", "auth:pipe")
            + mb("AUTH", "default", PASSWORD)
            + mb("GET", "auth:pipe"),
            NOAUTH + b"+OK\r\n:1\r\n$1\r\n1\r\n+RESET\r\n" + NOAUTH + NOAUTH + b"+OK\r\n$1\r\n1\r\n",
        )


def test_hello_needs_authentication(locked: Server) -> None:
    with Raw(locked.port) as c:
        c.send(mb("HELLO", "3"))
        line = c.read_line()
        assert line.startswith(HELLO_NOAUTH) and line.endswith(
            b" to authenticate the client and select the RESP protocol version at the same time\r\n"
        )
        c.call(mb("HELLO", "3", "AUTH", "default", "nope"), WRONGPASS)
        c.call(mb("GET", "auth:none"), NOAUTH)


def test_hello_3_auth(locked: Server) -> None:
    with Raw(locked.port) as c:
        c.send(mb("HELLO", "3", "AUTH", "default", PASSWORD))
        assert c.read_reply().startswith(b"%7\r\n")
        c.call(mb("GET", "auth:none"), b"_\r\n")  # authenticated and on RESP3


def test_reset_logs_out(locked: Server) -> None:
    with Raw(locked.port) as c:
        c.call(mb("AUTH", PASSWORD), b"+OK\r\n")
        c.call(mb("RESET"), b"+RESET\r\n")
        c.call(mb("PING"), NOAUTH)


def test_quit_without_authentication(locked: Server) -> None:
    with Raw(locked.port) as c:
        c.send(mb("QUIT"))
        c.expect_closed(b"+OK\r\n")


def test_auth_without_a_password_configured(server: Server) -> None:
    with Raw(server.port) as c:
        c.call(
            mb("AUTH", "x"),
            b"-ERR AUTH <password> called without any password configured for the default user. "
            b"Are you sure your configuration is correct?\r\n",
        )
        c.call(mb("AUTH", "default", "anything"), b"+OK\r\n")  # the default user has no password
        c.call(mb("AUTH", "someone", "anything"), WRONGPASS)
        c.call(mb("PING"), b"+PONG\r\n")


def test_config_get_masks_the_password(locked_pair: Pair) -> None:
    with Raw(locked_pair.march.port) as c:
        c.call(mb("AUTH", PASSWORD), b"+OK\r\n")
        c.send(mb("CONFIG", "GET", "requirepass"))
        assert PASSWORD.encode() not in c.read_reply()
