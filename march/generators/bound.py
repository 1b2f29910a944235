"""What every generator is given (a lease, a clock, batch settings), what it may raise, and the
store-write machinery both generators share (``DurableBound``).

A generator hands out an ID only while ``lease.valid()`` is true and only below a ceiling that the
store has confirmed. It never knows a socket or a command; the keyspace wires it to both.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

from march import errors
from march.errors import CommandError, GuardFailed, StoreFull, StoreRejected
from march.store.contract import Guard, Store

Monotonic = Callable[[], float]  # monotonic seconds
WallClock = Callable[[], float]  # seconds since 1970 (time.time); may jump either way

log = logging.getLogger("march.generators")

_RETRY_MIN = 0.05  # first pause after a failed write: short, a store hiccup usually passes quickly
_RETRY_MAX = 1.0  # never hammer a failing store more than once a second


class NotServing(Exception):
    """This node may not hand out IDs now (not serving, lease expired, guard failed, shutting down)."""


class ServingTerm(Protocol):
    """The right to hand out IDs, as the generators see it: a ``march.keyspace.serving.Term``.

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

    @functools.cached_property
    def low(self) -> int:
        """Extend below this many unspent IDs at ``min_batch``: one int object, shared by every sequence."""
        return max(1, int(self.min_batch * self.watermark))


monotonic: Monotonic = time.monotonic


class Context:
    """What the generators of one keyspace and term with one batch policy share: made once, pointed
    at by each (a sequence's own fields are its state only: see ``DurableBound``). The contexts of
    one term that differ only in their policy are made by ``with_policy``, one per distinct policy.
    Never changed once made (compiled, its fields are read-only: ``bound.pxd``)."""

    __slots__ = ("clock", "landing", "lease", "policy", "store", "valid", "variants")

    def __init__(
        self,
        store: Store,
        lease: ServingTerm,
        clock: Monotonic,
        policy: BatchPolicy,
        valid: Callable[[], bool],
        variants: dict[BatchPolicy, Context] | None = None,
        landing: list[float] | None = None,
    ) -> None:
        self.store = store
        self.lease = lease
        self.clock = clock
        self.policy = policy
        self.valid = valid  # ``lease.valid``, bound once: the fast path calls it
        # shared by the term's contexts (``with_policy``): its variants, and the time writes landed (``landed``)
        self.variants: dict[BatchPolicy, Context] = {} if variants is None else variants
        self.landing: list[float] = [-math.inf] if landing is None else landing

    @classmethod
    def of(cls, store: Store, lease: ServingTerm, clock: Monotonic, policy: BatchPolicy) -> Context:
        return cls(store, lease, clock, policy, lease.valid)

    def landed(self) -> float:
        """``clock()`` for a write that just landed. The writes of one store transaction land
        together: they share one float (the first one's, at most ``_LANDING`` old), so a thousand
        sequences written at once do not keep a thousand copies of the same time (32 bytes each)."""
        now = self.clock()
        landing = self.landing
        if now - landing[0] < _LANDING:
            return landing[0]
        landing[0] = now
        return now

    def with_policy(self, policy: BatchPolicy) -> Context:
        """This context with ``policy``: the same object for every generator that has it."""
        if policy is self.policy or policy == self.policy:  # (``is``: the common case, no field compare)
            return self
        ctx = self.variants.get(policy)
        if ctx is None:
            ctx = self.variants[policy] = Context(
                self.store, self.lease, self.clock, policy, self.valid, self.variants, self.landing
            )
        return ctx


class Queued(NamedTuple):
    """A request waiting in a generator's queue (``SequenceGenerator.later``)."""

    answer: asyncio.Future[int]  # its own: cancelled when its client goes, which stops nobody else
    n: int  # IDs it wants
    deadline: float  # clock(): past this, TRYAGAIN


