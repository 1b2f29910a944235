"""INFO replication of a March cluster, field for field with a real Redis 7.0 primary and replica
(issue 28): the primary is ``role:master`` with its standbys as ``slaveN`` lines, a standby is
``role:slave`` of the primary (as ROLE, SENTINEL REPLICAS and CLUSTER NODES say; the README says
why), every field Redis has is there in Redis' order, and the values mean what they mean in Redis
where March has the same fact: the primary's address, the link up while a primary is known, one
``master_replid`` shared by a primary and its replicas and new after a failover.

Values left out of the comparison, by nature: addresses and ports (each server's own), the
replication ids, and the offsets (Redis' grow with its replication stream; March replicates
nothing, a standby reads the store when it takes over, so its are 0).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
from march_harness.cluster import ClusterNode, MarchCluster
from march_harness.resp import RespConn
from march_harness.servers import RedisServer

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

OFFSETS = ("master_repl_offset", "slave_repl_offset", "slave_read_repl_offset", "repl_backlog_first_byte_offset")
# Redis reports the backlog it keeps for its replicas (active, its size and length); March keeps none
BACKLOG = ("repl_backlog_active", "repl_backlog_size", "repl_backlog_histlen")


def replication(port: int) -> dict[str, str]:
    with RespConn(port) as c:
        text = c.call("INFO", "replication").decode()
    return dict(line.split(":", 1) for line in text.split("\r\n") if line and not line.startswith("#"))


def names(fields: dict[str, str]) -> list[str]:
    """Field names in order, the ``slaveN`` lines as one (Redis has one replica here, March two standbys)."""
    out: list[str] = []
    for name in fields:
        name = re.sub(r"^slave\d+$", "slaveN", name)
        if not out or out[-1] != name:
            out.append(name)
    return out


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)  # polling a condition with a deadline


def test_primary_and_standbys_as_a_redis_primary_and_replica(
    march_cluster: MarchCluster, redis_factory: Callable[..., RedisServer]
) -> None:
    master = redis_factory()
    replica = redis_factory(extra_args=["--replicaof", "127.0.0.1", str(master.port)])
    wait_for(
        lambda: (
            replication(replica.port).get("master_link_status") == "up"
            and "state=online" in replication(master.port).get("slave0", "")
        ),
        "the Redis replica in sync",
    )
    primary = march_cluster.wait_settled(timeout=20)
    standbys = [n for n in march_cluster.nodes if n is not primary]
    wait_for(lambda: replication(primary.port)["connected_slaves"] == "2", "the primary seeing both standbys")
    r_master, r_replica = replication(master.port), replication(replica.port)
    m_primary = replication(primary.port)
    m_standbys = [replication(n.port) for n in standbys]

    assert names(m_primary) == names(r_master)
    assert [names(s) for s in m_standbys] == [names(r_replica)] * 2
    # a replica line: the same fields; March's standbys are online and have nothing to catch up on
    line_fields = [f.split("=")[0] for f in r_master["slave0"].split(",")]
    for i, standby in enumerate(sorted(standbys, key=lambda n: n.node_id)):
        line = dict(f.split("=") for f in m_primary[f"slave{i}"].split(","))
        assert list(line) == line_fields and line["state"] == "online" and line["lag"] == "0"
        assert f"{line['ip']}:{line['port']}" == standby.address
    assert m_primary["connected_slaves"] == "2"

    left_out = ("master_host", "master_port", "master_replid", *OFFSETS, *BACKLOG)
    for s in m_standbys:
        assert f"{s['master_host']}:{s['master_port']}" == primary.address
        assert {k: v for k, v in s.items() if k not in left_out} == {
            k: v for k, v in r_replica.items() if k not in left_out
        }
        assert {s[k] for k in (*OFFSETS, *BACKLOG) if k in s} == {"0"}
    same_tail = ("master_failover_state", "master_replid2", "second_repl_offset")
    assert {k: m_primary[k] for k in same_tail} == {k: r_master[k] for k in same_tail}
    # one history: a replica reports its primary's replication id, as in Redis
    assert r_replica["master_replid"] == r_master["master_replid"]
    assert {s["master_replid"] for s in m_standbys} == {m_primary["master_replid"]}

    # a failover starts a new history: the new primary and the standby left agree on a new id
    old_id = m_primary["master_replid"]
    march_cluster.kill(primary)
    new = march_cluster.wait_primary(timeout=20, exclude=[primary])
    other: ClusterNode = next(n for n in standbys if n is not new)
    wait_for(
        lambda: (
            replication(other.port).get("master_port") == str(new.port)
            and replication(other.port).get("master_link_status") == "up"
        ),
        "the standby following the new primary",
    )
    after = replication(new.port)
    assert after["role"] == "master" and after["master_replid"] != old_id
    assert replication(other.port)["master_replid"] == after["master_replid"]
