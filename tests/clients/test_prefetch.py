"""Prefetch mode: ranges sized by hunger (fake clock, fake server), per-consumer order, errors that
do not kill `next`, nothing handed out twice; against a real march: 8 processes drawing at once
(all IDs distinct, each process's increasing), threads, and no reuse of prefetched IDs after close.
"""

from __future__ import annotations

import itertools
import multiprocessing
import threading
from array import array
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.exceptions as rex
from march_client import Sequencer
from march_client.bench import prefetch_rate
from march_client.prefetch import Prefetcher

pytestmark = pytest.mark.e2e

# -- the engine, with a fake server and a fake clock -------------------------------------------------


class FakeServer:
    """INCRBY on an in-memory counter per key, recording the sizes asked for."""

    def __init__(self) -> None:
        self.counters: dict[str | bytes, int] = {}
        self.sizes: list[int] = []
        self.fail_next = 0
        self.lock = threading.Lock()

    def draw(self, key: str | bytes, n: int) -> range:
        with self.lock:
            if self.fail_next:
                self.fail_next -= 1
                raise rex.TryAgainError("TRYAGAIN slow store")
            self.sizes.append(n)
            last = self.counters.get(key, 0) + n
            self.counters[key] = last
            return range(last - n + 1, last + 1)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fake() -> FakeServer:
    return FakeServer()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engine(fake: FakeServer, clock: FakeClock) -> Iterator[Prefetcher]:
    p = Prefetcher(fake.draw, max_incrby=1_000_000, min_range=10, max_range=100_000, clock=clock)
    yield p
    p.close()


def test_ids_increase_and_are_unique(engine: Prefetcher) -> None:
    got = [engine.next("k") for _ in range(5000)]
    assert got == list(range(1, 5001))


def test_ranges_grow_with_hunger_and_shrink_when_idle(engine: Prefetcher, clock: FakeClock) -> None:
    feed = engine.feed("k")
    it = engine.ids("k")
    for _ in range(20):  # fast: each range gone within 1 ms
        for _ in range(feed.last_len or 1):
            next(it)
        clock.now += 0.001
    assert feed.size > 1000  # rate ~ size/1ms: the next range is sized for ~1 s, capped
    assert feed.size <= engine.max_range
    for _ in range(10):  # slow: one range per 100 s
        for _ in range(feed.last_len):
            next(it)
        clock.now += 100
    assert feed.size == engine.min_range


def test_sizes_stay_within_bounds(fake: FakeServer, engine: Prefetcher, clock: FakeClock) -> None:
    it = engine.ids("k")
    for i in range(200_000):
        next(it)
        if i % 1000 == 0:
            clock.now += 0.0001
    engine.close()
    assert all(engine.min_range <= n <= engine.max_range for n in fake.sizes)


def test_each_thread_sees_increasing_ids_and_none_is_shared(engine: Prefetcher) -> None:
    results: list[list[int]] = [[] for _ in range(4)]

    def work(out: list[int]) -> None:
        for _ in range(20_000):
            out.append(engine.next("k"))

    threads = [threading.Thread(target=work, args=(r,)) for r in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(r == sorted(r) for r in results)
    assert len({i for r in results for i in r}) == 80_000


def test_an_error_is_raised_once_and_next_goes_on(fake: FakeServer) -> None:
    engine = Prefetcher(fake.draw, max_incrby=1000, min_range=5, max_range=5, background=False)
    try:
        got = [engine.next("k") for _ in range(3)]
        fake.fail_next = 1
        with pytest.raises(rex.TryAgainError):
            for _ in range(10):  # the current range runs out, then the fetch fails
                got.append(engine.next("k"))
        got += [engine.next("k") for _ in range(20)]  # a new consumer, still increasing
        assert got == sorted(set(got))
    finally:
        engine.close()


def test_closed_prefetcher_raises(engine: Prefetcher) -> None:
    engine.next("k")
    engine.close()
    with pytest.raises(rex.RedisError, match="closed"):
        for _ in range(100):
            engine.next("k")


def test_bounds_are_checked(fake: FakeServer) -> None:
    with pytest.raises(ValueError, match="min_range"):
        Prefetcher(fake.draw, max_incrby=100, min_range=10, max_range=1000)


# -- against a real march -----------------------------------------------------------------------------


def test_prefetch_against_march(prefetch_sequencer: Sequencer, march_url: str) -> None:
    it = prefetch_sequencer.ids("k")
    got = [next(it) for _ in range(50_000)]
    assert got == sorted(set(got))
    via_next = [prefetch_sequencer.next("k") for _ in range(50_000)]
    assert via_next == sorted(set(via_next)) and not set(via_next) & set(got)
    direct = prefetch_sequencer.next_range("k", 5)  # straight from the server, also in prefetch mode
    assert not set(direct) & (set(got) | set(via_next))
    prefetch_sequencer.close()
    with Sequencer(march_url) as plain:
        assert plain.next("k") > max(*got, *via_next, *direct)  # prefetched but unused: a gap, never reused


def _draw_many(url: str, key: str, count: int, out: str) -> None:
    with Sequencer(url, prefetch=True, retry_for=30) as seq:
        nxt = seq.next
        values = array("q", (nxt(key) for _ in range(count)))
    Path(out).write_bytes(values.tobytes())


def test_eight_processes_draw_distinct_ids(march_url: str, tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    count = 50_000
    outs = [str(tmp_path / f"ids{i}") for i in range(8)]
    procs = [ctx.Process(target=_draw_many, args=(march_url, "shared", count, out)) for out in outs]
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
            assert p.exitcode == 0, f"{p.name} exit code {p.exitcode}"
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    everything: set[int] = set()
    for out in outs:
        values = array("q")
        values.frombytes(Path(out).read_bytes())
        assert len(values) == count
        assert all(a < b for a, b in itertools.pairwise(values)), "one process's IDs must increase"
        everything.update(values)
    assert len(everything) == 8 * count


def test_prefetch_rate_measures(march_url: str) -> None:
    assert prefetch_rate(march_url, "bench", 0.2) > 0
    assert prefetch_rate(march_url, "bench", 0.2, method="ids") > 0


def _child_draws(seq: Sequencer, key: str, count: int, out: str) -> None:
    Path(out).write_bytes(array("q", (seq.next(key) for _ in range(count))).tobytes())


def test_a_forked_child_does_not_reuse_the_parents_ranges(march_url: str, tmp_path: Path) -> None:
    with Sequencer(march_url, prefetch=True, retry_for=10, min_range=1000) as seq:
        parent = [seq.next("f") for _ in range(10)]  # the rest of this range stays in the parent
        ctx = multiprocessing.get_context("fork")
        child = ctx.Process(target=_child_draws, args=(seq, "f", 2000, str(tmp_path / "child")))
        child.start()
        try:
            child.join(60)
        finally:
            if child.is_alive():
                child.kill()
                child.join()
        assert child.exitcode == 0
        parent += [seq.next("f") for _ in range(2000)]
    theirs = array("q")
    theirs.frombytes((tmp_path / "child").read_bytes())
    assert len(theirs) == 2000 and not set(theirs) & set(parent)
