"""Pub/sub, the minimum Sentinel clients need: who is subscribed to what, and sending them messages.

March publishes one thing: ``+switch-master <master-name> <old-ip> <old-port> <new-ip> <new-port>``
when this node sees the primary change, as a Sentinel does, so that clients that follow failovers
by listening (Jedis ``JedisSentinelPool`` and go-redis ``FailoverClient`` SUBSCRIBE to
``+switch-master``, Lettuce PSUBSCRIBEs ``*``) hear of it. Clients cannot publish (PUBLISH is not
offered: ``commands/pubsub.py``).

Bounds: a connection holds at most ``MAX_SUBSCRIPTIONS`` channels and patterns together, each name
at most ``MAX_NAME`` bytes, so what subscriptions hold is bounded by the client count. A message
is written to each subscriber's transport through the server's ``send`` (the same way MONITOR
lines are), which drops a subscriber whose unread output passes ``max_output_buffer``: a slow
subscriber never grows memory without bound. A publish costs one glob match per pattern held
(at most ``MAX_SUBSCRIPTIONS`` per client, against a short channel name) in one step of the event
loop, and happens once per change of primary: 10,000 clients with 16 patterns each that do not
match take about 80 ms (2-core machine), which is why the bound is small.

This module never touches the keyspace or the cluster state: it only sends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .glob import Glob
from .resp import Push, encode

if TYPE_CHECKING:
    from .cluster.directory import NodeInfo

MAX_SUBSCRIPTIONS = 16  # channels and patterns per connection: discovery clients use one; a publish matches them all
MAX_NAME = 1024  # bytes in a channel or pattern name: subscriptions are held for the connection's life

SWITCH_MASTER = b"+switch-master"


@dataclass(slots=True)
class Subscriber:
    """One connection with subscriptions: how to send it bytes, and what it listens to."""

    send: Callable[[bytes], None]
    proto: Callable[[], int]  # its protocol now (HELLO 3 may change it while subscribed)
    tls: bool  # connected on the TLS port: told of TLS addresses
    channels: dict[bytes, None] = field(default_factory=dict)  # (ordered, as they were subscribed)
    patterns: dict[bytes, Glob] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return len(self.channels) + len(self.patterns)


class PubSub:
    """The node's subscribers, by client id. ``subscribers`` is empty while nobody subscribes: the
    server checks it once per read (a subscribed connection does not take the fast path)."""

    def __init__(self) -> None:
        self.subscribers: dict[int, Subscriber] = {}

    def get(self, client_id: int, new: Callable[[], Subscriber]) -> Subscriber:
        sub = self.subscribers.get(client_id)
        if sub is None:
            sub = self.subscribers[client_id] = new()
        return sub

    def settle(self, client_id: int) -> None:
        """Forget a connection that no longer has a subscription (it leaves subscribed mode)."""
        sub = self.subscribers.get(client_id)
        if sub is not None and not sub.count:
            del self.subscribers[client_id]

    def remove(self, client_id: int) -> None:
        """The connection closed or was RESET: all its subscriptions go."""
        self.subscribers.pop(client_id, None)

    def publish(self, channel: bytes, message: Callable[[bool], bytes]) -> int:
        """Send ``message(tls)`` on ``channel`` to every subscriber to it or to a pattern matching it;
        return how many messages were sent (as PUBLISH counts them: one per matching subscription)."""
        sent = 0
        bodies: dict[bool, bytes] = {}
        for sub in list(self.subscribers.values()):
            proto = sub.proto()
            body = bodies.get(sub.tls)
            if body is None:
                body = bodies[sub.tls] = message(sub.tls)
            if channel in sub.channels:
                sub.send(encode(Push([b"message", channel, body]), proto))
                sent += 1
            for pattern, glob in list(sub.patterns.items()):
                if glob.match(channel):
                    sub.send(encode(Push([b"pmessage", pattern, channel, body]), proto))
                    sent += 1
        return sent

    def switch_master(self, master: bytes, old: NodeInfo | None, new: NodeInfo) -> int:
        """Tell subscribers that the primary changed, in Sentinel's words."""

        def message(tls: bool) -> bytes:
            n = new.seen_by(tls)
            o = old.seen_by(tls) if old is not None else None
            old_part = f"{o.host} {o.port}" if o is not None else "? 0"
            return b"%s %s %s %d" % (master, old_part.encode(), n.host.encode(), n.port)

        return self.publish(SWITCH_MASTER, message)
