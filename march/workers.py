"""Worker ids for embedded snowflake generators: who holds which of a namespace's 1024 ids.

An application that makes snowflake IDs itself needs a worker id (the 10-bit field) that no other
live process uses, and a time below which it must not issue (what earlier holders of that id
may have used). The protocol (the client in ``clients/`` depends on it exactly):

- ``WORKER.ACQUIRE ns [TTL s]`` -> ``[id, token, ttl_seconds, floor_ms]``: the lowest free id
  (never held, released, or expired for at least ``worker_margin`` seconds), a random token
  naming this holding, the TTL granted (default ``worker_ttl``, 1..86400), and ``floor_ms``: the
  highest Unix ms any earlier holder declared (``UPTO``), 0 if none. The holder must only issue
  IDs whose time is strictly greater than ``floor_ms``.
- ``WORKER.RENEW ns id token [UPTO ms]`` -> ttl_seconds: the holding lasts until now + ttl;
  ``UPTO`` ("I will not issue times above this until my next renew") is stored as
  ``floor = max(floor, UPTO)`` durably before the reply. An expired holding nobody re-acquired
  renews fine; a token that does not match (re-acquired, released, unknown) is an error, and the
  holder must stop issuing IDs at once.
- ``WORKER.RELEASE ns id token [UPTO ms]`` -> OK: the floor as for RENEW, and the id is free at
  once (the holder said it is done: no margin).
- ``WORKER.LIST ns``: the ids with a holding (live, or expired and still resting), for operators.

Invariants: a live id is never held by two holders; an expired id is handed out again only
``worker_margin`` seconds after its expiry (the margin covers clock skew between nodes, and a
holder's own lag behind its TTL); floors never decrease. Expiry is the server's wall clock in
Unix ms, stored in the record, so a new primary after a failover judges it the same way.

How: every change is a compare-and-set of one record in the store (``Store.save_worker``),
guarded by leadership like a ceiling write, against the record just read: two ACQUIREs in one
loop turn, or a deposed primary racing the new one, can never both take an id (the loser reads
again and picks another). Operations on one namespace also run one at a time here, so concurrent
ACQUIREs do not keep losing to each other. Each operation waits at most ``max_wait``, then gets
TRYAGAIN (a write that lands after that is harmless: an acquired id nobody learned of expires).

This module never hands out a sequence ID, never reads a key of the keyspace, and never deletes
a record (a released id keeps its floor for the next holder).
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from . import errors
from .config import Config
from .errors import CommandError
from .generators.base import NotServing, WallClock
from .serving import ServingState, Term
from .store.base import GuardFailed, Store, WorkerRecord

IDS = 1024  # the classic snowflake worker field: 10 bits
MAX_TTL = 86_400
_ATTEMPTS = 16  # compare-and-set rounds before giving up (each lost round means someone else wrote)

T = TypeVar("T")


def new_token() -> bytes:
    return secrets.token_hex(16).encode()


class Workers:
    """The worker ids a group serves; every change is durable before its reply."""

    def __init__(
        self,
        config: Config,
        store: Store,
        state: ServingState,
        wall: WallClock = time.time,
        token: Callable[[], bytes] = new_token,
    ) -> None:
        self.config = config
        self.store = store
        self.state = state
        self._wall = wall
        self._token = token
        self._locks: dict[bytes, tuple[asyncio.Lock, int]] = {}  # namespace -> (lock, users)

    def _now_ms(self) -> int:
        return int(self._wall() * 1000)

    def check_namespace(self, namespace: bytes) -> None:
        if not 1 <= len(namespace) <= self.config.max_key_len:
            raise CommandError(errors.WORKER_NAMESPACE.format(self.config.max_key_len))

    # --- the operations --------------------------------------------------------------------------

    async def acquire(self, namespace: bytes, ttl: int | None = None) -> tuple[int, bytes, int, int]:
        """(id, token, ttl, floor_ms) of a new holding of the lowest free id."""
        self.check_namespace(namespace)
        ttl = self.config.worker_ttl if ttl is None else ttl
        if not 1 <= ttl <= MAX_TTL:
            raise CommandError(errors.WORKER_TTL)
        return await self._bounded(namespace, self._acquire(namespace, ttl))

    async def _acquire(self, namespace: bytes, ttl: int) -> tuple[int, bytes, int, int]:
        margin_ms = int(self.config.worker_margin * 1000)
        for _ in range(_ATTEMPTS):
            term = self._term()
            now = self._now_ms()
            held = {r.id: r for r in await self._store(self.store.load_workers(namespace))}
            free = next((i for i in range(IDS) if _free(held.get(i), now, margin_ms)), None)
            if free is None:
                raise CommandError(errors.WORKER_NONE_FREE.format(_text(namespace)))
            old = held.get(free)
            floor = old.floor_ms if old is not None else 0
            record = WorkerRecord(namespace, free, self._token(), now + ttl * 1000, floor, ttl)
            if await self._swap(record, old, term):
                return free, record.token, ttl, floor
        raise CommandError(errors.TRYAGAIN_WORKERS.format(_text(namespace)))

    async def renew(self, namespace: bytes, worker_id: int, token: bytes, upto: int = 0) -> int:
        """Extend a holding to now + its ttl, its floor raised to ``upto``; the ttl granted."""
        self.check_namespace(namespace)

        def renewed(record: WorkerRecord, now: int) -> WorkerRecord:
            return dataclasses.replace(record, expires_ms=now + record.ttl * 1000, floor_ms=max(record.floor_ms, upto))

        return (await self._bounded(namespace, self._change(namespace, worker_id, token, renewed))).ttl

    async def release(self, namespace: bytes, worker_id: int, token: bytes, upto: int = 0) -> None:
        """End a holding now (its id is free at once), its floor raised to ``upto``."""
        self.check_namespace(namespace)

        def released(record: WorkerRecord, now: int) -> WorkerRecord:
            return dataclasses.replace(record, token=b"", expires_ms=now, floor_ms=max(record.floor_ms, upto))

        await self._bounded(namespace, self._change(namespace, worker_id, token, released))

    async def _change(
        self, namespace: bytes, worker_id: int, token: bytes, change: Callable[[WorkerRecord, int], WorkerRecord]
    ) -> WorkerRecord:
        for _ in range(_ATTEMPTS):
            term = self._term()
            found = await self._store(self.store.load_workers(namespace, worker_id))
            old = found[0] if found else None
            if old is None or not token or old.token != token:
                raise CommandError(errors.WORKER_NOT_HELD.format(worker_id, _text(namespace)))
            record = change(old, self._now_ms())
            if await self._swap(record, old, term):
                return record
        raise CommandError(errors.TRYAGAIN_WORKERS.format(_text(namespace)))

    async def list(self, namespace: bytes) -> list[tuple[WorkerRecord, bool]]:
        """The holdings of ``namespace`` that still count (live, or resting): (record, live)."""
        self.check_namespace(namespace)
        self._term()
        now = self._now_ms()
        margin_ms = int(self.config.worker_margin * 1000)
        records = await self._bounded(namespace, self._store(self.store.load_workers(namespace)))
        return [(r, now < r.expires_ms) for r in records if not _free(r, now, margin_ms)]

    # --- plumbing --------------------------------------------------------------------------------

    def _term(self) -> Term:
        term = self.state.term
        if term is None or not self.state.serving:
            raise NotServing(term.ended if term is not None else "not serving")
        return term

    async def _store(self, call: Awaitable[T]) -> T:
        return await asyncio.wait_for(call, self.config.store_timeout)

    async def _swap(self, record: WorkerRecord, old: WorkerRecord | None, term: Term) -> bool:
        try:
            return await self._store(self.store.save_worker(record, old, term.guard))
        except GuardFailed as exc:  # leadership is gone: the term ends, the request got nothing
            term.lost(str(exc))
            raise NotServing(str(exc)) from None

    async def _bounded(self, namespace: bytes, work: Awaitable[T]) -> T:
        """Run ``work`` alone in its namespace, for at most ``max_wait`` (then TRYAGAIN)."""
        try:
            async with asyncio.timeout(self.config.max_wait), self._alone(namespace):
                return await work
        except TimeoutError:
            raise CommandError(errors.TRYAGAIN_WORKERS.format(_text(namespace))) from None

    @asynccontextmanager
    async def _alone(self, namespace: bytes) -> AsyncIterator[None]:
        lock, users = self._locks.get(namespace) or (asyncio.Lock(), 0)
        self._locks[namespace] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[namespace]
            if users <= 1:
                del self._locks[namespace]
            else:
                self._locks[namespace] = (lock, users - 1)


def _free(record: WorkerRecord | None, now_ms: int, margin_ms: int) -> bool:
    """Never held, released, or expired at least ``margin_ms`` ago."""
    return record is None or not record.token or now_ms >= record.expires_ms + margin_ms


def _text(namespace: bytes) -> str:
    return namespace.decode("utf-8", "replace")
