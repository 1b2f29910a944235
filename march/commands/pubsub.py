"""SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE: enough pub/sub for Sentinel clients to hear
``+switch-master`` (``march.pubsub`` holds the subscriptions and sends the messages).

Replies have Redis 7.0's shapes: one ``[kind, name, count]`` frame per name (``count``: the
connection's channels and patterns together), a RESP3 push frame or a RESP2 array; UNSUBSCRIBE with
no name and nothing subscribed answers ``[kind, null, 0]``. While a RESP2 connection has a
subscription, only these four, PING (answered ``["pong", message]``), QUIT and RESET are allowed
(``dispatch.call`` refuses the rest with Redis' text); RESP3 connections may run anything.

Decisions where Redis has no rule or March differs: a connection holds at most
``MAX_SUBSCRIPTIONS`` names, each at most ``MAX_NAME`` bytes (past either, an error and nothing
subscribed from that request). PUBLISH, SSUBSCRIBE and PUBSUB are not offered (unknown commands):
only the node publishes. The commands are ``@pubsub`` and ``@app`` (what a discovery client needs,
as SENTINEL is), not ``@admin``; ACL channel rules (``&``) are not checked: nothing but
``+switch-master`` is ever sent.

Handlers never write to a transport: they return ``Replies`` of ``Push`` frames, which the server
encodes in turn with the other replies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import errors
from ..errors import CommandError
from ..glob import compile_glob
from ..pubsub import MAX_NAME, MAX_SUBSCRIPTIONS, Subscriber
from ..resp import Push, Replies
from .table import command

if TYPE_CHECKING:
    from ..client import Client

_FLAGS = ("pubsub", "noscript", "loading", "stale")
_CATEGORIES = ("@pubsub", "@slow", "@app")  # discovery clients need them (not @admin), as SENTINEL


def _subscriber(client: Client) -> Subscriber:
    return client.app.pubsub.get(client.id, lambda: Subscriber(client.push, lambda: client.proto, client.tls))


def _check(client: Client, names: list[bytes], held: int) -> None:
    """Refuse the whole request before subscribing anything if it would pass the bounds."""
    for name in names:
        if len(name) > MAX_NAME:
            raise CommandError(errors.SUBSCRIPTION_NAME_TOO_LONG.format(MAX_NAME))
    if held + len(set(names)) > MAX_SUBSCRIPTIONS:
        sub = client.app.pubsub.subscribers.get(client.id)
        new = set(names) - (set(sub.channels) | set(sub.patterns) if sub is not None else set())
        if held + len(new) > MAX_SUBSCRIPTIONS:
            raise CommandError(errors.TOO_MANY_SUBSCRIPTIONS.format(MAX_SUBSCRIPTIONS))


def _held(client: Client) -> int:
    sub = client.app.pubsub.subscribers.get(client.id)
    return sub.count if sub is not None else 0


@command("subscribe", -2, _FLAGS, _CATEGORIES, summary="Listen to the channels given.", group="pubsub", primary=False)
def subscribe(client: Client, args: list[bytes]) -> Any:
    _check(client, args[1:], _held(client))
    sub = _subscriber(client)
    out = Replies()
    for name in args[1:]:
        sub.channels[name] = None
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
)
def psubscribe(client: Client, args: list[bytes]) -> Any:
    _check(client, args[1:], _held(client))
    sub = _subscriber(client)
    out = Replies()
    for name in args[1:]:
        if name not in sub.patterns:
            sub.patterns[name] = compile_glob(name)
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
        held.pop(name, None)
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
