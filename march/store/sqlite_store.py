"""The embedded store: one SQLite file in the data dir, for a single node with no etcd.

- ``<data_dir>/march.sqlite3`` in WAL mode with ``synchronous=FULL``: a write that returned is on
  disk, through a crash or power loss.
- Every write (and every ``load``: the path of a key's first INCR) runs on one dedicated thread, so
  the event loop never blocks on disk and writes land in the order they were made. Calls made in
  the same loop turn share one SQLite transaction (one fsync): the first requests of thousands of
  keys after a restart cost a few commits.
- ``load_or_create`` (an auto-creating INCR) creates first: per batch one ``INSERT OR IGNORE`` of
  every name, its own transaction (one call into SQLite, commit included); only when some names
  were there already, one SELECT tells them from the new ones by rowid (``_insert_or_select``).
  ``load_or_create_then`` calls each caller's callback from the batch's one pass, no future each.
  Its batcher gathers: the next commit of new names waits (at most the last one's time) for the
  callers of the last one to come back, so a steady crowd of creating clients shares one commit
  (``march.store.batch``).
- Listings (``list_keys``, ``scan``) run on a second connection (``query_only``) on a thread of
  their own: in WAL mode it reads the last committed state while the writer goes on, so no KEYS
  or SCAN ever queues in front of a ceiling write. A page is read as one value (the names' hex
  joined by SQLite: ``_names``), so a page costs its thread one GIL hand-over, not one per row.
  ``count`` reads no disk at all: the sequences are counted once at open (on the writer's thread,
  before anything is served), then this store's own creations are added as they commit (the
  flock: no one else writes the file).
- SCAN cursors are rowids: a sequence's rowid is given once when it is created (one more than the
  largest, as no row is ever deleted) and never changes, so a cursor (the last rowid returned)
  describes itself. Any cursor resumes in O(log n) at the next rowid; a pass returns every name
  that existed throughout exactly once, in creation order. (A ``VACUUM`` run by hand may renumber
  rowids: a scan going on across it may repeat or miss names, never the IDs.)
- ``<data_dir>/march.lock`` is held with an exclusive ``flock`` for the life of the server, so a
  second server on the same data dir refuses to start (two writers would hand out the same IDs).
- The guard is trivial (the lock is the leadership); the "new ceiling > stored" check is still
  made inside the write transaction.
- A data dir that cannot be created, locked or written (read-only, not a directory) is a
  ``StoreError`` that says so: the server prints one line and exits.
- ``read_only``: a backup's view of a node's file while the node runs: no lock, no schema, both
  connections ``mode=ro`` (WAL: they never wait for the node's writer, nor it for them; each page
  of ``export`` is its own short read). Every write is a ``StoreError``.
- The restore writes (``raise_to``, ``raise_workers``, ``raise_retired_upto``) read and write in
  one transaction per batch, under the data dir's lock: no node serves from the file meanwhile.
- A data dir that a cluster node used (it holds ``cluster.json``, ``march.store.membership``) is
  refused (``IdentityConflict``): without ``--etcd`` the node would hand out IDs from its own store,
  below what its cluster handed out. With ``join_other`` the record is removed and the data dir is
  a single node's from then on.

Ceilings are stored as decimal text: the largest ceiling, 2**63, does not fit SQLite's INTEGER.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import fcntl
import json
import logging
import os
import queue
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from march.errors import GuardFailed, IdentityConflict, StoreError, StoreFull, StoreLocked
from march.etcd.keypath import prefix_end
from march.store.batch import Batcher
from march.store.contract import (
    Found,
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
from march.store.membership import JOIN_FLAG, SQLITE_FILE, forget_mark, read_mark

T = TypeVar("T")
log = logging.getLogger("march")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sequences (
    key      BLOB PRIMARY KEY,
    kind     TEXT NOT NULL,
    ceiling  TEXT NOT NULL,
    settings TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS users (
    name     TEXT PRIMARY KEY,
    rules    TEXT NOT NULL,
    revision INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS users_revision (
    one      INTEGER PRIMARY KEY CHECK (one = 1),
    revision INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS workers (
    namespace  BLOB NOT NULL,
    id         INTEGER NOT NULL,
    token      BLOB NOT NULL,
    expires_ms INTEGER NOT NULL,
    floor_ms   INTEGER NOT NULL,
    ttl        INTEGER NOT NULL,
    PRIMARY KEY (namespace, id)
);
CREATE TABLE IF NOT EXISTS workers_retired (
    one      INTEGER PRIMARY KEY CHECK (one = 1),
    floor_ms INTEGER NOT NULL
);
"""
_BATCH = 500  # records per transaction (and per SELECT ... IN): under SQLite's bound-parameter limit
# Each connection's page cache, in KiB (SQLite's default: 2 MiB). The hot pages of 100,000 sequences
# (the index's inner pages) fit; the rest is read from the OS's page cache. Measured with
# harness/march_harness/bench/memory.py: the default adds ~20 bytes per sequence at 100,000.
_CACHE_KIB = 512
_RAISE_RETIRED = (
    "INSERT INTO workers_retired (one, floor_ms) VALUES (1, ?)"
    " ON CONFLICT (one) DO UPDATE SET floor_ms = max(floor_ms, excluded.floor_ms)"
)
_BUSY_MS = 5000  # a read-only connection waits this long on a lock (a WAL reader seldom meets one: recovery)
_INSERT_ROWS = "INSERT OR IGNORE INTO sequences (key, kind, ceiling, settings) VALUES "  # + one _ROW_MARKS a record
_ROW_MARKS = "(?,?,?,?)"  # (_BATCH of them: 2,000 parameters, under SQLite's limit of 32,766)
_MAX_ROWID = 1 << 63  # SQLite's rowids are signed 64-bit: a SCAN cursor at or past this is past the end


