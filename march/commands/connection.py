"""Connection commands: PING, ECHO, HELLO, AUTH, SELECT, CLIENT, QUIT, RESET.

AUTH and HELLO ... AUTH check a user's password (``march.auth``): ``AUTH password`` is the
``default`` user's (``requirepass``), ``AUTH user password`` any user's. A failure is WRONGPASS,
counted in INFO (``acl_access_denied_auth``), recorded in ACL LOG (never the password) and
logged (the first on a connection, then every hundredth). Failures are throttled per source
address and per user across connections (``auth.AuthThrottle``): after three, attempts wait
their turn (50 ms apart, doubling to 2 s), and one that would wait longer than a few seconds is
refused unchecked, so reconnecting gains a guesser nothing. ``HELLO ... SETNAME`` goes through
the ACL check of ``CLIENT SETNAME`` and the same name rules (at most ``MAX_CLIENT_NAME`` bytes,
no spaces or special characters), checked before HELLO changes anything. HELLO reports
``server: redis`` and a Redis version (the command set March follows) because clients and tools
branch on them; INFO shows March's own version.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from functools import partial
from typing import TYPE_CHECKING, Any

from .. import errors
from ..app import REDIS_COMPAT_VERSION
from ..errors import CommandError
from .args import parse_int
from .dispatch import refuse
from .registry import check_subcommand, command

if TYPE_CHECKING:
    from ..client import Client

log = logging.getLogger("march")

# A name shows in every CLIENT LIST line and log line of its connection: 256 bytes hold a host,
# a pod and a process id (Redis has no limit; one client's name must not cost every listing).
MAX_CLIENT_NAME = 256

_CONN = ("@fast", "@connection", "@app")
# Commands a client may send before it has authenticated.
_handshake = partial(
    command,
    flags=("noscript", "loading", "stale", "fast", "no_auth", "allow_busy"),
    categories=_CONN,
    group="connection",
)


@command("ping", -1, ("fast", "stale"), _CONN, summary="Reply PONG, or the message given.", group="connection")
def ping(client: Client, args: list[bytes]) -> Any:
    if len(args) > 2:
        raise errors.wrong_arity("ping")
    return "PONG" if len(args) == 1 else args[1]


@command("echo", 2, ("fast",), _CONN, summary="Reply the message given.", group="connection", hot=True)
def echo(client: Client, args: list[bytes]) -> Any:
    return args[1]


def _authenticate(client: Client, name: bytes, password: bytes) -> Any:
    """AUTH name password: "OK", WRONGPASS, or (throttled, see ``auth.AuthThrottle``) a coroutine
    that waits for this attempt's turn and then answers one of them."""
    app = client.app
    if not app.users.loaded:
        raise CommandError(errors.CLUSTERDOWN)  # nobody is known yet (etcd has not answered since the start)
    username = name.decode("utf-8", "replace")
    host = client.addr.rpartition(":")[0]
    wait = app.auth_throttle.admit(host, username)
    if wait is None:  # others from this address (or for this user) are queued far ahead: not even checked
        _failed(client, username, logged=False)  # (unchecked: a flood of these writes no log lines)
        raise CommandError(errors.AUTH_THROTTLED)
    if wait > 0:
        return _check_later(client, username, password, wait)
    return _check(client, username, password)


def _check(client: Client, username: str, password: bytes) -> str:
    app = client.app
    host = client.addr.rpartition(":")[0]
    user = app.users.authenticate(username, password)
    if user is not None:
        client.login(user)
        client.auth_failures = 0
        app.auth_throttle.succeeded(host, username)
        return "OK"
    app.auth_throttle.failed(host, username)
    _failed(client, username)
    raise CommandError(errors.WRONGPASS)


def _failed(client: Client, username: str, logged: bool = True) -> None:
    """Count, record (ACL LOG) and log (not every one) a failed AUTH; never the password."""
    app = client.app
    client.auth_failures += 1
    app.stats.denied_auth += 1
    app.acl_log.add("auth", "multi" if client.multi is not None else "toplevel", "AUTH", username, client.info_line())
    failures = client.auth_failures
    if logged and (failures == 1 or failures % 100 == 0):
        log.warning("AUTH failed for user %r from %s (%d on this connection)", username, client.addr, failures)


