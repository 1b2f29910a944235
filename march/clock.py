"""Time, injected: monotonic seconds, sleeping and timers, real (``SystemClock``) or driven by a
test (``harness/march_harness/manual_clock.py``: ``ManualClock``, never imported here).

Everything in March that waits on time for a reason of its own (the lease's keep-alives and its
deadline, the election's pauses and back-offs, a FAILOVER's timeout, the fake etcd's lease TTLs)
takes a ``Clock``, so that in-process tests drive it step by step with no real waiting and no
patched module. The generators take only ``now`` (a ``Callable[[], float]``).
"""

from __future__ import annotations

import asyncio
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
