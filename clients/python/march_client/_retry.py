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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import redis.exceptions as rex

from march_client import errors
from march_client._address import Address
from march_client.slots import SLOTS, request_slot, slot_ranges


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
    """Which node a router sends a request to, shared by the sync and asyncio routers: a slot
    table (slot -> the primary of its group, None = unknown), learned from ``MOVED`` and
    ``CLUSTER SLOTS``, for keyed requests; the current node for keyless ones and unknown slots;
    and every node known (the seeds, every node a ``MOVED`` or ``CLUSTER SLOTS`` named), which the
    current node moves through when it fails. Changed under ``_lock`` (the sync router's threads
    share it; the asyncio one never holds it across an ``await``); read without it (one list item,
    one attribute: atomic)."""

    def __init__(self, seeds: list[Address]) -> None:
        self._lock = threading.Lock()
        self._known: list[Address] = list(dict.fromkeys(seeds))
        self._current = self._known[0]
        self._slots: list[Address | None] = [None] * SLOTS
        self._refreshing = False  # a CLUSTER SLOTS is under way: a MOVED meanwhile starts none
        self.redirects = 0  # MOVED replies received: 0 after warm-up means every request went straight

    @property
    def current(self) -> Address:
        return self._current

    @staticmethod
    def slot_of(args: Sequence[Any]) -> int | None:
        """The slot a request is routed by (None: keyless, the current node)."""
        return request_slot(args)

    def address_for(self, slot: int | None) -> Address:
        """Where to send a request for ``slot``: its primary if known, else the current node."""
        return self._current if slot is None else (self._slots[slot] or self._current)

    def slot_owner(self, slot: int) -> Address | None:
        return self._slots[slot]

    def _forked(self) -> None:
        self._lock = threading.Lock()  # another thread of the parent may have held it at fork time
        self._refreshing = False  # a refresh of the parent's never ends in the child

    def _after_failure(self, address: Address, error: Exception, action: Action, slot: int | None) -> Address | None:
        """Move on after ``address`` failed with ``error`` for a request routed by ``slot``: a MOVED
        records its slot's primary and makes it the current node; a node down or paused loses its
        table entries (their slots go to the current node, which moves on to the next known node),
        and so does one knowing no primary (``CLUSTERDOWN``) if the table had sent us there: reached
        as the current node, its entries are its other groups, which it still leads.
        Returns the node whose ``CLUSTER SLOTS`` the router must now read (and hand to
        `_refreshed`, whatever happens): the MOVED's node, unless a refresh is already under way."""
        with self._lock:
            if isinstance(error, rex.MovedError):
                self.redirects += 1
                moved = (error.host, error.port)
                self._learn(moved)
                if 0 <= error.slot_id < SLOTS:
                    self._slots[error.slot_id] = moved
                self._current = moved
                if self._refreshing:
                    return None
                self._refreshing = True
                return moved
            if action is Action.NEXT_NODE:
                reached_by_table = slot is not None and self._slots[slot] == address
                if (reached_by_table or not isinstance(error, rex.ClusterDownError)) and address in self._slots:
                    self._slots = [None if a == address else a for a in self._slots]
                if self._current == address:  # another thread may have moved on
                    i = self._known.index(address) if address in self._known else -1
                    self._current = self._known[(i + 1) % len(self._known)]
        return None

    def _refreshed(self, source: Address, reply: object, moved: rex.MovedError) -> None:
        """The end of a refresh started by ``moved``: ``reply`` (None if it failed) is ``source``'s
        ``CLUSTER SLOTS``. A bad or failed reply changes nothing (the MOVED entry still routes)."""
        ranges = slot_ranges(reply, source) if reply is not None else None
        with self._lock:
            self._refreshing = False
            if ranges is None:
                return
            table: list[Address | None] = [None] * SLOTS
            for r in ranges:
                self._learn(r.primary)
                table[r.first : r.last + 1] = [r.primary] * (r.last - r.first + 1)
            if 0 <= moved.slot_id < SLOTS:
                table[moved.slot_id] = (moved.host, moved.port)  # the MOVED is the latest word on its slot
            self._slots = table

    def _learn(self, address: Address) -> None:
        if address not in self._known:
            self._known.append(address)


REFRESH = ("CLUSTER", "SLOTS")  # one reply maps every slot: sent once per MOVED, not per request
