"""The sequence generator: consecutive IDs from a range whose bound is durable before it is used.

State: ``next`` (the next ID to hand out) and ``ceiling`` (exclusive bound, confirmed durable by the
store). Invariant: every ID handed out is < ``ceiling`` and was handed out while the lease was valid.

- ``take(n)`` is the synchronous fast path: it succeeds only when ``next + n <= ceiling`` and the
  lease is valid, and starts an asynchronous extension when the unspent part of the range falls
  below the watermark. It returns None when the caller must wait (``later``). ``take_run(n)``
  hands out as many of n IDs as the range holds (a pipelined run of INCRs).
- ``later(n)``: a request the fast path refused. It gets a future of its own and joins the
  generator's **queue**: the requests waiting for the exhausted range share one store write, one
  wake-up when it lands (the queue is served at once, in arrival order, each from the range as
  far as it holds them) and one timer for their deadlines (``max_wait``, then TRYAGAIN). No task
  per waiting request. A request whose client goes away is cancelled alone (its future): the
  others and the store write go on. ``take_wait(n)`` is ``later`` for a coroutine.
  Nothing is ever answered with an ID the store has not confirmed.
- The store writes (one in flight, strictly increasing targets, ``GuardFailed`` ends the term,
  other failures back off) are ``DurableBound``'s, shared with timestamp sequences.
- ``park()``: a generator with nothing under way hands its state (``next``, ``ceiling``) to the
  keyspace's compact table (``march.keyspace.sequence_table``) and is retired; a generator made from a
  row again starts at its ``next`` below its ``ceiling`` (``next_id``), exactly where it stopped.

**Batch size** (between ``min_batch`` and ``max_batch``; steady state about one store write per
``batch_interval`` per busy key, whatever its rate):

- it doubles when one batch lasted less than half the interval and halves when one lasted more
  than four intervals (measured from a write's landing to the start of the next);
- **demand**: a write is sized for the requests queued when it starts (``wanted``: the range holds
  them all, plus a batch of at least ``wanted / watermark``: a crowd that found the range empty
  will ask again within a round trip; a generator's first write also counts a whole batch handed
  out before it started: a new sequence's first crowd, served from its stored range). When a
  write lands, the batch becomes at least ``demand / watermark``, ``demand`` being the IDs asked
  for during its round trip (handed out meanwhile, plus still queued): so the next write starts
  while a round trip's demand is left. 1,000 clients waiting mean at least 1,000 IDs per store
  round trip;
- **a climbing rate**: while batches last less than half the interval, a landing sizes the batch
  for the rate seen during its round trip (``demand * interval / latency``), at most ``_RISE``
  times the batch per write, instead of waiting for one doubling per write.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from march import errors
from march.config import MAX_ID
from march.errors import CommandError
from march.generators.bound import _NO_IO, BatchPolicy, Context, DurableBound, NotServing, Queued, _Io

log = logging.getLogger(__name__)

TOP = MAX_ID + 1  # the highest possible ceiling
# A landing may grow the batch at most this many times for a climbing rate: the rate of one short
# round trip (a burst) must not jump straight to max_batch; three landings cover 1,000 -> 512,000.
_RISE = 8
_TICK = 0.001  # seconds: the queue's timer never fires sooner than this after it is set


class SequenceGenerator(DurableBound):
    __slots__ = ("_base", "_batch", "_bound", "_low", "_next")
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

    def _set_ceiling(self, ceiling: int) -> None:
        # ``_bound``: the fast path's copy (compiled, a C integer: ``sequence.pxd``; every ceiling is
        # at most TOP = 2**63, every ``next`` too, and ``next + n`` below 2**64 for any n it is given)
        self._ceiling = self._bound = ceiling

    # --- the fast path -------------------------------------------------------------------------

    def take(self, n: int) -> int | None:
        """Hand out ``n`` >= 1 consecutive IDs and return the last, or None if the caller must wait."""
        end = self._next + n
        if end <= self._bound and self._ctx.valid():
            self._next = end
            if self._write is None and self._bound - end < self._low:
                self._extend(0)
            return end - 1
        return None

    def take_run(self, n: int) -> range | None:
        """Up to ``n`` >= 1 consecutive IDs at once (a pipelined run of INCRs), as many as the
        durable range holds now, or None if it holds none (the caller takes them one by one, and
        waits). A run the range cannot hold whole starts a store write sized for the rest of it."""
        first = self._next
        end = min(first + n, self._bound)
        if end > first and self._ctx.valid():
            self._next = end
            if self._write is None and self._bound - end < self._low:
                self._extend(first + n - end)
            return range(first, end)
        return None

    def later(self, n: int) -> asyncio.Future[int]:
        """The last of ``n`` >= 1 IDs for a request the fast path refused, as a future of its own:
        answered at once if the range holds them and nobody queues, else in arrival order when the
        range is extended (see the module docstring). Its exception: ``NotServing`` (it got no ID:
        redirect or run it again), TRYAGAIN after ``max_wait``, OVERFLOW, a rejected store write."""
        answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if not self._io.queue:
            try:
                value = self._hand(n)
            except Exception as exc:
                answer.set_exception(exc)
                return answer
            if value is not None:
                answer.set_result(value)
                return answer
        io = self._io_state()
        if io.rejected is not None:
            answer.set_exception(CommandError(errors.STORE_REJECTED.format(io.rejected)))
            return answer
        self.waits += 1
        io.queue.append(Queued(answer, n, self._ctx.clock() + self._policy.max_wait))
        io.wanted += n
        io.waiting += 1
        if self._write is None:
            self._extend(0)  # (sized for the whole queue when it starts: ``_next_target``)
        if io.timer is None:
            self._arm(io)
        return answer

    async def take_wait(self, n: int) -> int:
        """Like ``take``, waiting (bounded) for the ceiling to be extended; raises on failure."""
        return await self.later(n)

    def _hand(self, n: int) -> int | None:
        """A queued request's step: the last of its ``n`` IDs if the range holds them, else None."""
        if not self._ctx.valid():
            raise NotServing(self._ctx.lease.ended or "lease is not valid")
        end = self._next + n
        if end - 1 > MAX_ID:
            raise CommandError(errors.OVERFLOW)
        if end > self._ceiling:
            return None
        self._next = end
        if self._write is None and self._ceiling - end < self._low:
            self._extend(0)
        return end - 1

    def _serve(self) -> None:
        """Answer the queue in order, as far as the range holds it (the ceiling may have moved, or
        the term ended); the rest waits for the next write, started here if none is on its way."""
        io = self._io
        queue = io.queue
        now = self._ctx.clock()
        i = 0
        while i < len(queue):
            waiter = queue[i]
            answer = waiter.answer
            if not answer.done():  # (done: cancelled, its client went away)
                try:
                    value = self._hand(waiter.n)
                except Exception as exc:  # NotServing, OVERFLOW: this one fails, the next may not
                    answer.set_exception(exc)
                else:
                    if value is not None:
                        answer.set_result(value)
                    elif io.rejected is not None:
                        answer.set_exception(CommandError(errors.STORE_REJECTED.format(io.rejected)))
                    elif waiter.deadline <= now:
                        io.wait_timeouts += 1
                        answer.set_exception(self._timed_out(io))
                    else:
                        break
            io.wanted -= waiter.n
            i += 1
        io.dequeue(i)
        self._release(io)
        if queue and self._write is None:
            self._extend(0)

    def _arm(self, io: _Io) -> None:
        """One timer for the queue: when its first request's deadline comes (deadlines follow
        arrival order). The deadline is on the injected clock; the timer on the loop's."""
        delay = max(_TICK, io.queue[0].deadline - self._ctx.clock())
        io.timer = asyncio.get_running_loop().call_later(delay, self._expire)

    def _expire(self) -> None:
        """TRYAGAIN for the queued requests whose deadline passed (they got no ID)."""
        io = self._io
        io.timer = None
        queue = io.queue
        now = self._ctx.clock()
        i = 0
        while i < len(queue) and (queue[i].answer.done() or queue[i].deadline <= now):
            waiter = queue[i]
            if not waiter.answer.done():
                io.wait_timeouts += 1
                waiter.answer.set_exception(self._timed_out(io))
            io.wanted -= waiter.n
            i += 1
        io.dequeue(i)
        self._release(io)
        if io.queue:
            self._arm(io)

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
            await self._await_change(deadline, floor + 1 - self._next)
        if floor + 1 > self._next:
            self._base += floor + 1 - self._next
            self._next = floor + 1

    def park(self) -> tuple[int, int, int] | None:
        """Leave this generator for two numbers in the keyspace's table (``march.keyspace.sequence_table``):
        ``(next, ceiling, issued)`` if it may, else None. It may when it has no settings of its
        own, no store write in flight, nobody waiting, no failure counted (``_io`` unused) and no
        target above its ceiling: then ``ceiling`` is what the store holds and every ID handed out
        is below ``next``. Its ``issued`` goes with it (the table counts it from here; this one
        counts 0). The caller retires this generator at once (``retire``)."""
        if self._write is not None or self._io is not _NO_IO or self.settings or self._target != self._ceiling:
            return None
        issued, self._base = self._next - self._base, self._next
        return self._next, self._ceiling, issued

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

    def _next_target(self, need: int) -> int:
        wanted = self._io.wanted  # IDs the queued requests want: the range holds them all
        if not self._retry_delay:  # a failure streak says nothing about demand
            self._adapt_batch()
            # The first write of a generator knows no round trip yet: a whole batch handed out before
            # it started (a new sequence's first crowd, served from the range stored with it) will
            # be asked for again.
            demand = wanted
            if not self.writes and self._next - self._base >= self._batch:
                demand += self._next - self._base
            if demand:
                self._fit(demand)
        # Not above the last target: after a failed write that would add a batch per attempt.
        return max(self._ceiling, self._next + max(need, wanted, 0)) + self._batch

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

    def _landed(self, begun: int, started: float, now: float) -> None:
        """A write started at ``started`` (``next`` was ``begun``) landed at ``now``: the IDs asked for
        during its round trip (handed out, plus still queued) size the batch (module docstring)."""
        demand = self._next - begun + self._io.wanted
        if not demand:
            return
        p = self._policy
        rising = self.writes > 0 and started - self.last_write_at < p.interval / 2 and now > started
        self._fit(demand, min(demand * p.interval / (now - started), self._batch * _RISE) if rising else 0.0)

    def _fit(self, demand: int, rate_batch: float = 0.0) -> None:
        """Grow the batch (never past ``max_batch``) so that ``demand`` IDs are left when the next
        write starts, and to ``rate_batch`` if larger."""
        p = self._policy
        want = max(demand / p.watermark, rate_batch)
        if want > self._batch and self._batch < p.max_batch:
            self._batch = min(p.max_batch, int(want))
            self._low = max(1, int(self._batch * p.watermark))

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
