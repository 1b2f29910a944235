"""A request that waits: its handler returned a coroutine (a store read or creation, a promotion)
or a future (an INCR queued on its sequence for the next store write: ``SequenceGenerator.later``).

Its connection pauses (reading paused, later requests kept in the backlog, replies in order) until
the request is answered; then the rest of the read runs from ``resume_at``, and the waited reply
goes out in the same write as the replies that follow it in the read (one ``write`` for them all,
not one for the waited reply and one for the rest). A coroutine runs in a task (``finish``); a
future costs no task: ``answered`` is its done-callback, so the requests a store write answers
are answered in one pass of the loop, in the order the generator answered them. A request that
got ``NotServing`` while it waited (this node stopped serving; it got no ID) runs again once the
change is over (``commands.rerun``: here if this node serves by then, else a MOVED
reply). The request is timed alone (``RequestTimer.waited``). A connection that goes away cancels
its own request only (its task, or its future: the generator's queue skips it), never the store
write or the others waiting for it.

A read whose requests were forwarded to another node (``Relays``: written to their link at once,
while the read went on) waits the same way for their replies, then writes the read's replies in
order before anything after them.

``Lanes`` is the receiving side of a proven forwarding link (``march.cluster.links``): every request it
carries is ``[lane, user, command, args...]``, and each lane (one client of the entry node) is run
as a connection of its own would be, in order, one request at a time, while the lanes do not wait
for each other. A request answered at once is answered in the read's replies; one that waits
holds back only its own lane's later requests (queued on the lane) and is answered, tagged with its
lane, when it is done. So one tenant's requests waiting on this primary (a store write, the
timestamp lead cap) never delay another's on the same link. The link's own lane 0 answers PING at
once (the entry node's probe of a link whose request timed out).

This module never runs a request itself (``commands.call`` does, or a hot handler): it awaits the
one handler's coroutine (and the relayed replies), or a lane's, and hands the connection back its
read.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import types
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard, cast

from march import errors
from march.client import NOBODY, Client
from march.cluster.groups import FastCommand
from march.cluster.links import CONTROL
from march.commands import NO_REPLY, Relayed, call, lookup, monitored, rerun, show, waits
from march.errors import Rejected
from march.generators.bound import NotServing
from march.resp import encode
from march.transport.flow import DROP, STALL, Backpressure
from march.transport.timing import RequestTimer

log = logging.getLogger("march")

_clock_ns = time.monotonic_ns  # (the connection's clock: ``Connection.run`` hands a waiting request its start)
LANES_KEPT = 1024  # idle lanes a link keeps (a small client state each) before forgetting them all at once
_IN_LANES = frozenset({"multi", "exec", "discard"})  # what a lane runs besides key commands (a forwarded transaction)
_PONG = b"*2\r\n:%d\r\n+PONG\r\n" % CONTROL


class Resumable(Protocol):
    """The connection as its waiting request sees it."""

    client: Client
    timer: RequestTimer
    transport: asyncio.Transport
    flow: Backpressure
    closing: bool
    busy: bool
    waiting: Waiting | None

    def error_reply(self, exc: Exception, args: list[bytes]) -> bytes: ...

    def settle(self) -> None: ...

    def close(self) -> None: ...


@dataclass(slots=True, eq=False)
class Relays:
    """The replies of a read that ran requests forwarded to another node (``commands.Relayed``):
    ``out`` holds the read's replies in order, with a place kept for each relayed one."""

    out: list[bytes]
    places: list[tuple[int, Relayed, list[bytes]]] = field(default_factory=list)

    def add(self, relayed: Relayed, args: list[bytes]) -> None:
        self.places.append((len(self.out), relayed, args))
        self.out.append(b"")

    async def written(self, error_reply: Callable[[Exception, list[bytes]], bytes]) -> bytes:
        """Every reply of the read, in order, once the relayed ones are in."""
        out = self.out
        for at, relayed, args in self.places:
            try:
                out[at] = await relayed
            except Exception as exc:
                out[at] = error_reply(exc, args)
        return b"".join(out)


