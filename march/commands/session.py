"""Connection commands: PING, ECHO, HELLO, AUTH, SELECT, CLIENT, QUIT, RESET.

AUTH and HELLO ... AUTH check a user's password (``march.access.rules``): ``AUTH password`` is the
``default`` user's (``requirepass``), ``AUTH user password`` any user's. A failure is WRONGPASS,
counted in INFO (``acl_access_denied_auth``), recorded in ACL LOG (never the password) and
logged (the first on a connection, then every hundredth). Failures are throttled per source
address and per user across connections (``march.access.throttle``): after three, attempts wait
their turn (50 ms apart, doubling to 2 s), and one that would wait longer than a few seconds is
refused unchecked, so reconnecting gains a guesser nothing. A wrong password the address tried
for that user lately is no new guess: answered at once and not counted (redis-py 8 sends a
mistyped password eleven times: each gets WRONGPASS at once). ``HELLO ... SETNAME`` goes through
the ACL check of ``CLIENT SETNAME`` and the same name rules (at most ``MAX_CLIENT_NAME`` bytes,
no spaces or special characters), checked before HELLO changes anything. HELLO reports
``server: redis`` and a Redis version (the command set March follows) because clients and tools
branch on them; INFO shows March's own version.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from march import errors
from march.commands.args import Args, parse_int
from march.commands.permissions import refuse
from march.commands.table import Arg, Secrets, Subcommand, command, container
from march.errors import CommandError
from march.resp import Verbatim
from march.version import REDIS_COMPAT_VERSION

if TYPE_CHECKING:
    from march.app import App, Connected
    from march.client import Client

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


@command(
    "ping",
    -1,
    ("fast", "stale"),
    _CONN,
    summary="Reply PONG, or the message given.",
    group="connection",
    tips=("request_policy:all_shards", "response_policy:all_succeeded"),
    complexity="O(1)",
    arguments=(Arg("message", "string", flags=("optional",)),),
)
def ping(client: Client, args: list[bytes]) -> Any:
    cursor = Args(args)
    message = cursor.next() if cursor.more() else None
    cursor.finish(errors.WRONG_ARITY.format("ping"))
    if client.proto == 2 and client.id in client.app.pubsub.subscribers:  # as Redis, in subscribed mode
        return [b"pong", b"" if message is None else message]
    return "PONG" if message is None else message


@command(
    "echo",
    2,
    ("loading", "stale", "fast"),
    _CONN,
    summary="Reply the message given.",
    group="connection",
    hot=True,
    complexity="O(1)",
    arguments=(Arg("message", "string"),),
)
def echo(client: Client, args: list[bytes]) -> Any:
    return args[1]


def _authenticate(client: Client, name: bytes, password: bytes, via: str = "auth") -> Any:
    """AUTH name password: "OK", WRONGPASS, or (throttled, see ``march.access.throttle``) a coroutine
    that waits for this attempt's turn and then answers one of them. ``via``: the command (``auth``,
    ``hello``), as ACL LOG shows it."""
    app = client.app
    if not app.users.loaded:
        raise CommandError(errors.CLUSTERDOWN)  # nobody is known yet (etcd has not answered since the start)
    username = name.decode("utf-8", "replace")
    host = client.addr.rpartition(":")[0]
    if app.auth_throttle.repeated(host, username, password):  # a retry of a mistake (redis-py's): no new guess
        return _check(client, username, password, via, repeat=True)
    wait = app.auth_throttle.admit(host, username)
    if wait is None:  # others from this address (or for this user) are queued far ahead: not even checked
        _failed(client, username, via, logged=False)  # (unchecked: a flood of these writes no log lines)
        raise CommandError(errors.AUTH_THROTTLED)
    if wait > 0:
        return _check_later(client, username, password, wait, via)
    return _check(client, username, password, via)


def _check(client: Client, username: str, password: bytes, via: str, repeat: bool = False) -> str:
    """Check the password now. ``repeat``: a wrong password this address tried for this user lately
    (``AuthThrottle.repeated``), checked at once (it may be right by now) and counted nowhere in the
    throttle."""
    app = client.app
    host = client.addr.rpartition(":")[0]
    user = app.users.authenticate(username, password)
    if user is not None:
        client.login(user)
        client.auth_failures = 0
        app.auth_throttle.succeeded(host, username, admitted=not repeat)
        return "OK"
    if not repeat:
        app.auth_throttle.failed(host, username, password)
    _failed(client, username, via, logged=not repeat)
    raise CommandError(errors.WRONGPASS)


def _failed(client: Client, username: str, via: str, logged: bool = True) -> None:
    """Count, record (ACL LOG) and log (not every one) a failed AUTH; never the password."""
    app = client.app
    client.auth_failures += 1
    app.stats.denied_auth += 1
    context = "multi" if client.multi is not None or client.executing else "toplevel"
    app.acl_log.add("auth", context, "AUTH", username, client.info_line(via))
    failures = client.auth_failures
    if logged and (failures == 1 or failures % 100 == 0):
        log.warning("AUTH failed for user %r from %s (%d on this connection)", username, client.addr, failures)


async def _check_later(client: Client, username: str, password: bytes, wait: float, via: str) -> str:
    """This attempt's turn comes after ``wait`` seconds (this connection waits, others don't)."""
    try:
        await asyncio.sleep(wait)
    except BaseException:  # the connection went away before its turn
        client.app.auth_throttle.abandoned(client.addr.rpartition(":")[0], username)
        raise
    return _check(client, username, password, via)


@_handshake(
    "auth",
    -2,
    summary="Authenticate: AUTH password (the default user), or AUTH username password.",
    secrets=Secrets(rest=True),
)
def auth(client: Client, args: list[bytes]) -> Any:
    cursor = Args(args)
    first = cursor.next()
    if not cursor.more():
        if not client.app.users.loaded:  # (default is unknown yet, not password-less)
            raise CommandError(errors.CLUSTERDOWN)
        if client.app.users.default.nopass:
            raise CommandError(errors.AUTH_NOT_CONFIGURED)
        return _authenticate(client, b"default", first)
    password = cursor.next()
    cursor.finish()
    return _authenticate(client, first, password)


@_handshake(
    "hello",
    -1,
    summary="Handshake: HELLO [protover [AUTH user pass] [SETNAME name]].",
    secrets=Secrets(start=1, after={b"auth": 2}),  # from 1: HELLO AUTH u pw (refused) is shown as sent
)
def hello(client: Client, args: list[bytes]) -> Any:
    proto = client.proto
    cursor = Args(args)
    if cursor.more():
        proto = cursor.integer(errors.HELLO_PROTOVER)
        if proto not in (2, 3):
            raise CommandError(errors.PROTOCOL_VERSION)
    name: bytes | None = None
    auth_pair: tuple[bytes, bytes] | None = None
    while cursor.more():
        option = cursor.next()
        if option.lower() == b"auth" and len(cursor) >= 2:
            auth_pair = (cursor.next(), cursor.next())
        elif option.lower() == b"setname" and cursor.more():
            name = cursor.next()
        else:
            raise CommandError(errors.HELLO_OPTION.format(option.decode("utf-8", "replace")))
    if name is not None:
        _check_name(name)  # before anything changes
    if auth_pair is not None:
        result = _authenticate(client, *auth_pair, via="hello")
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
        b"role": b"master" if any(g.state.leading for g in client.app.groups) else b"replica",
        b"modules": [],
    }


@command(
    "select",
    2,
    ("loading", "stale", "fast"),
    _CONN,
    summary="Select database 0 (the only one).",
    group="connection",
    complexity="O(1)",
    arguments=(Arg("index", "integer"),),
)
def select(client: Client, args: list[bytes]) -> Any:
    if Args(args).integer() != 0:
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
    client.app.monitors.remove(client.id)  # a MONITOR connection stops being one, as in Redis
    client.app.pubsub.remove(client.id)  # and a subscribed one has no subscription left
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


# --- CLIENT ----------------------------------------------------------------------------------------
#
# As Redis 7.0 (checked against a real redis-server in tests/commands/test_redis_rules.py): CLIENT LIST
# [TYPE type | ID id...], CLIENT KILL addr (the old form: may close the caller) or CLIENT KILL
# <filter value>... with ID, ADDR, LADDR, TYPE, USER and SKIPME (default yes: the caller is spared
# unless SKIPME no); every filter is checked before anyone is closed, so a bad one closes nobody.
# A caller that closes itself gets its reply first (``close_after``). A March connection is of type
# ``pubsub`` while it has subscriptions, else ``normal`` (a MONITOR too, as in Redis); there are no
# replica or master connections: ``TYPE master`` matches none. The lines are ``Client.info_line``'s.
#
# CLIENT LIST grows with the clients: its lines are counted against what the caller's output buffer
# may still take (``Client.reply_room``) as they are made, and the reply is refused
# (CLIENT_LIST_TOO_LARGE) before it passes ``max_output_buffer``; past ``_LIST_SLICE`` clients it is
# made a slice at a time, other connections served in between.

_LIST_SLICE = 1000  # CLIENT LIST lines made per step of the event loop (~1 ms): other clients run between
_CLIENT_TYPES = (b"normal", b"master", b"replica", b"slave", b"pubsub")  # Redis' names

_CLIENT_ADMIN = ("@admin", "@slow", "@dangerous", "@connection")  # as in Redis: listing and closing others
_CLIENT_FLAGS = ("noscript", "loading", "stale")
_NONDET = ("nondeterministic_output",)  # Redis' tip for CLIENT LIST and CLIENT INFO


def _client_id(client: Client, args: list[bytes]) -> Any:
    return client.id


def _client_setname(client: Client, args: list[bytes]) -> Any:
    _set_name(client, args[2])
    return "OK"


def _client_getname(client: Client, args: list[bytes]) -> Any:
    return client.name.encode() if client.name else None


def _client_setinfo(client: Client, args: list[bytes]) -> Any:
    cursor = Args(args, 2)
    attr = cursor.next()
    value = cursor.text()
    if any(c in value for c in " \n\r"):
        raise CommandError(errors.CLIENT_INFO_VALUE.format(attr.decode("utf-8", "replace")))
    if attr.lower() == b"lib-name":
        client.lib_name = value
    elif attr.lower() == b"lib-ver":
        client.lib_ver = value
    else:
        raise CommandError(errors.CLIENT_OPTION.format(attr.decode("utf-8", "replace")))
    return "OK"


def _client_info(client: Client, args: list[bytes]) -> Any:
    return Verbatim(client.info_line("client|info", args) + "\n")


def _client_type(kind: bytes) -> str:
    """The connection type a TYPE filter names (Redis' names; ``replica`` and ``slave`` are one)."""
    low = kind.lower()
    if low not in _CLIENT_TYPES:
        raise CommandError(errors.CLIENT_TYPE.format(kind.decode("utf-8", "replace")))
    return "replica" if low == b"slave" else low.decode()


def _type_of(app: App, c: Connected) -> str:
    """A connection's type, as Redis tells it: ``pubsub`` while it has subscriptions, else ``normal``."""
    return "pubsub" if c.id in app.pubsub.subscribers else "normal"


def _client_flag(client: Client, args: list[bytes]) -> Any:
    Args(args, 2).choice(b"on", b"off")
    return "OK"


def _client_list(client: Client, args: list[bytes]) -> Any:
    app = client.app
    cursor = Args(args, 2)
    option = cursor.choice(b"type", b"id") if cursor.more() else b""
    if not option:
        targets = list(app.clients.values())
    elif option == b"type" and len(cursor) == 1:
        kind = _client_type(cursor.next())
        targets = [c for c in app.clients.values() if _type_of(app, c) == kind]
    elif option == b"id" and cursor.more():
        ids = [parse_int(a, errors.CLIENT_LIST_ID) for a in cursor.rest()]  # all checked before any line
        targets = [c for c in map(app.clients.get, ids) if c is not None]  # in the order asked, as Redis
    else:
        raise CommandError(errors.SYNTAX)
    if len(targets) <= _LIST_SLICE:
        lines = _Lines(client, args)
        lines.add(targets)
        return lines.reply()
    return _list_sliced(client, targets, args)


async def _list_sliced(client: Client, targets: list[Connected], args: list[bytes]) -> Any:
    lines = _Lines(client, args)
    for start in range(0, len(targets), _LIST_SLICE):
        if start:
            await asyncio.sleep(0)  # let other connections run between slices
        lines.add([c for c in targets[start : start + _LIST_SLICE] if c.id in client.app.clients])
    return lines.reply()


class _Lines:
    """CLIENT LIST's reply as it is made, refused as soon as it would pass the caller's output limit."""

    def __init__(self, client: Client, args: list[bytes]) -> None:
        self.client = client
        self.args = args  # the caller's own CLIENT LIST (its line shows it running, as Redis')
        self.room = client.reply_room()
        self.size = 0
        self.parts: list[str] = []

    def add(self, clients: list[Connected]) -> None:
        for c in clients:
            line = (c.info_line("client|list", self.args) if c is self.client else c.info_line()) + "\n"
            self.size += len(line) if line.isascii() else len(line.encode())
            if self.size > self.room:
                raise CommandError(errors.CLIENT_LIST_TOO_LARGE.format(self.client.app.config.max_output_buffer))
            self.parts.append(line)

    def reply(self) -> Verbatim:
        return Verbatim("".join(self.parts))


@dataclass(slots=True)
class _KillFilter:
    """What CLIENT KILL closes: every connection that matches all the filters given."""

    id: int = 0  # 0: any
    addr: str | None = None
    laddr: str | None = None
    user: str | None = None
    type: str = ""  # TYPE (``_client_type``): "" any; master and replica match none
    skipme: bool = True

    def matches(self, caller: Client, c: Connected) -> bool:
        return (
            (not self.type or self.type == _type_of(caller.app, c))
            and (not self.id or c.id == self.id)
            and (self.addr is None or c.addr == self.addr)
            and (self.laddr is None or c.laddr == self.laddr)
            and (self.user is None or c.user.name == self.user)
            and not (self.skipme and c is caller)
        )


def _kill_filter(client: Client, args: list[bytes]) -> _KillFilter:
    """The filters of ``CLIENT KILL <option> <value>...``, every one checked (Redis' texts) before anyone is closed."""
    chosen = _KillFilter()
    cursor = Args(args, 2)
    for option in cursor.options(b"id", b"type", b"addr", b"laddr", b"user", b"skipme"):
        if option == b"id":
            chosen.id = cursor.integer(errors.CLIENT_ID, low=1)
        elif option == b"type":
            chosen.type = _client_type(cursor.next())
        elif option == b"addr":
            chosen.addr = cursor.text()
        elif option == b"laddr":
            chosen.laddr = cursor.text()
        elif option == b"user":
            chosen.user = cursor.text()
            if client.app.users.get(chosen.user) is None:
                raise CommandError(errors.CLIENT_NO_SUCH_USER.format(chosen.user))
        else:
            chosen.skipme = cursor.choice(b"yes", b"no") == b"yes"
    return chosen


def _client_kill(client: Client, args: list[bytes]) -> Any:
    app = client.app
    old_form = len(args) == 3  # CLIENT KILL addr: the caller too, if it is at that address
    chosen = (
        _KillFilter(addr=args[2].decode("utf-8", "replace"), skipme=False) if old_form else _kill_filter(client, args)
    )
    killed = 0
    for c in [c for c in app.clients.values() if chosen.matches(client, c)]:
        killed += 1
        if c is client:
            client.close_after = True  # after this reply, as Redis does
            continue
        close = app.closers.get(c.id)
        if close is not None:
            close()
    if old_form:
        if not killed:
            raise CommandError(errors.NO_SUCH_CLIENT)
        return "OK"
    return killed


container(
    "client",
    (),
    ("@slow", "@connection", "@app"),
    (
        Subcommand("id", 2, "This connection's id.", _client_id, flags=_CLIENT_FLAGS),
        Subcommand("setname", 3, "Name this connection.", _client_setname, "SETNAME <name>", flags=_CLIENT_FLAGS),
        Subcommand("getname", 2, "This connection's name, or nil.", _client_getname, flags=_CLIENT_FLAGS),
        Subcommand(
            "setinfo",
            4,
            "Record the client library's name or version.",
            _client_setinfo,
            "SETINFO <LIB-NAME|LIB-VER> <value>",
            flags=_CLIENT_FLAGS,
        ),
        Subcommand("info", 2, "One line about this connection.", _client_info, flags=_CLIENT_FLAGS, tips=_NONDET),
        Subcommand(
            "list",
            -2,
            "One line per connection: CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id...].",
            _client_list,
            "LIST [TYPE (NORMAL|MASTER|REPLICA|PUBSUB) | ID <id> [<id> ...]]",
            categories=_CLIENT_ADMIN,
            flags=("admin", *_CLIENT_FLAGS),
            tips=_NONDET,
        ),
        Subcommand(
            "kill",
            -3,
            "Close connections: CLIENT KILL addr | [ID id] [ADDR ip:port] [LADDR ip:port] [TYPE t] "
            "[USER name] [SKIPME yes|no].",
            _client_kill,
            "KILL <ip:port> | <option> <value> [<option> <value> ...]",
            categories=_CLIENT_ADMIN,
            flags=("admin", *_CLIENT_FLAGS),
        ),
        Subcommand(
            "no-evict",
            3,
            "Accepted (ON or OFF), no effect.",
            _client_flag,
            "NO-EVICT (ON|OFF)",
            categories=_CLIENT_ADMIN,
            flags=("admin", *_CLIENT_FLAGS),
        ),
        Subcommand(
            "no-touch", 3, "Accepted (ON or OFF), no effect.", _client_flag, "NO-TOUCH (ON|OFF)", flags=_CLIENT_FLAGS
        ),
    ),
    summary="Connection introspection: ID, SETNAME, GETNAME, SETINFO, INFO, LIST, KILL.",
    group="connection",
)
