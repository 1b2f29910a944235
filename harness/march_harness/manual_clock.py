"""``ManualClock``: a ``march.clock.Clock`` that moves only when a test calls ``advance``. Tests only.

``ManualClock`` moves only in ``advance``: timers due by then fire in time order, and the loop
runs what they woke (a bounded number of turns) before time moves on, so one ``advance`` plays
out whole chains (keep-alive sent -> reply -> deadline moved -> election woken) deterministically.
It must never sleep for real: a test that drives it waits on nothing but the loop.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable

from march.clock import Timer


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
