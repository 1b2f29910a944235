"""The etcd store (cluster mode): one key per sequence under ``<prefix>/seq/<key>``, every write guarded.

The value of ``<prefix>/seq/<key>`` is the ceiling as 20 zero-padded decimal digits, a space, then
JSON ``{"kind": ..., "settings": {...}}``. Fixed-width digits make etcd's bytewise value comparison
numeric, so "new ceiling > stored ceiling" is one compare in the same transaction as the
leadership guard: ``value(seq) < digits(new)`` holds exactly when the stored ceiling is smaller
(equal digits followed by the JSON compare greater).

Every ceiling write is one transaction: ``value(leader) == guard.owner``, ``create_revision(leader)
== guard.revision`` and ``value(seq) < digits(new)``. When it fails, the same transaction has read
the leader key and the record back: a guard that no longer holds, or a record that is gone, is
``GuardFailed``; a stored ceiling already at or above the new one (an earlier write of this same
leadership that landed late) is returned as the ceiling now durable.

Calls made in the same loop turn share transactions (``Batcher``): up to ``MAX_OPS`` records and
about ``MAX_BYTES`` per transaction, under etcd's defaults (128 operations, 1.5 MiB), so a new
primary's first requests for thousands of sequences cost a few round trips, never one huge one.
Listings are read in pages (``list_keys``), and counted without reading values.

**SCAN cursors** are offsets in byte order: a cursor ``c`` handed out after a page ending at name
``L`` never exceeds the number of names at or before ``L`` (pages are counted as read; names are
never deleted, so that number only grows). Resuming right after the ``c``-th name of *now* is
therefore always safe, whoever handed the cursor out (this node, another one, a past term): it is
at or before ``L``, so nothing after ``L`` is missed; names between it and ``L`` come again. The
store remembers a bounded number of resume points (``_CURSORS``), each the name at an offset:
- *exact* while nothing can have moved it: it was counted with no creation in flight, under the
  guard of the term that is still the only one creating names, and none has started since. A
  cursor that hits an exact point resumes there at once (the common case: one page read);
- otherwise a point is checked with one count (the names at or before it: etcd counts its index,
  reading no values) before it is used: at most ``_VERIFY`` points, the nearest below the cursor.
An unknown cursor with no usable point walks from the start a page at a time (one walk at a time
per node, each page a loop turn), leaving a point every page: the walk happens once, later cursors
near it cost a count and a page or two. A cursor at or past the number of names ends the pass.
"""

from __future__ import annotations

import asyncio
import bisect
import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..etcd.api import Delete, Etcd, Get, Put, Range, Request, created_at, modified_at, value_below, value_is
from ..etcd.keys import KeyPaths, prefix_end
from .base import (
    Guard,
    GuardFailed,
    SequenceRecord,
    Store,
    StoreError,
    StoreFull,
    UserRecord,
    UserRecords,
    WorkerRecord,
)
from .batch import Batcher

_DIGITS = 20  # 2**63 has 19 digits: every ceiling fits, and the compare stays numeric
MAX_OPS = 100  # records per transaction: compares are 2 + n, under etcd's default --max-txn-ops 128
MAX_BYTES = 512 << 10  # bytes per transaction (estimated), well under etcd's default 1.5 MiB request limit
_WORKER_ATTEMPTS = 32  # a delete reads the retired floor again each time another delete raised it meanwhile
USERS_PAGE = 500  # users per range read: ~100 KB, far below gRPC's 4 MiB reply limit, whatever the user count
_PAGE = 1000  # names per read when a SCAN cursor walks to its position
_CURSORS = 4096  # SCAN resume points remembered (each a name): a bounded table; the rest are counted again
_VERIFY = 3  # remembered points checked (a count each) for an unknown cursor before it walks from the start

Stamp = tuple[Guard, int]  # (the term's guard, creations started so far): while it is current, no name moved


@dataclass(frozen=True)
class _Point:
    """A name at a SCAN offset: exact while ``stamp`` is current, else a point to check by counting."""

    name: bytes
    stamp: Stamp | None


