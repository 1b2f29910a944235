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
- ``KEYS`` (and ``SEQ.LIST``) read the store a page at a time in byte order
  (``Keyspace.keys``), off its write path; the names of a page are decided on in slices that take
  turns with other clients. What a listing reads is narrowed to the longest prefix that both the
  pattern and the user's readable key patterns (ACL) fix. A name is checked against the ACL
  first (usually a prefix), then against the pattern (linear time: ``march.glob``). A reply that
  would pass the room left in the client's output buffer (``max_output_buffer`` less its unread
  replies) is an error before it is built.
- ``SCAN`` pages through the store's own cursors (``Store.scan``: SQLite's rowids, in creation
  order, each name once; etcd's offsets in byte order, checked by counting): any cursor, known or
  not, costs a page or two of reading. ``MATCH *`` matches every name (the empty one too), as in
  Redis. A user limited to some keys sees only the names it may read.
- ``DBSIZE`` answers from memory (``Keyspace.count``: counted once per term, kept up to date).
- **Several leadership groups** (``march.cluster.layout``): as on a Redis Cluster node, ``KEYS``,
  ``SCAN``, ``SEQ.LIST`` and ``DBSIZE`` see only the names in the slots of the groups this node
  serves when the request starts (``Groups.served_slots``: one CRC16 per name, in C, as one more
  check of the listing's slices). With one group, or on a node serving every group, every name is
  listed. With one group ``DBSIZE`` answers from memory, as before; with several it asks the store
  (``Keyspaces.size``: each group's in-memory count sees only its own creations).
- **CROSSSLOT**: ``MGET`` and ``EXISTS`` whose keys belong to different groups get Redis'
  ``CROSSSLOT`` error (``Groups.check_one``, called by dispatch before routing, as Redis checks
  slots before MOVED). Keys of different slots of one group are served, as before groups existed:
  Redis refuses them, but nothing here needs one slot (one group is one primary, one store), and
  a plain client behind a forwarding node keeps working. A cluster client sends multi-key commands
  per slot anyway (redis-py ``mget_nonatomic``).
- ``MGET`` and ``EXISTS`` of keys not active yet read them ``LOOKUP_CHUNK`` at a time (each
  read shares the store's batched requests): an unknown key costs a few tasks, all woken at once
  when the store answers, so thousands at once would queue every other client behind them.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from march import errors
from march.cluster.groups import SLOT_CHECK_COST, in_slots
from march.commands.args import Args, parse_int
from march.commands.permissions import may_create
from march.commands.table import KEY, KEYS, Arg, command
from march.errors import CommandError
from march.glob import Glob, compile_glob, literal_prefix
from march.keyspace.keyspace import PAGE, Selection, sift

if TYPE_CHECKING:
    from march.client import Client
    from march.keyspace.keyspace import Generator

_READ = ("@read", "@string", "@fast")
# Keys of one MGET/EXISTS looked up in the store at a time: 128 wake-ups take about a millisecond
# of the event loop; MGET of 5,000 unknown keys queued ~150 ms of them in front of every client.
LOOKUP_CHUNK = 128
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
    tips=("nondeterministic_output",),  # (TTL, PTTL: TYPE has none)
    complexity="O(1)",
    arguments=KEY,
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
    complexity="O(1)",
    arguments=KEY,
)
def get(client: Client, args: list[bytes]) -> Any:
    if args[1] not in client.generators:  # a row of the compact table is read where it is (it stays a row)
        row = client.app.keyspace.row(args[1])
        if row is not None:
            return b"%d" % (row[0] - 1)
    return _on_key(client, args[1], _watermark)


@command(
    "mget",
    -2,
    ("readonly", "fast"),
    _READ,
    keys=(1, -1, 1),
    summary="GET for several keys.",
    group="string",
    tips=("request_policy:multi_shard",),
    complexity="O(N) where N is the number of keys to retrieve.",
    arguments=KEYS,
)
def mget(client: Client, args: list[bytes]) -> Any:
    gens = client.generators
    if all(key in gens for key in args[1:]):
        return [_watermark(gens[key]) for key in args[1:]]
    return _mget(client, args[1:])


async def _activate_all(client: Client, keys: list[bytes]) -> list[Generator | None]:
    """Each key's generator (None: no such sequence), those not active read ``LOOKUP_CHUNK`` at a time."""
    gens = client.generators
    missing = [k for k in dict.fromkeys(keys) if k not in gens]
    keyspace = client.app.keyspace
    read: dict[bytes, Generator | None] = {}
    for start in range(0, len(missing), LOOKUP_CHUNK):
        chunk = missing[start : start + LOOKUP_CHUNK]
        found = await asyncio.gather(*(keyspace.activate(k) for k in chunk))  # the reads share requests
        read.update(zip(chunk, found, strict=True))
    return [read[k] if k in read else gens.get(k) for k in keys]


async def _mget(client: Client, keys: list[bytes]) -> list[bytes | None]:
    return [_watermark(gen) for gen in await _activate_all(client, keys)]


@command(
    "set",
    -3,
    ("write", "denyoom"),
    ("@floor", "@string", "@slow"),
    keys=(1, 1, 1),
    summary="SET key N [NX]: raise the floor so the next ID is > N (never backwards).",
    group="string",
    complexity="O(1)",
    arguments=(*KEY, Arg("value", "integer"), Arg("nx", "pure-token", token="NX", flags=("optional",))),
)
def set_(client: Client, args: list[bytes]) -> Any:
    cursor = Args(args)
    key, value = cursor.key(), cursor.next()
    nx = False
    for _ in cursor.options(b"nx", message=errors.SET_OPTION):
        nx = True
    floor = parse_int(value)
    if floor < 0:
        raise CommandError(errors.SET_NEGATIVE)
    return _set(client, key, floor, nx)


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
    tips=("request_policy:multi_shard", "response_policy:agg_sum"),
    complexity="O(N) where N is the number of keys to check.",
    arguments=KEYS,
)
def exists(client: Client, args: list[bytes]) -> Any:
    gens = client.generators
    if all(key in gens for key in args[1:]):
        return len(args) - 1
    return _exists(client, args[1:])


async def _exists(client: Client, keys: list[bytes]) -> int:
    return sum(1 for gen in await _activate_all(client, keys) if gen is not None)


@_key_query("type", 2, summary="'string' for a sequence (INCR and GET work on it), 'none' otherwise.", tips=())
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
    tips=("request_policy:all_shards", "nondeterministic_output_order"),
    complexity="O(N) with N being the number of keys in the database, under the assumption that the key names in "
    "the database and the given pattern have limited length.",
    arguments=(Arg("pattern", "pattern"),),
)
def keys(client: Client, args: list[bytes]) -> Any:
    return list_names(client, args[1])


