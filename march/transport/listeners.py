"""The listeners: the ports a node accepts clients on, and what the process may open.

- ``listen``: the plain port, and the forwarding port (``forward_port``) the same way (uvloop's own
  server; each accepted connection is a ``march.transport.connection.Connection``, told which port it came in on).
- ``TlsListener``: the TLS port, which accepts connections itself so that each counts toward
  max_clients from its accept, as in Redis; ``tls_context`` (Redis' TLS options).
- ``clients_the_fd_limit_allows``: ``max_clients`` as the process' file limit allows it.
- ``close_connections`` / ``close_idle``: shutdown (let each connection finish what it has read)
  and the idle ``timeout``.

This module never reads a request: connections do. It imports nothing from the node's assembly.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl
import time
from typing import Any, cast

from march import log as march_log
from march.app import App
from march.client import Client
from march.config import Config
from march.transport.connection import Connection, Connections, addr_of, limit_hit, shutting_down

log = logging.getLogger("march")

# Seconds a TLS client has to finish its handshake (or `timeout`, if shorter). It counts toward
# max_clients from its accept, so this bound is what keeps silent connections from holding places.
HANDSHAKE_TIMEOUT = 10.0
_ACCEPTS_PER_WAKE = 100  # TLS connections accepted in one turn of the loop at most (asyncio's backlog default)
_ACCEPT_PAUSE = 1.0  # seconds the TLS port stops accepting when the process is out of files or memory (as asyncio)
_BACKLOG = 100  # connections the kernel queues before they are accepted (asyncio's create_server default)


def as_protocol(conn: Connection) -> asyncio.Protocol:
    """``conn`` as asyncio takes it: a protocol by its methods, not by its base class (a compiled
    ``Connection`` has none: docs/compiled.md)."""
    return cast(asyncio.Protocol, conn)


class ListenError(Exception):
    """The listening socket could not be opened (port in use, bad address)."""


async def listen(app: App, peers: Connections, bind: str, port: int, forwarding: bool = False) -> asyncio.Server:
    """A plain port: every accepted connection is a ``Connection`` of ``app`` (``forwarding``: of the
    forwarding port, whose clients get keys served elsewhere forwarded, never MOVED)."""
    try:
        return await asyncio.get_running_loop().create_server(
            lambda: as_protocol(Connection(app, peers, forwarding=forwarding)), bind, port, reuse_address=True
        )
    except OSError as exc:
        raise ListenError(f"cannot listen on {bind}:{port}: {exc}") from exc


class TlsListener:
    """The TLS port. It accepts connections itself so that each counts toward max_clients from its
    accept, as in Redis (uvloop's own TLS server hands a connection over only once its handshake is
    done): past max_clients, or during shutdown, a new connection is closed at once, before any
    handshake (so nothing is written to it, as in Redis). An admitted one does its handshake through
    ``connect_accepted_socket``, within ``handshake_timeout``, and then is a client like any other.
    """

    def __init__(
        self,
        app: App,
        peers: Connections,
        sock: socket.socket,
        context: ssl.SSLContext,
        handshake_timeout: float,
    ) -> None:
        self.app = app
        self.peers = peers
        self.sock = sock
        self.context = context
        self.handshake_timeout = handshake_timeout
        self.loop = asyncio.get_running_loop()
        self.handshakes: set[asyncio.Task[None]] = set()
        self.retry: asyncio.TimerHandle | None = None
        self.closed = False

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def start(self) -> None:
        self.retry = None
        if not self.closed:
            self.loop.add_reader(self.sock.fileno(), self.accept)

    def accept(self) -> None:
        for _ in range(_ACCEPTS_PER_WAKE):
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    limit_hit("the TLS port stops accepting for %.0f s: %s", _ACCEPT_PAUSE, exc, limit="files")
                    self.loop.remove_reader(self.sock.fileno())
                    self.retry = self.loop.call_later(_ACCEPT_PAUSE, self.start)
                    return
                continue  # (ECONNABORTED and the like: that one is gone)
            self.admit(sock)

    def admit(self, sock: socket.socket) -> None:
        app, peers = self.app, self.peers
        app.stats.connections += 1
        if shutting_down(app) or len(app.clients) + peers.handshakes >= app.max_clients:
            app.stats.rejected += 1
            if not shutting_down(app):
                limit_hit(
                    "refusing a TLS client from %s: max_clients (%d) reached",
                    addr_of(_peername(sock)),
                    app.max_clients,
                    limit="max_clients",
                )
            sock.close()
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # (as uvloop's own server does)
        conn = Connection(app, peers, tls=self.context, admitted=True)
        peers.handshakes += 1
        task = self.loop.create_task(self.handshake(sock, conn))
        self.handshakes.add(task)
        task.add_done_callback(self.handshakes.discard)

    async def handshake(self, sock: socket.socket, conn: Connection) -> None:
        try:
            await self.loop.connect_accepted_socket(
                lambda: as_protocol(conn), sock, ssl=self.context, ssl_handshake_timeout=self.handshake_timeout
            )
        except (Exception, asyncio.CancelledError) as exc:  # a failed handshake is the client's, not the server's
            log.debug("TLS handshake from %s failed: %r", addr_of(_peername(sock)), exc)
            sock.close()
        finally:
            conn.handshake_over()

    def close(self) -> None:
        """Stop accepting (the port closes); handshakes in progress are abandoned."""
        self.closed = True
        if self.retry is not None:
            self.retry.cancel()
        with contextlib.suppress(ValueError, OSError):
            self.loop.remove_reader(self.sock.fileno())
        self.sock.close()
        for task in list(self.handshakes):
            task.cancel()


def _peername(sock: socket.socket) -> Any:
    try:
        return sock.getpeername()
    except OSError:
        return None


def listening_sockets(bind: str, port: int) -> list[socket.socket]:
    """Non-blocking listening sockets on every address ``bind`` names, as ``create_server`` makes
    them (SO_REUSEADDR; IPv6 sockets IPv6-only); with port 0, one free port for all."""
    socks: list[socket.socket] = []
    try:
        infos = socket.getaddrinfo(bind or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        seen: set[tuple[Any, ...]] = set()
        for family, kind, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(socks) > 1:
                address = (address[0], socks[0].getsockname()[1], *address[2:])
            sock.bind(address)
            sock.listen(_BACKLOG)
            sock.setblocking(False)
    except OSError as exc:
        for sock in socks:
            sock.close()
        raise ListenError(f"cannot listen on {bind}:{port}: {exc}") from exc
    return socks


def tls_context(config: Config) -> ssl.SSLContext:
    """The TLS port's context, with Redis' options: certificate, key, and client certificates
    checked against ``tls_ca_cert_file`` (``tls_auth_clients`` yes: required; optional; no)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(config.tls_cert_file, config.tls_key_file)
        if config.tls_ca_cert_file:
            context.load_verify_locations(config.tls_ca_cert_file)
    except (OSError, ssl.SSLError) as exc:
        raise ListenError(f"TLS: {exc}") from exc
    context.verify_mode = {
        "yes": ssl.CERT_REQUIRED,
        "optional": ssl.CERT_OPTIONAL,
        "no": ssl.CERT_NONE,
    }[config.tls_auth_clients]
    return context