def encode_ceiling(ceiling: int) -> bytes:
    return b"%020d" % ceiling


def encode_record(record: SequenceRecord) -> bytes:
    meta = json.dumps({"kind": record.kind, "settings": dict(record.settings)}, sort_keys=True)
    return encode_ceiling(record.ceiling) + b" " + meta.encode()


def decode_record(key: bytes, value: bytes) -> SequenceRecord:
    digits, _, meta = value.partition(b" ")
    data = json.loads(meta) if meta else {}
    return SequenceRecord(key, data.get("kind", "sequence"), int(digits), data.get("settings", {}))


def encode_worker(record: WorkerRecord) -> bytes:
    """A worker record's value: JSON with sorted keys, so equal records are equal bytes (the CAS compares values)."""
    data = {
        "token": record.token.decode("latin-1"),
        "expires_ms": record.expires_ms,
        "floor_ms": record.floor_ms,
        "ttl": record.ttl,
    }
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def decode_worker(namespace: bytes, worker_id: int, value: bytes) -> WorkerRecord:
    data = json.loads(value)
    token = str(data["token"]).encode("latin-1")
    return WorkerRecord(namespace, worker_id, token, int(data["expires_ms"]), int(data["floor_ms"]), int(data["ttl"]))


def _ceiling_of(value: bytes) -> int:
    return int(value[:_DIGITS])


