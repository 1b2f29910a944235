"""Worker ids for embedded snowflake generators: who holds which of a namespace's 1024 ids.

An application that makes snowflake IDs itself needs a worker id (the 10-bit field) that no other
live process uses, and a time below which it must not issue (what earlier holders of that id
may have used). The protocol (the client in ``clients/`` depends on it exactly):

- ``WORKER.ACQUIRE ns [TTL s]`` -> ``[id, token, ttl_seconds, upto_ms]``: the lowest free id
  (never held, released, or expired for at least ``worker_margin`` seconds), a random token
  naming this holding, the TTL granted (default ``worker_ttl``, 1..86400), and ``upto_ms``: the
  highest Unix ms any earlier holder declared (``UPTO``), 0 if none. The holder must only issue
  IDs whose time is strictly greater than ``upto_ms`` (the Python client keeps it as ``floor_ms``).
- ``WORKER.RENEW ns id token [UPTO ms]`` -> ttl_seconds: the holding lasts another ttl from now;
  ``UPTO`` ("I will not issue times above this until my next renew") is stored as
  ``upto_ms = max(upto_ms, UPTO)`` durably before the reply. An expired holding nobody re-acquired
  renews fine; a token that does not match (re-acquired, released, unknown) is an error, and the
  holder must stop issuing IDs at once.
- ``WORKER.RELEASE ns id token [UPTO ms]`` -> OK: ``UPTO`` as for RENEW, and the id is free at
  once (the holder said it is done: no margin).
- ``WORKER.LIST ns``: the ids with a holding (live, or expired and still resting), for operators,
  each with the wall-clock time (Unix ms) this primary expects it to expire.

**What a holder relies on.** A holder counts its holding as its own until the *send* time of its
last confirmed ACQUIRE or RENEW plus the TTL, on its own monotonic clock (the Python client stops
a little earlier still). The invariant: no id is ever handed to a new holder before every earlier
holder's deadline, so two holders are never live at once, whatever any clock does.

**Expiry runs on this primary's monotonic clock, never on a wall clock.** A holding with a token
is *live* until ``ttl`` seconds after its *base*, *resting* for ``worker_margin`` seconds more,
then free (a released one is free at once). The base of an id is the later of:

- ``started``: when this primary's term began (its promotion; on a single node, and for a term
  that was already running when this object was made, its first worker command, which comes after
  the store was opened and locked), and
- the moment this primary last began writing a holding of that id (an ACQUIRE or a RENEW, taken
  before the write: after the holder sent its request).

Both are at or after the send time of the request that made the stored record: a write of an
earlier primary (or an earlier process on the data dir) was applied before this primary's
leadership existed, hence before it started. So a record this primary never saw written is live
for its TTL + margin *from the moment this primary starts*, after a takeover or a restart alike
(an id whose holder died just before a failover rests a little longer, never less), and a wall
clock set forwards or backwards changes nothing. The margin covers the rate difference between
the primary's and the holders' clocks and a holder's lateness. ``expires_ms`` in a stored record
is wall-clock time for operators, never used to decide.

**An id's UPTO** (``WorkerRecord.upto_ms``) is Unix ms by nature (it bounds the time field of IDs
the holders make) and only ever rises: ``max`` of every declared ``UPTO``. A new holding starts
above the max of its id's record's UPTO and the store's *retired UPTO*, the highest UPTO of every
record ever deleted (``Store.delete_worker`` raises it in the same atomic step), so deleting a
record never loses a declared time, whichever wall clock judged it old. (Stored, it keeps the
name it always had: ``floor_ms`` in etcd's JSON, SQLite's columns and backup files, so existing
data reads as before; "floor" in this code means a sequence's floor only.)

**Deleting records.** Records would otherwise pile up forever (a client acquiring in new
namespaces in a loop writes thousands per second). A sweeper, one task per term started by the
term's first worker command, looks at each namespace when a record of it may have become
deletable and deletes (a guarded compare-and-delete) each record that is free *and* whose UPTO is
at least ``RETIRE_AGE_MS`` in the past on this primary's wall clock. The second condition is not
needed for safety (the retired UPTO is); it keeps a holder whose clock ran ahead in its own record
instead of pushing every new holding's start ahead. A wall clock set far forwards can only make
the retired UPTO, hence new holders' first IDs, run ahead: never a repeat.

**Limits.** ``worker_max_holders``: ids held or resting per namespace (the lowest free id is always
below it, so a namespace never has more records). ``worker_max_namespaces``: namespaces with
records. This primary counts them once per term (``Store.worker_namespaces``, a page at a time, in
the sweeper's task), then follows its own creations and deletions: no request scans the store. An
ACQUIRE in a namespace without records waits for that count (within ``max_wait``) and is refused
with ``WORKER_NAMESPACES`` at the limit; a namespace counts until the sweeper deletes its last record.

How: every change is a compare-and-set of one record in the store (``Store.save_worker``),
guarded by leadership like a ceiling write, against the record just read: two ACQUIREs in one
loop turn, or a deposed primary racing the new one, can never both take an id (the loser reads
again and picks another). Operations on one namespace (the sweeper's included) run one at a time
here, so concurrent ACQUIREs do not keep losing to each other. Each operation waits at most
``max_wait``, then gets TRYAGAIN (a write that lands after that is harmless: an acquired id nobody
learned of expires, and its base was taken before the write).

This module never hands out a sequence ID, never reads a key of the keyspace, never decides
expiry on a wall clock, and never deletes a record that is not free or without keeping its UPTO.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import math
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import TypeVar

from march import errors
from march.config import Config
from march.errors import CommandError, GuardFailed, StoreError
from march.generators.bound import Monotonic, NotServing, WallClock
from march.keyspace.serving import Change, Phase, ServingState, Term
from march.store.contract import Store, WorkerRecord

IDS = 1024  # the classic snowflake worker field: 10 bits
MAX_TTL = 86_400
_ATTEMPTS = 16  # compare-and-set rounds before giving up (each lost round means someone else wrote)
# A free record goes only once its UPTO is this far in the past on the primary's wall clock: a holder
# whose clock ran ahead keeps its own record instead of raising every new holding's start (safety comes
# from the retired UPTO, not from this).
RETIRE_AGE_MS = 60_000
SWEEP_PERIOD = 1.0  # seconds between the sweeper's rounds (and its pause after a failed store call)
SWEEP_NAMESPACES = 16  # namespaces one round reads at most: one store read each
SWEEP_DELETES = 64  # deletes per namespace per round: the namespace's other requests wait meanwhile
SCAN_PAGE = 64  # store keys per page when a new primary counts the namespaces (names are up to 64 KiB)

T = TypeVar("T")

log = logging.getLogger("march.keyspace.worker_ids")


def new_token() -> bytes:
    return secrets.token_hex(16).encode()


class Standing(Enum):
    """What a record is to this primary now (the value is WORKER.LIST's word for it)."""

    LIVE = b"live"  # its holder may be issuing IDs: never handed out
    RESTING = b"expired"  # past its TTL, within the margin: not handed out yet
    FREE = b"free"  # released, or expired at least the margin ago: the next ACQUIRE may take it


@dataclass(frozen=True)
class Listed:
    """One holding in WORKER.LIST: its record, its standing, and when this primary expects it to
    expire, as Unix ms of its wall clock (for people; never used to decide)."""

    record: WorkerRecord
    standing: Standing
    expires_ms: int


@dataclass
class _Known:
    """What this primary knows of the worker records in one term."""

    term: Term
    started: float  # monotonic seconds: every record is live for its TTL + margin from here
    seen: dict[tuple[bytes, int], float] = field(default_factory=dict)  # (ns, id) -> last write of a holding began
    due: dict[bytes, float] = field(default_factory=dict)  # namespace with records -> when the sweeper looks next
    counted: asyncio.Event = field(default_factory=asyncio.Event)  # ``due`` has every namespace of the store
    retired: int | None = None  # the store's retired UPTO (None: not read yet in this term)

    def base(self, record: WorkerRecord) -> float:
        return max(self.started, self.seen.get((record.namespace, record.id), self.started))

    def standing(self, record: WorkerRecord, now: float, margin: float) -> Standing:
        if not record.token:
            return Standing.FREE
        end = self.base(record) + record.ttl
        if now < end:
            return Standing.LIVE
        return Standing.RESTING if now < end + margin else Standing.FREE

    def deletable_at(self, record: WorkerRecord, now: float, wall_ms: int, margin: float) -> float:
        """The monotonic time from which ``record`` may be deleted (at most ``now``: it may be now)."""
        free = now if not record.token else self.base(record) + record.ttl + margin
        aged = now + max(0, record.upto_ms + RETIRE_AGE_MS - wall_ms) / 1000
        return max(free, aged)


class _Serial:
    """Operations on one namespace run one at a time, each for at most ``max_wait`` (then TRYAGAIN)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._locks: dict[bytes, tuple[asyncio.Lock, int]] = {}  # namespace -> (lock, users)

    async def run(self, namespace: bytes, work: Awaitable[T]) -> T:
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


class _Records:
    """The worker records in the store: every call bounded by ``store_timeout``; a guarded write
    refused for leadership ends the term (``NotServing``), as a ceiling write's would."""

    def __init__(self, config: Config, store: Store) -> None:
        self.config = config
        self.store = store

    async def call(self, call: Awaitable[T]) -> T:
        return await asyncio.wait_for(call, self.config.store_timeout)

    async def swap(self, record: WorkerRecord, old: WorkerRecord | None, term: Term) -> bool:
        try:
            return await self.call(self.store.save_worker(record, old, term.guard))
        except GuardFailed as exc:  # leadership is gone: the term ends, the request got nothing
            term.lost(str(exc))
            raise NotServing(str(exc)) from None

    async def delete(self, record: WorkerRecord, term: Term) -> bool:
        try:
            return await self.call(self.store.delete_worker(record, term.guard))
        except GuardFailed as exc:
            term.lost(str(exc))
            raise NotServing(str(exc)) from None

    async def retired(self, known: _Known) -> int:
        """The store's retired UPTO: read once per term, then raised here by this term's deletes."""
        if known.retired is None:
            stored = await self.call(self.store.retired_worker_upto())
            known.retired = max(stored, known.retired or 0)
        return known.retired


class _Sweeper:
    """Deletes the records that may go ("Deleting records" above), one task per term, which first
    counts the store's namespaces (the ``worker_max_namespaces`` limit). ``know`` gives the current
    term's ``_Known`` (NotServing: none); ``current`` the one known now, without starting anything."""

    def __init__(
        self,
        config: Config,
        state: ServingState,
        records: _Records,
        serial: _Serial,
        busy: dict[bytes, int],
        clocks: tuple[Monotonic, Callable[[], int]],
        terms: tuple[Callable[[], _Known], Callable[[], _Known | None]],
    ) -> None:
        self.config = config
        self.state = state
        self.records = records
        self.serial = serial
        self.busy = busy  # the Workers' own dict: a namespace the sweeper empties leaves it
        self._mono, self._wall_ms = clocks
        self._know, self._current = terms

    def schedule(self, known: _Known, record: WorkerRecord) -> None:
        """The sweeper looks at ``record``'s namespace by the time the record may go."""
        at = known.deletable_at(record, self._mono(), self._wall_ms(), self.config.worker_margin)
        known.due[record.namespace] = min(known.due.get(record.namespace, math.inf), at)

    async def sweep(self) -> int:
        """One round: read the namespaces due (at most ``SWEEP_NAMESPACES``), delete what may go.

        How many records went. Runs every ``SWEEP_PERIOD`` in the sweeper; tests call it directly."""
        try:
            known = self._know()
        except NotServing:
            return 0
        if not known.counted.is_set():
            return 0
        now = self._mono()
        due = list(itertools.islice((ns for ns, at in known.due.items() if at <= now), SWEEP_NAMESPACES))
        gone = 0
        for namespace in due:
            try:
                gone += await self.serial.run(namespace, self._sweep(known, namespace))
            except NotServing:
                break
            except (CommandError, StoreError, TimeoutError) as exc:  # still due: the next round tries again
                log.debug("worker sweep of %r: %s", namespace, exc)
        return gone

    async def _sweep(self, known: _Known, namespace: bytes) -> int:
        records = await self.records.call(self.records.store.load_workers(namespace))
        if not records:
            known.due.pop(namespace, None)  # the namespace is gone (or its first write never landed)
            self.busy.pop(namespace, None)
            return 0
        await self.records.retired(known)  # known before any delete, so this term's deletes keep it exact
        gone, kept, later = 0, 0, math.inf
        for record in records:
            now, wall_ms = self._mono(), self._wall_ms()
            at = known.deletable_at(record, now, wall_ms, self.config.worker_margin)
            if at <= now and gone < SWEEP_DELETES:
                known.retired = max(known.retired or 0, record.upto_ms)  # first: a delete may land unconfirmed
                if await self.records.delete(record, known.term):
                    known.seen.pop((namespace, record.id), None)
                    gone += 1
                    continue
            kept += 1
            later = min(later, at)  # at <= now: changed meanwhile, or over SWEEP_DELETES: the next round
        if kept:
            known.due[namespace] = later
        else:
            known.due.pop(namespace, None)
            self.busy.pop(namespace, None)
        return gone

    async def _count(self, known: _Known) -> None:
        """Every namespace of the store into ``known.due`` (due now: each is read in turn), a page at a time."""
        after: bytes | None = None
        while self._current() is known:
            try:
                page = await self.records.call(self.records.store.worker_namespaces(after, SCAN_PAGE))
            except (StoreError, TimeoutError) as exc:
                log.debug("counting worker namespaces: %s", exc)
                await self.state.clock.sleep(SWEEP_PERIOD)
                continue
            if not page:
                known.counted.set()
                return
            now = self._mono()
            for namespace in page:
                known.due.setdefault(namespace, now)
            after = page[-1]

    async def run(self, known: _Known) -> None:
        """The sweeper task of ``known``'s term."""
        # It stops when its term is no longer the one known, not only when cancelled: Python 3.11's
        # wait_for drops a cancellation that arrives as the awaited call completes.
        await self._count(known)
        while self._current() is known:
            await self.state.clock.sleep(SWEEP_PERIOD)
            if self._current() is known and self.state.serving:
                try:
                    await self.sweep()
                except Exception:  # a bug: say so, and keep the sweeper (and its term) going
                    log.exception("worker sweep failed")


class Workers:
    """The worker ids a group serves; every change is durable before its reply.

    The operations and the term they run in are here; one namespace's operations run one at a
    time (``_Serial``), the store calls are ``_Records``' and deleting is the ``_Sweeper``'s."""

    def __init__(
        self,
        config: Config,
        store: Store,
        state: ServingState,
        wall: WallClock = time.time,
        mono: Monotonic = time.monotonic,
        token: Callable[[], bytes] = new_token,
    ) -> None:
        self.config = config
        self.store = store
        self.state = state
        self._wall = wall
        self._mono = mono
        self._token = token
        self._known: _Known | None = None
        self._promoted: tuple[Term, float] | None = None  # the last promotion seen, and when
        self._sweeper: asyncio.Task[None] | None = None
        self._ending: list[asyncio.Task[None]] = []  # sweepers of ended terms, cancelled (``drain``)
        # Ids held (live or resting) in each namespace as the last acquire there found them, plus the
        # one it took: the metric of how close a namespace is to worker_max_holders. Only namespaces
        # with records (at most worker_max_namespaces): the sweeper drops a namespace it empties,
        # and the whole dict goes when the term ends.
        self.busy: dict[bytes, int] = {}
        self._serial = _Serial(config)
        self._records = _Records(config, store)
        self._sweeps = _Sweeper(
            config,
            state,
            self._records,
            self._serial,
            self.busy,
            (mono, self._wall_ms),
            (lambda: self._know(self._term()), lambda: self._known),
        )
        state.subscribe(self._on_change)

    def _wall_ms(self) -> int:
        return int(self._wall() * 1000)

    def check_namespace(self, namespace: bytes) -> None:
        if not 1 <= len(namespace) <= self.config.max_key_len:
            raise CommandError(errors.WORKER_NAMESPACE.format(self.config.max_key_len))

    # --- the operations --------------------------------------------------------------------------

    async def acquire(self, namespace: bytes, ttl: int | None = None) -> tuple[int, bytes, int, int]:
        """(id, token, ttl, upto_ms) of a new holding of the lowest free id."""
        self.check_namespace(namespace)
        ttl = self.config.worker_ttl if ttl is None else ttl
        if not 1 <= ttl <= MAX_TTL:
            raise CommandError(errors.WORKER_TTL)
        return await self._serial.run(namespace, self._acquire(namespace, ttl))

    async def _acquire(self, namespace: bytes, ttl: int) -> tuple[int, bytes, int, int]:
        for _ in range(_ATTEMPTS):
            term = self._term()
            known = self._know(term)
            records = await self._records.call(self.store.load_workers(namespace))
            now, margin = self._mono(), self.config.worker_margin
            standing = {r.id: known.standing(r, now, margin) for r in records}
            busy = sum(1 for s in standing.values() if s is not Standing.FREE)
            if busy >= self.config.worker_max_holders:
                self.busy[namespace] = busy  # a namespace with records: one counted already
                raise CommandError(errors.WORKER_NONE_FREE.format(_text(namespace), busy))
            if not records:
                await self._room(known, namespace)
            # busy < worker_max_holders <= IDS: one of the ids 0..busy is free
            free = next(i for i in range(IDS) if standing.get(i, Standing.FREE) is Standing.FREE)
            old = next((r for r in records if r.id == free), None)
            upto = max(old.upto_ms if old is not None else 0, await self._records.retired(known))
            known.seen[(namespace, free)] = self._mono()  # before the write: after the holder sent its request
            record = WorkerRecord(namespace, free, self._token(), self._wall_ms() + ttl * 1000, upto, ttl)
            if await self._records.swap(record, old, term):
                self.busy[namespace] = busy + 1
                self._sweeps.schedule(known, record)
                return free, record.token, ttl, upto
        raise CommandError(errors.TRYAGAIN_WORKERS.format(_text(namespace)))

    async def renew(self, namespace: bytes, worker_id: int, token: bytes, upto: int = 0) -> int:
        """Extend a holding by its ttl from now, its UPTO raised to ``upto``; the ttl granted."""
        self.check_namespace(namespace)

        def renewed(record: WorkerRecord, wall_ms: int) -> WorkerRecord:
            return dataclasses.replace(
                record, expires_ms=wall_ms + record.ttl * 1000, upto_ms=max(record.upto_ms, upto)
            )

        work = self._change(namespace, worker_id, token, renewed, holding=True)
        return (await self._serial.run(namespace, work)).ttl

    async def release(self, namespace: bytes, worker_id: int, token: bytes, upto: int = 0) -> None:
        """End a holding now (its id is free at once), its UPTO raised to ``upto``."""
        self.check_namespace(namespace)

        def released(record: WorkerRecord, wall_ms: int) -> WorkerRecord:
            return dataclasses.replace(record, token=b"", expires_ms=wall_ms, upto_ms=max(record.upto_ms, upto))

        await self._serial.run(namespace, self._change(namespace, worker_id, token, released, holding=False))

    async def _change(
        self,
        namespace: bytes,
        worker_id: int,
        token: bytes,
        change: Callable[[WorkerRecord, int], WorkerRecord],
        holding: bool,
    ) -> WorkerRecord:
        for _ in range(_ATTEMPTS):
            term = self._term()
            known = self._know(term)
            found = await self._records.call(self.store.load_workers(namespace, worker_id))
            old = found[0] if found else None
            if old is None or not token or old.token != token:
                raise CommandError(errors.WORKER_NOT_HELD.format(worker_id, _text(namespace)))
            if holding:
                known.seen[(namespace, worker_id)] = self._mono()  # before the write, as for ACQUIRE
            record = change(old, self._wall_ms())
            if await self._records.swap(record, old, term):
                self._sweeps.schedule(known, record)
                return record
        raise CommandError(errors.TRYAGAIN_WORKERS.format(_text(namespace)))

    async def list(self, namespace: bytes) -> list[Listed]:
        """The holdings of ``namespace`` that still count (live, or resting)."""
        self.check_namespace(namespace)
        known = self._know(self._term())
        records = await self._serial.run(namespace, self._records.call(self.store.load_workers(namespace)))
        now, wall_ms, margin = self._mono(), self._wall_ms(), self.config.worker_margin
        out = []
        for r in records:
            standing = known.standing(r, now, margin)
            if standing is not Standing.FREE:
                out.append(Listed(r, standing, wall_ms + round((known.base(r) + r.ttl - now) * 1000)))
        return out

    async def sweep(self) -> int:
        """One round of the sweeper (``_Sweeper.sweep``): how many records went. Tests call it directly."""
        return await self._sweeps.sweep()

    # --- limits ----------------------------------------------------------------------------------

    async def _room(self, known: _Known, namespace: bytes) -> None:
        """``namespace`` has no records: count it, or refuse it at ``worker_max_namespaces``."""
        if namespace in known.due:
            return
        await known.counted.wait()  # within the request's max_wait: TRYAGAIN if the count takes longer
        if namespace in known.due:
            return
        limit = self.config.worker_max_namespaces
        if len(known.due) >= limit:
            raise CommandError(errors.WORKER_NAMESPACES.format(limit))
        known.due[namespace] = self._mono()  # counted from now; if nothing lands, the sweeper drops it

    # --- following the serving state -------------------------------------------------------------

    def _on_change(self, change: Change) -> None:
        if change.phase is Phase.PROMOTING and change.term is not None:
            self._promoted = (change.term, self._mono())  # after the leader key was won: the term's start
        elif change.phase is Phase.STANDBY and self._known is not None and self._known.term is change.term:
            self._forget()

    def _know(self, term: Term) -> _Known:
        """What this primary knows in ``term``; the first call of a term starts its sweeper."""
        known = self._known
        if known is not None and known.term is term:
            return known
        self._forget()
        promoted = self._promoted
        started = promoted[1] if promoted is not None and promoted[0] is term else self._mono()
        known = self._known = _Known(term, started)
        self._sweeper = asyncio.get_running_loop().create_task(self._sweeps.run(known), name="march-worker-sweeper")
        return known

    def _forget(self) -> None:
        """The term ended: what was known goes, its sweeper stops (``drain`` waits for it)."""
        self._known = None
        self.busy.clear()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._ending.append(self._sweeper)
            self._sweeper = None

    async def drain(self) -> None:
        """Wait for the sweepers of ended terms to stop (at shutdown, after the step-down)."""
        ending, self._ending = self._ending, []
        if ending:
            await asyncio.gather(*ending, return_exceptions=True)

    def _term(self) -> Term:
        term = self.state.term
        if term is None or not self.state.serving:
            raise NotServing(term.ended if term is not None else "not serving")
        return term


def _text(namespace: bytes) -> str:
    return namespace.decode("utf-8", "replace")
