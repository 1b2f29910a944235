"""A request that waits: its handler returned a coroutine (a store read or creation, a promotion)
or a future (an INCR queued on its sequence for the next store write: ``SequenceGenerator.later``).

Its connection pauses (reading paused, later requests kept in the backlog, replies in order) until
the request is answered; then the rest of the read runs from ``resume_at``, and the waited reply
goes out in the same write as the replies that follow it in the read (one ``write`` for them all,
not one for the waited reply and one for the rest). A coroutine runs in a task (``finish``); a
future costs no task: ``answered`` is its done-callback, so the requests a store write answers
are answered in one pass of the loop, in the order the generator answered them. A request that
got ``NotServing`` while it waited (this node stopped serving; it got no ID) runs again once the
change is over (``commands.dispatch.rerun``: here if this node serves by then, else a MOVED
reply). The request is timed alone (``RequestTimer.waited``). A connection that goes away cancels
its own request only (its task, or its future: the generator's queue skips it), never the store
write or the others waiting for it.

A read whose requests were forwarded to another node (``Relays``: written to their link at once,
while the read went on) waits the same way for their replies, then writes the read's replies in
order before anything after them.

This module never runs a request itself: it awaits the one handler's coroutine (and the relayed
replies) and hands the connection back its read.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from .client import Client
from .commands.dispatch import rerun
from .commands.forward import Relayed
from .commands.server import NO_REPLY
from .commands.table import lookup
from .flow import Backpressure
from .generators.base import NotServing
from .resp import encode
from .timing import RequestTimer


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
    """The replies of a read that ran requests forwarded to another node (``commands.forward.Relayed``):
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
    began: int  # ``perf_counter_ns`` when it started
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
        conn.timer.waited(args, time.perf_counter_ns() - self.began, spec is not None and spec.noauth)
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
        is throttled after failures, per address and user, ``auth.AuthThrottle``, so even the right
        password may wait its turn): it counts as a call that took no time."""
        args, coro = self.args, self.coro
        assert coro is not None
        spec = lookup(args[0])
        try:
            try:
                value = await coro
            except NotServing:
                value = await rerun(client, args)
            reply = encode(value, client.proto) if value is not NO_REPLY else b""
        except Exception as exc:
            reply = error_reply(exc, args)
        timer.waited(args, time.perf_counter_ns() - self.began, spec is not None and spec.noauth)
        return reply

    def cancel(self) -> None:
        """The connection is gone: stop waiting (the handler's store write, if any, goes on without it)."""
        coro = self.coro
        if self.task is not None and not self.task.done():
            self.task.cancel()
            if asyncio.iscoroutine(coro) and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
                coro.close()  # the task never started it: not "a coroutine that was never awaited"
        elif isinstance(coro, asyncio.Future):
            coro.cancel()  # its own future only: the generator's queue skips it, the others go on
