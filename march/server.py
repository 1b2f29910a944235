"""The listener: connections, pipelining, back-pressure, limits, shutdown.

One ``Connection`` (an asyncio protocol on uvloop) per client. Each read is parsed into requests;
the requests are run in order and their replies written with one ``write`` per read. A handler
that returns a coroutine (waiting for a store write) pauses that connection: its replies stay in
order, reading is paused until it is done, and other connections carry on.

Limits: ``max_clients`` (the extra connection gets an error and is closed), argument count, bulk
and inline sizes (the parser; a protocol error closes that connection only), ``max_output_buffer``
(a client that does not read its replies is disconnected), ``timeout`` (idle clients are closed).
Back-pressure: when a client's unsent replies pass the write high-water mark, reading from it
pauses until they drain. A run of identical pipelined requests to a command registered with
``consecutive=`` (INCR) is answered from one call that hands out the whole run's IDs at once.
Protected mode: with no password, only loopback clients are served.

Shutdown (``serve(config, stop)``): stop accepting, let each connection finish the requests it has
read, wait at most ``shutdown_timeout``, then close what is left; wait for store writes in flight,
close the store. This module never knows a command: it calls ``commands.call``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import time
from collections.abc import Awaitable
from typing import Any, cast

from . import errors
from .app import VERSION, App
from .client import Client
from .cluster.node import ClusterNode
from .commands import call
from .commands.dispatch import as_error, rerun
from .commands.registry import HOT
from .commands.server import NO_REPLY
from .config import Config
from .generators.base import Lease, NotServing, SingleNodeLease
from .resp import ProtocolError, RequestParser, encode, encode_error
from .store.base import Store
from .store.etcd import TLS, EtcdClient, EtcdStore
from .store.sqlite import SqliteStore

log = logging.getLogger("march")

_HIGH_WATER = 256 << 10  # pause reading from a client whose unsent replies pass this many bytes
_monotonic = time.monotonic


class ListenError(Exception):
    """The listening socket could not be opened (port in use, bad address)."""


class Connection(asyncio.Protocol):
    def __init__(self, app: App, conns: set[Connection]) -> None:
        self.app = app
        self.conns = conns
        # Set in connection_made; the protocol never sees data before that.
        self.transport: asyncio.Transport = cast(asyncio.Transport, None)
        self.client: Client = cast(Client, None)
        self.deaf = True  # ignore input: not accepted yet, closing, or after a protocol error
        cfg = app.config
        self.parser = RequestParser(cfg.max_args, cfg.max_bulk_len, cfg.max_inline_len)
        self.busy = False  # a handler's coroutine is running; later requests wait in ``backlog``
        self.backlog: list[list[bytes]] = []
        self.write_paused = False
        self.closing = False
        self.protocol_error = ""  # set when the parser refused input: answer it after what came before
        self.task: asyncio.Task[None] | None = None

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        self.transport = transport
        app = self.app
        app.stats.connections += 1
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        addr = _addr(peer)
        if len(app.clients) >= app.config.max_clients:
            app.stats.rejected += 1
            transport.write(encode_error(errors.MAX_CLIENTS))
            transport.close()
            return
        if app.config.protected_mode and not app.config.requirepass and not _is_loopback(peer):
            app.stats.rejected += 1
            transport.write(encode_error(errors.PROTECTED_MODE))
            transport.close()
            return
        transport.set_write_buffer_limits(high=_HIGH_WATER)
        client = Client(app, app.next_client_id(), addr, _addr(sock))
        self.client = client
        self.deaf = False
        app.clients[client.id] = client
        app.closers[client.id] = self.close
        self.conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.deaf = True
        if self.client is not None:
            self.app.clients.pop(self.client.id, None)
            self.app.closers.pop(self.client.id, None)
        self.conns.discard(self)
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def pause_writing(self) -> None:
        self.write_paused = True
        assert self.transport is not None
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        if not self.busy and not self.closing and self.transport is not None:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.deaf:
            return
        self.client.last_active = _monotonic()
        try:
            requests = self.parser.feed(data)
        except ProtocolError as exc:
            # Redis runs the requests that came before the bad bytes, answers the error, closes.
            self.app.stats.protocol_errors += 1
            self.protocol_error = str(exc)
            self.deaf = True
            requests = exc.requests
        if self.busy:
            self.backlog.extend(requests)
            return
        if len(requests) == 1 and not self.protocol_error:
            # One request per read (a client waiting for each reply): the hot path of ``run`` for a
            # single request, without its loop and bookkeeping.
            args = requests[0]
            entry = self.app.hot.get(args[0])
            client = self.client
            if entry is not None and len(args) == entry[0] and client.authenticated and client.multi is None:
                try:
                    result = entry[1](client, args)
                except Exception as exc:
                    result = exc
                if result.__class__ is int:
                    self.app.stats.commands += 1
                    self.transport.write(b":%d\r\n" % result)
                    return
                self.app.stats.commands += 1
                if asyncio.iscoroutine(result):
                    self.wait(result, requests, 1)
                else:
                    self.transport.write(
                        self.error_reply(result) if isinstance(result, Exception) else encode(result, client.proto)
                    )
                return
        self.run(requests, 0)

    # --- running requests ---------------------------------------------------------------------

    def run_backlog(self) -> None:
        requests, self.backlog = self.backlog, []
        self.run(requests, 0)

    def error_reply(self, exc: Exception) -> bytes:
        """The reply for a request whose handler raised (a bug costs one reply, never the server)."""
        self.app.stats.errors += 1
        return encode_error(as_error(self.client, exc).message)

    def run(self, requests: list[list[bytes]], start: int) -> None:
        """Run ``requests[start:]`` in order; stop at the first that must wait and resume after it."""
        client = self.client
        transport = self.transport
        out: list[bytes] = []
        append = out.append
        stats = self.app.stats
        hot = self.app.hot
        # Fast path: a hot command (one that never changes connection state) with its exact arity
        # on a plain connection (authenticated, not in MULTI). Everything else goes through
        # ``call``, which makes every check. This loop runs for every request: keep it lean.
        plain = client.authenticated and client.multi is None
        n = len(requests)
        i = start
        while i < n:
            args = requests[i]
            i += 1
            try:
                entry = hot.get(args[0]) if plain else None
                if entry is not None and len(args) == entry[0]:
                    if i < n and entry[2] is not None and requests[i] == args:
                        # A run of identical requests (a pipeline of INCRs on one key): answered
                        # with consecutive integers from one call, exactly what running them one
                        # by one would give, since nothing else runs in between.
                        j = i + 1
                        while j < n and requests[j] == args:
                            j += 1
                        last = entry[2](client, args, j - i + 1)
                        if last is not None:
                            out.extend([b":%d\r\n" % v for v in range(last - (j - i), last + 1)])
                            i = j
                            continue
                    result = entry[1](client, args)
                    if result.__class__ is int:
                        append(b":%d\r\n" % result)
                        continue
                else:
                    result = call(client, args)
                    plain = client.authenticated and client.multi is None
            except Exception as exc:
                append(self.error_reply(exc))
                continue
            if result.__class__ is int:
                append(b":%d\r\n" % result)
            elif asyncio.iscoroutine(result):
                if out:
                    transport.write(b"".join(out))
                stats.commands += i - start
                self.wait(result, requests, i)
                return
            elif result is not NO_REPLY:
                append(encode(result, client.proto))
            if client.close_after:
                break
        stats.commands += i - start
        if self.protocol_error and not self.backlog and not client.close_after:
            out.append(encode_error("ERR Protocol error: " + self.protocol_error))
            client.close_after = True
        if out:
            transport.write(out[0] if len(out) == 1 else b"".join(out))
            if self.write_paused:
                self.check_output_buffer()
        if client.close_after:
            self.close()
        elif self.backlog and not self.busy:
            self.run_backlog()

    def wait(self, pending: Any, requests: list[list[bytes]], resume_at: int) -> None:
        """A handler must wait: pause this connection until ``pending`` is done, keeping order."""
        self.busy = True
        self.transport.pause_reading()
        self.task = asyncio.get_running_loop().create_task(self.finish(pending, requests, resume_at))

    async def finish(self, pending: Any, requests: list[list[bytes]], resume_at: int) -> None:
        """Await one handler's coroutine, write its reply, then run the rest of the read."""
        client = self.client
        try:
            try:
                value = await pending
            except NotServing:
                if self.app.node is None:
                    raise
                # This node stopped serving while the request waited (it got no ID): run it again
                # once the change is over, here if this node serves by then, else a MOVED reply.
                value = await rerun(client, requests[resume_at - 1])
            reply = encode(value, client.proto) if value is not NO_REPLY else b""
        except Exception as exc:
            reply = self.error_reply(exc)
        if self.closing:
            return
        if reply:
            self.transport.write(reply)
        self.busy = False
        self.task = None
        if client.close_after:
            self.close()
            return
        if not self.write_paused:
            self.transport.resume_reading()
        self.run(requests, resume_at)

    def check_output_buffer(self) -> None:
        assert self.transport is not None
        if self.transport.get_write_buffer_size() > self.app.config.max_output_buffer:
            log.warning("closing client %s: output buffer over max_output_buffer", self.client and self.client.addr)
            self.transport.abort()

    def close(self) -> None:
        """Close after the replies already written have been sent."""
        self.closing = True
        self.deaf = True
        if self.transport is not None:
            self.transport.close()


