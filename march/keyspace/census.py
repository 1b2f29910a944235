"""How many sequences exist (DBSIZE, INFO, ``max_sequences``), kept in memory per term.

The store is asked once per term, by the term's first creation or count, and every creation of
the term waits for that answer before it starts (so none is counted twice or missed), then adds
itself (``added``). No request ever runs ``COUNT(*)``. A node that does not serve (INFO on a
standby) asks the store, at most once a second (``STANDBY_REUSE``). Every wait is bounded by
``max_wait`` (then TRYAGAIN); nothing here ever lists or loads a sequence.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from march import errors
from march.config import Config
from march.errors import CommandError
from march.generators.bound import Monotonic, NotServing
from march.keyspace.serving import ServingState, Term
from march.store.contract import Store

STANDBY_REUSE = 1.0  # seconds a count read by a node that does not serve is reused (INFO on a standby)


class Census:
    """The number of sequences, for the keyspace (``Keyspace.count``, ``known_count``)."""

    def __init__(self, store: Store, state: ServingState, config: Callable[[], Config], clock: Monotonic) -> None:
        self.store = store
        self.state = state
        self._config = config
        self.clock = clock
        self._counted: tuple[Term, int] | None = None  # how many sequences exist, kept up to date in this term
        self._counting: tuple[Term, asyncio.Task[int]] | None = None  # the term's one count, while it runs
        self._standby: tuple[float, asyncio.Task[int]] | None = None  # a count read while not serving, and when

    def added(self, term: Term) -> None:
        """One sequence was created in ``term`` (durably)."""
        if self._counted is not None and self._counted[0] is term:
            self._counted = (term, self._counted[1] + 1)

    def known(self) -> int | None:
        """How many sequences exist, if this term knows it already (no waiting), else None."""
        counted, term = self._counted, self.state.term
        return counted[1] if counted is not None and counted[0] is term and self.state.serving else None

    async def count(self) -> int:
        """How many sequences exist: in memory while serving. Waits at most ``max_wait`` for the
        store (TRYAGAIN after that)."""
        term = self.state.term
        if term is not None and self.state.serving:
            with contextlib.suppress(NotServing):  # the term ended meanwhile: ask the store
                return await self.in_term(term)
        try:
            return await self._store_count()
        except TimeoutError:
            raise CommandError(errors.TRYAGAIN_STORE_DOWN) from None

    def room_for_one(self, creating: int) -> bool:
        """Whether this term knows its count and one more creation (besides ``creating`` under way)
        stays below ``max_sequences``: then it needs no ``check_room`` first."""
        count, limit = self.known(), self._config().max_sequences
        return count is not None and not (limit and count + creating + 1 >= limit)

    async def check_room(self, term: Term, creating: int) -> None:
        """``max_sequences`` (``creating``: creations under way); and the term's count is known before
        its first creation starts (``in_term``)."""
        count = await self.in_term(term)
        limit = self._config().max_sequences
        if limit and count + creating >= limit:
            raise CommandError(errors.MAX_SEQUENCES.format(limit))

    async def in_term(self, term: Term) -> int:
        """The count of ``term`` (read from the store once per term); NotServing if it ended."""
        counted = self._counted
        if counted is not None and counted[0] is term:
            return counted[1]
        if self._counting is None or self._counting[0] is not term:
            task = asyncio.get_running_loop().create_task(self._count_term(term))
            task.add_done_callback(retrieved)
            self._counting = (term, task)
        try:
            count = await asyncio.wait_for(asyncio.shield(self._counting[1]), self._config().max_wait)
        except TimeoutError:
            raise CommandError(errors.TRYAGAIN_STORE_DOWN) from None
        counted = self._counted
        return counted[1] if counted is not None and counted[0] is term else count

    async def _count_term(self, term: Term) -> int:
        try:
            count = await asyncio.wait_for(self.store.count(), self._config().store_timeout)
        finally:
            if self._counting is not None and self._counting[0] is term:
                self._counting = None
        if self.state.term is not term:
            raise NotServing(term.ended or "the term changed")
        if self._counted is None or self._counted[0] is not term:
            self._counted = (term, count)
        return self._counted[1]

    async def _store_count(self) -> int:
        """The store's count, shared by the requests of one second (a node that does not serve)."""
        now = self.clock()
        if self._standby is None or now - self._standby[0] >= STANDBY_REUSE or self._standby[1].cancelled():
            task = asyncio.get_running_loop().create_task(self.store.count())
            task.add_done_callback(retrieved)
            self._standby = (now, task)
        task = self._standby[1]
        if task.done() and task.exception() is not None:
            self._standby = None  # a failure is not kept
        return await asyncio.wait_for(asyncio.shield(task), self._config().max_wait)


def retrieved(task: asyncio.Task[Any]) -> None:
    """A shared task's exception is re-raised to each waiter: nobody logs it as never retrieved."""
    if not task.cancelled():
        task.exception()
