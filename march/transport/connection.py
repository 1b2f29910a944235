"""The connection: one client's requests, read, run in order and answered in order.

One ``Connection`` (an asyncio protocol on uvloop) per client. Each read is parsed into requests
(``march.resp``); the requests are run in order and their replies written with one ``write`` per
read. A handler that returns a coroutine or a future (waiting for a store write: ``march.transport.waiting``)
pauses that connection: its replies stay in order, reading is paused until it is done, and other
connections carry on.

The parts it uses, each its own class: flow control (``march.transport.flow``: unsent replies and
back-pressure, the node's budget of unfinished requests), request timing (``march.transport.timing``:
commandstats, SLOWLOG, LATENCY) and the MONITOR feed (``march.transport.feed``). Limits checked here:
``max_clients`` at the connect (a TLS connection counts from its accept: ``march.transport.listeners``),
protected mode (with no password, only loopback clients are served), the parser's limits (a
protocol error closes that connection only, after answering what came before it). Client limits
hit are logged, rate-limited.

A request forwarded to another node (``commands.Relayed``) is written to its link at once
and the read goes on; its reply takes its place in the read's replies, written once it is in
(``waiting.Relays``). On the other side, once a connection has proven to be another node's
forwarding link, its requests go to its lanes (``waiting.Lanes``: each of the entry node's clients
in order, none waiting for another) instead of the request loop.

A run of identical pipelined requests to a command registered with ``consecutive=`` (INCR) is
answered from as few calls as the generator allows (one while its durable range holds the run),
and found once however often it waits: a pipeline costs time linear in its length.

This module never knows what a command does: it calls ``commands.call`` (or a registered hot
handler directly) and encodes what comes back, telling apart what a handler may return by the
handler contract (``march.commands`` exports it: ``waits``, ``Relayed``, ``NO_REPLY``,
``MONITOR_STARTED``, ``QUEUED``); it imports nothing else of the commands, and nothing from the
node's assembly.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import ssl
import sys
import time
from collections.abc import Mapping
from typing import Any, cast

from march import errors
from march import log as march_log
from march.app import App
from march.client import Client
from march.cluster.groups import FastCommand
from march.commands import MONITOR_STARTED, NO_REPLY, QUEUED, Relayed, as_error, call, waits
from march.errors import Rejected
from march.resp import RequestParser, encode, encode_error, encode_integers, integer_reply
from march.stats.counters import error_kind
from march.transport.feed import MonitorFeed
from march.transport.flow import DROP, STALL, TURN_REQUESTS, Backpressure, InputBudget, Intake, Stalled
from march.transport.timing import RequestTimer
from march.transport.waiting import Lanes, Relays, Waiting, repeats

log = logging.getLogger("march")

# The clock of a read: its requests' durations (``RequestTimer``, ``Waiting``) and the client's
# ``last_active``, which CLIENT LIST and the idle ``timeout`` compare with ``time.monotonic()`` (the same
# clock, in ns): one reading serves both. Compiled on Linux, where ``time.monotonic`` is
# ``clock_gettime(CLOCK_MONOTONIC)``, the read calls that directly (``_c_clock_ns``, connection.pxd).
_clock_ns = time.monotonic_ns
_C_CLOCK = not __file__.endswith(".py") and sys.platform.startswith("linux")
_NO_HOT: dict[bytes, FastCommand] = {}  # the fast-path table of a connection that is not plain (AUTH, MULTI)
_TOO_BIG = "closing client %s: its request passed client_query_buffer_limit (%d bytes)"
_OVER_BUDGET = (
    "closing client %s: it holds %d bytes of an unfinished request, and all clients %d, past query_buffer_budget (%d)"
)


class Connections(InputBudget):
    """What the connections of one server share: the set of them, the TLS handshakes in progress
    (counted toward max_clients from their accept), the unparsed input they hold (``InputBudget``)
    and the parser class each connection reads with."""

    def __init__(self, app: App, parser: type[RequestParser] = RequestParser) -> None:
        super().__init__(app)
        self.all: set[Connection] = set()
        self.handshakes = 0
        self.parser = parser


# Longer than 250 lines on purpose: one client's transport whole (accepting, reading, running in order,
# writing, closing), each step a few lines over the same state (its transport, client, flow, backlog);
# what could stand apart already does (flow control, timing, MONITOR, waiting requests, lanes), and the
# rest split in two would hand that state back and forth on the path every request takes.
class Connection:
    """One client's connection (see the module docstring): an asyncio protocol by its methods (no base
    class, so that it compiles to a C-level class: docs/compiled.md)."""

    def __init__(
        self,
        app: App,
        peers: Connections,
        tls: ssl.SSLContext | None = None,
        admitted: bool = False,
        forwarding: bool = False,
    ) -> None:
        self.app, self.peers = app, peers
        self.tls = tls  # came in on the TLS port (already through its handshake): redirects name TLS addresses
        self.forwarding = forwarding  # came in on the forwarding port: keys served elsewhere are forwarded
        # A TLS connection counts toward max_clients (``peers.handshakes``) from its accept to its handshake's end.
        self.admitted = admitted
        self.transport: asyncio.Transport = cast(asyncio.Transport, None)
        self.client: Client = cast(Client, None)
        self.flow: Backpressure = cast(Backpressure, None)
        self.timer: RequestTimer = cast(RequestTimer, None)
        self.feed: MonitorFeed = cast(MonitorFeed, None)  # (these: set in connection_made, before any data)
        c = app.config
        parser = peers.parser(c.max_args, c.max_bulk_len, c.max_inline_len, max_held=c.client_query_buffer_limit)
        self.intake = Intake(parser, peers, self)
        self.deaf = True  # ignore input: not accepted yet, closing, or after a protocol error
        self.busy = False  # a handler's coroutine is running (``waiting``); later requests wait in ``backlog``
        self.waiting: Waiting | None = None
        self.backlog: list[list[bytes]] = []
        self.closing = self.plain = False  # (plain: see ``table``)
        self.lanes: Lanes | None = None  # another node's proven forwarding link: its requests go to lanes
        self.monitors = app.monitors.feeds  # the MONITOR connections (the same dict for the server's life)
        self.stats = app.stats  # the server's counters (the same object for the server's life)

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self.flow = Backpressure(transport, self.app, self)
        app, peer, new = self.app, transport.get_extra_info("peername"), not self.admitted
        if new:
            app.stats.connections += 1
        else:  # a TLS connection, counted (and let in) at its accept
            self.handshake_over()
        why = refusal(app, self.peers, peer, new)
        if why is not None:
            return _refuse(app, transport, why)
        sock = addr_of(transport.get_extra_info("sockname"))
        fd = _fileno(transport)
        self.client = client = Client(
            app, app.next_client_id(), addr_of(peer), sock, self.tls is not None, fd, self.forwarding
        )
        self.feed = MonitorFeed(client, self, self.monitors, app.pubsub.subscribers)
        self.timer = RequestTimer(client, app.metrics.commands, app.slowlog, app.latency, app)
        client.unsent = self.flow.unsent
        client.query_buffer = self.query_buffer
        client.push = self.feed.line  # (pub/sub messages: written, and bounded, as MONITOR lines are)
        client.argv_mem = self.argv_mem
        client.events = self.events
        self.intake.parser.auth_source = client  # Redis' small limits for unauthenticated clients until it is
        self.deaf = False
        self.plain = client.authenticated and client.multi is None  # (changes only by its own requests: ``called``)
        app.clients[client.id] = client
        app.closers[client.id] = self.close
        self.peers.all.add(self)

    def handshake_over(self) -> None:
        """A TLS connection's handshake ended (done, or failed): it no longer counts as a handshake."""
        if self.admitted:
            self.admitted = False
            self.peers.handshakes -= 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = self.deaf = True
        self.flow.stalled = None
        self.intake.release()
        if self.client is not None:
            for owner in (self.app.clients, self.app.closers):
                owner.pop(self.client.id, None)
            self.app.monitors.remove(self.client.id)
            self.app.pubsub.remove(self.client.id)
        self.peers.all.discard(self)
        if self.waiting is not None:
            self.waiting.cancel()
        if self.lanes is not None:
            self.lanes.close()

    def eof_received(self) -> bool | None:  # the client closed its side: close ours (asyncio.Protocol's default)
        return None

    def pause_writing(self) -> None:  # (the transport's buffer passed HIGH_WATER: ``Backpressure``)
        self.flow.pause()

    def resume_writing(self) -> None:  # (it drained)
        self.flow.resume()

    def query_buffer(self) -> int:  # bytes of memory its unfinished request holds (CLIENT LIST ``qbuf``)
        return self.intake.held

    def argv_mem(self) -> int:  # bytes of the arguments of the request it waits on (CLIENT LIST ``argv-mem``)
        waiting = self.waiting
        return sum(map(len, waiting.args)) if waiting is not None else 0

    def events(self) -> str:
        """What the connection waits for (CLIENT LIST ``events``): ``r`` reading (not paused behind
        a request that waits, or behind unsent replies), ``w`` its unsent replies to be written."""
        transport = self.transport
        reading = not self.closing and transport.is_reading()
        return ("r" if reading else "") + ("w" if transport.get_write_buffer_size() else "")

    def data_received(self, data: bytes) -> None:
        if self.deaf:
            return
        requests = self.intake.feed(data)  # (past the node's input budget, the largest holders are closed)
        if self.intake.error:  # Redis runs the requests before the bad bytes, answers the error, closes
            self.refused_input()
        if self.closing:
            return
        began = 0
        if requests:  # idle ``timeout`` counts from the last complete request, not the last byte
            began = _c_clock_ns() if _C_CLOCK else _clock_ns()  # type: ignore[name-defined]  # noqa: F821
            self.client.last_active = began / 1e9  # (time.monotonic(): the same clock)
        if self.busy or self.flow.stalled is not None:
            self.backlog.extend(requests)
            return
        self.run(requests, 0, 0, None, began)

    def refused_input(self) -> None:
        """The parser refused this client's input: what came before it still runs, then the error closes it."""
        self.app.stats.protocol_errors += 1
        self.deaf = True
        if self.intake.error == errors.PROTO_TOO_BIG:
            limit = self.app.config.client_query_buffer_limit
            limit_hit(_TOO_BIG, self.client.addr, limit, limit="client_query_buffer_limit")

    # --- running requests ---------------------------------------------------------------------

    def table(self) -> Mapping[bytes, FastCommand]:
        """The hot commands if ``plain`` (authenticated, not in MULTI, not a monitor or subscriber)
        and its user has every command on every key (read each time: ACL SETUSER), else none."""
        return self.app.hot if self.plain and self.client.user.unrestricted else _NO_HOT

    # Longer than 60 lines on purpose: the request loop, one branch per kind of result (a relayed
    # one's place since forwarding); split, it would cost a call per request on the hot path.
    def run(
        self,
        requests: list[list[bytes]],
        start: int,
        same_until: int = 0,
        out: list[bytes] | None = None,
        began: int = 0,
    ) -> None:
        """Run ``requests[start:]`` in order; stop at the first that must wait and resume after it.

        A hot command with its exact arity on a plain connection (``table``) is called directly,
        everything else through ``call`` (every check). Runs once per read: keep it lean. Identical
        requests in a row to a command with ``consecutive`` (pipelined INCRs on one key) are answered
        together, as many at a time as the command can; the run is found once (``same_until``, kept
        across waits, says how far ``requests`` is known to repeat): no request is compared twice.
        ``out``: replies already made for this read (a waited request's), written with the rest.
        ``began``: the clock (``_clock_ns``) when the read came in, if it was read already (0: not yet).
        At most ``TURN_REQUESTS`` calls a turn of the event loop: the rest waits for the next
        (``next_turn``), so one connection's deep pipeline never holds the others up for long.
        """
        if self.lanes is not None:  # another node's proven link: every request is on a lane
            return self.lanes.run(requests, start)
        client, monitors, flow, hot = self.client, self.monitors, self.flow, self.table()
        if out is None:
            out = []
        n, i, alike, stall = len(requests), start, 0, False  # alike: requests answered in runs of identical ones
        turn = TURN_REQUESTS  # calls left to this connection in this turn of the event loop
        skipped: list[int] | None = None  # requests refused before they ran, or queued: no call, as in Redis
        relays: Relays | None = None  # requests forwarded to another node: their replies' places in ``out``
        if began == 0:  # the read's requests answered at once share its time (``RequestTimer``)
            began = _c_clock_ns() if _C_CLOCK else _clock_ns()  # type: ignore[name-defined]  # noqa: F821
        while i < n:
            turn -= 1
            if turn < 0:  # its share of this turn is spent: the rest on its next turn (``next_turn``)
                break
            args = requests[i]
            i += 1
            if monitors:
                self.feed.show(args)
            entry = hot.get(args[0])
            try:
                if entry is not None and len(args) == entry.arity:
                    if (  # (``is``: the parser shares repeated requests' lists)
                        entry.consecutive is not None
                        and i < n
                        and (i < same_until or requests[i] is args or requests[i] == args)
                    ):
                        same_until = same_until if i < same_until else repeats(requests, args, i)
                        ids = entry.consecutive(client, args, same_until - i + 1)
                        if ids is not None:
                            self.answered(args, ids, out)
                            alike += len(ids)
                            i += len(ids) - 1
                            continue
                    result = entry.handler(client, args)
                else:
                    result = call(client, args)
                    hot = self.called(result)
            except Exception as exc:
                out.append(self.error_reply(exc, args))
                if isinstance(exc, Rejected):  # refused before it ran: no call (``RequestTimer``)
                    skipped = [*(skipped or ()), i - 1]
                continue
            if type(result) is int:
                out.append(integer_reply(result))
            elif type(result) is Relayed:  # written to another node: its reply goes in its place
                relays = relays or Relays(out)
                relays.add(result, args)
            elif waits(result):  # (a coroutine or a future) answer those before it; this one is timed when it is done
                if relays is None:
                    flow.write(out)
                self.stats.commands += i - start - (len(skipped) if skipped else 0)
                now = _clock_ns()
                self.timer.read(requests, start, i - 1, now - began, alike, skipped)
                return Waiting(result, args, requests, i, now, same_until, relays).start(self)
            elif result is not NO_REPLY:
                if result is QUEUED:  # queued by MULTI: no call until EXEC runs it
                    skipped = [*(skipped or ()), i - 1]
                status = flow.add(out, encode("OK" if result is MONITOR_STARTED else result, client.proto))
                if status == DROP:
                    return self.drop(f"replies of one read over max_output_buffer ({flow.made} bytes)")
                if status == STALL:  # the transport is past its high-water mark: the rest waits
                    stall = True
                    break
            if client.close_after:
                break
        self.stats.commands += i - start - (len(skipped) if skipped else 0)
        now = _c_clock_ns() if _C_CLOCK else _clock_ns()  # type: ignore[name-defined]  # noqa: F821
        self.timer.read(requests, start, i, now - began, alike, skipped)
        if relays is not None:  # the replies are written once the relayed ones are in
            return Waiting(None, requests[i - 1], requests, i, _clock_ns(), same_until, relays).start(self)
        if turn < 0 and not client.close_after:
            return self.next_turn(requests, i, same_until, out)
        self.read_done(requests, i, same_until, out, stall)

    def answered(self, args: list[bytes], ids: range, out: list[bytes]) -> None:
        """Identical requests ``args`` answered with ``ids`` from one call: as if run one by one."""
        if self.monitors:  # (the first was shown already)
            self.feed.show(args, len(ids) - 1)
        out.append(encode_integers(ids))  # (one bytes object for the run, not one per reply)

    def called(self, result: Any) -> Mapping[bytes, FastCommand]:
        """After a request ``call`` ran (it may have changed the connection: AUTH, MULTI, MONITOR, ...)."""
        if result is MONITOR_STARTED:
            self.feed.start()
        self.settle()
        return self.table()

    def settle(self) -> None:
        """A request that may change the connection ran (through ``call``, or one that waited: EXEC)."""
        client = self.client
        self.intake.parser.authenticated = client.authenticated  # (after AUTH, HELLO AUTH, RESET)
        self.plain = client.authenticated and client.multi is None and not self.feed.watched()
        if client.link is not None and client.link.authenticated and self.lanes is None:
            self.lanes = Lanes(self)  # (MARCH.LINK AUTH proved it: lanes from its next request on)

    def read_done(self, requests: list[list[bytes]], i: int, same_until: int, out: list[bytes], stall: bool) -> None:
        """The requests before ``i`` are answered in ``out``: write them; then close, wait for the
        replies to drain (``stall``), or run what came meanwhile."""
        client, flow = self.client, self.flow
        if stall and i < len(requests) and not client.close_after:
            flow.stalled = Stalled(requests, i, same_until)
            return
        if self.intake.error and not self.backlog and not client.close_after:
            out.append(encode_error(errors.PROTOCOL_ERROR.format(self.intake.error)))
            client.close_after = True
        wrote = bool(out)
        flow.write(out)
        if wrote and flow.paused and flow.over_limit():
            self.drop("unread replies over max_output_buffer")
        if client.close_after:
            self.close()
        elif self.backlog and not self.busy:
            if flow.paused:
                flow.stalled = Stalled([], 0, 0)  # the backlog waits for the replies to drain
            else:
                requests, self.backlog = self.backlog, []
                self.run(requests, 0)

    def next_turn(self, requests: list[list[bytes]], i: int, same_until: int, out: list[bytes]) -> None:
        """The requests before ``i`` are answered in ``out`` and this connection's share of the turn is
        spent: write them, and run the rest on its next turn (``Backpressure.pass_turn``)."""
        flow = self.flow
        wrote = bool(out)
        flow.write(out)
        if wrote and flow.paused and flow.over_limit():
            return self.drop("unread replies over max_output_buffer")
        flow.pass_turn(requests, i, same_until)

    def error_reply(self, exc: Exception, args: list[bytes]) -> bytes:
        """The reply for a request that raised (a bug costs one reply, never the server), counted."""
        self.app.stats.errors += 1
        message = as_error(self.client, exc).message
        self.app.metrics.commands.of_request(args).error(error_kind(message))
        return encode_error(message)

    # --- closing ------------------------------------------------------------------------------

    def done(self) -> bool:  # every request read has been answered (nothing running, waiting or stalled)
        return not self.busy and not self.backlog and self.flow.stalled is None

    def drop(self, why: str) -> None:
        """Close at once, its unsent replies dropped (a client over its output limit)."""
        limit_hit("closing client %s: %s", self.client.addr, why, limit="output_buffer")
        self.app.stats.output_closed += 1
        self.abort()

    def evicted(self, mine: int, held: int, budget: int) -> None:
        """Close at once: its unfinished request (``mine`` bytes, given back) was among the largest past the budget."""
        limit_hit(_OVER_BUDGET, self.client.addr, mine, held, budget, limit="query_buffer_budget")
        self.app.stats.input_closed += 1
        self.backlog = []
        self.abort()

    def abort(self) -> None:  # (its unsent replies dropped)
        self.closing = self.deaf = True
        self.flow.stalled = None
        self.transport.abort()

    def close(self) -> None:
        """Close once the replies written are sent. A connection whose request still runs (CLIENT
        KILL, ACL DELUSER of its own user) closes after that reply, as Redis does."""
        if self.busy and not self.closing and self.client is not None:
            self.client.close_after = True  # ``Waiting.finish`` writes the reply, then closes
            return
        self.closing = self.deaf = True
        self.flow.stalled = None
        self.transport.close()


