"""The sequence generator: consecutive IDs from a range whose bound is durable before it is used.

State: ``next`` (the next ID to hand out) and ``ceiling`` (exclusive bound, confirmed durable by the
store). Invariant: every ID handed out is < ``ceiling`` and was handed out while the lease was valid.

- ``take(n)`` is the synchronous fast path: it succeeds only when ``next + n <= ceiling`` and the
  lease is valid, and starts an asynchronous extension when the unspent part of the range falls
  below the watermark. It returns None when the caller must wait (``take_wait``).
- ``take_wait(n)`` waits for the extension to land, bounded by ``max_wait``, then raises TRYAGAIN.
  It never returns an ID the store has not confirmed.
- One extension is in flight at a time. Targets strictly increase over the generator's life, even
  across failed or abandoned writes, so a late-landing abandoned write can never collide with a
  newer one and the store's "greater than stored" check only fails when someone else wrote.
- ``GuardFailed`` from the store means leadership is gone: the generator is dead from then on.
- The batch doubles when one lasted less than half the target interval and halves when one lasted
  more than four intervals, between ``min_batch`` and ``max_batch``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from .. import errors
from ..errors import CommandError
from ..store.base import GuardFailed, Store
from .base import BatchPolicy, Clock, Lease, NotServing

log = logging.getLogger(__name__)

MAX_ID = (1 << 63) - 1
TOP = MAX_ID + 1  # the highest possible ceiling
_RETRY_MIN = 0.05  # first pause after a failed write: short, a store hiccup usually passes quickly
_RETRY_MAX = 1.0  # never hammer a failing store more than once a second


class SequenceGenerator:
    kind = "sequence"

    def __init__(
        self,
        key: bytes,
        ceiling: int,
        store: Store,
        lease: Lease,
        policy: BatchPolicy,
        clock: Clock,
        next_id: int | None = None,
    ) -> None:
        self.key = key
        self._store = store
        self._lease = lease
        self._valid = lease.valid
        self._policy = policy
        self._clock = clock
        # After a restart nothing at or above the stored ceiling has been handed out; a brand-new
        # sequence passes its start, below the ceiling that was stored with it.
        self._next = ceiling if next_id is None else min(next_id, ceiling)
        self._ceiling = ceiling
        self._target = ceiling  # highest ceiling ever attempted
        self._batch = policy.min_batch
        self._low = max(1, int(self._batch * policy.watermark))
        self._write: asyncio.Task[None] | None = None
        self._changed: asyncio.Future[None] | None = None
        self._dead = ""
        self._durable_at_death = 0
        self._retry_delay = 0.0
        self._last_extend_at: float | None = None
        # figures for SEQ.INFO / INFO
        self.writes = 0
        self.write_failures = 0
        self.last_write_at = 0.0  # clock() when the last successful write landed
        self.last_write_latency = 0.0
        self.waits = 0
        self.wait_timeouts = 0
        self._first = self._next
        self._skipped = 0  # IDs jumped over by raise_floor, so that ``issued`` counts only handed-out IDs

    # --- the fast path -------------------------------------------------------------------------

    def take(self, n: int) -> int | None:
        """Hand out ``n`` >= 1 consecutive IDs and return the last, or None if the caller must wait."""
        end = self._next + n
        if end <= self._ceiling and self._valid():
            self._next = end
            if self._write is None and self._ceiling - end < self._low:
                self._extend(0)
            return end - 1
        return None

    async def take_wait(self, n: int) -> int:
        """Like ``take``, waiting (bounded) for the ceiling to be extended; raises on failure."""
        deadline = self._clock() + self._policy.max_wait
        waited = False
        while True:
            self._check_serving()
            end = self._next + n
            if end - 1 > MAX_ID:
                raise CommandError(errors.OVERFLOW)
            if end <= self._ceiling:
                self._next = end
                if self._write is None and self._ceiling - end < self._low:
                    self._extend(0)
                return end - 1
            if not waited:
                waited = True
                self.waits += 1
            await self._wait_for_ceiling(end, deadline)

    async def raise_floor(self, floor: int) -> None:
        """Make every later ID > ``floor``, durably, before returning (SET key N).

        ``next`` moves only once a ceiling above ``floor`` is durable: until then a GET must not
        report the floor, since a crash would let the restarted node hand out IDs below it.
        """
        if floor < self._next - 1:
            raise CommandError(errors.SET_BACKWARDS.format(self.key.decode("utf-8", "replace"), self._next - 1))
        if floor > MAX_ID:
            raise CommandError(errors.NOT_INTEGER)
        deadline = self._clock() + self._policy.max_wait
        while True:
            self._check_serving()
            if self._ceiling > floor or self._ceiling >= TOP:
                break
            await self._wait_for_ceiling(floor + 1, deadline)
        if floor + 1 > self._next:
            self._skipped += floor + 1 - self._next
            self._next = floor + 1

    @property
    def issued(self) -> int:
        """IDs handed out by this generator (since it was loaded)."""
        return self._next - self._first - self._skipped

    def watermark(self) -> int:
        """W: every ID handed out so far is <= W, every later one is > W (GET)."""
        return self._next - 1

    # --- extension -----------------------------------------------------------------------------

    async def _wait_for_ceiling(self, needed: int, deadline: float) -> None:
        """Wait until the ceiling may have moved; raise TRYAGAIN once the deadline passes."""
        if self._write is None:
            self._extend(needed - self._next)
        remaining = deadline - self._clock()
        if remaining <= 0:
            self.wait_timeouts += 1
            raise CommandError(errors.TRYAGAIN_STORE.format(self.key.decode("utf-8", "replace")))
        changed = self._changed
        if changed is None:
            changed = self._changed = asyncio.get_running_loop().create_future()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(changed), remaining)

    def _extend(self, need: int) -> None:
        """Start persisting a higher ceiling (one write in flight at a time)."""
        if self._dead or self._ceiling >= TOP:
            return
        loop = asyncio.get_running_loop()
        if self._target >= TOP:
            # No greater target exists: find out whether the last attempt landed, else repeat it.
            self._write = loop.create_task(self._reconcile_top())
            return
        if not self._retry_delay:  # a failure streak says nothing about demand
            self._adapt_batch()
        base = max(self._target, self._ceiling, self._next + max(need, 0))
        target = min(TOP, base + self._batch)
        self._target = target
        self._write = loop.create_task(self._persist(target))

    async def _reconcile_top(self) -> None:
        """The write of the top ceiling failed or was abandoned: read back what the store holds.

        While the lease is valid, nobody but this generator has written this key since it was
        loaded (other writers fail the guard), so a stored TOP is this generator's own write.
        """
        try:
            record = await asyncio.wait_for(self._store.load(self.key), self._policy.store_timeout)
        except Exception as exc:
            log.warning("reading back %r failed: %r", self.key, exc)
            await self._pause_after_failure()
            return
        if record is not None and record.ceiling >= TOP and self._valid() and not self._dead:
            self._ceiling = TOP
            self._write = None
            self._notify()
            return
        await self._persist(TOP)

    def _adapt_batch(self) -> None:
        now = self._clock()
        last, self._last_extend_at = self._last_extend_at, now
        if last is None:
            return
        lasted = now - last
        p = self._policy
        if lasted < p.interval / 2 and self._batch < p.max_batch:
            self._batch = min(p.max_batch, self._batch * 2)
        elif lasted > p.interval * 4 and self._batch > p.min_batch:
            self._batch = max(p.min_batch, self._batch // 2)
        self._low = max(1, int(self._batch * p.watermark))

    async def _persist(self, target: int) -> None:
        started = self._clock()
        try:
            await asyncio.wait_for(
                self._store.save_ceiling(self.key, target, self._lease.guard), self._policy.store_timeout
            )
        except GuardFailed as exc:
            self.kill(f"guarded write of {self.key!r} refused: {exc}")
            self._lease.lost(str(exc))
            return
        except asyncio.CancelledError:
            self._write = None
            self._notify()
            raise
        except Exception as exc:  # a store hiccup: pause, then let the next request try a greater target
            self.write_failures += 1
            log.warning("extending %r to %d failed: %r", self.key, target, exc)
            await self._pause_after_failure()
            return
        if self._dead:  # landed after a kill: the ceiling stays down
            return
        now = self._clock()
        self._retry_delay = 0.0
        self.writes += 1
        self.last_write_at = now
        self.last_write_latency = now - started
        if target > self._ceiling:
            self._ceiling = target
        self._write = None
        self._notify()

    async def _pause_after_failure(self) -> None:
        """Back off (50 ms doubling to 1 s), then let the next request start another attempt."""
        self._retry_delay = min(_RETRY_MAX, max(_RETRY_MIN, self._retry_delay * 2))
        await asyncio.sleep(self._retry_delay)
        self._write = None
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None and not changed.done():
            changed.set_result(None)

    # --- life ----------------------------------------------------------------------------------

    def _check_serving(self) -> None:
        if self._dead:
            raise NotServing(self._dead)
        if not self._valid():
            raise NotServing("lease is not valid")

    def kill(self, reason: str) -> None:
        """Stop handing out IDs for good (demotion, guard failure, shutdown).

        The fast path checks only ``next + n <= ceiling`` and the lease, so a dead generator's
        ceiling drops to 0: no later ``take`` can succeed, even through a stale reference.
        """
        if not self._dead:
            self._dead = reason
            self._durable_at_death = self._ceiling
            self._ceiling = 0
        self._notify()

    @property
    def write(self) -> asyncio.Task[None] | None:
        """The store write in flight, if any."""
        return self._write

    async def drain(self) -> None:
        """Wait for the write in flight, if any (shutdown)."""
        write = self._write
        if write is not None:
            await asyncio.wait({write})

    def info(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "next": self._next,
            "watermark": self._next - 1,
            "ceiling": self._durable_at_death if self._dead else self._ceiling,
            "remaining": 0 if self._dead else self._ceiling - self._next,
            "batch": self._batch,
            "min_batch": self._policy.min_batch,
            "max_batch": self._policy.max_batch,
            "extending_to": self._target if self._write is not None else 0,
            "issued": self.issued,
            "store_writes": self.writes,
            "store_write_failures": self.write_failures,
            "last_write_ago_ms": int((self._clock() - self.last_write_at) * 1000) if self.writes else -1,
            "last_write_latency_us": int(self.last_write_latency * 1_000_000),
            "waits": self.waits,
            "wait_timeouts": self.wait_timeouts,
            "serving": 0 if self._dead else 1,
        }
