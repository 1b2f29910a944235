"""Leadership groups: each a contiguous slot range with its own serving state, keyspace and, in
cluster mode, its own election, fencing (its leader key) and FAILOVER (``march.cluster.member``'s
``GroupMember``), which decide whether this node serves it.

A node runs every group of the cluster's layout side by side (``march.cluster.layout``: N groups,
group g owning slots ``g*16384//N .. (g+1)*16384//N - 1``); one group (the default) is exactly the
single leadership of before. The groups of a node share its store, its etcd clients, its lease and
its directory (``march.cluster.member``), never a serving state: a key is served only while the
group of its slot serves here.

Everything about routing a request derives from the group's ``ServingState``: serve it here
(``serving``), wait for a promotion or a hand-over to end (``in_transition``), or redirect it
(``redirect``: ``MOVED`` to the primary, or ``CLUSTERDOWN``; ``primary_node``: the primary's record,
where a forwarded request goes).

**One group is N = 1.** Nothing outside ``Groups`` asks how many groups there are. With one group
(the default) ``Groups`` takes its own fast path: no slot is computed (no CRC16 per request), the
keyspace the commands see is the group's own, the server's fast-path table is the hot commands
themselves, every name is this node's, and nothing is reported group by group (``listed``).

``Keyspaces`` is what the commands see as ``app.keyspace`` with several groups (``Groups.keyspace``):
each call goes to the keyspace of its key's group. Calls without a key (listing) are answered by the
groups this node serves; DBSIZE (``size``) counts the names in the slots this node serves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, Protocol

from march import errors
from march.cluster.directory import NodeInfo
from march.cluster.layout import ALL_SLOTS, SlotRange
from march.cluster.links import Peer
from march.cluster.member import ClusterMember, GroupMember
from march.cluster.slots import SLOTS, key_slot
from march.config import Config
from march.errors import CommandError
from march.keyspace import listing
from march.keyspace.census import retrieved
from march.keyspace.keyspace import Generator, Keyspace
from march.keyspace.listing import Selection
from march.keyspace.serving import ServingState

__all__ = ["ALL_SLOTS", "ActiveView", "Group", "Groups", "Keyspaces", "SlotRange"]  # SlotRange: march.cluster.layout

# Listing work units (~0.1 us, march.keyspace.listing) one name's slot check costs: about 1 us measured for
# short names (the hash-tag search, CRC16 in C, the table lookup, the calls), almost flat in length.
SLOT_CHECK_COST = 10


class FastCommand(Protocol):
    """An entry of the server's fast-path table (``commands.table.Hot`` is one; ``Groups.fast_path``)."""

    @property
    def arity(self) -> int: ...
    @property
    def handler(self) -> Callable[..., Any]: ...
    @property
    def consecutive(self) -> Callable[..., range | None] | None: ...


Slow = Callable[[Any, list[bytes]], Any]  # the dispatcher's ``call(client, args)``


class Group:
    def __init__(self, state: ServingState, keyspace: Keyspace, index: int = 0, slots: SlotRange = ALL_SLOTS) -> None:
        self.state = state
        self.keyspace = keyspace
        self.index = index  # 0, 1, ... in slot order
        self.slots = slots
        self.member: GroupMember | None = None  # cluster mode, from ``march.node`` once listening

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
        primary = self.primary_node(tls)
        return None if primary is None else primary.addr

    def primary_node(self, tls: bool = False) -> NodeInfo | None:
        """The record of this group's primary as registered in etcd (its ``addr`` the TLS address
        for ``tls``), as ``primary_address`` finds it; None when that is None."""
        if self.member is None or self.serving:
            return None
        primary = self.member.directory.topology.primary
        if primary is None or primary.id == self.member.me.id:
            return None
        return primary.seen_by(tls)

    def link_peer(self, tls: bool) -> Peer | None:
        """Where a request of this group is forwarded: the address its primary takes links at
        (``tls``: TLS links) and its registered node id; None as for ``primary_node``."""
        node = self.primary_node()
        return None if node is None else Peer(node.link(tls), node.id)

    def node_at(self, addr: str) -> NodeInfo | None:
        """The registered node whose address (or TLS address) is ``addr`` (a MOVED target), if any."""
        if self.member is None:
            return None
        nodes = self.member.directory.topology.nodes.values()
        found = next((n for n in nodes if addr in (n.addr, n.tls_addr)), None)
        return None if found is None else found.seen_by(addr == found.tls_addr)