def _holds(leader: Range | None, guard: Guard) -> bool:
    kvs = leader.kvs if leader is not None else []
    return bool(kvs) and kvs[0].value == guard.owner and kvs[0].create_revision == guard.revision


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
        self._points: OrderedDict[int, _Point] = OrderedDict()  # SCAN offset -> the name there (LRU)
        self._offsets: list[int] = []  # the keys of _points, sorted (the nearest point below a cursor)
        self._creations = 0  # creates started by this store: a point counted before one may have moved
        self._creating = 0  # creates not answered yet
        self._walking = asyncio.Lock()  # one unknown SCAN cursor found at a time (counts and walks)
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
        return 3 * (len(self.keys.seqs) + len(key) + 64) + len(value) + _DIGITS

    async def open(self) -> None:
        pass  # the client connects on first use; the node owns its life

    async def close(self) -> None:
        for batcher in (self._loads, self._creates, self._saves):
            await batcher.drain()

    # --- reads ---------------------------------------------------------------------------------

    def _remember(self, key: bytes, value: bytes) -> SequenceRecord:
        record = decode_record(key, value)
        self._meta[key] = value.partition(b" ")[2]
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

    def _user_record(self, key: bytes, rules: bytes | None, revision: int) -> UserRecord:
        name = key[len(self.keys.users) :].decode("utf-8", "surrogateescape")
        return UserRecord(name, None if rules is None else rules.decode(), revision)

    async def load_users(self) -> UserRecords:
        """Every user, a page at a time. The pages are read at successive revisions; the first one's
        is where the watch starts (every later change comes through it, some twice: harmless, each
        record carries its revision)."""
        end = prefix_end(self.keys.users)
        start = self.keys.users
        records: list[UserRecord] = []
        first = 0
        while True:
            page = await self.etcd.range(Get(start, end, limit=USERS_PAGE), self.timeout)
            first = first or page.revision
            records += [self._user_record(kv.key, kv.value, kv.mod_revision) for kv in page.kvs]
            if not page.more or not page.kvs:
                break
            start = page.kvs[-1].key + b"\0"
        return UserRecords(records, first)

    async def load_user(self, name: str) -> UserRecord | None:
        kv = await self.etcd.get(self.keys.user(name), self.timeout)
        return None if kv is None else self._user_record(kv.key, kv.value, kv.mod_revision)

    async def save_user(self, name: str, rules: str | None, expected: int) -> int | None:
        key = self.keys.user(name)
        write = Delete(key) if rules is None else Put(key, rules.encode())
        reply = await self.etcd.txn([modified_at(key, expected)], [write], [], self.write_timeout)
        return reply.revision if reply.succeeded else None

    async def watch_users(self, after: int) -> AsyncIterator[list[UserRecord]]:
        """The changes to ``<prefix>/users/`` after revision ``after`` (what ``load_users`` named:
        none is missed in between), each with its revision, until the watch breaks (StoreError)."""
        start = after + 1 if after else 0
        async for events in self.etcd.watch_events(self.keys.users, prefix_end(self.keys.users), start):
            yield [self._user_record(e.key, e.value, e.revision) for e in events]

    async def count(self) -> int:
        found = await self.etcd.range(Get(self.keys.seqs, prefix_end(self.keys.seqs), count_only=True), self.timeout)
        return found.count

    async def _count_through(self, name: bytes) -> int:
        """How many names sort at or before ``name`` (one server-side count)."""
        found = await self.etcd.range(Get(self.keys.seqs, self.keys.seq(name) + b"\0", count_only=True), self.timeout)
        return found.count

    # --- SCAN (see the module docstring) -------------------------------------------------------

    def _stamp(self, guard: Guard) -> Stamp | None:
        return None if self._creating else (guard, self._creations)

    def _mark(self, offset: int, name: bytes, stamp: Stamp | None) -> None:
        old = self._points.get(offset)
        if old is None:
            bisect.insort(self._offsets, offset)
        elif old.stamp is not None and stamp is None and old.name != name:
            return  # an exact point is worth more than a lower bound; it is checked before use anyway
        self._points[offset] = _Point(name, stamp)
        self._points.move_to_end(offset)
        while len(self._points) > _CURSORS:
            gone, _ = self._points.popitem(last=False)
            del self._offsets[bisect.bisect_left(self._offsets, gone)]

    async def scan(self, cursor: int, limit: int, guard: Guard) -> tuple[int, list[bytes]]:
        after: bytes | None = None
        at, stamp = 0, self._stamp(guard)
        if cursor:
            point = self._points.get(cursor)
            if point is not None and point.stamp is not None and point.stamp == stamp:
                after, at = point.name, cursor
                self._points.move_to_end(cursor)
            else:
                async with self._walking:
                    found = await self._resume(cursor, guard)
                    if found is None:
                        return 0, []
                    after, at, stamp = found
                    while at < cursor:  # walk from the point to the cursor's offset
                        page = await self.list_keys(b"", after, min(_PAGE, cursor - at))
                        if not page:
                            return 0, []
                        at, after = at + len(page), page[-1]
                        stamp = stamp if stamp == self._stamp(guard) else None
                        self._mark(at, after, stamp)
        page = await self.list_keys(b"", after, limit)
        if len(page) < limit:
            return 0, page
        at += len(page)
        self._mark(at, page[-1], stamp if stamp == self._stamp(guard) else None)
        return at, page

    async def _resume(self, cursor: int, guard: Guard) -> tuple[bytes | None, int, Stamp | None] | None:
        """A name at most ``cursor`` names in (None: the start), its offset and stamp; None: past the end."""
        stamp = self._stamp(guard)
        if cursor >= await self.count():
            return None
        below = bisect.bisect_right(self._offsets, cursor)
        for offset in reversed(self._offsets[max(0, below - _VERIFY) : below]):
            point = self._points.get(offset)
            if point is None:
                continue
            if point.stamp is not None and point.stamp == stamp:
                return point.name, offset, stamp
            now = await self._count_through(point.name)
            if now <= cursor:
                stamp = stamp if stamp == self._stamp(guard) else None
                self._mark(now, point.name, stamp)
                return point.name, now, stamp
        return None, 0, stamp

    # --- writes --------------------------------------------------------------------------------

    def _guard(self, guard: Guard) -> list[Any]:
        return [value_is(self.keys.leader, guard.owner), created_at(self.keys.leader, guard.revision)]

    async def create(self, record: SequenceRecord, guard: Guard) -> bool:
        self._creations += 1  # SCAN points counted before now may move
        self._creating += 1
        try:
            return await self._creates((record, guard))
        finally:
            self._creating -= 1

    async def _create_batch(self, items: list[tuple[SequenceRecord, Guard]]) -> list[bool | BaseException]:
        results: list[bool | BaseException | None] = [None] * len(items)

        def send(todo: list[int], guard: Guard) -> Awaitable[None]:
            return self._create_some([items[i][0] for i in todo], todo, guard, results)

        await self._per_guard([(r.key, g) for r, g in items], results, send)
        return [r if r is not None else StoreError("not sent") for r in results]

    async def _create_some(
        self, records: list[SequenceRecord], todo: list[int], guard: Guard, results: list[Any]
    ) -> None:
        seqs = [self.keys.seq(record.key) for record in records]
        values = [encode_record(record) for record in records]
        reply = await self.etcd.txn(
            [*self._guard(guard), *(created_at(s, 0) for s in seqs)],
            [Put(s, v) for s, v in zip(seqs, values, strict=True)],
            [Get(self.keys.leader), *(Get(s) for s in seqs)],
            self.write_timeout,
        )
        if reply.succeeded:
            for i, record, value in zip(todo, records, values, strict=True):
                self._meta[record.key] = value.partition(b" ")[2]
                results[i] = True
            return
        if not _holds(reply.ranges[0], guard):
            for i, record in zip(todo, records, strict=True):
                results[i] = GuardFailed(f"creating {record.key!r}: this node no longer holds the leader key")
            return
        retry: list[tuple[int, SequenceRecord]] = []
        for i, record, found in zip(todo, records, reply.ranges[1:], strict=True):
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
        await self._per_guard(todo, results, lambda idx, guard: self._save_some(items, idx, guard, results))
        return [r if r is not None else StoreError("not sent") for r in results]

    async def _save_some(
        self, items: list[tuple[bytes, int, Guard]], todo: list[int], guard: Guard, results: list[Any]
    ) -> None:
        keys = [items[i][0] for i in todo]
        ceilings = [items[i][1] for i in todo]
        seqs = [self.keys.seq(key) for key in keys]
        digits = [encode_ceiling(c) for c in ceilings]
        reply = await self.etcd.txn(
            [*self._guard(guard), *(value_below(s, d) for s, d in zip(seqs, digits, strict=True))],
            [Put(s, d + b" " + self._meta[k]) for s, d, k in zip(seqs, digits, keys, strict=True)],
            [Get(self.keys.leader), *(Get(s) for s in seqs)],
            self.write_timeout,
        )
        if reply.succeeded:
            for i, ceiling in zip(todo, ceilings, strict=True):
                results[i] = ceiling
            return
        if not _holds(reply.ranges[0], guard):
            for i, key, ceiling in zip(todo, keys, ceilings, strict=True):
                results[i] = GuardFailed(f"ceiling {ceiling} for {key!r}: this node no longer holds the leader key")
            return
        retry = []
        for i, key, ceiling, found in zip(todo, keys, ceilings, reply.ranges[1:], strict=True):
            kvs = found.kvs if found is not None else []
            if not kvs:
                results[i] = GuardFailed(f"sequence {key!r} is gone from the store")
            elif _ceiling_of(kvs[0].value) >= ceiling:
                results[i] = _ceiling_of(kvs[0].value)  # an earlier write of this leadership landed late
            else:
                retry.append(i)
        if retry:
            await self._save_some(items, retry, guard, results)

    async def _per_guard(
        self,
        todo: Sequence[tuple[bytes, Guard] | None],
        results: list[Any],
        send: Callable[[list[int], Guard], Awaitable[None]],
    ) -> None:
        """``send(indices, guard)`` per guard, each key once per transaction; a failure goes to each of its items."""
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
                    self.note(None)
                except StoreError as exc:
                    self.note(exc)
                    for i in batch:
                        if results[i] is None:
                            results[i] = exc

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
            reply = await self.etcd.txn(
                [*self._guard(guard), value_is(seq, found.value)],
                [Put(seq, encode_ceiling(current.ceiling) + b" " + meta)],
                [Get(self.keys.leader)],
                self.write_timeout,
            )
            if reply.succeeded:
                self.note(None)
                return
            if not _holds(reply.ranges[0], guard):
                raise GuardFailed(f"settings of {key!r}: this node no longer holds the leader key")
        raise StoreError(f"settings of {key!r}: the record kept changing")

    async def load_workers(self, namespace: bytes, worker_id: int | None = None) -> list[WorkerRecord]:
        start = self.keys.worker_namespace(namespace)
        if worker_id is not None:
            one = await self.etcd.get(self.keys.worker(namespace, worker_id), self.timeout)
            return [] if one is None else [decode_worker(namespace, worker_id, one.value)]
        found = await self.etcd.range(Get(start, prefix_end(start)), self.timeout)
        out = []
        for kv in found.kvs:
            suffix = kv.key[len(start) :]
            if len(suffix) == 4 and suffix.isdigit():
                out.append(decode_worker(namespace, int(suffix), kv.value))
        return sorted(out, key=lambda r: r.id)

    async def save_worker(self, record: WorkerRecord, expected: WorkerRecord | None, guard: Guard) -> bool:
        key = self.keys.worker(record.namespace, record.id)
        same = created_at(key, 0) if expected is None else value_is(key, encode_worker(expected))
        try:
            reply = await self.etcd.txn(
                [*self._guard(guard), same],
                [Put(key, encode_worker(record))],
                [Get(self.keys.leader)],
                self.write_timeout,
            )
        except StoreError as exc:
            self.note(exc)
            raise
        self.note(None)
        if reply.succeeded:
            return True
        if not _holds(reply.ranges[0], guard):
            raise GuardFailed(f"worker {record.id} of {record.namespace!r}: this node no longer holds the leader key")
        return False

    async def delete_worker(self, record: WorkerRecord, guard: Guard) -> bool:
        """One transaction: the guard, the record exactly as given, and (when the record's floor is above
        the retired floor just read) the retired floor unchanged; then delete the record and raise the
        retired floor. A retired floor that moved in between is read again."""
        key, retired = self.keys.worker(record.namespace, record.id), self.keys.workers_retired
        value = encode_worker(record)
        for _ in range(_WORKER_ATTEMPTS):
            current = await self.etcd.get(retired, self.timeout)
            compare = [*self._guard(guard), value_is(key, value)]
            ops: list[Request] = [Delete(key)]
            if record.floor_ms > (int(current.value) if current is not None else 0):
                compare.append(value_is(retired, current.value) if current is not None else created_at(retired, 0))
                ops.append(Put(retired, encode_ceiling(record.floor_ms)))
            try:
                reply = await self.etcd.txn(compare, ops, [Get(self.keys.leader), Get(key)], self.write_timeout)
            except StoreError as exc:
                self.note(exc)
                raise
            self.note(None)
            if reply.succeeded:
                return True
            if not _holds(reply.ranges[0], guard):
                raise GuardFailed(f"worker {record.id} of {record.namespace!r}: this node no longer leads")
            found = reply.ranges[1]
            if found is None or not found.kvs or found.kvs[0].value != value:
                return False
        raise StoreError(f"worker {record.id} of {record.namespace!r}: the retired floor kept changing")

    async def retired_worker_floor(self) -> int:
        found = await self.etcd.get(self.keys.workers_retired, self.timeout)
        return 0 if found is None else int(found.value)

    async def worker_namespaces(self, after: bytes | None = None, limit: int = 100) -> list[bytes]:
        """One keys-only read of up to ``limit`` keys; past each namespace's first key the rest of it
        is skipped by the next page (which starts after the last namespace seen)."""
        workers = self.keys.workers
        start = workers if after is None else prefix_end(self.keys.worker_namespace(after))
        found = await self.etcd.range(Get(start, prefix_end(workers), limit=limit, keys_only=True), self.timeout)
        out: list[bytes] = []
        for kv in found.kvs:
            namespace = self.keys.worker_namespace_of(kv.key)
            if not out or out[-1] != namespace:
                out.append(namespace)
        return out

    def facts(self) -> dict[str, Any]:
        return {"etcd_endpoint": self.etcd.endpoint, "etcd_prefix": self.keys.prefix.decode()}
