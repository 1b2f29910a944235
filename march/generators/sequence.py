"""The sequence generator: consecutive IDs from a range whose bound is durable before it is used.

State: ``next`` (the next ID to hand out) and ``ceiling`` (exclusive bound, confirmed durable by the
store). Invariant: every ID handed out is < ``ceiling`` and was handed out while the lease was valid.

- ``take(n)`` is the synchronous fast path: it succeeds only when ``next + n <= ceiling`` and the
  lease is valid, and starts an asynchronous extension when the unspent part of the range falls
  below the watermark. It returns None when the caller must wait (``take_wait``). ``take_run(n)``
  hands out as many of n IDs as the range holds (a pipelined run of INCRs).
- ``take_wait(n)`` waits for the extension to land, bounded by ``max_wait``, then raises TRYAGAIN.
  It never returns an ID the store has not confirmed.
- The store writes (one in flight, strictly increasing targets, ``GuardFailed`` ends the term,
  other failures back off) are ``DurableBound``'s, shared with timestamp sequences.
- The batch doubles when one lasted less than half the target interval and halves when one lasted
  more than four intervals, between ``min_batch`` and ``max_batch``.
"""

from __future__ import annotations

import logging
from typing import Any

from .. import errors
from ..config import MAX_ID
from ..errors import CommandError
from .base import BatchPolicy, Context, DurableBound

log = logging.getLogger(__name__)

TOP = MAX_ID + 1  # the highest possible ceiling


class SequenceGenerator(DurableBound):
    __slots__ = ("_base", "_batch", "_low", "_next")
    kind = "sequence"
    _top = TOP

    def __init__(self, key: bytes, ceiling: int, ctx: Context, next_id: int | None = None) -> None:
        super().__init__(key, ceiling, ctx)
        policy = ctx.policy
        # After a restart nothing at or above the stored ceiling has been handed out; a brand-new
        # sequence passes its start, below the ceiling that was stored with it.
        self._next = ceiling if next_id is None else min(next_id, ceiling)
        self._batch = policy.min_batch
        self._low = policy.low  # max(1, batch * watermark), made once per policy
        # ``issued`` is next - base: the first ID plus those jumped over by raise_floor (not handed out)
        self._base = self._next

    # --- the fast path -------------------------------------------------------------------------

    def take(self, n: int) -> int | None:
        """Hand out ``n`` >= 1 consecutive IDs and return the last, or None if the caller must wait."""
        end = self._next + n
        if end <= self._ceiling and self._ctx.valid():
            self._next = end
            if self._write is None and self._ceiling - end < self._low:
                self._extend(0)
            return end - 1
        return None

    def take_run(self, n: int) -> range | None:
        """Up to ``n`` >= 1 consecutive IDs at once (a pipelined run of INCRs), as many as the
        durable range holds now, or None if it holds none (the caller takes them one by one, and
        waits). A run the range cannot hold whole starts a store write sized for the rest of it."""
        first = self._next
        end = min(first + n, self._ceiling)
        if end > first and self._ctx.valid():
            self._next = end
            if self._write is None and self._ceiling - end < self._low:
                self._extend(first + n - end)
            return range(first, end)
        return None

    async def take_wait(self, n: int) -> int:
        """Like ``take``, waiting (bounded) for the ceiling to be extended; raises on failure."""
        deadline = self._ctx.clock() + self._policy.max_wait
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
        deadline = self._ctx.clock() + self._policy.max_wait
        while True:
            self._check_serving()
            if self._ceiling > floor or self._ceiling >= TOP:
                break
            await self._wait_for_ceiling(floor + 1, deadline)
        if floor + 1 > self._next:
            self._base += floor + 1 - self._next
            self._next = floor + 1

    def progress(self) -> int:
        return self._next

    @property
    def issued(self) -> int:
        """IDs handed out by this generator (since it was loaded)."""
        return self._next - self._base

    def watermark(self) -> int:
        """W: every ID handed out so far is <= W, every later one is > W (GET)."""
        return self._next - 1

    def set_policy(self, policy: BatchPolicy) -> None:
        super().set_policy(policy)
        self._batch = min(max(self._batch, policy.min_batch), policy.max_batch)  # the current batch, in bounds now
        self._low = policy.low if self._batch == policy.min_batch else max(1, int(self._batch * policy.watermark))

    # --- extension -----------------------------------------------------------------------------

    async def _wait_for_ceiling(self, needed: int, deadline: float) -> None:
        """Wait until the ceiling may have moved; raise TRYAGAIN once the deadline passes."""
        if self._write is None:
            self._extend(needed - self._next)
        await self._await_change(deadline)

    def _next_target(self, need: int) -> int:
        if not self._retry_delay:  # a failure streak says nothing about demand
            self._adapt_batch()
        # Not above the last target: after a failed write that would add a batch per attempt.
        return max(self._ceiling, self._next + max(need, 0)) + self._batch

    def _adapt_batch(self) -> None:
        """How long the last batch lasted: from its write's landing to now (no write yet: unknown)."""
        if not self.writes:
            return
        lasted = self._ctx.clock() - self.last_write_at
        p = self._policy
        if lasted < p.interval / 2 and self._batch < p.max_batch:
            self._batch = min(p.max_batch, self._batch * 2)
        elif lasted > p.interval * 4 and self._batch > p.min_batch:
            self._batch = max(p.min_batch, self._batch // 2)
        self._low = p.low if self._batch == p.min_batch else max(1, int(self._batch * p.watermark))

    def info(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "next": self._next,
            "watermark": self._next - 1,
            "ceiling": self.durable_ceiling,
            "remaining": self._ceiling - self._next if self._ctx.valid() else 0,
            "batch": self._batch,
            "min_batch": self._policy.min_batch,
            "max_batch": self._policy.max_batch,
            "extending_to": self._target if self._write is not None else 0,
            "issued": self.issued,
            **self.store_info(),
        }
