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

Observability (``march.metrics``, ``march.diagnostics``): each read's requests are counted and
timed by command (``account``: two clock readings per read, nothing allocated per request), slow
ones go to SLOWLOG, waits to LATENCY; MONITOR connections get every request (one truth test per
request while there are none); ``--metrics-port`` serves them to Prometheus. Client limits hit are
logged, rate-limited.

Shutdown (``serve(config, stop)``): stop accepting, let each connection finish the requests it has
read, wait at most ``shutdown_timeout``, then close what is left; wait for store writes in flight,
close the store. This module never knows a command: it calls ``commands.call``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import ipaddress
import logging
import resource
import ssl
import time
from collections.abc import Awaitable, Coroutine
from typing import Any, cast

from . import errors
from . import log as march_log
from .app import VERSION, App
from .client import Client
from .commands import call
from .commands.dispatch import as_error, monitored, rerun, show
from .commands.ops import MONITOR_STARTED
from .commands.registry import HOT, Hot, lookup, redacted
from .commands.server import NO_REPLY
from .config import Config
from .diagnostics import COMMAND_WAIT, StoreWatch
from .generators.base import NotServing
from .metrics import MetricsServer, error_kind, node_id, registry_for
from .node import Node
from .resp import ProtocolError, RequestParser, encode, encode_error
from .store import batch

log = logging.getLogger("march")

_HIGH_WATER = 256 << 10  # pause reading from a client whose unsent replies pass this many bytes
_monotonic = time.monotonic
_perf_ns = time.perf_counter_ns
_NO_HOT: dict[bytes, Hot] = {}  # the fast-path table of a connection that is not plain (AUTH, MULTI)
_BIG_REPLY = 4096  # replies at least this long count toward max_output_buffer as a read's replies are made
_FD_RESERVE = 32  # file descriptors kept for the store, etcd, logs (Redis keeps 32 too)
# Seconds a TLS client has to finish its handshake (or `timeout`, if shorter). Until then it is
# not a client yet: it does not count toward max_clients (uvloop's start_tls, which would let it,
# loses handshakes under load), so this bound is what keeps silent connections from piling up.
_HANDSHAKE_TIMEOUT = 10.0


class ListenError(Exception):
    """The listening socket could not be opened (port in use, bad address)."""