def _addr(sockaddr: Any) -> str:
    if isinstance(sockaddr, tuple) and len(sockaddr) >= 2:
        host = sockaddr[0]
        return f"[{host}]:{sockaddr[1]}" if ":" in host else f"{host}:{sockaddr[1]}"
    return str(sockaddr or "?")


def _is_loopback(peer: Any) -> bool:
    if not isinstance(peer, tuple):
        return True  # a unix socket
    try:
        return ipaddress.ip_address(peer[0].split("%")[0]).is_loopback
    except ValueError:
        return False


def make_store(config: Config) -> tuple[Store, Lease, ClusterNode | None]:
    """The embedded store and its trivial lease, or (with ``etcd``) the etcd store and a cluster node."""
    if not config.cluster:
        return SqliteStore(config.data_dir), SingleNodeLease(), None
    tls = None
    if config.etcd_ca_cert_file or config.etcd_cert_file:
        tls = TLS(config.etcd_ca_cert_file, config.etcd_cert_file, config.etcd_key_file)
    client = EtcdClient(
        config.etcd_endpoints,
        user=config.etcd_user,
        password=config.etcd_password,
        tls=tls,
        timeout=config.store_timeout,
    )
    node = ClusterNode(config, client)
    write_timeout = max(0.5, config.lease_ttl / 3)
    return EtcdStore(client, config.etcd_prefix, config.store_timeout, write_timeout), node, node


