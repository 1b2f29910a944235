"""The store interface every backend implements, the records it keeps, and the errors it raises.

A store keeps, per sequence, its kind, its settings and its durable *ceiling*: an exclusive bound
below which a generator may hand out IDs. The contract, the same for every backend (one test
suite, ``tests/store/test_store_contract.py``, runs against memory, SQLite, etcd and the fake etcd):

- ``load(key)``: a linearizable read of one record, or None.
- ``create(record, guard)``: store the record if its key is absent; False if it exists (nothing
  written). Guarded like a ceiling write.
- ``load_or_create(record, guard)``: the stored record of ``record.key`` and False if it exists
  (nothing written: a name is never created twice or reset), else ``record`` stored (guarded, as
  ``create``) and True. What an auto-creating INCR needs in one call; the default is composed of
  ``load`` and ``create`` (SQLite does it in one write transaction).
- ``save_ceiling(key, ceiling, guard)``: atomic with two checks: the guard still holds, and the
  new ceiling is greater than the stored one. A guard that fails, or no such key, raises
  ``GuardFailed``: leadership is gone or the record changed behind this node's back, which
  means "step down now", never "retry". A stored ceiling already at or above the new one, with
  the guard holding, was written by this same leadership (an abandoned write that landed late):
  the call returns it as the ceiling now durable instead of failing.
- ``list_keys(prefix, after, limit)``: up to ``limit`` names that start with ``prefix`` and sort
  (bytewise) after ``after``, in byte order: listings are read a page at a time, never at once.
- ``scan(cursor, limit, guard)``: one step of SCAN, about ``limit`` names and the cursor to go on
  with (0: the pass is over). Cursors are the backend's own positions and accept any integer
  (another node's, a forgotten one, garbage: never an error, never a pass that does not end); a
  pass from 0 returns every name that existed throughout it (SQLite and memory: exactly once;
  etcd may repeat some). ``guard`` is the caller's term, the only one creating names meanwhile.
- ``count()``: how many sequences exist.

Listing and counting never queue in front of writes: SQLite reads names on a connection and a
thread of their own (WAL lets it read while the writer writes) and keeps the count in memory
(counted once at open, then maintained by its own creations: no other process writes its file);
memory answers at once; etcd reads are requests of their own (a count is one server-side count,
no values read). Worker-id and user records are neither listed nor counted with the sequences.
- ``save_settings(key, settings, guard)``: replace one sequence's settings (SEQ.ALTER), guarded
  like a ceiling write; the ceiling is left as it is. No such key is ``GuardFailed``.
- Worker ids (``march.keyspace.worker_ids``), a record family beside the sequences (never listed or counted
  with them): ``load_workers(namespace)`` reads every ``WorkerRecord`` of one namespace (a
  linearizable read, by id; or one id's); ``save_worker(record, expected, guard)`` is a compare-and-set:
  it writes ``record`` only if the guard holds and the stored record of that (namespace, id) is
  exactly ``expected`` (None: there is none), and says whether it wrote. Nothing else writes a
  worker record, so two concurrent ACQUIREs (or a new primary racing a deposed one) can never
  both take one id. ``delete_worker(record, guard)`` is a compare-and-delete, guarded the same
  way, that in the same atomic step raises the *retired UPTO* to at least the record's
  ``upto_ms``: ``retired_worker_upto()`` is the highest UPTO of every record ever deleted, so
  deleting a record never loses a declared time (the next holder of any id starts above it).
  Stored, ``upto_ms`` keeps its old name ``floor_ms`` (etcd's JSON, SQLite's columns): existing data
  reads as before.
  ``worker_namespaces(after, limit)`` pages through the namespaces that have records (in an
  order of the backend's own; a page may be short, ``[]`` is the end): how a new primary counts
  them once per term.
- ACL users (``march.access.rules``), a record family of their own, each kept as its rules (passwords
  only hashed) with a *revision* that changes with every write (etcd: the key's mod revision;
  SQLite and memory: a counter); 0 means "no such user". Not guarded by leadership: any node
  may change a user, but only through a compare-and-set, so no change is ever built on a stale
  copy. ``load_user(name)`` is a linearizable read of one ``UserRecord`` (None: absent);
  ``save_user(name, rules, expected)`` writes ``rules`` (None: deletes) only if the stored
  revision is still ``expected`` and returns the new revision, or None when it changed meanwhile
  (nothing written: read again, apply again). ``load_users()`` reads every user (a page at a
  time) as ``UserRecords``: the records and a revision at or below which every change is in
  them. ``watch_users(after)`` yields the changes made after revision ``after``, in revision order
  (each a ``UserRecord``; ``rules`` None for a deletion), until it breaks (StoreError); a store
  that only one server uses has nothing to watch (None).

Backup and restore (``march.backup``) go through the store, never around it:

- ``export(limit)`` yields every record, a page at a time: the sequences in byte order
  (``export_sequences(after, limit)``: the records of up to ``limit`` names after ``after``, the
  backend's own page read), then the users, the worker records by namespace and the retired floor
  (``RetiredUpto``). It writes nothing and takes no lock, so it runs while nodes serve (SQLite:
  a store opened ``read_only``); it is not one snapshot, but every record in it is one the store
  held while it ran, which is all a restore needs (ceilings and floors only grow).
- The restore writes only ever raise, each record by its rule (one function each, below, the
  same for every backend): ``raise_to(records)`` (sequences: ``raise_sequence``),
  ``restore_users(users, readable)`` (``restore_user``), ``raise_workers(records)``
  (``raise_worker``), ``raise_retired_upto(upto_ms)``. Each says per record what it did
  (``Restored``); with ``dry_run`` what it would do, writing nothing. Records are taken in order, as
  if one at a time (a name given twice meets the first). They write only where no primary serves:
  a serving primary holds a range below its ceiling in memory and writes back the settings it
  read, so a record raised under it would not reach it. SQLite: the data dir's lock, taken at
  ``open``; etcd: every restore transaction compares that no leader key of any group exists and
  that each record is still what was read (``PrimaryServing`` when a leader key exists, also in a
  dry run); memory: its ``serving`` steering. ``serving_primary()`` names a primary that serves
  now (None: none).

Calls made in the same event-loop turn may be sent together (one etcd transaction, one SQLite
transaction): many first requests after a failover cost a few store round trips, not one each.
Each call still gets its own answer.

Errors: ``StoreError`` is anything that may pass (I/O error, timeout, lost connection, an etcd
leader change); the caller may retry, a ceiling write with a strictly greater ceiling.
``StoreFull`` (a ``StoreError``) says the store is out of space (etcd's NOSPACE alarm): it passes
only once an operator acts. ``StoreRejected`` is a request the store will never accept (too
large, invalid): retrying it is pointless, so it reaches the client as an error, not TRYAGAIN.

The embedded store's guard is trivial (one process owns the data dir through a file lock); the
etcd store compares the leader key's value and create revision in the same transaction as the
write. A store must never be shared by two servers, and never block the event loop.
"""

