"""The keyspace: the sequences a group serves, wired to the store and to its serving state.

**Lazy, per term.** Nothing is loaded when a node starts serving, whatever the number of
sequences: takeover costs the same with ten keys or a hundred thousand. A key becomes *active* in
the current term on its first request: one linearizable read of its record (``activate``; the reads
of keys activated in the same loop turn share one store request), then a generator built from it.
A loaded generator has nothing spendable (its next ID is the stored ceiling), so its first ``INCR``
persists a higher ceiling before the first ID (guarded; the first writes of many keys share
transactions too). ``generators`` (a plain dict, read on the hot path) holds only active keys.

**Derived from the serving state.** The keyspace subscribes to its group's ``ServingState``: when a
term ends (or a new one starts) every generator is dropped and its waiting requests are woken (they
see ``NotServing`` and are redirected or retried: they got no ID); on a FAILOVER's hold they are
only woken. Generators check their own term on every hand-out, so nothing here needs to be kept in
step by hand. Requests that arrive while this node does not serve get ``NotServing``.

**Creating** a sequence stores its first range right away (ceiling = start + min_batch; for a
timestamp sequence, a lookahead past its first slot), so the first INCR on a new key costs one
store write, not two. Concurrent requests for one key share one read and one creation. An INCR
by a user who may create any name (``ensure``), once the term has counted its sequences, reads
or creates the name in one store call (``Store.load_or_create``: on SQLite, one transaction for
the calls of a group commit, about 2x the creation rate of a read then a create); a name that
exists is found with its stored ceiling, never created again. The term's first creation, names
near ``max_sequences`` and restricted users keep the two steps (read, then create).

**Bounded waits.** A request waits for a read or a creation at most ``max_wait`` and then gets
``TRYAGAIN`` (the store call goes on, and a later request finds its result): a frozen disk or a
hung etcd never holds a client longer than that.

**Names** are at most ``max_key_len`` bytes: a longer one cannot exist (reading it finds nothing)
and creating it is an error, so no request can pass what the store accepts. At most
``max_sequences`` can exist (sequences are never deleted, so a client creating names in a loop
must be stopped).

**Counting** (``count``: DBSIZE, INFO, ``max_sequences``) is a number in memory (``march.keyspace.census``):
no request ever runs ``COUNT(*)``. **Listing** (``keys``, ``scan``) reads a page at a time in
slices and never queues in front of writes (``march.keyspace.listing``).

**Memory: a generator only for a sequence in use.** A generator (``march.generators.bound``: slots,
one shared ``Context`` per term, about 300 bytes with its name and dict entry) serves a sequence
with a store write in flight, requests waiting, settings of its own, a timestamp kind, or one read
lately (GET, SEQ.INFO, SET). Every other active sequence is a row of the compact table
(``march.keyspace.sequence_table``: one packed int, about 140 bytes with its name): the INCR fast path
takes from it (``parked``) until the row would need a store write, then the row becomes a
generator again (``_unpark``). A request that had to wait for a read or a creation puts its
sequence into the table right after its first ID when nothing is under way (``take_from``,
``settle``): a new sequence, or one touched once after a restart, costs a row, not a generator. A
name created by an INCR (``take_new``) is a row from the start: made in the store call's callback,
its first IDs taken from it there (``_landed``), never a generator unless it needs one.
Generators idle for ``sequence_idle_seconds`` become rows too (``march.keyspace.idle``, ``_park``),
or, for those that cannot (settings of their own, timestamps), leave memory (their unspent range
becomes a gap; the next request reads the record again); INFO counts them (``idle_dropped``,
``idle_parked``, ``parked_sequences``).

**Settings** (``SEQ.ALTER``, ``alter``) change durably first (guarded, after the key's ceiling
write in flight has landed), then on the live generator (``apply_settings``).

**A stored record that cannot be read fails closed.** A record whose settings this version cannot
read (``policies.settings_problem``: ``{"min_batch": "x"}``, a timestamp sequence without a whole
layout, an unknown kind; written by an older version's restore, or by hand) never becomes a
generator with guessed settings: every command on the key answers ``SEQ_UNREADABLE`` (or
``SEQ_LAYOUT_UNREADABLE``), a Redis-style error naming the setting, and hands out nothing. An admin
repairs it with ``SEQ.ALTER`` (``alter`` → ``_repair``): the readable settings are kept, the
unreadable ones dropped, the command's applied; a timestamp sequence whose layout is lost is given
one with SEQ.CREATE's layout options (refused on a layout that reads: a layout never changes under
IDs). The ceiling stays as stored (it only ever grows), so the repaired key continues above it.

The group's worker ids (``workers``, ``march.keyspace.worker_ids``) live beside the sequences, in the same
store, under the same serving state, but are not sequences.

Timestamp sequences (and the worker ids' wall-clock figures) read the wall clock through
``wall()``: ``time.time()`` moved by ``wall_offset`` seconds, which only ``DEBUG CLOCK-OFFSET``
changes (tests of clock jumps).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

from march import errors
from march.config import MAX_ID, Config, setting_bounds
from march.errors import CommandError, GuardFailed
from march.generators import timestamp
from march.generators.bits import Layout
from march.generators.bound import Context, Monotonic, NotServing, WallClock, monotonic
from march.generators.sequence import SequenceGenerator
from march.generators.timestamp import TimestampGenerator
from march.keyspace import listing
from march.keyspace.census import Census
from march.keyspace.idle import IdleSweeper
from march.keyspace.listing import PAGE, SLICE, Selection, sift
from march.keyspace.policies import KINDS, Policies, readable_part, settings_problem
from march.keyspace.sequence_table import SequenceTable
from march.keyspace.serving import Change, Phase, ServingState, Term
from march.keyspace.shared_calls import SharedCalls
from march.keyspace.worker_ids import Workers
from march.resp import Encoded
from march.store.contract import SequenceRecord, Store

Generator = SequenceGenerator | TimestampGenerator
T = TypeVar("T")
_ABSENT = 10_000  # keys remembered as just read and absent (ensure skips reading them again); then forgotten
__all__ = ["PAGE", "SLICE", "Generator", "Keyspace", "Selection", "sift"]  # (listing's, for its old importers)

log = logging.getLogger("march")


class UnreadableSettings(CommandError):
    """A stored record whose settings this version cannot read (``policies.settings_problem``):
    its key answers this error until SEQ.ALTER repairs it (``Keyspace.alter``)."""

    def __init__(self, record: SequenceRecord, why: str) -> None:
        name = record.key.decode("utf-8", "replace")
        lost = record.kind == timestamp.KIND and "time_bits" not in readable_part(record.kind, record.settings)
        super().__init__((errors.SEQ_LAYOUT_UNREADABLE if lost else errors.SEQ_UNREADABLE).format(name, why))
        self.record = record
        self.why = why
        self.layout_lost = lost


class ActiveSequences:
    """The generators of the term being served (``generators``), following the serving state:
    reading a key's record on its first request (``activate``), building its generator (``_add``),
    dropping the idle ones (``idle``) and every one at the end of a term. ``Keyspace`` adds what
    requests do with sequences (create, alter, count, list)."""

    def __init__(
        self,
        config: Config,
        store: Store,
        state: ServingState,
        clock: Monotonic = monotonic,
        wall: WallClock = time.time,
    ) -> None:
        self.config = config
        self.store = store
        self.state = state
        self.clock = clock
        self._wall = wall
        self.wall_offset = 0.0  # seconds; moved only by DEBUG CLOCK-OFFSET
        self.generators: dict[bytes, Generator] = {}  # active in the current term, in use
        self.table = SequenceTable()  # active in the current term, not in use: two numbers each
        self._retired: list[Generator] = []  # of ended terms, with a store write still in flight
        self._absent: dict[bytes, Term] = {}  # keys read and found absent lately, and the term that read them
        self._loading: SharedCalls[Generator | None] = SharedCalls(lambda: self.config.max_wait)
        # (None: made as a row of the table, ``take_new``; its sharers find it there, ``_shared``)
        self._creating: SharedCalls[Generator | None] = SharedCalls(lambda: self.config.max_wait)
        self._deadlines = _Deadlines()  # (take_new's waits)
        self._loop: asyncio.AbstractEventLoop | None = None  # (take_new's: see ``_running_loop``)
        self.census = Census(store, state, lambda: self.config, clock)
        self.idle = IdleSweeper(
            self.generators, state, lambda: self.config.sequence_idle_seconds, self._may_drop, clock, self._park
        )
        self.policies = Policies(config)
        self._ctx: Context | None = None  # the current term's, shared by its generators
        self._altering = asyncio.Lock()  # SEQ.ALTER, one at a time
        state.subscribe(self._on_change)

    # --- following the serving state -------------------------------------------------------------

    def _on_change(self, change: Change) -> None:
        if change.phase is Phase.SERVING:
            return
        gens = list(self.generators.values())
        if change.phase is not Phase.STEPPING_DOWN:  # the term ended, or a new one begins
            self.generators.clear()  # in place: the hot path holds this dict
            self.table.clear()  # (its rows' unspent ranges become gaps, as after a restart)
            self._absent.clear()
            self.idle.stop()  # (the next term's first generator starts another)
            self._retired = [g for g in (*self._retired, *gens) if g.write is not None]
        for gen in gens:
            gen.wake()  # waiting requests look again: NotServing (they got no ID)

    @property
    def serving(self) -> bool:
        return self.state.serving

    def _term(self) -> Term:
        """The term being served; NotServing if none."""
        term = self.state.term
        if term is None or not self.state.serving:
            raise NotServing(term.ended if term is not None else "not serving")
        return term

    async def drain(self, timeout: float | None = None) -> None:
        """Wait (at most ``timeout``) for the store writes in flight (a hand-over, shutdown)."""
        writes = [g.write for g in (*self.generators.values(), *self._retired) if g.write is not None]
        if writes:
            await asyncio.wait(writes, timeout=timeout)

    # --- lookups -------------------------------------------------------------------------------

    def get(self, key: bytes) -> Generator | None:
        """The key's generator if it is active in this term (no store read)."""
        return self.generators.get(key) or self._unpark(key)

    # --- the table: sequences not in use, two numbers each (``march.keyspace.sequence_table``) ------------

    def parked(self, key: bytes, n: int) -> int | Generator | None:
        """The INCR fast path for a key without a generator: the last of ``n`` IDs from its row in
        the table; or, when the row cannot hand them out without a store write (or the lease is not
        valid), its generator, made from the row (the caller takes from it); None if it has no row."""
        value = self.table.take(key, n)
        return value if value is not None else self._unpark(key)

    def row(self, key: bytes) -> tuple[int, int] | None:
        """``key``'s row in the table, ``(next, ceiling)``, if it has one (GET reads its watermark there)."""
        return self.table.peek(key)

    def _unpark(self, key: bytes) -> Generator | None:
        """``key``'s generator made from its row (which is removed), or None if it has none."""
        row = self.table.pop(key)
        if row is None:
            return None
        next_id, ceiling = row
        term = self.state.term
        assert term is not None  # (the table is emptied whenever a term ends)
        return self._add(SequenceRecord(key, "sequence", ceiling), term, next_id)

    def _park(self, gen: Generator) -> bool:
        """Keep ``gen``'s sequence as a row instead (True), if it may (``SequenceGenerator.park``); the caller
        removes and retires the generator. Only for the current term's own generators."""
        if not isinstance(gen, SequenceGenerator) or self._ctx is None or gen.lease is not self.state.term:
            return False
        row = gen.park()
        if row is None:
            return False
        next_id, ceiling, issued = row
        self.table.put(gen.key, next_id, ceiling)
        self.table.issued += issued
        return True

    def settle(self, gen: Generator) -> None:
        """After a request's first take from a generator it just made or read (``take_from``): a
        sequence with nothing under way goes to the table at once (most keys are asked once in a
        while; a busy one comes back as a generator when its range runs low)."""
        key = gen.key
        if self.generators.get(key) is gen and self._may_drop(key) and self._park(gen):
            del self.generators[key]
            self.idle.retire(gen)

    async def take_from(self, gen: Generator, n: int) -> int:
        """``n`` IDs from the generator a request activated or created (the last one returned): from
        the key's current one if ``gen`` was parked meanwhile; then ``settle``."""
        current = self.generators.get(gen.key) or self._unpark(gen.key)
        if current is not None:
            gen = current
        value = await gen.take_wait(n)
        self.settle(gen)
        return value

    async def activate(self, key: bytes) -> Generator | None:
        """The key's generator, reading its record if it is not active yet; None if there is no such sequence."""
        gen = self.generators.get(key) or self._unpark(key)
        if gen is not None:
            return gen
        term = self._term()
        creating = self._creating.get(key)
        if creating is not None:
            return await self._shared(creating, key)
        if len(key) > self.config.max_key_len:
            return None  # no sequence has such a name
        loading = self._loading.get(key)
        if loading is None:
            loading = self._loading.start(key, self._load(key, term))
        return await self._loading.wait(loading, key)

    async def _load(self, key: bytes, term: Term) -> Generator | None:
        record = await asyncio.wait_for(self.store.load(key), self.config.store_timeout)
        self._check(term)
        gen = self.generators.get(key)
        if gen is None and record is not None:
            gen = self._add(record, term)
        elif gen is None:
            if len(self._absent) >= _ABSENT:
                self._absent.clear()  # (a forgotten one is only read again)
            self._absent[key] = term
        return gen

    def wall(self) -> float:
        """Seconds since 1970 as timestamp sequences see them."""
        return self._wall() + self.wall_offset

    def _add(self, record: SequenceRecord, term: Term, start: int | None = None) -> Generator:
        """Serve ``record`` in ``term``; ``start`` places a brand-new generator (its next ID, or first
        slot). UnreadableSettings if this version cannot read its settings (nothing is served)."""
        why = settings_problem(record.kind, record.settings)
        if why is not None:
            raise UnreadableSettings(record, why)
        gen: Generator
        policies = self.policies
        policy = policies.policy_for(record.settings)
        ctx = self._context(term).with_policy(policy)
        if record.kind == timestamp.KIND:
            layout = Layout.from_settings(record.settings)
            gen = TimestampGenerator(record.key, record.ceiling, layout, self.store, term, policy, self.clock,
                                     self.wall, policies.lookahead_ms(record.settings), start,
                                     policies.max_lead_ms(record.settings))  # fmt: skip
        else:
            gen = SequenceGenerator(record.key, record.ceiling, ctx, start)
        if record.settings:
            gen.settings = dict(record.settings)
        self.table.pop(record.key)  # (a key is never both a row and a generator; normally it has no row)
        self.generators[record.key] = gen
        self._absent.pop(record.key, None)
        return gen

    def _context(self, term: Term) -> Context:
        """What every generator of ``term`` shares (made once per term)."""
        ctx = self._ctx
        if ctx is None or ctx.lease is not term:
            ctx = self._ctx = Context.of(self.store, term, self.clock, self.policies.default)
            self.idle.start(term, ctx)
            self.table.valid = ctx.valid
            self.table.low = ctx.policy.low
        return ctx

    def _may_drop(self, key: bytes) -> bool:
        """Nothing under way for ``key`` may hold a record read before its generator's last write."""
        return key not in self._loading and key not in self._creating and not self._altering.locked()

    async def _shared(self, call: asyncio.Future[Generator | None], key: bytes) -> Generator:
        """The generator of a creation (or read) under way for ``key`` that this request shares, once it
        is done: if it made a row of the table (``Creations.take_new``), the generator made from the row."""
        gen = await self._creating.wait(call, key)
        if gen is None:
            gen = self.generators.get(key) or self._unpark(key)
            if gen is None:  # (the table is emptied when a term ends)
                raise NotServing(self._term().ended or "the term changed")
        return gen

    def _check(self, term: Term) -> None:
        """The term a read or creation started in is still served (else its result is not used)."""
        if self.state.term is not term:
            raise NotServing(term.ended or "the term changed")


