"""The keyspace: every sequence this node serves, wired to the store and the lease.

Commands look generators up here (``generators`` is a plain dict, read on the hot path), create
them (``create``, ``ensure`` for auto-creation) and list them. The keyspace loads every record from
the store when it starts serving and kills every generator when it stops, so a node that lost its
right to serve holds no live generator.

Creating a sequence stores its first range right away (ceiling = start + min_batch; for a
timestamp sequence, a lookahead past its first slot), so the first INCR on a new key costs one
store write, not two. Keys are never deleted, so ``order`` (creation order) is a stable basis for
SCAN cursors.

Generators are built by the record's kind (``sequence`` or ``timestamp``). Timestamp sequences
read the wall clock through ``wall()``: ``time.time()`` moved by ``wall_offset`` seconds, which
only ``DEBUG CLOCK-OFFSET`` changes (tests of clock jumps).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from . import errors
from .config import Config
from .errors import CommandError
from .generators import timestamp
from .generators.base import BatchPolicy, Clock, Lease, NotServing, WallClock, monotonic
from .generators.layout import Layout
from .generators.sequence import MAX_ID, SequenceGenerator
from .generators.timestamp import TimestampGenerator
from .store.base import GuardFailed, SequenceRecord, Store

Generator = SequenceGenerator | TimestampGenerator


class Keyspace:
    def __init__(
        self, config: Config, store: Store, lease: Lease, clock: Clock = monotonic, wall: WallClock = time.time
    ) -> None:
        self.config = config
        self.store = store
        self.lease = lease
        self.clock = clock
        self._wall = wall
        self.wall_offset = 0.0  # seconds; moved only by DEBUG CLOCK-OFFSET
        self.generators: dict[bytes, Generator] = {}
        self.order: list[bytes] = []
        self.serving = False
        self.stopped: list[Generator] = []
        self._creating: dict[bytes, asyncio.Future[Generator]] = {}
        self.default_policy = BatchPolicy(
            min_batch=config.min_batch,
            max_batch=config.max_batch,
            interval=config.batch_interval,
            watermark=config.watermark,
            max_wait=config.max_wait,
            store_timeout=config.store_timeout,
        )

    # --- life ----------------------------------------------------------------------------------

    async def start_serving(self) -> None:
        """Load every sequence from the store (linearizable) and serve them."""
        if self.serving:  # never two live generators for one key
            self.stop_serving("reloading")
        records = await self.store.load_all()
        self.generators.clear()
        self.order.clear()
        for record in records:
            self._add(record)
        self.serving = True

    def stop_serving(self, reason: str) -> None:
        """Stop at once: every generator is killed; requests waiting on one get an error."""
        self.serving = False
        for gen in self.generators.values():
            gen.kill(reason)
        self.stopped = list(self.generators.values())  # still drained at shutdown
        self.generators.clear()  # nothing is served from a stale entry
        self.order.clear()

    async def drain(self) -> None:
        """Wait for store writes in flight (shutdown)."""
        writes = [g.write for g in [*self.generators.values(), *self.stopped] if g.write is not None]
        if writes:
            await asyncio.wait(writes)

    # --- lookups -------------------------------------------------------------------------------

    def get(self, key: bytes) -> Generator | None:
        return self.generators.get(key)

    async def ensure(self, key: bytes) -> Generator:
        """The generator for ``key``, created with default settings if auto_create is on."""
        gen = self.generators.get(key)
        if gen is not None:
            return gen
        if not self.config.auto_create:
            raise CommandError(errors.AUTO_CREATE_OFF.format(key.decode("utf-8", "replace")))
        gen, _ = await self.create_or_get(key, start=1, settings={})
        return gen

    def wall(self) -> float:
        """Seconds since 1970 as timestamp sequences see them."""
        return self._wall() + self.wall_offset

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
        self, key: bytes, start: int, settings: Mapping[str, Any], kind: str = "sequence"
    ) -> tuple[Generator, bool]:
        """The generator for ``key`` and whether this call created it (False: it existed).

        Concurrent calls for one key share one store write; only the first reports ``True``.
        """
        self._check_serving()
        pending = self._creating.get(key)
        if pending is not None:
            return await asyncio.shield(pending), False
        existing = self.generators.get(key)
        if existing is not None:
            return existing, False
        fut: asyncio.Future[Generator] = asyncio.get_running_loop().create_future()
        self._creating[key] = fut
        try:
            if kind == timestamp.KIND:
                record, first = timestamp.new_record(key, settings, start, self.wall, self.lookahead_ms(settings))
            else:
                policy = self.policy_for(settings)
                record = SequenceRecord(key, "sequence", min(MAX_ID + 1, start + policy.min_batch), dict(settings))
                first = start
            try:
                created = await self.store.create(record, self.lease.guard)
            except GuardFailed as exc:  # leadership is gone: step down, the request got nothing
                self.lease.lost(str(exc))
                raise NotServing(str(exc)) from None
            self._check_serving()
            if created:
                gen = self._add(record, first)
            else:  # someone created it first (another node, before our load): use what is stored
                stored = await self.store.load(key)
                if stored is None:
                    raise CommandError(errors.TRYAGAIN_STARTING)
                gen = self._add(stored)
            fut.set_result(gen)
            return gen, created
        except BaseException as exc:
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # retrieved: waiters re-raise it, nobody logs it as lost
            raise
        finally:
            del self._creating[key]

    def policy_for(self, settings: Mapping[str, Any]) -> BatchPolicy:
        changes = {k: int(settings[k]) for k in ("min_batch", "max_batch") if k in settings}
        return dataclasses.replace(self.default_policy, **changes) if changes else self.default_policy

    def lookahead_ms(self, settings: Mapping[str, Any]) -> int:
        """A timestamp sequence's lookahead: its own (SEQ.CREATE ... LOOKAHEAD) or the configured default."""
        return int(settings.get("lookahead", self.config.timestamp_lookahead_ms))

    def _add(self, record: SequenceRecord, start: int | None = None) -> Generator:
        """Serve ``record``; ``start`` places a brand-new generator (its next ID, or first slot)."""
        gen: Generator
        policy = self.policy_for(record.settings)
        if record.kind == timestamp.KIND:
            layout = Layout.from_settings(record.settings)
            gen = TimestampGenerator(record.key, record.ceiling, layout, self.store, self.lease, policy, self.clock,
                                     self.wall, self.lookahead_ms(record.settings), start)  # fmt: skip
        else:
            gen = SequenceGenerator(record.key, record.ceiling, self.store, self.lease, policy, self.clock, start)
        if record.key not in self.generators:
            self.order.append(record.key)
        self.generators[record.key] = gen
        return gen

    def _check_serving(self) -> None:
        if not self.serving:
            raise NotServing("not serving")
