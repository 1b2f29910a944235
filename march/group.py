"""One leadership group: its serving state, its keyspace and, in cluster mode, the member (lease,
election, directory, failover) that decides whether this node serves it.

A process runs one group today. Nothing in a group is global (each part takes its store, etcd
clients, key paths and clock), so a later version can run several side by side, one per slot
range, each with its own lease and leader key.

Everything about routing a request derives from the group's ``ServingState``: serve it here
(``serving``), wait for a promotion or a hand-over to end (``in_transition``), or redirect it
(``redirect``: ``MOVED`` to the primary, or ``CLUSTERDOWN``; ``primary_address``: where a forwarded
request goes).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from . import errors
from .cluster.member import ClusterMember
from .cluster.slots import SLOTS, key_slot
from .errors import CommandError
from .keyspace import Keyspace
from .serving import ServingState


@dataclass(frozen=True)
class SlotRange:
    """The slots ``first`` to ``last`` (both included), as CLUSTER SLOTS shows them."""

    first: int
    last: int

    def __contains__(self, slot: object) -> bool:
        return isinstance(slot, int) and self.first <= slot <= self.last


ALL_SLOTS = SlotRange(0, SLOTS - 1)


class Group:
    def __init__(self, state: ServingState, keyspace: Keyspace, index: int = 0, slots: SlotRange = ALL_SLOTS) -> None:
        self.state = state
        self.keyspace = keyspace
        self.index = index  # 0, 1, ... in slot order
        self.slots = slots
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

    def primary_address(self, tls: bool = False) -> str | None:
        """The host:port clients are sent to for this group's keys (the TLS one for ``tls``), from the
        member's directory; None when no primary is known or this node serves the group (or takes
        it over: then it is no address to forward to)."""
        if self.member is None or self.serving:
            return None
        primary = self.member.directory.topology.primary
        if primary is None or primary.id == self.member.me.id:
            return None
        return primary.seen_by(tls).addr


class Groups:
    """Every leadership group of this node, in slot order: which one a slot or a key belongs to.

    With one group (the default) no slot is computed: every key is the one group's."""

    def __init__(self, groups: list[Group]) -> None:
        assert groups and groups[0].slots.first == 0 and groups[-1].slots.last == SLOTS - 1
        self._groups = groups
        self._single = groups[0] if len(groups) == 1 else None
        # slot -> group index, one byte per slot (at most 256 groups)
        self._by_slot = bytes(g.index for g in groups for _ in range(g.slots.first, g.slots.last + 1))

    def of_slot(self, slot: int) -> Group:
        return self._single or self._groups[self._by_slot[slot]]

    def of_key(self, key: bytes) -> Group:
        return self._single or self._groups[self._by_slot[key_slot(key)]]

    def __iter__(self) -> Iterator[Group]:
        return iter(self._groups)

    def __len__(self) -> int:
        return len(self._groups)

    def __getitem__(self, index: int) -> Group:
        return self._groups[index]
