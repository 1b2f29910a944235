"""Keyspace commands on sequences: GET, MGET, SET, EXISTS, TYPE, TTL, PTTL, KEYS, SCAN, DBSIZE.

- ``GET key`` returns a watermark W: every ID handed out before the GET is <= W, every ID handed
  out after it is > W. Nil for an unknown key. A key not yet active in this term is read from
  the store first (its stored ceiling minus one is such a watermark).
- ``SET key N [NX]`` raises the floor so the next ID is > N, durably before it replies (for moving
  from Redis INCR counters or database auto-increment). It refuses to move a sequence backwards;
  ``SET key N`` with N equal to the current watermark is accepted and changes nothing. On an
  unknown key it creates the sequence (first ID N+1). NX: only if the key does not exist (nil if
  it does).
- Sequences are strings to Redis tools (``TYPE`` says ``string``) and never expire (``TTL`` -1).
- ``KEYS``, ``SCAN``, ``DBSIZE`` read the store a page at a time (``Keyspace.keys/scan/count``),
  in byte order; a pattern's literal prefix narrows what ``KEYS`` reads. A reply that would pass
  ``max_output_buffer`` is an error before it is built. A user limited to some keys (ACL) sees
  only the names it may read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from .. import errors
from ..errors import CommandError
from ..glob import Glob, compile_glob, literal_prefix
from ..keyspace import PAGE
from .args import parse_int
from .dispatch import may_create
from .registry import command

if TYPE_CHECKING:
    from ..client import Client
    from ..keyspace import Generator

_READ = ("@read", "@string", "@fast")
_KEYSPACE = ("@keyspace", "@read")
# TYPE, TTL, PTTL: one key in, a constant-time answer out
_key_query = partial(
    command,
    flags=("readonly", "fast"),
    categories=(*_KEYSPACE, "@fast"),
    keys=(1, 1, 1),
    hot=True,
    group="generic",
    key_access="",  # looks at whether the key exists, not at its value (ACL: any matching pattern)
)


def _on_key(client: Client, key: bytes, answer: Callable[[Generator | None], Any]) -> Any:
    """``answer(generator or None)``: at once for a key active in this term, else after reading it."""
    gen = client.generators.get(key)
    if gen is not None:
        return answer(gen)
    return _after_reading(client, key, answer)


async def _after_reading(client: Client, key: bytes, answer: Callable[[Generator | None], Any]) -> Any:
    return answer(await client.app.keyspace.activate(key))


def _watermark(gen: Generator | None) -> bytes | None:
    return None if gen is None else b"%d" % gen.watermark()


@command(
    "get",
    2,
    ("readonly", "fast"),
    _READ,
    keys=(1, 1, 1),
    hot=True,
    summary="Watermark W: every ID handed out before is <= W, every later one > W; nil if unknown.",
    group="string",
)
def get(client: Client, args: list[bytes]) -> Any:
    return _on_key(client, args[1], _watermark)


@command("mget", -2, ("readonly", "fast"), _READ, keys=(1, -1, 1), summary="GET for several keys.", group="string")
def mget(client: Client, args: list[bytes]) -> Any:
    gens = client.generators
    if all(key in gens for key in args[1:]):
        return [_watermark(gens[key]) for key in args[1:]]
    return _mget(client, args[1:])


async def _mget(client: Client, keys: list[bytes]) -> list[bytes | None]:
    found = await asyncio.gather(*(client.app.keyspace.activate(k) for k in keys))  # the reads share requests
    return [_watermark(gen) for gen in found]


@command(
    "set",
    -3,
    ("write", "denyoom"),
    ("@floor", "@string", "@slow"),
    keys=(1, 1, 1),
    summary="SET key N [NX]: raise the floor so the next ID is > N (never backwards).",
    group="string",
)
def set_(client: Client, args: list[bytes]) -> Any:
    nx = False
    for opt in args[3:]:
        if opt.lower() == b"nx":
            nx = True
        else:
            raise CommandError(errors.SET_OPTION)
    floor = parse_int(args[2])
    if floor < 0:
        raise CommandError(errors.SET_NEGATIVE)
    return _set(client, args[1], floor, nx)


async def _set(client: Client, key: bytes, floor: int, nx: bool) -> Any:
    if await client.app.keyspace.activate(key) is None:
        may_create(client, key)
    gen, created = await client.app.keyspace.create_or_get(key, start=floor + 1, settings={})
    if created:
        return "OK"
    if nx:
        return None
    await gen.raise_floor(floor)
    return "OK"


@command(
    "exists",
    -2,
    ("readonly", "fast"),
    (*_KEYSPACE, "@fast"),
    keys=(1, -1, 1),
    key_access="",
    summary="How many of the keys are sequences.",
    group="generic",
)
def exists(client: Client, args: list[bytes]) -> Any:
    gens = client.generators
    if all(key in gens for key in args[1:]):
        return len(args) - 1
    return _exists(client, args[1:])


async def _exists(client: Client, keys: list[bytes]) -> int:
    found = await asyncio.gather(*(client.app.keyspace.activate(k) for k in keys))
    return sum(1 for gen in found if gen is not None)


@_key_query("type", 2, summary="'string' for a sequence (INCR and GET work on it), 'none' otherwise.")
def type_(client: Client, args: list[bytes]) -> Any:
    return _on_key(client, args[1], lambda gen: "none" if gen is None else "string")


@_key_query("ttl", 2, summary="-1: sequences never expire (-2 if the key does not exist).")
def ttl(client: Client, args: list[bytes]) -> Any:
    return _on_key(client, args[1], lambda gen: -2 if gen is None else -1)


@_key_query("pttl", 2, summary="-1: sequences never expire (-2 if the key does not exist).")
def pttl(client: Client, args: list[bytes]) -> Any:
    return ttl(client, args)


@command(
    "keys",
    2,
    ("readonly",),
    (*_KEYSPACE, "@slow", "@dangerous"),
    primary=True,
    summary="Every sequence name matching a glob pattern, in byte order.",
    group="generic",
)
def keys(client: Client, args: list[bytes]) -> Any:
    pattern = args[1]
    if pattern == b"*":
        return client.app.keyspace.keys(_readable(client), budget=client.app.config.max_output_buffer)
    glob = compile_glob(pattern).match
    readable = _readable(client)
    matches = glob if readable is None else (lambda k: glob(k) and readable(k))
    return client.app.keyspace.keys(matches, literal_prefix(pattern), client.app.config.max_output_buffer)


def _readable(client: Client) -> Callable[[bytes], bool] | None:
    """The names a restricted user's listing shows: those it may read (None: every name)."""
    user = client.user
    return None if user.all_keys else lambda k: user.may_access(k, write=False)


