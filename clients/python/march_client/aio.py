"""`AsyncSequencer`: the asyncio twin of `march_client.Sequencer` (redis.asyncio underneath), with the
same routing, the same retry rules (`_retry.py`) and an optional prefetch driven by tasks.

What it must never do: hand out anything but an ID the server returned; in prefetch mode, hand out
a range out of the order it was fetched in (one lock per key covers fetching and taking), or give
prefetched IDs back (unused ones are a gap).

Retries, as in the sync client: a retried `INCR` whose first attempt was applied on the server but
whose reply was lost skips that ID. Gaps are allowed; duplicates never happen.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Iterator
from typing import Any, Self

import redis.asyncio
import redis.exceptions as rex
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from march_client import errors
from march_client._address import Address, Options, Target
from march_client._retry import REFRESH, Action, Attempts, RetryPolicy, Routing, classify
from march_client.prefetch import Hunger, bounds
from march_client.sync import check_range_size, range_ending_at, to_id


class AsyncRouter(Routing):
    """Sends one command to the primary, following MOVED and retrying (see `sync.Router`)."""

    def __init__(self, where: Target, policy: RetryPolicy, *, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(where.seeds)
        self._options = where.options
        self._policy = policy
        self._clock = clock
        self._clients: dict[Address, redis.asyncio.Redis] = {}
        self._closed = False

    def client(self, address: Address) -> redis.asyncio.Redis:
        if self._closed:
            raise rex.ConnectionError(errors.CLOSED)
        c = self._clients.get(address)
        if c is None:
            c = redis.asyncio.Redis(host=address[0], port=address[1], retry=Retry(NoBackoff(), 0), **self._options)
            self._clients[address] = c
        return c

    async def execute(self, *args: Any, retry_for: float | None = None) -> Any:
        if self._closed:
            raise rex.ConnectionError(errors.CLOSED)
        attempts = Attempts(self._policy, self._clock, retry_for)
        slot = self.slot_of(args)
        while True:
            address = self.address_for(slot)
            try:
                return await self.client(address).execute_command(*args)  # type: ignore[no-untyped-call]
            except Exception as e:  # classified below; the ones we do not know are raised
                action = classify(e)
                if action is Action.RAISE or self._closed:
                    raise
                source = self._after_failure(address, e, action, slot)
                if source is not None and isinstance(e, rex.MovedError):  # before pause(), which may raise
                    await self._refresh(source, e)
                pause = attempts.pause(e)
            if pause:
                await asyncio.sleep(pause)

    async def _refresh(self, source: Address, moved: rex.MovedError) -> None:
        """See `sync.Router._refresh`; the lock is taken only inside `_refreshed`, after the await."""
        reply = None
        try:
            reply = await self.client(source).execute_command(*REFRESH)  # type: ignore[no-untyped-call]
        except Exception:  # any failure leaves the table as the MOVED made it
            pass
        finally:
            self._refreshed(source, reply, moved)

    async def close(self) -> None:
        self._closed = True
        clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            await c.aclose()


class AsyncFeed(Hunger):
    """One key's prefetch state: the range being handed out, one range ready, one refill task."""

    def __init__(self, key: str | bytes, size: int) -> None:
        super().__init__(size)
        self.key = key
        self.current: Iterator[int] = iter(())
        self.ready: collections.deque[range] = collections.deque()
        self.lock = asyncio.Lock()  # fetches and swaps of one key, in order
        self.refill: asyncio.Task[None] | None = None


class AsyncSequencer(Options):
    """IDs from March in asyncio: ``await next(key)``, ``await next_range(key, n)``.

    Same arguments and behaviour as `march_client.Sequencer` (routing, MOVED, bounded retries,
    `Unavailable` after ``retry_for`` seconds). With ``prefetch=True`` ranges are drawn by a task
    per key and IDs handed out locally: increasing within this event loop, unique everywhere,
    unused ones a gap at close. Use it from one event loop. Its arguments are `Options`'.
    """

    def __post_init__(self) -> None:
        self.router = AsyncRouter(self.target(), RetryPolicy(self.retry_for), clock=self.clock)
        # the prefetch's range bounds, the defaults filled in (`prefetch.bounds`)
        self._min, self._max, self._seconds = bounds(
            self.max_incrby, self.min_range, self.max_range, self.target_seconds
        )
        self._feeds: dict[str | bytes, AsyncFeed] = {}
        self.last_error: BaseException | None = None

    async def _draw(self, key: str | bytes, n: int) -> range:
        return range_ending_at(to_id("INCRBY", await self.router.execute("INCRBY", key, n)), n)

    async def next(self, key: str | bytes) -> int:
        """The next ID of ``key``."""
        if not self.prefetch:
            return to_id("INCR", await self.router.execute("INCR", key))
        feed = self._feeds.get(key)
        if feed is not None:
            for value in feed.current:  # the common case: no await, no lock
                return value
        return await self._advance(key)

    async def next_range(self, key: str | bytes, n: int) -> range:
        """``n`` consecutive IDs of ``key`` straight from the server, as ``range(first, last + 1)``."""
        check_range_size(n, self.max_incrby)
        return await self._draw(key, n)

    async def _advance(self, key: str | bytes) -> int:
        feed = self._feeds.get(key)
        if feed is None:
            feed = self._feeds.setdefault(key, AsyncFeed(key, self._min))
        async with feed.lock:
            for value in feed.current:  # another task swapped a range in while we waited
                return value
            r = feed.ready.popleft() if feed.ready else await self._draw(key, feed.size)
            feed.took(len(r), self.clock(), self._min, self._max, self._seconds)
            feed.current = iter(r)
            if feed.refill is None or feed.refill.done():
                feed.refill = asyncio.create_task(self._refill(feed))
            return next(feed.current)  # a range is never empty (n >= 1)

    async def _refill(self, feed: AsyncFeed) -> None:
        try:
            async with feed.lock:
                if not feed.ready:
                    feed.ready.append(await self._draw(feed.key, feed.size))
        except Exception as e:  # the next _advance fetches (and raises) itself
            self.last_error = e

    async def close(self) -> None:
        """Cancel the refill tasks (prefetched IDs become a gap) and close the connections."""
        tasks = [f.refill for f in self._feeds.values() if f.refill is not None]
        self._feeds.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.router.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
