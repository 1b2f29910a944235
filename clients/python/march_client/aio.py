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
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Self

import redis.asyncio
import redis.exceptions as rex
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from march_client import errors
from march_client._address import CONNECT_TIMEOUT, SOCKET_TIMEOUT, Address, Target, target
from march_client._retry import MAX_REDIRECTS, Action, RetryPolicy, classify
from march_client.prefetch import DEFAULT_MIN_RANGE, DEFAULT_TARGET_SECONDS, smoothed
from march_client.sync import MAX_INCRBY, check_range_size, range_ending_at, to_id


class AsyncRouter:
    """Sends one command to the primary, following MOVED and retrying (see `sync.Router`)."""

    def __init__(self, where: Target, policy: RetryPolicy, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._options = where.options
        self._policy = policy
        self._clock = clock
        self._known: list[Address] = list(dict.fromkeys(where.seeds))
        self._current = self._known[0]
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

    @property
    def current(self) -> Address:
        return self._current

    async def execute(self, *args: Any, retry_for: float | None = None) -> Any:
        if self._closed:
            raise rex.ConnectionError(errors.CLOSED)
        start = self._clock()
        deadline = start + (self._policy.retry_for if retry_for is None else retry_for)
        delays: Iterator[float] | None = None
        attempts = redirects = 0
        while True:
            address = self._current
            attempts += 1
            try:
                return await self.client(address).execute_command(*args)  # type: ignore[no-untyped-call]
            except Exception as e:  # classified below; the ones we do not know are raised
                action = classify(e)
                if action is Action.RAISE or self._closed:
                    raise
                last: Exception = e
                if isinstance(e, rex.MovedError):
                    moved = (e.host, e.port)
                    if moved not in self._known:
                        self._known.append(moved)
                    self._current = moved
                    redirects += 1
                    if redirects <= MAX_REDIRECTS:
                        continue
                    last = rex.ClusterError(errors.TOO_MANY_REDIRECTS.format(hops=MAX_REDIRECTS, address=e.host))
                elif action is Action.NEXT_NODE and self._current == address:
                    i = self._known.index(address) if address in self._known else -1
                    self._current = self._known[(i + 1) % len(self._known)]
                redirects = 0
            now = self._clock()
            if now >= deadline:
                raise errors.Unavailable(
                    errors.UNAVAILABLE.format(seconds=now - start, attempts=attempts, last=last)
                ) from last
            if delays is None:
                delays = self._policy.delays()
            await asyncio.sleep(min(next(delays), deadline - now))

    async def close(self) -> None:
        self._closed = True
        clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            await c.aclose()


class AsyncFeed:
    """One key's prefetch state: the range being handed out, one range ready, one refill task."""

    def __init__(self, key: str | bytes, size: int) -> None:
        self.key = key
        self.current: Iterator[int] = iter(())
        self.ready: collections.deque[range] = collections.deque()
        self.lock = asyncio.Lock()  # fetches and swaps of one key, in order
        self.size = size
        self.rate = 0.0
        self.last_take: float | None = None
        self.last_len = 0
        self.refill: asyncio.Task[None] | None = None


class AsyncSequencer:
    """IDs from March in asyncio: ``await next(key)``, ``await next_range(key, n)``.

    Same arguments and behaviour as `march_client.Sequencer` (routing, MOVED, bounded retries,
    `Unavailable` after ``retry_for`` seconds). With ``prefetch=True`` ranges are drawn by a task
    per key and IDs handed out locally: increasing within this event loop, unique everywhere,
    unused ones a gap at close. Use it from one event loop.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        nodes: Sequence[str | Address] | None = None,
        username: str | None = None,
        password: str | None = None,
        ssl: bool = False,
        ssl_ca_certs: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        retry_for: float = 10.0,
        socket_timeout: float = SOCKET_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
        max_incrby: int = MAX_INCRBY,
        prefetch: bool = False,
        min_range: int | None = None,
        max_range: int | None = None,
        target_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        where = target(
            url,
            nodes,
            username=username,
            password=password,
            ssl=ssl,
            ssl_ca_certs=ssl_ca_certs,
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
            socket_timeout=socket_timeout,
            connect_timeout=connect_timeout,
        )
        self.router = AsyncRouter(where, RetryPolicy(retry_for), clock=clock)
        self.max_incrby = max_incrby
        self.prefetch = prefetch
        self.min_range = min_range if min_range is not None else min(DEFAULT_MIN_RANGE, max_incrby)
        self.max_range = max_range if max_range is not None else max_incrby
        if not 1 <= self.min_range <= self.max_range <= max_incrby:
            raise ValueError(
                errors.BAD_PREFETCH_BOUNDS.format(low=self.min_range, high=self.max_range, limit=max_incrby)
            )
        self.target_seconds = target_seconds if target_seconds is not None else DEFAULT_TARGET_SECONDS
        self._clock = clock
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
            feed = self._feeds.setdefault(key, AsyncFeed(key, self.min_range))
        async with feed.lock:
            for value in feed.current:  # another task swapped a range in while we waited
                return value
            r = feed.ready.popleft() if feed.ready else await self._draw(key, feed.size)
            self._hunger(feed, len(r))
            feed.current = iter(r)
            if feed.refill is None or feed.refill.done():
                feed.refill = asyncio.create_task(self._refill(feed))
            return next(feed.current)  # a range is never empty (n >= 1)

    def _hunger(self, feed: AsyncFeed, taken: int) -> None:
        now = self._clock()
        if feed.last_take is not None:
            feed.rate = smoothed(feed.rate, feed.last_len, now - feed.last_take, self.target_seconds)
            feed.size = max(self.min_range, min(self.max_range, int(feed.rate * self.target_seconds)))
        feed.last_take, feed.last_len = now, taken

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
