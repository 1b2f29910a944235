"""When a failed request may be sent again, and how long to wait before it: shared by the sync and
asyncio clients, with no I/O of its own (the caller sleeps).

Retrying is always safe with March: an error or a timeout hands out no ID, and a request that was
applied but whose reply was lost only leaves a gap. What this module must never do is classify a
reply as retryable when sending it again could not help (a wrong password, a refused command, an
overflow): those are raised at once.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

import redis.exceptions as rex


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
