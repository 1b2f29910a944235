"""``FakeEtcd``: an in-process etcd behind the ``Etcd`` interface, on an injected clock. Tests only.

Like ``march_harness.memory_store``, it is never used by a running server. One ``FakeEtcd`` is the
"cluster"; ``client(name)`` gives each simulated node its own view (``FakeEtcdClient``), with its
own link to steer. The contract tests (``tests/etcd/test_etcd_contract.py``) run against this fake and
a real etcd alike, so that what tests learn on the fake holds on etcd.

What it models, as etcd does:

- An MVCC store: one global revision (1 when empty), per key its value, create and mod revision,
  version and lease. Every write request (put, delete, transaction, lease revoke or expiry) that
  changes something bumps the revision once; one that changes nothing (a delete of a missing
  key, a read-only transaction) does not.
- Transactions: compares on VERSION/CREATE/MOD/VALUE/LEASE with ==, <, >, != (a missing key has
  version, revisions and lease 0 and never matches a VALUE compare), then the success or failure
  ops atomically; a ``Get`` in a transaction sees the writes before it. Ranges (``end``, with
  ``b"\\0"`` meaning "every key from ``key`` on"), ``limit``/``more``, ``keys_only``, ``count_only``.
- etcd's refusals, as ``StoreRejected``: an empty key, more than ``max_txn_ops`` compares or ops
  in a branch, two writes to one key in a branch ("duplicate key"), a request over
  ``max_request_bytes`` (estimated: the keys' and values' lengths), a put under an unknown lease,
  a revoke of an unknown lease.
- Leases whose TTL runs on the clock (``call_later``: with a ``ManualClock`` a lease expires inside
  ``advance``); expiry and revoke delete the lease's keys at one revision. ``keep_alive`` answers
  the TTL, or 0 for a lease that is gone.
- Watches: the revision of each change that touches the range, from ``start_revision`` on (the
  whole history is kept: no compaction).

What it does not model: etcd's minimum TTL, compaction, auth, nested transactions, several members
or leader changes (a leader change is, to a client, a call that fails or times out: the switches).

Switches, to break things on purpose. On a client (one node's link) or on the server (every
client): ``unreachable`` (every call fails at once with StoreError, open watches break),
``hang`` (calls are not applied and fail with "deadline exceeded" once their timeout passes on
the clock; watches receive nothing until it is lifted), ``delay`` (clock seconds a call takes
before it is applied and answered; past its timeout the caller gets StoreError while the request
is still applied when the delay ends, as etcd may), ``lose_replies`` (the next N calls are
applied but answered with StoreError). On the server, ``full`` (the NOSPACE alarm, as etcd 3.5
applies it once the database is over its quota: puts, every transaction (even a read-only one:
etcd checks the quota before it looks inside) and lease grants raise StoreFull; range reads,
deletes, revokes and keep-alives still work, since they are how space is freed). ``calls`` counts the calls
per method, per client and on the server. Watches are not delayed and lose no events; only
``unreachable``, ``hang`` and ``close`` touch them. The server's own ``txn``, ``grant``,
``keep_alive`` and ``revoke`` act at once, past every switch (to set a scene, or to make etcd drop
a lease); ``peek`` reads a key the same way.

It must never sleep for real or touch the network: everything timed goes through the clock.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import itertools
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from march.clock import Clock, Timer
from march.errors import StoreError, StoreFull, StoreRejected
from march.etcd.api import KV, Compare, Delete, Event, Get, Op, Put, Range, Request, Target, TxnResult

T = TypeVar("T")

MAX_TXN_OPS = 128  # etcd's default --max-txn-ops
MAX_REQUEST_BYTES = 1536 * 1024  # etcd's default --max-request-bytes (1.5 MiB)


Changes = Mapping[bytes, KV | None]  # one revision's changed keys: what each holds then (None: deleted)


@dataclass
class _Lease:
    id: int
    ttl: int
    keys: set[bytes] = field(default_factory=set)
    timer: Timer | None = None


def _in_range(key: bytes, start: bytes, end: bytes) -> bool:
    """Whether ``key`` is in etcd's range ``[start, end)`` (``end`` empty: just ``start``; ``b"\\0"``: no end)."""
    if not end:
        return key == start
    if end == b"\0":
        return key >= start
    return start <= key < end


