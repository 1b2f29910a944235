"""Pub/sub, the minimum Sentinel clients need: who is subscribed to what, and sending them messages.

March publishes one thing: ``+switch-master <master-name> <old-ip> <old-port> <new-ip> <new-port>``
when this node sees the primary change, as a Sentinel does, so that clients that follow failovers
by listening (Jedis ``JedisSentinelPool`` and go-redis ``FailoverClient`` SUBSCRIBE to
``+switch-master``, Lettuce PSUBSCRIBEs ``*``) hear of it. Clients cannot publish (PUBLISH is not
offered: ``commands/pubsub.py``).

**Patterns cost their sender.** Since ``+switch-master`` is the only channel ever published, whether
a pattern hears it is known when the pattern is subscribed: ``hears`` decides it once, and a
subscription keeps the pattern as bytes and that one answer, never a compiled pattern. Deciding
reads no more of the pattern than can matter (``glob.matches``: a pattern with more one-byte tokens
than the channel has bytes cannot match it, whatever its length), at most the pattern's length in
steps (a long ``[...]`` class); ``commands/pubsub.py`` does the work of a long request in slices on
the subscriber's own connection, so four connections pipelining PSUBSCRIBE with kilobyte patterns
slow only themselves. Redis keeps patterns as strings and matches each at every publish; here a
publish costs one look per subscriber (``Subscriber.hearing``), whatever its patterns.

**Memory of a subscribed connection**, bounded: at most ``MAX_SUBSCRIPTIONS`` channels and patterns
together, each at most ``MAX_NAME`` bytes and all at most ``MAX_HELD`` bytes, kept once (the names
as bytes, a bool per pattern): about 1 KB of structure plus the names, under 6 KB in all (measured
in tests/commands/test_pubsub.py), where compiled patterns took 117 KB. A message is written to each
subscriber's transport through the server's ``send`` (the same way MONITOR lines are), which drops
a subscriber whose unread output passes ``max_output_buffer``: a slow subscriber never grows memory
without bound.

This module never touches the keyspace or the cluster state: it only sends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from march.glob import matches
from march.resp import Push, encode

if TYPE_CHECKING:
    from march.cluster.directory import NodeInfo

MAX_SUBSCRIPTIONS = 16  # channels and patterns per connection: discovery clients use one
MAX_NAME = 1024  # bytes in a channel or pattern name: subscriptions are held for the connection's life
MAX_HELD = 4096  # bytes of names per connection: Sentinel clients hold 1 ("*") to 14 ("+switch-master")

SWITCH_MASTER = b"+switch-master"


def hears(pattern: bytes) -> bool:
    """Whether a subscription to ``pattern`` hears what March publishes (``+switch-master``).
    At most len(pattern) steps, usually a few (``glob.matches``)."""
    return matches(pattern, SWITCH_MASTER)


@dataclass(slots=True)
class Subscriber:
    """One connection with subscriptions: how to send it bytes, and what it listens to."""

    send: Callable[[bytes], None]
    proto: Callable[[], int]  # its protocol now (HELLO 3 may change it while subscribed)
    tls: bool  # connected on the TLS port: told of TLS addresses
    channels: dict[bytes, None] = field(default_factory=dict)  # (ordered, as they were subscribed)
    patterns: dict[bytes, bool] = field(default_factory=dict)  # pattern -> it hears +switch-master
    held: int = 0  # bytes of the names above
    hearing: int = 0  # how many of its subscriptions hear +switch-master: a publish skips it at 0

    @property
    def count(self) -> int:
        return len(self.channels) + len(self.patterns)

    def subscribe(self, channel: bytes) -> None:
        if channel not in self.channels:
            self.channels[channel] = None
            self.held += len(channel)
            self.hearing += channel == SWITCH_MASTER

    def unsubscribe(self, channel: bytes) -> None:
        if channel in self.channels:
            del self.channels[channel]
            self.held -= len(channel)
            self.hearing -= channel == SWITCH_MASTER

    def psubscribe(self, pattern: bytes, heard: bool) -> None:
        """``pattern``, with whether it hears +switch-master (``hears``, decided by the caller)."""
        if pattern not in self.patterns:
            self.patterns[pattern] = heard
            self.held += len(pattern)
            self.hearing += heard

    def punsubscribe(self, pattern: bytes) -> None:
        heard = self.patterns.pop(pattern, None)
        if heard is not None:
            self.held -= len(pattern)
            self.hearing -= heard


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

    def switch_master(self, master: bytes, old: NodeInfo | None, new: NodeInfo) -> int:
        """Tell subscribers that the primary changed, in Sentinel's words; return how many messages
        were sent (as PUBLISH counts them: one per subscription that hears it). One look per
        subscriber, and a message per subscription that hears (decided when it was made)."""
        sent = 0
        bodies: dict[bool, bytes] = {}
        for sub in list(self.subscribers.values()):
            if not sub.hearing:
                continue
            proto = sub.proto()
            body = bodies.get(sub.tls)
            if body is None:
                body = bodies[sub.tls] = _message(master, old, new, sub.tls)
            if SWITCH_MASTER in sub.channels:
                sub.send(encode(Push([b"message", SWITCH_MASTER, body]), proto))
                sent += 1
            for pattern, heard in list(sub.patterns.items()):
                if heard:
                    sub.send(encode(Push([b"pmessage", pattern, SWITCH_MASTER, body]), proto))
                    sent += 1
        return sent


def _message(master: bytes, old: NodeInfo | None, new: NodeInfo, tls: bool) -> bytes:
    """``<master-name> <old-ip> <old-port> <new-ip> <new-port>``: the addresses a client on the TLS
    port (or not) uses, as every Sentinel reply names them (``NodeInfo.for_sentinel``: a node's
    forwarding port when it has one)."""
    n = new.for_sentinel(tls)
    o = old.for_sentinel(tls) if old is not None else None
    old_part = f"{o.host} {o.port}" if o is not None else "? 0"
    return b"%s %s %s %d" % (master, old_part.encode(), n.host.encode(), n.port)
