"""Time, injected: monotonic seconds, sleeping and timers, real (``SystemClock``) or driven by a
test (``ManualClock``).

Everything in March that waits on time for a reason of its own (the lease's keep-alives and its
deadline, the election's pauses and back-offs, a FAILOVER's timeout, the fake etcd's lease TTLs)
takes a ``Clock``, so that in-process tests drive it step by step with no real waiting and no
patched module. The generators take only ``now`` (a ``Callable[[], float]``).

``ManualClock`` moves only in ``advance``: timers due by then fire in time order, and the loop
runs what they woke (a bounded number of turns) before time moves on, so one ``advance`` plays
out whole chains (keep-alive sent -> reply -> deadline moved -> election woken) deterministically.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer: ...


class SystemClock:
    """The real monotonic clock; timers are the running loop's (whose clock is monotonic too)."""

    now = staticmethod(time.monotonic)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(max(0.0, delay), callback)


SYSTEM = SystemClock()


async def wait_event(clock: Clock, event: asyncio.Event, timeout: float) -> bool:
    """Wait until ``event`` is set (True) or ``timeout`` seconds of ``clock`` pass (False)."""
    if event.is_set():
        return True
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bool] = loop.create_future()

    def finish(value: bool) -> None:
        if not done.done():
            done.set_result(value)

    timer = clock.call_later(timeout, lambda: finish(False))
    waiter = loop.create_task(event.wait())
    waiter.add_done_callback(lambda t: finish(not t.cancelled()))
    try:
        return await done
    finally:
        timer.cancel()
        waiter.cancel()


class _ManualTimer:
    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that moves only when a test calls ``advance`` (tests only)."""

    def __init__(self, now: float = 1000.0, turns: int = 50) -> None:
        self._now = now
        self._turns = turns  # loop turns run after each timer, so what it woke can react
        self._timers: list[tuple[float, int, _ManualTimer]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    __call__ = now  # usable wherever a plain ``Callable[[], float]`` clock is wanted

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = _ManualTimer(self._now + max(0.0, delay), callback)
        heapq.heappush(self._timers, (timer.when, next(self._order), timer))
        return timer

    async def sleep(self, seconds: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        timer = self.call_later(seconds, wake)
        try:
            await fut
        finally:
            timer.cancel()

    async def settle(self) -> None:
        """Let the loop run what is ready (a bounded number of turns), with time standing still."""
        for _ in range(self._turns):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, firing due timers in order and letting each play out."""
        end = self._now + seconds
        await self.settle()
        while self._timers and self._timers[0][0] <= end:
            when, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, when)
            timer.callback()
            await self.settle()
        self._now = end
        await self.settle()