def _compare_holds(c: Compare, kv: KV | None) -> bool:
    if kv is None:
        if c.target is Target.VALUE:
            return False  # etcd: a missing key has no value, so no VALUE compare matches
        kv = KV(c.key, b"", 0, 0, 0, 0)
    # As etcd's compareKV: the sign of (stored - operand), then the op on it.
    operand = c.operand
    if c.target is Target.VALUE:
        if not isinstance(operand, bytes):
            raise StoreRejected(f"a VALUE compare needs a bytes operand, got {operand!r}")
        result = (kv.value > operand) - (kv.value < operand)
    else:
        if isinstance(operand, bytes):
            raise StoreRejected(f"a {c.target.value} compare needs an int operand, got {operand!r}")
        actual = {
            Target.VERSION: kv.version,
            Target.CREATE: kv.create_revision,
            Target.MOD: kv.mod_revision,
            Target.LEASE: kv.lease,
        }[c.target]
        result = (actual > operand) - (actual < operand)
    if c.op is Op.EQUAL:
        return result == 0
    if c.op is Op.NOT_EQUAL:
        return result != 0
    if c.op is Op.LESS:
        return result < 0
    return result > 0


def _duplicates(ops: Sequence[Request]) -> bool:
    """etcd's check of one branch: two puts to one key, or a put inside a deleted range, are refused.

    Mirrors etcd's interval check literally: a delete's ``end`` is compared as plain bytes there
    (so a delete ending in ``b"\\0"`` conflicts with no put)."""
    puts: set[bytes] = set()
    deletes = [op for op in ops if isinstance(op, Delete)]
    for op in ops:
        if not isinstance(op, Put):
            continue
        if op.key in puts:
            return True
        puts.add(op.key)
        for d in deletes:
            if (d.key <= op.key < d.end) if d.end else op.key == d.key:
                return True
    return False


def _size(compare: Sequence[Compare], ops: Sequence[Request]) -> int:
    size = 0
    for c in compare:
        size += len(c.key) + (len(c.operand) if isinstance(c.operand, bytes) else 8)
    for op in ops:
        size += len(op.key)
        if isinstance(op, Put):
            size += len(op.value) + 8
        else:
            size += len(op.end)
    return size


class _Switches:
    """``unreachable`` and ``hang``, on the server (every client) or on one client (its link).

    Setting ``unreachable`` breaks the open watches it covers; lifting ``hang`` lets them go on.
    """

    _unreachable = False
    _hang = False
    delay = 0.0
    lose_replies = 0

    def _covered(self) -> list[FakeEtcdClient]:
        raise NotImplementedError

    @property
    def unreachable(self) -> bool:
        return self._unreachable

    @unreachable.setter
    def unreachable(self, value: bool) -> None:
        self._unreachable = value
        if value:
            for c in self._covered():
                c._break_watches("etcd unreachable")

    @property
    def hang(self) -> bool:
        return self._hang

    @hang.setter
    def hang(self, value: bool) -> None:
        self._hang = value
        if not value:
            for c in self._covered():
                c._wake_watches()