class Creations(ActiveSequences):
    """Finding or creating a sequence for a request (``ensure``, ``take_new``, ``create``): one store
    call per name shared by every request for it meanwhile, durable before its first ID."""

    async def ensure(self, key: bytes) -> Generator:
        """The generator for ``key``, created with default settings if auto_create is on."""
        gen = self.generators.get(key) or self._unpark(key)
        if gen is not None:
            return gen
        # A key just read and found absent (INCR reads it first) is not read again: this term is
        # the only one creating names, and a creation of a name that exists after all only finds it.
        absent = self.config.auto_create and self._absent.pop(key, None) is self.state.term
        if self.config.auto_create and not absent:
            found = self._load_or_create(key)
            if found is not None:
                return await self._shared(found, key)
        if not absent:
            gen = await self.activate(key)
            if gen is not None:
                return gen
        if not self.config.auto_create:
            raise CommandError(errors.AUTO_CREATE_OFF.format(key.decode("utf-8", "replace")))
        gen, _ = await self.create_or_get(key, start=1, settings={}, read=not absent)
        return gen

    def take_new(self, key: bytes, n: int) -> asyncio.Future[int] | None:
        """The INCR of a user who may create any name, on a key with no generator and no row: its
        ``n`` IDs as a future, the key read or created with default settings in one store call
        (``ensure``'s ``_load_or_create``) and everything after it in one callback (``_landed``),
        no task per request (``Store.load_or_create_then``: on SQLite called from the group
        commit's pass, for all of its records at once). None where ``ensure`` keeps its other paths
        (see ``_load_or_create``; auto_create off, not serving, a read or creation of the key under
        way): then the caller runs it as a coroutine.

        Answered at most ``max_wait`` after it was asked (TRYAGAIN, the store call goes on and a
        later request finds its result; ``_Deadlines``: one timer per loop turn). The creation is
        shared with every request for the key meanwhile (``_creating``, ``_shared``): a new name
        is a row of the table from the start, a name found existing a generator that goes to the
        table after the first ID (``settle``), as in ``take_from``."""
        state = self.state
        term = state.term
        config = self.config
        if (
            term is None
            or not state.serving
            or not config.auto_create
            or len(key) > config.max_key_len
            or key in self._creating
            or key in self._loading
            or key in self.generators
            or key in self.table
            or not self.census.room_for_one(len(self._creating))
        ):
            return None
        record = SequenceRecord(key, "sequence", min(MAX_ID + 1, 1 + self.policies.default.min_batch), {})
        loop = self._running_loop()
        made: asyncio.Future[Generator | None] = loop.create_future()
        self._creating.hold(key, made)  # (released by ``_landed``, which completes it)
        answer: asyncio.Future[int] = loop.create_future()
        waits = self._deadlines.add(loop, config.max_wait, answer, key)
        then = lambda found: self._landed(found, made, answer, waits, term, key, n)  # noqa: E731 (the store's callback)
        self.store.load_or_create_then(record, term.guard, then)
        return answer

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The running event loop, kept: ``asyncio.get_running_loop`` makes a ``getpid`` system call
        each time on Python 3.11, once a creation; a kept loop that no longer runs is asked again."""
        loop = self._loop
        if loop is None or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def _landed(
        self,
        stored: tuple[SequenceRecord, bool] | BaseException,
        made: asyncio.Future[Generator | None],
        answer: asyncio.Future[int],
        waits: _Waits,
        term: Term,
        key: bytes,
        n: int,
    ) -> None:
        """``take_new``'s store call is done: everything else in this one callback. A name it created
        becomes a row of the table at once, its first ``n`` IDs taken from the row (no generator: the
        record is durable and nothing else is under way for the name; the row checks the lease and the
        watermark as for any other); ``made`` says "a row" (None) to the requests that share the
        creation (``_shared``). Anything else (a name found existing, a failure, a term that changed,
        IDs the row cannot hand out without a store write) goes through a generator (``_made``)."""
        self._creating.release(key, made)  # (its sharers are woken by its result, a loop turn later)
        waits.answered()  # (the answer is set below, or it was already: timed out, or its client went away)
        if not isinstance(stored, BaseException):
            found, created = stored
            if created and self.state.term is term and key not in self.generators and key not in self.table:
                self.census.added(term)
                self._context(term)  # (the table checks this term's lease, with the default policy's watermark)
                table = self.table
                table.put(key, 1, found.ceiling)  # (a new name's first ID is 1: take_new's record)
                self._absent.pop(key, None)
                made.set_result(None)
                if answer.done():  # (timed out, or its client went away: the row keeps its IDs for the next)
                    return
                value = table.take(key, n)
                if value is not None:
                    answer.set_result(value)
                    return
                gen = self._unpark(key)  # (the row just put)
                assert gen is not None
                self._take_for(gen, answer, n)
                return
        made_gen = self._made(stored, made, key, term)
        failure = made.exception()  # (retrieved here: its sharers, if any, re-raise it)
        if answer.done():  # (timed out, or its client went away: the generator stays for the next)
            return
        if made_gen is None:
            answer.set_exception(failure or NotServing("the store call was cancelled"))
        else:
            self._take_for(made_gen, answer, n)

    def _made(
        self, stored: tuple[SequenceRecord, bool] | BaseException, made: asyncio.Future[Generator | None], key: bytes,
        term: Term,
    ) -> Generator | None:  # fmt: skip
        """``made`` gets the generator of ``take_new``'s record (returned), or why there is none (None)."""
        try:
            if isinstance(stored, asyncio.CancelledError):
                raise NotServing("the store call was cancelled")
            if isinstance(stored, BaseException):
                raise stored
            found, created = stored
            self._check(term)
            if created:
                self.census.added(term)
            gen = self.generators.get(key) or self._unpark(key) or self._add(found, term, 1 if created else None)
        except GuardFailed as exc:  # leadership is gone: the term ends, the request got nothing
            term.lost(str(exc))
            made.set_exception(NotServing(str(exc)))
        except Exception as exc:
            made.set_exception(exc)
        else:
            made.set_result(gen)
            return gen
        return None

    def _take_for(self, gen: Generator, answer: asyncio.Future[int], n: int) -> None:
        """``n`` IDs from ``gen`` for ``answer`` (now, or after its next store write), then ``settle``."""
        try:
            value = gen.take(n)
        except Exception as exc:
            answer.set_exception(exc)
            return
        if value is not None:
            answer.set_result(value)
            self.settle(gen)
            return
        later = gen.later(n)  # (a range that cannot hold them: the generator's queue, one store write)

        def hand(f: asyncio.Future[int], gen: Generator = gen) -> None:
            failure = None if f.cancelled() else f.exception()  # (retrieved even if nobody waits now)
            if answer.done():
                return
            if f.cancelled():
                answer.cancel()
            elif failure is not None:
                answer.set_exception(failure)
            else:
                answer.set_result(f.result())
                self.settle(gen)

        later.add_done_callback(hand)

    def _load_or_create(self, key: bytes) -> asyncio.Future[Generator | None] | None:
        """The shared call that reads ``key``'s record or creates it with default settings, in one
        store call (``Store.load_or_create``); None where the two steps are kept (a read already
        under way, a name too long to exist, ``max_sequences`` near: a full keyspace still serves
        its existing names, the term's first creation: it counts the sequences first, and a term
        that only serves existing names never needs to)."""
        term = self._term()
        if not self.census.room_for_one(len(self._creating)) or len(key) > self.config.max_key_len:
            return None
        # Nothing awaits here: concurrent callers find the one call and share it.
        task = self._creating.get(key)
        if task is not None or key in self.generators or key in self._loading:
            return task
        policy = self.policies.policy_for({})
        record = SequenceRecord(key, "sequence", min(MAX_ID + 1, 1 + policy.min_batch), {})
        return self._creating.start(key, self._loaded_or_created(record, term))

    async def _loaded_or_created(self, record: SequenceRecord, term: Term) -> Generator:
        try:
            async with asyncio.timeout(self.config.store_timeout):  # (no task of its own, unlike wait_for)
                stored, created = await self.store.load_or_create(record, term.guard)
        except GuardFailed as exc:  # leadership is gone: the term ends, the request got nothing
            term.lost(str(exc))
            raise NotServing(str(exc)) from None
        self._check(term)
        if created:
            self.census.added(term)
        existing = self.generators.get(record.key)
        if existing is not None:
            return existing
        return self._add(stored, term, 1 if created else None)

    async def create(
        self, key: bytes, start: int, settings: Mapping[str, Any], exist_ok: bool = False, kind: str = "sequence"
    ) -> Generator:
        """Create a sequence whose first ID is ``start`` (timestamp: whose IDs are >= ``start``).

        Durable before it returns. If it exists already: the existing generator with
        ``exist_ok``, else a KEY_EXISTS error.
        """
        gen, created = await self.create_or_get(key, start, settings, kind)
        if not created and not exist_ok:
            raise CommandError(errors.KEY_EXISTS.format(key.decode("utf-8", "replace")))
        return gen

    async def create_or_get(
        self, key: bytes, start: int, settings: Mapping[str, Any], kind: str = "sequence", read: bool = True
    ) -> tuple[Generator, bool]:
        """The generator for ``key`` and whether this call created it (False: it existed).

        Concurrent calls for one key share one store write; only the one that started it reports
        ``True``. ``read=False``: the key was just read and found absent (``ensure``).
        """
        if len(key) > self.config.max_key_len:
            raise CommandError(errors.KEY_TOO_LONG.format(self.config.max_key_len))
        existing = await self.activate(key) if read else self.generators.get(key)
        if existing is not None:
            return existing, False
        await self.census.check_room(self._term(), len(self._creating))
        # From here to _start, nothing awaits: concurrent callers find the one creation and share it.
        pending = self._creating.get(key)
        if pending is not None:
            return await self._shared(pending, key), False
        existing = self.generators.get(key)  # activated meanwhile
        if existing is not None:
            return existing, False
        term = self._term()
        if kind == timestamp.KIND:
            record, first = timestamp.new_record(key, settings, start, self.wall, self.policies.lookahead_ms(settings))
        else:
            policy = self.policies.policy_for(settings)
            record = SequenceRecord(key, "sequence", min(MAX_ID + 1, start + policy.min_batch), dict(settings))
            first = start
        created: list[bool] = []
        task = self._creating.start(key, self._create(record, first, term, created))
        gen = await self._shared(task, key)
        return gen, bool(created)

    async def _create(self, record: SequenceRecord, first: int, term: Term, created: list[bool]) -> Generator:
        try:
            stored = await asyncio.wait_for(self.store.create(record, term.guard), self.config.store_timeout)
        except GuardFailed as exc:  # leadership is gone: the term ends, the request got nothing
            term.lost(str(exc))
            raise NotServing(str(exc)) from None
        self._check(term)
        existing = self.generators.get(record.key)
        if stored:
            created.append(True)
            self.census.added(term)
            return existing if existing is not None else self._add(record, term, first)
        if existing is not None:
            return existing
        loaded = await asyncio.wait_for(self.store.load(record.key), self.config.store_timeout)
        self._check(term)
        if loaded is None:
            raise CommandError(errors.TRYAGAIN_STARTING)
        return self.generators.get(record.key) or self._add(loaded, term)


