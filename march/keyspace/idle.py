"""Idle sequences give their memory back: ``sequence_idle_seconds`` after its last ID, a
sequence's generator leaves memory. A plain sequence (no settings of its own) becomes a row of the
keyspace's compact table (``park``: ``march.keyspace.sequence_table``, two numbers in one int, its range
kept: no gap); any other's next request reads its record again, like the first request after a
restart.

**What is lost is a gap, never an ID.** A generator is dropped only while nothing is in flight for
it: no store write (every write it started has landed or failed, so the store holds at least every
ceiling it handed IDs below), no request waiting on it, no read or creation of its key under way
(those may hold a record read before its last write: ``may_drop``), no SEQ.ALTER running. The next
request reads the stored ceiling and, as after a restart, persists a higher one before its first
ID: every later ID is above every earlier one. The unspent part of the dropped range is skipped.
A dropped generator is *retired* (``DurableBound.retire``): a reference to it left anywhere hands
out nothing and writes nothing, as one of an ended term.

**How idleness is seen without costing the hot path.** Nothing is recorded per request. The sweep
visits every generator once per pass and notes its ``progress()`` (a number that grows with every ID
handed out) in the generator (``seen``); a generator found at the same progress on its next visit,
and not busy, is dropped. A pass starts ``sequence_idle_seconds`` after the previous one ended, so
two visits are at least that far apart: a sequence leaves memory between one and about two idle
times after its last ID. Reads (GET, EXISTS, SEQ.INFO) do not count as use: a read after the drop
reads the record again (a GET then reports a higher watermark, which still holds: every later ID
is above it).

**Sliced.** A pass takes a snapshot of the generators (one list) and looks at ``SLICE`` of them per
event-loop step, so 100,000 sequences cost a hundred short steps, never one long one. A pass stops
when the term ends or the node stops serving (the term's generators are dropped by the keyspace
then anyway); the sweeper lives as long as its term.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from march.generators.bound import Context, DurableBound
from march.keyspace.serving import ServingState, Term
from march.store.contract import NO_GUARD, Guard

SLICE = 1000  # generators looked at per event-loop step (a few hundred microseconds)
POLL = 5.0  # seconds between two looks at the option while it is 0 (off) or long


class _Dropped:
    """The lease of a dropped generator: never valid, ended for good (``march.generators.bound.ServingTerm``)."""

    ended = "the sequence was idle and left memory; ask again"
    guard: Guard = NO_GUARD

    def valid(self) -> bool:
        return False

    def lost(self, reason: str) -> None:
        pass


G = TypeVar("G", bound=DurableBound)


class IdleSweeper(Generic[G]):
    """Drops idle generators from ``generators`` (see the module docstring), one sweeper per term.

    ``idle_seconds()`` is read before every pass (0: never; a live option); ``may_drop(key)`` says
    whether nothing else is under way for ``key`` (its owner's reads, creations and ALTERs)."""

    def __init__(
        self,
        generators: dict[bytes, G],
        state: ServingState,
        idle_seconds: Callable[[], float],
        may_drop: Callable[[bytes], bool],
        clock: Callable[[], float] = time.monotonic,
        park: Callable[[G], bool] = lambda gen: False,
    ) -> None:
        self.generators = generators
        self.state = state
        self._idle_seconds = idle_seconds
        self._may_drop = may_drop
        self._clock = clock
        self._park = park
        self.dropped = 0  # generators dropped since the start (INFO)
        self.parked = 0  # of which kept as a row of the keyspace's table (INFO)
        self._term: Term | None = None
        self._task: asyncio.Task[None] | None = None
        self._ended: Context | None = None

    def start(self, term: Term, ctx: Context) -> None:
        """Sweep ``term``'s generators (at its first generator: cheap to call on every one)."""
        if self._term is term:
            return
        self.stop()
        self._term = term
        self._ended = Context(ctx.store, _Dropped(), ctx.clock, ctx.policy, _never)
        self._task = asyncio.get_running_loop().create_task(self._run(term))

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._term = None

    async def _run(self, term: Term) -> None:
        ended = self._clock()
        while self.state.term is term:
            idle = self._idle_seconds()
            wait = POLL if idle <= 0 else ended + idle - self._clock()
            if wait > 0:
                await asyncio.sleep(min(wait, POLL))
                continue
            await self._pass(term)
            ended = self._clock()

    async def _pass(self, term: Term) -> None:
        gens = list(self.generators.values())
        for start in range(0, len(gens), SLICE):
            if self.state.term is not term or not self.state.serving:
                return
            for gen in gens[start : start + SLICE]:
                self._visit(gen)
            await asyncio.sleep(0)

    def _visit(self, gen: G) -> None:
        progress = gen.progress()
        if gen.busy:
            gen.seen = None  # in use now: idle only from a later visit on
        elif gen.seen is None or gen.seen != progress:
            gen.seen = progress
        elif self.generators.get(gen.key) is gen and self._may_drop(gen.key):
            if self._park(gen):
                self.parked += 1
            del self.generators[gen.key]
            self.retire(gen)
            self.dropped += 1

    def retire(self, gen: G) -> None:
        """``gen`` left ``generators`` (dropped, or kept as a row of the table): it serves no more."""
        assert self._ended is not None  # (started with the term's first generator)
        gen.retire(self._ended)


def _never() -> bool:
    return False
