"""Sequence commands: INCR, INCRBY, SEQ.CREATE, SEQ.ALTER, SEQ.INFO, SEQ.LIST, SEQ.DECODE.

- ``INCR key``: the next ID (a new key starts at 1, as in Redis, when auto_create is on).
- ``INCRBY key n``: n consecutive IDs (1 <= n <= max_incrby); returns the last. On a timestamp
  sequence: n consecutive (time, sequence) slots, the last one's ID.
- ``SEQ.CREATE key [START n] [MINBATCH n] [MAXBATCH n]``: create a sequence explicitly.
- ``SEQ.CREATE key TIMESTAMP [PRESET name] [TIMEBITS n] [NODEBITS n] [SEQBITS n] [ORDER f,f,f]
  [EPOCH ms] [UNIT ms] [NODE n] [FLOOR id] [LOOKAHEAD ms] [MAXLEAD ms]``: create a timestamp
  sequence. Layout options override the preset's fields (snowflake when no preset is named); a
  layout that differs from its preset is shown as ``custom``. ``FLOOR id``: every ID is > id
  (migration). ``MAXLEAD ms``: the time in its IDs runs at most this far ahead of real time
  (within the bounds of ``timestamp_max_lead_ms``, 100..60000; default that option; see
  ``march.generators.timestamp``). Its own MINBATCH/MAXBATCH/LOOKAHEAD/MAXLEAD need the right to
  SEQ.ALTER the key too (``@seqadmin``), as START/FLOOR need the right to SET it.
- ``SEQ.ALTER key [MINBATCH n] [MAXBATCH n] [MAXLEAD ms]``: change one sequence's settings,
  durably (guarded like a ceiling write), at once on its live generator. MINBATCH/MAXBATCH apply
  to plain sequences, MAXLEAD to timestamp sequences (the other kind: WRONGTYPE). Primary only.
  ACL category ``@seqadmin``, not ``@write``: the limits of a shared sequence are an
  administrator's, an application that draws IDs never changes them. It also repairs a stored
  record whose settings cannot be read (``march.keyspace.keyspace``): the unreadable settings are dropped,
  and a timestamp sequence whose layout is lost takes SEQ.CREATE's layout options (``PRESET``,
  ``TIMEBITS``... ``NODE``), refused on any layout that reads.
- Every setting is checked against the bounds declared beside its server option in
  ``march.config`` (one validator for the config file, flags, environment, CONFIG SET and here).
- ``SEQ.INFO key``: live state (next, durable ceiling, batch, store writes and latency, waits;
  for a timestamp sequence its layout, logical time and its lead on the clock, saved bound, carries;
  with several leadership groups, the key's ``slot`` and ``group``).
- ``SEQ.DECODE key id``: the fields of a timestamp ID and its time (ISO-8601, UTC).
- ``SEQ.LIST``: every sequence name the user may read, in byte order: ``KEYS *`` (``keys.list_names``).

INCR/INCRBY take the generator's synchronous fast path when the durable range has room; when it
has not, they return the generator's future for the request (``later``: queued with the others
waiting for the same store write, answered in order, no task), and a coroutine (awaited by the
dispatcher) only when they must read or create the key. This module is the INCR hot path: keep it lean.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import TYPE_CHECKING, Any

from march import errors
from march.commands.args import Args, key_text, parse_int
from march.commands.keys import list_names
from march.commands.permissions import may_change_settings, may_create, may_raise_floor
from march.commands.table import KEY, Arg, command
from march.config import MAX_ID, setting_bounds
from march.errors import CommandError
from march.generators import bits as layouts
from march.generators.timestamp import KIND as TIMESTAMP
from march.generators.timestamp import TimestampGenerator

if TYPE_CHECKING:
    from march.client import Client
    from march.keyspace.keyspace import Generator

# INCR and INCRBY: the hot path, one key, an integer reply
_hands_out_ids = partial(
    command,
    flags=("write", "denyoom", "fast"),
    categories=("@write", "@string", "@fast"),
    keys=(1, 1, 1),
    hot=True,
    group="string",
)


def incr_run(client: Client, args: list[bytes], count: int) -> range | None:
    """Up to ``count`` pipelined ``INCR key`` at once: their IDs (consecutive integers, at least
    one), or None (run the next one singly)."""
    gen = client.generators.get(args[1])
    return None if gen is None else gen.take_run(count)


@_hands_out_ids(
    "incr",
    2,
    consecutive=incr_run,
    summary="The next ID of the sequence (created at 1 if new).",
    complexity="O(1)",
    arguments=KEY,
)
def incr(client: Client, args: list[bytes]) -> Any:
    gen = client.generators.get(args[1])
    if gen is None:  # not in use: a row of the table (``march.keyspace.sequence_table``), or not active yet
        found = client.app.keyspace.parked(args[1], 1)
        if found is None:
            return _new(client, args[1], 1)
        if isinstance(found, int):
            return found
        gen = found
    return _hand_out(gen, 1)


@_hands_out_ids(
    "incrby",
    3,
    summary="INCRBY key n: hand out n consecutive IDs, return the last.",
    complexity="O(1)",
    arguments=(*KEY, Arg("increment", "integer")),
)
def incrby(client: Client, args: list[bytes]) -> Any:
    n = parse_int(args[2])  # (the hot path: no cursor for one argument at a fixed place)
    if n < 1:
        raise CommandError(errors.INCRBY_NOT_POSITIVE)
    if n > client.app.config.max_incrby:
        raise CommandError(errors.INCRBY_TOO_LARGE.format(client.app.config.max_incrby))
    gen = client.generators.get(args[1])
    if gen is None:
        found = client.app.keyspace.parked(args[1], n)
        if found is None:
            return _new(client, args[1], n)
        if isinstance(found, int):
            return found
        gen = found
    return _hand_out(gen, n)


def _hand_out(gen: Generator, n: int) -> Any:
    """The last of ``n`` IDs from the fast path, else the request's future (``later``: queued until
    the range is extended). Compiled, ``gen`` is a C-typed generator (``sequences.pxd``): ``take``
    is a direct C call."""
    value = gen.take(n)
    return value if value is not None else gen.later(n)


def _new(client: Client, key: bytes, n: int) -> Any:
    """A key with no generator and no row: read or created by callbacks (``Creations.take_new``) for a
    user who may create any name, else ``_take``."""
    if client.user.unrestricted:
        answer = client.app.keyspace.take_new(key, n)
        if answer is not None:
            return answer
    return _take(client, key, n)


async def _take(client: Client, key: bytes, n: int) -> int:
    keyspace = client.app.keyspace
    # active, or read from the store (a user who may create anything: read or created in one store call)
    gen = await (keyspace.ensure(key) if client.user.unrestricted else keyspace.activate(key))
    if gen is None:
        may_create(client, key)
        gen = await keyspace.ensure(key)  # created (auto_create), or made meanwhile by someone else
    return await keyspace.take_from(gen, n)  # (then to the table if nothing is under way)


@command(
    "seq.create",
    -2,
    ("write", "denyoom"),
    ("@create", "@slow"),
    keys=(1, 1, 1),
    key_access="W",  # inserts; reads nothing
    summary="SEQ.CREATE key [START n] [MINBATCH n] [MAXBATCH n] / key TIMESTAMP [PRESET name] [layout options] "
    "[NODE n] [FLOOR id] [LOOKAHEAD ms] [MAXLEAD ms]: create a sequence.",
    group="sequence",
)
def seq_create(client: Client, args: list[bytes]) -> Any:
    cursor = Args(args, 2)
    if cursor.flag(b"timestamp"):
        return _create_timestamp(client, args[1], cursor)
    config = client.app.config
    start = 1
    settings: dict[str, int] = {}
    for option in cursor.options(b"start", b"minbatch", b"maxbatch"):
        if option == b"start":
            start = cursor.integer()
            if not 1 <= start <= MAX_ID:
                raise CommandError(errors.START_RANGE)
        else:
            settings["min_batch" if option == b"minbatch" else "max_batch"] = _batch(cursor)
    lo = settings.get("min_batch", min(config.min_batch, settings.get("max_batch", config.min_batch)))
    hi = settings.get("max_batch", max(config.max_batch, lo))
    if lo > hi:
        raise CommandError(errors.BATCH_RANGE.format(_BATCH.high))
    if settings:
        settings = {"min_batch": lo, "max_batch": hi}
        may_change_settings(client, args[1])  # its own batch bounds: what SEQ.ALTER sets
    if start != 1:
        may_raise_floor(client, args[1])  # a first ID above 1 raises a floor
    return _create(client, args[1], start, settings)


# SEQ.CREATE key TIMESTAMP ...: integer options that change the layout, by the Layout field they set
_LAYOUT_INTS = {
    b"timebits": "time_bits",
    b"nodebits": "node_bits",
    b"seqbits": "seq_bits",
    b"epoch": "epoch",
    b"unit": "unit",
}


_LAYOUT_OPTIONS = (b"preset", b"order", *_LAYOUT_INTS, b"node")


class _LayoutOptions:
    """SEQ.CREATE ... TIMESTAMP's layout options (and SEQ.ALTER's, repairing a lost layout), read
    one by one (``take``), then made into a checked layout (``layout``)."""

    def __init__(self) -> None:
        self.preset = "snowflake"
        self.changes: dict[str, Any] = {}
        self.node = 0
        self.given = False

    def take(self, option: bytes, cursor: Args) -> None:
        self.given = True
        if option == b"preset":
            self.preset = cursor.text().lower()
            layouts.preset(self.preset)  # an unknown name fails here, before anything else is looked at
        elif option == b"order":
            self.changes["order"] = tuple(cursor.text().lower().split(","))
        elif option in _LAYOUT_INTS:
            self.changes[_LAYOUT_INTS[option]] = cursor.integer()
        else:
            self.node = cursor.integer()

    def layout(self, client: Client) -> layouts.Layout:
        """The layout named (snowflake when no preset is), shown as ``custom`` if it differs from
        its preset; checked, and checked against the clock as a new one."""
        base = layouts.preset(self.preset)
        layout = dataclasses.replace(base, node=self.node, **self.changes)  # validates: bits, order, unit, node
        if layout != dataclasses.replace(base, node=self.node):
            layout = dataclasses.replace(layout, preset="custom")
        layout.check_new(int(client.app.keyspace.wall() * 1000))
        return layout


def _create_timestamp(client: Client, key: bytes, cursor: Args) -> Any:
    options = _LayoutOptions()
    start = 0
    settings: dict[str, Any] = {}
    for option in cursor.options(*_LAYOUT_OPTIONS, b"floor", b"lookahead", b"maxlead"):
        if option in _LAYOUT_OPTIONS:
            options.take(option, cursor)
        elif option == b"floor":
            floor = cursor.integer()
            if floor < 0:
                raise CommandError(errors.SET_NEGATIVE)
            start = floor + 1
        elif option == b"lookahead":
            settings["lookahead"] = _ms("lookahead", cursor, errors.TS_LOOKAHEAD)
        else:
            settings["max_lead"] = _ms("max_lead", cursor, errors.TS_MAXLEAD)
    if settings:
        may_change_settings(client, key)  # its own LOOKAHEAD/MAXLEAD: what SEQ.ALTER sets
    settings.update(options.layout(client).to_settings())
    if start:
        may_raise_floor(client, key)  # FLOOR
    return _create(client, key, start, settings, TIMESTAMP)


_BATCH = setting_bounds("min_batch")  # MINBATCH and MAXBATCH: those of min_batch/max_batch (march.config)


def _batch(cursor: Args) -> int:
    """MINBATCH or MAXBATCH's value: an integer (Redis' text) within the bounds of min_batch/max_batch."""
    value = cursor.integer()
    if not _BATCH.low <= value <= _BATCH.high:
        raise CommandError(errors.BATCH_RANGE.format(int(_BATCH.high)))
    return value


def _ms(setting: str, cursor: Args, text: str) -> int:
    """A per-sequence time setting within the bounds of the option it overrides (``march.config``)."""
    bounds = setting_bounds(setting)
    return cursor.integer(text.format(int(bounds.low), int(bounds.high)), low=int(bounds.low), high=int(bounds.high))


@command(
    "seq.alter",
    -2,
    ("write",),
    ("@seqadmin", "@slow"),  # not @write: +@read +@write draws IDs and never changes a sequence's limits
    keys=(1, 1, 1),
    primary=True,
    summary="SEQ.ALTER key [MINBATCH n] [MAXBATCH n] [MAXLEAD ms]: change a sequence's settings, durably and at once "
    "(and [PRESET name] [layout options]: give a timestamp sequence whose stored layout cannot be read its layout).",
    group="sequence",
)
def seq_alter(client: Client, args: list[bytes]) -> Any:
    changes: dict[str, int] = {}
    layout = _LayoutOptions()
    cursor = Args(args, 2)
    for option in cursor.options(b"minbatch", b"maxbatch", b"maxlead", *_LAYOUT_OPTIONS):
        if option == b"maxlead":
            changes["max_lead"] = _ms("max_lead", cursor, errors.TS_MAXLEAD)
        elif option in _LAYOUT_OPTIONS:
            layout.take(option, cursor)
        else:
            changes["min_batch" if option == b"minbatch" else "max_batch"] = _batch(cursor)
    if not changes and not layout.given:
        raise CommandError(errors.ALTER_NOTHING)
    return _alter(client, args[1], changes, layout.layout(client) if layout.given else None)


async def _alter(client: Client, key: bytes, changes: dict[str, int], layout: layouts.Layout | None) -> str:
    await client.app.keyspace.alter(key, changes, layout)
    return "OK"


async def _create(client: Client, key: bytes, start: int, settings: dict[str, Any], kind: str = "sequence") -> Any:
    await client.app.keyspace.create(key, start=start, settings=settings, kind=kind)
    return "OK"


@command(
    "seq.decode",
    3,
    ("readonly", "fast"),
    ("@read", "@fast"),
    keys=(1, 1, 1),
    summary="SEQ.DECODE key id: the time (ISO-8601, UTC), node and sequence fields of a timestamp ID.",
    group="sequence",
)
def seq_decode(client: Client, args: list[bytes]) -> Any:
    cursor = Args(args)
    return _decode(client, cursor.key(), cursor.integer())


async def _decode(client: Client, key: bytes, id_: int) -> Any:
    gen = await _existing(client, key)
    if not isinstance(gen, TimestampGenerator):
        raise CommandError(errors.WRONGTYPE)
    return _fields(gen.decode(id_))


@command(
    "seq.info",
    2,
    ("readonly",),
    ("@read", "@slow"),
    keys=(1, 1, 1),
    summary="Live state of a sequence: next, durable ceiling, batch, store writes, waits (timestamp: layout, lead).",
    group="sequence",
)
def seq_info(client: Client, args: list[bytes]) -> Any:
    return _info(client, args[1])


async def _info(client: Client, key: bytes) -> Any:
    fields = (await _existing(client, key)).info()
    return _fields(fields | client.app.groups.placement(key))  # (several groups: its slot and group)


async def _existing(client: Client, key: bytes) -> Generator:
    gen = await client.app.keyspace.activate(key)
    if gen is None:
        raise CommandError(errors.NO_SUCH_KEY.format(key_text(key)))
    return gen


def _fields(fields: dict[str, Any]) -> dict[bytes, Any]:
    """A map reply: integers stay integers, everything else is a bulk string."""
    return {k.encode(): v if isinstance(v, int) else str(v).encode() for k, v in fields.items()}


@command(
    "seq.list",
    1,
    ("readonly",),
    ("@read", "@slow"),
    primary=True,
    summary="Every sequence name, in byte order.",
    group="sequence",
)
def seq_list(client: Client, args: list[bytes]) -> Any:
    return list_names(client, b"*")