def list_names(client: Client, pattern: bytes) -> Any:
    """KEYS ``pattern`` (and SEQ.LIST: ``*``) for this client: the names it may read, in byte order."""
    plan = _plan(client, pattern)
    if plan is None:
        return []
    budget = client.reply_room()
    if budget <= 0:
        raise CommandError(errors.REPLY_TOO_LARGE.format(client.app.config.max_output_buffer))
    return client.app.keyspace.keys_reply(plan.selection, plan.prefix, budget)


@dataclass(frozen=True)
class _Plan:
    """What a listing keeps (None: every name) and the prefix every name it keeps starts with."""

    selection: Selection | None
    prefix: bytes


def _plan(client: Client, pattern: bytes | None) -> _Plan | None:
    """How this client's listing with ``pattern`` (None or ``*``: every name) decides on names; None: no
    name can be kept (the user may read none, or the pattern and its key patterns exclude each other).

    The ACL comes first: a name the user may not read is never matched against the pattern."""
    user = client.user
    checks: list[Callable[[bytes], bool]] = []
    globs: list[Glob] = []
    prefix = b""
    slots = client.app.groups.served_slots()
    if slots is not None:
        if not any(slots):
            return None
        checks.append(partial(in_slots, slots))
    if not user.all_keys:
        readable = [rule.pattern for rule in user.keys if rule.read]
        if not readable:
            return None
        prefix = _common_prefix([literal_prefix(p) for p in readable])
        globs += (compile_glob(p) for p in readable)  # only to cost the check: may_access is the check
        checks.append(lambda k: user.may_access(k, write=False))
    if pattern is not None and pattern != b"*":  # Redis matches nothing for "*": every name, the empty one too
        fixed = _prefix_only(pattern)
        if fixed is None:
            glob = compile_glob(pattern)
            globs.append(glob)
            checks.append(glob.match)
            fixed = literal_prefix(pattern)
        if fixed.startswith(prefix):
            prefix = fixed
        elif not prefix.startswith(fixed):
            return None
    if not checks:
        return _Plan(None, prefix)
    keep = checks[0] if len(checks) == 1 else partial(_every, checks)  # in order: the cheap ones first
    extra = 1 + (0 if slots is None else SLOT_CHECK_COST)
    cost = partial(_one_cost, globs[0].cost, extra) if len(globs) == 1 else partial(_costs, globs, extra)
    return _Plan(Selection(keep, cost), prefix)


