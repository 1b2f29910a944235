"""``march groups [N]``: show and change the cluster's layout, as an operator types it, on a real etcd.

The leader keys a node would hold are put by the test (under a lease it revokes), so the refusal of
a change while the last one has not completed is shown without starting nodes.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
from march_harness.etcd import EtcdCluster
from march_harness.invoke import march, ok, refused
from march_harness.servers import REPO_ROOT

from march.cluster.layout import Layout, read_layout
from march.etcd.grpc_etcd import GrpcEtcd
from march.etcd.keypath import KeyPaths

pytestmark = pytest.mark.e2e

T = TypeVar("T")


async def _with_etcd(endpoints: str, job: Callable[[GrpcEtcd], Awaitable[T]]) -> T:
    etcd = GrpcEtcd(endpoints.split(","), timeout=5.0)
    try:
        return await job(etcd)
    finally:
        await etcd.close()


def test_show_and_change_the_number_of_groups(etcd: EtcdCluster) -> None:
    prefix = f"/groups-{uuid.uuid4().hex[:8]}"
    keys = KeyPaths.of(prefix)
    store = ["--etcd", etcd.endpoints, "--etcd-prefix", prefix]

    assert ok("groups", *store).splitlines() == [
        f"etcd prefix {prefix}: 1 group; 0 nodes registered",
        "  group 0: slots 0-16383, primary (none)",
    ]
    done = march("groups", "4", *store)  # not a terminal, no --yes: says what would happen, changes nothing
    assert done.returncode == 1 and "nothing changed (--yes to change without asking)" in done.stdout
    assert "change from 1 group to 4 groups:" in done.stdout and "group 3: slots 12288-16383" in done.stdout
    assert "MOVED" in done.stdout

    async def lead(etcd_: GrpcEtcd) -> int:  # a primary of today's layout, under its lease
        lease, _ = await etcd_.grant(30)
        await etcd_.put(keys.leader, b"n1", lease)
        await etcd_.put(keys.node("n1"), b"{}", lease)
        return lease

    lease = asyncio.run(_with_etcd(etcd.endpoints, lead))
    assert asyncio.run(_with_etcd(etcd.endpoints, lambda e: read_layout(e, keys, 5.0))) == Layout()
    out = ok("groups", "4", "--yes", *store).splitlines()
    assert out[:2] == [
        f"etcd prefix {prefix}: 1 group; 1 node registered",
        "  group 0: slots 0-16383, primary n1",
    ]
    assert out[-1].startswith("changed: 4 groups since revision ")
    shown = ok("groups", *store).splitlines()
    assert shown[0].startswith(f"etcd prefix {prefix}: 4 groups (since revision ") and "1 before" in shown[0]
    assert shown[1:] == [
        "  group 0: slots 0-4095, primary (none)",
        "  group 1: slots 4096-8191, primary (none)",
        "  group 2: slots 8192-12287, primary (none)",
        "  group 3: slots 12288-16383, primary (none)",
        f"  still held from the 1-group layout: {prefix}/leader (n1)",
    ]
    err = refused("groups", "2", "--yes", *store)  # the change to 4 has not completed: n1 still leads
    assert f"the change to 4 groups has not completed: {prefix}/leader of the 1-group layout still held" in err
    assert "already has 4 groups" in refused("groups", "4", "--yes", *store)
    assert "outside 1..256" in refused("groups", "300", "--yes", *store)

    asyncio.run(_with_etcd(etcd.endpoints, lambda e: e.revoke(lease)))  # n1 gave its key back
    assert ok("groups", "2", "--yes", *store).splitlines()[-1].startswith("changed: 2 groups")
    two = asyncio.run(_with_etcd(etcd.endpoints, lambda e: read_layout(e, keys, 5.0)))
    assert (two.groups, two.previous) == (2, 4)


def test_groups_needs_etcd() -> None:
    done = march("groups")
    assert done.returncode == 2 and "give --etcd host:port" in done.stderr


def test_a_terminal_is_asked_before_the_change(etcd: EtcdCluster) -> None:
    prefix = f"/groups-{uuid.uuid4().hex[:8]}"
    keys = KeyPaths.of(prefix)
    args = [sys.executable, "-m", "march", "groups", "4", "--etcd", etcd.endpoints, "--etcd-prefix", prefix]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MARCH_")}, "PYTHONPATH": str(REPO_ROOT)}

    def answer(reply: bytes) -> subprocess.CompletedProcess[str]:
        master, slave = os.openpty()
        try:
            os.write(master, reply)  # typed ahead: waits in the terminal for the question
            return subprocess.run(args, stdin=slave, capture_output=True, text=True, env=env, timeout=60)
        finally:
            os.close(slave)
            os.close(master)

    declined = answer(b"n\n")
    assert declined.returncode == 1 and "go ahead? [y/N] nothing changed\n" in declined.stdout
    assert asyncio.run(_with_etcd(etcd.endpoints, lambda e: read_layout(e, keys, 5.0))) == Layout()
    accepted = answer(b"y\n")
    assert accepted.returncode == 0 and "go ahead? [y/N] changed: 4 groups since revision" in accepted.stdout
    assert asyncio.run(_with_etcd(etcd.endpoints, lambda e: read_layout(e, keys, 5.0))).groups == 4
