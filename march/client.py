"""Per-connection state that command handlers see (``client``), independent of the transport.

The server's protocol object owns one ``Client`` and closes the connection when ``close_after``
is set. Handlers read and change this state; they never write to the socket.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .auth import User
from .links import Link

if TYPE_CHECKING:
    from .app import App

LINK_NOBODY = "march-link"  # whom a forwarding link runs requests as when it has no user: may run nothing


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


class Client:
    __slots__ = (
        "addr",
        "app",
        "auth_failures",
        "authenticated",
        "close_after",
        "created",
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
        self, app: App, client_id: int, addr: str, laddr: str, tls: bool = False, forwarding: bool = False
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
        self.reset()

    def reset(self) -> None:
        """Back to a fresh connection's state (RESET; also the initial state)."""
        self.proto = 2
        self.name = ""
        self.lib_name = ""
        self.lib_ver = ""
        self.multi: list[list[bytes]] | None = None
        self.multi_error = False
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
            self.user = User(LINK_NOBODY)
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

    def info_line(self) -> str:
        """One line of CLIENT LIST / CLIENT INFO, with Redis' field names."""
        now = time.monotonic()
        sub = self.app.pubsub.subscribers.get(self.id)  # (Redis' flag P: it has subscriptions)
        flags = ("P" if sub is not None else "") + ("x" if self.multi is not None else "") or "N"
        channels, patterns = (len(sub.channels), len(sub.patterns)) if sub is not None else (0, 0)
        return (
            f"id={self.id} addr={self.addr} laddr={self.laddr} fd=-1 name={self.name} "
            f"age={int(now - self.created)} idle={int(now - self.last_active)} flags={flags} db=0 "
            f"sub={channels} psub={patterns} "
            f"ssub=0 multi={len(self.multi) if self.multi is not None else -1} "
            f"qbuf={self.query_buffer()} omem={self.unsent()} "
            f"user={self.user.name} lib-name={self.lib_name} lib-ver={self.lib_ver} resp={self.proto}"
        )
