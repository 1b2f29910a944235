"""KEYS, SCAN, SEQ.LIST, DBSIZE and CROSSSLOT on a node with several leadership groups.

A real node (SQLite in the test's directory) whose ``groups`` are replaced by four ``Group``s on its
one store, groups 0 and 2 served here, 1 and 3 not: what a node of a four-group cluster that
leads two of them holds. The handlers are called directly (the dispatcher's routing by group is
helper "groups"'s). With one group the existing tests (tests/commands/test_keys_and_scan.py,
tests/keyspace/test_listing_takes_turns.py) show nothing changed.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import hiredis
import pytest

from march import config as config_module
from march import errors
from march.app import App
from march.client import Client
from march.cluster.groups import Group, Groups
from march.cluster.layout import Layout
from march.cluster.slots import key_slot
from march.commands import keys as keys_mod
from march.commands import sequences
from march.commands.dispatch import call
from march.commands.table import COMMANDS, HOT
from march.errors import CommandError
from march.keyspace.keyspace import Keyspace
from march.keyspace.serving import ServingState
from march.node import Node
from march.resp import Encoded
from march.store.contract import SINGLE_NODE

SERVED = (0, 2)
LAYOUT = Layout(4)


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[App]:
    config = config_module.load(None, {}, {"data_dir": str(tmp_path / "data")})
    node = Node(config, COMMANDS)
    await node.open()
    groups = []
    for g in range(4):
        state = node.groups[0].state if g == 0 else ServingState(node.clock)
        if g in SERVED and g:
            state.serve_forever(SINGLE_NODE)
        keyspace = node.groups[0].keyspace if g == 0 else Keyspace(config, node.store, state, node.clock.now)
        groups.append(Group(state, keyspace, g, LAYOUT.slots(g)))
    node.groups = Groups(groups)
    try:
        yield App(config, node, HOT)
    finally:
        await node.stop()


def names_by_group(per_group: int) -> dict[int, list[bytes]]:
    found: dict[int, list[bytes]] = {g: [] for g in range(4)}
    i = 0
    while min(len(v) for v in found.values()) < per_group:
        name = b"k%d" % i
        g = LAYOUT.group_of_slot(key_slot(name))
        if len(found[g]) < per_group:
            found[g].append(name)
        i += 1
    return found


async def run(handler: Any, client: Client, *args: bytes) -> Any:
    reply = handler(client, list(args))
    value = await reply if inspect.isawaitable(reply) else reply
    if isinstance(value, Encoded):  # (KEYS and SEQ.LIST: their reply, encoded a page at a time)
        reader = hiredis.Reader()
        reader.feed(bytes(value))
        return reader.gets()
    return value


async def test_listings_and_counts_see_only_the_served_groups(app: App) -> None:
    by_group = names_by_group(30)
    for names in by_group.values():
        for name in names:  # the store is shared: group 0's keyspace creates every name
            await app.groups[0].keyspace.create_or_get(name, start=1, settings={})
    mine = sorted(n for g in SERVED for n in by_group[g])
    client = Client(app, 1, "127.0.0.1:5001", "127.0.0.1:7379")

    assert await run(keys_mod.keys, client, b"KEYS", b"*") == mine
    assert await run(keys_mod.keys, client, b"KEYS", b"k1*") == [n for n in mine if n.startswith(b"k1")]
    assert await run(sequences.seq_list, client, b"SEQ.LIST") == mine
    assert await run(keys_mod.dbsize, client, b"DBSIZE") == len(mine)
    seen, cursor = [], b"0"
    for _ in range(100):
        cursor, page = await run(keys_mod.scan, client, b"SCAN", cursor, b"COUNT", b"7")
        seen += page
        if cursor == b"0":
            break
    assert sorted(seen) == mine

    reads = 0
    list_keys = app.store.list_keys

    async def counted(*args: Any) -> list[bytes]:
        nonlocal reads
        reads += 1
        return await list_keys(*args)

    app.store.list_keys = counted  # type: ignore[method-assign]
    counts = await asyncio.gather(*(run(keys_mod.dbsize, client, b"DBSIZE") for _ in range(5)))
    assert counts == [len(mine)] * 5 and reads == 1  # one count (one page) for the five: they came while it ran
    app.store.list_keys = list_keys  # type: ignore[method-assign]
    extra = names_by_group(31)[2][-1]  # a new name in a served group: the next DBSIZE counts it
    await app.groups[2].keyspace.create_or_get(extra, start=1, settings={})
    assert await run(keys_mod.dbsize, client, b"DBSIZE") == len(mine) + 1
    mine = sorted([*mine, extra])

    for g in range(4):  # a node serving every group: every name, DBSIZE the store's count
        if g not in SERVED:
            app.groups[g].state.serve_forever(SINGLE_NODE)
    every = sorted([extra, *(n for names in by_group.values() for n in names)])
    assert await run(keys_mod.keys, client, b"KEYS", b"*") == every
    assert await run(keys_mod.dbsize, client, b"DBSIZE") == len(every)


async def test_multi_key_commands_across_groups_get_crossslot(app: App) -> None:
    """Checked in dispatch, before routing: a request whose first key's group is not served here
    gets CROSSSLOT, not MOVED (Redis checks the slots first)."""
    by_group = names_by_group(2)
    client = Client(app, 1, "127.0.0.1:5001", "127.0.0.1:7379")
    client.login(app.users.default)
    a, b = by_group[0]
    assert key_slot(a) != key_slot(b)  # two slots of one group: served, as before groups
    assert await run(call, client, b"MGET", a, b) == [None, None]
    assert await run(call, client, b"EXISTS", a, b, a) == 0
    for name in (b"MGET", b"EXISTS"):
        for first, other in ((a, by_group[1][0]), (a, by_group[2][0]), (by_group[1][0], a)):
            with pytest.raises(CommandError) as caught:  # (group 1 is not served here: no MOVED first)
                await run(call, client, name, first, b, other)
            assert str(caught.value) == errors.CROSSSLOT == "CROSSSLOT Keys in request don't hash to the same slot"
    one = Groups([Group(app.groups[0].state, app.groups[0].keyspace)])
    one.check_one([a, by_group[1][0]])  # one group: never
