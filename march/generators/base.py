"""What every generator is given (a lease, a clock, batch settings), what it may raise, and the
store-write machinery both generators share (``DurableBound``).

A generator hands out an ID only while ``lease.valid()`` is true and only below a ceiling that the
store has confirmed. It never knows a socket or a command; the keyspace wires it to both.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .. import errors
from ..errors import CommandError
from ..store.base import Guard, GuardFailed, Store, StoreFull, StoreRejected

Clock = Callable[[], float]  # monotonic seconds
WallClock = Callable[[], float]  # seconds since 1970 (time.time); may jump either way

log = logging.getLogger("march.generators")

_RETRY_MIN = 0.05  # first pause after a failed write: short, a store hiccup usually passes quickly
_RETRY_MAX = 1.0  # never hammer a failing store more than once a second


class NotServing(Exception):
    """This node may not hand out IDs now (not serving, lease expired, guard failed, shutting down)."""


class Lease(Protocol):
    """The right to hand out IDs, as the generators see it: a ``march.serving.Term``.

    ``valid()`` is checked before every hand-out. Once ``ended`` is set (why the term ended), the
    lease is never valid again; a generator of an ended term starts no more store writes.
    """

    @property
    def guard(self) -> Guard: ...

    @property
    def ended(self) -> str: ...

    def valid(self) -> bool:
        """True while the term is served and its lease deadline is in the future."""
        ...

    def lost(self, reason: str) -> None:
        """A guarded write failed: leadership is gone; stop serving at once (ignored once ended)."""
        ...


@dataclass(frozen=True)
class BatchPolicy:
    """How much of a sequence to persist at a time, and how long to wait for the store."""

    min_batch: int = 1000
    max_batch: int = 1_000_000
    interval: float = 1.0  # target seconds one batch lasts: about one store write per second per busy key
    watermark: float = 0.5  # extend when less than this fraction of the batch is left unspent
    max_wait: float = 2.0  # a request waits at most this long for a store write, then TRYAGAIN
    store_timeout: float = 5.0  # one store write is abandoned (and a greater one tried) after this


monotonic: Clock = time.monotonic


class DurableBound(abc.ABC):
    """A generator's durable ceiling and the one store write that extends it.

    ``ceiling`` is an exclusive bound, confirmed by the store, below which the subclass hands out
    IDs (for a sequence the ID itself, for a timestamp sequence the time field). One write is in
    flight at a time (``write``); targets strictly increase over the generator's life, even across
    failed or abandoned writes (only the top, once tried, is tried again as it is), so a
    late-landing abandoned write can never collide with a newer one, and a stored ceiling at or
    above a target is one of this leadership's own writes (the store checks the guard with it). A retry
    after a failure aims at what is needed now (one more than the last target at least), not one
    more batch per attempt, so a long outage leaves the stored ceiling about one batch above the
    last ID. ``GuardFailed`` tells the lease (the term ends); any other failure backs off (50 ms
    doubling to 1 s) and lets the next request try again. Requests that time out waiting get
    TRYAGAIN (naming the cause when the store is out of space); a write the store will never
    accept (``StoreRejected``) makes them fail with that error instead.

    Whether the generator may hand out IDs is its lease's (``valid()``), never a flag of its own:
    once its term ended it serves nothing, even through a stale reference.

    A subclass says where the next target lies (``_next_target``) and may react to a new ceiling
    (``_set_ceiling``); its fast path reads its own fields, never a method of this class.
    """

    kind = "generator"

    def __init__(
        self, key: bytes, ceiling: int, top: int, store: Store, lease: Lease, policy: BatchPolicy, clock: Clock
    ) -> None:
        self.key = key
        self.settings: dict[str, Any] = {}  # the record's settings, as stored (the keyspace keeps them)
        self._store = store
        self._lease = lease
        self._valid = lease.valid
        self._policy = policy
        self._clock = clock
        self._top = top  # the highest possible ceiling
        self._ceiling = 0
        self._set_ceiling(ceiling)
        self._target = ceiling  # highest ceiling ever attempted
        self._write: asyncio.Task[None] | None = None
        self._changed: asyncio.Future[None] | None = None
        self._retry_delay = 0.0
        self._failure: BaseException | None = None  # the last store failure, until a write lands
        self._rejected: StoreRejected | None = None
        # figures for SEQ.INFO / INFO
        self.writes = 0
        self.write_failures = 0
        self.last_write_at = 0.0  # clock() when the last successful write landed
        self.last_write_latency = 0.0
        self.waits = 0
        self.wait_timeouts = 0

    def _set_ceiling(self, ceiling: int) -> None:
        self._ceiling = ceiling

    def set_policy(self, policy: BatchPolicy) -> None:
        """New batch bounds and waits (SEQ.ALTER, CONFIG SET): they size and time the next store write."""
        self._policy = policy

    @abc.abstractmethod
    def _next_target(self, need: int) -> int:
        """The ceiling to persist next, for a request that needs ``need`` (the subclass's unit)."""

    # --- extension -----------------------------------------------------------------------------

    def _extend(self, need: int) -> None:
        """Start persisting a higher ceiling (one write in flight at a time)."""
        if self._lease.ended or self._ceiling >= self._top:
            return
        if self._target >= self._top:
            # No greater target exists: repeat the last one. If an earlier attempt landed, the store
            # says so under the guard (it returns the stored ceiling), like any late-landing write.
            target = self._top
        else:
            target = self._target = min(self._top, max(self._target + 1, self._next_target(need)))
        self._write = asyncio.get_running_loop().create_task(self._persist(target))

    async def _await_change(self, deadline: float) -> None:
        """Wait until the ceiling may have moved; raise TRYAGAIN once the deadline passes."""
        if self._rejected is not None:
            raise CommandError(errors.STORE_REJECTED.format(self._rejected))
        remaining = deadline - self._clock()
        if remaining <= 0:
            self.wait_timeouts += 1
            if isinstance(self._failure, StoreFull):
                raise CommandError(errors.TRYAGAIN_STORE_FULL)
            raise CommandError(errors.TRYAGAIN_STORE.format(self.key.decode("utf-8", "replace")))
        changed = self._changed
        if changed is None:
            changed = self._changed = asyncio.get_running_loop().create_future()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(changed), remaining)

    async def _persist(self, target: int) -> None:
        started = self._clock()
        try:
            stored = await asyncio.wait_for(
                self._store.save_ceiling(self.key, target, self._lease.guard), self._policy.store_timeout
            )
        except GuardFailed as exc:
            # The term ends (an ended term's late refusal is expected and changes nothing).
            self._lease.lost(f"guarded write of {self.key!r} refused: {exc}")
            self._write = None
            self._notify()
            return
        except asyncio.CancelledError:
            self._write = None
            self._notify()
            raise
        except StoreRejected as exc:  # never accepted, whatever the target: waiting requests fail
            self.write_failures += 1
            log.error("the store refused to extend %r to %d: %s", self.key, target, exc)
            self._rejected = exc
            await self._pause_after_failure(exc)
            return
        except Exception as exc:  # a store hiccup: pause, then let the next request try again
            self.write_failures += 1
            log.warning("extending %r to %d failed: %s", self.key, target, exc or repr(exc))
            await self._pause_after_failure(exc)
            return
        now = self._clock()
        self._retry_delay = 0.0
        self._failure = None
        self._rejected = None
        self.writes += 1
        self.last_write_at = now
        self.last_write_latency = now - started
        self._target = max(self._target, stored)  # above an earlier write that landed late, if any
        if stored > self._ceiling:
            self._set_ceiling(min(stored, self._top))
        self._write = None
        self._notify()

    async def _pause_after_failure(self, exc: BaseException) -> None:
        """Back off (50 ms doubling to 1 s), then let the next request start another attempt."""
        self._failure = exc
        self._retry_delay = min(_RETRY_MAX, max(_RETRY_MIN, self._retry_delay * 2))
        self._notify()  # waiters see the failure now (a rejected request fails at once)
        await asyncio.sleep(self._retry_delay)
        self._write = None
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None and not changed.done():
            changed.set_result(None)

    # --- life ----------------------------------------------------------------------------------

    def _check_serving(self) -> None:
        if not self._valid():
            raise NotServing(self._lease.ended or "lease is not valid")

    def wake(self) -> None:
        """Let requests waiting on this generator look again (its term ended or is on hold)."""
        self._notify()

    @property
    def serving(self) -> bool:
        return self._valid()

    @property
    def durable_ceiling(self) -> int:
        """The ceiling the store holds as far as this generator knows."""
        return self._ceiling

    @property
    def write(self) -> asyncio.Task[None] | None:
        """The store write in flight, if any."""
        return self._write

    async def drain(self) -> None:
        """Wait for the write in flight, if any (shutdown)."""
        write = self._write
        if write is not None:
            await asyncio.wait({write})

    def store_info(self) -> dict[str, Any]:
        """The SEQ.INFO fields about store writes and waits, common to every kind."""
        return {
            "store_writes": self.writes,
            "store_write_failures": self.write_failures,
            "last_write_ago_ms": int((self._clock() - self.last_write_at) * 1000) if self.writes else -1,
            "last_write_latency_us": int(self.last_write_latency * 1_000_000),
            "last_write_error": str(self._failure or ""),
            "waits": self.waits,
            "wait_timeouts": self.wait_timeouts,
            "serving": 1 if self._valid() else 0,
        }