async def close_connections(conns: set[Connection], timeout: float) -> None:
    """Let every connection finish what it has read, then close it; force after ``timeout``."""
    for c in list(conns):
        if c.done():
            c.close()
    deadline = time.monotonic() + timeout
    while conns and time.monotonic() < deadline:
        for c in list(conns):
            if c.done() and not c.closing:
                c.close()
            elif c.closing and c.transport is not None and c.transport.get_write_buffer_size() == 0:
                c.transport.abort()  # all sent: don't wait for a TLS client's close_notify
        await asyncio.sleep(0.01)  # polling a condition with a deadline, during shutdown only
    for c in list(conns):
        if c.transport is not None:
            c.transport.abort()
    with contextlib.suppress(Exception):
        await asyncio.sleep(0)


def _link(client: Client) -> bool:
    """Another node's forwarding link: never closed for idling, as Redis keeps its replicas' links
    (a request written just as it closed would be lost to that node's client)."""
    return client.link is not None and client.link.authenticated


async def close_idle(app: App, conns: set[Connection]) -> None:
    while True:
        timeout = app.config.timeout  # read each round: CONFIG SET may change it (0: never close)
        await asyncio.sleep(min(1.0, timeout / 2) if timeout > 0 else 1.0)
        if app.config.timeout <= 0:
            continue
        limit = time.monotonic() - app.config.timeout
        for c in list(conns):
            if c.client is not None and c.client.last_active < limit and not c.busy and not _link(c.client):
                app.stats.timeouts_closed += 1
                march_log.event(
                    log,
                    logging.INFO,
                    "client_limit",
                    "closing idle client %s (timeout)",
                    c.client.addr,
                    limit="timeout",
                )
                c.close()
