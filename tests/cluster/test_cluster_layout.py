"""``march.cluster.layout``: slot ranges, per-group keys, the layout record and the change of N.

The pure parts are checked exhaustively (every N the config allows); the record's transactions on
the fake etcd, and once on a real one. ``test_no_two_leaders_of_one_slot`` plays random
interleavings of nodes that act on stale layouts (campaigns, resigns, changes of N) and checks,
after every step, that the leader keys etcd holds never cover a slot twice, whatever layouts they
belong to: the property the change-N procedure rests on.
"""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import AsyncIterator

import pytest
from march_harness.etcd import EtcdCluster
from march_harness.fake_etcd import FakeEtcd
from march_harness.manual_clock import ManualClock

from march.cluster.groups import SlotRange
from march.cluster.layout import (
    MAX_GROUPS,
    BadLayout,
    Layout,
    LayoutChangeRefused,
    campaign_compares,
    change_layout,
    create_layout,
    layout_of,
    read_layout,
)
from march.cluster.slots import SLOTS
from march.etcd.api import KV, Delete, Etcd, Get, Put, created_at, value_is
from march.etcd.grpc_etcd import GrpcEtcd
from march.etcd.keypath import KeyPaths

pytestmark = pytest.mark.e2e

KEYS = KeyPaths.of("/march")


# --- slot ranges -----------------------------------------------------------------------------------


def test_slot_ranges_tile_the_slot_space_for_every_n() -> None:
    for n in range(1, MAX_GROUPS + 1):
        layout = Layout(n)
        ranges = [layout.slots(g) for g in range(n)]
        assert ranges[0].first == 0 and ranges[-1].last == SLOTS - 1
        for a, b in itertools.pairwise(ranges):
            assert b.first == a.last + 1 and a.first <= a.last
        for g, r in enumerate(ranges):  # every boundary slot maps back to its group
            for slot in {r.first, r.first + 1, r.last - 1, r.last} & set(range(r.first, r.last + 1)):
                assert layout.group_of_slot(slot) == g, (n, g, slot)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 16, 100, 255, 256])
def test_group_of_slot_for_every_slot(n: int) -> None:
    layout = Layout(n)
    owner = [g for g in range(n) for _ in range(layout.slots(g).first, layout.slots(g).last + 1)]
    assert [layout.group_of_slot(s) for s in range(SLOTS)] == owner


def test_the_shared_ranges() -> None:
    assert Layout(1).slots(0) == SlotRange(0, 16383)
    assert [Layout(4).slots(g) for g in range(4)] == [
        SlotRange(0, 4095),
        SlotRange(4096, 8191),
        SlotRange(8192, 12287),
        SlotRange(12288, 16383),
    ]
    assert Layout(3).slots(0) == SlotRange(0, 5460) and Layout(3).slots(2) == SlotRange(10922, 16383)


# --- keys --------------------------------------------------------------------------------------------


def test_one_group_keeps_todays_keys() -> None:
    layout = Layout()
    assert layout.leader_key(KEYS, 0) == b"/march/leader"
    assert layout.handoff_key(KEYS, 0) == b"/march/leader-handoff"
    assert layout.previous_leader_keys(KEYS) == []
    with pytest.raises(IndexError):
        layout.leader_key(KEYS, 1)


def test_per_group_keys_and_where_they_sort() -> None:
    layout = Layout(4, 7, 1)
    assert layout.leader_key(KEYS, 2) == b"/march/leader/2-of-4"
    assert layout.handoff_key(KEYS, 3) == b"/march/leader-handoff/3-of-4"
    assert layout.previous_leader_keys(KEYS) == [b"/march/leader"]
    assert Layout(2, 9, 4).previous_leader_keys(KEYS) == [b"/march/leader/%d-of-4" % g for g in range(4)]
    start, end = KEYS.topology_start, KEYS.topology_end
    inside = [KEYS.groups, KEYS.leader, KEYS.handoff, KEYS.node("n1"), KEYS.node("\xff")]
    for n in (2, 3, 10, 256):
        many = Layout(n)
        inside += [k for g in range(n) for k in (many.leader_key(KEYS, g), many.handoff_key(KEYS, g))]
    assert all(start <= k < end for k in inside)
    outside = [KEYS.cluster, KEYS.seq(b"a"), KEYS.user("u"), KEYS.worker(b"ns", 1), KEYS.workers_retired]
    assert not any(start <= k < end for k in outside)


