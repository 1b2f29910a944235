"""Calls made in the same event-loop turn, sent to the store together.

After a failover, thousands of sequences see their first request at once; each needs a read and a
ceiling write. ``Batcher`` turns the calls made in one loop turn into a few store round trips (one
etcd transaction, one SQLite transaction per chunk), bounded in items and in bytes so that no
request passes what the store accepts (etcd: 128 operations, 1.5 MiB by default). Each caller
still gets its own result or exception.

A caller that stops waiting (a timeout) does not stop the batch: what was sent may still land,
which the store contract allows (ceilings only move up; a late write is harmless).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

Run = Callable[[list[T]], Awaitable[Sequence[R | BaseException]]]


class Batcher(Generic[T, R]):
    """``await batcher(item)``: the result of ``run([..., item, ...])`` for that item.

    ``run(items)`` returns one result (or exception) per item, in order. A chunk holds at most
    ``max_items`` items and, past its first item, at most ``max_bytes`` by ``size(item)``.
    """

    def __init__(
        self, run: Run[T, R], max_items: int, max_bytes: int = 1 << 62, size: Callable[[T], int] = lambda _: 0
    ) -> None:
        self._run = run
        self._max_items = max_items
        self._max_bytes = max_bytes
        self._size = size
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._scheduled = False
        self._running: set[asyncio.Task[None]] = set()

    async def __call__(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[R] = loop.create_future()
        self._pending.append((item, fut))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return await fut

    def _flush(self) -> None:
        self._scheduled = False
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
            task.add_done_callback(self._running.discard)

    async def _send(self, chunk: list[tuple[T, asyncio.Future[R]]]) -> None:
        results: Sequence[R | BaseException]
        try:
            results = await self._run([item for item, _ in chunk])
        except asyncio.CancelledError:
            for _, fut in chunk:
                fut.cancel()
            raise
        except Exception as exc:
            results = [exc] * len(chunk)
        for (_, fut), result in zip(chunk, results, strict=True):
            if fut.done():  # its caller stopped waiting
                continue
            if isinstance(result, BaseException):
                fut.set_exception(result)
            else:
                fut.set_result(result)

    async def drain(self) -> None:
        """Wait until every chunk sent so far has its answer."""
        while self._running or self._pending:
            if self._running:
                await asyncio.wait(set(self._running))
            else:
                await asyncio.sleep(0)
