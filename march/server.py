"""The listener: connections, pipelining, back-pressure, limits, shutdown.

One ``Connection`` (an asyncio protocol on uvloop) per client. Each read is parsed into requests;
the requests are run in order and their replies written with one ``write`` per read. A handler
that returns a coroutine (waiting for a store write) pauses that connection: its replies stay in
order, reading is paused until it is done, and other connections carry on.

Limits: ``max_clients`` (the extra connection gets an error and is closed; a TLS connection counts
from its accept, as in Redis: ``TlsListener``), argument count, bulk and inline sizes and the
memory of one unfinished request (``client_query_buffer_limit``: the parser; a protocol error
closes that connection only), ``query_buffer_budget`` (the unfinished requests of all clients
together: past it the largest holders are closed, ``Connections``), ``max_output_buffer`` (replies
that would pass it close the client before they are written), ``timeout`` (idle clients are closed).
Back-pressure: when a client's unsent replies (those in the transport's buffer and those made in
this read, ``Connection.unsent``) pass the write high-water mark, they are written, and if the
transport is full the rest of the read waits (``Stalled``) and reading pauses until they drain;
so a client that pipelines large replies and reads none holds about one reply beyond the mark.
A run of identical pipelined requests to a command registered with ``consecutive=`` (INCR) is
answered from as few calls as the generator allows (one while its durable range holds the run),
and found once however often it waits: a pipeline costs time linear in its length.
Protected mode: with no password, only loopback clients are served.

Memory: large request buffers get their own mappings from glibc and go back to the system when
freed (``_give_large_frees_back``), so the memory of clients that held large requests returns
when they go.

Observability (``march.metrics``, ``march.diagnostics``): each read's requests are counted and
timed by command (``account``: two clock readings per read, nothing allocated per request), slow
ones go to SLOWLOG, waits to LATENCY; requests refused with NOAUTH are no calls (their errors are
counted) and a failed AUTH's throttle wait is no command time (``finish``), as in Redis. MONITOR
connections get every request (one truth test per request while there are none);
``--metrics-port`` serves them to Prometheus. Client limits hit are logged, rate-limited.

Shutdown (``serve(config, stop)``): stop accepting (every port, the metrics port too; a connection
accepted just before is closed at once), let each connection finish the requests it has read, wait
at most ``shutdown_timeout``, then close what is left; wait for store writes in flight, close the
store. This module never knows a command: it calls ``commands.call``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import gc
import inspect
import ipaddress
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass
from typing import Any, cast

from . import errors
from . import log as march_log
from .app import App
from .client import Client
from .commands import call
from .commands.dispatch import as_error, monitored, rerun, show
from .commands.ops import MONITOR_STARTED
from .commands.registry import HOT, REGISTRY, Hot, lookup, redacted
from .commands.server import NO_REPLY
from .config import Config
from .diagnostics import COMMAND_WAIT, StoreWatch
from .errors import CommandError
from .generators.base import NotServing
from .limits import clients_the_fd_limit_allows as _clients_the_fd_limit_allows
from .metrics.collector import node_id, registry_for
from .metrics.counters import error_kind
from .metrics.endpoint import MetricsServer
from .node import Node
from .resp import ProtocolError, RequestParser, encode, encode_error
from .store import batch
from .version import VERSION

log = logging.getLogger("march")

_HIGH_WATER = 256 << 10  # a client's unsent replies past this: its requests wait (and reading pauses) until they drain
_monotonic = time.monotonic
_perf_ns = time.perf_counter_ns
_NO_HOT: dict[bytes, Hot] = {}  # the fast-path table of a connection that is not plain (AUTH, MULTI)
# Seconds a TLS client has to finish its handshake (or `timeout`, if shorter). It counts toward
# max_clients from its accept, so this bound is what keeps silent connections from holding places.
_HANDSHAKE_TIMEOUT = 10.0
_ACCEPTS_PER_WAKE = 100  # TLS connections accepted in one turn of the loop at most (asyncio's backlog default)
_ACCEPT_PAUSE = 1.0  # seconds the TLS port stops accepting when the process is out of files or memory (as asyncio)
# glibc's threshold above which an allocation gets its own mapping (given back to the system when
# freed). glibc raises it (up to 32 MiB) each time such a block is freed, after which large request
# buffers come from the heap and stay in the process when clients go: pinned at glibc's own start
# value, the memory of clients that held large requests returns to the system when they go.
_MMAP_THRESHOLD = 128 << 10
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


class ListenError(Exception):
    """The listening socket could not be opened (port in use, bad address)."""


@dataclass(slots=True)
class Stalled:
    """Requests of a read left to run once the client's unsent replies drain below ``_HIGH_WATER``."""

    requests: list[list[bytes]]
    at: int  # the next one to run
    same_until: int  # requests[at - 1 : same_until] are known to be identical (see ``Connection.run``)


