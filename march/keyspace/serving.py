"""Whether this node may hand out IDs: one state machine per leadership group, the only owner of
that fact. Everything else derives from it and none keeps a copy: the keyspace (which generators
live), the server's fast path, the dispatcher's routing (serve, hold or redirect), ``INFO
replication``, the ``CLUSTER`` replies and the node record's role.

::

                 promote(guard)            serve()
    STANDBY ────────────────────▶ PROMOTING ──────────▶ SERVING ◀──┐
       ▲                              │                    │       │ serve() (FAILOVER aborted)
       │                              │           hold()   ▼       │
       │                              │            STEPPING_DOWN ──┘
       │                              │                    │
       └──────── step_down(cause) ────┴────────────────────┘   (from any phase)

- ``STANDBY``: no term; key requests are redirected (MOVED) or refused.
- ``PROMOTING``: this node holds the leader key (a new term with its ``Guard``) but does not hand
  out IDs yet; key requests wait (bounded) for the outcome.
- ``SERVING``: IDs are handed out while the lease deadline is ahead.
- ``STEPPING_DOWN``: no more IDs; key requests are held while a planned FAILOVER hands over (or
  aborts and serves again in the same term).

**Terms.** Each promotion starts a ``Term``, which is what the generators of that term see as
their lease (``guard``, ``valid()``, ``lost()``). ``Term.valid()`` is true only while that very
term is being served and the lease deadline is ahead (guarantee 4 in docs/architecture.md: the deadline counts from
the keep-alive's send time, see ``march.cluster.lease``). A term that ended is never valid again,
so a generator from an old term, or a stale reference to one, hands out nothing, whatever happens
later: that replaces per-generator "dead" flags kept in step by hand.

**The deadline** is pushed in by the lease (``renewed``) and only moves forward; a timer steps the
group down when it passes (looking again if the loop fires it early). ``valid()`` compares it with
the clock on every hand-out anyway, so a late timer never lets an ID out.

Single-node mode is the same machine with a deadline that never comes (``forever``).

Listeners (``subscribe``) are called synchronously on every change, in order; they must not change
the state themselves (they schedule work instead).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from march.clock import Clock, Timer, wait_event
from march.store.contract import NO_GUARD, Guard

log = logging.getLogger("march.keyspace.serving")


class Phase(Enum):
    STANDBY = "standby"
    PROMOTING = "promoting"
    SERVING = "serving"
    STEPPING_DOWN = "stepping down"


class Cause(Enum):
    """Why the phase changed (for logs, INFO and the election's reaction)."""

    ALONE = "single node: the data dir's lock is the leadership"
    ELECTED = "won the election"
    RESUMED = "the lease held: serving the same term again"
    READY = "ready to serve"
    HANDING_OVER = "FAILOVER: handing over"
    ABORTED = "FAILOVER aborted: serving again"
    HANDED_OVER = "FAILOVER: handed over"
    DEADLINE = "lease deadline passed"
    LEASE_GONE = "lease gone in etcd"
    REFUSED = "a guarded write was refused"
    SUPERSEDED = "another node holds the leader key"
    FAILED = "promotion failed"
    SHUTDOWN = "shutting down"


class Term:
    """One leadership of a group, from its promotion to the step-down that ends it.

    The ``ServingTerm`` its generators see (``march.generators.bound``).
    """

    __slots__ = ("_now", "_state", "ended", "guard", "number")

    def __init__(self, state: ServingState, number: int, guard: Guard) -> None:
        self._state = state
        self._now = state.clock.now
        self.number = number
        self.guard = guard
        self.ended = ""  # why the term ended; "" while it lasts

    def valid(self) -> bool:
        """True while this term is served and the lease deadline is ahead (checked per hand-out)."""
        state = self._state
        if state._served is not self:
            return False
        now = self._now()  # (compiled, a C double: compared with the deadline, a C field, unboxed)
        return now < state.deadline

    def lost(self, reason: str) -> None:
        """A guarded write of this term was refused: if the term still lasts, step down now."""
        self._state.refused(self, reason)

    def __repr__(self) -> str:
        return f"<Term {self.number} {self.guard} {self.ended or 'live'}>"


@dataclass(frozen=True)
class Change:
    phase: Phase
    previous: Phase
    term: Term | None  # the term the change is about (the one that ended, on a step-down)
    cause: Cause
    detail: str = ""

    def __str__(self) -> str:
        text = f"{self.previous.value} -> {self.phase.value}: {self.cause.value}"
        return f"{text} ({self.detail})" if self.detail else text


Listener = Callable[[Change], None]


class ServingState:
    def __init__(self, clock: Clock, name: str = "") -> None:
        self.clock = clock
        self.name = name
        self.phase = Phase.STANDBY
        self.term: Term | None = None  # the current term: PROMOTING, SERVING or STEPPING_DOWN
        self._served: Term | None = None  # the term while SERVING, else None (read per hand-out)
        self.deadline = -math.inf  # the lease deadline (monotonic seconds of ``clock``)
        self._terms = 0
        self._timer: Timer | None = None
        self._listeners: list[Listener] = []
        self._changed = asyncio.Event()
        # figures for INFO
        self.promotions = 0
        self.demotions = 0
        self.last_change = ""

    @classmethod
    def forever(cls, clock: Clock, guard: Guard) -> ServingState:
        """Single-node mode: serving from the start, under a lease that never ends."""
        state = cls(clock)
        state.serve_forever(guard)
        return state

    def serve_forever(self, guard: Guard) -> None:
        """Single-node mode, once the store is open (its data dir locked): standby -> serving under
        a lease that never ends. Never earlier: a node refused its data dir must not log a promotion."""
        self.deadline = math.inf
        self.promote(guard, Cause.ALONE)
        self.serve(Cause.ALONE)

    # --- reading -------------------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    @property
    def serving(self) -> bool:
        return self.phase is Phase.SERVING

    @property
    def leading(self) -> bool:
        """This node holds a term (it is the primary, serving or about to)."""
        return self.term is not None

    @property
    def in_transition(self) -> bool:
        """Requests wait for the outcome instead of being redirected now."""
        return self.phase is Phase.PROMOTING or self.phase is Phase.STEPPING_DOWN

    @property
    def guard(self) -> Guard:
        return self.term.guard if self.term is not None else NO_GUARD

    def valid(self) -> bool:
        term = self._served
        return term is not None and term.valid()

    def remaining(self) -> float:
        """Seconds until the lease deadline (0 when passed)."""
        return max(0.0, self.deadline - self.clock.now())

    async def settled(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) while a promotion or a hand-over is in progress."""
        end = self.clock.now() + timeout
        while self.in_transition:
            remaining = end - self.clock.now()
            if remaining <= 0:
                return
            await wait_event(self.clock, self._changed, remaining)

    # --- transitions ---------------------------------------------------------------------------

    def promote(self, guard: Guard, cause: Cause = Cause.ELECTED) -> Term:
        """STANDBY -> PROMOTING: a new term under ``guard``."""
        if self.phase is not Phase.STANDBY:
            raise RuntimeError(f"promote from {self.phase.value}")
        self._terms += 1
        term = Term(self, self._terms, guard)
        self.term = term
        self._move(Phase.PROMOTING, term, cause)
        self._arm()
        return term

    def serve(self, cause: Cause = Cause.READY) -> None:
        """PROMOTING (or STEPPING_DOWN, after an aborted FAILOVER) -> SERVING, same term."""
        if self.phase is not Phase.PROMOTING and self.phase is not Phase.STEPPING_DOWN:
            raise RuntimeError(f"serve from {self.phase.value}")
        self._served = self.term
        if self.phase is Phase.PROMOTING:
            self.promotions += 1
        self._move(Phase.SERVING, self.term, cause)

    def hold(self, cause: Cause = Cause.HANDING_OVER) -> None:
        """SERVING -> STEPPING_DOWN: no more IDs; requests wait for the outcome."""
        if self.phase is not Phase.SERVING:
            raise RuntimeError(f"hold from {self.phase.value}")
        self._served = None
        self._move(Phase.STEPPING_DOWN, self.term, cause)

    def step_down(self, cause: Cause, detail: str = "") -> None:
        """Any phase -> STANDBY: the term ends at once (safe to call in any phase)."""
        term = self.term
        if term is None:
            return
        was_serving = self.phase is not Phase.PROMOTING
        self._served = None
        self.term = None
        term.ended = f"{cause.value}: {detail}" if detail else cause.value
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if was_serving:
            self.demotions += 1
        self._move(Phase.STANDBY, term, cause, detail)

    def refused(self, term: Term, reason: str) -> None:
        """A guarded write of ``term`` was refused. An ended term's late refusal changes nothing."""
        if term is self.term:
            log.error("a guarded write was refused (%s): stepping down", reason)
            self.step_down(Cause.REFUSED, reason)

    def renewed(self, deadline: float) -> None:
        """The lease was renewed: the deadline moves forward (never back)."""
        if deadline > self.deadline:
            self.deadline = deadline
            self._arm()

    def lease_gone(self, detail: str = "") -> None:
        """The lease ended in etcd: whatever was served under it is over; a new lease starts afresh."""
        self.step_down(Cause.LEASE_GONE, detail)
        self.deadline = -math.inf

    # --- internals -----------------------------------------------------------------------------

    def _move(self, phase: Phase, term: Term | None, cause: Cause, detail: str = "") -> None:
        change = Change(phase, self.phase, term, cause, detail)
        self.phase = phase
        self.last_change = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {change}"
        level = logging.INFO if phase is not Phase.STANDBY or cause is Cause.SHUTDOWN else logging.WARNING
        fields = {"phase": phase.value, "previous": change.previous.value, "cause": cause.name.lower()}
        log.log(
            level, "%s%s", f"[{self.name}] " if self.name else "", change, extra={"event": "role", "fields": fields}
        )
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:
                log.exception("a listener of the serving state failed on %s", change)

    def _arm(self) -> None:
        """(Re)arm the timer that steps down at the deadline, while a term lasts."""
        if self.term is None or self.deadline == math.inf:  # (-inf: no keep-alive yet, step down at once)
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.clock.call_later(self.deadline - self.clock.now(), self._check_deadline)

    def _check_deadline(self) -> None:
        self._timer = None
        if self.term is None:
            return
        if self.clock.now() < self.deadline:  # the loop may fire timers a little early: look again
            self._timer = self.clock.call_later(self.deadline - self.clock.now() + 0.001, self._check_deadline)
            return
        self.step_down(Cause.DEADLINE, "no keep-alive acknowledged in time")
