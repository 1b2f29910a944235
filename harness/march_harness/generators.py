"""Helpers for unit tests of the generators (sequence and timestamp), driven with no I/O.

- ``FakeLease``: a lease (a term) the test steers; ``end()`` ends it for good.
- ``take_checked``: take IDs the way INCRBY does, each checked by the test's ``got`` in the very
  loop step that allocated it (the fast path, else the bounded wait).
- ``settle``: a fixture's teardown: release held store writes and wait for every write in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Protocol

from march.store.contract import SINGLE_NODE, Guard
from march_harness.aio import finish
from march_harness.memory_store import MemoryStore


class Taker(Protocol):
    def take(self, n: int) -> int | None: ...

    async def take_wait(self, n: int) -> int: ...

    async def drain(self) -> None: ...


async def take_checked(gen: Taker, n: int, got: Callable[[int, int], int]) -> int:
    """The way INCRBY takes: the fast path, else wait; ``got(last, n)`` checks what was handed out."""
    value = gen.take(n)
    if value is not None:
        return got(value, n)

    async def wait() -> int:
        return got(await gen.take_wait(n), n)

    result: int = await finish(wait())
    return result


class FakeLease:
    """A lease (a term) the test steers, like ``march.keyspace.serving.Term``: ``lost()`` records the reason
    and ends the term, ``end(reason)`` ends it (a step-down); an ended term is never valid again.
    ``is_valid`` is the lease deadline, the test's to move."""

    def __init__(self, guard: Guard = SINGLE_NODE) -> None:
        self.guard = guard
        self.is_valid = True
        self.ended = ""
        self.lost_reasons: list[str] = []

    def valid(self) -> bool:
        return self.is_valid and not self.ended

    def lost(self, reason: str) -> None:
        if not self.ended:  # an ended term's late refusal changes nothing
            self.lost_reasons.append(reason)
            self.ended = reason

    def end(self, reason: str) -> None:
        self.ended = reason


async def settle(store: MemoryStore, gens: Iterable[Taker]) -> None:
    """Leave no write task behind (the test's loop closes after its fixtures): release, then drain."""
    store.release()
    for gen in gens:
        await asyncio.wait_for(gen.drain(), 5.0)
