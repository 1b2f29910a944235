"""Unit tests of users shared through the store (``march.access.stored``), on the fake etcd and on the test's loop.

- A node follows a change made elsewhere by installing that one user (the watch event carries
  it): no read of every user, whatever their number; deletions and creations likewise.
- Records arriving out of order (a command's own write and the watch's report of it, a page read
  after a later change) leave the newest: ``Users.take`` compares revisions.
- Work that grows with the number of users runs in slices: the start-up install of 5,000 users
  and ``ACL LIST`` of them let another task run between slices (an ordering, not a timing).

Cluster-level behaviour (three processes, real etcd) is in tests/access/test_acl_race.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from march_harness.aio import finish, until
from march_harness.fake_etcd import FakeEtcd
from march_harness.manual_clock import ManualClock

import march.commands  # noqa: F401  (registers every command)
from march.access.rules import User, hash_password
from march.access.stored import SLICE
from march.access.users import Users
from march.commands.acl import LIST_SLICE, _sliced
from march.commands.table import COMMANDS
from march.config import Config
from march.etcd.keypath import KeyPaths
from march.node import Node

PREFIX = "/users-test"
KEYS = KeyPaths.of(PREFIX)
RULES = f"on #{hash_password(b'pw')} ~app:* resetchannels -@all +@read +@write"


@pytest.fixture
def etcd() -> FakeEtcd:
    return FakeEtcd(ManualClock())


@pytest.fixture
async def node(etcd: FakeEtcd) -> AsyncIterator[Callable[[], Node]]:
    made: list[Node] = []

    def build() -> Node:
        config = Config(etcd="fake:2379", etcd_prefix=PREFIX, node_id=f"n{len(made)}")
        n = Node(config, COMMANDS, clock=etcd.clock, etcd=lambda purpose: etcd.client(f"n{len(made)}-{purpose}"))
        made.append(n)
        return n

    yield build
    for n in made:
        await finish(n.stop(), 5.0)


async def store_users(etcd: FakeEtcd, count: int) -> None:
    seed = etcd.client("seed")
    await asyncio.gather(*(seed.put(KEYS.user(f"user{i:05d}"), RULES.encode()) for i in range(count)))


async def test_a_change_made_elsewhere_installs_that_user_only(etcd: FakeEtcd, node: Callable[[], Node]) -> None:
    await store_users(etcd, 2000)
    n = node()
    await finish(n.open())
    await until(lambda: n.users.loaded and n.users.get("user01999") is not None, "the users", 10)
    reads = etcd.calls["range"] + etcd.calls["get"]
    other = etcd.client("another node")
    await other.put(KEYS.user("user00007"), b"off resetchannels -@all")
    await until(lambda: not n.users.users["user00007"].enabled, "the change")
    await other.put(KEYS.user("newcomer"), RULES.encode())
    await until(lambda: n.users.get("newcomer") is not None, "the new user")
    await other.delete(KEYS.user("user00008"))
    await until(lambda: n.users.get("user00008") is None, "the deletion")
    assert etcd.calls["range"] + etcd.calls["get"] == reads, "a change elsewhere made the node read the users again"
    assert n.users.users["user00009"].enabled and len(n.users) == 2000 + 1  # (one in, one out; + default)


async def test_the_start_up_install_is_sliced(etcd: FakeEtcd, node: Callable[[], Node]) -> None:
    await store_users(etcd, 5000)
    n = node()
    turns = 0

    async def other_client() -> None:
        nonlocal turns
        while not n.users.loaded:
            turns += 1
            await asyncio.sleep(0)

    probe = asyncio.ensure_future(other_client())
    await finish(n.open())
    await until(lambda: n.users.loaded, "the users", 10)
    await finish(probe)
    assert len(n.users) == 5001
    assert turns >= 5000 // SLICE - 1, f"another task ran {turns} times while 5,000 users were installed"


def test_records_out_of_order_leave_the_newest() -> None:
    users = Users(COMMANDS)
    assert users.take("u", "on nopass", 10) == (True, None)
    assert users.take("u", "off", 7) == (False, None)  # older: ignored
    assert users.users["u"].enabled
    changed, gone = users.take("u", None, 12)
    assert changed and isinstance(gone, User)
    assert users.take("u", "on nopass", 11) == (False, None)  # written before the deletion: stays deleted
    assert users.get("u") is None
    assert users.take("u", "on nopass", 13) == (True, None)  # created anew
    users.advance(20)
    assert users.take("v", "on", 15) == (False, None)  # the watch has passed 15: it is applied or superseded


async def test_acl_list_of_many_users_is_sliced() -> None:
    users = Users(COMMANDS)
    for i in range(5000):
        users.install(f"user{i:05d}", RULES)
    turns = 0
    done = False

    async def other_client() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await asyncio.sleep(0)

    probe = asyncio.ensure_future(other_client())
    lines = await finish(_sliced(users, lambda u: f"user {u.name} {u.describe()}".encode()))
    done = True
    await finish(probe)
    assert len(lines) == 5001 and lines[0].startswith(b"user default ")
    assert turns >= 5000 // LIST_SLICE - 1


async def test_a_node_seeding_requirepass_while_another_does_never_leaves_default_open(etcd: FakeEtcd) -> None:
    clients: dict[str, Any] = {}

    def client(purpose: str) -> Any:
        clients[purpose] = etcd.client(f"n-{purpose}")
        return clients[purpose]

    n = Node(
        Config(etcd="fake:2379", etcd_prefix=PREFIX, node_id="n", requirepass="mine"),
        COMMANDS,
        clock=etcd.clock,
        etcd=client,
    )
    data = clients["data"]
    read = data.range
    theirs = f"on #{hash_password(b'theirs')} ~* resetchannels +@all"

    async def racing(get: Any, timeout: float | None = None) -> Any:
        found = await read(get, timeout)
        if get.key == KEYS.users:  # another node seeds its default right after this node's read
            await etcd.client("other").put(KEYS.user("default"), theirs.encode())
        return found

    data.range = racing
    seen: list[tuple[bool, bool]] = []  # (nopass, takes "theirs") when the node first knows its users
    n.shared_users.changed = lambda _: seen.append((n.users.default.nopass, n.users.default.check_password(b"theirs")))
    try:
        await finish(n.open())
        await until(lambda: n.users.loaded, "the users")
        assert seen[0] == (False, True), "default was open (or not the stored one) when the node let clients in"
    finally:
        await finish(n.stop(), 5.0)
