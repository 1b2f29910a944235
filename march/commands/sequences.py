"""Sequence commands: INCR, INCRBY, SEQ.CREATE, SEQ.INFO, SEQ.LIST.

- ``INCR key``: the next ID (a new key starts at 1, as in Redis, when auto_create is on).
- ``INCRBY key n``: n consecutive IDs (1 <= n <= max_incrby); returns the last.
- ``SEQ.CREATE key [START n] [MINBATCH n] [MAXBATCH n]``: create a sequence explicitly.
- ``SEQ.INFO key``: live state (next, durable ceiling, batch, store writes and latency, waits).
- ``SEQ.LIST``: every sequence name.

INCR/INCRBY take the generator's synchronous fast path when the durable range has room, and
return a coroutine (awaited by the dispatcher) only when they must create the key or wait for a
store write. This module is the INCR hot path: keep it lean.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from .. import errors
from ..config import MAX_ID
from ..errors import CommandError
from .args import key_text, parse_int
from .registry import command

if TYPE_CHECKING:
    from ..client import Client

# INCR and INCRBY: the hot path, one key, an integer reply
_hands_out_ids = partial(
    command,
    flags=("write", "denyoom", "fast"),
    categories=("@write", "@string", "@fast"),
    keys=(1, 1, 1),
    hot=True,
    group="string",
)


def incr_run(client: Client, args: list[bytes], count: int) -> int | None:
    """``count`` pipelined ``INCR key`` at once: the last ID of the run, or None (run them singly)."""
    gen = client.generators.get(args[1])
    return None if gen is None else gen.take(count)


@_hands_out_ids("incr", 2, consecutive=incr_run, summary="The next ID of the sequence (created at 1 if new).")
def incr(client: Client, args: list[bytes]) -> Any:
    gen = client.generators.get(args[1])
    if gen is not None:
        value = gen.take(1)
        if value is not None:
            return value
    return _take(client, args[1], 1)


@_hands_out_ids("incrby", 3, summary="INCRBY key n: hand out n consecutive IDs, return the last.")
def incrby(client: Client, args: list[bytes]) -> Any:
    n = parse_int(args[2])
    if n < 1:
        raise CommandError(errors.INCRBY_NOT_POSITIVE)
    if n > client.app.config.max_incrby:
        raise CommandError(errors.INCRBY_TOO_LARGE.format(client.app.config.max_incrby))
    gen = client.generators.get(args[1])
    if gen is not None:
        value = gen.take(n)
        if value is not None:
            return value
    return _take(client, args[1], n)


async def _take(client: Client, key: bytes, n: int) -> int:
    gen = client.app.keyspace.get(key)
    if gen is None:
        gen = await client.app.keyspace.ensure(key)
    return await gen.take_wait(n)


@command(
    "seq.create",
    -2,
    ("write", "denyoom"),
    ("@write", "@slow"),
    keys=(1, 1, 1),
    summary="SEQ.CREATE key [START n] [MINBATCH n] [MAXBATCH n]: create a sequence.",
    group="sequence",
)
def seq_create(client: Client, args: list[bytes]) -> Any:
    config = client.app.config
    start = 1
    settings: dict[str, int] = {}
    i = 2
    while i < len(args):
        opt = args[i].lower()
        if i + 1 >= len(args):
            raise CommandError(errors.SYNTAX)
        value = parse_int(args[i + 1])
        if opt == b"start":
            if not 1 <= value <= MAX_ID:
                raise CommandError(errors.START_RANGE)
            start = value
        elif opt == b"minbatch":
            settings["min_batch"] = value
        elif opt == b"maxbatch":
            settings["max_batch"] = value
        else:
            raise CommandError(errors.SYNTAX)
        i += 2
    lo = settings.get("min_batch", min(config.min_batch, settings.get("max_batch", config.min_batch)))
    hi = settings.get("max_batch", max(config.max_batch, lo))
    if not 1 <= lo <= hi <= MAX_ID:
        raise CommandError(errors.BATCH_RANGE.format(MAX_ID))
    if settings:
        settings = {"min_batch": lo, "max_batch": hi}
    return _create(client, args[1], start, settings)


async def _create(client: Client, key: bytes, start: int, settings: dict[str, int]) -> Any:
    await client.app.keyspace.create(key, start=start, settings=settings)
    return "OK"


@command(
    "seq.info",
    2,
    ("readonly",),
    ("@read", "@slow"),
    keys=(1, 1, 1),
    summary="Live state of a sequence: next, durable ceiling, batch, store writes, waits.",
    group="sequence",
)
def seq_info(client: Client, args: list[bytes]) -> Any:
    gen = client.app.keyspace.get(args[1])
    if gen is None:
        raise CommandError(errors.NO_SUCH_KEY.format(key_text(args[1])))
    return {k.encode(): v if isinstance(v, int) else str(v).encode() for k, v in gen.info().items()}


@command(
    "seq.list",
    1,
    ("readonly",),
    ("@read", "@slow"),
    summary="Every sequence name, in creation order.",
    group="sequence",
)
def seq_list(client: Client, args: list[bytes]) -> Any:
    return list(client.app.keyspace.order)
