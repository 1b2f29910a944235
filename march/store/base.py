"""The store interface every backend implements, the records it keeps, and the errors it raises.

A store keeps, per sequence, its kind, its settings and its durable *ceiling*: an exclusive bound
below which a generator may hand out IDs. The contract, the same for every backend (one test
suite, ``tests/store/test_contract.py``, runs against memory, SQLite, etcd and the fake etcd):

- ``load(key)``: a linearizable read of one record, or None.
- ``create(record, guard)``: store the record if its key is absent; False if it exists (nothing
  written). Guarded like a ceiling write.
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
- Worker ids (``march.workers``), a record family beside the sequences (never listed or counted
  with them): ``load_workers(namespace)`` reads every ``WorkerRecord`` of one namespace (a
  linearizable read, by id; or one id's); ``save_worker(record, expected, guard)`` is a compare-and-set:
  it writes ``record`` only if the guard holds and the stored record of that (namespace, id) is
  exactly ``expected`` (None: there is none), and says whether it wrote. Nothing else writes a
  worker record, so two concurrent ACQUIREs (or a new primary racing a deposed one) can never
  both take one id.
- ``load_users()`` / ``save_user(name, rules)``: the ACL users (``march.auth``), as their rules
  (passwords only hashed). Not guarded by leadership: any node may change a user, the last
  write wins. ``watch_users()`` yields after every change made elsewhere (etcd); a store that
  only one server uses has nothing to watch (None).

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
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any


class StoreError(Exception):
    """A store call failed in a way that may pass (I/O error, timeout, lost connection)."""


class GuardFailed(StoreError):
    """The guarded write was refused: leadership is gone, or the record changed behind our back."""


class StoreLocked(StoreError):
    """Another server already owns this store (for sqlite: the data dir's lock is held)."""


class StoreFull(StoreError):
    """The store is out of space (etcd's NOSPACE alarm): writes fail until an operator acts."""


class StoreRejected(StoreError):
    """The store will never accept this request (too large, invalid): retrying cannot help."""


@dataclass(frozen=True)
class Guard:
    """Leadership token carried by every ceiling write.

    ``owner`` is the leader key's value (this node's id) and ``revision`` the key's create revision
    in etcd. The embedded store accepts the trivial guard ``SINGLE_NODE``.
    """

    owner: bytes = b""
    revision: int = 0


SINGLE_NODE = Guard()
NO_GUARD = Guard(b"\0", -1)  # matches no leader key: what a node that does not lead carries


@dataclass(frozen=True)
class SequenceRecord:
    """What the store keeps for one sequence."""

    key: bytes
    kind: str  # "sequence" or "timestamp" (whose layout is in settings)
    ceiling: int  # durable exclusive bound: every ID handed out so far is below it
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkerRecord:
    """One worker id of one namespace, as the store keeps it (``march.workers``).

    ``token`` names the holding (b"": released, free at once); ``expires_ms`` is the server's
    wall clock (Unix ms) at which the holding ends; ``floor_ms`` the highest time any holder
    declared it might have used (never decreases); ``ttl`` the seconds each renewal grants.
    """

    namespace: bytes
    id: int
    token: bytes
    expires_ms: int
    floor_ms: int
    ttl: int


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
    async def load_users(self) -> dict[str, str]:
        """Every stored user: name -> rules."""

    @abc.abstractmethod
    async def save_user(self, name: str, rules: str | None) -> None:
        """Store user ``name`` as ``rules`` (None: delete it)."""

    def watch_users(self) -> AsyncIterator[None] | None:
        """An iterator that yields after each change to the users (None: nothing else writes them)."""
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
