"""Keyspace commands on sequences: GET, MGET, SET, EXISTS, TYPE, TTL, PTTL, KEYS, SCAN, DBSIZE.

- ``GET key`` returns a watermark W: every ID handed out before the GET is <= W, every ID handed
  out after it is > W. Nil for an unknown key.
- ``SET key N [NX]`` raises the floor so the next ID is > N, durably before it replies (for moving
  from Redis INCR counters or database auto-increment). It refuses to move a sequence backwards;
  ``SET key N`` with N equal to the current watermark is accepted and changes nothing. On an
  unknown key it creates the sequence (first ID N+1). NX: only if the key does not exist (nil if
  it does).
- Sequences are strings to Redis tools (``TYPE`` says ``string``) and never expire (``TTL`` -1).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from .. import errors
from ..errors import CommandError
from .args import glob_to_regex, parse_int
from .registry import command

if TYPE_CHECKING:
    from ..client import Client

_READ = ("@read", "@string", "@fast")
_KEYSPACE = ("@keyspace", "@read")
# TYPE, TTL, PTTL: one key in, a constant-time answer out
_key_query = partial(
    command, flags=("readonly", "fast"), categories=(*_KEYSPACE, "@fast"), keys=(1, 1, 1), hot=True, group="generic"
)


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
    gen = client.app.keyspace.generators.get(args[1])
    return None if gen is None else b"%d" % gen.watermark()


@command("mget", -2, ("readonly", "fast"), _READ, keys=(1, -1, 1), summary="GET for several keys.", group="string")
def mget(client: Client, args: list[bytes]) -> Any:
    gens = client.app.keyspace.generators
    out: list[bytes | None] = []
    for key in args[1:]:
        gen = gens.get(key)
        out.append(None if gen is None else b"%d" % gen.watermark())
    return out


@command(
    "set",
    -3,
    ("write", "denyoom"),
    ("@write", "@string", "@slow"),
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
    keyspace = client.app.keyspace
    gen = keyspace.get(key)
    if gen is None:
        gen, created = await keyspace.create_or_get(key, start=floor + 1, settings={})
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
    summary="How many of the keys are sequences.",
    group="generic",
)
def exists(client: Client, args: list[bytes]) -> Any:
    gens = client.app.keyspace.generators
    return sum(1 for k in args[1:] if k in gens)


@_key_query("type", 2, summary="'string' for a sequence (INCR and GET work on it), 'none' otherwise.")
def type_(client: Client, args: list[bytes]) -> Any:
    return "string" if args[1] in client.app.keyspace.generators else "none"


@_key_query("ttl", 2, summary="-1: sequences never expire (-2 if the key does not exist).")
def ttl(client: Client, args: list[bytes]) -> Any:
    return -1 if args[1] in client.app.keyspace.generators else -2


@_key_query("pttl", 2, summary="-1: sequences never expire (-2 if the key does not exist).")
def pttl(client: Client, args: list[bytes]) -> Any:
    return ttl(client, args)


@command(
    "keys",
    2,
    ("readonly",),
    (*_KEYSPACE, "@slow", "@dangerous"),
    summary="Every sequence name matching a glob pattern.",
    group="generic",
)
def keys(client: Client, args: list[bytes]) -> Any:
    if args[1] == b"*":
        return list(client.app.keyspace.order)
    rx = glob_to_regex(args[1])
    return [k for k in client.app.keyspace.order if rx.match(k)]


@command(
    "scan",
    -2,
    ("readonly",),
    (*_KEYSPACE, "@slow"),
    summary="SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]: iterate over sequence names.",
    group="generic",
)
def scan(client: Client, args: list[bytes]) -> Any:
    cursor = parse_int(args[1], errors.INVALID_CURSOR) if args[1] != b"0" else 0
    if cursor < 0:  # Redis reads the cursor as unsigned: a huge cursor, past the end
        cursor = 1 << 64
    count, rx, kind = 10, None, None
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
            rx = glob_to_regex(args[i + 1])
        elif opt == b"type":
            kind = args[i + 1].lower()
        else:
            raise CommandError(errors.SYNTAX)
        i += 2
    order = client.app.keyspace.order  # creation order; keys are never removed, so cursors are stable
    chunk = order[cursor : cursor + count]
    nxt = cursor + count if cursor + count < len(order) else 0
    found = [k for k in chunk if (rx is None or rx.match(k)) and (kind is None or kind == b"string")]
    return [b"%d" % nxt, found]


@command("dbsize", 1, ("readonly", "fast"), (*_KEYSPACE, "@fast"), summary="How many sequences exist.", group="server")
def dbsize(client: Client, args: list[bytes]) -> Any:
    return len(client.app.keyspace.generators)