from __future__ import annotations

import abc
import asyncio
import enum
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from march.errors import StoreError, StoreFull


@dataclass(frozen=True)
class Guard:
    """Leadership token carried by every ceiling write.

    ``owner`` is the leader key's value (this node's id) and ``revision`` the key's create revision
    in etcd; ``leader`` is that leader key itself (one per leadership group: ``<prefix>/leader`` with
    one group, ``march.cluster.layout``), ``b""`` where no etcd key is compared (single node, or a
    guard that matches nothing). The embedded store accepts the trivial guard ``SINGLE_NODE``.
    """

    owner: bytes = b""
    revision: int = 0
    leader: bytes = b""


SINGLE_NODE = Guard()
NO_GUARD = Guard(b"\0", -1)  # matches no leader key: what a node that does not lead carries


@dataclass(frozen=True)
class SequenceRecord:
    """What the store keeps for one sequence."""

    key: bytes
    kind: str  # "sequence" or "timestamp" (whose layout is in settings)
    ceiling: int  # durable exclusive bound: every ID handed out so far is below it
    settings: Mapping[str, Any] = field(default_factory=dict)


# ``load_or_create_then``'s callback: the stored record and whether it was created, or why there is none
Found = Callable[[tuple[SequenceRecord, bool] | BaseException], None]


