"""The embedded store: one SQLite file in the data dir, for a single node with no etcd.

- ``<data_dir>/march.sqlite3`` in WAL mode with ``synchronous=FULL``: a write that returned is on
  disk, through a crash or power loss.
- Every call runs on one dedicated thread, so the event loop never blocks on disk and writes land
  in the order they were made.
- ``<data_dir>/march.lock`` is held with an exclusive ``flock`` for the life of the server, so a
  second server on the same data dir refuses to start (two writers would hand out the same IDs).
- The guard is trivial (the lock is the leadership); the "new ceiling > stored" check is still
  made inside the write transaction.

Ceilings are stored as decimal text: the largest ceiling, 2**63, does not fit SQLite's INTEGER.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from .base import Guard, GuardFailed, SequenceRecord, Store, StoreError, StoreLocked

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sequences (
    key      BLOB PRIMARY KEY,
    kind     TEXT NOT NULL,
    ceiling  TEXT NOT NULL,
    settings TEXT NOT NULL
)
"""


class SqliteStore(Store):
    name = "sqlite"

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(data_dir)
        self.path = self.dir / "march.sqlite3"
        self._lock_fd: int | None = None
        self._db: sqlite3.Connection | None = None
        self._pool: ThreadPoolExecutor | None = None

    async def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / "march.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StoreLocked(
                f"data dir {self.dir} is in use by another March server (pid {holder}); "
                "two servers on one data dir would hand out the same IDs"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="march-sqlite")
        try:
            await self._run(self._open_db)
        except BaseException:
            await self.close()
            raise

    def _open_db(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute(_SCHEMA)
        self._db = db

    async def close(self) -> None:
        if self._pool is not None:
            if self._db is not None:
                await self._run(self._db.close)
            self._pool.shutdown(wait=True)
            self._pool = None
            self._db = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._pool is None:
            raise StoreError("store is closed")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite: {exc}") from exc

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError("store is closed")
        return self._db

    async def load(self, key: bytes) -> SequenceRecord | None:
        return await self._run(self._load, key)

    def _load(self, key: bytes) -> SequenceRecord | None:
        row = (
            self._conn().execute("SELECT key, kind, ceiling, settings FROM sequences WHERE key = ?", (key,)).fetchone()
        )
        return _record(row) if row else None

    async def load_all(self) -> list[SequenceRecord]:
        return await self._run(self._load_all)

    def _load_all(self) -> list[SequenceRecord]:
        rows = self._conn().execute("SELECT key, kind, ceiling, settings FROM sequences ORDER BY rowid").fetchall()
        return [_record(r) for r in rows]

    async def create(self, record: SequenceRecord, guard: Guard) -> bool:
        return await self._run(self._create, record)

    def _create(self, record: SequenceRecord) -> bool:
        cur = self._conn().execute(
            "INSERT OR IGNORE INTO sequences (key, kind, ceiling, settings) VALUES (?, ?, ?, ?)",
            (record.key, record.kind, str(record.ceiling), json.dumps(dict(record.settings), sort_keys=True)),
        )
        return cur.rowcount == 1

    async def save_ceiling(self, key: bytes, ceiling: int, guard: Guard) -> None:
        await self._run(self._save_ceiling, key, ceiling)

    def _save_ceiling(self, key: bytes, ceiling: int) -> None:
        db = self._conn()
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT ceiling FROM sequences WHERE key = ?", (key,)).fetchone()
            if row is None or int(row[0]) >= ceiling:
                raise GuardFailed(f"stored ceiling {row and row[0]} is not below {ceiling} for {key!r}")
            db.execute("UPDATE sequences SET ceiling = ? WHERE key = ?", (str(ceiling), key))
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def describe(self) -> dict[str, Any]:
        return {"store": self.name, "store_path": str(self.path)}


def _record(row: tuple[bytes, str, str, str]) -> SequenceRecord:
    return SequenceRecord(key=bytes(row[0]), kind=row[1], ceiling=int(row[2]), settings=json.loads(row[3]))
