"""The etcd store (cluster mode): one key per sequence under ``<prefix>/seq/<key>``, every write guarded.

The value of ``<prefix>/seq/<key>`` is the ceiling's fixed-width digits, a space, then JSON kind and
settings (``etcd_values``): "new ceiling > stored ceiling" is one bytewise compare.

Every ceiling write is one guarded transaction (``etcd_guard.GuardedTxn``): the leadership guard
and ``value(seq) < digits(new)``. When it fails, the same transaction has read the leader key and
the record back: a guard that no longer holds, or a record that is gone, is ``GuardFailed``; a
stored ceiling already at or above the new one (an earlier write of this same leadership that
landed late) is returned as the ceiling now durable.

Calls made in the same loop turn share transactions (``Batcher``): up to ``MAX_OPS`` records and
about ``MAX_BYTES`` per transaction, under etcd's defaults (128 operations, 1.5 MiB), so a new
primary's first requests for thousands of sequences cost a few round trips, never one huge one.
Listings are read in pages (``list_keys``, ``export_sequences``), and counted without reading values.

SCAN cursors are offsets in byte order, resumed from remembered points (``cursors.ScanCursors``).
The store's other records have modules of their own: ACL users (``etcd_users``) and worker ids
(``etcd_workers``); a restore's writes, made only while no primary serves, are ``etcd_restore``'s.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from march.errors import GuardFailed, StoreError, StoreFull
from march.etcd.api import Etcd, Get, Put, created_at, value_below, value_is
from march.etcd.keypath import KeyPaths, prefix_end
from march.store.batch import Batcher
from march.store.contract import Guard, Restored, SequenceRecord, Store, UserRecord, UserRecords, WorkerRecord
from march.store.cursors import ScanCursors
from march.store.etcd_guard import GuardedTxn
from march.store.etcd_restore import EtcdRestore
from march.store.etcd_users import EtcdUsers
from march.store.etcd_values import DIGITS, ceiling_of, decode_record, encode_ceiling, encode_record
from march.store.etcd_workers import EtcdWorkers

MAX_OPS = 100  # records per transaction: compares are 2 + n, under etcd's default --max-txn-ops 128
MAX_BYTES = 512 << 10  # bytes per transaction (estimated), well under etcd's default 1.5 MiB request limit


async def _per_guard(
    todo: Sequence[tuple[bytes, Guard] | None],
    results: list[Any],
    send: Callable[[list[int], Guard], Awaitable[None]],
) -> None:
    """``send(indices, guard)`` per guard, each key once per transaction; a failure (GuardFailed
    included) goes to each of its items still unanswered."""
    groups: dict[Guard, list[int]] = {}
    for i, entry in enumerate(todo):
        if entry is not None:
            groups.setdefault(entry[1], []).append(i)
    for guard, indices in groups.items():
        while indices:
            seen: set[bytes] = set()
            batch: list[int] = []
            later: list[int] = []
            for i in indices:
                key = todo[i][0]  # type: ignore[index]
                (later if key in seen else batch).append(i)
                seen.add(key)
            indices = later
            try:
                await send(batch, guard)
            except StoreError as exc:
                for i in batch:
                    if results[i] is None:
                        results[i] = exc


class EtcdStore(Store):
    """Sequences in etcd; the leadership guard comes from ``march.cluster``."""

    name = "etcd"

    def __init__(self, etcd: Etcd, keys: KeyPaths, timeout: float = 5.0, write_timeout: float = 5.0) -> None:
        self.etcd = etcd
        self.keys = keys
        self.timeout = timeout
        # A write caught by an etcd leader change can hang until its deadline although etcd elects
        # a new leader in about a second: writes get a short deadline, and the generator retries
        # with a greater ceiling (an abandoned write that lands later is harmless).
        self.write_timeout = min(timeout, write_timeout)
        self._meta: dict[bytes, bytes] = {}  # key -> the JSON part of its value, written back unchanged
        self.cursors = ScanCursors(self)
        self.guarded = GuardedTxn(etcd, keys, self.write_timeout, self.note)
        self.users = EtcdUsers(etcd, keys, timeout, self.write_timeout)
        self.workers = EtcdWorkers(etcd, keys, timeout, self.guarded)
        self.restore = EtcdRestore(etcd, keys, timeout)
        size = self._size
        self._loads: Batcher[bytes, SequenceRecord | None] = Batcher(
            self._load_batch, MAX_OPS, MAX_BYTES, lambda k: size(k, b"")
        )
        self._creates: Batcher[tuple[SequenceRecord, Guard], bool] = Batcher(
            self._create_batch, MAX_OPS, MAX_BYTES, lambda item: size(item[0].key, encode_record(item[0]))
        )
        self._saves: Batcher[tuple[bytes, int, Guard], int] = Batcher(
            self._save_batch, MAX_OPS, MAX_BYTES, lambda item: size(item[0], self._meta.get(item[0], b""))
        )

    def _size(self, key: bytes, value: bytes) -> int:
        # a record's key appears in a compare, an op and a read-back; 64 bytes of framing each
        return 3 * (len(self.keys.seqs) + len(key) + 64) + len(value) + DIGITS

    async def open(self) -> None:
        pass  # the client connects on first use; the node owns its life

    async def close(self) -> None:
        for batcher in (self._loads, self._creates, self._saves):
            await batcher.drain()

    # --- reads ---------------------------------------------------------------------------------

    def _remember(self, key: bytes, value: bytes) -> SequenceRecord:
        record = decode_record(key, value)
        self._meta[key] = _shared(value.partition(b" ")[2])
        return record

    async def load(self, key: bytes) -> SequenceRecord | None:
        return await self._loads(key)

    async def _load_batch(self, keys: list[bytes]) -> Sequence[SequenceRecord | None]:
        try:
            reply = await self.etcd.txn([], [Get(self.keys.seq(k)) for k in keys], [], self.timeout)
        except StoreFull:  # over its quota etcd refuses every transaction, reads too; plain reads still work
            each = await asyncio.gather(*(self.etcd.get(self.keys.seq(k), self.timeout) for k in keys))
            return [None if kv is None else self._remember(k, kv.value) for k, kv in zip(keys, each, strict=True)]
        out: list[SequenceRecord | None] = []
        for key, found in zip(keys, reply.ranges, strict=True):
            kvs = found.kvs if found is not None else []
            out.append(self._remember(key, kvs[0].value) if kvs else None)
        return out

    async def list_keys(self, prefix: bytes = b"", after: bytes | None = None, limit: int = 1000) -> list[bytes]:
        start = self.keys.seq(prefix) if after is None or after < prefix else self.keys.seq(after) + b"\0"
        end = prefix_end(self.keys.seq(prefix))
        found = await self.etcd.range(Get(start, end, limit=limit, keys_only=True), self.timeout)
        return [self.keys.seq_name(kv.key) for kv in found.kvs]

    async def export_sequences(self, after: bytes | None, limit: int) -> list[SequenceRecord]:
        """One range read of names and values (a page of a backup: no batching, nothing remembered)."""
        start = self.keys.seqs if after is None else self.keys.seq(after) + b"\0"
        found = await self.etcd.range(Get(start, prefix_end(self.keys.seqs), limit=limit), self.timeout)
        return [decode_record(self.keys.seq_name(kv.key), kv.value) for kv in found.kvs]

    async def load_users(self) -> UserRecords:
        return await self.users.load_users()

    async def load_user(self, name: str) -> UserRecord | None:
        return await self.users.load_user(name)

    async def save_user(self, name: str, rules: str | None, expected: int) -> int | None:
        return await self.users.save_user(name, rules, expected)

    def watch_users(self, after: int) -> AsyncIterator[list[UserRecord]]:
        return self.users.watch_users(after)

    async def count(self) -> int:
        found = await self.etcd.range(Get(self.keys.seqs, prefix_end(self.keys.seqs), count_only=True), self.timeout)
        return found.count

    async def count_through(self, name: bytes) -> int:
        """How many names sort at or before ``name`` (one server-side count)."""
        found = await self.etcd.range(Get(self.keys.seqs, self.keys.seq(name) + b"\0", count_only=True), self.timeout)
        return found.count

    async def scan(self, cursor: int, limit: int, guard: Guard) -> tuple[int, list[bytes]]:
        return await self.cursors.scan(cursor, limit, guard)

    # --- writes --------------------------------------------------------------------------------

    async def create(self, record: SequenceRecord, guard: Guard) -> bool:
        with self.cursors.creating():  # SCAN points counted before now may move
            return await self._creates((record, guard))

    async def _create_batch(self, items: list[tuple[SequenceRecord, Guard]]) -> list[bool | BaseException]:
        results: list[bool | BaseException | None] = [None] * len(items)

        def send(todo: list[int], guard: Guard) -> Awaitable[None]:
            return self._create_some([items[i][0] for i in todo], todo, guard, results)

        await _per_guard([(r.key, g) for r, g in items], results, send)
        return [r if r is not None else StoreError("not sent") for r in results]

    async def _create_some(
        self, records: list[SequenceRecord], todo: list[int], guard: Guard, results: list[Any]
    ) -> None:
        seqs = [self.keys.seq(record.key) for record in records]
        values = [encode_record(record) for record in records]
        done = await self.guarded(
            guard,
            [created_at(s, 0) for s in seqs],
            [Put(s, v) for s, v in zip(seqs, values, strict=True)],
            [Get(s) for s in seqs],
            "creating a sequence",
        )
        if done.written:
            for i, record, value in zip(todo, records, values, strict=True):
                self._meta[record.key] = _shared(value.partition(b" ")[2])
                results[i] = True
            return
        retry: list[tuple[int, SequenceRecord]] = []
        for i, record, found in zip(todo, records, done.reads, strict=True):
            if found is not None and found.kvs:
                results[i] = False  # it exists: nothing written
            else:
                retry.append((i, record))
        if retry:
            await self._create_some([r for _, r in retry], [i for i, _ in retry], guard, results)

    async def save_ceiling(self, key: bytes, ceiling: int, guard: Guard) -> int:
        return await self._saves((key, ceiling, guard))

    async def _save_batch(self, items: list[tuple[bytes, int, Guard]]) -> list[int | BaseException]:
        results: list[int | BaseException | None] = [None] * len(items)
        unknown = sorted({key for key, _, _ in items if key not in self._meta})
        if unknown:  # records this store object has not read yet: their settings are written back as they are
            await self._load_batch(unknown)
            for i, (key, _, _) in enumerate(items):
                if key not in self._meta:
                    results[i] = GuardFailed(f"sequence {key!r} is not in the store")
        todo = [(key, guard) if results[i] is None else None for i, (key, _, guard) in enumerate(items)]
        await _per_guard(todo, results, lambda idx, guard: self._save_some(items, idx, guard, results))
        return [r if r is not None else StoreError("not sent") for r in results]

    async def _save_some(
        self, items: list[tuple[bytes, int, Guard]], todo: list[int], guard: Guard, results: list[Any]
    ) -> None:
        keys = [items[i][0] for i in todo]
        ceilings = [items[i][1] for i in todo]
        seqs = [self.keys.seq(key) for key in keys]
        digits = [encode_ceiling(c) for c in ceilings]
        done = await self.guarded(
            guard,
            [value_below(s, d) for s, d in zip(seqs, digits, strict=True)],
            [Put(s, d + b" " + self._meta[k]) for s, d, k in zip(seqs, digits, keys, strict=True)],
            [Get(s) for s in seqs],
            "a ceiling write",
        )
        if done.written:
            for i, ceiling in zip(todo, ceilings, strict=True):
                results[i] = ceiling
            return
        retry = []
        for i, key, ceiling, found in zip(todo, keys, ceilings, done.reads, strict=True):
            kvs = found.kvs if found is not None else []
            if not kvs:
                results[i] = GuardFailed(f"sequence {key!r} is gone from the store")
            elif ceiling_of(kvs[0].value) >= ceiling:
                results[i] = ceiling_of(kvs[0].value)  # an earlier write of this leadership landed late
            else:
                retry.append(i)
        if retry:
            await self._save_some(items, retry, guard, results)

    async def save_settings(self, key: bytes, settings: Mapping[str, Any], guard: Guard) -> None:
        """Rewrite the record's JSON under the guard, compared with the value just read (a ceiling
        write landing in between changes it: read again). The JSON that later ceiling writes put
        back is the new one from here on."""
        seq = self.keys.seq(key)
        known = self._meta.get(key)
        if known is not None:  # before the first await: a ceiling write started from now on carries the new settings
            kind = json.loads(known).get("kind", "sequence")
            self._meta[key] = json.dumps({"kind": kind, "settings": dict(settings)}, sort_keys=True).encode()
        for _ in range(10):
            found = await self.etcd.get(seq, self.timeout)
            if found is None:
                raise GuardFailed(f"sequence {key!r} is not in the store")
            current = decode_record(key, found.value)
            meta = json.dumps({"kind": current.kind, "settings": dict(settings)}, sort_keys=True).encode()
            self._meta[key] = meta
            put = Put(seq, encode_ceiling(current.ceiling) + b" " + meta)
            if (await self.guarded(guard, [value_is(seq, found.value)], [put], [], f"settings of {key!r}")).written:
                return
        raise StoreError(f"settings of {key!r}: the record kept changing")

    async def load_workers(self, namespace: bytes, worker_id: int | None = None) -> list[WorkerRecord]:
        return await self.workers.load_workers(namespace, worker_id)

    async def save_worker(self, record: WorkerRecord, expected: WorkerRecord | None, guard: Guard) -> bool:
        return await self.workers.save_worker(record, expected, guard)

    async def delete_worker(self, record: WorkerRecord, guard: Guard) -> bool:
        return await self.workers.delete_worker(record, guard)

    async def retired_worker_upto(self) -> int:
        return await self.workers.retired_worker_upto()

    async def worker_namespaces(self, after: bytes | None = None, limit: int = 100) -> list[bytes]:
        return await self.workers.worker_namespaces(after, limit)

    async def serving_primary(self) -> str | None:
        return await self.restore.serving_primary()

    async def raise_to(self, records: list[SequenceRecord], dry_run: bool = False) -> list[Restored]:
        with self.cursors.creating():  # SCAN points counted before now may move
            return await self.restore.raise_to(records, dry_run)

    async def restore_users(
        self, users: Mapping[str, str], readable: Callable[[str, str], bool], dry_run: bool = False
    ) -> list[Restored]:
        return await self.restore.restore_users(users, readable, dry_run)

    async def raise_workers(self, records: list[WorkerRecord], dry_run: bool = False) -> list[Restored]:
        return await self.restore.raise_workers(records, dry_run)

    async def raise_retired_upto(self, upto_ms: int, dry_run: bool = False) -> Restored:
        return await self.restore.raise_retired_upto(upto_ms, dry_run)

    def facts(self) -> dict[str, Any]:
        return {"etcd_endpoint": self.etcd.endpoint, "etcd_prefix": self.keys.prefix.decode()}


# The JSON part of every plain sequence's value (no settings of its own): one object for all of them
# in ``_meta``, not a copy per sequence (~70 bytes each, a million sequences held by a node).
_PLAIN = encode_record(SequenceRecord(b"", "sequence", 0)).partition(b" ")[2]


def _shared(meta: bytes) -> bytes:
    return _PLAIN if meta == _PLAIN else meta
