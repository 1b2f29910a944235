"""Worker ids for embedded snowflake generators: WORKER.ACQUIRE, WORKER.RENEW, WORKER.RELEASE, WORKER.LIST.

The protocol and its guarantees are ``march.keyspace.worker_ids``'. Here: argument parsing and replies only.
The namespace is the commands' key (so cluster clients route them to the primary, and ACL key
patterns apply to namespaces), but a namespace is not a sequence: it never appears in KEYS, SCAN,
DBSIZE or SEQ.LIST. Every worker command is served by the primary only (a standby answers MOVED).

ACL: WORKER.ACQUIRE, RENEW and RELEASE are in ``@worker`` alone, never ``@write``: holding worker
ids is its own grant (``+@read +@write`` draws sequence IDs and nothing more); WORKER.LIST, which
changes nothing and shows no token, is ``@worker`` and ``@read``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from march import errors
from march.commands.args import Args
from march.commands.table import command
from march.keyspace.worker_ids import IDS

if TYPE_CHECKING:
    from march.client import Client
    from march.keyspace.worker_ids import Workers


def _workers(client: Client, namespace: bytes) -> Workers:
    """The worker ids of the group that owns ``namespace``'s slot (the namespace is the key)."""
    return client.app.groups.of_key(namespace).keyspace.workers


def _held(args: list[bytes]) -> tuple[bytes, int, bytes, int]:
    """``namespace id token [UPTO ms]`` of WORKER.RENEW and WORKER.RELEASE."""
    cursor = Args(args)
    namespace = cursor.key()
    worker_id = cursor.integer(errors.WORKER_ID, low=0, high=IDS - 1)
    token = cursor.next()
    upto = 0
    for _ in cursor.options(b"upto"):
        upto = cursor.nonneg(errors.WORKER_UPTO)
        cursor.finish()
    return namespace, worker_id, token, upto


@command(
    "worker.acquire",
    -2,
    ("write", "denyoom"),
    ("@worker", "@slow"),
    keys=(1, 1, 1),
    key_access="W",
    primary=True,
    summary="WORKER.ACQUIRE namespace [TTL seconds]: hold the lowest free worker id (0..1023); "
    "replies [id, token, ttl_seconds, upto_ms] (issue only times > upto_ms).",
    group="worker",
)
def worker_acquire(client: Client, args: list[bytes]) -> Any:
    cursor = Args(args)
    namespace = cursor.key()
    ttl = None
    for _ in cursor.options(b"ttl"):
        ttl = cursor.integer(errors.WORKER_TTL)
        cursor.finish()
    return _acquire(client, namespace, ttl)


async def _acquire(client: Client, namespace: bytes, ttl: int | None) -> list[Any]:
    worker_id, token, granted, upto = await _workers(client, namespace).acquire(namespace, ttl)
    return [worker_id, token, granted, upto]


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
    held = _held(args)
    return _workers(client, held[0]).renew(*held)


@command(
    "worker.release",
    -4,
    ("write",),
    ("@worker", "@slow"),
    keys=(1, 1, 1),
    key_access="W",
    primary=True,
    summary="WORKER.RELEASE namespace id token [UPTO ms]: free the id at once, its UPTO raised to UPTO.",
    group="worker",
)
def worker_release(client: Client, args: list[bytes]) -> Any:
    return _release(client, *_held(args))


async def _release(client: Client, namespace: bytes, worker_id: int, token: bytes, upto: int) -> str:
    await _workers(client, namespace).release(namespace, worker_id, token, upto)
    return "OK"


@command(
    "worker.list",
    2,
    ("readonly",),
    ("@read", "@worker", "@slow"),
    keys=(1, 1, 1),
    primary=True,
    summary="WORKER.LIST namespace: the ids held (live or resting after expiry): [id, expires_ms, upto_ms, state].",
    group="worker",
)
def worker_list(client: Client, args: list[bytes]) -> Any:
    return _list(client, args[1])


async def _list(client: Client, namespace: bytes) -> list[Any]:
    held = await _workers(client, namespace).list(namespace)
    return [[h.record.id, h.expires_ms, h.record.upto_ms, h.standing.value] for h in held]