class Writer(Executor):
    """The writer's thread: ``call``s run one after another on it, in the order made. What
    ``ThreadPoolExecutor(max_workers=1)`` did, with less Python on either side of each call (a C
    queue, no locks or concurrent future): the event loop's thread and this one share the GIL,
    and a group commit's hand-offs were a good part of a creation's time on the loop. (An
    ``Executor`` too, for ``run_in_executor``: ``submit`` runs in the same order, as any call.)"""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def call(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """The future of ``fn(*args)`` run on the thread (a caller that stops waiting does not stop it)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._calls.put((loop, future, fn, args))
        return future

    def _serve(self) -> None:
        calls = self._calls
        while (item := calls.get()) is not None:
            loop, future, fn, args = item
            if loop is None:  # (``submit``'s)
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn(*args))
                    except BaseException as exc:
                        future.set_exception(exc)
                del item, future
                continue
            try:
                outcome, failed = fn(*args), False
            except BaseException as exc:  # (handed to the caller, as an executor would)
                outcome, failed = exc, True
            with contextlib.suppress(RuntimeError):  # (the loop is closed: nobody waits any more)
                loop.call_soon_threadsafe(_settle, future, outcome, failed)
            del item, future, outcome  # (nothing kept alive until the next call)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._calls.put((None, future, partial(fn, *args, **kwargs), ()))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Run the calls made so far, then end the thread (and wait for it, with ``wait``)."""
        self._calls.put(None)
        if wait:
            self._thread.join()


def _settle(future: asyncio.Future[Any], outcome: Any, failed: bool) -> None:
    if future.cancelled():
        return
    if failed:
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


class SqliteFile(Store):
    """The data dir, its lock, and the two connections with their threads (writer, listings):
    how calls reach the file. ``SqliteStore`` is what is kept in it."""

    def __init__(self, data_dir: str | os.PathLike[str], join_other: bool = False, read_only: bool = False) -> None:
        self.dir = Path(data_dir)
        self.path = self.dir / SQLITE_FILE
        self.join_other = join_other  # a data dir a cluster node used may become a single node's
        self.read_only = read_only  # a reader beside a running node: no lock, nothing written
        self._lock_fd: int | None = None
        self._db: sqlite3.Connection | None = None
        self._pool: Writer | None = None
        self._reader: sqlite3.Connection | None = None  # listings: their own connection and thread
        self._read_pool: ThreadPoolExecutor | None = None
        self._count = 0  # sequences in the file: counted at open, then this store's creations added

    async def open(self) -> None:
        if self.read_only:
            if not self.path.exists():
                raise StoreError(f"no March store in {self.dir} ({self.path} does not exist)")
            await self._open_connections()
            return
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.dir / "march.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"data dir {self.dir}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StoreLocked(
                f"data dir {self.dir} is in use by another March server (pid {holder}); "
                "two servers on one data dir would hand out the same IDs"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as exc:
            os.close(fd)
            raise StoreError(f"data dir {self.dir}: {exc.strerror or exc}") from None
        self._lock_fd = fd
        try:
            self._check_membership()
        except BaseException:
            await self.close()
            raise
        await self._open_connections()

    async def _open_connections(self) -> None:
        self._pool = Writer("march-sqlite")
        self._read_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="march-sqlite-read")
        try:
            await self._run(self._open_db)
            await self._read(self._open_reader)
        except BaseException:
            await self.close()
            raise

    def _check_membership(self) -> None:
        """Refuse a data dir that belongs to a cluster (unless ``join_other``: then forget it)."""
        mark = read_mark(self.dir)
        if mark is None:
            return
        if not self.join_other:
            raise IdentityConflict(
                f"data dir {self.dir} belongs to {mark.where()}; without --etcd this node would hand out "
                "IDs from its own store, below what that cluster has handed out. Start it with "
                f"--etcd {mark.etcd or 'HOST:PORT'} --etcd-prefix {mark.etcd_prefix}, or with {JOIN_FLAG} "
                "to make this data dir a single node's from now on"
            )
        forget_mark(self.dir)
        log.warning("data dir %s: no longer part of %s (join_other_cluster)", self.dir, mark.where())

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
            db.execute(f"PRAGMA busy_timeout={_BUSY_MS}")
            return db
        return sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)

    def _open_db(self) -> None:
        db = self._connect()
        if self.read_only:
            self._count = int(db.execute("SELECT COUNT(*) FROM sequences").fetchone()[0])
            self._db = db
            return
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
            db.executescript(_SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(users)")}
            if "revision" not in columns:  # a data dir from before user revisions: each user at revision 1
                db.execute("ALTER TABLE users ADD COLUMN revision INTEGER NOT NULL DEFAULT 1")
            db.execute(
                "INSERT OR IGNORE INTO users_revision VALUES (1, (SELECT COALESCE(MAX(revision), 0) FROM users))"
            )
            self._count = int(db.execute("SELECT COUNT(*) FROM sequences").fetchone()[0])
        except BaseException:
            db.close()
            raise
        self._db = db

    def _open_reader(self) -> None:
        db = self._connect()
        try:
            db.execute("PRAGMA query_only=ON")
            db.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
        except BaseException:
            db.close()
            raise
        self._reader = db

    async def close(self) -> None:
        if self._read_pool is not None:
            if self._reader is not None:
                await self._read(self._reader.close)
            self._read_pool.shutdown(wait=True)
            self._read_pool = None
            self._reader = None
        if self._pool is not None:
            if self._db is not None:
                await self._run(self._db.close)
            self._pool.shutdown()
            self._pool = None
            self._db = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the writer's thread."""
        if self._pool is None:
            raise StoreError("store is closed")
        return await self._on(self._pool.call(fn, *args))

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the listings' thread (``_reading()`` is its connection)."""
        if self._read_pool is None:
            raise StoreError("store is closed")
        return await self._on(asyncio.get_running_loop().run_in_executor(self._read_pool, fn, *args))

    async def _on(self, call: Awaitable[T]) -> T:
        """``call``'s result, its SQLite and OS errors as ``StoreError`` (``StoreFull`` for a full disk)."""
        try:
            return await call
        except sqlite3.Error as exc:
            kind = StoreFull if "full" in str(exc) else StoreError  # SQLITE_FULL: "database or disk is full"
            raise kind(f"sqlite {self.path}: {exc}") from exc
        except OSError as exc:
            kind = StoreFull if exc.errno == errno.ENOSPC else StoreError
            raise kind(f"sqlite {self.path}: {exc.strerror or exc}") from exc

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError("store is closed")
        return self._db

    def _reading(self) -> sqlite3.Connection:
        if self._reader is None:
            raise StoreError("store is closed")
        return self._reader

    def _transaction(self, each: Callable[[sqlite3.Connection, T], Any], items: list[T]) -> list[Any]:
        db = self._conn()
        db.execute("BEGIN IMMEDIATE")
        try:
            results = []
            for item in items:
                try:
                    results.append(each(db, item))
                except GuardFailed as exc:
                    results.append(exc)
        except BaseException:
            if db.in_transaction:  # SQLITE_FULL (and a few others) roll back by themselves
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return results

    async def _write(self, each: Callable[[sqlite3.Connection, T], Any], items: list[T]) -> list[Any]:
        try:
            results = await self._run(self._transaction, each, items)
        except StoreError as exc:
            self.note(exc)
            raise
        self.note(None)
        return results

    async def _write_all(
        self, each: Callable[[sqlite3.Connection, list[T]], list[Any]], items: list[T], own: bool = False
    ) -> list[Any]:
        """``each(db, items)`` in one write transaction (one result per item; the whole batch fails
        together). ``own``: ``each`` makes its writes in one statement, its own transaction (autocommit)."""
        try:
            results = await self._run(self._statement if own else self._transaction_all, each, items)
        except StoreError as exc:
            self.note(exc)
            raise
        self.note(None)
        return results

    def _statement(self, each: Callable[[sqlite3.Connection, list[T]], list[Any]], items: list[T]) -> list[Any]:
        return each(self._conn(), items)

    def _transaction_all(self, each: Callable[[sqlite3.Connection, list[T]], list[Any]], items: list[T]) -> list[Any]:
        db = self._conn()
        db.execute("BEGIN IMMEDIATE")
        try:
            results = each(db, items)
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return results

    def facts(self) -> dict[str, Any]:
        return {"store_path": str(self.path)}


class SqliteStore(SqliteFile):
    """Sequences, users and worker ids in the file (see the module docstring)."""

    name = "sqlite"

    def __init__(self, data_dir: str | os.PathLike[str], join_other: bool = False, read_only: bool = False) -> None:
        super().__init__(data_dir, join_other, read_only)
        # serial: one transaction in flight each, the calls made meanwhile share the next (group commit)
        self._loads: Batcher[bytes, SequenceRecord | None] = Batcher(self._load_batch, _BATCH, serial=True)
        self._creates: Batcher[SequenceRecord, bool] = Batcher(self._create_batch, _BATCH, serial=True)
        self._saves: Batcher[tuple[bytes, int], int] = Batcher(self._save_batch, _BATCH, serial=True)
        self._finds: Batcher[SequenceRecord, tuple[SequenceRecord, bool]] = Batcher(
            self._load_or_create_batch,
            _BATCH,
            serial=True,
            gather=True,  # (creations: see batch.py)
        )

    async def close(self) -> None:
        for batcher in (self._loads, self._creates, self._saves, self._finds):
            await batcher.drain()
        await super().close()

    # --- reads ---------------------------------------------------------------------------------

    async def load(self, key: bytes) -> SequenceRecord | None:
        return await self._loads(key)

    async def _load_batch(self, keys: list[bytes]) -> Sequence[SequenceRecord | None]:
        return await self._run(self._select, keys)

    def _select(self, keys: list[bytes]) -> list[SequenceRecord | None]:
        marks = ",".join("?" * len(keys))
        rows = self._conn().execute(f"SELECT key, kind, ceiling, settings FROM sequences WHERE key IN ({marks})", keys)
        found = {bytes(row[0]): _record(row) for row in rows}
        return [found.get(key) for key in keys]

    async def list_keys(self, prefix: bytes = b"", after: bytes | None = None, limit: int = 1000) -> list[bytes]:
        return await self._read(self._list, prefix, after, limit)

    def _list(self, prefix: bytes, after: bytes | None, limit: int) -> list[bytes]:
        sql, args = "SELECT key FROM sequences WHERE key >= ?", [prefix]
        if after is not None:
            sql += " AND key > ?"
            args.append(after)
        end = prefix_end(prefix)
        if prefix and end != b"\0":  # b"\0": a prefix of 0xff bytes, with no end
            sql += " AND key < ?"
            args.append(end)
        sql = f"SELECT group_concat(hex(key), ',') FROM ({sql} ORDER BY key LIMIT ?)"
        names = _names(self._reading().execute(sql, (*args, limit)).fetchone()[0])
        names.sort()  # (already in order in practice: the aggregate's order is not SQLite's promise)
        return names

    async def export_sequences(self, after: bytes | None, limit: int) -> list[SequenceRecord]:
        return await self._read(self._export, after, limit)

    def _export(self, after: bytes | None, limit: int) -> list[SequenceRecord]:
        sql = "SELECT key, kind, ceiling, settings FROM sequences WHERE key > ? ORDER BY key LIMIT ?"
        if after is None:
            sql = sql.replace("key > ?", "key >= ?")
        return [_record(row) for row in self._reading().execute(sql, (after or b"", limit))]

    async def scan(self, cursor: int, limit: int, guard: Guard) -> tuple[int, list[bytes]]:
        if cursor >= _MAX_ROWID:  # past every rowid SQLite gives
            return 0, []
        last, names = await self._read(self._scan, cursor, limit)
        return (last if len(names) == limit else 0), names

    def _scan(self, cursor: int, limit: int) -> tuple[int, list[bytes]]:
        """The page after ``cursor`` and its last rowid (0: empty), read as one row (``_names``): the
        names in rowid order as SQLite joins them (in practice; not its promise), and whatever their
        order the next cursor is the page's largest rowid, so a pass still returns each name once."""
        sql = (
            "SELECT max(id), group_concat(hex(key), ',') FROM"
            " (SELECT rowid AS id, key FROM sequences WHERE rowid > ? ORDER BY rowid LIMIT ?)"
        )
        last, names = self._reading().execute(sql, (cursor, limit)).fetchone()
        return int(last or 0), _names(names)

    async def count(self) -> int:
        if self._pool is None:
            raise StoreError("store is closed")
        return self._count

    async def load_users(self) -> UserRecords:
        return await self._run(self._load_users)

    def _load_users(self) -> UserRecords:
        db = self._conn()
        db.execute("BEGIN")
        try:
            rows = db.execute("SELECT name, rules, revision FROM users ORDER BY name").fetchall()
            revision = int(db.execute("SELECT revision FROM users_revision").fetchone()[0])
        finally:
            db.execute("COMMIT")
        return UserRecords([UserRecord(str(n), str(r), int(v)) for n, r, v in rows], revision)

    async def load_user(self, name: str) -> UserRecord | None:
        row = await self._run(
            lambda: self._conn().execute("SELECT rules, revision FROM users WHERE name = ?", (name,)).fetchone()
        )
        return None if row is None else UserRecord(name, str(row[0]), int(row[1]))

    async def save_user(self, name: str, rules: str | None, expected: int) -> int | None:
        return await self._run(self._save_user, name, rules, expected)

    def _save_user(self, name: str, rules: str | None, expected: int) -> int | None:
        db = self._conn()
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT revision FROM users WHERE name = ?", (name,)).fetchone()
            if (int(row[0]) if row is not None else 0) != expected:
                db.execute("ROLLBACK")
                return None
            db.execute("UPDATE users_revision SET revision = revision + 1")
            revision = int(db.execute("SELECT revision FROM users_revision").fetchone()[0])
            if rules is None:
                db.execute("DELETE FROM users WHERE name = ?", (name,))
            else:
                db.execute(
                    "INSERT OR REPLACE INTO users (name, rules, revision) VALUES (?, ?, ?)", (name, rules, revision)
                )
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return revision

    # --- writes (one transaction per batch) ------------------------------------------------------

    async def create(self, record: SequenceRecord, guard: Guard) -> bool:
        return await self._creates(record)

    async def _create_batch(self, records: list[SequenceRecord]) -> Sequence[bool | BaseException]:
        results = await self._write(_insert, records)
        self._count += sum(1 for r in results if r is True)
        return results

    async def load_or_create(self, record: SequenceRecord, guard: Guard) -> tuple[SequenceRecord, bool]:
        return await self._finds(record)

    def load_or_create_then(self, record: SequenceRecord, guard: Guard, then: Found) -> None:
        self._finds.submit_then(record, then)  # (no task, no future: called in the group commit's pass)

    async def _load_or_create_batch(self, records: list[SequenceRecord]) -> Sequence[tuple[SequenceRecord, bool]]:
        results = await self._write_all(_insert_or_select, records, own=True)
        self._count += sum(1 for _, created in results if created)
        return results

    async def save_ceiling(self, key: bytes, ceiling: int, guard: Guard) -> int:
        return await self._saves((key, ceiling))

    async def _save_batch(self, items: list[tuple[bytes, int]]) -> Sequence[int | BaseException]:
        return await self._write(_raise_ceiling, items)

    async def save_settings(self, key: bytes, settings: Mapping[str, Any], guard: Guard) -> None:
        text = _settings_text(settings)
        (result,) = await self._write(_replace_settings, [(key, text)])
        if isinstance(result, BaseException):
            raise result

    # --- restore (under the data dir's lock: no node serves meanwhile) ---------------------------

    async def raise_to(self, records: list[SequenceRecord], dry_run: bool = False) -> list[Restored]:
        out: list[Restored] = []
        for start in range(0, len(records), _BATCH):
            page = records[start : start + _BATCH]
            outcomes = await self._write_all(partial(_raise_sequences, dry_run=dry_run), page)
            self._count += 0 if dry_run else outcomes.count(Restored.CREATED)
            out += outcomes
        return out

    async def restore_users(
        self, users: Mapping[str, str], readable: Callable[[str, str], bool], dry_run: bool = False
    ) -> list[Restored]:
        out = []
        for name, rules in users.items():
            stored = await self.load_user(name)
            outcome = restore_user(name, stored.rules if stored is not None else None, readable)
            write = outcome is not Restored.UNCHANGED and not dry_run
            if write and await self.save_user(name, rules, stored.revision if stored else 0) is None:
                outcome = Restored.UNCHANGED  # written meanwhile (under the lock: by nobody)
            out.append(outcome)
        return out

    async def raise_workers(self, records: list[WorkerRecord], dry_run: bool = False) -> list[Restored]:
        out: list[Restored] = []
        for start in range(0, len(records), _BATCH):
            out += await self._write(partial(_raise_worker, dry_run=dry_run), records[start : start + _BATCH])
        return out

    async def raise_retired_upto(self, upto_ms: int, dry_run: bool = False) -> Restored:
        (outcome,) = await self._write(partial(_raise_retired, dry_run=dry_run), [upto_ms])
        return outcome  # type: ignore[no-any-return]

    # --- worker ids (rare: one transaction each, not batched) -----------------------------------

    async def load_workers(self, namespace: bytes, worker_id: int | None = None) -> list[WorkerRecord]:
        return await self._run(self._select_workers, namespace, worker_id)

    def _select_workers(self, namespace: bytes, worker_id: int | None) -> list[WorkerRecord]:
        sql = "SELECT id, token, expires_ms, floor_ms, ttl FROM workers WHERE namespace = ?"
        args: tuple[Any, ...] = (namespace,)
        if worker_id is not None:
            sql, args = sql + " AND id = ?", (namespace, worker_id)
        rows = self._conn().execute(sql + " ORDER BY id", args)
        return [WorkerRecord(namespace, int(i), bytes(t), int(e), int(f), int(ttl)) for i, t, e, f, ttl in rows]

    async def save_worker(self, record: WorkerRecord, expected: WorkerRecord | None, guard: Guard) -> bool:
        (result,) = await self._write(_swap_worker, [(record, expected)])
        return bool(result)

    async def delete_worker(self, record: WorkerRecord, guard: Guard) -> bool:
        (result,) = await self._write(_delete_worker, [record])
        return bool(result)

    async def retired_worker_upto(self) -> int:
        row = await self._run(lambda: self._conn().execute("SELECT floor_ms FROM workers_retired").fetchone())
        return 0 if row is None else int(row[0])

    async def worker_namespaces(self, after: bytes | None = None, limit: int = 100) -> list[bytes]:
        return await self._run(self._worker_namespaces, after, limit)

    def _worker_namespaces(self, after: bytes | None, limit: int) -> list[bytes]:
        where = "" if after is None else " WHERE namespace > ?"
        args = () if after is None else (after,)
        rows = self._conn().execute(
            f"SELECT DISTINCT namespace FROM workers{where} ORDER BY namespace LIMIT ?", (*args, limit)
        )
        return [bytes(row[0]) for row in rows]


def _settings_text(settings: Mapping[str, Any]) -> str:
    """A record's settings as stored (JSON, keys sorted); most have none: no encoder call for those."""
    return json.dumps(dict(settings), sort_keys=True) if settings else "{}"


def _row(record: SequenceRecord) -> tuple[bytes, str, str, str]:
    return record.key, record.kind, str(record.ceiling), _settings_text(record.settings)


def _insert(db: sqlite3.Connection, record: SequenceRecord) -> bool:
    cur = db.execute("INSERT OR IGNORE INTO sequences (key, kind, ceiling, settings) VALUES (?, ?, ?, ?)", _row(record))
    return cur.rowcount == 1


def _insert_or_select(db: sqlite3.Connection, records: list[SequenceRecord]) -> list[tuple[SequenceRecord, bool]]:
    """Each record inserted (True), or its stored one (False). First one ``INSERT OR IGNORE`` of every
    name of the batch, its own transaction (autocommit: the commit, and its fsync, within the
    statement's one step); when it inserted them all (a batch of new names: the common case), that is
    all: one call into SQLite, so this thread takes the GIL back from the busy event loop once a batch
    (each time is a wait of up to the switch interval). Otherwise one SELECT of the batch's names tells
    the rows inserted now from the stored ones by rowid: this thread is the file's only writer (the
    data dir's lock) and no row is ever deleted, so the statement's rows are the last ``rowcount``
    rowids; a count that does not add up fails the batch (its callers got no ID; their retries find
    the names). A name twice in one batch is inserted once; its later entries find the first."""
    unique: dict[bytes, SequenceRecord] = {}
    for record in records:
        unique.setdefault(record.key, record)
    new = list(unique.values())
    cursor = db.execute(_INSERT_ROWS + ",".join([_ROW_MARKS] * len(new)), [v for r in new for v in _row(r)])
    inserted = cursor.rowcount
    if inserted == len(new):
        created = {key: True for key in unique}
    else:
        above = (cursor.lastrowid or 0) - inserted if inserted > 0 else _MAX_ROWID  # rowids of this statement's rows
        marks = ",".join("?" * len(new))
        rows = db.execute(
            f"SELECT rowid, key, kind, ceiling, settings FROM sequences WHERE key IN ({marks})", list(unique)
        )
        created = {}
        for row in rows:
            key = bytes(row[1])
            created[key] = row[0] > above
            if not created[key]:
                unique[key] = _record(row[1:])
        if len(created) != len(new) or sum(created.values()) != inserted:
            raise StoreError(f"sequences: {inserted} of {len(new)} names inserted, not told apart from the stored")
    results: list[tuple[SequenceRecord, bool]] = []
    for record in records:
        first = created.pop(record.key, False)  # (a name twice: its later entries find the first)
        results.append((record if first else unique[record.key], first))
    return results


def _raise_ceiling(db: sqlite3.Connection, item: tuple[bytes, int]) -> int:
    key, ceiling = item
    row = db.execute("SELECT ceiling FROM sequences WHERE key = ?", (key,)).fetchone()
    if row is None:
        raise GuardFailed(f"sequence {key!r} is not in the store")
    stored = int(row[0])
    if stored >= ceiling:
        return stored  # an earlier write of this server that landed after its caller gave up
    db.execute("UPDATE sequences SET ceiling = ? WHERE key = ?", (str(ceiling), key))
    return ceiling


def _replace_settings(db: sqlite3.Connection, item: tuple[bytes, str]) -> None:
    key, settings = item
    if db.execute("UPDATE sequences SET settings = ? WHERE key = ?", (settings, key)).rowcount != 1:
        raise GuardFailed(f"sequence {key!r} is not in the store")


def _stored_worker(db: sqlite3.Connection, namespace: bytes, worker_id: int) -> WorkerRecord | None:
    row = db.execute(
        "SELECT token, expires_ms, floor_ms, ttl FROM workers WHERE namespace = ? AND id = ?", (namespace, worker_id)
    ).fetchone()
    if row is None:
        return None
    return WorkerRecord(namespace, worker_id, bytes(row[0]), int(row[1]), int(row[2]), int(row[3]))


def _put_worker(db: sqlite3.Connection, record: WorkerRecord) -> None:
    db.execute(
        "INSERT OR REPLACE INTO workers (namespace, id, token, expires_ms, floor_ms, ttl) VALUES (?, ?, ?, ?, ?, ?)",
        (record.namespace, record.id, record.token, record.expires_ms, record.upto_ms, record.ttl),
    )


def _swap_worker(db: sqlite3.Connection, item: tuple[WorkerRecord, WorkerRecord | None]) -> bool:
    """Compare-and-set one worker record inside the write transaction."""
    record, expected = item
    if _stored_worker(db, record.namespace, record.id) != expected:
        return False
    _put_worker(db, record)
    return True


def _delete_worker(db: sqlite3.Connection, record: WorkerRecord) -> bool:
    """Compare-and-delete one worker record, its floor kept as the retired floor, inside the write transaction."""
    if _stored_worker(db, record.namespace, record.id) != record:
        return False
    db.execute("DELETE FROM workers WHERE namespace = ? AND id = ?", (record.namespace, record.id))
    db.execute(_RAISE_RETIRED, (record.upto_ms,))
    return True


def _raise_sequences(db: sqlite3.Connection, records: list[SequenceRecord], dry_run: bool) -> list[Restored]:
    """``raise_sequence`` for each record, inside one write transaction (a name twice meets the first)."""
    marks = ",".join("?" * len(records))
    rows = db.execute(
        f"SELECT key, kind, ceiling, settings FROM sequences WHERE key IN ({marks})", [r.key for r in records]
    )
    found: dict[bytes, SequenceRecord] = {bytes(row[0]): _record(row) for row in rows}
    out = []
    for record in records:
        outcome, new = raise_sequence(record, found.get(record.key))
        if new is not None and not dry_run:
            if outcome is Restored.CREATED:
                _insert(db, new)
            else:
                db.execute("UPDATE sequences SET ceiling = ? WHERE key = ?", (str(new.ceiling), new.key))
            found[new.key] = new
        out.append(outcome)
    return out


def _raise_worker(db: sqlite3.Connection, record: WorkerRecord, dry_run: bool) -> Restored:
    outcome, new = raise_worker(record, _stored_worker(db, record.namespace, record.id))
    if new is not None and not dry_run:
        _put_worker(db, new)
    return outcome


def _raise_retired(db: sqlite3.Connection, floor_ms: int, dry_run: bool) -> Restored:
    row = db.execute("SELECT floor_ms FROM workers_retired").fetchone()
    if row is not None and int(row[0]) >= floor_ms:
        return Restored.UNCHANGED
    if not dry_run:
        db.execute(_RAISE_RETIRED, (floor_ms,))
    return Restored.RAISED


def _names(joined: str | None) -> list[bytes]:
    """A page of names read as one value (``group_concat`` of their hex, None: no names): the page
    is one step of SQLite with the GIL released, not a step per row each taking the GIL back (in
    the middle of a flood of listings that was a GIL hand-over per name, and the writer's thread,
    which a new key's reply waits on, queued behind them); decoding it is one short hold."""
    return [] if joined is None else list(map(bytes.fromhex, joined.split(",")))


def _record(row: tuple[bytes, str, str, str]) -> SequenceRecord:
    return SequenceRecord(key=bytes(row[0]), kind=row[1], ceiling=int(row[2]), settings=json.loads(row[3]))
