"""In-memory store for unit tests of the pure core. Never used by a running server.

Tests steer it: ``delay`` makes every write land late, ``fail_next`` makes the next writes raise
StoreError, ``hold()`` makes writes hang until ``release()``, ``guard`` sets the one guard it
accepts. ``writes`` records every ceiling that landed, in order.
"""

from __future__ import annotations

import asyncio
import dataclasses

from .base import SINGLE_NODE, Guard, GuardFailed, SequenceRecord, Store, StoreError


class MemoryStore(Store):
    name = "memory"

    def __init__(self) -> None:
        self.records: dict[bytes, SequenceRecord] = {}
        self.guard: Guard = SINGLE_NODE
        self.delay = 0.0
        self.fail_next = 0
        self.writes: list[tuple[bytes, int]] = []
        self.attempts = 0
        self._gate: asyncio.Event | None = None

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def hold(self) -> None:
        """Make every write hang until ``release()``."""
        if self._gate is None:
            self._gate = asyncio.Event()

    def release(self) -> None:
        if self._gate is not None:
            self._gate.set()
            self._gate = None

    async def load(self, key: bytes) -> SequenceRecord | None:
        return self.records.get(key)

    async def load_all(self) -> list[SequenceRecord]:
        return list(self.records.values())

    async def create(self, record: SequenceRecord, guard: Guard) -> bool:
        await self._before_write(guard)
        if record.key in self.records:
            return False
        self.records[record.key] = record
        self.writes.append((record.key, record.ceiling))
        return True

    async def save_ceiling(self, key: bytes, ceiling: int, guard: Guard) -> None:
        await self._before_write(guard)
        current = self.records.get(key)
        if current is None or ceiling <= current.ceiling:
            raise GuardFailed(f"stored ceiling {current and current.ceiling} is not below {ceiling}")
        self.records[key] = dataclasses.replace(current, ceiling=ceiling)
        self.writes.append((key, ceiling))

    async def _before_write(self, guard: Guard) -> None:
        self.attempts += 1
        gate = self._gate
        if gate is not None:
            await gate.wait()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail_next > 0:
            self.fail_next -= 1
            raise StoreError("injected failure")
        if guard != self.guard:
            raise GuardFailed("guard does not hold")