class Keyspace(Creations):
    """The sequences of a group: lookups (``ActiveSequences``), creation (``Creations``), settings,
    counting, listing, and the group's worker ids."""

    def __init__(
        self,
        config: Config,
        store: Store,
        state: ServingState,
        clock: Monotonic = monotonic,
        wall: WallClock = time.time,
    ) -> None:
        super().__init__(config, store, state, clock, wall)
        # the group's worker ids (WORKER.*), beside its sequences: expiry on ``clock``, ``wall`` moved by DEBUG too
        self.workers = Workers(config, store, state, self.wall, clock)

    async def drain(self, timeout: float | None = None) -> None:
        await super().drain(timeout)
        await self.workers.drain()  # the worker sweepers of ended terms (cancelled at the step-down)

    def reconfigure(self, config: Config) -> None:
        """CONFIG SET: later lookups, creations and activations read ``config``; active generators
        take the new batch bounds, interval, watermark and waits from their next extension or wait.

        Safe at any moment: these only size and time the *next* store write. A ceiling only ever
        goes up (the store refuses a lower one), whatever the batch, so nothing handed out or
        persisted moves. A sequence's own settings (MINBATCH, MAXBATCH, MAXLEAD) are kept; a lower
        timestamp_max_lead_ms makes requests wait for real time, never hands out a lower ID.
        """
        self.config = config
        self.workers.config = config  # worker_ttl, worker_margin: read at use time
        self.policies.reconfigure(config)
        self.table.low = self.policies.default.low  # (the rows have the default policy)
        for gen in self.generators.values():
            self.policies.apply(gen)

    # --- SEQ.ALTER -------------------------------------------------------------------------------

    async def alter(self, key: bytes, changes: Mapping[str, int], layout: Layout | None = None) -> None:
        """Change one sequence's settings durably (guarded), then apply them to its live generator;
        or repair a stored record whose settings cannot be read (``_repair``: ``layout`` only there).

        One ALTER at a time (they are rare), so two never lose each other's changes. The ceiling
        write in flight, if any, lands first: on etcd it writes the settings it was sent with.
        """
        async with self._altering:
            try:
                gen = await self.activate(key)
            except UnreadableSettings as unreadable:
                await self._repair(unreadable, changes, layout)
                return
            if gen is None:
                raise CommandError(errors.NO_SUCH_KEY.format(key.decode("utf-8", "replace")))
            if layout is not None:  # a layout that reads never changes: IDs already handed out follow it
                raise CommandError(errors.ALTER_LAYOUT.format(key.decode("utf-8", "replace")))
            settings = _altered(self.policies, key, isinstance(gen, TimestampGenerator), dict(gen.settings), changes)
            term = self._term()
            if self.generators.get(key) is not gen:  # the term changed since it was read: run again
                raise NotServing(term.ended or "the term changed")
            deadline = self.clock() + self.config.max_wait
            while gen.write is not None:  # nothing may put the old settings back after ours
                await asyncio.wait({gen.write}, timeout=max(0.0, deadline - self.clock()))
                if self.clock() >= deadline:
                    raise CommandError(errors.TRYAGAIN_STORE.format(key.decode("utf-8", "replace")))
            await self._save_settings(key, settings, term)
            gen.settings = settings
            self.policies.apply(gen)

    async def _save_settings(self, key: bytes, settings: dict[str, Any], term: Term) -> None:
        """Store ``settings`` of ``key`` under ``term``'s guard (a refused guard ends the term).
        Awaited directly, not as a task: the store takes note of the new settings before any ceiling
        write can start (on etcd those put the settings back as they know them)."""
        try:
            async with asyncio.timeout(self.config.store_timeout):
                await self.store.save_settings(key, settings, term.guard)
        except GuardFailed as exc:
            term.lost(str(exc))
            raise NotServing(str(exc)) from None
        self._check(term)

    async def _repair(self, unreadable: UnreadableSettings, changes: Mapping[str, int], layout: Layout | None) -> None:
        """SEQ.ALTER on a stored record whose settings cannot be read: keep the readable settings,
        drop the others, apply ``changes`` (and ``layout``, only where the stored one is lost), and
        store the result (guarded) if it reads. The ceiling is left as stored; the next request
        reads the repaired record and serves it like any other."""
        record = unreadable.record
        if record.kind not in KINDS:
            raise unreadable  # nothing to repair towards: this version knows no such kind
        timestamped = record.kind == timestamp.KIND
        settings = readable_part(record.kind, record.settings)
        if layout is not None:
            if not unreadable.layout_lost:
                raise CommandError(errors.ALTER_LAYOUT.format(record.key.decode("utf-8", "replace")))
            settings.update(layout.to_settings())
        settings = _altered(self.policies, record.key, timestamped, settings, changes)
        why = settings_problem(record.kind, settings)
        if why is not None:  # (a timestamp sequence whose layout is lost, and no layout given)
            raise UnreadableSettings(SequenceRecord(record.key, record.kind, record.ceiling, settings), why)
        await self._save_settings(record.key, settings, self._term())
        log.warning("sequence %r: SEQ.ALTER repaired its stored settings (%s)", record.key[:64], unreadable.why)

    # --- listing and counting (``march.keyspace.listing``, ``march.keyspace.census``) ------------------------------

    async def keys(self, selection: Selection | None = None, prefix: bytes = b"", budget: int = 0) -> list[bytes]:
        """Every name starting with ``prefix`` that ``selection`` keeps (``march.keyspace.listing.names``)."""
        return await listing.names(self.store, selection, prefix, budget, self.config.max_output_buffer)

    async def keys_reply(self, selection: Selection | None = None, prefix: bytes = b"", budget: int = 0) -> Encoded:
        """``keys``' names as their RESP reply, encoded a page at a time (``march.keyspace.listing.reply``)."""
        return await listing.reply(self.store, selection, prefix, budget, self.config.max_output_buffer)

    async def scan(self, cursor: int, count: int) -> tuple[int, list[bytes]]:
        """About ``count`` names from ``cursor`` on, and the cursor to continue with (0: done): the
        store's own cursors (``Store.scan``), under this term's guard."""
        return await self.store.scan(cursor, count, self._term().guard)

    def known_count(self) -> int | None:
        """How many sequences exist, if this term knows it already (no waiting), else None."""
        return self.census.known()

    async def count(self) -> int:
        """How many sequences exist (``march.keyspace.census``)."""
        return await self.census.count()

    def size(self) -> int | Awaitable[int]:
        """DBSIZE: from memory while this term knows the count (no waiting), else ``count``."""
        known = self.census.known()
        return known if known is not None else self.count()


