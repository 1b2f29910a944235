"""Prefetch mode (threads): IDs drawn from March in ranges (`INCRBY key n`) and handed out locally,
with the next range fetched in the background before the current one runs out.

The hot path is C: each consumer is an ``itertools.chain.from_iterable`` over a Python generator
that runs once per range (it takes the prefetched range and wakes the refill thread), so
``next(it)`` on the chain costs about as much as ``next()`` on a ``range`` iterator.

Range sizes follow the key's "hunger": after each range is taken, the rate of use is estimated and
the next range is sized to last about ``target_seconds``, between ``min_range`` and ``max_range``
(at most the server's ``max_incrby``).

Guarantees, and what this module must never do:
- Unique: every ID comes from one `INCRBY` reply and is handed out once (ranges are popped from a
  queue; each range iterator belongs to one consumer).
- Increasing per consumer: ranges of a key are fetched one at a time (a per-key lock) and handed
  out in the order they were fetched, so one consumer (one `ids()` iterator, or one thread calling
  `next()`) sees increasing IDs. Two threads, or two processes, interleave ranges: their IDs are
  unique but NOT ordered with each other, and the server's real-time order no longer holds.
- Nothing is given back: prefetched IDs not handed out when the process stops are a gap.
- Fork: a child process starts with no ranges (its `next` draws its own); an `ids()` iterator
  must not cross a fork (the rest of its current range would be handed out twice).
- It must never hand out an ID from a range it did not get an `INCRBY` reply for.
"""

from __future__ import annotations

import collections
import itertools
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator

from march_client import errors

DEFAULT_MIN_RANGE = 16  # a key used once a second wastes at most a few dozen IDs at shutdown
DEFAULT_TARGET_SECONDS = 1.0  # one INCRBY per key per second whatever the rate, like the server's own batches
SMOOTHING = 0.5  # weight of the newest rate sample: adapts within a few ranges, ignores one odd pause
MIN_ELAPSED = 1e-4  # seconds; below timer resolution a sample says "very fast", not "infinitely fast"
REFILL_PAUSE = 0.1  # after the refill thread could not fetch: consumers fetch (and raise) themselves meanwhile

Draw = Callable[[str | bytes, int], range]  # INCRBY key n, with retries -> the range it handed out


def smoothed(rate: float, used: int, elapsed: float, target_seconds: float) -> float:
    """The rate estimate after ``used`` IDs went in ``elapsed`` seconds: a sample over a full
    target period replaces it (an idle key shrinks its ranges at once), a shorter one is mixed in."""
    sample = used / max(elapsed, MIN_ELAPSED)
    if rate == 0.0 or elapsed >= target_seconds:
        return sample
    return SMOOTHING * sample + (1 - SMOOTHING) * rate


def bounds(
    max_incrby: int, min_range: int | None, max_range: int | None, target_seconds: float | None
) -> tuple[int, int, float]:
    """``(min_range, max_range, target_seconds)`` with the defaults filled in, checked against
    ``max_incrby`` (shared by the threaded and the asyncio prefetch)."""
    low = min_range if min_range is not None else min(DEFAULT_MIN_RANGE, max_incrby)
    high = max_range if max_range is not None else max_incrby
    if not 1 <= low <= high <= max_incrby:
        raise ValueError(errors.BAD_PREFETCH_BOUNDS.format(low=low, high=high, limit=max_incrby))
    return low, high, target_seconds if target_seconds is not None else DEFAULT_TARGET_SECONDS


class Hunger:
    """How fast one key's ranges are used, and so the size of its next fetch (shared by the
    threaded and the asyncio prefetch)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.rate = 0.0  # IDs per second, smoothed
        self.last_take: float | None = None
        self.last_len = 0

    def took(self, taken: int, now: float, low: int, high: int, target_seconds: float) -> None:
        """A range of ``taken`` IDs was taken at ``now``: update the rate from how fast the previous
        one went, and size the next fetch to last about ``target_seconds``, within ``[low, high]``."""
        if self.last_take is not None:
            self.rate = smoothed(self.rate, self.last_len, now - self.last_take, target_seconds)
            self.size = max(low, min(high, int(self.rate * target_seconds)))
        self.last_take, self.last_len = now, taken


class Feed(Hunger):
    """The ranges of one key: at most one fetch in flight, handed out in fetch order."""

    def __init__(self, key: str | bytes, owner: Prefetcher) -> None:
        super().__init__(owner.min_range)
        self.key = key
        self.owner = owner
        self.ready: collections.deque[range] = collections.deque()
        self.fetch_lock = threading.Lock()  # held for the whole fetch + append: keeps fetch order = hand-out order
        self.orphaned = False  # this process is a fork of the one that owns the feed

    def fetch(self) -> range:
        """One range from the server (caller holds ``fetch_lock``)."""
        return self.owner.draw(self.key, self.size)

    def take(self) -> range:
        """The next range for a consumer: the prefetched one, else one fetched now."""
        owner = self.owner
        if owner.closed:
            raise errors.MarchClientError(errors.CLOSED)
        if self.orphaned:
            raise errors.MarchClientError(errors.FORKED)
        try:
            r = self.ready.popleft()  # deque.popleft is atomic: no two consumers get the same range
        except IndexError:
            if not self.fetch_lock.acquire(timeout=owner.lock_timeout):
                raise errors.Unavailable(
                    errors.PREFETCH_BUSY.format(key=self.key, seconds=owner.lock_timeout)
                ) from None
            try:
                # The refill thread may have appended while we waited: that range is older than any
                # we could fetch now, so it must go first.
                r = self.ready.popleft() if self.ready else self.fetch()
            finally:
                self.fetch_lock.release()
        self.took(len(r), owner.clock(), owner.min_range, owner.max_range, owner.target_seconds)
        owner.wake.set()
        return r

    def refill(self) -> None:
        """Keep one range ready (refill thread). Errors propagate to the caller, which pauses."""
        if self.ready:
            return
        with self.fetch_lock:
            if not self.ready and not self.owner.closed:
                self.ready.append(self.fetch())

    def ranges(self) -> Iterator[range]:
        """Runs once per range: the only Python code on a consumer's path."""
        take = self.take
        while True:
            yield take()