class FakeEtcd(_Switches):
    """The server: an MVCC store with leases and watches, shared by every ``client()``."""

    def __init__(
        self,
        clock: Clock,
        *,
        max_txn_ops: int = MAX_TXN_OPS,
        max_request_bytes: int = MAX_REQUEST_BYTES,
    ) -> None:
        self.clock = clock
        self.max_txn_ops = max_txn_ops
        self.max_request_bytes = max_request_bytes
        self.revision = 1  # etcd's revision on an empty store
        self._data: dict[bytes, KV] = {}
        self._sorted: list[bytes] = []
        self._leases: dict[int, _Lease] = {}
        self._lease_ids = itertools.count(0x7E57_0000_0001)
        # Every change batch so far: (revision, {key: what it holds then, None: deleted}), for
        # watches that start in the past.
        self._history: list[tuple[int, Changes]] = []
        self._clients: list[FakeEtcdClient] = []
        self.calls: collections.Counter[str] = collections.Counter()
        self.full = False

    def client(self, name: str = "", timeout: float = 5.0) -> FakeEtcdClient:
        """A client (one node's link to etcd); ``timeout`` is its default per call."""
        c = FakeEtcdClient(self, name, timeout)
        self._clients.append(c)
        return c

    def _covered(self) -> list[FakeEtcdClient]:
        return self._clients

    # --- inspection (no switches, no counters) -------------------------------------------------

    def peek(self, key: bytes) -> KV | None:
        """The key as stored now, bypassing every client and switch."""
        return self._data.get(key)

    def has_lease(self, lease: int) -> bool:
        return lease in self._leases

    # --- the requests, applied at once (callers have passed the switches) ----------------------

    def _select(self, start: bytes, end: bytes) -> list[bytes]:
        if not end:
            return [start] if start in self._data else []
        lo = bisect.bisect_left(self._sorted, start)
        hi = len(self._sorted) if end == b"\0" else bisect.bisect_left(self._sorted, end)
        return self._sorted[lo:hi] if hi > lo else []

    def _range(self, g: Get, revision: int) -> Range:
        keys = self._select(g.key, g.end)
        count = len(keys)
        if g.count_only:
            return Range([], count, False, revision)
        if g.limit > 0:
            keys = keys[: g.limit]
        kvs = [self._data[k] for k in keys]
        if g.keys_only:
            kvs = [KV(kv.key, b"", kv.create_revision, kv.mod_revision, kv.version, kv.lease) for kv in kvs]
        return Range(kvs, count, len(kvs) < count, revision)

    def _check_keys(self, keys: Sequence[bytes]) -> None:
        if any(not k for k in keys):
            raise StoreRejected("etcdserver: key is not provided")

    def _holds(self, c: Compare) -> bool:
        """As etcd's applyCompare: one key, or every key of ``[c.key, c.end)`` (none: as a missing key)."""
        if not c.end:
            return _compare_holds(c, self._data.get(c.key))
        found = [kv for key, kv in self._data.items() if _in_range(key, c.key, c.end)]
        return all(_compare_holds(c, kv) for kv in found) if found else _compare_holds(c, None)

    def _check_size(self, compare: Sequence[Compare], ops: Sequence[Request]) -> None:
        if _size(compare, ops) > self.max_request_bytes:
            raise StoreRejected("etcdserver: request is too large")

    def _check_space(self, endpoint: str) -> None:
        if self.full:
            raise StoreFull(f"etcd {endpoint}: etcdserver: mvcc: database space exceeded")

    def _set(self, key: bytes, value: bytes, lease: int, revision: int) -> None:
        old = self._data.get(key)
        if old is None:
            bisect.insort(self._sorted, key)
            kv = KV(key, value, revision, revision, 1, lease)
        else:
            if old.lease and old.lease != lease and old.lease in self._leases:
                self._leases[old.lease].keys.discard(key)
            kv = KV(key, value, old.create_revision, revision, old.version + 1, lease)
        self._data[key] = kv
        if lease:
            self._leases[lease].keys.add(key)

    def _remove(self, start: bytes, end: bytes) -> list[bytes]:
        gone = self._select(start, end)
        for key in gone:
            kv = self._data.pop(key)
            del self._sorted[bisect.bisect_left(self._sorted, key)]
            if kv.lease and kv.lease in self._leases:
                self._leases[kv.lease].keys.discard(key)
        return gone

    def _commit(self, changed: set[bytes]) -> None:
        """The changes made at ``revision + 1`` are done: move the revision and tell the watches."""
        if not changed:
            return
        self.revision += 1
        keys = {k: self._data.get(k) for k in sorted(changed)}
        self._history.append((self.revision, keys))
        for c in self._clients:
            c._notify(self.revision, keys)

    def txn(
        self,
        compare: Sequence[Compare],
        success: Sequence[Request],
        failure: Sequence[Request] = (),
        endpoint: str = "fake",
        quota: bool = True,
    ) -> TxnResult:
        """Apply a transaction now, past every switch (``endpoint`` names the caller in errors).

        ``quota``: etcd checks its quota on this request (a Txn or a Put; not a DeleteRange)."""
        if max(len(compare), len(success), len(failure)) > self.max_txn_ops:
            raise StoreRejected("etcdserver: too many operations in txn request")
        self._check_keys([c.key for c in compare] + [op.key for op in (*success, *failure)])
        if _duplicates(success) or _duplicates(failure):
            raise StoreRejected("etcdserver: duplicate key given in txn request")
        self._check_size(compare, [*success, *failure])
        if quota:
            self._check_space(endpoint)  # over quota, etcd refuses every transaction, even a read-only one
        succeeded = all(self._holds(c) for c in compare)
        ops = success if succeeded else failure
        for op in ops:
            if isinstance(op, Put) and op.lease and op.lease not in self._leases:
                raise StoreRejected("etcdserver: requested lease not found")
        # Every write of the transaction is made at the next revision; a Get sees the writes before it.
        revision = self.revision + 1
        changed: set[bytes] = set()
        results: list[Range | None] = []
        for op in ops:
            if isinstance(op, Put):
                self._set(op.key, op.value, op.lease, revision)
                changed.add(op.key)
                results.append(None)
            elif isinstance(op, Delete):
                changed.update(self._remove(op.key, op.end))
                results.append(None)
            else:
                results.append(self._range(op, 0))
        self._commit(changed)
        # The replies carry the transaction's revision (what GrpcEtcd gives each Range too).
        ranges = [None if r is None else Range(r.kvs, r.count, r.more, self.revision) for r in results]
        return TxnResult(succeeded, self.revision, ranges)

    def grant(self, ttl: int, endpoint: str = "fake") -> tuple[int, int]:
        self._check_space(endpoint)
        lease = _Lease(next(self._lease_ids), ttl)
        self._leases[lease.id] = lease
        self._arm(lease)
        return lease.id, ttl

    def _arm(self, lease: _Lease) -> None:
        if lease.timer is not None:
            lease.timer.cancel()
        lease.timer = self.clock.call_later(lease.ttl, lambda: self._expire(lease.id))

    def _expire(self, lease_id: int) -> None:
        if lease_id in self._leases:
            self.revoke(lease_id)

    def keep_alive(self, lease_id: int) -> int:
        """Renew a lease now: its TTL, or 0 if it is gone."""
        lease = self._leases.get(lease_id)
        if lease is None:
            return 0  # etcd answers TTL 0 for a lease it does not know
        self._arm(lease)
        return lease.ttl

    def revoke(self, lease_id: int) -> None:
        """Drop a lease and its keys now (what expiry does; tests call it to make etcd lose a lease)."""
        lease = self._leases.pop(lease_id, None)
        if lease is None:
            raise StoreRejected("etcdserver: requested lease not found")
        if lease.timer is not None:
            lease.timer.cancel()
        changed: set[bytes] = set()
        for key in sorted(lease.keys):
            changed.update(self._remove(key, b""))
        self._commit(changed)

    def _history_since(self, start_revision: int) -> list[tuple[int, Changes]]:
        i = bisect.bisect_left(self._history, start_revision, key=lambda h: h[0])
        return self._history[i:]