def _refuse(app: App, transport: asyncio.Transport, why: str) -> None:
    app.stats.rejected += 1
    if why:
        transport.write(encode_error(why))
        transport.close()
    else:
        transport.abort()


def refusal(app: App, peers: Connections, peer: Any, new: bool) -> str | None:
    """Why a new connection from ``peer`` is refused (the error it gets; "": closed without a
    word), or None. ``new``: not counted toward max_clients yet (a TLS one was, at its accept)."""
    if new and len(app.clients) + peers.handshakes >= app.max_clients:
        limit_hit(
            "refusing a client from %s: max_clients (%d) reached", addr_of(peer), app.max_clients, limit="max_clients"
        )
        return errors.MAX_CLIENTS
    if shutting_down(app):  # accepted just before the listeners closed (or a TLS handshake that ended since)
        return ""
    if app.config.protected_mode and app.users.default.nopass and not _is_loopback(peer):
        limit_hit("refusing a client from %s: protected mode (no password set)", addr_of(peer), limit="protected_mode")
        return errors.PROTECTED_MODE
    return None


def shutting_down(app: App) -> bool:
    return app.shutdown_requested is not None and app.shutdown_requested.is_set()


def limit_hit(message: str, *args: Any, limit: str) -> None:
    """A client limit was hit: one line (rate-limited by march.log, so a flood costs a few lines)."""
    march_log.event(log, logging.WARNING, "client_limit", message, *args, limit=limit)


def _fileno(transport: asyncio.BaseTransport) -> int:
    """The connection's socket descriptor (CLIENT LIST ``fd``), -1 if the transport has none."""
    sock = transport.get_extra_info("socket")
    try:
        return int(sock.fileno()) if sock is not None else -1
    except (OSError, ValueError, AttributeError):
        return -1


def addr_of(sockaddr: Any) -> str:
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
