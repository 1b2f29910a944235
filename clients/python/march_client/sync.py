"""`Sequencer`: IDs from March over redis-py, with bounded, safe retries and failover following.

One object serves one node or a whole cluster. It keeps a plain redis-py client per node address
and sends each request to the node it believes serves it: a keyed request (``INCR key``, the
``WORKER.*`` commands of `snowflake`) to its key's slot's primary if the slot table knows it
(`_retry.Routing`), anything else to the current node. A `MOVED` reply names the real one
(followed at once and recorded for its slot, and the whole table is then read once from that
node's `CLUSTER SLOTS`), a dead or paused node (connection error, timeout) or one that knows no
primary (`CLUSTERDOWN`, where the table sent us) loses its table entries and the request goes to
the current node (the next known one if that was the node that failed), and
`TRYAGAIN` (the store is slow, a takeover is in progress) waits and asks the same node again.
Retries back off and stop at a deadline (`retry_for`), after which `Unavailable` is raised.

Why not redis-py's `RedisCluster`, though it routes by slot too: its constructor fails while no
primary is known (a cluster in an election) and against a single node (not a cluster), and it
retries a fixed number of times rather than until one deadline across connection errors,
`TRYAGAIN` and `CLUSTERDOWN` alike. This client routes like it (a slot table, `MOVED` followed,
`CLUSTER SLOTS` read after a `MOVED`) and works the same against a single node, where no `MOVED`
ever comes, the table stays empty and the current node serves every request.

What this module must never do: return anything but an ID the server handed out. An error is
raised, never converted; a reply that is not an integer is an error.

Retrying is safe but not free: a retried `INCR` whose first attempt was applied on the server
and whose reply was lost (the connection dropped, the socket timed out) skips that ID. Gaps are
allowed, duplicates are not, and no retry can produce a duplicate.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Self

import redis
import redis.exceptions as rex
from redis.backoff import NoBackoff
from redis.retry import Retry

from march_client import errors
from march_client._address import MAX_INCRBY, Address, Options, Target
from march_client._retry import REFRESH, Action, Attempts, RetryPolicy, Routing, classify
from march_client.prefetch import Prefetcher

__all__ = ["MAX_INCRBY", "PrefetchSequencer", "Router", "Sequencer"]


def to_id(command: str, reply: object) -> int:
    """An integer reply -> the ID; anything else is an error, never an ID."""
    if isinstance(reply, int) and not isinstance(reply, bool):
        return reply
    raise rex.ResponseError(errors.BAD_REPLY.format(command=command, reply=reply))


def range_ending_at(last: int, n: int) -> range:
    """``INCRBY key n`` returned ``last``: the caller owns ``last-n+1 .. last``."""
    return range(last - n + 1, last + 1)


def check_range_size(n: int, limit: int) -> None:
    if not 1 <= n <= limit:
        raise ValueError(errors.BAD_RANGE_SIZE.format(n=n, limit=limit))


class Router(Routing):
    """Sends one command to the primary, following MOVED and retrying as `RetryPolicy` says.

    Thread-safe: redis-py clients have connection pools, and the only shared state (which address
    to try first, which addresses are known) is changed under a lock.
    """

    def __init__(
        self,
        where: Target,
        policy: RetryPolicy,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(where.seeds)
        self._options = where.options
        self._policy = policy
        self._clock = clock
        self._sleep = sleep
        self._clients: dict[Address, redis.Redis] = {}
        self._closed = False
        _ROUTERS.add(self)

    def client(self, address: Address) -> redis.Redis:
        c = self._clients.get(address)
        if c is None:
            with self._lock:
                if self._closed:
                    raise rex.ConnectionError(errors.CLOSED)
                c = self._clients.get(address)
                if c is None:
                    # No retries inside redis-py: this class owns the deadline and the choice of node.
                    c = redis.Redis(host=address[0], port=address[1], retry=Retry(NoBackoff(), 0), **self._options)
                    self._clients[address] = c
        return c

    def execute(self, *args: Any, retry_for: float | None = None) -> Any:
        """The reply of ``args`` from the primary; errors that retrying cannot fix are raised at
        once, transient ones retried until ``retry_for`` seconds have passed."""
        if self._closed:
            raise rex.ConnectionError(errors.CLOSED)
        attempts = Attempts(self._policy, self._clock, retry_for)
        slot = self.slot_of(args)
        while True:
            address = self.address_for(slot)
            try:
                return self.client(address).execute_command(*args)  # type: ignore[no-untyped-call]
            except Exception as e:  # classified below; the ones we do not know are raised
                action = classify(e)
                if action is Action.RAISE or self._closed:
                    raise
                source = self._after_failure(address, e, action, slot)
                if source is not None and isinstance(e, rex.MovedError):  # before pause(), which may raise
                    self._refresh(source, e)
                pause = attempts.pause(e)
            if pause:
                self._sleep(pause)

    def _refresh(self, source: Address, moved: rex.MovedError) -> None:
        """The whole slot table from ``source``'s ``CLUSTER SLOTS``, once per MOVED (not per
        request); a failure is ignored: the MOVED entry alone routes its slot right."""
        reply = None
        try:
            reply = self.client(source).execute_command(*REFRESH)  # type: ignore[no-untyped-call]
        except Exception:  # any failure leaves the table as the MOVED made it
            pass
        finally:
            self._refreshed(source, reply, moved)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            c.close()


def _after_fork_in_child() -> None:
    for router in list(_ROUTERS):
        router._forked()


_ROUTERS: weakref.WeakSet[Router] = weakref.WeakSet()  # for the fork hook; keeps none alive
os.register_at_fork(after_in_child=_after_fork_in_child)


class Sequencer(Options):
    """IDs from March: ``next(key)`` and ``next_range(key, n)``.

    ``url`` (``redis://[user:pass@]host:port``, ``rediss://`` for TLS) names one node; ``nodes``
    (``["host:port", ...]`` or ``[(host, port), ...]``) seeds a cluster. Either way `MOVED` replies
    are followed and keyed requests routed by slot (several leadership groups: each key's group's
    primary), so one URL of any cluster node also works, but only the seeds and the nodes that
    `MOVED` or `CLUSTER SLOTS` named are tried when a node dies: give every node in a cluster.

    Transient failures (connection errors, timeouts, ``TRYAGAIN``, ``MOVED``, ``CLUSTERDOWN``)
    are retried with bounded back-off for ``retry_for`` seconds, then `Unavailable` is raised.
    A retried request whose first attempt reached the server leaves a gap: never a duplicate.

    ``prefetch=True`` draws ranges of IDs in the background and hands them out locally: far
    faster, but IDs then increase only within one thread of one process (see `PrefetchSequencer`).

    Thread-safe; one instance per process is enough. Its arguments are `Options`' (each described
    in the README, "Options").
    """

    def __post_init__(self) -> None:
        self.router = Router(self.target(), RetryPolicy(self.retry_for), clock=self.clock)
        self._prefetch: Prefetcher | None = None
        if self.prefetch:
            self._prefetch = Prefetcher(
                self._draw,
                # a consumer waits behind a refill at most as long as that refill may retry
                lock_timeout=self.retry_for + self.socket_timeout,
                max_incrby=self.max_incrby,
                min_range=self.min_range,
                max_range=self.max_range,
                target_seconds=self.target_seconds,
            )
            self.next = self._prefetch.next  # type: ignore[method-assign]  # the fast path: no extra frame

    def _draw(self, key: str | bytes, n: int) -> range:
        return range_ending_at(to_id("INCRBY", self.router.execute("INCRBY", key, n)), n)

    def next(self, key: str | bytes) -> int:
        """The next ID of ``key`` (created at 1 if the server auto-creates keys)."""
        return to_id("INCR", self.router.execute("INCR", key))

    def next_range(self, key: str | bytes, n: int) -> range:
        """``n`` consecutive IDs of ``key`` (1 <= n <= max_incrby), straight from the server
        (also in prefetch mode), as ``range(first, last + 1)``."""
        check_range_size(n, self.max_incrby)
        return self._draw(key, n)

    def ids(self, key: str | bytes) -> Iterator[int]:
        """An endless iterator of IDs of ``key``: with prefetch, ``next(it)`` is one C-level call
        (the fastest way to draw IDs); without, one round trip per ID. For one thread; after an
        error it is exhausted: take a new one."""
        if self._prefetch is not None:
            return self._prefetch.ids(key)
        return iter(lambda: self.next(key), None)

    def close(self) -> None:
        """Stop the prefetch thread (unused prefetched IDs become a gap) and close connections."""
        if self._prefetch is not None:
            self._prefetch.close()
        self.router.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PrefetchSequencer(Sequencer):
    """``Sequencer(..., prefetch=True)``: see `march_client.prefetch` for what it guarantees."""

    def __init__(self, url: str | None = None, **kwargs: Any) -> None:
        kwargs["prefetch"] = True
        super().__init__(url, **kwargs)