async def serve(config: Config, stop: Awaitable[Any], ready: asyncio.Future[int] | None = None) -> None:
    """Run a node until ``stop`` completes or SHUTDOWN is called.

    A single node loads its state and serves before it listens. A cluster node listens first
    (standbys answer too) and then joins: election and promotion run in the background.
    """
    loop = asyncio.get_running_loop()
    store, lease, node = make_store(config)
    await store.open()
    app = App(config, store, lease, HOT, node)
    if node is not None:
        node.attach(app)
    app.shutdown_requested = asyncio.Event()
    conns: set[Connection] = set()
    try:
        if node is None:
            await app.keyspace.start_serving()
        try:
            server = await loop.create_server(
                lambda: Connection(app, conns), config.bind, config.port, reuse_address=True
            )
        except OSError as exc:
            raise ListenError(f"cannot listen on {config.bind}:{config.port}: {exc}") from exc
        app.port = server.sockets[0].getsockname()[1]
        log.info(
            "March %s ready to accept connections on %s:%d (store: %s, %d sequences)",
            VERSION,
            config.bind,
            app.port,
            store.name,
            len(app.keyspace.generators),
        )
        if node is not None:
            await node.start(app.port)
        if ready is not None and not ready.done():
            ready.set_result(app.port)
        idle = loop.create_task(_close_idle(app, conns)) if config.timeout > 0 else None
        stopper = asyncio.ensure_future(stop)
        requested = loop.create_task(app.shutdown_requested.wait())
        await asyncio.wait({stopper, requested}, return_when=asyncio.FIRST_COMPLETED)
        log.info("shutting down")
        app.shutdown_requested.set()
        for t in (stopper, requested, idle):
            if t is not None and not t.done():
                t.cancel()
        server.close()
        await _close_connections(conns, config.shutdown_timeout)
        if node is not None:
            await node.stop()  # steps down and gives the leader key back at once
        if app.keyspace.serving:
            app.keyspace.stop_serving("shutting down")
        try:
            await asyncio.wait_for(app.keyspace.drain(), config.store_timeout)
        except TimeoutError:  # safe: nothing at or above an unconfirmed ceiling was handed out
            log.warning("store writes still in flight after %.1fs; stopping without them", config.store_timeout)
    finally:
        await store.close()
    log.info("March stopped")


async def _close_connections(conns: set[Connection], timeout: float) -> None:
    """Let every connection finish what it has read, then close it; force after ``timeout``."""
    for c in list(conns):
        if not c.busy and not c.backlog:
            c.close()
    deadline = time.monotonic() + timeout
    while conns and time.monotonic() < deadline:
        for c in list(conns):
            if not c.busy and not c.backlog and not c.closing:
                c.close()
        await asyncio.sleep(0.01)  # polling a condition with a deadline, during shutdown only
    for c in list(conns):
        if c.transport is not None:
            c.transport.abort()
    with contextlib.suppress(Exception):
        await asyncio.sleep(0)


async def _close_idle(app: App, conns: set[Connection]) -> None:
    while True:
        await asyncio.sleep(min(1.0, app.config.timeout / 2))
        limit = time.monotonic() - app.config.timeout
        for c in list(conns):
            if c.client is not None and c.client.last_active < limit and not c.busy:
                app.stats.timeouts_closed += 1
                c.close()