@dataclass(frozen=True)
class WorkerRecord:
    """One worker id of one namespace, as the store keeps it (``march.keyspace.worker_ids``).

    ``token`` names the holding (b"": released, free at once); ``expires_ms`` is the wall-clock
    time (Unix ms) the primary that wrote it expected the holding to end: for operators only, never
    used to decide (expiry runs on the primary's monotonic clock, see ``march.keyspace.worker_ids``);
    ``upto_ms`` the highest time any holder declared it might have used (its ``UPTO``, never decreases); ``ttl``
    the seconds each renewal grants.
    """

    namespace: bytes
    id: int
    token: bytes
    expires_ms: int
    upto_ms: int
    ttl: int


@dataclass(frozen=True)
class UserRecord:
    """One ACL user as the store keeps it: its rules (``march.access.rules``; None: deleted, in a watch
    event) and the revision of the write that made it so (the compare of ``save_user``)."""

    name: str
    rules: str | None
    revision: int


@dataclass(frozen=True)
class UserRecords:
    """Every stored user, and a revision such that every change at or below it is in ``records``
    (a follower watches from the next one; changes after it may be in ``records`` too)."""

    records: list[UserRecord]
    revision: int


@dataclass(frozen=True)
class RetiredUpto:
    """The retired worker UPTO (``retired_worker_upto``) as an exported record."""

    upto_ms: int


Exported = SequenceRecord | UserRecord | WorkerRecord | RetiredUpto  # what ``export`` yields


class Restored(enum.Enum):
    """What a restore write did to one record (in a dry run: would do)."""

    CREATED = "created"  # absent: stored as given
    RAISED = "raised"  # present and below: raised (a ceiling, a floor), everything else kept as stored
    UNCHANGED = "unchanged"  # present at or above, or a readable user: the store's copy is newer
    REPLACED = "replaced"  # a user stored but unreadable (a node keeps it off): replaced
    OTHER_KIND = "other kind"  # a sequence stored as the other kind: left alone


def raise_sequence(wanted: SequenceRecord, stored: SequenceRecord | None) -> tuple[Restored, SequenceRecord | None]:
    """``raise_to``'s rule for one sequence, and the record to write (None: nothing)."""
    if stored is None:
        return Restored.CREATED, wanted
    if stored.kind != wanted.kind:
        return Restored.OTHER_KIND, None
    if stored.ceiling >= wanted.ceiling:
        return Restored.UNCHANGED, None
    return Restored.RAISED, replace(stored, ceiling=wanted.ceiling)


def raise_worker(wanted: WorkerRecord, stored: WorkerRecord | None) -> tuple[Restored, WorkerRecord | None]:
    """``raise_workers``' rule for one worker record (its holder kept), and the record to write."""
    if stored is None:
        return Restored.CREATED, wanted
    if stored.upto_ms >= wanted.upto_ms:
        return Restored.UNCHANGED, None
    return Restored.RAISED, replace(stored, upto_ms=wanted.upto_ms)


def restore_user(name: str, stored: str | None, readable: Callable[[str, str], bool]) -> Restored:
    """``restore_users``' rule for one user whose stored rules are ``stored`` (None: absent); the
    given rules are written unless it is UNCHANGED."""
    if stored is None:
        return Restored.CREATED
    return Restored.UNCHANGED if readable(name, stored) else Restored.REPLACED


