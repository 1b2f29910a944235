"""Helpers for unit tests that drive march's asyncio code on the test's own loop, with no I/O.

- ``FakeClock``: monotonic seconds that move only when a test says so (inject it as ``clock=``).
- ``until``: wait for a condition, bounded by a real deadline on the loop's clock.
- ``finish``: await something, bounded by a real deadline.

Nothing here sleeps to synchronise: a test waits on a condition or a task, never for a while.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


class FakeClock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def until(cond: Callable[[], bool], what: str, timeout: float = 2.0) -> None:
    """Wait until ``cond()`` holds: a few bare loop turns first, then short polls, up to a real deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    turns = 0
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        turns += 1
        await asyncio.sleep(0 if turns < 200 else 0.001)


async def finish(aw: Awaitable[Any], timeout: float = 2.0) -> Any:
    """``await aw``, failing with ``TimeoutError`` after ``timeout`` seconds."""
    return await asyncio.wait_for(aw, timeout)