@command(
    "scan",
    -2,
    ("readonly",),
    (*_KEYSPACE, "@slow"),
    primary=True,
    summary="SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]: iterate over sequence names.",
    group="generic",
)
def scan(client: Client, args: list[bytes]) -> Any:
    cursor = parse_int(args[1], errors.INVALID_CURSOR) if args[1] != b"0" else 0
    if cursor < 0:  # Redis reads the cursor as unsigned: a huge cursor, past the end
        cursor = 1 << 64
    count, glob, kind = 10, None, None
    i = 2
    while i < len(args):
        opt = args[i].lower()
        if i + 1 >= len(args):
            raise CommandError(errors.SYNTAX)
        if opt == b"count":
            count = parse_int(args[i + 1])
            if count < 1:
                raise CommandError(errors.SYNTAX)
        elif opt == b"match":
            glob = compile_glob(args[i + 1])
        elif opt == b"type":
            kind = args[i + 1].lower()
        else:
            raise CommandError(errors.SYNTAX)
        i += 2
    return _scan(client, cursor, min(count, PAGE), glob, kind)


async def _scan(client: Client, cursor: int, count: int, glob: Glob | None, kind: bytes | None) -> Any:
    nxt, page = await client.app.keyspace.scan(cursor, count)
    readable = _readable(client)
    found = [
        k
        for k in page
        if (glob is None or glob.match(k)) and (kind is None or kind == b"string") and (readable is None or readable(k))
    ]
    return [b"%d" % nxt, found]


@command(
    "dbsize",
    1,
    ("readonly", "fast"),
    (*_KEYSPACE, "@fast"),
    primary=True,
    summary="How many sequences exist.",
    group="server",
)
def dbsize(client: Client, args: list[bytes]) -> Any:
    return client.app.keyspace.count()