class Store(abc.ABC):
    """Durable state of one March deployment."""

    name = "store"
    last_error = ""  # the last failed write, "" once one succeeds (INFO persistence)
    out_of_space = False  # the last failed write said the store is full

    def note(self, failure: BaseException | None) -> None:
        """Record how the last write went (``None``: it landed)."""
        self.last_error = "" if failure is None else str(failure) or type(failure).__name__
        self.out_of_space = isinstance(failure, StoreFull)

    @abc.abstractmethod
    async def open(self) -> None:
        """Acquire the store (lock, connect, create tables); raise StoreLocked if taken."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release everything; pending writes have finished or failed by then."""

    @abc.abstractmethod
    async def load(self, key: bytes) -> SequenceRecord | None:
        """Linearizable read of one sequence, or None."""

    @abc.abstractmethod
    async def create(self, record: SequenceRecord, guard: Guard) -> bool:
        """Create ``record`` if its key is absent (guarded); False if it already exists."""

    async def load_or_create(self, record: SequenceRecord, guard: Guard) -> tuple[SequenceRecord, bool]:
        """The stored record of ``record.key`` and False if it exists, else ``record`` created (guarded)
        and True. This default reads first (an existing name costs one read, as ``load``)."""
        loaded = await self.load(record.key)
        if loaded is not None:
            return loaded, False
        if await self.create(record, guard):
            return record, True
        loaded = await self.load(record.key)  # created meanwhile by another call
        if loaded is None:
            raise StoreError(f"sequence {record.key!r} was neither created nor found")
        return loaded, False

    def load_or_create_then(self, record: SequenceRecord, guard: Guard, then: Found) -> None:
        """``load_or_create``, its outcome (the result, or the exception) passed to ``then`` once done
        (an auto-creating INCR goes on from there instead of running a task per request). The default
        runs it in a task; SQLite calls ``then`` from its group commit, in one pass for the batch."""

        def done(call: asyncio.Future[tuple[SequenceRecord, bool]]) -> None:
            then(asyncio.CancelledError() if call.cancelled() else call.exception() or call.result())

        asyncio.ensure_future(self.load_or_create(record, guard)).add_done_callback(done)

    @abc.abstractmethod
    async def save_ceiling(self, key: bytes, ceiling: int, guard: Guard) -> int:
        """Store ``ceiling`` for ``key`` iff the guard holds, the key exists and ``ceiling`` > the stored one.

        Returns the ceiling now durable: ``ceiling``, or the stored one when it is already at least
        that (an earlier write under the same guard that landed after its caller gave up: every
        write under a guard that holds is this leadership's own). Raises GuardFailed when the guard
        fails or the key does not exist, StoreError on transient trouble.
        """

    @abc.abstractmethod
    async def list_keys(self, prefix: bytes = b"", after: bytes | None = None, limit: int = 1000) -> list[bytes]:
        """Up to ``limit`` sequence names starting with ``prefix`` and greater than ``after``, in byte order."""

    @abc.abstractmethod
    async def scan(self, cursor: int, limit: int, guard: Guard) -> tuple[int, list[bytes]]:
        """About ``limit`` names from position ``cursor`` on (0: the start) and the cursor to continue
        with (0: done). Any ``cursor`` in [0, 2**64) is accepted; see the module docstring."""

    @abc.abstractmethod
    async def count(self) -> int:
        """How many sequences exist (cheap: see the module docstring)."""

    @abc.abstractmethod
    async def save_settings(self, key: bytes, settings: Mapping[str, Any], guard: Guard) -> None:
        """Replace the settings of sequence ``key`` iff the guard holds (GuardFailed: it does not,
        or no such key); its kind and ceiling are kept."""

    @abc.abstractmethod
    async def load_workers(self, namespace: bytes, worker_id: int | None = None) -> list[WorkerRecord]:
        """Every worker record of ``namespace`` by id, or only that of ``worker_id`` (a linearizable read)."""

    @abc.abstractmethod
    async def save_worker(self, record: WorkerRecord, expected: WorkerRecord | None, guard: Guard) -> bool:
        """Store ``record`` iff the guard holds and the stored record of its (namespace, id) equals
        ``expected`` (None: absent). False: it did not (nothing written); GuardFailed: the guard failed."""

    @abc.abstractmethod
    async def delete_worker(self, record: WorkerRecord, guard: Guard) -> bool:
        """Delete ``record`` iff the guard holds and the stored record of its (namespace, id) equals it,
        raising the retired UPTO to at least ``record.upto_ms`` in the same atomic step. False: the
        stored record differs or is gone (nothing changed); GuardFailed: the guard failed."""

    @abc.abstractmethod
    async def retired_worker_upto(self) -> int:
        """The highest ``upto_ms`` of every worker record deleted so far, 0 if none (a linearizable read)."""

    @abc.abstractmethod
    async def worker_namespaces(self, after: bytes | None = None, limit: int = 100) -> list[bytes]:
        """Up to ``limit`` namespaces that have worker records, after ``after`` (the last namespace of the
        previous page; None: from the start), in the backend's own order. A page may hold fewer than
        ``limit`` while more follow; ``[]`` means there are no more."""

    @abc.abstractmethod
    async def load_users(self) -> UserRecords:
        """Every stored user, with the revision a watch of later changes starts after."""

    @abc.abstractmethod
    async def load_user(self, name: str) -> UserRecord | None:
        """Linearizable read of one user (None: no such user)."""

    @abc.abstractmethod
    async def save_user(self, name: str, rules: str | None, expected: int) -> int | None:
        """Store user ``name`` as ``rules`` (None: delete it) iff its stored revision is ``expected``
        (0: it does not exist); the new revision, or None if it changed (nothing written)."""

    # --- backup and restore (see the module docstring) ---------------------------------------------

    async def export(self, limit: int = 1000) -> AsyncIterator[list[Exported]]:
        """Every record, a page of at most ``limit`` (one namespace's workers: up to 1024) at a time."""
        after: bytes | None = None
        while page := await self.export_sequences(after, limit):
            yield list(page)
            after = page[-1].key
        users = sorted((await self.load_users()).records, key=lambda u: u.name)
        for start in range(0, len(users), limit):
            yield list(users[start : start + limit])
        space: bytes | None = None
        while spaces := await self.worker_namespaces(space, limit):
            for space in spaces:
                yield list(await self.load_workers(space))
        yield [RetiredUpto(await self.retired_worker_upto())]

    async def export_sequences(self, after: bytes | None, limit: int) -> list[SequenceRecord]:
        """The records of up to ``limit`` sequences after ``after`` (None: from the first), in byte
        order; [] at the end. This default lists the names, then loads them in one loop turn."""
        names = await self.list_keys(after=after, limit=limit)
        found = await asyncio.gather(*(self.load(name) for name in names))
        return [record for record in found if record is not None]

    async def serving_primary(self) -> str | None:
        """The node id of a primary serving from this store now, or None (a single node's store: its
        lock, held from ``open``, says no other server uses it)."""
        return None

    @abc.abstractmethod
    async def raise_to(self, records: list[SequenceRecord], dry_run: bool = False) -> list[Restored]:
        """Each sequence created, or its ceiling raised, by ``raise_sequence``; only while no primary serves."""

    @abc.abstractmethod
    async def restore_users(
        self, users: Mapping[str, str], readable: Callable[[str, str], bool], dry_run: bool = False
    ) -> list[Restored]:
        """Each user (name -> rules) created or replaced by ``restore_user`` (``readable(name, rules)``:
        whether a node can read a stored user), in order; a user written meanwhile is UNCHANGED."""

    @abc.abstractmethod
    async def raise_workers(self, records: list[WorkerRecord], dry_run: bool = False) -> list[Restored]:
        """Each worker record created, or its floor raised, by ``raise_worker``; only while no primary serves."""

    @abc.abstractmethod
    async def raise_retired_upto(self, upto_ms: int, dry_run: bool = False) -> Restored:
        """The retired worker UPTO raised to at least ``upto_ms`` (RAISED or UNCHANGED)."""

    def watch_users(self, after: int) -> AsyncIterator[list[UserRecord]] | None:
        """The changes to the users after revision ``after`` (what ``load_users`` named), in order
        (None: nothing else writes them)."""
        return None

    def describe(self) -> dict[str, Any]:
        """A few facts for INFO persistence."""
        return {
            "store": self.name,
            **self.facts(),
            "store_out_of_space": int(self.out_of_space),
            "store_last_error": self.last_error,
        }

    def facts(self) -> dict[str, Any]:
        """The backend's own facts for ``describe``."""
        return {}
