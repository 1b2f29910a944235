"""In-memory store for unit tests of the pure core. Never used by a running server.

It follows the store contract like every backend (``tests/store/test_store_contract.py``). Tests steer
it: ``delay`` makes every write land late, ``fail_next`` makes the next writes raise StoreError,
``hold()`` makes every call hang until ``release()`` (a frozen disk; ``hold(reads=False)``: only
writes), ``guard`` sets the one guard it accepts, ``serving`` names a primary serving from it (the
restore writes refuse it, ``PrimaryServing``). ``writes`` records every ceiling that landed, in
order; ``attempts`` counts writes, ``reads`` counts reads.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from march.errors import GuardFailed, PrimaryServing, StoreError
from march.store.contract import (
    SINGLE_NODE,
    Guard,
    Restored,
    SequenceRecord,
    Store,
    UserRecord,
    UserRecords,
    WorkerRecord,
    raise_sequence,
    raise_worker,
    restore_user,
)


class MemoryStore(Store):
    name = "memory"

    def __init__(self) -> None:
        self.records: dict[bytes, SequenceRecord] = {}
        self.users: dict[str, UserRecord] = {}
        self.users_revision = 0  # the revision of the last user write
        self.workers: dict[tuple[bytes, int], WorkerRecord] = {}
        self.retired_upto = 0  # the highest UPTO of a deleted worker record
        self._sorted: list[bytes] = []
        self._order: list[bytes] = []  # in creation order: a SCAN cursor is a position in it
        self.guard: Guard = SINGLE_NODE
        self.serving: str | None = None  # a primary serving from this store: restore writes refused
        self.delay = 0.0
        self.fail_next = 0
        self.writes: list[tuple[bytes, int]] = []
        self.attempts = 0
        self.reads = 0
        self._gate: asyncio.Event | None = None
        self._hold_reads = True

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def hold(self, reads: bool = True) -> None:
        """Make every call (``reads=False``: every write) hang until ``release()``."""
        if self._gate is None:
            self._gate = asyncio.Event()
        self._hold_reads = reads

    def release(self) -> None:
        if self._gate is not None:
            self._gate.set()
            self._gate = None

    async def _pass_gate(self, read: bool = True) -> None:
        gate = self._gate
        if gate is not None and (self._hold_reads or not read):
            await gate.wait()

    async def load(self, key: bytes) -> SequenceRecord | None:
        self.reads += 1
        await self._pass_gate()
        return self.records.get(key)

    async def list_keys(self, prefix: bytes = b"", after: bytes | None = None, limit: int = 1000) -> list[bytes]:
        await self._pass_gate()
        start = bisect.bisect_left(self._sorted, prefix)
        if after is not None:
            start = max(start, bisect.bisect_right(self._sorted, after))
        out: list[bytes] = []
        for key in self._sorted[start:]:
            if len(out) >= limit or not key.startswith(prefix):
                break
            out.append(key)
        return out

    async def scan(self, cursor: int, limit: int, guard: Guard) -> tuple[int, list[bytes]]:
        """Positions in creation order (names are never deleted: each comes exactly once)."""
        await self._pass_gate()
        page = self._order[cursor : cursor + limit]
        return (cursor + limit if len(page) == limit and cursor + limit < len(self._order) else 0), page

    async def count(self) -> int:
        await self._pass_gate()
        return len(self.records)

    async def load_users(self) -> UserRecords:
        await self._pass_gate()
        return UserRecords(sorted(self.users.values(), key=lambda r: r.name), self.users_revision)

    async def load_user(self, name: str) -> UserRecord | None:
        await self._pass_gate()
        return self.users.get(name)

    async def save_user(self, name: str, rules: str | None, expected: int) -> int | None:
        await self._pass_gate(read=False)
        current = self.users.get(name)
        if (current.revision if current is not None else 0) != expected:
            return None
        self.users_revision += 1
        if rules is None:
            self.users.pop(name, None)
        else:
            self.users[name] = UserRecord(name, rules, self.users_revision)
        return self.users_revision

    async def create(self, record: SequenceRecord, guard: Guard) -> bool:
        await self._before_write(guard)
        if record.key in self.records:
            return False
        self.records[record.key] = record
        bisect.insort(self._sorted, record.key)
        self._order.append(record.key)
        self.writes.append((record.key, record.ceiling))
        return True

    async def save_ceiling(self, key: bytes, ceiling: int, guard: Guard) -> int:
        await self._before_write(guard)
        current = self.records.get(key)
        if current is None:
            raise GuardFailed(f"sequence {key!r} is not in the store")
        if ceiling <= current.ceiling:
            return current.ceiling  # an earlier write under this guard landed first
        self.records[key] = dataclasses.replace(current, ceiling=ceiling)
        self.writes.append((key, ceiling))
        return ceiling

    async def save_settings(self, key: bytes, settings: Mapping[str, Any], guard: Guard) -> None:
        await self._before_write(guard)
        current = self.records.get(key)
        if current is None:
            raise GuardFailed(f"sequence {key!r} is not in the store")
        self.records[key] = dataclasses.replace(current, settings=dict(settings))

    async def load_workers(self, namespace: bytes, worker_id: int | None = None) -> list[WorkerRecord]:
        self.reads += 1
        await self._pass_gate()
        found = (r for (ns, i), r in self.workers.items() if ns == namespace and worker_id in (None, i))
        return sorted(found, key=lambda r: r.id)

    async def save_worker(self, record: WorkerRecord, expected: WorkerRecord | None, guard: Guard) -> bool:
        await self._before_write(guard)
        at = (record.namespace, record.id)
        if self.workers.get(at) != expected:
            return False
        self.workers[at] = record
        return True

    async def delete_worker(self, record: WorkerRecord, guard: Guard) -> bool:
        await self._before_write(guard)
        at = (record.namespace, record.id)
        if self.workers.get(at) != record:
            return False
        del self.workers[at]
        self.retired_upto = max(self.retired_upto, record.upto_ms)
        return True

    async def retired_worker_upto(self) -> int:
        self.reads += 1
        await self._pass_gate()
        return self.retired_upto

    async def worker_namespaces(self, after: bytes | None = None, limit: int = 100) -> list[bytes]:
        self.reads += 1
        await self._pass_gate()
        names = sorted({ns for ns, _ in self.workers if after is None or ns > after})
        return names[:limit]

    async def serving_primary(self) -> str | None:
        await self._pass_gate()
        return self.serving

    async def _restoring(self) -> None:
        await self._pass_gate(read=False)
        if self.serving is not None:
            raise PrimaryServing(self.serving)

    async def raise_to(self, records: list[SequenceRecord], dry_run: bool = False) -> list[Restored]:
        await self._restoring()
        out = []
        for record in records:
            outcome, new = raise_sequence(record, self.records.get(record.key))
            if new is not None and not dry_run:
                if record.key not in self.records:
                    bisect.insort(self._sorted, record.key)
                    self._order.append(record.key)
                self.records[record.key] = new
                self.writes.append((record.key, new.ceiling))
            out.append(outcome)
        return out

    async def restore_users(
        self, users: Mapping[str, str], readable: Callable[[str, str], bool], dry_run: bool = False
    ) -> list[Restored]:
        await self._restoring()
        out = []
        for name, rules in users.items():
            stored = self.users.get(name)
            outcome = restore_user(name, stored.rules if stored is not None else None, readable)
            if outcome is not Restored.UNCHANGED and not dry_run:
                self.users_revision += 1
                self.users[name] = UserRecord(name, rules, self.users_revision)
            out.append(outcome)
        return out

    async def raise_workers(self, records: list[WorkerRecord], dry_run: bool = False) -> list[Restored]:
        await self._restoring()
        out = []
        for record in records:
            outcome, new = raise_worker(record, self.workers.get((record.namespace, record.id)))
            if new is not None and not dry_run:
                self.workers[(record.namespace, record.id)] = new
            out.append(outcome)
        return out

    async def raise_retired_upto(self, upto_ms: int, dry_run: bool = False) -> Restored:
        await self._restoring()
        if self.retired_upto >= upto_ms:
            return Restored.UNCHANGED
        if not dry_run:
            self.retired_upto = upto_ms
        return Restored.RAISED

    async def _before_write(self, guard: Guard) -> None:
        self.attempts += 1
        await self._pass_gate(read=False)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail_next > 0:
            self.fail_next -= 1
            raise StoreError("injected failure")
        if guard != self.guard:
            raise GuardFailed("guard does not hold")