class Connection(asyncio.Protocol):
    def __init__(self, app: App, conns: set[Connection], tls: ssl.SSLContext | None = None) -> None:
        self.app = app
        self.conns = conns
        self.tls = tls  # came in on the TLS port (already through its handshake): redirects name TLS addresses
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
        self.pending: Coroutine[Any, Any, Any] | None = None  # the handler coroutine ``task`` runs
        self.commands = app.metrics.commands  # per-command counters (``account``)
        self.monitors = app.monitors.feeds  # the MONITOR connections (the same dict for the server's life)

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        self.transport = transport
        app = self.app
        app.stats.connections += 1
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        addr = _addr(peer)
        if len(app.clients) >= app.max_clients:
            app.stats.rejected += 1
            _limit_hit(
                "refusing a client from %s: max_clients (%d) reached", addr, app.max_clients, limit="max_clients"
            )
            transport.write(encode_error(errors.MAX_CLIENTS))
            transport.close()
            return
        if app.config.protected_mode and app.users.default.nopass and not _is_loopback(peer):
            app.stats.rejected += 1
            _limit_hit("refusing a client from %s: protected mode (no password set)", addr, limit="protected_mode")
            transport.write(encode_error(errors.PROTECTED_MODE))
            transport.close()
            return
        transport.set_write_buffer_limits(high=_HIGH_WATER)
        client = Client(app, app.next_client_id(), addr, _addr(sock), self.tls is not None)
        client.unsent = transport.get_write_buffer_size
        self.client = client
        self.parser.auth_source = client  # Redis' small limits for unauthenticated clients until it is
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
            self.app.monitors.remove(self.client.id)
        self.conns.discard(self)
        if self.task is not None and not self.task.done():
            self.task.cancel()
            pending = self.pending
            if pending is not None and inspect.getcoroutinestate(pending) == inspect.CORO_CREATED:
                pending.close()  # the task never started it: not "a coroutine that was never awaited"

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
        try:
            requests = self.parser.feed(data)
        except ProtocolError as exc:
            # Redis runs the requests that came before the bad bytes, answers the error, closes.
            self.app.stats.protocol_errors += 1
            self.protocol_error = str(exc)
            self.deaf = True
            requests = exc.requests
        if requests:  # idle ``timeout`` counts from the last complete request, not the last byte
            self.client.last_active = _monotonic()
        if self.busy:
            self.backlog.extend(requests)
            return
        self.run(requests, 0)

    # --- running requests ---------------------------------------------------------------------

    def run_backlog(self) -> None:
        requests, self.backlog = self.backlog, []
        self.run(requests, 0)

    def error_reply(self, exc: Exception, args: list[bytes]) -> bytes:
        """The reply for a request whose handler raised (a bug costs one reply, never the server),
        counted by command and error kind."""
        self.app.stats.errors += 1
        message = as_error(self.client, exc).message
        self.app.metrics.commands.of(args[0]).error(error_kind(message))
        return encode_error(message)

    def slow(self, args: list[bytes], ns: int) -> None:
        """A request at least ``slowlog_log_slower_than`` long: into SLOWLOG (redacted, truncated).
        As in Redis, only commands that exist (an unknown name is no command), not EXEC
        (``skip_slowlog``: the commands it ran are logged one by one, ``commands.transactions``),
        nor a request MULTI queued (a pipelined MULTI ... EXEC read at once is the exception:
        its queued requests are accounted once EXEC has started, and may show at threshold 0)."""
        spec = lookup(args[0])
        client = self.client
        if spec is None or "skip_slowlog" in spec.flags or (client.multi is not None and spec.queued):
            return  # (queued by MULTI: logged when EXEC runs it)
        self.app.slowlog.add(redacted(args), ns // 1000, client.addr, client.name, self.app.config.slowlog_max_len)

    def feed_monitors(self, args: list[bytes]) -> None:
        """Show a request about to run to the MONITOR connections, as Redis does
        (``commands.dispatch.monitored``: not admin commands, not refused or queued requests;
        passwords redacted)."""
        if monitored(self.client, args):
            show(self.client, args)

    def monitor_line(self, line: bytes) -> None:
        """One line for this connection in MONITOR mode (bounded by max_output_buffer like any reply)."""
        if not self.closing:
            self.transport.write(line)
            if self.write_paused:
                self.check_output_buffer()

    def run(self, requests: list[list[bytes]], start: int) -> None:
        """Run ``requests[start:]`` in order; stop at the first that must wait and resume after it.

        The one fast path: a hot command (one that never changes connection state) with its exact
        arity on a plain connection (authenticated, not in MULTI, a user with every command on every
        key) is called directly; everything
        else goes through ``call``, which makes every check. This runs for every request (a read
        holding one request is the common case): keep it lean.
        """
        client = self.client
        app = self.app
        monitors = self.monitors  # empty unless someone runs MONITOR: one truth test per request
        hot = (
            app.hot
            if client.authenticated
            and client.multi is None
            and client.user.unrestricted
            and not (monitors and client.id in monitors)  # a MONITOR connection's requests are checked
            else _NO_HOT
        )
        out: list[bytes] = []
        big = 0  # bytes of large replies in ``out`` (checked against max_output_buffer as they are made)
        n = len(requests)
        i = start
        began = _perf_ns()  # the read's requests answered at once share its time (``account``)
        run = 0  # the last run of identical requests answered at once
        while i < n:
            args = requests[i]
            i += 1
            if monitors:
                self.feed_monitors(args)
            entry = hot.get(args[0])
            try:
                if entry is not None and len(args) == entry.arity:
                    if i < n and entry.consecutive is not None and requests[i] == args:
                        # A run of identical requests (a pipeline of INCRs on one key): answered
                        # with consecutive integers from one call, exactly what running them one
                        # by one would give, since nothing else runs in between.
                        j = i + 1
                        while j < n and requests[j] == args:
                            j += 1
                        last = entry.consecutive(client, args, j - i + 1)
                        if last is not None:
                            if monitors:  # (the first was shown above)
                                for _ in range(j - i):
                                    self.feed_monitors(args)
                            out.extend([b":%d\r\n" % v for v in range(last - (j - i), last + 1)])
                            run = j - i + 1
                            i = j
                            continue
                    result = entry.handler(client, args)
                else:
                    result = call(client, args)
                    hot = (
                        app.hot
                        if client.authenticated
                        and client.multi is None
                        and client.user.unrestricted
                        and not (monitors and client.id in monitors)
                        else _NO_HOT
                    )
                    self.parser.authenticated = client.authenticated  # (after AUTH, HELLO AUTH, RESET)
            except Exception as exc:
                out.append(self.error_reply(exc, args))
                continue
            if result.__class__ is int:
                out.append(b":%d\r\n" % result)
            elif asyncio.iscoroutine(result):
                if out:
                    self.transport.write(b"".join(out))
                app.stats.commands += i - start
                now = _perf_ns()
                self.account(requests, start, i - 1, now - began)  # this one is timed when it is done
                self.wait(result, requests, i, now)
                return
            elif result is not NO_REPLY:
                if result is MONITOR_STARTED:
                    app.monitors.add(client.id, self.monitor_line)
                    hot = _NO_HOT  # (the rest of this read is checked too)
                    result = "OK"
                reply = encode(result, client.proto)
                out.append(reply)
                if len(reply) > _BIG_REPLY:  # only such replies can add up to max_output_buffer
                    big += len(reply)
                    if big + self.transport.get_write_buffer_size() > app.config.max_output_buffer:
                        self.drop(f"replies of one read over max_output_buffer ({big} bytes)")
                        return
            if client.close_after:
                break
        app.stats.commands += i - start
        ns = _perf_ns() - began
        answered = i - start
        if answered == 1 or answered == run > 0:
            # One request, or one run of identical ones (a pipeline of INCRs on one key): the common
            # cases, counted here; ``account`` does the same for any mix.
            name = requests[start][0]
            stats = self.commands.spellings.get(name) or self.commands.of(name)
            share = ns // answered
            stats.hist[share.bit_length()] += answered
            stats.total_ns += ns
            if share >= app.config.slowlog_log_slower_than * 1000 >= 0:
                for args in requests[start:i]:
                    self.slow(args, share)
        else:
            self.account(requests, start, i, ns)
        if self.protocol_error and not self.backlog and not client.close_after:
            out.append(encode_error(errors.PROTOCOL_ERROR.format(self.protocol_error)))
            client.close_after = True
        if out:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
            if self.write_paused:
                self.check_output_buffer()
        if client.close_after:
            self.close()
        elif self.backlog and not self.busy:
            self.run_backlog()

    def account(self, requests: list[list[bytes]], start: int, end: int, ns: int) -> None:
        """Count ``requests[start:end]``, answered at once in ``ns``, by command (march.metrics).

        One clock reading per read, not per request: each request is taken to have lasted an equal
        share of the read (for a pipeline, that share is what a request costs; a read of one request,
        the common case, is timed exactly). A request that waits is timed alone when it is done
        (``finish``). Requests in a row with the same command are counted at once. SLOWLOG takes the
        requests whose share reaches ``slowlog_log_slower_than`` (read at use time: CONFIG SET).
        """
        count = end - start
        commands = self.commands
        if count == 1:
            name = requests[start][0]
            stats = commands.spellings.get(name) or commands.of(name)
            stats.hist[ns.bit_length()] += 1
            stats.total_ns += ns
            if ns >= self.app.config.slowlog_log_slower_than * 1000 >= 0:
                self.slow(requests[start], ns)
            return
        if count <= 0:
            return
        share = ns // count
        slot = share.bit_length()
        spellings = commands.spellings
        batch = requests if start == 0 and end == len(requests) else requests[start:end]
        name = batch[0][0]
        for args in batch:  # one command? (a pipeline usually is: then this only compares)
            if args[0] != name:
                break
        else:
            stats = spellings.get(name) or commands.of(name)
            stats.hist[slot] += count
            stats.total_ns += ns
            self.slow_batch(batch, share)
            return
        same = 0
        for args in batch:
            if args[0] == name:
                same += 1
                continue
            stats = spellings.get(name) or commands.of(name)
            stats.hist[slot] += same
            stats.total_ns += share * same
            name = args[0]
            same = 1
        stats = spellings.get(name) or commands.of(name)
        stats.hist[slot] += same
        stats.total_ns += share * same
        self.slow_batch(batch, share)

    def slow_batch(self, batch: list[list[bytes]], share: int) -> None:
        if share >= self.app.config.slowlog_log_slower_than * 1000 >= 0:
            for args in batch:
                self.slow(args, share)

    def wait(self, pending: Any, requests: list[list[bytes]], resume_at: int, began: int) -> None:
        """A handler must wait: pause this connection until ``pending`` is done, keeping order.
        ``began``: when the request started (``perf_counter_ns``), for its duration."""
        self.busy = True
        self.transport.pause_reading()
        self.pending = pending
        self.task = asyncio.get_running_loop().create_task(self.finish(pending, requests, resume_at, began))

    async def finish(self, pending: Any, requests: list[list[bytes]], resume_at: int, began: int) -> None:
        """Await one handler's coroutine, write its reply, then run the rest of the read."""
        client = self.client
        args = requests[resume_at - 1]
        try:
            try:
                value = await pending
            except NotServing:
                # This node stopped serving while the request waited (it got no ID): run it again
                # once the change is over, here if this node serves by then, else a MOVED reply.
                value = await rerun(client, args)
            reply = encode(value, client.proto) if value is not NO_REPLY else b""
        except Exception as exc:
            reply = self.error_reply(exc, args)
        took = _perf_ns() - began
        stats = self.app.metrics.commands.of(args[0])
        stats.observe(took)
        stats.waits += 1
        if 0 <= self.app.config.slowlog_log_slower_than * 1000 <= took:
            self.slow(args, took)
        self.app.latency.add(COMMAND_WAIT, took // 1_000_000)
        if self.closing:
            return
        if reply:
            self.transport.write(reply)
        self.busy = False
        self.task = None
        self.pending = None
        if client.close_after:
            self.close()
            return
        if not self.write_paused:
            self.transport.resume_reading()
        self.run(requests, resume_at)

    def check_output_buffer(self) -> None:
        assert self.transport is not None
        if self.transport.get_write_buffer_size() > self.app.config.max_output_buffer:
            self.drop("unread replies over max_output_buffer")

    def drop(self, why: str) -> None:
        """Close this connection at once, its unsent replies dropped (a client over its output limit)."""
        _limit_hit(
            "closing client %s: %s", self.client.addr if self.client is not None else "?", why, limit="output_buffer"
        )
        self.app.stats.output_closed += 1
        self.closing = True
        self.deaf = True
        self.transport.abort()

    def close(self) -> None:
        """Close after the replies already written have been sent. A connection whose request is
        still running (CLIENT KILL from another client, ACL DELUSER of its own user) closes once
        that request's reply is written, as Redis closes a client after the reply in progress."""
        if self.busy and not self.closing and self.client is not None:
            self.client.close_after = True  # ``finish`` writes the reply, then closes
            return
        self.closing = True
        self.deaf = True
        if self.transport is not None:
            self.transport.close()


def _limit_hit(message: str, *args: Any, limit: str) -> None:
    """A client limit was hit: one line (rate-limited by march.log, so a flood costs a few lines)."""
    march_log.event(log, logging.WARNING, "client_limit", message, *args, limit=limit)


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


async def serve(config: Config, stop: Awaitable[Any], ready: asyncio.Future[int] | None = None) -> None:
    """Run a node until ``stop`` completes or SHUTDOWN is called.

    The store opens first (a locked or unwritable data dir fails before listening). A single node
    serves as soon as it listens; a cluster node listens (standbys answer too), then joins:
    election and the rest run in the background.
    """
    loop = asyncio.get_running_loop()
    node = Node(config)
    await node.open()
    app = App(config, node, HOT)
    app.max_clients = _clients_the_fd_limit_allows(config.max_clients)
    app.shutdown_requested = asyncio.Event()
    conns: set[Connection] = set()
    servers: list[asyncio.Server] = []
    store_watch = StoreWatch(app.metrics, app.latency).chunk  # store transactions: metrics, LATENCY, logs
    batch.listeners.append(store_watch)
    metrics: MetricsServer | None = None
    try:
        server = await _listen(loop, lambda: Connection(app, conns), config.bind, config.port)
        servers.append(server)
        app.port = server.sockets[0].getsockname()[1]
        log.info(
            "March %s ready to accept connections on %s:%d (store: %s)", VERSION, config.bind, app.port, node.store.name
        )
        if config.tls_port:
            context = tls_context(config)
            handshake = min(_HANDSHAKE_TIMEOUT, config.timeout or _HANDSHAKE_TIMEOUT)
            tls = await _listen(
                loop, lambda: Connection(app, conns, tls=context), config.bind, config.tls_port, context, handshake
            )
            servers.append(tls)
            app.tls_port = tls.sockets[0].getsockname()[1]
            log.info("TLS on %s:%d (client certificates: %s)", config.bind, app.tls_port, config.tls_auth_clients)
        node.join(app.port, app.tls_port)
        march_log.set_node(node_id(app))
        if config.metrics_port:
            metrics = MetricsServer(registry_for(app), config.metrics_max_connections, config.metrics_timeout)
            try:
                port = await metrics.start(config.bind, config.metrics_port)
            except OSError as exc:
                raise ListenError(f"metrics: cannot listen on {config.bind}:{config.metrics_port}: {exc}") from exc
            log.info("Prometheus metrics on http://%s:%d/metrics", config.bind, port)
        if ready is not None and not ready.done():
            ready.set_result(app.port)
        idle = loop.create_task(_close_idle(app, conns))  # always: CONFIG SET timeout may turn it on
        stopper = asyncio.ensure_future(stop)
        requested = loop.create_task(app.shutdown_requested.wait())
        failed = loop.create_task(node.failed.wait())  # e.g. its node id is another live process's
        await asyncio.wait({stopper, requested, failed}, return_when=asyncio.FIRST_COMPLETED)
        log.info("shutting down")
        app.shutdown_requested.set()
        for t in (stopper, requested, idle, failed):
            if t is not None and not t.done():
                t.cancel()
        for s in servers:
            s.close()
        await _close_connections(conns, config.shutdown_timeout)
    finally:
        if metrics is not None:
            await metrics.stop()
        await node.stop()  # steps down (a primary gives the leader key back at once), drains, closes
        batch.listeners.remove(store_watch)
    log.info("March stopped")
    if node.failure is not None:
        raise node.failure  # the caller says why and exits with status 1


async def _listen(
    loop: asyncio.AbstractEventLoop,
    factory: Any,
    bind: str,
    port: int,
    context: ssl.SSLContext | None = None,
    handshake_timeout: float | None = None,
) -> asyncio.Server:
    """Listen; with ``context``, TLS: a connection reaches the protocol once its handshake is done,
    and one that does not finish it within ``handshake_timeout`` is closed."""
    try:
        if context is None:
            return await loop.create_server(factory, bind, port, reuse_address=True)
        return await loop.create_server(
            factory, bind, port, reuse_address=True, ssl=context, ssl_handshake_timeout=handshake_timeout
        )
    except OSError as exc:
        raise ListenError(f"cannot listen on {bind}:{port}: {exc}") from exc


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


def _clients_the_fd_limit_allows(wanted: int) -> int:
    """``max_clients``, lowered (and logged) if the process may not open that many files, as Redis does.

    The soft limit is raised toward the hard one first."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = wanted + _FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return wanted
    allowed = max(1, soft - _FD_RESERVE)
    log.warning(
        "max_clients lowered from %d to %d: this process may open %d files (ulimit -n), %d are kept for the rest",
        wanted,
        allowed,
        soft,
        _FD_RESERVE,
    )
    return allowed


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
            elif c.closing and c.transport is not None and c.transport.get_write_buffer_size() == 0:
                c.transport.abort()  # all sent: don't wait for a TLS client's close_notify
        await asyncio.sleep(0.01)  # polling a condition with a deadline, during shutdown only
    for c in list(conns):
        if c.transport is not None:
            c.transport.abort()
    with contextlib.suppress(Exception):
        await asyncio.sleep(0)


async def _close_idle(app: App, conns: set[Connection]) -> None:
    while True:
        timeout = app.config.timeout  # read each round: CONFIG SET may change it (0: never close)
        await asyncio.sleep(min(1.0, timeout / 2) if timeout > 0 else 1.0)
        if app.config.timeout <= 0:
            continue
        limit = time.monotonic() - app.config.timeout
        for c in list(conns):
            if c.client is not None and c.client.last_active < limit and not c.busy:
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