async def _check_later(client: Client, username: str, password: bytes, wait: float) -> str:
    """This attempt's turn comes after ``wait`` seconds (this connection waits, others don't)."""
    try:
        await asyncio.sleep(wait)
    except BaseException:  # the connection went away before its turn
        client.app.auth_throttle.abandoned(client.addr.rpartition(":")[0], username)
        raise
    return _check(client, username, password)


@_handshake("auth", -2, summary="Authenticate: AUTH password (the default user), or AUTH username password.")
def auth(client: Client, args: list[bytes]) -> Any:
    if len(args) > 3:
        raise CommandError(errors.SYNTAX)
    if len(args) == 2:
        if not client.app.users.loaded:  # (default is unknown yet, not password-less)
            raise CommandError(errors.CLUSTERDOWN)
        if client.app.users.default.nopass:
            raise CommandError(errors.AUTH_NOT_CONFIGURED)
        return _authenticate(client, b"default", args[1])
    return _authenticate(client, args[1], args[2])


@_handshake("hello", -1, summary="Handshake: HELLO [protover [AUTH user pass] [SETNAME name]].")
def hello(client: Client, args: list[bytes]) -> Any:
    proto = client.proto
    i = 1
    if len(args) > 1:
        try:
            proto = int(args[1])
        except ValueError:
            raise CommandError(errors.HELLO_PROTOVER) from None
        if proto not in (2, 3):
            raise CommandError(errors.PROTOCOL_VERSION)
        i = 2
    name: bytes | None = None
    auth_pair: tuple[bytes, bytes] | None = None
    while i < len(args):
        opt = args[i].lower()
        more = len(args) - i - 1
        if opt == b"auth" and more >= 2:
            auth_pair = (args[i + 1], args[i + 2])
            i += 3
        elif opt == b"setname" and more >= 1:
            name = args[i + 1]
            i += 2
        else:
            raise CommandError(errors.HELLO_OPTION.format(args[i].decode("utf-8", "replace")))
    if name is not None:
        _check_name(name)  # before anything changes
    if auth_pair is not None:
        result = _authenticate(client, *auth_pair)
        if result != "OK":  # its turn comes later (throttled): the rest of HELLO after it
            return _hello_after(client, result, proto, name)
    return _hello_rest(client, proto, name)


async def _hello_after(client: Client, authenticated: Awaitable[str], proto: int, name: bytes | None) -> Any:
    await authenticated
    return _hello_rest(client, proto, name)


def _hello_rest(client: Client, proto: int, name: bytes | None) -> Any:
    if not client.authenticated:
        raise CommandError(errors.HELLO_NOAUTH if client.app.users.loaded else errors.CLUSTERDOWN)
    if name is not None:
        if not client.user.may_run("client", "setname"):  # the check CLIENT SETNAME gets
            raise refuse(client, "command", "client|setname")
        _set_name(client, name)
    client.proto = proto
    return {
        b"server": b"redis",
        b"version": REDIS_COMPAT_VERSION.encode(),
        b"proto": proto,
        b"id": client.id,
        b"mode": b"cluster" if client.app.cluster else b"standalone",
        b"role": b"master" if client.app.group.state.leading else b"replica",
        b"modules": [],
    }


@command(
    "select", 2, ("loading", "stale", "fast"), _CONN, summary="Select database 0 (the only one).", group="connection"
)
def select(client: Client, args: list[bytes]) -> Any:
    if parse_int(args[1]) != 0:
        raise CommandError(errors.DB_INDEX)
    return "OK"


@_handshake("quit", -1, queued=False, summary="Close the connection after the reply.")
def quit_(client: Client, args: list[bytes]) -> Any:
    client.close_after = True
    return "OK"


@_handshake(
    "reset", 1, queued=False, summary="Reset the connection's state (protocol, name, transaction, authentication)."
)
def reset(client: Client, args: list[bytes]) -> Any:
    client.reset()
    return "RESET"


def _check_name(name: bytes) -> None:
    if len(name) > MAX_CLIENT_NAME:
        raise CommandError(errors.CLIENT_NAME_TOO_LONG.format(MAX_CLIENT_NAME))
    if any(c <= 32 or c > 126 for c in name):
        raise CommandError(errors.CLIENT_NAME)


def _set_name(client: Client, name: bytes) -> None:
    """CLIENT SETNAME and HELLO ... SETNAME: one check (the ACL's on client|setname is the caller's)."""
    _check_name(name)
    client.name = name.decode()