def test_which_group_a_key_leads() -> None:
    four = Layout(4)
    for g in range(4):
        assert four.group_of_leader_key(KEYS, four.leader_key(KEYS, g)) == g
        assert four.group_of_handoff_key(KEYS, four.handoff_key(KEYS, g)) == g
        assert four.group_of_leader_key(KEYS, four.handoff_key(KEYS, g)) is None
    for other in (b"/march/leader", b"/march/leader/4-of-4", b"/march/leader/01-of-4", b"/march/leader/1-of-2"):
        assert four.group_of_leader_key(KEYS, other) is None
    assert Layout().group_of_leader_key(KEYS, b"/march/leader") == 0
    assert Layout().group_of_leader_key(KEYS, b"/march/leader/0-of-4") is None


# --- the record ----------------------------------------------------------------------------------------


def test_reading_the_record() -> None:
    assert layout_of(None) == Layout(1, 0, 0)
    kv = KV(KEYS.groups, b'{"groups": 4, "previous": 1}', 5, 9, 2, 0)
    assert layout_of(kv) == Layout(4, 9, 1)
    for bad in (b"4", b"{}", b'{"groups": "4"}', b'{"groups": 0}', b'{"groups": 257}', b'{"groups": true}', b"\xff"):
        with pytest.raises(BadLayout):
            layout_of(KV(KEYS.groups, bad, 5, 9, 1, 0))


@pytest.fixture
async def fake() -> AsyncIterator[Etcd]:
    client = FakeEtcd(ManualClock()).client("n1")
    yield client
    await client.close()


async def test_only_a_new_cluster_gets_its_number_of_groups(fake: Etcd) -> None:
    await fake.put(KEYS.cluster, b"c1")  # a cluster made before: one group, whatever a node says
    assert await create_layout(fake, KEYS, 4, 1.0) == Layout()
    assert await fake.get(KEYS.groups) is None


async def test_create_and_change(fake: Etcd) -> None:
    assert await create_layout(fake, KEYS, 1, 1.0) == Layout()
    assert await fake.get(KEYS.groups) is None  # one group writes nothing
    four = await create_layout(fake, KEYS, 4, 1.0)
    assert (four.groups, four.previous) == (4, 0) and four.revision > 0
    assert await create_layout(fake, KEYS, 2, 1.0) == four  # the cluster's number wins
    assert await read_layout(fake, KEYS, 1.0) == four
    with pytest.raises(LayoutChangeRefused, match="already has 4 groups"):
        await change_layout(fake, KEYS, 4, 1.0)
    with pytest.raises(BadLayout):
        await change_layout(fake, KEYS, 300, 1.0)
    two = await change_layout(fake, KEYS, 2, 1.0)
    assert (two.groups, two.previous) == (2, 4) and two.revision > four.revision
    with pytest.raises(LayoutChangeRefused, match="changed meanwhile"):
        await change_layout(fake, KEYS, 8, 1.0, expected=four)


async def test_a_change_waits_for_the_last_one_to_complete(fake: Etcd) -> None:
    await fake.put(KEYS.leader, b"n1")  # a leader of the one-group layout
    four = await change_layout(fake, KEYS, 4, 1.0)  # allowed: its campaigns wait for that key
    with pytest.raises(LayoutChangeRefused, match="/march/leader of the 1-group layout still held"):
        await change_layout(fake, KEYS, 2, 1.0)
    assert await read_layout(fake, KEYS, 1.0) == four
    await fake.delete(KEYS.leader)
    assert (await change_layout(fake, KEYS, 2, 1.0)).groups == 2


async def _campaign(etcd: Etcd, layout: Layout, g: int, node: str) -> bool:
    key = layout.leader_key(KEYS, g)
    compares = [*campaign_compares(layout, KEYS), created_at(key, 0)]
    return (await etcd.txn(compares, [Put(key, node.encode())])).succeeded


async def test_campaign_compares(fake: Etcd) -> None:
    one = await read_layout(fake, KEYS, 1.0)
    assert await _campaign(fake, one, 0, "n1")
    four = await change_layout(fake, KEYS, 4, 1.0)
    assert not await _campaign(fake, one, 0, "n2")  # acts on the old layout: nothing won
    assert not await _campaign(fake, four, 1, "n2")  # the one-group leader still holds its key
    await fake.delete(KEYS.leader)
    assert await _campaign(fake, four, 1, "n2")
    assert not await _campaign(fake, one, 0, "n1")