@dataclass(slots=True, eq=False)
class Waiting:
    """The waiting request ``args`` (``requests[resume_at - 1]``) and where its read goes on. With
    ``before``, the read's replies so far wait for relayed ones and are written first; ``coro``
    None: nothing else waits (the read ended with relayed requests)."""

    coro: Coroutine[Any, Any, Any] | asyncio.Future[Any] | None  # what the handler returned
    args: list[bytes]
    requests: list[list[bytes]]
    resume_at: int  # the next request of the read to run once this one is answered
    began: int  # ``time.monotonic_ns()`` when it started
    same_until: int  # as ``Stalled.same_until``: how far the read is known to repeat
    before: Relays | None = None
    task: asyncio.Task[None] | None = None  # the connection's task that awaits ``reply``
    conn: Resumable | None = None  # (for ``answered``)

    def start(self, conn: Resumable) -> None:
        """Pause ``conn`` (busy, not reading) until this request is answered (``finish``, ``answered``)."""
        conn.busy = True
        conn.transport.pause_reading()
        conn.waiting = self
        coro = self.coro
        if self.before is None and isinstance(coro, asyncio.Future):
            self.conn = conn
            coro.add_done_callback(self.answered)
        else:
            self.task = asyncio.get_running_loop().create_task(self.finish(conn))

    def answered(self, answer: asyncio.Future[Any]) -> None:
        """The future is done: its reply, then the rest of the read (one write); ``NotServing``
        (rare: the term changed, it got no ID) runs it again in a task (``finish``)."""
        conn = self.conn
        if conn is None or conn.closing or answer.cancelled():
            return
        exc = answer.exception()
        if isinstance(exc, NotServing):
            self.coro = rerun(conn.client, self.args)
            self.task = asyncio.get_running_loop().create_task(self.finish(conn))
            return
        args = self.args
        if isinstance(exc, Exception):
            reply = conn.error_reply(exc, args)
        else:
            value = answer.result()
            reply = b":%d\r\n" % value if value.__class__ is int else encode(value, conn.client.proto)
        spec = lookup(args[0])
        conn.timer.waited(args, _clock_ns() - self.began, spec is not None and spec.noauth)
        self.resume(conn, reply)

    async def finish(self, conn: Resumable) -> None:
        """Write the reply, then run the rest of the read (``Backpressure.then``), or close."""
        if self.before is not None:
            earlier = await self.before.written(conn.error_reply)
            if conn.closing:
                return
            conn.transport.write(earlier)
        reply = await self.reply(conn.client, conn.timer, conn.error_reply) if self.coro is not None else b""
        if conn.closing:
            return
        self.resume(conn, reply)

    def resume(self, conn: Resumable, reply: bytes) -> None:
        """Answered with ``reply``: the connection goes on with the rest of the read (the reply goes
        out with its replies, ``Backpressure.then``), or closes once the reply is written."""
        conn.busy, conn.waiting = False, None
        conn.settle()  # (what ran may have changed the connection: EXEC of a SUBSCRIBE, a throttled AUTH)
        if conn.client.close_after:
            if reply:
                conn.transport.write(reply)
            conn.close()
        else:
            conn.flow.then(self.requests, self.resume_at, self.same_until, reply)

    async def reply(
        self, client: Client, timer: RequestTimer, error_reply: Callable[[Exception, list[bytes]], bytes]
    ) -> bytes:
        """The encoded reply ("" for none), once the handler is done; timed. An AUTH or HELLO (the
        commands that may run before authentication) that waited was held back on purpose (AUTH
        is throttled after failures, per address and user, ``march.access.throttle``, so even the right
        password may wait its turn): it counts as a call that took no time."""
        args, coro = self.args, self.coro
        assert coro is not None
        spec = lookup(args[0])
        rejected = False
        try:
            try:
                value = await coro
            except NotServing:
                value = await rerun(client, args)
            reply = encode(value, client.proto) if value is not NO_REPLY else b""
        except Exception as exc:
            reply = error_reply(exc, args)
            rejected = isinstance(exc, Rejected)  # refused once its wait was over (MOVED): no call
        timer.waited(args, _clock_ns() - self.began, spec is not None and spec.noauth, rejected)
        return reply

    def cancel(self) -> None:
        """The connection is gone: stop waiting (the handler's store write, if any, goes on without it)."""
        coro = self.coro
        if self.task is not None and not self.task.done():
            self.task.cancel()
            if never_started(coro):
                coro.close()  # the task never started it: not "a coroutine that was never awaited"
        elif isinstance(coro, asyncio.Future):
            coro.cancel()  # its own future only: the generator's queue skips it, the others go on


