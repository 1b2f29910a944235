"""One store call per key at a time, shared by every request for that key (``SharedCalls``).

Concurrent requests for one key (its first read in a term, its creation) share one call; each
waits for it at most ``max_wait`` and then gets TRYAGAIN, while the call goes on (a later request
finds its result). A failed call's exception reaches each waiter, and is never logged as lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from march import errors
from march.errors import CommandError

T = TypeVar("T")


class SharedCalls(Generic[T]):
    def __init__(self, max_wait: Callable[[], float]) -> None:
        self._max_wait = max_wait
        self._running: dict[bytes, asyncio.Future[T]] = {}

    def __contains__(self, key: bytes) -> bool:
        return key in self._running

    def __len__(self) -> int:
        return len(self._running)

    def get(self, key: bytes) -> asyncio.Future[T] | None:
        return self._running.get(key)

    def start(self, key: bytes, work: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        """Run ``work`` for ``key`` once, shared by every request for it until it is done."""
        return self.put(key, asyncio.get_running_loop().create_task(work))

    def put(self, key: bytes, call: asyncio.Future[T]) -> asyncio.Future[T]:
        """Share ``call`` (a task, or a future that callbacks complete) for ``key`` until it is done.
        Its done-callback is the first: when the callers see it done, it is no longer shared."""
        running = self._running
        running[key] = call

        def done(t: asyncio.Future[T]) -> None:
            if running.get(key) is t:
                del running[key]
            if not t.cancelled():
                t.exception()  # retrieved: each waiter re-raises it; nobody logs it as lost

        call.add_done_callback(done)
        return call

    def hold(self, key: bytes, call: asyncio.Future[T]) -> None:
        """Share ``call`` for ``key`` until its owner ``release``s it (``put`` without a done-callback:
        for an owner that completes the call itself, and retrieves its exception)."""
        self._running[key] = call

    def release(self, key: bytes, call: asyncio.Future[T]) -> None:
        """``call`` is no longer shared (its owner is about to complete it)."""
        if self._running.get(key) is call:
            del self._running[key]

    async def wait(self, task: asyncio.Future[T], key: bytes) -> T:
        """Wait for a shared call at most ``max_wait`` (it goes on after a timeout)."""
        try:
            return await asyncio.wait_for(asyncio.shield(task), self._max_wait())
        except TimeoutError:
            raise CommandError(errors.TRYAGAIN_LOADING_KEY.format(key.decode("utf-8", "replace"))) from None