def _prefix_only(pattern: bytes) -> bytes | None:
    """``p`` when the glob ``pattern`` is ``p*`` (trailing stars after bytes that are all literal): it
    keeps exactly the names that start with ``p``, which the store's read is narrowed to already, so
    no name is matched against it (KEYS ``user:*`` costs its page reads only); else None."""
    fixed = pattern.rstrip(b"*")
    if len(fixed) == len(pattern) or any(c in _WILD for c in fixed):
        return None
    return fixed


_WILD = frozenset(b"*?[\\")  # the bytes that make a glob's byte not a literal


def _every(checks: list[Callable[[bytes], bool]], name: bytes) -> bool:
    return all(check(name) for check in checks)


def _one_cost(cost: Callable[[int], int], extra: int, n: int) -> int:
    return cost(n) + extra


def _costs(globs: list[Glob], extra: int, n: int) -> int:
    return sum(g.cost(n) for g in globs) + extra


def _common_prefix(prefixes: list[bytes]) -> bytes:
    first, last = min(prefixes), max(prefixes)
    i = 0
    while i < len(first) and first[i] == last[i]:
        i += 1
    return first[:i]


@command(
    "scan",
    -2,
    ("readonly",),
    (*_KEYSPACE, "@slow"),
    primary=True,
    summary="SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]: iterate over sequence names.",
    group="generic",
    tips=("nondeterministic_output", "request_policy:special"),
)
def scan(client: Client, args: list[bytes]) -> Any:
    request = Args(args)
    cursor = _cursor(request.next())
    count, pattern, kind = 10, None, None
    for option in request.options(b"count", b"match", b"type"):
        if option == b"count":
            count = request.integer()
            if count < 1:
                raise CommandError(errors.SYNTAX)
        elif option == b"match":
            pattern = request.next()
        else:
            kind = request.next().lower()
    plan = _plan(client, pattern) if kind in (None, b"string") else None
    return _scan(client, cursor, min(count, PAGE), plan)


_U64 = 1 << 64
_CURSOR = re.compile(rb"[+-]?[0-9]+")


def _cursor(arg: bytes) -> int:
    """A SCAN cursor as Redis reads it (C's ``strtoul``): an unsigned 64-bit number, a leading sign
    allowed (``-1`` is 2**64 - 1), leading zeros too, the empty string is 0; no space, nothing past
    the digits, nothing above 2**64 - 1."""
    if not arg:
        return 0
    if _CURSOR.fullmatch(arg) is None:
        raise CommandError(errors.INVALID_CURSOR)
    value = int(arg)
    if abs(value) >= _U64:
        raise CommandError(errors.INVALID_CURSOR)
    return value % _U64


async def _scan(client: Client, cursor: int, count: int, plan: _Plan | None) -> Any:
    nxt, page = await client.app.keyspace.scan(cursor, count)
    if plan is None:
        found: list[bytes] = []
    else:
        found = page
        if plan.prefix:  # (KEYS reads only names with the prefix; SCAN's page has any names)
            found = [k for k in found if k.startswith(plan.prefix)]
        if plan.selection is not None:
            found = await sift(found, plan.selection)
    budget = client.reply_room()
    if sum(len(k) + 16 for k in found) + 64 > budget:  # a bulk string's framing is at most 16 bytes
        raise CommandError(errors.REPLY_TOO_LARGE.format(client.app.config.max_output_buffer))
    return [b"%d" % nxt, found]


@command(
    "dbsize",
    1,
    ("readonly", "fast"),
    (*_KEYSPACE, "@fast"),
    primary=True,
    summary="How many sequences exist.",
    group="server",
    tips=("request_policy:all_shards", "response_policy:agg_sum"),
    complexity="O(1)",
)
def dbsize(client: Client, args: list[bytes]) -> Any:
    return client.app.keyspace.size()
