"""``Batcher``'s serial mode (group commit, ``march.store.batch``): one chunk in flight at a time;
calls made while it runs go together in the next one; a lone call is sent at once; a failed
chunk fails every caller in it and no other; each caller gets its own result."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from march_harness.aio import until

from march.store.batch import Batcher


class Recorder:
    """A store call that holds each chunk until released, and records the chunks it saw."""

    def __init__(self) -> None:
        self.chunks: list[list[int]] = []
        self.release: asyncio.Event = asyncio.Event()
        self.fail: set[int] = set()  # chunks (by position) that raise

    async def run(self, items: list[int]) -> Sequence[int | BaseException]:
        self.chunks.append(list(items))
        position = len(self.chunks) - 1
        await self.release.wait()
        if position in self.fail:
            raise OSError(f"chunk {position} failed")
        return [i * 10 for i in items]


async def loop_turns(n: int) -> None:
    """Let the event loop run ``n`` turns (a count of turns, not a time)."""
    for _ in range(n):
        await asyncio.sleep(0)


async def test_calls_made_while_a_chunk_runs_share_the_next_one() -> None:
    rec = Recorder()
    batcher: Batcher[int, int] = Batcher(rec.run, 100, serial=True)
    first = asyncio.ensure_future(batcher(1))
    await until(lambda: rec.chunks == [[1]], "the lone call sent at once")  # on its way, held
    later = [asyncio.ensure_future(batcher(i)) for i in (2, 3, 4)]
    await until(lambda: len(batcher._pending) == 3, "the later calls queued")
    await loop_turns(20)  # anything the batcher would send now has been sent
    assert rec.chunks == [[1]]  # (not sent while the first runs)
    rec.release.set()
    assert await first == 10
    assert await asyncio.gather(*later) == [20, 30, 40]
    assert rec.chunks == [[1], [2, 3, 4]]  # one chunk: one transaction


async def test_a_failed_chunk_fails_every_caller_in_it_and_no_other() -> None:
    rec = Recorder()
    rec.fail = {1}
    batcher: Batcher[int, int] = Batcher(rec.run, 100, serial=True)
    first = asyncio.ensure_future(batcher(1))
    await until(lambda: rec.chunks == [[1]], "the first chunk sent")
    failing = [asyncio.ensure_future(batcher(i)) for i in (2, 3)]
    await until(lambda: len(batcher._pending) == 2, "the later calls queued")
    rec.release.set()
    assert await first == 10
    for fut in failing:
        with pytest.raises(OSError, match="chunk 1 failed"):
            await fut
    assert await batcher(5) == 50  # the next chunk is sent as usual


async def test_a_chunk_holds_at_most_max_items_and_the_rest_follow() -> None:
    rec = Recorder()
    rec.release.set()
    batcher: Batcher[int, int] = Batcher(rec.run, 2, serial=True)
    assert await asyncio.gather(*(batcher(i) for i in range(5))) == [0, 10, 20, 30, 40]
    assert rec.chunks == [[0, 1], [2, 3], [4]]
