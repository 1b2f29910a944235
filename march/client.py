"""Per-connection state that command handlers see (``client``), independent of the transport.

The server's protocol object owns one ``Client`` and closes the connection when ``close_after``
is set. Handlers read and change this state; they never write to the socket.

``info_line`` is the connection's line of CLIENT LIST / CLIENT INFO / ACL LOG ``client-info``: Redis
7.0's fields in Redis 7.0's order (``networking.c``, ``catClientInfoString``), then Redis 7.2's
``lib-name`` and ``lib-ver`` (CLIENT SETINFO, which client libraries send, and forwarding links
name themselves with). Every value is March's own truth: ``fd`` the socket's descriptor, ``qbuf``
the bytes of an unfinished request, ``argv-mem`` the arguments of the request being run, ``multi-mem``
those MULTI queued, ``omem`` the replies not sent yet, ``tot-mem`` their sum; March keeps no
per-client query or reply buffers (``qbuf-free``, ``rbs``, ``rbp``, ``obl``, ``oll`` are 0) nor client
tracking (``redir=-1``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from march.access.rules import User
from march.cluster.links import Link
from march.stats.counters import CommandStats

if TYPE_CHECKING:
    from march.app import App

LINK_NOBODY = "march-link"  # whom a forwarding link runs requests as when it has no user: may run nothing
NOBODY = User(LINK_NOBODY)  # (that user: on a link, a request naming no known user runs as it)


@dataclass(slots=True)
class LinkPeer:
    """A connection that asked to be another node's forwarding link (``commands.forward``): this node's
    nonce it must prove the cluster secret over, then (``authenticated``) the node it proved to be."""

    nonce: bytes = b""
    node: str = ""
    authenticated: bool = False


def _nothing() -> int:
    return 0


def _discard(data: bytes) -> None:
    pass


def _no_events() -> str:
    return ""


class Client:
    __slots__ = (
        "addr",
        "app",
        "argv_mem",
        "auth_failures",
        "authenticated",
        "close_after",
        "cmd",
        "created",
        "events",
        "executing",
        "fd",
        "forwarding",
        "generators",
        "id",
        "laddr",
        "last_active",
        "lib_name",
        "lib_ver",
        "link",
        "multi",
        "multi_error",
        "multi_mem",
        "name",
        "proto",
        "push",
        "query_buffer",
        "relay_link",
        "tls",
        "unsent",
        "user",
    )

    def __init__(
        self, app: App, client_id: int, addr: str, laddr: str, tls: bool = False, fd: int = -1, forwarding: bool = False
    ) -> None:
        self.app = app
        self.tls = tls  # connected on the TLS port: redirects and CLUSTER replies name TLS addresses
        # Connected on the forwarding port (forward_port): a key of a group served elsewhere is
        # forwarded to its primary, never answered MOVED (``commands.forward.forwards``).
        self.forwarding = forwarding
        self.generators = app.keyspace.generators  # the INCR hot path reads it through the client
        self.id = client_id
        self.addr = addr
        self.laddr = laddr
        self.fd = fd  # the socket's file descriptor (-1: none, as Redis shows a client without a socket)
        # The counters of its last request: CLIENT LIST ``cmd`` (set by its connection's ``RequestTimer``
        # only, which writes it when it changes).
        self.cmd: CommandStats | None = None
        self.executing = 0  # while EXEC runs its queued requests: how many (Redis shows them as ``multi=``)
        self.created = time.monotonic()
        self.last_active = self.created  # the last complete request (idle `timeout` counts from it)
        self.auth_failures = 0  # failed AUTHs on this connection (they are throttled)
        # Bytes of replies made for this client and not sent yet: those the transport holds and
        # those made in the read being run (the server's connection sets it).
        self.unsent: Callable[[], int] = _nothing
        # Bytes of memory its unfinished request holds (the server's connection sets it).
        self.query_buffer: Callable[[], int] = _nothing
        self.relay_link: Link | None = None  # the link its forwarded requests go on (``commands.forward``)
        # Writes bytes to this client out of turn (pub/sub messages; the server's connection sets it).
        self.push: Callable[[bytes], None] = _discard
        # Bytes of the arguments of the request it is running (one that waits), and what the
        # connection waits for: "r" reading, "w" writing (the server's connection sets them).
        self.argv_mem: Callable[[], int] = _nothing
        self.events: Callable[[], str] = _no_events
        self.reset()

    def reset(self) -> None:
        """Back to a fresh connection's state (RESET; also the initial state)."""
        self.proto = 2
        self.name = ""
        self.lib_name = ""
        self.lib_ver = ""
        self.multi: list[list[bytes]] | None = None
        self.multi_error = False
        self.multi_mem = 0  # bytes of the arguments MULTI queued (CLIENT LIST multi-mem)
        self.close_after = False
        self.link: LinkPeer | None = None  # another node's forwarding link (RESET makes it a plain client)
        self.logout()

    def login(self, user: User) -> None:
        """``user`` authenticated (AUTH or HELLO ... AUTH): act as it from now on."""
        self.user = user
        self.authenticated = True

    def user_removed(self) -> bool:
        """Its user was deleted: True (close it, as Redis does), except for another node's forwarding
        link, which carries other clients' requests too (each runs as the user it names: a deleted
        one may run nothing): it stays, as nobody."""
        if self.link is not None and self.link.authenticated:
            self.user = NOBODY
            return False
        return True

    def logout(self) -> None:
        """Back to ``default`` (a new connection, RESET): authenticated only while it needs no password."""
        default = self.app.users.default
        self.user = default
        self.authenticated = default.enabled and default.nopass

    def reply_room(self) -> int:
        """Bytes a reply may still take before this client's unsent replies pass ``max_output_buffer``:
        a handler that builds a large reply checks it as it goes, never after."""
        return self.app.config.max_output_buffer - self.unsent()

    def info_line(self, current: str = "", running: list[bytes] | None = None) -> str:
        """One line of CLIENT LIST / CLIENT INFO / ACL LOG, with Redis' field names and order (see the
        module docstring). ``current``: the full name of the command this client is running now
        (the caller's own line: ``client|list``; ``exec`` while EXEC runs), else its last request's;
        ``running``: that request's arguments (``argv-mem``)."""
        app = self.app
        now = time.monotonic()
        sub = app.pubsub.subscribers.get(self.id)  # (Redis' flag P and TYPE pubsub: it has subscriptions)
        in_multi = self.multi is not None or self.executing > 0
        flags = ("O" if self.id in app.monitors.feeds else "") + ("P" if sub is not None else "")
        flags = (flags + ("x" if in_multi else "")) or "N"
        channels = len(sub.channels) if sub is not None else 0
        patterns = len(sub.patterns) if sub is not None else 0
        if self.executing:
            current, multi = "exec", self.executing  # (Redis: the EXEC running them is the command)
        else:
            multi = len(self.multi) if self.multi is not None else -1
        if not current:
            cmd = self.cmd
            current = "NULL" if cmd is None or cmd is app.metrics.commands.unknown else cmd.name
        qbuf = self.query_buffer()
        argv = sum(map(len, running)) if running is not None else self.argv_mem()
        multi_mem = self.multi_mem if in_multi else 0
        omem = self.unsent()
        return (
            f"id={self.id} addr={self.addr} laddr={self.laddr} fd={self.fd} name={self.name} "
            f"age={int(now - self.created)} idle={int(now - self.last_active)} flags={flags} db=0 "
            f"sub={channels} psub={patterns} ssub=0 multi={multi} qbuf={qbuf} qbuf-free=0 argv-mem={argv} "
            f"multi-mem={multi_mem} rbs=0 rbp=0 obl=0 oll=0 omem={omem} tot-mem={qbuf + argv + multi_mem + omem} "
            f"events={self.events()} cmd={current} user={self.user.name} redir=-1 resp={self.proto} "
            f"lib-name={self.lib_name} lib-ver={self.lib_ver}"
        )
