"""From a parsed request to a handler's result: lookup, arity, authentication, routing, MULTI queueing.

``call`` returns what the handler returned (a value, or a coroutine to await) or raises
``CommandError``. The server encodes; EXEC calls ``call`` for each queued request.

Routing follows the group's serving state (``march.serving``), declared per command at
registration (``primary``: the key commands and the keyspace-wide KEYS, SCAN, DBSIZE, SEQ.LIST).
A node that does not serve answers them with ``MOVED`` to the primary (or ``CLUSTERDOWN``); while
a promotion or a FAILOVER is in progress they wait for it to end (bounded by ``max_wait``) and
then run here or get ``MOVED``. A request that was running when this node stopped serving got no
ID; ``rerun`` runs it again the same way.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from .. import errors
from ..errors import CommandError
from ..generators.base import NotServing
from ..store.base import StoreError, StoreFull, StoreRejected
from .registry import TABLE, CommandSpec, lookup

if TYPE_CHECKING:
    from ..client import Client

log = logging.getLogger("march")


def call(client: Client, args: list[bytes]) -> Any:
    spec = TABLE.get(args[0])
    if spec is None:
        spec = TABLE.get(args[0].lower())
        if spec is None:
            if client.multi is not None:
                client.multi_error = True
            raise errors.unknown_command(args)
    a = spec.arity
    if (len(args) != a) if a > 0 else (len(args) < -a):
        if spec.name == "exec":  # Redis: a malformed EXEC discards the transaction, MULTI or not
            client.multi = None
            client.multi_error = False
            raise CommandError(errors.EXECABORT_BECAUSE.format(errors.WRONG_ARITY.format("exec")[4:]))
        if client.multi is not None:
            client.multi_error = True
        raise errors.wrong_arity(spec.name)
    if not client.authenticated and "no_auth" not in spec.flags:
        if client.multi is not None:
            client.multi_error = True
        raise CommandError(errors.NOAUTH)
    group = client.app.group
    if spec.primary and not group.serving:
        if client.multi is not None:
            client.multi_error = True
        elif group.in_transition:
            return rerun(client, args)
        raise moved(client, spec, args)
    if client.multi is not None and spec.queued:
        client.multi.append(args)
        return "QUEUED"
    return spec.handler(client, args)


async def rerun(client: Client, args: list[bytes]) -> Any:
    """Run a request again once a promotion or FAILOVER in progress is over.

    Only for requests that got no ID: they were refused (``NotServing``) or never started.
    """
    group = client.app.group
    spec = lookup(args[0])
    if spec is None or not spec.primary:
        raise CommandError(errors.NOT_SERVING)
    await group.settled(client.app.config.max_wait)
    if not group.serving:
        raise moved(client, spec, args)
    result = call(client, args)
    if asyncio.iscoroutine(result):
        try:
            return await result
        except NotServing:
            raise moved(client, spec, args) from None
    return result


def moved(client: Client, spec: CommandSpec, args: list[bytes]) -> CommandError:
    """MOVED to the primary for the request's first key (slot 0 for the keyspace-wide commands)."""
    return client.app.group.redirect(args[spec.keys[0]] if spec.keys[0] else b"")


def as_error(client: Client, exc: Exception) -> CommandError:
    """The error a client sees for a failed request; every one but a bug's is Redis-shaped.

    ``NotServing`` and ``StoreError`` become retryable errors: the client got no ID. A request the
    store will never accept (``StoreRejected``) is an error, not TRYAGAIN: retrying cannot help.
    """
    if isinstance(exc, CommandError):
        return exc
    if client.app.shutdown_requested is not None and client.app.shutdown_requested.is_set():
        return CommandError(errors.SHUTTING_DOWN)
    if isinstance(exc, NotServing):
        return CommandError(errors.NOT_SERVING)
    if isinstance(exc, StoreRejected):
        return CommandError(errors.STORE_REJECTED.format(exc))
    if isinstance(exc, StoreFull):
        return CommandError(errors.TRYAGAIN_STORE_FULL)
    if isinstance(exc, StoreError):
        return CommandError(errors.TRYAGAIN_STORE_DOWN)
    log.error("command failed", exc_info=exc)
    return CommandError(errors.INTERNAL.format(exc))
