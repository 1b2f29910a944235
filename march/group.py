"""One leadership group: its serving state, its keyspace and, in cluster mode, the member (lease,
election, directory, failover) that decides whether this node serves it.

A process runs one group today. Nothing in a group is global (each part takes its store, etcd
clients, key paths and clock), so a later version can run several side by side, one per slot
range, each with its own lease and leader key.

Everything about routing a request derives from the group's ``ServingState``: serve it here
(``serving``), wait for a promotion or a hand-over to end (``in_transition``), or redirect it
(``redirect``: ``MOVED`` to the primary, or ``CLUSTERDOWN``).
"""

from __future__ import annotations

from . import errors
from .cluster.member import ClusterMember
from .errors import CommandError
from .keyspace import Keyspace
from .serving import ServingState


class Group:
    def __init__(self, state: ServingState, keyspace: Keyspace) -> None:
        self.state = state
        self.keyspace = keyspace
        self.member: ClusterMember | None = None  # cluster mode, from ``march.node`` once listening

    @property
    def serving(self) -> bool:
        return self.state.serving

    @property
    def in_transition(self) -> bool:
        return self.state.in_transition

    async def settled(self, timeout: float) -> None:
        """Wait (bounded) while a promotion or a FAILOVER of this group is in progress."""
        await self.state.settled(timeout)

    def redirect(self, key: bytes, tls: bool = False) -> CommandError:
        """The error for a key request this node cannot serve now (``tls``: for a TLS client)."""
        if self.member is None:
            return CommandError(errors.NOT_SERVING)
        return self.member.directory.redirect(key, tls)