class Groups:
    """Every leadership group of this node, in slot order: which one a slot, a key or a request
    belongs to, and what the node's readers see of them all (the module docstring: with one group,
    its own fast path, ``_single``)."""

    def __init__(self, groups: list[Group]) -> None:
        assert groups and groups[0].slots.first == 0 and groups[-1].slots.last == SLOTS - 1
        self._groups = groups
        self._single = groups[0] if len(groups) == 1 else None
        # slot -> group index, one byte per slot (at most 256 groups)
        self._by_slot = bytes(g.index for g in groups for _ in range(g.slots.first, g.slots.last + 1))
        # what the commands see as ``app.keyspace``: the one group's keyspace itself, or each call to its key's
        self.keyspace: Keyspace | Keyspaces = groups[0].keyspace if self._single is not None else Keyspaces(self)
        self.member: ClusterMember | None = None  # cluster mode: this node's membership, once joined (``join``)

    def join(self, member: ClusterMember) -> None:
        """Cluster mode: this node's membership, and each group's part of it (``Group.member``)."""
        self.member = member
        for group, part in zip(self._groups, member.groups, strict=True):
            group.member = part

    def of_slot(self, slot: int) -> Group:
        return self._single or self._groups[self._by_slot[slot]]

    def of_key(self, key: bytes) -> Group:
        return self._single or self._groups[self._by_slot[key_slot(key)]]

    def route(self, key: bytes | None) -> Group:
        """The group a request belongs to: its first key's (``key``); a keyspace-wide request (None)
        runs on a group this node serves, waits on one in transition, else is redirected as slot 0's."""
        single = self._single
        if single is not None:
            return single
        if key is not None:
            return self._groups[self._by_slot[key_slot(key)]]
        groups = self._groups
        return next((g for g in groups if g.serving), None) or next((g for g in groups if g.in_transition), groups[0])

    def check_one(self, keys: Iterable[bytes]) -> None:
        """CROSSSLOT unless every key belongs to one leadership group (always so with one group).
        Keys in different slots of one group pass: that group's primary serves them all (Redis
        refuses them; March keeps what one group has always allowed)."""
        if self._single is not None:
            return
        found = None
        for key in keys:
            group = self.of_key(key)
            if found is None:
                found = group
            elif group is not found:
                raise CommandError(errors.CROSSSLOT)

    def __iter__(self) -> Iterator[Group]:
        return iter(self._groups)

    def __len__(self) -> int:
        return len(self._groups)

    def __getitem__(self, index: int) -> Group:
        return self._groups[index]

    def serving_any(self) -> bool:
        """Whether this node serves at least one group (keyspace-wide commands may run here)."""
        single = self._single
        return single.state.serving if single is not None else any(g.state.serving for g in self._groups)

    def in_transition_any(self) -> bool:
        return any(g.state.in_transition for g in self._groups)

    def served(self) -> list[Group]:
        """The groups this node serves now (what KEYS, SCAN, DBSIZE may list)."""
        return [g for g in self._groups if g.state.serving]

    def served_slots(self) -> bytes | None:
        """Which slots this node serves now, a byte per slot (1: served), when it serves some but not
        all of several groups; None when every name is this node's (one group, or every group served)."""
        if self._single is not None:
            return None
        table = bytearray(SLOTS)
        for group in self._groups:
            if group.serving:
                r = group.slots
                table[r.first : r.last + 1] = b"\x01" * (r.last - r.first + 1)
        return None if all(table) else bytes(table)

    @property
    def listed(self) -> Sequence[Group]:
        """The groups that reports name one by one (INFO's ``march_groups_led``, the ``march_group_*``
        series): every group with several, none with one (the node's own figures are its group's)."""
        return () if self._single is not None else self._groups

    def placement(self, key: bytes) -> dict[str, int]:
        """Where ``key`` lives, as SEQ.INFO reports it: its slot and group with several groups, nothing with one."""
        if self._single is not None:
            return {}
        return {"slot": key_slot(key), "group": self.of_key(key).index}

    def fast_path(self, hot: Mapping[bytes, FastCommand], slow: Slow | None) -> Mapping[bytes, FastCommand]:
        """The server's fast-path table while this node serves: with one group the hot commands
        themselves; with several each wrapped to check its key's group first (one CRC16) and hand a
        request of a group not served here to the dispatcher (``slow``), and none without it."""
        if self._single is not None:
            return hot
        return {name: _GroupedHot(entry, self, slow) for name, entry in hot.items()} if slow is not None else {}


class _GroupedHot:
    """A hot command with several groups: served at once only while its key's group serves here."""

    __slots__ = ("arity", "consecutive", "handler")

    def __init__(self, entry: FastCommand, groups: Groups, slow: Slow) -> None:
        self.arity = entry.arity
        run, many, of_key = entry.handler, entry.consecutive, groups.of_key

        def handler(client: Any, args: list[bytes]) -> Any:
            return run(client, args) if of_key(args[1]).state.serving else slow(client, args)

        def consecutive(client: Any, args: list[bytes], count: int) -> range | None:
            return many(client, args, count) if many is not None and of_key(args[1]).state.serving else None

        self.handler: Callable[..., Any] = handler
        self.consecutive: Callable[..., range | None] | None = consecutive if many is not None else None


def in_slots(slots: bytes, name: bytes) -> bool:
    """Whether ``name``'s slot is one of ``slots`` (``Groups.served_slots``)."""
    return slots[key_slot(name)] == 1


