"""A restore's writes on etcd (``raise_to``, ``restore_users``, ``raise_workers``, ``raise_retired_upto``
of ``march.store.contract``): each record only raised, and only while no primary serves.

A serving primary holds a range of IDs below its ceiling in memory and writes back the settings it
read: a ceiling raised under it would not reach that range (it would go on handing out IDs below
the restored floor until the range ran out), and settings written under it would be overwritten.
So every write here is one transaction that compares

- that no leader key of any group exists: one range compare over every key that starts with
  ``<prefix>/leader`` (``<prefix>/leader``, ``<prefix>/leader/<g>-of-<N>`` and the hand-off keys);
- per record, that it is still what was read: ``value == read``, or still absent
  (``create_revision == 0``); the new value is computed from the value read, by the contract's
  rule for that record.

A primary elected meanwhile fails the transaction, which reads the leader keys back:
``PrimaryServing``. Each batch (at most ``BATCH`` records, each key once) is read in one
transaction with the leader keys (so a dry run is refused under a primary too), decided, then
written in one; a batch whose records changed in between is read again, at most ``ATTEMPTS``
times. Creating names while no term is current leaves SCAN's resume points sound: a point is exact
only within the term that counted it (``march.store.cursors``). Nothing here writes without those
compares.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeVar

from march.errors import PrimaryServing, StoreError
from march.etcd.api import Compare, Etcd, Get, Put, Range, Request, created_at, none_in, value_is
from march.etcd.keypath import KeyPaths, prefix_end
from march.store.contract import (
    Restored,
    SequenceRecord,
    WorkerRecord,
    raise_sequence,
    raise_worker,
    restore_user,
)
from march.store.etcd_values import decode_record, decode_worker, encode_ceiling, encode_record, encode_worker

T = TypeVar("T")
Decide = Callable[[T, bytes | None], tuple[Restored, bytes | None]]  # (item, stored value) -> outcome, value to put

BATCH = 90  # records per transaction: 1 + n compares, under etcd's default of 128 operations
ATTEMPTS = 10  # a batch whose records changed between its read and its write is read again, this often


def _batches(pairs: Sequence[tuple[bytes, T]], size: int) -> Iterator[list[tuple[bytes, T]]]:
    """``pairs`` in order, cut into lists of at most ``size`` with each key at most once (etcd refuses
    a key twice in one transaction; the second one then meets what the first wrote)."""
    batch: list[tuple[bytes, T]] = []
    seen: set[bytes] = set()
    for key, item in pairs:
        if len(batch) == size or key in seen:
            yield batch
            batch, seen = [], set()
        batch.append((key, item))
        seen.add(key)
    if batch:
        yield batch


class EtcdRestore:
    """The restore writes of one etcd store (its client, key paths and deadline)."""

    def __init__(self, etcd: Etcd, keys: KeyPaths, timeout: float) -> None:
        self.etcd = etcd
        self.keys = keys
        self.timeout = timeout
        # Every leader key of every layout and every hand-off key starts with ``<prefix>/leader``.
        self._leaders = (self.keys.leader, prefix_end(self.keys.leader))

    def _read_leaders(self) -> Get:
        return Get(*self._leaders, limit=1)

    def _refuse(self, leaders: Range | None) -> None:
        if leaders is not None and leaders.kvs:
            raise PrimaryServing(leaders.kvs[0].value.decode(errors="replace"))

    async def serving_primary(self) -> str | None:
        found = await self.etcd.range(self._read_leaders(), self.timeout)
        return found.kvs[0].value.decode(errors="replace") if found.kvs else None

    async def raise_to(self, records: list[SequenceRecord], dry_run: bool) -> list[Restored]:
        def decide(record: SequenceRecord, value: bytes | None) -> tuple[Restored, bytes | None]:
            outcome, new = raise_sequence(record, None if value is None else decode_record(record.key, value))
            return outcome, None if new is None else encode_record(new)

        return await self._each([(self.keys.seq(r.key), r) for r in records], decide, dry_run)

    async def restore_users(
        self, users: Mapping[str, str], readable: Callable[[str, str], bool], dry_run: bool
    ) -> list[Restored]:
        def decide(user: tuple[str, str], value: bytes | None) -> tuple[Restored, bytes | None]:
            name, rules = user
            outcome = restore_user(name, None if value is None else value.decode("utf-8", "replace"), readable)
            return outcome, None if outcome is Restored.UNCHANGED else rules.encode()

        return await self._each([(self.keys.user(n), (n, r)) for n, r in users.items()], decide, dry_run)

    async def raise_workers(self, records: list[WorkerRecord], dry_run: bool) -> list[Restored]:
        def decide(record: WorkerRecord, value: bytes | None) -> tuple[Restored, bytes | None]:
            stored = None if value is None else decode_worker(record.namespace, record.id, value)
            outcome, new = raise_worker(record, stored)
            return outcome, None if new is None else encode_worker(new)

        return await self._each([(self.keys.worker(r.namespace, r.id), r) for r in records], decide, dry_run)

    async def raise_retired_upto(self, upto_ms: int, dry_run: bool) -> Restored:
        def decide(floor: int, value: bytes | None) -> tuple[Restored, bytes | None]:
            if value is not None and int(value) >= floor:
                return Restored.UNCHANGED, None
            return Restored.RAISED, encode_ceiling(floor)

        (outcome,) = await self._each([(self.keys.workers_retired, upto_ms)], decide, dry_run)
        return outcome

    async def _each(self, pairs: Sequence[tuple[bytes, T]], decide: Decide[T], dry_run: bool) -> list[Restored]:
        out: list[Restored] = []
        for batch in _batches(pairs, BATCH):
            out += await self._batch(batch, decide, dry_run)
        return out

    async def _batch(self, batch: list[tuple[bytes, T]], decide: Decide[T], dry_run: bool) -> list[Restored]:
        for _ in range(ATTEMPTS):
            reads = await self.etcd.txn([], [*(Get(key) for key, _ in batch), self._read_leaders()], [], self.timeout)
            self._refuse(reads.ranges[-1])
            outcomes: list[Restored] = []
            compares: list[Compare] = []
            ops: list[Request] = []
            for (key, item), found in zip(batch, reads.ranges, strict=False):
                kv = found.kvs[0] if found is not None and found.kvs else None
                outcome, value = decide(item, None if kv is None else kv.value)
                outcomes.append(outcome)
                if value is not None:
                    compares.append(created_at(key, 0) if kv is None else value_is(key, kv.value))
                    ops.append(Put(key, value))
            if dry_run or not ops or await self._write(compares, ops):
                return outcomes
        raise StoreError("records kept changing during the restore (is a node serving?)")

    async def _write(self, compares: list[Compare], ops: list[Request]) -> bool:
        """``ops`` if no leader key exists and ``compares`` hold; False when a record changed."""
        reply = await self.etcd.txn([none_in(*self._leaders), *compares], ops, [self._read_leaders()], self.timeout)
        if reply.succeeded:
            return True
        self._refuse(reply.ranges[0])
        return False
