"""From a parsed request to a handler's result: lookup, arity, authentication, routing, MULTI queueing.

``call`` returns what the handler returned (a value, or a coroutine to await) or raises
``CommandError``. The server encodes; EXEC calls ``call`` for each queued request.

Routing (cluster mode): a node that is not serving answers every key command, and the keyspace
commands without a key (KEYS, SCAN, DBSIZE, SEQ.LIST, as slot 0), with ``MOVED`` to the primary;
while this node is being promoted or is handing over (FAILOVER), such requests wait for that to
finish (bounded by ``max_wait``) and then run here or get ``MOVED``. A request that was running
when this node stopped serving got no ID; ``rerun`` runs it again the same way.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from .. import errors
from ..errors import CommandError
from ..generators.base import NotServing
from ..store.base import StoreError
from .registry import TABLE, CommandSpec

if TYPE_CHECKING:
    from ..client import Client
    from ..cluster.node import ClusterNode

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
    node = client.app.node
    if node is not None and spec.routed and not client.app.keyspace.serving:
        if client.multi is not None:
            client.multi_error = True
        elif node.transition is not None:
            return rerun(client, args)
        raise moved(node, spec, args)
    if client.multi is not None and not spec.in_multi:
        client.multi.append(args)
        return "QUEUED"
    return spec.handler(client, args)


async def rerun(client: Client, args: list[bytes]) -> Any:
    """Run a key request again once a promotion or failover in progress is over (cluster mode).

    Only for requests that got no ID: they were refused (``NotServing``) or never started.
    """
    node = client.app.node
    spec = TABLE.get(args[0]) or TABLE.get(args[0].lower())
    if node is None or spec is None or not spec.routed:
        raise CommandError(errors.NOT_SERVING)
    await node.settle(client.app.config.max_wait)
    if not client.app.keyspace.serving:
        raise moved(node, spec, args)
    result = call(client, args)
    if asyncio.iscoroutine(result):
        try:
            return await result
        except NotServing:
            raise moved(node, spec, args) from None
    return result


def moved(node: ClusterNode, spec: CommandSpec, args: list[bytes]) -> CommandError:
    return node.redirect(args[spec.keys[0]] if spec.keys[0] else b"")


def as_error(client: Client, exc: Exception) -> CommandError:
    """The error a client sees for a failed request; every one but a bug's is Redis-shaped.

    ``NotServing`` and ``StoreError`` become retryable errors: the client got no ID.
    """
    if isinstance(exc, CommandError):
        return exc
    if client.app.shutdown_requested is not None and client.app.shutdown_requested.is_set():
        return CommandError(errors.SHUTTING_DOWN)
    if isinstance(exc, NotServing):
        return CommandError(errors.NOT_SERVING)
    if isinstance(exc, StoreError):
        return CommandError(errors.TRYAGAIN_STORE_DOWN)
    log.error("command failed", exc_info=exc)
    return CommandError(f"ERR internal error: {exc!r}")