_CLIENT_SUBS = (
    ("id", 2, "This connection's id."),
    ("setname", 3, "Name this connection."),
    ("getname", 2, "This connection's name, or nil."),
    ("setinfo", 4, "Record the client library's name or version."),
    ("info", 2, "One line about this connection."),
    ("list", -2, "One line per connection."),
    ("kill", -3, "Close connections: CLIENT KILL ID n | ADDR ip:port."),
    ("no-evict", 3, "Accepted, no effect."),
    ("no-touch", 3, "Accepted, no effect."),
)


@command(
    "client",
    -2,
    ("noscript", "loading", "stale"),
    ("@slow", "@connection", "@app"),
    summary="Connection introspection: ID, SETNAME, GETNAME, SETINFO, INFO, LIST, KILL.",
    group="connection",
    subcommands=_CLIENT_SUBS,
    # As in Redis: listing and killing other clients is admin work; the rest is the client's own.
    sub_categories={sub: ("@admin", "@slow", "@dangerous", "@connection") for sub in ("list", "kill", "no-evict")},
)
def client_(client: Client, args: list[bytes]) -> Any:
    sub = check_subcommand("client", args)
    n = len(args)
    if sub == b"id" and n == 2:
        return client.id
    if sub == b"setname" and n == 3:
        _set_name(client, args[2])
        return "OK"
    if sub == b"getname" and n == 2:
        return client.name.encode() if client.name else None
    if sub == b"setinfo" and n == 4:
        attr = args[2].lower()
        value = args[3].decode("utf-8", "replace")
        if any(c in value for c in " \n\r"):
            raise CommandError(errors.CLIENT_INFO_VALUE.format(args[2].decode("utf-8", "replace")))
        if attr == b"lib-name":
            client.lib_name = value
        elif attr == b"lib-ver":
            client.lib_ver = value
        else:
            raise CommandError(errors.CLIENT_OPTION.format(args[2].decode("utf-8", "replace")))
        return "OK"
    if sub == b"info" and n == 2:
        from ..resp import Verbatim

        return Verbatim(client.info_line() + "\n")
    if sub == b"list":
        from ..resp import Verbatim

        lines = [c.info_line() for c in client.app.clients.values()]
        if n > 2:
            if n < 5 or args[2].lower() != b"id":
                raise CommandError(errors.SYNTAX)
            wanted = {int(a) for a in args[3:] if a.isdigit()}
            lines = [c.info_line() for c in client.app.clients.values() if c.id in wanted]
        return Verbatim("".join(line + "\n" for line in lines))
    if sub == b"kill" and n >= 3:
        return _kill(client, args)
    if sub in (b"no-evict", b"no-touch") and n == 3:
        return "OK"
    if sub == b"help":
        return [f"CLIENT {s.upper()}: {text}".encode() for s, _, text in _CLIENT_SUBS]
    raise CommandError(errors.UNKNOWN_SUBCOMMAND.format(args[1].decode("utf-8", "replace"), "CLIENT"))


def _kill(client: Client, args: list[bytes]) -> Any:
    app = client.app
    if len(args) == 3:  # old form: CLIENT KILL ip:port
        targets = [c for c in app.clients.values() if c.addr == args[2].decode()]
        if not targets:
            raise CommandError(errors.NO_SUCH_CLIENT)
        for c in targets:
            app.closers[c.id]()
        return "OK"
    if len(args) % 2 != 0:
        raise CommandError(errors.SYNTAX)
    chosen = list(app.clients.values())
    for i in range(2, len(args), 2):
        opt, val = args[i].lower(), args[i + 1].decode("utf-8", "replace")
        if opt == b"id":
            if not val.isdigit():
                raise CommandError(errors.CLIENT_ID)
            chosen = [c for c in chosen if c.id == int(val)]
        elif opt == b"addr":
            chosen = [c for c in chosen if c.addr == val]
        elif opt == b"laddr":
            chosen = [c for c in chosen if c.laddr == val]
        elif opt == b"skipme":
            if val.lower() == "yes":
                chosen = [c for c in chosen if c is not client]
        else:
            raise CommandError(errors.SYNTAX)
    for c in chosen:
        app.closers[c.id]()
    return len(chosen)
