"""Calls made in the same event-loop turn, sent to the store together.

After a failover, thousands of sequences see their first request at once; each needs a read and a
ceiling write. ``Batcher`` turns the calls made in one loop turn into a few store round trips (one
etcd transaction, one SQLite transaction per chunk), bounded in items and in bytes so that no
request passes what the store accepts (etcd: 128 operations, 1.5 MiB by default). Each caller
still gets its own result or exception.

A caller that stops waiting (a timeout) does not stop the batch: what was sent may still land,
which the store contract allows (ceilings only move up; a late write is harmless).

A ``serial`` batcher (SQLite's: its writes run one after another on one thread anyway) sends one
chunk at a time: calls made while a chunk is on its way wait and go together in the next one
(group commit), so under load a transaction (one fsync) carries what arrived during the last
one, instead of one small transaction per loop turn queued behind the others. The next chunk is
sent the moment the store returns, before the callers of the chunk that returned are answered:
the store works on the next commit while the loop answers them (answering them first left the
store idle for that time, and what they sent next closed the commit after it early). A lone call
is sent at once, as before.

A ``gather`` batcher (SQLite's creations: ``load_or_create_then``) also waits for its callers to
come back: when a chunk returns with fewer calls waiting than it and they held (its callers, who
are about to be answered, would come next), the next chunk is held until that many are waiting, or
for at most as long as the chunk took (``MAX_GATHER`` at most), whichever comes first. Measured
(docs/performance.md, "Creating sequences"): with 32 clients creating, the commits otherwise hold 16
each, two groups alternating, each commit running while the loop answers the other group, so the
writer's thread waits for the GIL at both ends of it; gathered, a commit holds 32 and runs while the
loop is idle. A caller waits at most one commit's time more than it would have behind a commit in
flight; below ``GATHER_FROM`` calls a chunk, nothing is held.

Every chunk sent is reported to ``listeners`` (metrics, the latency monitor, the log of slow or
failing writes): its operation, its size, how long it took and the store failure, if any. A
listener must be quick and must not raise; it never changes what callers get.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from march.errors import GuardFailed

T = TypeVar("T")
R = TypeVar("R")
log = logging.getLogger("march")

Run = Callable[[list[T]], Awaitable[Sequence[R | BaseException]]]
Waiter = asyncio.Future[R] | Callable[[R | BaseException], None]  # a caller's future, or its callback
# (operation, items, seconds, store failure or None), once per chunk sent; see the module docstring
ChunkListener = Callable[[str, int, float, BaseException | None], None]
listeners: list[ChunkListener] = []
# A gathering batcher's hold, in seconds, at most (past the last chunk's own time): a slow disk's
# 100 ms commit must not hold the next one as long. 2 ms: more than a commit of 32 new names takes
# on a busy 2-core machine (0.5-2 ms measured), so a hold ends by its callers coming back there.
MAX_GATHER = 0.002
GATHER_FROM = 8  # calls in a chunk (with those waiting) below which a gathering batcher holds nothing


def _call(then: Callable[[R | BaseException], None], outcome: R | BaseException) -> None:
    try:
        then(outcome)
    except Exception:  # (a bug in one caller's callback: logged, never the other callers' answers)
        log.exception("store batch: a caller's callback failed")


def _operation(run: Callable[..., object]) -> str:
    """``_save_batch`` -> ``save``: what a chunk does, for metrics and logs."""
    return getattr(run, "__name__", "batch").strip("_").removesuffix("_batch") or "batch"


class Batcher(Generic[T, R]):
    """``await batcher(item)``: the result of ``run([..., item, ...])`` for that item.

    ``run(items)`` returns one result (or exception) per item, in order. A chunk holds at most
    ``max_items`` items and, past its first item, at most ``max_bytes`` by ``size(item)``.
    ``serial``: one chunk in flight at a time; ``gather`` (with ``serial``): the next chunk held
    until the last one's callers are back (see the module docstring).
    """

    def __init__(
        self,
        run: Run[T, R],
        max_items: int,
        max_bytes: int = 1 << 62,
        size: Callable[[T], int] = lambda _: 0,
        serial: bool = False,
        gather: bool = False,
    ) -> None:
        self._run = run
        self.operation = _operation(run)
        self._max_items = max_items
        self._max_bytes = max_bytes
        self._size = size
        self._serial = serial
        self._pending: list[tuple[T, Waiter[R]]] = []  # each item's future, or its callback (``submit_then``)
        self._scheduled = False
        self._running: set[asyncio.Task[None]] = set()
        self._sending = False  # (serial) a chunk is with the store: the calls made meanwhile wait for it
        self._gather = gather and serial
        self._awaited = 0  # (gather) calls a held chunk waits for: the last chunk's with those then waiting
        self._took = 0.0  # (gather) seconds the last chunk took: a hold's bound (with MAX_GATHER)
        self._hold: asyncio.TimerHandle | None = None  # (gather) the end of the hold under way

    async def __call__(self, item: T) -> R:
        return await self.submit(item)

    def submit(self, item: T) -> asyncio.Future[R]:
        """The future of ``item``'s result (``__call__`` without a coroutine: a caller may chain a
        callback on it and cost no task)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[R] = loop.create_future()
        self._pending.append((item, fut))
        if not self._scheduled and not self._sending:  # (while sending: sent when the store returns)
            self._scheduled = True
            loop.call_soon(self._flush)
        return fut

    def submit_then(self, item: T, then: Callable[[R | BaseException], None]) -> None:
        """``item``'s result (or exception) passed to ``then``, called from the pass that answers its
        chunk, with the others of the chunk (no future, no loop turn of its own). ``then`` must not
        raise (one that does is logged; the chunk's other callers are answered all the same)."""
        self._pending.append((item, then))
        if self._hold is not None:
            if len(self._pending) >= self._awaited:
                self._release()  # they are back: the held chunk goes now
            return
        if not self._scheduled and not self._sending and not self._held():
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _held(self) -> bool:
        """(gather) What is waiting is held if fewer wait than the last chunk's callers with those
        waiting when it returned (they are coming back), for at most that chunk's time: True if so."""
        if not self._gather or self._awaited < GATHER_FROM or len(self._pending) >= self._awaited:
            return False
        self._hold = asyncio.get_running_loop().call_later(min(self._took, MAX_GATHER), self._release)
        return True

    def _release(self) -> None:
        """(gather) The hold is over (its callers are back, or its time is up): what is waiting goes."""
        if self._hold is not None:
            self._hold.cancel()
            self._hold = None
        if not self._sending and not self._scheduled and self._pending:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        if self._sending:
            return  # sent when the chunk on its way returns (``_send``)
        if self._hold is not None:
            self._hold.cancel()  # (a call that is not gathered, ``submit``'s, ends the hold: all go)
            self._hold = None
        pending, self._pending = self._pending, []
        loop = asyncio.get_running_loop()
        while pending:
            chunk, used = [pending[0]], self._size(pending[0][0])
            for entry in pending[1 : self._max_items]:
                used += self._size(entry[0])
                if used > self._max_bytes:
                    break
                chunk.append(entry)
            pending = pending[len(chunk) :]
            task = loop.create_task(self._send(chunk))
            self._running.add(task)
            task.add_done_callback(self._done)
            if self._serial:
                self._sending = True
                self._pending = pending + self._pending  # the rest waits for this chunk
                return

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if self._serial and self._sending and task.cancelled():
            self._sending = False  # (cancelled before the store returned: the next chunk goes now)
            if self._pending and not self._scheduled:
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self._flush)

    async def _send(self, chunk: list[tuple[T, Waiter[R]]]) -> None:
        results: Sequence[R | BaseException]
        started = time.perf_counter()
        try:
            results = await self._run([item for item, _ in chunk])
        except asyncio.CancelledError:
            for _, fut in chunk:
                if isinstance(fut, asyncio.Future):
                    fut.cancel()
                else:
                    _call(fut, asyncio.CancelledError())
            raise
        except Exception as exc:
            results = [exc] * len(chunk)
        if self._serial:
            self._sending = False
            if self._gather:  # (this chunk's callers are about to be answered: the next may wait for them)
                self._awaited = min(len(chunk) + len(self._pending), self._max_items)
                self._took = time.perf_counter() - started
            if self._pending and not self._held():
                self._flush()  # what arrived meanwhile goes to the store before these callers are answered
        if listeners:
            self._report(len(chunk), time.perf_counter() - started, results)
        for (_, fut), result in zip(chunk, results, strict=True):
            if not isinstance(fut, asyncio.Future):
                _call(fut, result)
                continue
            if fut.done():  # its caller stopped waiting
                continue
            if isinstance(result, BaseException):
                fut.set_exception(result)
            else:
                fut.set_result(result)

    def _report(self, items: int, seconds: float, results: Sequence[R | BaseException]) -> None:
        # A refused guard is about leadership, not the store's health: not a failure here.
        failure = next((r for r in results if isinstance(r, BaseException) and not isinstance(r, GuardFailed)), None)
        for listener in list(listeners):
            listener(self.operation, items, seconds, failure)

    async def drain(self) -> None:
        """Wait until every chunk sent so far has its answer."""
        while self._running or self._pending:
            if self._running:
                await asyncio.wait(set(self._running))
            else:
                await asyncio.sleep(0)
