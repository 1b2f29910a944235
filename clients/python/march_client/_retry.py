"""When a failed request may be sent again, and how long to wait before it: shared by the sync and
asyncio clients, with no I/O of its own (the caller sleeps).

Retrying is always safe with March: an error or a timeout hands out no ID, and a request that was
applied but whose reply was lost only leaves a gap. What this module must never do is classify a
reply as retryable when sending it again could not help (a wrong password, a refused command, an
overflow): those are raised at once.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum

import redis.exceptions as rex

from march_client import errors
from march_client._address import Address


class Action(Enum):
    RAISE = "raise"  # not a transient failure: give it to the caller
    REDIRECT = "redirect"  # MOVED: go to the node it names, at once
    NEXT_NODE = "next_node"  # this node is down, paused or knows no primary: try another
    WAIT = "wait"  # TRYAGAIN: the node is right but busy (a store write, a takeover); same node


def classify(error: BaseException) -> Action:
    """What to do after ``error`` from one attempt."""
    if isinstance(error, rex.AuthenticationError | rex.AuthorizationError):
        return Action.RAISE  # a ConnectionError subclass in redis-py, but retrying cannot fix it
    if isinstance(error, rex.MovedError):
        return Action.REDIRECT
    if isinstance(error, rex.TryAgainError | rex.BusyLoadingError):
        return Action.WAIT
    if isinstance(error, rex.ClusterDownError | rex.ConnectionError | rex.TimeoutError | OSError):
        return Action.NEXT_NODE
    return Action.RAISE


# Back-off: the first retry comes quickly (a failover ends within a couple of lease TTLs, a
# TRYAGAIN within max_wait), later ones at most every CAP seconds so a long outage costs the
# server a handful of connection attempts per second per client, not a hot loop.
BASE = 0.02
CAP = 0.5
MAX_REDIRECTS = 5  # MOVED hops followed without pausing; more in a row means a topology in flux


@dataclass(frozen=True)
class RetryPolicy:
    """``retry_for`` seconds of retries from the first attempt, then the last error is raised
    (as `Unavailable`). ``retry_for=0`` means one attempt (plus MOVED redirects)."""

    retry_for: float = 10.0
    base: float = BASE
    cap: float = CAP

    def delays(self) -> Iterator[float]:
        """Exponential back-off with full jitter: clients that failed together spread out."""
        ceiling = self.base
        while True:
            yield random.uniform(self.base / 2, ceiling)
            ceiling = min(self.cap, ceiling * 2)


class Attempts:
    """One request's retries, for the sync and asyncio routers alike (they do the sending, the
    node bookkeeping and the sleeping): counts attempts and MOVED hops, and says how long to wait
    after each failure, until the deadline ``retry_for`` seconds (default: the policy's) after
    the first attempt."""

    def __init__(self, policy: RetryPolicy, clock: Callable[[], float], retry_for: float | None = None) -> None:
        self._policy = policy
        self._clock = clock
        self._start = clock()
        self._deadline = self._start + (policy.retry_for if retry_for is None else retry_for)
        self._delays: Iterator[float] | None = None
        self._attempts = self._redirects = 0

    def pause(self, error: Exception) -> float:
        """After ``error``, which `classify` did not say to raise: seconds to wait before the next
        attempt (0 for a MOVED that names the primary), or `Unavailable` once the deadline passed."""
        self._attempts += 1
        last: Exception = error
        if isinstance(error, rex.MovedError):
            self._redirects += 1
            if self._redirects <= MAX_REDIRECTS:
                return 0.0  # the primary is named: no reason to wait
            last = rex.ClusterError(errors.TOO_MANY_REDIRECTS.format(hops=MAX_REDIRECTS, address=error.host))
        self._redirects = 0
        now = self._clock()
        if now >= self._deadline:
            raise errors.Unavailable(
                errors.UNAVAILABLE.format(seconds=now - self._start, attempts=self._attempts, last=last)
            ) from last
        if self._delays is None:
            self._delays = self._policy.delays()
        return min(next(self._delays), self._deadline - now)


class Routing:
    """Which node a router sends to first, shared by the sync and asyncio routers: the seeds plus
    every node a MOVED named, and the current one. Changed under ``_lock`` (the sync router's
    threads share it; the asyncio one never holds it across an ``await``)."""

    def __init__(self, seeds: list[Address]) -> None:
        self._lock = threading.Lock()
        self._known: list[Address] = list(dict.fromkeys(seeds))
        self._current = self._known[0]

    @property
    def current(self) -> Address:
        return self._current

    def _after_failure(self, address: Address, error: Exception, action: Action) -> None:
        """Move on after ``address`` failed with ``error``: to the node a MOVED names, or to the
        next known node when this one is down, paused or knows no primary."""
        with self._lock:
            if isinstance(error, rex.MovedError):
                moved = (error.host, error.port)
                if moved not in self._known:
                    self._known.append(moved)
                self._current = moved
            elif action is Action.NEXT_NODE and self._current == address:  # another thread may have moved on
                i = self._known.index(address) if address in self._known else -1
                self._current = self._known[(i + 1) % len(self._known)]
