"""The cluster's layout: how many leadership groups split the slot space, and each group's keys.

``<prefix>/groups`` holds the layout as JSON, ``{"groups": N, "previous": P}``; absent, the cluster
has one group (every cluster made before groups existed reads without migration). ``Layout``
carries N, the record's mod revision (0: absent) and P, the number of groups before the last
change (0: never changed). This module is the one place that knows:

- **Slot ranges**: group ``g`` of N owns slots ``g*16384//N .. (g+1)*16384//N - 1`` (contiguous, in
  order, every slot once; with N a power of two, equal halves, quarters, ...).
- **Leader and hand-off keys**: N = 1: ``<prefix>/leader`` and ``<prefix>/leader-handoff``, as
  before groups; N > 1: ``<prefix>/leader/<g>-of-<N>`` and ``<prefix>/leader-handoff/<g>-of-<N>``.
  Each layout names its keys apart, so a leader of an old layout never holds a key of the new one.
  ``<prefix>/groups``, every leader and hand-off key and every node record sort inside
  ``[KeyPaths.topology_start, KeyPaths.topology_end)``: one range read and one watch per node see
  the layout, every group's leader and every node, at one revision.

**A new cluster** gets its number of groups from the first node's ``groups`` (``create_layout``,
only while the prefix holds no cluster id yet); after that etcd's number is the cluster's.

**Changing N** (``change_layout``; docs/groups.md has the reasoning and the procedure). No key may
ever be served by two primaries, so a leader of the new layout starts only once no leader of the
old one can serve:

1. ``change_layout`` writes ``{"groups": new, "previous": old}`` in one transaction that compares
   the record's mod revision (no other change slipped in) and that every leader key of the layout
   *before* the current one is absent (the last change has completed: otherwise a leader two
   layouts back could still serve, and nothing would make the new layout wait for it).
2. Every campaign adds ``campaign_compares(layout)`` to its transaction: the record still has the
   mod revision the node acts on (a node that has not seen a change wins nothing under the old
   layout), and every leader key of the previous layout is absent (created at revision 0).
3. A node that sees the record change steps every group of the old layout down, then deletes its
   leader keys (guarded, as a resign). A node that cannot (partitioned, paused, killed) keeps its
   keys until etcd expires its lease, which is after its own serving deadline (guarantee 4).

So at any moment only leaders of the current layout and of the previous one exist, and a leader
of the current one exists only once the previous one's are gone. Ceilings are per key at
``<prefix>/seq/<key>`` whatever the layout: the group that receives a key reads its ceiling and
writes a higher one before its first ID, as after any failover.

This module reads and writes ``<prefix>/groups`` only; it never campaigns and never hands out an ID.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass

from march.cluster.slots import SLOTS
from march.errors import StoreError
from march.etcd.api import KV, Compare, Etcd, Get, Put, created_at, modified_at
from march.etcd.keypath import KeyPaths

MAX_GROUPS = 256  # config's bound on ``groups``: ``Groups`` maps a slot to its group in one byte


@dataclass(frozen=True)
class SlotRange:
    """The slots ``first`` to ``last`` (both included), as CLUSTER SLOTS shows them."""

    first: int
    last: int

    def __contains__(self, slot: object) -> bool:
        return isinstance(slot, int) and self.first <= slot <= self.last


ALL_SLOTS = SlotRange(0, SLOTS - 1)


class BadLayout(StoreError):
    """``<prefix>/groups`` holds something this version cannot read: elect nobody until it is fixed."""


class LayoutChangeRefused(StoreError):
    """``change_layout`` could not change the layout now (the message says why and what to do)."""


def slot_range(groups: int, g: int) -> SlotRange:
    """The slots of group ``g`` of ``groups``."""
    return SlotRange(g * SLOTS // groups, (g + 1) * SLOTS // groups - 1)


@dataclass(frozen=True)
class Layout:
    groups: int = 1  # N: leadership groups
    revision: int = 0  # mod revision of <prefix>/groups (0: absent)
    previous: int = 0  # N before the last change (0: none)

    def __post_init__(self) -> None:
        if not 1 <= self.groups <= MAX_GROUPS or not 0 <= self.previous <= MAX_GROUPS:
            raise BadLayout(f"a layout of {self.groups} groups (previous {self.previous}) is outside 1..{MAX_GROUPS}")

    def slots(self, g: int) -> SlotRange:
        return slot_range(self.groups, g)

    def group_of_slot(self, slot: int) -> int:
        """The group that owns ``slot`` (0 <= slot < 16384)."""
        # the largest g with g*16384//N <= slot, i.e. g*16384 < (slot+1)*N
        return ((slot + 1) * self.groups - 1) // SLOTS

    def leader_key(self, keys: KeyPaths, g: int) -> bytes:
        return _group_key(keys.leader, self.groups, g)

    def handoff_key(self, keys: KeyPaths, g: int) -> bytes:
        return _group_key(keys.handoff, self.groups, g)

    def leader_keys(self, keys: KeyPaths) -> list[bytes]:
        return [self.leader_key(keys, g) for g in range(self.groups)]

    def previous_leader_keys(self, keys: KeyPaths) -> list[bytes]:
        """Every leader key of the layout before the last change (none if it never changed)."""
        return [_group_key(keys.leader, self.previous, g) for g in range(self.previous)]

    def group_of_leader_key(self, keys: KeyPaths, key: bytes) -> int | None:
        """Which group of this layout ``key`` is the leader key of (None: none of this layout's)."""
        return _group_of(keys.leader, self.groups, key)

    def group_of_handoff_key(self, keys: KeyPaths, key: bytes) -> int | None:
        """Which group of this layout ``key`` is the hand-off key of (None: none of this layout's)."""
        return _group_of(keys.handoff, self.groups, key)

    def describe(self) -> str:
        return f"{self.groups} group{'s' if self.groups > 1 else ''}"

    def label(self, g: int) -> str:
        """What logs call group ``g``: nothing with one group (its names carry no index, as its keys)."""
        return "" if self.groups == 1 else f"group {g}"


def _group_key(base: bytes, groups: int, g: int) -> bytes:
    if not 0 <= g < groups:
        raise IndexError(f"group {g} of {groups}")
    return base if groups == 1 else base + b"/%d-of-%d" % (g, groups)


def _group_of(base: bytes, groups: int, key: bytes) -> int | None:
    if groups == 1:
        return 0 if key == base else None
    tail = key[len(base) :] if key.startswith(base + b"/") else b""
    number, _, of = tail[1:].partition(b"-of-")
    if not number.isdigit() or of != b"%d" % groups:
        return None
    g = int(number)
    return g if g < groups and b"%d" % g == number else None


def layout_of(kv: KV | None) -> Layout:
    """The layout ``<prefix>/groups`` holds (``kv`` as read; None: absent, one group).
    BadLayout if it holds anything else than a layout this version writes."""
    if kv is None:
        return Layout()
    try:
        data = json.loads(kv.value)
        groups, previous = data["groups"], data.get("previous", 0)
    except (ValueError, KeyError, TypeError) as exc:
        raise BadLayout(f"{kv.key.decode(errors='replace')} holds {kv.value[:100]!r}, not a layout") from exc
    if type(groups) is not int or type(previous) is not int:
        raise BadLayout(f"{kv.key.decode(errors='replace')} holds {kv.value[:100]!r}, not a layout")
    return Layout(groups, kv.mod_revision, previous)


def _record(groups: int, previous: int) -> bytes:
    return json.dumps({"groups": groups, "previous": previous}).encode()


def campaign_compares(layout: Layout, keys: KeyPaths) -> list[Compare]:
    """What a campaign for any group of ``layout`` adds to its transaction: the layout is still the
    one the node acts on, and no leader of the previous layout is left (one may still serve)."""
    return [modified_at(keys.groups, layout.revision)] + [created_at(k, 0) for k in layout.previous_leader_keys(keys)]


async def read_layout(etcd: Etcd, keys: KeyPaths, timeout: float) -> Layout:
    """The layout etcd holds now (linearizable)."""
    return layout_of(await etcd.get(keys.groups, timeout))


async def create_layout(etcd: Etcd, keys: KeyPaths, groups: int, timeout: float) -> Layout:
    """Give a new cluster ``groups`` groups; the layout etcd holds afterwards. Call it before the
    cluster id is bootstrapped (``march.cluster.identity``).

    Only a fresh prefix gets a layout (a create-if-absent transaction that also finds no
    ``<prefix>/cluster``): the number of groups is the cluster's, and once the cluster exists only
    ``change_layout`` (``march groups N``) changes it; a node started with another ``groups`` follows
    etcd. No leader can exist on a fresh prefix (every campaign compares the cluster id), so the new
    layout has no previous one. One group writes nothing: an absent record is one group."""
    if groups == 1:
        return await read_layout(etcd, keys, timeout)
    Layout(groups)  # BadLayout if out of bounds
    reply = await etcd.txn(
        [created_at(keys.groups, 0), created_at(keys.cluster, 0)],
        [Put(keys.groups, _record(groups, 0))],
        [Get(keys.groups)],
        timeout,
    )
    if reply.succeeded:
        return Layout(groups, reply.revision, 0)
    found = reply.ranges[0]
    return layout_of(found.kvs[0] if found is not None and found.kvs else None)


async def change_layout(
    etcd: Etcd, keys: KeyPaths, groups: int, timeout: float, expected: Layout | None = None
) -> Layout:
    """Change the cluster's layout to ``groups`` (from ``expected``, else from what etcd holds now);
    the new layout. LayoutChangeRefused when the layout changed meanwhile, or the last change has
    not completed (a leader of the layout before the current one still holds its key)."""
    current = expected if expected is not None else await read_layout(etcd, keys, timeout)
    if groups == current.groups:
        raise LayoutChangeRefused(f"the cluster already has {current.describe()}")
    Layout(groups)  # BadLayout if out of bounds
    lingering = current.previous_leader_keys(keys)
    reply = await etcd.txn(
        [modified_at(keys.groups, current.revision)] + [created_at(k, 0) for k in lingering],
        [Put(keys.groups, _record(groups, current.groups))],
        [Get(keys.groups)] + [Get(k) for k in lingering],
        timeout,
    )
    if reply.succeeded:
        return Layout(groups, reply.revision, current.groups)
    found, *leaders = (r.kvs[0] if r is not None and r.kvs else None for r in reply.ranges)
    now = layout_of(found)
    if now != current:
        raise LayoutChangeRefused(f"the layout changed meanwhile (now {now.describe()}): look again and retry")
    held = ", ".join(kv.key.decode(errors="replace") for kv in leaders if kv is not None)
    raise LayoutChangeRefused(
        f"the change to {current.describe()} has not completed: {held} of the {current.previous}-group layout "
        "still held (its node steps down when it sees the change, or its lease expires within a TTL); "
        "retry then"
    )


@dataclass(frozen=True)
class LayoutStatus:
    """What ``march groups`` shows: the layout, each group's primary (node id, None: none), the
    previous layout's leader keys still held (key -> node id) and the registered nodes."""

    layout: Layout
    leaders: dict[int, str | None]
    lingering: dict[bytes, str]
    nodes: list[str]

    def lines(self, prefix: str) -> list[str]:
        layout = self.layout
        head = f"etcd prefix {prefix}: {layout.describe()}"
        if layout.revision:
            head += f" (since revision {layout.revision}, {layout.previous} before)"
        out = [head + f"; {len(self.nodes)} node{'s' if len(self.nodes) != 1 else ''} registered"]
        for g in range(layout.groups):
            r = layout.slots(g)
            out.append(f"  group {g}: slots {r.first}-{r.last}, primary {self.leaders[g] or '(none)'}")
        for key, node in self.lingering.items():
            out.append(f"  still held from the {layout.previous}-group layout: {key.decode(errors='replace')} ({node})")
        return out


async def read_status(etcd: Etcd, keys: KeyPaths, timeout: float) -> LayoutStatus:
    """One linearizable read of the layout, every leader key and every node record."""
    found = await etcd.range(Get(keys.topology_start, keys.topology_end), timeout)
    by_key = {kv.key: kv for kv in found.kvs}
    layout = layout_of(by_key.get(keys.groups))
    leaders: dict[int, str | None] = {}
    for g in range(layout.groups):
        kv = by_key.get(layout.leader_key(keys, g))
        leaders[g] = kv.value.decode(errors="replace") if kv is not None else None
    lingering = {k: by_key[k].value.decode(errors="replace") for k in layout.previous_leader_keys(keys) if k in by_key}
    nodes = [kv.key[len(keys.nodes) :].decode(errors="replace") for kv in found.kvs if kv.key.startswith(keys.nodes)]
    return LayoutStatus(layout, leaders, lingering, nodes)


def change_lines(current: Layout, groups: int) -> list[str]:
    """What changing ``current`` to ``groups`` groups does, for the operator to confirm."""
    if groups == current.groups:
        raise LayoutChangeRefused(f"the cluster already has {current.describe()}")
    new = Layout(groups)  # BadLayout if out of bounds
    out = [f"change from {current.describe()} to {new.describe()}:"]
    out += [f"  group {g}: slots {new.slots(g).first}-{new.slots(g).last}" for g in range(groups)]
    out += textwrap.wrap(
        "Every node steps down from the groups it leads and gives their leader keys back; the new groups "
        "elect their primaries once every old leader key is gone. Each key pauses for about one election "
        "(up to a lease TTL while a node that led cannot be reached), then cluster clients get MOVED to "
        "the new primaries. Each key's first ID in its new group is above its stored ceiling: no ID repeats "
        "or goes backwards.",
        100,
    )
    return out
