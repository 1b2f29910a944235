"""Worker ids for embedded snowflake generators: WORKER.ACQUIRE, WORKER.RENEW, WORKER.RELEASE, WORKER.LIST.

The protocol and its guarantees are ``march.workers``'. Here: argument parsing and replies only.
The namespace is the commands' key (so cluster clients route them to the primary, and ACL key
patterns apply to namespaces), but a namespace is not a sequence: it never appears in KEYS, SCAN,
DBSIZE or SEQ.LIST. Every worker command is served by the primary only (a standby answers MOVED).

ACL: WORKER.ACQUIRE, RENEW and RELEASE are in ``@worker`` alone, never ``@write``: holding worker
ids is its own grant (``+@read +@write`` draws sequence IDs and nothing more); WORKER.LIST, which
changes nothing and shows no token, is ``@worker`` and ``@read``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import errors
from ..errors import CommandError
from ..workers import IDS
from .args import parse_int
from .registry import command

if TYPE_CHECKING:
    from ..client import Client
    from ..workers import Workers


def _workers(client: Client) -> Workers:
    return client.app.keyspace.workers


def _id(arg: bytes) -> int:
    value = parse_int(arg, errors.WORKER_ID)
    if not 0 <= value < IDS:
        raise CommandError(errors.WORKER_ID)
    return value


def _upto(args: list[bytes], first: int) -> int:
    """``[UPTO ms]`` from ``args[first:]`` (0 when absent)."""
    rest = args[first:]
    if not rest:
        return 0
    if len(rest) != 2 or rest[0].lower() != b"upto":
        raise CommandError(errors.SYNTAX)
    value = parse_int(rest[1], errors.WORKER_UPTO)
    if value < 0:
        raise CommandError(errors.WORKER_UPTO)
    return value


@command(
    "worker.acquire",
    -2,
    ("write", "denyoom"),
    ("@worker", "@slow"),
    keys=(1, 1, 1),
    key_access="W",
    primary=True,
    summary="WORKER.ACQUIRE namespace [TTL seconds]: hold the lowest free worker id (0..1023); "
    "replies [id, token, ttl_seconds, floor_ms] (issue only times > floor_ms).",
    group="worker",
)
def worker_acquire(client: Client, args: list[bytes]) -> Any:
    ttl = None
    if len(args) > 2:
        if len(args) != 4 or args[2].lower() != b"ttl":
            raise CommandError(errors.SYNTAX)
        ttl = parse_int(args[3], errors.WORKER_TTL)
    return _acquire(client, args[1], ttl)


async def _acquire(client: Client, namespace: bytes, ttl: int | None) -> list[Any]:
    worker_id, token, granted, floor = await _workers(client).acquire(namespace, ttl)
    return [worker_id, token, granted, floor]


@command(
    "worker.renew",
    -4,
    ("write", "denyoom"),
    ("@worker", "@slow"),
    keys=(1, 1, 1),
    key_access="W",
    primary=True,
    summary="WORKER.RENEW namespace id token [UPTO ms]: extend the holding by its TTL (replies ttl_seconds); "
    "UPTO: no time above ms until the next renew (stored before the reply). Wrong token: stop.",
    group="worker",
)
def worker_renew(client: Client, args: list[bytes]) -> Any:
    return _workers(client).renew(args[1], _id(args[2]), args[3], _upto(args, 4))


@command(
    "worker.release",
    -4,
    ("write",),
    ("@worker", "@slow"),
    keys=(1, 1, 1),
    key_access="W",
    primary=True,
    summary="WORKER.RELEASE namespace id token [UPTO ms]: free the id at once, keeping UPTO as its floor.",
    group="worker",
)
def worker_release(client: Client, args: list[bytes]) -> Any:
    return _release(client, args[1], _id(args[2]), args[3], _upto(args, 4))


async def _release(client: Client, namespace: bytes, worker_id: int, token: bytes, upto: int) -> str:
    await _workers(client).release(namespace, worker_id, token, upto)
    return "OK"


@command(
    "worker.list",
    2,
    ("readonly",),
    ("@read", "@worker", "@slow"),
    keys=(1, 1, 1),
    primary=True,
    summary="WORKER.LIST namespace: the ids held (live or resting after expiry): [id, expires_ms, floor_ms, state].",
    group="worker",
)
def worker_list(client: Client, args: list[bytes]) -> Any:
    return _list(client, args[1])


async def _list(client: Client, namespace: bytes) -> list[Any]:
    held = await _workers(client).list(namespace)
    return [[h.record.id, h.expires_ms, h.record.floor_ms, h.standing.value] for h in held]
