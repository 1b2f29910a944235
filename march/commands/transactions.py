"""MULTI / EXEC / DISCARD (redis-py pipelines use them by default); WATCH is refused.

EXEC runs the queued commands in order and replies with an array of their results (errors in
place, as Redis does). A queued command that must wait for a store write lets other connections
run meanwhile; that changes nothing for the guarantees (IDs stay unique and increasing), only
"nothing else runs between them", which an ID service does not need.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Any

from .. import errors
from ..errors import CommandError
from .registry import command

if TYPE_CHECKING:
    from ..client import Client

_transaction = partial(
    command,
    flags=("noscript", "loading", "stale", "fast", "allow_busy"),
    categories=("@fast", "@transaction", "@app"),
    group="transactions",
)


@_transaction("multi", 1, queued=False, summary="Start a transaction.")
def multi(client: Client, args: list[bytes]) -> Any:
    if client.multi is not None:
        raise CommandError(errors.MULTI_NESTED)
    client.multi = []
    client.multi_error = False
    return "OK"


@_transaction("discard", 1, queued=False, summary="Discard a transaction.")
def discard(client: Client, args: list[bytes]) -> Any:
    if client.multi is None:
        raise CommandError(errors.DISCARD_WITHOUT_MULTI)
    client.multi = None
    client.multi_error = False
    return "OK"


@command(
    "exec",
    1,
    ("noscript", "loading", "stale", "skip_slowlog"),
    ("@slow", "@transaction", "@app"),
    queued=False,
    summary="Execute the queued commands of a transaction.",
    group="transactions",
)
def exec_(client: Client, args: list[bytes]) -> Any:
    if client.multi is None:
        raise CommandError(errors.EXEC_WITHOUT_MULTI)
    queued, failed = client.multi, client.multi_error
    client.multi = None
    client.multi_error = False
    if failed:
        raise CommandError(errors.EXECABORT)
    return _run(client, queued)


async def _run(client: Client, queued: list[list[bytes]]) -> list[Any]:
    from .dispatch import as_error, call

    results: list[Any] = []
    for args in queued:
        try:
            value = call(client, args)
            if asyncio.iscoroutine(value):
                value = await value
        except Exception as exc:  # in place, as Redis reports errors inside EXEC
            value = as_error(client, exc)
        results.append(value)
    return results


@_transaction("watch", -2, keys=(1, -1, 1), summary="Refused: sequences only move forwards; retry instead.")
def watch(client: Client, args: list[bytes]) -> Any:
    raise CommandError(errors.WATCH_UNSUPPORTED)


@_transaction("unwatch", 1, summary="Forget watched keys (there are none).")
def unwatch(client: Client, args: list[bytes]) -> Any:
    return "OK"