class LaneHost(Protocol):
    """The proven link's connection as its lanes see it."""

    client: Client
    timer: RequestTimer
    transport: asyncio.Transport
    flow: Backpressure
    closing: bool

    def error_reply(self, exc: Exception, args: list[bytes]) -> bytes: ...

    def read_done(
        self, requests: list[list[bytes]], i: int, same_until: int, out: list[bytes], stall: bool
    ) -> None: ...

    def drop(self, why: str) -> None: ...

    def abort(self) -> None: ...


@dataclass(slots=True, eq=False)
class Lane:
    """One entry-node client's requests on a link: its own client state (user, MULTI), the requests
    behind the one that waits, and the task that answers them."""

    client: Client
    tag: bytes  # what its replies start with: ``*2 :<lane>``
    queue: deque[list[bytes]] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None  # answers its waiting request, then those queued behind it
    waiting: Awaitable[Any] | None = None  # the handler's coroutine or future that task awaits (or will)

    @property
    def idle(self) -> bool:
        return self.task is None and self.client.multi is None


class _NotLaned(Exception):
    """A request on a proven link that names no lane: the other end is not speaking the link protocol."""


class Lanes:
    """The lanes of one proven link (see the module docstring)."""

    def __init__(self, conn: LaneHost) -> None:
        self.conn = conn
        self.lanes: dict[int, Lane] = {}

    def run(self, requests: list[list[bytes]], start: int) -> None:
        """Take ``requests[start:]`` (the connection's ``run`` for a proven link): each answered now
        in the read's replies, or later on its lane."""
        conn = self.conn
        app = conn.client.app
        out: list[bytes] = []
        answered: list[list[bytes]] = []  # (the commands answered at once: timed together)
        n, i, stall, same_until = len(requests), start, False, 0  # (same_until: as in ``Connection.run``)
        hot = app.hot
        began = _clock_ns()
        try:
            while i < n:
                args = requests[i]
                i += 1
                reply: bytes | None = None
                if i < n and requests[i] == args and _runs(hot, args):  # pipelined INCRs: answered together
                    if i >= same_until:
                        same_until = repeats(requests, args, i)
                    run = self.take_run(args, same_until - i + 1, answered)
                    if run:
                        i += len(run) - 1
                        reply = b"".join(run)
                if reply is None:
                    reply = self.take(args, answered)
                if reply is None:
                    continue
                status = conn.flow.add(out, reply)
                if status == DROP:
                    return conn.drop(f"replies of one read over max_output_buffer ({conn.flow.made} bytes)")
                if status == STALL:  # the rest waits for the replies to drain (``flow.go_on`` runs it)
                    stall = True
                    break
        except _NotLaned:
            log.error("forwarding link from %s: a request on no lane: closing the link", conn.client.addr)
            return conn.abort()
        finally:
            app.stats.commands += i - start
            if answered:
                conn.timer.read(answered, 0, len(answered), _clock_ns() - began, 0, None)
        conn.read_done(requests, i, 0, out, stall)

    def take(self, args: list[bytes], answered: list[list[bytes]]) -> bytes | None:
        """The tagged reply of ``args`` if it is answered now; None if it is left to its lane."""
        if len(args) < 3:
            raise _NotLaned
        try:
            number = int(args[0])
        except ValueError:
            raise _NotLaned from None
        if number <= CONTROL:
            if number == CONTROL and args[2].lower() == b"ping":
                return _PONG
            raise _NotLaned
        lane = self.lanes.get(number) or self.new(number)
        if lane.task is not None:  # its earlier request waits: this one runs after it
            lane.queue.append(args)
            return None
        result = self.execute(lane, args)
        if isinstance(result, bytes):
            answered.append(args[2:])
            return lane.tag + result
        lane.waiting = result
        lane.task = asyncio.get_running_loop().create_task(self.drain(lane, args))
        return None

    def take_run(self, args: list[bytes], count: int, answered: list[list[bytes]]) -> list[bytes]:
        """Up to ``count`` identical requests ``args`` on an idle lane answered from one call to their
        hot command's ``consecutive`` (as ``Connection.run`` answers a plain client's), as many as it
        can at once; [] if none (then they run one by one)."""
        number = _lane_of(args)
        if number <= CONTROL or len(args) < 3:
            return []
        lane = self.lanes.get(number) or self.new(number)
        if lane.task is not None or lane.client.multi is not None:
            return []
        client, command = lane.client, args[2:]
        app = client.app
        entry = app.hot.get(command[0])
        if entry is None or entry.consecutive is None or len(command) != entry.arity or app.monitors.feeds:
            return []
        user = app.users.get(args[1].decode("utf-8", "replace"))
        if user is None or not user.unrestricted:
            return []
        client.user = user
        ids = entry.consecutive(client, command, count)
        if not ids:
            return []
        answered.extend([command] * len(ids))
        tag = lane.tag
        return [tag + b":%d\r\n" % v for v in ids]

    def new(self, number: int) -> Lane:
        """Lane ``number``'s state: a client of its own, named and proven as the link is."""
        if len(self.lanes) >= LANES_KEPT:
            self.lanes = {k: lane for k, lane in self.lanes.items() if not lane.idle}
        link = self.conn.client
        client = Client(link.app, link.id, link.addr, link.laddr, link.tls)
        client.link, client.proto = link.link, link.proto  # (a link's client: never forwards)
        client.name, client.lib_name = link.name, link.lib_name
        client.unsent = link.unsent
        client.login(NOBODY)
        lane = self.lanes[number] = Lane(client, b"*2\r\n:%d\r\n" % number)
        return lane

    def execute(self, lane: Lane, args: list[bytes]) -> bytes | Awaitable[Any]:
        """Run ``args`` on ``lane`` as the user it names: its encoded reply, or the handler's
        coroutine if it must wait."""
        client = lane.client
        app = client.app
        user = app.users.get(args[1].decode("utf-8", "replace"))
        client.user = user if user is not None else NOBODY
        command = args[2:]
        if app.monitors.feeds and monitored(client, command):
            show(client, command)
        try:
            entry = app.hot.get(command[0]) if client.user.unrestricted and client.multi is None else None
            if entry is not None and len(command) == entry.arity:
                result = entry.handler(client, command)
            else:
                spec = lookup(command[0])
                if spec is None or not (spec.primary or spec.name in _IN_LANES):
                    if client.multi is not None:
                        client.multi_error = True  # (as an unknown command inside MULTI: EXEC aborts)
                    raise errors.unknown_command(command)  # (an entry node forwards nothing else)
                result = call(client, command)
        except Exception as exc:
            return self.conn.error_reply(exc, command)
        if result.__class__ is int:
            return b":%d\r\n" % result
        if waits(result):
            return cast(Awaitable[Any], result)
        return encode(result, client.proto)

    async def drain(self, lane: Lane, args: list[bytes]) -> None:
        """Answer ``lane``'s waiting request (``args``) when it is done, then the requests queued
        behind it, in order (each that waits is awaited in turn), until the lane's queue is empty."""
        conn = self.conn
        began = _clock_ns()
        try:
            while lane.waiting is not None:
                reply = await self.finish(lane.client, lane.waiting, args[2:], began)
                lane.waiting = None
                out = [lane.tag + reply]
                while lane.queue:
                    args = lane.queue.popleft()
                    began = _clock_ns()
                    result = self.execute(lane, args)
                    if not isinstance(result, bytes):
                        lane.waiting = result
                        break
                    out.append(lane.tag + result)
                    conn.timer.read([args[2:]], 0, 1, _clock_ns() - began, 0, None)
                if conn.closing:
                    return
                conn.transport.write(b"".join(out))
                if conn.flow.paused and conn.flow.over_limit():
                    return conn.drop("unread replies over max_output_buffer")
        finally:
            lane.task = None
            _unstarted(lane)

    async def finish(self, client: Client, coro: Awaitable[Any], command: list[bytes], began: int) -> bytes:
        """The encoded reply of a lane's waiting request, once its handler is done; timed. One that
        got ``NotServing`` (this node stopped serving: it got no ID) runs again (``rerun``: here, or
        MOVED, which the entry node follows)."""
        try:
            try:
                value = await coro
            except NotServing:
                value = await rerun(client, command)
            reply = encode(value, client.proto) if value is not NO_REPLY else b"+OK\r\n"
        except Exception as exc:
            reply = self.conn.error_reply(exc, command)
        self.conn.timer.waited(command, _clock_ns() - began, False)
        return reply

    def close(self) -> None:
        """The link is gone: stop every lane's task (a handler's store write goes on without it)."""
        for lane in self.lanes.values():
            if lane.task is not None and not lane.task.done():
                lane.task.cancel()
            _unstarted(lane)
            lane.queue.clear()