def _after_fork_in_child() -> None:
    for prefetcher in list(_LIVE):
        prefetcher._forked()


class Prefetcher:
    """Per-key feeds, a refill thread, and per-thread consumers for ``next(key)``."""

    def __init__(
        self,
        draw: Draw,
        *,
        max_incrby: int,
        min_range: int | None = None,
        max_range: int | None = None,
        target_seconds: float | None = None,
        lock_timeout: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        background: bool = True,
    ) -> None:
        """``background=False``: no refill thread, each consumer fetches when its range runs out
        (deterministic tests; processes that must not start threads)."""
        self.draw = draw
        self.min_range, self.max_range, self.target_seconds = bounds(max_incrby, min_range, max_range, target_seconds)
        self.lock_timeout = lock_timeout  # bounds a consumer's wait behind a refill that is retrying
        self.clock = clock
        self.closed = False
        self.feeds: dict[str | bytes, Feed] = {}
        self.last_error: BaseException | None = None
        self._background = background
        self._start()
        _LIVE.add(self)

    def _start(self) -> None:
        self._feeds_lock = threading.Lock()
        self._local = threading.local()
        self.wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        if self._background and not self.closed:
            self._thread = threading.Thread(target=self._refill_loop, name="march-prefetch", daemon=True)
            self._thread.start()

    def _forked(self) -> None:
        """In a child process after fork: every range the parent held is the parent's. Drop them
        all and start over (``next`` makes new consumers; old `ids()` iterators die at their
        range's end, see `ids`)."""
        for feed in self.feeds.values():
            feed.orphaned = True
        self.feeds = {}
        self._start()

    def feed(self, key: str | bytes) -> Feed:
        f = self.feeds.get(key)
        if f is None:
            with self._feeds_lock:
                f = self.feeds.setdefault(key, Feed(key, self))
        return f

    def ids(self, key: str | bytes) -> Iterator[int]:
        """A new consumer: an endless iterator of increasing IDs (one thread at a time).

        Do not carry one across ``fork()``: the range it is in the middle of would be handed out
        by both processes (`next` is safe: a child starts with no ranges)."""
        return itertools.chain.from_iterable(self.feed(key).ranges())

    def next(self, key: str | bytes) -> int:
        """The next ID of ``key`` for this thread."""
        try:
            value: int = next(self._local.chains[key])
            return value
        except (AttributeError, KeyError, StopIteration):
            # First call in this thread or for this key, or the previous consumer died of an error
            # (a generator that raised is exhausted): start a new consumer.
            chains = self._local.__dict__.setdefault("chains", {})
            chains[key] = chain = self.ids(key)
            return next(chain)

    def _refill_loop(self) -> None:
        while not self.closed:
            self.wake.wait()
            self.wake.clear()
            for feed in list(self.feeds.values()):
                if self.closed:
                    return
                try:
                    feed.refill()
                except Exception as e:  # the consumers see errors through their own fetches
                    self.last_error = e
                    self.wake.set()
                    self._stopped.wait(REFILL_PAUSE)  # the server is failing: no hot loop, but stop at once on close

    def close(self, timeout: float = 5.0) -> None:
        """Stop refilling; what was prefetched is dropped (a gap, never reused). A consumer in the
        middle of a range may finish it (the hot path checks nothing), then gets an error."""
        self.closed = True
        self._stopped.set()
        self.wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self.feeds.clear()


_LIVE: weakref.WeakSet[Prefetcher] = weakref.WeakSet()  # for the fork hook; no reference keeps one alive
os.register_at_fork(after_in_child=_after_fork_in_child)