# --- the property the change of N rests on -------------------------------------------------------------


def _ranges(held: list[KV]) -> list[SlotRange]:
    """The slot ranges of the leader keys etcd holds (any layout's)."""
    ranges = []
    for kv in held:
        if kv.key == KEYS.leader:
            ranges.append(Layout().slots(0))
        else:
            g, _, n = kv.key[len(KEYS.leader) + 1 :].partition(b"-of-")
            ranges.append(Layout(int(n)).slots(int(g)))
    return ranges


def _overlap(ranges: list[SlotRange]) -> bool:
    ordered = sorted(ranges, key=lambda r: r.first)
    return any(b.first <= a.last for a, b in itertools.pairwise(ordered))


async def _leaders(etcd: Etcd) -> list[KV]:
    return (await etcd.range(Get(KEYS.leader, KEYS.leader + b"0"))).kvs


async def test_no_two_leaders_of_one_slot() -> None:
    """Nodes acting on layouts they read at some point (possibly long ago) campaign, resign and
    change N in random order; the leader keys etcd holds never cover a slot twice."""
    rng = random.Random(17)
    nodes = [f"n{i}" for i in range(3)]
    changes = campaigns = 0
    for _ in range(40):
        etcd = FakeEtcd(ManualClock()).client("n")
        seen: dict[str, Layout] = {n: Layout() for n in nodes}
        for _ in range(60):
            node = rng.choice(nodes)
            action = rng.random()
            if action < 0.25:
                seen[node] = await read_layout(etcd, KEYS, 1.0)
            elif action < 0.35:
                try:
                    seen[node] = await change_layout(etcd, KEYS, rng.choice([1, 2, 3, 4]), 1.0, seen[node])
                    changes += 1
                except LayoutChangeRefused:
                    pass
            elif action < 0.75:
                layout = seen[node]
                campaigns += await _campaign(etcd, layout, rng.randrange(layout.groups), node)
            else:  # one of its keys goes, of any layout (a node steps down and resigns, or its lease expires)
                mine = [kv.key for kv in await _leaders(etcd) if kv.value == node.encode()]
                if mine:
                    key = rng.choice(mine)
                    await etcd.txn([value_is(key, node.encode())], [Delete(key)])
            held = await _leaders(etcd)
            assert not _overlap(_ranges(held)), [kv.key for kv in held]
        await etcd.close()
    assert changes > 40 and campaigns > 200  # the walk did change N and elect, often


async def test_the_checker_sees_two_leaders_of_one_slot(fake: Etcd) -> None:
    """A leader of the old layout beside one of the new layout is what the walk above looks for."""
    await fake.put(KEYS.leader, b"n1")
    await fake.put(Layout(4).leader_key(KEYS, 3), b"n2")
    assert _overlap(_ranges(await _leaders(fake)))
    assert not _overlap([Layout(4).slots(g) for g in range(4)])


# --- a real etcd ------------------------------------------------------------------------------------------


async def test_on_a_real_etcd(etcd: EtcdCluster) -> None:
    real = GrpcEtcd(etcd.endpoints.split(","), timeout=5.0)
    keys = KeyPaths.of(f"/layout-{uuid.uuid4().hex[:8]}")
    try:
        lease, _ = await real.grant(5)
        await real.put(keys.cluster, b"c1")
        await real.put(keys.leader, b"n1", lease)  # today's one-group leader
        assert await create_layout(real, keys, 4, 2.0) == Layout()  # an existing cluster keeps its number
        four = await change_layout(real, keys, 4, 2.0)
        assert (four.groups, four.previous) == (4, 1)
        key = four.leader_key(keys, 0)
        campaign = [*campaign_compares(four, keys), created_at(key, 0)]
        assert not (await real.txn(campaign, [Put(key, b"n2")], [], 2.0)).succeeded
        with pytest.raises(LayoutChangeRefused):
            await change_layout(real, keys, 2, 2.0)
        await real.revoke(lease)  # the old leader's lease ends: its key goes with it
        assert (await real.txn(campaign, [Put(key, b"n2")], [], 2.0)).succeeded
        stale = [*campaign_compares(Layout(), keys), created_at(keys.leader, 0)]
        assert not (await real.txn(stale, [Put(keys.leader, b"n3")], [], 2.0)).succeeded
        assert await read_layout(real, keys, 2.0) == four
    finally:
        await real.close()
