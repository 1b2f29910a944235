"""SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE: enough pub/sub for Sentinel clients to hear
``+switch-master`` (``march.cluster.announce`` holds the subscriptions and sends the messages).

Replies have Redis 7.0's shapes: one ``[kind, name, count]`` frame per name (``count``: the
connection's channels and patterns together), a RESP3 push frame or a RESP2 array; UNSUBSCRIBE with
no name and nothing subscribed answers ``[kind, null, 0]``. While a RESP2 connection has a
subscription, only these four, PING (answered ``["pong", message]``), QUIT and RESET are allowed
(``dispatch.call`` refuses the rest with Redis' text); RESP3 connections may run anything.

ACL channel rules as in Redis 7 (``march.access.rules``): SUBSCRIBE's channels and PSUBSCRIBE's patterns
(``channels=`` at registration) are checked by the dispatcher with the other permissions: ``NOPERM
this user has no permissions to access one of the channels used as arguments``, an ACL LOG entry of
reason ``channel`` naming the first one refused. (P)UNSUBSCRIBE is never refused, as in Redis.

PSUBSCRIBE costs its sender: whether a pattern hears ``+switch-master`` is decided once, when it is
subscribed (``pubsub.hears``, a few steps for most patterns, at most its length). A request with
more than ``SYNC_BYTES`` of new patterns is decided ``SLICE_BYTES`` at a time, one slice per
event-loop step, while its connection waits (its later requests wait with it, as behind any request
that waits): a connection pipelining kilobyte patterns slows itself, not the others.

Decisions where Redis has no rule or March differs: a connection holds at most
``MAX_SUBSCRIPTIONS`` names, each at most ``MAX_NAME`` bytes and all at most ``MAX_HELD`` bytes
(past any, an error and nothing subscribed from that request). PUBLISH, SSUBSCRIBE and PUBSUB are
not offered (unknown commands): only the node publishes. The commands are ``@pubsub`` and ``@app``
(what a discovery client needs, as SENTINEL is), not ``@admin``.

Handlers never write to a transport: they return ``Replies`` of ``Push`` frames, which the server
encodes in turn with the other replies.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from march import errors
from march.cluster.announce import MAX_HELD, MAX_NAME, MAX_SUBSCRIPTIONS, Subscriber, hears
from march.commands.permissions import refuse
from march.commands.table import COMMANDS, command
from march.errors import CommandError
from march.resp import Push, Replies

if TYPE_CHECKING:
    from march.client import Client

_FLAGS = ("pubsub", "noscript", "loading", "stale")
_CATEGORIES = ("@pubsub", "@slow", "@app")  # discovery clients need them (not @admin), as SENTINEL
# Pattern bytes a PSUBSCRIBE decides in the step that reads it: about 10 us at worst (a class is read
# at ~0.13 us a byte), no more than any request's own cost; Sentinel clients send "*" (1 byte).
SYNC_BYTES = 64
# Pattern bytes decided per event-loop step past that: ~0.13 ms at worst (one 1 KiB class), so four
# connections pipelining kilobyte patterns hold the loop a fraction of a millisecond each in turn.
SLICE_BYTES = 1024


def _subscriber(client: Client) -> Subscriber:
    return client.app.pubsub.get(client.id, lambda: Subscriber(client.push, lambda: client.proto, client.tls))


def _check(client: Client, names: list[bytes], patterns: bool) -> list[bytes]:
    """Refuse the whole request before subscribing anything if it would pass the bounds; the names
    it adds (new to this connection, each once, in order)."""
    for name in names:
        if len(name) > MAX_NAME:
            raise CommandError(errors.SUBSCRIPTION_NAME_TOO_LONG.format(MAX_NAME))
    sub = client.app.pubsub.subscribers.get(client.id)
    held: dict[bytes, Any] = {} if sub is None else sub.patterns if patterns else sub.channels
    new = [n for n in dict.fromkeys(names) if n not in held]
    if (sub.count if sub is not None else 0) + len(new) > MAX_SUBSCRIPTIONS:
        raise CommandError(errors.TOO_MANY_SUBSCRIPTIONS.format(MAX_SUBSCRIPTIONS))
    if (sub.held if sub is not None else 0) + sum(len(n) for n in new) > MAX_HELD:
        raise CommandError(errors.SUBSCRIPTION_BYTES.format(MAX_HELD))
    return new


@command(
    "subscribe",
    -2,
    _FLAGS,
    _CATEGORIES,
    summary="Listen to the channels given.",
    group="pubsub",
    primary=False,
    channels="channel",
)
def subscribe(client: Client, args: list[bytes]) -> Any:
    _check(client, args[1:], patterns=False)
    sub = _subscriber(client)
    out = Replies()
    for name in args[1:]:
        sub.subscribe(name)
        out.append(Push([b"subscribe", name, sub.count]))
    return out


@command(
    "psubscribe",
    -2,
    _FLAGS,
    _CATEGORIES,
    summary="Listen to the channels matching the glob patterns given.",
    group="pubsub",
    primary=False,
    channels="pattern",
)
def psubscribe(client: Client, args: list[bytes]) -> Any:
    new = _check(client, args[1:], patterns=True)
    if sum(len(n) for n in new) <= SYNC_BYTES:
        return _psubscribed(client, args, {n: hears(n) for n in new})
    return _psubscribe_sliced(client, args, new)


async def _psubscribe_sliced(client: Client, args: list[bytes], new: list[bytes]) -> Any:
    """Decide ``new`` ``SLICE_BYTES`` per loop step (the connection waits meanwhile), then subscribe
    them all at once, if its user may still (an ACL change may have come in between)."""
    decided: dict[bytes, bool] = {}
    spent = 0
    for name in new:
        if spent >= SLICE_BYTES:
            await asyncio.sleep(0)
            spent = 0
        decided[name] = hears(name)
        spent += len(name)
    spec = COMMANDS["psubscribe"]
    denied = client.user.denial(spec, args) if client.user.checked(spec) else None
    if denied is not None:
        raise refuse(client, *denied)
    _check(client, args[1:], patterns=True)
    return _psubscribed(client, args, decided)


def _psubscribed(client: Client, args: list[bytes], decided: dict[bytes, bool]) -> Any:
    sub = _subscriber(client)
    out = Replies()
    for name in args[1:]:
        sub.psubscribe(name, decided.get(name, False))
        out.append(Push([b"psubscribe", name, sub.count]))
    return out


def _unsubscribe(client: Client, args: list[bytes], kind: bytes, patterns: bool) -> Any:
    pubsub = client.app.pubsub
    sub = pubsub.subscribers.get(client.id)
    held: dict[bytes, Any] = {} if sub is None else (sub.patterns if patterns else sub.channels)
    names = args[1:] or list(held)
    out = Replies()
    if not names:
        out.append(Push([kind, None, sub.count if sub is not None else 0]))
    for name in names:
        if sub is not None:
            (sub.punsubscribe if patterns else sub.unsubscribe)(name)
        out.append(Push([kind, name, sub.count if sub is not None else 0]))
    pubsub.settle(client.id)
    return out


@command(
    "unsubscribe",
    -1,
    _FLAGS,
    _CATEGORIES,
    summary="Stop listening to the channels given (all, without any).",
    group="pubsub",
    primary=False,
)
def unsubscribe(client: Client, args: list[bytes]) -> Any:
    return _unsubscribe(client, args, b"unsubscribe", patterns=False)


@command(
    "punsubscribe",
    -1,
    _FLAGS,
    _CATEGORIES,
    summary="Stop listening to the patterns given (all, without any).",
    group="pubsub",
    primary=False,
)
def punsubscribe(client: Client, args: list[bytes]) -> Any:
    return _unsubscribe(client, args, b"punsubscribe", patterns=True)
