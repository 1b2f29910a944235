"""``waiting.never_started``: whether a handler's coroutine was ever started, for interpreted and
compiled (Cython) coroutines alike. A connection that goes while its request's task has not run yet
closes the coroutine (not "a coroutine that was never awaited"); a compiled handler's coroutine has no
frame, and ``inspect.getcoroutinestate`` raised AttributeError from ``connection_lost`` (found by the
protocol fuzzer once march.keyspace.serving and march.commands.sequences were compiled)."""

from __future__ import annotations

import asyncio
import types

from march_harness.manual_clock import ManualClock

from march import build
from march.keyspace.serving import ServingState
from march.store.contract import Guard
from march.transport.waiting import never_started


def test_a_coroutine_is_started_once_its_task_ran_and_not_before() -> None:
    async def main() -> None:
        clock = ManualClock()
        state = ServingState(clock, "test")
        state.renewed(clock.now() + 10)
        state.promote(Guard(b"n1", 1))  # in transition: ``settled`` waits
        coro = state.settled(5.0)
        # compiled, ``settled`` is a Cython coroutine: the case ``inspect`` cannot look at
        assert isinstance(coro, types.CoroutineType) != build.compiled
        assert never_started(coro)
        task = asyncio.ensure_future(coro)
        assert never_started(coro)  # a task made, not run yet
        await asyncio.sleep(0)
        assert not never_started(coro)  # suspended in its wait
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

        unstarted = state.settled(5.0)
        task = asyncio.ensure_future(unstarted)
        task.cancel()
        assert never_started(unstarted)
        unstarted.close()  # what ``Waiting.cancel`` does: no "never awaited" warning
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())


def test_what_is_not_a_coroutine_was_never_a_coroutine_to_close() -> None:
    assert not never_started(None)
    assert not never_started(asyncio.Future)