class _Io:
    """A generator's rarer state: made at its first wait or failed write, dropped once nothing in it
    matters (most sequences never wait and never see a failure, and carry none).

    ``queue``: the requests waiting for the exhausted range to be extended, in arrival order; they
    share one store write, one wake-up when it lands and one timer for their deadlines (``timer``,
    set for the first one's). ``wanted``: the IDs they want together (what the next write is sized
    for)."""

    __slots__ = (
        "changed", "failure", "queue", "rejected", "retry_delay", "timer", "wait_timeouts", "waiting", "wanted",
        "write_failures",
    )  # fmt: skip

    def __init__(self) -> None:
        self.changed: asyncio.Future[None] | None = None  # set when the ceiling may have moved
        self.waiting = 0  # requests waiting on this generator now (queued ones included)
        self.queue: list[Queued] = []
        self.wanted = 0
        self.timer: asyncio.TimerHandle | None = None
        self.retry_delay = 0.0
        self.failure: BaseException | None = None  # the last store failure, until a write lands
        self.rejected: StoreRejected | None = None
        self.write_failures = 0
        self.wait_timeouts = 0

    def clean(self) -> bool:
        """Nothing here worth keeping (a write landed, nobody waits, no failure ever counted)."""
        return not (
            self.waiting or self.changed or self.failure or self.rejected or self.write_failures or self.wait_timeouts
        )

    def dequeue(self, count: int) -> None:
        """The first ``count`` queued requests are answered (or gone); no timer once none is left."""
        if count:
            del self.queue[:count]
            self.waiting -= count
        if not self.queue and self.timer is not None:
            self.timer.cancel()
            self.timer = None


_NO_IO = _Io()  # what a generator without one reads (never written: ``_io_state`` makes its own)
NO_SETTINGS: Mapping[str, Any] = MappingProxyType({})  # the settings of every sequence that has none of its own
_LANDING = 0.001  # seconds: writes landing this close together share one reading of the clock
_LATENCY_UNIT = 100e-6  # seconds: a write's latency is kept in 0.1 ms, a small int (shared by CPython) below 25.6 ms


class GeneratorState:
    """The fields every generator has, and their accessors (``DurableBound`` is what it does).

    **Memory.** A server holds one generator per sequence in use, so each field counts (issue 18:
    at most about 250 bytes per sequence, name and dict entry included): fields are ``__slots__``;
    what the generators of a term with one batch policy share (store, lease, clock, policy) is one
    ``Context``; a sequence with no settings of its own points at ``NO_SETTINGS``; waits and
    failures, rare, live in an ``_Io`` made on first need and dropped once nothing in it matters;
    the last write's time and latency are two numbers (the latency a small int).
    """

    kind = "generator"
    _top = 0  # the highest possible ceiling: a subclass's class constant, or its own field

    __slots__ = (
        "_ceiling", "_ctx", "_io", "_latency", "_target", "_write", "key", "last_write_at", "seen", "settings",
        "waits", "writes",
    )  # fmt: skip

    def __init__(self, key: bytes, ceiling: int, ctx: Context) -> None:
        self.key = key
        self.settings: Mapping[str, Any] = NO_SETTINGS  # the record's settings, as stored (the keyspace keeps them)
        self._ctx = ctx
        self._ceiling = 0
        self._set_ceiling(ceiling)
        self._target = ceiling  # highest ceiling ever attempted
        self._write: asyncio.Task[None] | None = None
        self._io = _NO_IO
        # figures for SEQ.INFO / INFO
        self.writes = 0
        self.waits = 0  # requests that had to wait for a write
        self.last_write_at = 0.0  # clock() when the last successful write landed
        self._latency = 0  # of the last successful write, in _LATENCY_UNIT
        self.seen: int | None = None  # ``progress()`` at the idle sweep's last visit (``march.keyspace.idle``)

    # --- the rarer state (``_Io``) ------------------------------------------------------------------

    def _set_ceiling(self, ceiling: int) -> None:
        self._ceiling = ceiling

    def _io_state(self) -> _Io:
        io = self._io
        if io is _NO_IO:
            io = self._io = _Io()
        return io

    @property
    def _retry_delay(self) -> float:
        return self._io.retry_delay

    @property
    def wait_timeouts(self) -> int:
        return self._io.wait_timeouts

    @property
    def write_failures(self) -> int:
        return self._io.write_failures

    @property
    def last_write_latency(self) -> float:
        return self._latency * _LATENCY_UNIT

    @property
    def _policy(self) -> BatchPolicy:
        return self._ctx.policy

    @property
    def lease(self) -> ServingTerm:
        """The term this generator serves in (an ended one once retired)."""
        return self._ctx.lease

    @property
    def _clock(self) -> Monotonic:
        return self._ctx.clock

    def _valid(self) -> bool:
        return self._ctx.valid()