class _Waits:
    """The waits of the new names asked in one turn of the loop (``take_new``): one timer for them
    all, ``max_wait`` after the turn's first (a timer each cost more than the rest of a creation's
    bookkeeping). Let go of as soon as the last of them is answered (``answered``): no answer is
    held longer than its wait."""

    __slots__ = ("answers", "left", "timer")

    def __init__(self) -> None:
        self.answers: list[tuple[asyncio.Future[int], bytes]] = []
        self.left = 0  # not answered yet
        self.timer: asyncio.TimerHandle | None = None

    def answered(self) -> None:
        """One of them was answered (or given up on): the last one cancels the timer."""
        self.left -= 1
        if self.left == 0 and self.timer is not None:
            self.timer.cancel()
            self.answers.clear()

    def too_late(self) -> None:
        """``max_wait`` is over: TRYAGAIN for those not answered (they got no ID; the store call goes on)."""
        for answer, key in self.answers:
            if not answer.done():
                answer.set_exception(CommandError(errors.TRYAGAIN_LOADING_KEY.format(key.decode("utf-8", "replace"))))
        self.answers.clear()


class _Deadlines:
    """``take_new``'s bound on a wait: the ``_Waits`` of the current turn of the loop."""

    __slots__ = ("waits",)

    def __init__(self) -> None:
        self.waits: _Waits | None = None  # this turn's

    def add(self, loop: asyncio.AbstractEventLoop, wait: float, answer: asyncio.Future[int], key: bytes) -> _Waits:
        waits = self.waits
        if waits is None:
            waits = self.waits = _Waits()
            loop.call_soon(self._close)  # (runs after this turn's callbacks: the next turn starts anew)
            waits.timer = loop.call_later(wait, waits.too_late)
        waits.answers.append((answer, key))
        waits.left += 1
        return waits

    def _close(self) -> None:
        self.waits = None


def _altered(
    policies: Policies, key: bytes, timestamped: bool, settings: dict[str, Any], changes: Mapping[str, int]
) -> dict[str, Any]:
    """``settings`` with ``changes`` applied, as SEQ.ALTER allows them for the key's kind."""
    if "max_lead" in changes and not timestamped:
        raise CommandError(errors.ALTER_MAXLEAD_PLAIN.format(key.decode("utf-8", "replace")))
    if timestamped and ("min_batch" in changes or "max_batch" in changes):
        raise CommandError(errors.ALTER_BATCH_TIMESTAMP.format(key.decode("utf-8", "replace")))
    settings.update(changes)
    policy = policies.policy_for(settings)
    if policy.min_batch > policy.max_batch:  # (each within its bounds: checked by the command)
        raise CommandError(errors.BATCH_RANGE.format(int(setting_bounds("max_batch").high)))
    return settings