def _runs(hot: Mapping[bytes, FastCommand], args: list[bytes]) -> bool:
    """Whether a run of requests ``args`` on a lane may be answered together (its command has ``consecutive``)."""
    entry = hot.get(args[2]) if len(args) >= 3 else None
    return entry is not None and entry.consecutive is not None


def _lane_of(args: list[bytes]) -> int:
    """The lane a request on a link names (0, the control lane, if none: never a client's)."""
    try:
        return int(args[0])
    except ValueError:
        return CONTROL


def repeats(requests: list[list[bytes]], args: list[bytes], i: int) -> int:
    """The end of the run of requests equal to ``args`` that ``requests[i]`` (known equal) continues."""
    j, n = i + 1, len(requests)
    while j < n and (requests[j] is args or requests[j] == args):  # (``is``: the parser shares their lists)
        j += 1
    return j


def _unstarted(lane: Lane) -> None:
    """Close the lane's waiting coroutine if nothing ever started it (its task was cancelled first):
    not "a coroutine that was never awaited"."""
    waiting, lane.waiting = lane.waiting, None
    if isinstance(waiting, asyncio.Future):
        waiting.cancel()  # its own future only: the generator's queue skips it, the others go on
    elif never_started(waiting):
        waiting.close()


def never_started(coro: object) -> TypeGuard[Coroutine[Any, Any, Any]]:
    """``coro`` is a coroutine nothing has started yet. A handler of a compiled module returns a
    Cython coroutine, which has no frame for ``inspect.getcoroutinestate`` to look at (it raised
    AttributeError from ``connection_lost``): one not running and awaiting nothing has not started,
    or has finished (a lane asks after its task ended too): closing a finished coroutine does nothing."""
    if not asyncio.iscoroutine(coro):
        return False
    if isinstance(coro, types.CoroutineType):
        return inspect.getcoroutinestate(coro) == inspect.CORO_CREATED
    return not getattr(coro, "cr_running", True) and getattr(coro, "cr_await", True) is None