class Connections:
    """What the connections of one server share: the set of them, the TLS handshakes in progress
    (counted toward max_clients from their accept) and the unparsed input they hold.

    Input budget: each connection reports the memory its unfinished request holds (``RequestParser.held``,
    bounded per client by ``client_query_buffer_limit``); when all of them together pass
    ``query_buffer_budget``, the largest holders are closed, largest first, until the rest fit."""

    def __init__(self) -> None:
        self.all: set[Connection] = set()
        self.handshakes = 0
        self.held = 0  # bytes of unfinished requests, all connections together
        self.holders: set[Connection] = set()  # the connections holding some

    def hold(self, conn: Connection, held: int) -> None:
        """``conn`` now holds ``held`` bytes of unfinished input; past the budget, close the largest holders."""
        grown = held > conn.held
        self.held += held - conn.held
        conn.held = held
        if held:
            self.holders.add(conn)
        else:
            self.holders.discard(conn)
        budget = conn.app.config.query_buffer_budget  # (read at use time: CONFIG SET)
        if grown and 0 < budget < self.held:
            for c in sorted(self.holders, key=_held, reverse=True):
                if self.held <= budget:
                    break
                c.evict(self.held, budget)


def _held(conn: Connection) -> int:
    return conn.held


class Connection(asyncio.Protocol):
    def __init__(self, app: App, peers: Connections, tls: ssl.SSLContext | None = None, admitted: bool = False) -> None:
        self.app = app
        self.peers = peers
        self.conns = peers.all
        self.tls = tls  # came in on the TLS port (already through its handshake): redirects name TLS addresses
        # A TLS connection counted toward max_clients (in ``peers.handshakes``) from its accept,
        # until its handshake ends: then it is a client, or gone.
        self.admitted = admitted
        # Set in connection_made; the protocol never sees data before that.
        self.transport: asyncio.Transport = cast(asyncio.Transport, None)
        self.client: Client = cast(Client, None)
        self.deaf = True  # ignore input: not accepted yet, closing, or after a protocol error
        cfg = app.config
        self.parser = RequestParser(
            cfg.max_args, cfg.max_bulk_len, cfg.max_inline_len, max_held=cfg.client_query_buffer_limit
        )
        self.held = 0  # bytes of unfinished input, as counted in ``peers.held``
        self.busy = False  # a handler's coroutine is running; later requests wait in ``backlog``
        self.backlog: list[list[bytes]] = []
        self.stalled: Stalled | None = None  # requests waiting for the unsent replies to drain
        self.made = 0  # bytes of replies made in this read and not written yet (``unsent``)
        self.write_paused = False
        self.closing = False
        self.protocol_error = ""  # set when the parser refused input: answer it after what came before
        self.task: asyncio.Task[None] | None = None
        self.pending: Coroutine[Any, Any, Any] | None = None  # the handler coroutine ``task`` runs
        self.commands = app.metrics.commands  # per-command counters (``account``)
        self.monitors = app.monitors.feeds  # the MONITOR connections (the same dict for the server's life)
        self.subscribers = app.pubsub.subscribers  # the subscribed connections (likewise)

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        self.transport = transport
        app = self.app
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        addr = _addr(peer)
        if self.admitted:  # a TLS connection, counted (and let in) at its accept
            self.handshake_over()
        else:
            app.stats.connections += 1
            if len(app.clients) + self.peers.handshakes >= app.max_clients:
                app.stats.rejected += 1
                _limit_hit(
                    "refusing a client from %s: max_clients (%d) reached", addr, app.max_clients, limit="max_clients"
                )
                transport.write(encode_error(errors.MAX_CLIENTS))
                transport.close()
                return
        if _shutting_down(app):  # accepted just before the listeners closed (or a TLS handshake that ended since)
            app.stats.rejected += 1
            transport.abort()
            return
        if app.config.protected_mode and app.users.default.nopass and not _is_loopback(peer):
            app.stats.rejected += 1
            _limit_hit("refusing a client from %s: protected mode (no password set)", addr, limit="protected_mode")
            transport.write(encode_error(errors.PROTECTED_MODE))
            transport.close()
            return
        transport.set_write_buffer_limits(high=_HIGH_WATER)
        client = Client(app, app.next_client_id(), addr, _addr(sock), self.tls is not None)
        client.unsent = self.unsent
        client.query_buffer = self.query_buffer
        client.push = self.monitor_line  # (pub/sub messages: written, and bounded, as MONITOR lines are)
        self.client = client
        self.parser.auth_source = client  # Redis' small limits for unauthenticated clients until it is
        self.deaf = False
        app.clients[client.id] = client
        app.closers[client.id] = self.close
        self.conns.add(self)

    def handshake_over(self) -> None:
        """A TLS connection's handshake ended (done, or failed): it no longer counts as a handshake."""
        if self.admitted:
            self.admitted = False
            self.peers.handshakes -= 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.deaf = True
        self.stalled = None
        if self.held:
            self.parser.discard()
            self.peers.hold(self, 0)
        if self.client is not None:
            self.app.clients.pop(self.client.id, None)
            self.app.closers.pop(self.client.id, None)
            self.app.monitors.remove(self.client.id)
            self.app.pubsub.remove(self.client.id)
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
        if self.busy or self.closing or self.transport is None:
            return
        if self.stalled is not None:
            # Not from inside the transport's own callback: the requests run in a turn of their own.
            asyncio.get_running_loop().call_soon(self.go_on)
        else:
            self.transport.resume_reading()

    def go_on(self) -> None:
        """Run the requests left when the unsent replies passed the high-water mark (they have drained)."""
        stalled = self.stalled
        if stalled is None or self.busy or self.closing or self.write_paused:
            return  # (dropped, or paused again meanwhile: resume_writing comes back)
        self.stalled = None
        self.transport.resume_reading()
        self.run(stalled.requests, stalled.at, stalled.same_until)

    def unsent(self) -> int:
        """Bytes of replies made for this client and not sent yet: those in the transport's buffer
        and those made in this read but not written yet (``Client.reply_room``)."""
        return self.transport.get_write_buffer_size() + self.made

    def query_buffer(self) -> int:
        """Bytes of memory this client's unfinished request holds (CLIENT LIST ``qbuf``)."""
        return self.held

    def data_received(self, data: bytes) -> None:
        if self.deaf:
            return
        parser = self.parser
        try:
            requests = parser.feed(data)
        except ProtocolError as exc:
            # Redis runs the requests that came before the bad bytes, answers the error, closes.
            self.app.stats.protocol_errors += 1
            self.protocol_error = str(exc)
            self.deaf = True
            requests = exc.requests
            parser.discard()
            if self.protocol_error == errors.PROTO_TOO_BIG:
                _limit_hit(
                    "closing client %s: its request passed client_query_buffer_limit (%d bytes)",
                    self.client.addr,
                    self.app.config.client_query_buffer_limit,
                    limit="client_query_buffer_limit",
                )
        if parser.held != self.held:
            self.peers.hold(self, parser.held)  # (past the node's budget, the largest holders are closed)
            if self.closing:
                return
        if requests:  # idle ``timeout`` counts from the last complete request, not the last byte
            self.client.last_active = _monotonic()
        if self.busy or self.stalled is not None:
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

    def run(self, requests: list[list[bytes]], start: int, same_until: int = 0) -> None:
        """Run ``requests[start:]`` in order; stop at the first that must wait and resume after it.

        The one fast path: a hot command (one that never changes connection state) with its exact
        arity on a plain connection (authenticated, not in MULTI, a user with every command on every
        key) is called directly; everything else goes through ``call``, which makes every check.
        This runs for every request (a read holding one request is the common case): keep it lean.

        Identical requests in a row to a command with ``consecutive`` (pipelined INCRs on one key)
        are answered together, as many at a time as the command can (``Hot.consecutive``); the rest
        run one by one. The run is found once: ``same_until`` (kept across waits) says how far
        ``requests`` is known to repeat, so no request is compared twice, whatever the waits.

        Replies are written once per read, or as soon as the unsent ones (those made here and those
        in the transport's buffer) pass ``_HIGH_WATER``: then, if the transport is full, the rest
        of the read waits for it to drain (``Stalled``, ``go_on``); replies that would pass
        ``max_output_buffer`` drop the client before they are written.
        """
        client = self.client
        app = self.app
        monitors = self.monitors  # empty unless someone runs MONITOR: one truth test per request
        subscribers = self.subscribers  # empty unless someone SUBSCRIBEs
        hot = (
            app.hot
            if client.authenticated
            and client.multi is None
            and client.user.unrestricted
            and not (monitors and client.id in monitors)  # a MONITOR connection's requests are checked
            and not (subscribers and client.id in subscribers)  # (so are a subscribed connection's)
            else _NO_HOT
        )
        transport = self.transport
        out: list[bytes] = []
        made = 0  # bytes of the encoded replies in ``out`` (integer replies are no larger than their requests)
        room = -1  # what they may take before being written (found at the first: most reads make none)
        n = len(requests)
        i = start
        began = _perf_ns()  # the read's requests answered at once share its time (``account``)
        run = 0  # requests answered in runs of identical ones
        refused: list[int] | None = None  # requests refused with NOAUTH: no call, as in Redis
        stall = False
        while i < n:
            args = requests[i]
            i += 1
            if monitors:
                self.feed_monitors(args)
            entry = hot.get(args[0])
            try:
                if entry is not None and len(args) == entry.arity:
                    if entry.consecutive is not None and i < n and (i < same_until or requests[i] == args):
                        if i >= same_until:
                            j = i + 1
                            while j < n and requests[j] == args:
                                j += 1
                            same_until = j
                        # Answered with consecutive integers from one call, exactly what running
                        # them one by one would give, since nothing else runs in between.
                        ids = entry.consecutive(client, args, same_until - i + 1)
                        if ids is not None:
                            more = len(ids) - 1
                            if monitors:  # (the first was shown above)
                                for _ in range(more):
                                    self.feed_monitors(args)
                            out.extend([b":%d\r\n" % v for v in ids])
                            run += more + 1
                            i += more
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
                        and not (subscribers and client.id in subscribers)
                        else _NO_HOT
                    )
                    self.parser.authenticated = client.authenticated  # (after AUTH, HELLO AUTH, RESET)
            except Exception as exc:
                out.append(self.error_reply(exc, args))
                if isinstance(exc, CommandError) and exc.message == errors.NOAUTH:
                    if refused is None:
                        refused = []
                    refused.append(i - 1)
                continue
            if result.__class__ is int:
                out.append(b":%d\r\n" % result)
            elif asyncio.iscoroutine(result):
                if out:
                    transport.write(b"".join(out))
                self.made = 0
                answered = i - start - (len(refused) if refused else 0)
                app.stats.commands += answered
                now = _perf_ns()
                self.account(requests, start, i - 1, now - began, refused)  # this one is timed when it is done
                self.wait(result, requests, i, now, same_until)
                return
            elif result is not NO_REPLY:
                if result is MONITOR_STARTED:
                    app.monitors.add(client.id, self.monitor_line)
                    hot = _NO_HOT  # (the rest of this read is checked too)
                    result = "OK"
                reply = encode(result, client.proto)
                out.append(reply)
                made += len(reply)
                self.made = made
                if room < 0:
                    room = _HIGH_WATER - transport.get_write_buffer_size()
                if made > room:
                    buffered = transport.get_write_buffer_size()
                    if made + buffered > app.config.max_output_buffer:
                        self.drop(f"replies of one read over max_output_buffer ({made} bytes)")
                        return
                    transport.write(b"".join(out))
                    out = []
                    made = self.made = 0
                    if self.write_paused:  # the transport is past its high-water mark: the rest waits
                        stall = True
                        break
                    room = _HIGH_WATER - transport.get_write_buffer_size()
            if client.close_after:
                break
        answered = i - start
        app.stats.commands += answered - (len(refused) if refused else 0)
        ns = _perf_ns() - began
        if refused is None and (answered == 1 or answered == run > 0):
            # One request, or runs of identical ones (pipelines of INCRs): the common cases, counted
            # here; ``account`` does the same for any mix.
            name = requests[start][0]
            stats = self.commands.spellings.get(name) or self.commands.of(name)
            share = ns // answered
            stats.hist[share.bit_length()] += answered
            stats.total_ns += ns
            if share >= app.config.slowlog_log_slower_than * 1000 >= 0:
                for args in requests[start:i]:
                    self.slow(args, share)
        else:
            self.account(requests, start, i, ns, refused)
        if stall and i < n and not client.close_after:
            self.stalled = Stalled(requests, i, same_until)
            return
        if self.protocol_error and not self.backlog and not client.close_after:
            out.append(encode_error(errors.PROTOCOL_ERROR.format(self.protocol_error)))
            client.close_after = True
        if out:
            transport.write(out[0] if len(out) == 1 else b"".join(out))
            self.made = 0
            if self.write_paused:
                self.check_output_buffer()
        if client.close_after:
            self.close()
        elif self.backlog and not self.busy:
            if self.write_paused:
                self.stalled = Stalled([], 0, 0)  # the backlog waits for the replies to drain
            else:
                self.run_backlog()

    def account(
        self, requests: list[list[bytes]], start: int, end: int, ns: int, refused: list[int] | None = None
    ) -> None:
        """Count ``requests[start:end]``, answered at once in ``ns``, by command (march.metrics).

        One clock reading per read, not per request: each request is taken to have lasted an equal
        share of the read (for a pipeline, that share is what a request costs; a read of one request,
        the common case, is timed exactly). A request that waits is timed alone when it is done
        (``finish``). Requests in a row with the same command are counted at once. SLOWLOG takes the
        requests whose share reaches ``slowlog_log_slower_than`` (read at use time: CONFIG SET).

        ``refused``: requests refused with NOAUTH, left out as Redis leaves them out: a command that
        never ran is no call (``dispatch.reject`` counts it as rejected, its error is counted), takes
        no time, is never slow. It is answered, so it is counted as one (``CommandStats.hist``'s first
        slot, no time): calls are the answered requests less the rejected and queued ones.
        """
        if refused:
            skip = set(refused)
            for k in refused:
                name = requests[k][0]
                (self.commands.spellings.get(name) or self.commands.of(name)).hist[0] += 1
            kept = [requests[k] for k in range(start, end) if k not in skip]
            if kept:
                self.account(kept, 0, len(kept), ns * len(kept) // (end - start))
            return
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

    def wait(self, pending: Any, requests: list[list[bytes]], resume_at: int, began: int, same_until: int) -> None:
        """A handler must wait: pause this connection until ``pending`` is done, keeping order.
        ``began``: when the request started (``perf_counter_ns``), for its duration."""
        self.busy = True
        self.transport.pause_reading()
        self.pending = pending
        self.task = asyncio.get_running_loop().create_task(self.finish(pending, requests, resume_at, began, same_until))

    async def finish(
        self, pending: Any, requests: list[list[bytes]], resume_at: int, began: int, same_until: int
    ) -> None:
        """Await one handler's coroutine, write its reply, then run the rest of the read.

        An AUTH or HELLO (the commands that may run before authentication) that waited was held
        back on purpose (AUTH is throttled after failures, per address and user, ``auth.AuthThrottle``,
        so even the right password may wait its turn): it counts as a call that took no time, never
        as a wait, a slow command or a latency event."""
        client = self.client
        args = requests[resume_at - 1]
        spec = lookup(args[0])
        throttled = spec is not None and spec.noauth
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
        stats = self.app.metrics.commands.of(args[0])
        if throttled:
            stats.observe(0)
        else:
            took = _perf_ns() - began
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
        if self.write_paused:  # the reply filled the transport: the rest of the read waits for it to drain
            if self.transport.get_write_buffer_size() > self.app.config.max_output_buffer:
                self.drop("unread replies over max_output_buffer")
            else:
                self.stalled = Stalled(requests, resume_at, same_until)
            return
        self.transport.resume_reading()
        self.run(requests, resume_at, same_until)

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
        self.stalled = None
        self.transport.abort()

    def evict(self, held: int, budget: int) -> None:
        """Close this connection at once: its unfinished request is among the largest, and all of
        them together (``held`` bytes) pass ``query_buffer_budget``. Its memory goes now."""
        _limit_hit(
            "closing client %s: it holds %d bytes of an unfinished request, and all clients %d, past "
            "query_buffer_budget (%d)",
            self.client.addr if self.client is not None else "?",
            self.held,
            held,
            budget,
            limit="query_buffer_budget",
        )
        self.app.stats.input_closed += 1
        self.closing = True
        self.deaf = True
        self.stalled = None
        self.backlog = []
        self.parser.discard()
        self.peers.hold(self, 0)
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
        self.stalled = None
        if self.transport is not None:
            self.transport.close()


def _shutting_down(app: App) -> bool:
    return app.shutdown_requested is not None and app.shutdown_requested.is_set()


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
                    _limit_hit("the TLS port stops accepting for %.0f s: %s", _ACCEPT_PAUSE, exc, limit="files")
                    self.loop.remove_reader(self.sock.fileno())
                    self.retry = self.loop.call_later(_ACCEPT_PAUSE, self.start)
                    return
                continue  # (ECONNABORTED and the like: that one is gone)
            self.admit(sock)

    def admit(self, sock: socket.socket) -> None:
        app, peers = self.app, self.peers
        app.stats.connections += 1
        if _shutting_down(app) or len(app.clients) + peers.handshakes >= app.max_clients:
            app.stats.rejected += 1
            if not _shutting_down(app):
                _limit_hit(
                    "refusing a TLS client from %s: max_clients (%d) reached",
                    _addr(_peername(sock)),
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
                lambda: conn, sock, ssl=self.context, ssl_handshake_timeout=self.handshake_timeout
            )
        except (Exception, asyncio.CancelledError) as exc:  # a failed handshake is the client's, not the server's
            log.debug("TLS handshake from %s failed: %r", _addr(_peername(sock)), exc)
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
    _give_large_frees_back()
    node = Node(config, REGISTRY)
    await node.open()
    app = App(config, node, HOT)
    app.max_clients = _clients_the_fd_limit_allows(config.max_clients)
    app.shutdown_requested = asyncio.Event()
    peers = Connections()
    servers: list[asyncio.Server] = []
    tls_ports: list[TlsListener] = []
    store_watch = StoreWatch(app.metrics, app.latency).chunk  # store transactions: metrics, LATENCY, logs
    batch.listeners.append(store_watch)
    metrics: MetricsServer | None = None
    try:
        server = await _listen(loop, lambda: Connection(app, peers), config.bind, config.port)
        servers.append(server)
        app.port = server.sockets[0].getsockname()[1]
        log.info(
            "March %s ready to accept connections on %s:%d (store: %s)", VERSION, config.bind, app.port, node.store.name
        )
        if config.tls_port:
            context = tls_context(config)
            handshake = min(_HANDSHAKE_TIMEOUT, config.timeout or _HANDSHAKE_TIMEOUT)
            for sock in _listening_sockets(config.bind, config.tls_port):
                tls_ports.append(TlsListener(app, peers, sock, context, handshake))
                tls_ports[-1].start()
            app.tls_port = tls_ports[0].port
            log.info("TLS on %s:%d (client certificates: %s)", config.bind, app.tls_port, config.tls_auth_clients)
        node.join(app.port, app.tls_port)
        if app.group.member is not None:  # Sentinel clients that listen hear of a failover (march.pubsub)
            app.group.member.registry.on_primary_change(app.switch_master)
        march_log.set_node(node_id(app))
        if config.metrics_port:
            metrics = MetricsServer(registry_for(app), config.metrics_max_connections, config.metrics_timeout)
            try:
                port = await metrics.start(config.bind, config.metrics_port)
            except OSError as exc:
                raise ListenError(f"metrics: cannot listen on {config.bind}:{config.metrics_port}: {exc}") from exc
            log.info("Prometheus metrics on http://%s:%d/metrics", config.bind, port)
        _freeze_startup_objects()
        if ready is not None and not ready.done():
            ready.set_result(app.port)
        idle = loop.create_task(_close_idle(app, peers.all))  # always: CONFIG SET timeout may turn it on
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
        for listener in tls_ports:
            listener.close()
        if metrics is not None:  # no new scrapes either
            await metrics.stop()
            metrics = None
        await _close_connections(peers.all, config.shutdown_timeout)
    finally:
        for listener in tls_ports:
            if not listener.closed:
                listener.close()
        if metrics is not None:
            await metrics.stop()
        await node.stop()  # steps down (a primary gives the leader key back at once), drains, closes
        batch.listeners.remove(store_watch)
    log.info("March stopped")
    if node.failure is not None:
        raise node.failure  # the caller says why and exits with status 1


async def _listen(loop: asyncio.AbstractEventLoop, factory: Any, bind: str, port: int) -> asyncio.Server:
    try:
        return await loop.create_server(factory, bind, port, reuse_address=True)
    except OSError as exc:
        raise ListenError(f"cannot listen on {bind}:{port}: {exc}") from exc


_BACKLOG = 100  # connections the kernel queues before they are accepted (asyncio's create_server default)


def _listening_sockets(bind: str, port: int) -> list[socket.socket]:
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


def _freeze_startup_objects() -> None:
    """Leave what startup made (modules, the command table, the store: some 35,000 objects that live
    as long as the process) out of the garbage collector's full passes. Each such pass walked them
    all: measured, 20-57 ms of a stalled loop, every few thousand pipelined requests."""
    gc.collect()
    gc.freeze()


def _give_large_frees_back() -> None:
    """Pin glibc's mmap threshold (``_MMAP_THRESHOLD``): measured, 300 clients each holding 2 MiB of
    an unfinished request left 134 MB in the process after they went, none with it pinned. Not glibc
    (no ``mallopt``): nothing to do."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)


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


async def _close_connections(conns: set[Connection], timeout: float) -> None:
    """Let every connection finish what it has read, then close it; force after ``timeout``."""
    for c in list(conns):
        if not c.busy and not c.backlog and c.stalled is None:
            c.close()
    deadline = time.monotonic() + timeout
    while conns and time.monotonic() < deadline:
        for c in list(conns):
            if not c.busy and not c.backlog and c.stalled is None and not c.closing:
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