class ActiveView:
    """Every group's active generators, read by key (``client.generators`` with several groups)."""

    __slots__ = ("_groups",)

    def __init__(self, groups: Groups) -> None:
        self._groups = groups

    def get(self, key: bytes) -> Generator | None:
        return self._groups.of_key(key).keyspace.generators.get(key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, bytes) and key in self._groups.of_key(key).keyspace.generators

    def __getitem__(self, key: bytes) -> Generator:
        return self._groups.of_key(key).keyspace.generators[key]

    def values(self) -> list[Generator]:
        return [gen for g in self._groups for gen in g.keyspace.generators.values()]

    def items(self) -> list[tuple[bytes, Generator]]:
        return [item for g in self._groups for item in g.keyspace.generators.items()]

    def __len__(self) -> int:
        return sum(len(g.keyspace.generators) for g in self._groups)


class Keyspaces:
    """``app.keyspace`` with several groups: each keyed call to its key's group's keyspace."""

    def __init__(self, groups: Groups) -> None:
        self.groups = groups
        self.generators = ActiveView(groups)
        self.config: Config = groups[0].keyspace.config
        self._counting: tuple[bytes | None, asyncio.Task[int]] | None = None  # (slots, the count) while one runs

    def _of(self, key: bytes) -> Keyspace:
        return self.groups.of_key(key).keyspace

    def _any(self) -> Keyspace:
        """A keyspace for a call without a key: a served group's (the first group's if none)."""
        served = self.groups.served()
        return served[0].keyspace if served else self.groups[0].keyspace

    def activate(self, key: bytes) -> Any:
        return self._of(key).activate(key)

    def ensure(self, key: bytes) -> Any:
        return self._of(key).ensure(key)

    def parked(self, key: bytes, n: int) -> int | Generator | None:
        return self._of(key).parked(key, n)

    def row(self, key: bytes) -> tuple[int, int] | None:
        return self._of(key).row(key)

    def take_new(self, key: bytes, n: int) -> Any:
        return self._of(key).take_new(key, n)

    def take_from(self, gen: Generator, n: int) -> Any:
        return self._of(gen.key).take_from(gen, n)

    def create(self, key: bytes, *args: Any, **kwargs: Any) -> Any:
        return self._of(key).create(key, *args, **kwargs)

    def create_or_get(self, key: bytes, *args: Any, **kwargs: Any) -> Any:
        return self._of(key).create_or_get(key, *args, **kwargs)

    def alter(self, key: bytes, changes: Mapping[str, int], *args: Any) -> Any:
        return self._of(key).alter(key, changes, *args)

    @property
    def wall_offset(self) -> float:
        return self.groups[0].keyspace.wall_offset

    @wall_offset.setter
    def wall_offset(self, offset: float) -> None:
        for g in self.groups:
            g.keyspace.wall_offset = offset

    def wall(self) -> float:
        return self.groups[0].keyspace.wall()

    def reconfigure(self, config: Config) -> None:
        self.config = config
        for g in self.groups:
            g.keyspace.reconfigure(config)

    async def drain(self, timeout: float | None = None) -> None:
        await asyncio.gather(*(g.keyspace.drain(timeout) for g in self.groups))

    def keys(self, selection: Selection | None = None, prefix: bytes = b"", budget: int = 0) -> Any:
        return self._any().keys(selection, prefix, budget)

    def keys_reply(self, selection: Selection | None = None, prefix: bytes = b"", budget: int = 0) -> Any:
        return self._any().keys_reply(selection, prefix, budget)

    def scan(self, cursor: int, count: int) -> Any:
        return self._any().scan(cursor, count)

    def count(self) -> Any:
        return self._any().count()

    def size(self) -> Awaitable[int]:
        """DBSIZE: the names in this node's slots, asked of the store (each group's in-memory count
        sees only its own creations): its count of every name when this node serves every group,
        else the names of its slots counted a page at a time in slices (the store cannot count by
        slot), at most ``max_wait`` (then TRYAGAIN; the count goes on, and a DBSIZE that comes
        meanwhile waits for it instead of starting another)."""
        return self._size(self.groups.served_slots())

    async def _size(self, slots: bytes | None) -> int:
        shared = self._counting
        if shared is None or shared[0] != slots or shared[1].done():
            store = self.groups[0].keyspace.store
            if slots is None:
                counting = store.count()
            else:
                counting = listing.count(store, Selection(partial(in_slots, slots), lambda n: SLOT_CHECK_COST))
            task = asyncio.get_running_loop().create_task(counting)
            task.add_done_callback(retrieved)
            shared = self._counting = (slots, task)
        try:
            return await asyncio.wait_for(asyncio.shield(shared[1]), self.config.max_wait)
        except TimeoutError:
            raise CommandError(errors.TRYAGAIN_STORE_DOWN) from None

    @property
    def serving(self) -> bool:
        return self.groups.serving_any()
