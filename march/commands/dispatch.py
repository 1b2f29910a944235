"""From a parsed request to a handler's result: lookup, arity, authentication, MULTI queueing.

``call`` returns what the handler returned (a value, or a coroutine to await) or raises
``CommandError``. The server encodes; EXEC calls ``call`` for each queued request.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .. import errors
from ..errors import CommandError
from ..generators.base import NotServing
from ..store.base import StoreError
from .registry import TABLE

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
    if client.multi is not None and not spec.in_multi:
        client.multi.append(args)
        return "QUEUED"
    return spec.handler(client, args)


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
