"""From a parsed request to a handler's result: lookup, arity, authentication, routing, MULTI queueing.

``call`` returns what the handler returned (a value, or a coroutine to await) or raises
``CommandError``. The server encodes; EXEC calls ``call`` for each queued request.

The checks run in Redis' order: unknown command, arity, a container's subcommand (unknown, or its
arity: ``table.check_container``), authentication (``NOAUTH``), a command
flagged ``no_multi`` inside MULTI (``ERR Command not allowed inside a transaction``: SHUTDOWN),
permissions, routing, then what a MONITOR connection may not do (a command that reads or writes
the keyspace: ``ERR Replica can't interact with the keyspace``, as Redis answers its monitors),
then what a RESP2 connection with subscriptions may not do (anything but (P)SUBSCRIBE,
(P)UNSUBSCRIBE, PING, QUIT, RESET: Redis' ``Can't execute`` error; ``commands.pubsub``).
A request refused by one of them is ``rejected`` (``reject``): counted apart from the calls that
ran and failed (INFO commandstats), and, inside MULTI, dooming the transaction.

MONITOR shows what runs, as Redis does (``monitored``): not a request that is refused, nor one
queued by MULTI (EXEC shows each when it runs it, then itself), nor an admin command or
subcommand (CONFIG, CLIENT LIST, CLIENT KILL...); passwords redacted by each command's declared
secrets (``table.redacted``).

Permissions (``march.access.rules``): a user that may not run the command, or touch one of its keys or
channels, gets ``NOPERM`` (counted in INFO, recorded in ACL LOG), before any routing, as in Redis. A
user with every command on every key skips the check (and keeps the server's fast path), except on
the commands that name channels when it does not have them all (``User.checked``).

Routing follows the serving state (``march.keyspace.serving``) of the request's group (``route``: its first
key's slot's group: ``Groups.route``), declared per command at registration (``primary``:
the key commands and the keyspace-wide KEYS, SCAN, DBSIZE, SEQ.LIST). A node that does not serve
the group answers them with ``MOVED`` to the group's primary (or ``CLUSTERDOWN``); while
a promotion or a FAILOVER is in progress they wait for it to end (bounded by ``max_wait``) and
then run here or get ``MOVED``. A request that was running when this node stopped serving got no
ID; ``rerun`` runs it again the same way. With ``redirect forward`` the request is forwarded to the
primary instead of MOVED (``commands.forward``; inside MULTI it is queued and EXEC decides), and the
one name the table does not know but this module does, ``MARCH.LINK``, is the forwarding links' own.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from march import errors
from march.commands.forward import forward, forwards, is_link_command, link_command
from march.commands.permissions import refuse
from march.commands.table import QUEUED, SPELLINGS, CommandSpec, check_container, lookup, redacted, waits
from march.errors import CommandError, Rejected, StoreError, StoreFull, StoreRejected
from march.generators.bound import NotServing

if TYPE_CHECKING:
    from march.client import Client
    from march.cluster.groups import Group

log = logging.getLogger("march")


def call(client: Client, args: list[bytes]) -> Any:
    spec = SPELLINGS.get(args[0])
    if spec is None:
        spec = SPELLINGS.get(args[0].lower())
        if spec is None:
            if is_link_command(args[0]):  # another node's forwarding link (hidden: ``commands.forward``)
                return link_command(client, args)
            if client.multi is not None:
                client.multi_error = True
            raise errors.unknown_command(args)
    a = spec.arity
    if (len(args) != a) if a > 0 else (len(args) < -a):
        raise reject(client, spec, errors.wrong_arity(spec.name), args)
    if spec.subcommands:
        try:
            check_container(client, spec, args)
        except CommandError as exc:
            raise reject(client, spec, exc, args) from None
    if not client.authenticated and "no_auth" not in spec.flags:
        # A cluster node that has not read its users yet (etcd unreachable since it started) knows
        # nobody: it cannot serve, like a node with no primary, rather than ask for a password.
        raise reject(client, spec, CommandError(errors.NOAUTH if client.app.users.loaded else errors.CLUSTERDOWN), args)
    if client.multi is not None and "no_multi" in spec.flags:
        raise reject(client, spec, CommandError(errors.NOT_IN_MULTI), args)
    if client.user.checked(spec) and "no_auth" not in spec.flags:
        denied = client.user.denial(spec, args)
        if denied is not None:
            sub = spec.subcommand(args)
            raise reject(client, spec, refuse(client, *denied, f"{spec.name}|{sub}" if sub else spec.name), args)
    if spec.primary and spec.keys[1] != spec.keys[0]:
        try:  # several keys: all in one group, or CROSSSLOT (before any MOVED, as in Redis; one group: none)
            client.app.groups.check_one(args[i] for i in spec.key_positions(len(args)))
        except CommandError as exc:
            raise reject(client, spec, exc, args) from None
    if spec.primary and not (group := route(client, spec, args)).serving:
        if client.multi is None and group.in_transition:
            return rerun(client, args)
        if not forwards(client):
            raise reject(client, spec, moved(client, spec, args), args)
        if client.multi is None:
            return forward(client, spec, args)
        # inside MULTI it is queued: EXEC forwards the whole transaction (``commands.forward``)
    monitors = client.app.monitors.feeds
    if monitors and client.id in monitors and _keyspace(spec):
        raise reject(client, spec, CommandError(errors.MONITOR_KEYSPACE), args)
    subscribers = client.app.pubsub.subscribers
    if subscribers and client.proto == 2 and client.id in subscribers and spec.name not in _SUBSCRIBED_MAY:
        sub = spec.subcommand(args)
        why = errors.PUBSUB_CONTEXT.format(f"{spec.name}|{sub}" if sub else spec.name)
        raise reject(client, spec, CommandError(why), args)
    if client.multi is not None and spec.queued:
        if len(client.multi) >= client.app.config.max_multi_commands:
            raise reject(
                client, spec, CommandError(errors.MULTI_TOO_LONG.format(client.app.config.max_multi_commands)), args
            )
        client.multi.append(args)
        client.multi_mem += sum(map(len, args))  # (CLIENT LIST multi-mem)
        return QUEUED  # no call until EXEC runs it (the connection counts it apart: ``timing``)
    return spec.handler(client, args)


# What a RESP2 connection with subscriptions may run, as in Redis (its replies would be read as messages).
_SUBSCRIBED_MAY = frozenset({"subscribe", "unsubscribe", "psubscribe", "punsubscribe", "ping", "quit", "reset"})


def _keyspace(spec: CommandSpec) -> bool:
    """Whether a command reads or writes the keyspace (Redis refuses those to a MONITOR connection)."""
    return "readonly" in spec.flags or "write" in spec.flags


def monitored(client: Client, args: list[bytes]) -> bool:
    """Whether MONITOR shows this request, about to be handed to ``call``: only one that will run
    (``call``'s checks, without their effects), is not queued by MULTI, is not EXEC (it shows itself
    after the commands it ran) and is not an admin command or subcommand, as in Redis."""
    spec = lookup(args[0])
    if spec is None or not spec.arity_ok(len(args)) or not spec.subcommand_ok(args) or spec.name == "exec":
        return False
    if "admin" in spec.flags_of(spec.subcommand(args)):
        return False
    if not client.authenticated and "no_auth" not in spec.flags:
        return False
    if client.multi is not None and (spec.queued or "no_multi" in spec.flags):
        return False
    user = client.user
    if user.checked(spec) and "no_auth" not in spec.flags and user.denial(spec, args) is not None:
        return False
    if spec.primary and not (group := route(client, spec, args)).serving and not group.in_transition:
        return False
    monitors = client.app.monitors.feeds
    return not (client.id in monitors and _keyspace(spec))


def show(client: Client, args: list[bytes]) -> None:
    """Send the MONITOR connections this client's request (passwords redacted). A monitor's own
    RESET is not shown to it: Redis shows a request once it has run, and then it monitors no more."""
    but = client.id if args[0].lower() == b"reset" else 0
    client.app.monitors.feed(redacted(args), client.addr, but)


async def rerun(client: Client, args: list[bytes]) -> Any:
    """Run a request again once a promotion or FAILOVER in progress is over.

    Only for requests that got no ID: they were refused (``NotServing``) or never started.
    """
    spec = lookup(args[0])
    if spec is None or not spec.primary:
        raise CommandError(errors.NOT_SERVING)
    group = route(client, spec, args)
    await group.settled(client.app.config.max_wait)
    if not group.serving:
        if forwards(client):
            return await forward(client, spec, args)
        raise reject(client, spec, moved(client, spec, args), args)
    result = call(client, args)
    if waits(result):
        try:
            return await result
        except NotServing:
            if forwards(client):  # it got no ID here
                return await forward(client, spec, args)
            raise moved(client, spec, args) from None
    return result


def reject(client: Client, spec: CommandSpec, error: CommandError, args: list[bytes]) -> Rejected:
    """A request refused before it ran: counted as rejected (INFO commandstats, in its subcommand's
    counters for a container; an unknown subcommand nowhere, as Redis), not as a call; one EXEC
    reaches and refuses (its permission revoked since MULTI) is no rejection either, as in Redis
    (``transactions._run`` counts its error). As in Redis, inside MULTI it dooms the transaction,
    and a refused EXEC discards it: ``EXECABORT Transaction discarded because of: <why>``."""
    if not client.executing:
        client.app.metrics.commands.of_request(args).rejected += 1
    if spec.name == "exec":
        client.multi = None
        client.multi_error = False
        why = error.message[4:] if error.message.startswith("ERR ") else error.message
        return Rejected(errors.EXECABORT_BECAUSE.format(why))
    if client.multi is not None:
        client.multi_error = True
    return Rejected(error.message)


def route(client: Client, spec: CommandSpec, args: list[bytes]) -> Group:
    """The leadership group a ``primary`` command belongs to: its first key's (``Groups.route``). A
    keyspace-wide command (no key) runs on a node serving any group (it sees that node's groups),
    waits while one is in transition, else is redirected as a key of slot 0 would be."""
    first = spec.keys[0]
    return client.app.groups.route(args[first] if first else None)


def moved(client: Client, spec: CommandSpec, args: list[bytes]) -> CommandError:
    """MOVED to the primary of the request's first key's group (slot 0 for the keyspace-wide commands)."""
    key = args[spec.keys[0]] if spec.keys[0] else b""
    return route(client, spec, args).redirect(key, client.tls)


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