class DurableBound(GeneratorState):
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

    __slots__ = ()

    def set_policy(self, policy: BatchPolicy) -> None:
        """New batch bounds and waits (SEQ.ALTER, CONFIG SET): they size and time the next store write."""
        self._ctx = self._ctx.with_policy(policy)

    def take(self, n: int) -> int | None:
        """The fast path: hand out ``n`` >= 1 IDs and return the last, or None if the caller must
        wait (``later``). Every subclass has its own."""
        raise NotImplementedError

    async def take_wait(self, n: int) -> int:
        """``n`` IDs (the last one returned), waiting (bounded) for the store if the range is spent."""
        raise NotImplementedError

    def later(self, n: int) -> asyncio.Future[int]:
        """``take_wait`` as a future (here a task of its own; ``SequenceGenerator`` queues instead)."""
        return asyncio.ensure_future(self.take_wait(n))

    def _next_target(self, need: int) -> int:
        """The ceiling to persist next, for a request that needs ``need`` (the subclass's unit)."""
        raise NotImplementedError

    # --- extension -----------------------------------------------------------------------------

    def _extend(self, need: int) -> None:
        """Start persisting a higher ceiling (one write in flight at a time). Its target is chosen
        when the write's task first runs, a loop turn later (``_choose``): the requests of the turn
        that asked for it (a crowd that found the range empty arrives in one turn) size it too."""
        if self._ctx.lease.ended or self._ceiling >= self._top:
            return
        self._write = asyncio.get_running_loop().create_task(self._persist(need))

    def _choose(self, need: int) -> int:
        """The ceiling the write about to start persists (strictly above every earlier target)."""
        if self._target >= self._top:
            # No greater target exists: repeat the last one. If an earlier attempt landed, the store
            # says so under the guard (it returns the stored ceiling), like any late-landing write.
            return self._top
        target = self._target = min(self._top, max(self._target + 1, self._next_target(need)))
        return target

    def _landed(self, begun: int, started: float, now: float) -> None:
        """A write that started at ``started`` (``progress()`` was ``begun``) landed at ``now``: the
        subclass may size the next one from the demand it saw meanwhile. Called before the write is
        counted (``writes``, ``last_write_at`` are the previous one's) and before the queue is served."""

    def _serve(self) -> None:
        """Answer the queued requests the range holds now (the subclass's; none queue by default)."""

    async def _await_change(self, deadline: float, need: int) -> None:
        """Start a store write for ``need`` (the subclass's unit) unless one is in flight, then wait
        until the ceiling may have moved; raise TRYAGAIN once the deadline passes."""
        if self._write is None:
            self._extend(need)
        io = self._io_state()
        if io.rejected is not None:
            raise CommandError(errors.STORE_REJECTED.format(io.rejected))
        remaining = deadline - self._ctx.clock()
        if remaining <= 0:
            io.wait_timeouts += 1
            raise self._timed_out(io)
        await self._wait_changed(io, remaining)

    async def _wait_changed(self, io: _Io, timeout: float) -> None:
        """Wait at most ``timeout`` seconds for ``_notify`` (the ceiling may have moved, the term
        changed), counted in ``io.waiting``: every wait of a generator is this one."""
        changed = io.changed
        if changed is None:
            changed = io.changed = asyncio.get_running_loop().create_future()
        io.waiting += 1
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(changed), timeout)
        finally:
            io.waiting -= 1
            self._release(io)

    def _release(self, io: _Io) -> None:
        """Drop ``io`` once nothing in it matters (no write in flight, nobody waits, nothing counted)."""
        if self._io is io and self._write is None and io.clean():
            self._io = _NO_IO

    def _timed_out(self, io: _Io) -> CommandError:
        """TRYAGAIN for a request that waited past its deadline (naming a full store as the cause)."""
        if isinstance(io.failure, StoreFull):
            return CommandError(errors.TRYAGAIN_STORE_FULL)
        return CommandError(errors.TRYAGAIN_STORE.format(self.key.decode("utf-8", "replace")))

    async def _persist(self, need: int) -> None:
        ctx = self._ctx
        if ctx.lease.ended or self._ceiling >= self._top:  # (since it was asked for)
            self._write = None
            self._notify()
            return
        target = self._choose(need)
        begun = self.progress()
        started = ctx.clock()
        try:
            stored = await asyncio.wait_for(
                ctx.store.save_ceiling(self.key, target, ctx.lease.guard), ctx.policy.store_timeout
            )
        except GuardFailed as exc:
            # The term ends (an ended term's late refusal is expected and changes nothing).
            ctx.lease.lost(f"guarded write of {self.key!r} refused: {exc}")
            self._write = None
            self._notify()
            return
        except asyncio.CancelledError:
            self._write = None
            self._notify()
            raise
        except StoreRejected as exc:  # never accepted, whatever the target: waiting requests fail
            self._io_state().write_failures += 1
            log.error("the store refused to extend %r to %d: %s", self.key, target, exc)
            self._io_state().rejected = exc
            await self._pause_after_failure(exc)
            return
        except Exception as exc:  # a store hiccup: pause, then let the next request try again
            self._io_state().write_failures += 1
            log.warning("extending %r to %d failed: %s", self.key, target, exc or repr(exc))
            await self._pause_after_failure(exc)
            return
        now = ctx.landed()
        io = self._io
        if io is not _NO_IO:
            io.retry_delay = 0.0
            io.failure = None
            io.rejected = None
            if io.clean():
                self._io = _NO_IO  # (most sequences wait once, for their first write after a load)
        self._landed(begun, started, now)
        self.writes += 1
        self.last_write_at = now
        self._latency = max(0, math.ceil((now - started) / _LATENCY_UNIT))
        self._target = max(self._target, stored)  # above an earlier write that landed late, if any
        if stored > self._ceiling:
            self._set_ceiling(min(stored, self._top))
        self._write = None
        self._notify()

    async def _pause_after_failure(self, exc: BaseException) -> None:
        """Back off (50 ms doubling to 1 s), then let the next request start another attempt."""
        io = self._io_state()
        io.failure = exc
        io.retry_delay = min(_RETRY_MAX, max(_RETRY_MIN, io.retry_delay * 2))
        self._notify()  # waiters see the failure now (a rejected request fails at once)
        await asyncio.sleep(io.retry_delay)
        self._write = None
        self._notify()

    def _notify(self) -> None:
        """The ceiling may have moved (a write landed or failed, the term changed): the queue is
        served at once, in order; the coroutines waiting (``_wait_changed``) look again."""
        io = self._io
        changed, io.changed = io.changed, None  # (``_NO_IO``'s stays None)
        if changed is not None and not changed.done():
            changed.set_result(None)
        if io.queue:
            self._serve()

    # --- life ----------------------------------------------------------------------------------

    def progress(self) -> int:
        """A number that grows with every ID handed out (the idle sweep compares two readings)."""
        raise NotImplementedError

    @property
    def busy(self) -> bool:
        """A store write is in flight or a request waits on this generator: it may not be dropped."""
        return self._write is not None or self._io.waiting > 0

    def retire(self, ctx: Context) -> None:
        """Serve no more (``ctx`` is an ended one): dropped from memory while idle (``march.keyspace.idle``);
        any reference left hands out nothing and starts no write, as after the end of a term."""
        self._ctx = ctx.with_policy(self._ctx.policy)

    def _check_serving(self) -> None:
        if not self._valid():
            raise NotServing(self._ctx.lease.ended or "lease is not valid")

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
            "last_write_ago_ms": int((self._ctx.clock() - self.last_write_at) * 1000) if self.writes else -1,
            "last_write_latency_us": int(self.last_write_latency * 1_000_000),
            "last_write_error": str(self._io.failure or ""),
            "waits": self.waits,
            "wait_timeouts": self.wait_timeouts,
            "serving": 1 if self._valid() else 0,
        }
