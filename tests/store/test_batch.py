"""``Batcher``'s serial mode (group commit, ``march.store.batch``): one chunk in flight at a time;
calls made while it runs go together in the next one; a lone call is sent at once; a failed
chunk fails every caller in it and no other; each caller gets its own result."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from march_harness.aio import until

from march.store import batch
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


class Gates:
    """A store call whose chunks each wait for their own release (``open(i)``), recorded in order."""

    def __init__(self) -> None:
        self.chunks: list[list[int]] = []
        self.gates: list[asyncio.Event] = []

    async def run(self, items: list[int]) -> Sequence[int]:
        self.chunks.append(list(items))
        gate = asyncio.Event()
        self.gates.append(gate)
        await gate.wait()
        return [i * 10 for i in items]

    def open(self, i: int) -> None:
        self.gates[i].set()


class Clock:
    """``time`` for the batcher: how long a chunk took is what the test says."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def gathering(monkeypatch: pytest.MonkeyPatch, bound: float, took: float) -> tuple[Gates, Batcher[int, int], Clock]:
    """A gathering batcher whose chunks each take ``took`` seconds by its clock, holds bound ``bound``."""
    clock = Clock()
    monkeypatch.setattr(batch, "time", clock)
    monkeypatch.setattr(batch, "MAX_GATHER", bound)
    store = Gates()

    async def run(items: list[int]) -> Sequence[int]:
        clock.now += took  # (a chunk's time, as the batcher measures it: started before, read after)
        return await store.run(items)

    return store, Batcher(run, 100, serial=True, gather=True), clock


def submit(batcher: Batcher[int, int], items: range, answers: dict[int, int | BaseException]) -> None:
    for i in items:
        batcher.submit_then(i, lambda outcome, i=i: answers.__setitem__(i, outcome))  # type: ignore[misc]


async def test_a_gathering_batcher_holds_the_next_chunk_until_the_last_ones_callers_are_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SQLite's creations: 10 callers in a commit and 10 waiting when it returns; the 10 answered come
    back (as clients send their next INCR) and all 20 go in one chunk, not 10 and then 10."""
    store, batcher, _ = gathering(monkeypatch, bound=30.0, took=30.0)
    answers: dict[int, int | BaseException] = {}
    submit(batcher, range(0, 10), answers)
    await until(lambda: store.chunks == [list(range(0, 10))], "the first chunk sent")
    submit(batcher, range(10, 20), answers)  # arrive while it runs
    store.open(0)
    await until(lambda: len(answers) == 10, "the first chunk's callers answered")
    await loop_turns(20)  # anything the batcher would send now has been sent
    assert store.chunks == [list(range(0, 10))], "the next chunk went before the first one's callers were back"
    submit(batcher, range(20, 29), answers)  # 9 of them back: 19 waiting, 20 awaited
    await loop_turns(20)
    assert len(store.chunks) == 1
    submit(batcher, range(29, 30), answers)  # the tenth
    await until(lambda: len(store.chunks) == 2, "the held chunk sent once its callers were back")
    assert store.chunks[1] == list(range(10, 30))
    store.open(1)
    await until(lambda: len(answers) == 30, "every caller answered")
    assert answers == {i: i * 10 for i in range(30)}


async def test_a_hold_ends_after_its_bound_when_the_callers_do_not_come_back(monkeypatch: pytest.MonkeyPatch) -> None:
    store, batcher, _ = gathering(monkeypatch, bound=0.05, took=30.0)  # (held at most 50 ms)
    answers: dict[int, int | BaseException] = {}
    submit(batcher, range(0, 10), answers)
    await until(lambda: len(store.chunks) == 1, "the first chunk sent")
    submit(batcher, range(10, 20), answers)
    store.open(0)
    await until(lambda: len(store.chunks) == 2, "the held chunk sent when its hold ran out", timeout=10.0)
    assert store.chunks[1] == list(range(10, 20))
    store.open(1)
    await until(lambda: len(answers) == 20, "every caller answered")
    # A lone call after it: the last chunk's 10 callers do not come back either; it goes after the bound.
    submit(batcher, range(20, 21), answers)
    await until(lambda: len(store.chunks) == 3, "a lone call sent after the hold", timeout=10.0)
    store.open(2)
    await until(lambda: answers.get(20) == 200, "the lone call answered")


async def test_a_gathering_batcher_holds_nothing_for_small_chunks_nor_past_the_last_chunks_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, batcher, _ = gathering(monkeypatch, bound=30.0, took=30.0)
    answers: dict[int, int | BaseException] = {}
    submit(batcher, range(0, 3), answers)  # below GATHER_FROM with those waiting: as a plain serial batcher
    await until(lambda: len(store.chunks) == 1, "the first chunk sent")
    submit(batcher, range(3, 6), answers)
    store.open(0)
    await until(lambda: len(store.chunks) == 2, "the next chunk sent at once")
    assert batch.GATHER_FROM > 6 and store.chunks[1] == [3, 4, 5]
    store.open(1)
    await until(lambda: len(answers) == 6, "every caller answered")
    # A chunk that took no time (by the batcher's clock) holds the next for no time either.
    store2, batcher2, _ = gathering(monkeypatch, bound=30.0, took=0.0)
    submit(batcher2, range(0, 10), answers)
    await until(lambda: len(store2.chunks) == 1, "the first chunk sent")
    submit(batcher2, range(10, 15), answers)
    store2.open(0)
    await until(lambda: len(store2.chunks) == 2, "the next chunk sent after a hold of no time", timeout=10.0)
    assert store2.chunks[1] == list(range(10, 15))
    store2.open(1)
