"""The cluster's layout: how many leadership groups split the slot space, and their etcd keys.

(A minimal stand-in, replaced by helper "layout"'s module of the same name and API.)

``<prefix>/groups`` holds the layout as JSON (``{"groups": N}``). Absent means one group, so a
cluster created before groups existed reads without migration. Group ``g`` of ``N`` owns slots
``g*16384//N .. (g+1)*16384//N - 1``. Leader keys: with one group ``<prefix>/leader`` and
``<prefix>/leader-handoff`` (as always); with more, ``<prefix>/leader/<g>-of-<N>`` and
``<prefix>/leader-handoff/<g>-of-<N>``: all inside ``[<prefix>/leader, <prefix>/nodes0)``, so one range
read and one watch cover every group's keys and every node record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..etcd.api import Etcd, Get, Put, created_at
from ..etcd.keys import KeyPaths
from .slots import SLOTS


@dataclass(frozen=True)
class SlotSpan:
    first: int
    last: int


@dataclass(frozen=True)
class Layout:
    groups: int = 1
    revision: int = 0  # the mod revision of ``<prefix>/groups`` (0: absent)
    previous: int = 0  # the number of groups before the last change (0: none)

    def slots(self, g: int) -> SlotSpan:
        return SlotSpan(g * SLOTS // self.groups, (g + 1) * SLOTS // self.groups - 1)

    def leader_key(self, keys: KeyPaths, g: int) -> bytes:
        return keys.leader if self.groups == 1 else keys.leader + b"/%d-of-%d" % (g, self.groups)

    def handoff_key(self, keys: KeyPaths, g: int) -> bytes:
        return keys.handoff if self.groups == 1 else keys.handoff + b"/%d-of-%d" % (g, self.groups)


def layout_key(keys: KeyPaths) -> bytes:
    return keys.prefix + b"/groups"


def encode(layout: Layout) -> bytes:
    return json.dumps({"groups": layout.groups}).encode()


def decode(value: bytes, revision: int) -> Layout:
    data = json.loads(value)
    return Layout(int(data["groups"]), revision, int(data.get("previous", 0)))


async def read_layout(etcd: Etcd, keys: KeyPaths, timeout: float) -> Layout | None:
    """The cluster's layout; None on a fresh prefix (neither ``<prefix>/groups`` nor ``<prefix>/cluster``)."""
    reply = await etcd.txn([], [Get(layout_key(keys)), Get(keys.cluster)], [], timeout)
    found, cluster = (r.kvs[0] if r is not None and r.kvs else None for r in reply.ranges)
    if found is not None:
        return decode(found.value, found.mod_revision)
    return Layout() if cluster is not None else None


async def ensure_layout(etcd: Etcd, keys: KeyPaths, groups: int, timeout: float) -> Layout:
    """The cluster's layout, written from ``groups`` first if the prefix is fresh (create-if-absent, as
    the cluster id: two nodes bootstrapping at once agree on one)."""
    key = layout_key(keys)
    await etcd.txn([created_at(key, 0), created_at(keys.cluster, 0)], [Put(key, encode(Layout(groups)))], [], timeout)
    layout = await read_layout(etcd, keys, timeout)
    return layout if layout is not None else Layout(groups)