class _Watch:
    """One open watch: revisions waiting to be taken, or the reason it broke."""

    def __init__(self, start: bytes, end: bytes, since: int) -> None:
        self.start = start
        self.end = end
        self.since = since  # the first revision it reports
        self.pending: collections.deque[tuple[int, Changes]] = collections.deque()
        self.broken = ""
        self.wake = asyncio.Event()

    def touches(self, keys: Changes) -> bool:
        return any(_in_range(k, self.start, self.end) for k in keys)


class FakeEtcdClient(_Switches):
    """One client of a ``FakeEtcd``: the ``Etcd`` interface, with this link's own switches."""

    def __init__(self, server: FakeEtcd, name: str, timeout: float) -> None:
        self.server = server
        self.name = name
        self.timeout = timeout
        self.calls: collections.Counter[str] = collections.Counter()
        self._closed = False
        self._watches: list[_Watch] = []

    @property
    def endpoint(self) -> str:
        return f"fake:{self.name}" if self.name else "fake"

    def _covered(self) -> list[FakeEtcdClient]:
        return [self]

    def _cut(self) -> str:
        """Why this client cannot reach etcd now, or "" if it can."""
        if self._closed:
            return f"etcd {self.endpoint}: the client is closed"
        if self._unreachable or self.server.unreachable:
            return f"etcd {self.endpoint}: unreachable"
        return ""

    def _held(self) -> bool:
        return self._hang or self.server.hang

    # --- how every call travels ----------------------------------------------------------------

    async def _call(self, method: str, timeout: float | None, apply: Callable[[], T]) -> T:
        """Count the call, pass it through the switches, apply it at the server, answer it."""
        self.calls[method] += 1
        self.server.calls[method] += 1
        cut = self._cut()
        if cut:
            raise StoreError(cut)
        limit = timeout or self.timeout
        deadline = StoreError(f"etcd {self.endpoint}: {method}: deadline exceeded")
        if self._held():
            await self.server.clock.sleep(limit)  # never applied: the request did not get through
            raise deadline
        delay = self.delay + self.server.delay
        if delay > limit:
            # The caller gives up at its deadline; the request still lands when the delay ends.
            self.server.clock.call_later(delay, lambda: self._arrive_late(apply))
            await self.server.clock.sleep(limit)
            raise deadline
        if delay > 0:
            await self.server.clock.sleep(delay)
        return self._arrive(apply)

    def _arrive_late(self, apply: Callable[[], object]) -> None:
        """A request whose caller gave up reaches etcd now: applied unless the link was cut meanwhile."""
        if not self._cut():
            with contextlib.suppress(StoreError):
                apply()  # nobody waits for the reply any more

    def _arrive(self, apply: Callable[[], T]) -> T:
        """The request reaches etcd now: applied unless the link was cut meanwhile; the reply may be lost."""
        cut = self._cut()
        if cut:
            raise StoreError(cut)
        if self.lose_replies > 0 or self.server.lose_replies > 0:
            if self.lose_replies > 0:
                self.lose_replies -= 1
            else:
                self.server.lose_replies -= 1
            with contextlib.suppress(StoreError):
                apply()
            raise StoreError(f"etcd {self.endpoint}: the reply was lost")
        return apply()

    # --- KV ------------------------------------------------------------------------------------

    async def get(self, key: bytes, timeout: float | None = None) -> KV | None:
        def apply() -> KV | None:
            found = self.server.txn([], [Get(key)], [], self.endpoint, quota=False).ranges[0]
            assert found is not None
            return found.kvs[0] if found.kvs else None

        return await self._call("get", timeout, apply)

    async def range(self, get: Get, timeout: float | None = None) -> Range:
        def apply() -> Range:
            found = self.server.txn([], [get], [], self.endpoint, quota=False).ranges[0]
            assert found is not None
            return found

        return await self._call("range", timeout, apply)

    async def txn(
        self,
        compare: Sequence[Compare],
        success: Sequence[Request],
        failure: Sequence[Request] = (),
        timeout: float | None = None,
    ) -> TxnResult:
        compare, success, failure = list(compare), list(success), list(failure)
        return await self._call("txn", timeout, lambda: self.server.txn(compare, success, failure, self.endpoint))

    async def put(self, key: bytes, value: bytes, lease: int = 0, timeout: float | None = None) -> int:
        def apply() -> int:
            return self.server.txn([], [Put(key, value, lease)], [], self.endpoint).revision

        return await self._call("put", timeout, apply)

    async def delete(self, key: bytes, timeout: float | None = None) -> None:
        def apply() -> None:
            self.server.txn([], [Delete(key)], [], self.endpoint, quota=False)

        await self._call("delete", timeout, apply)

    # --- leases --------------------------------------------------------------------------------

    async def grant(self, ttl: int, timeout: float | None = None) -> tuple[int, int]:
        return await self._call("grant", timeout, lambda: self.server.grant(ttl, self.endpoint))

    async def keep_alive(self, lease: int, timeout: float) -> int:
        return await self._call("keep_alive", timeout, lambda: self.server.keep_alive(lease))

    async def revoke(self, lease: int, timeout: float | None = None) -> None:
        await self._call("revoke", timeout, lambda: self.server.revoke(lease))

    # --- watch ---------------------------------------------------------------------------------

    async def watch(self, start: bytes, end: bytes, start_revision: int = 0) -> AsyncGenerator[int, None]:
        async with contextlib.aclosing(self._batches(start, end, start_revision)) as batches:
            async for revision, _ in batches:
                yield revision

    async def watch_events(
        self, start: bytes, end: bytes, start_revision: int = 0
    ) -> AsyncGenerator[list[Event], None]:
        async with contextlib.aclosing(self._batches(start, end, start_revision)) as batches:
            async for revision, keys in batches:
                yield [
                    Event(k, None if kv is None else kv.value, revision)
                    for k, kv in keys.items()
                    if _in_range(k, start, end)
                ]

    async def _batches(
        self, start: bytes, end: bytes, start_revision: int
    ) -> AsyncGenerator[tuple[int, Changes], None]:
        """Every change batch that touches ``[start, end)`` (from ``start_revision``), until the watch breaks."""
        self.calls["watch"] += 1
        self.server.calls["watch"] += 1
        cut = self._cut()
        if cut:
            raise StoreError(cut)
        w = _Watch(start, end, start_revision)
        if start_revision > 0:
            w.pending.extend(h for h in self.server._history_since(start_revision) if w.touches(h[1]))
        self._watches.append(w)
        try:
            while True:
                if w.broken:
                    raise StoreError(f"etcd {self.endpoint}: watch broke: {w.broken}")
                if w.pending and not self._held():
                    yield w.pending.popleft()
                    continue
                w.wake.clear()
                await w.wake.wait()
        finally:
            self._watches.remove(w)

    def _notify(self, revision: int, keys: Changes) -> None:
        for w in self._watches:
            if revision >= w.since and w.touches(keys):
                w.pending.append((revision, keys))
                w.wake.set()

    def _break_watches(self, why: str) -> None:
        for w in self._watches:
            w.broken = why
            w.wake.set()

    def _wake_watches(self) -> None:
        for w in self._watches:
            w.wake.set()

    async def close(self) -> None:
        self.calls["close"] += 1
        self._closed = True
        self._break_watches("the client is closed")
