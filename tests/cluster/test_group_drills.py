"""The fault drills with leadership groups (issue 17): the short form of `scripts/drill --groups 4`.

Three march nodes, four groups (so one node leads two), one repetition of each drill on a
shared cluster: `kill -9` of the node leading two groups, `SIGSTOP` of it, a planned rebalance
under load (a fourth node joins and takes its share by hand-overs, then leaves), and the loss
of the raft leader of a three-member etcd. Asserted, per group: 0 duplicates and 0 real-time
order violations; the faulted node's groups resume (within TTL + 1 s, with MARCH_DRILL_SLACK);
every other group served requests while those were down (an ordering, never a speed); no client
error while a node joins. The other groups' longest gap between IDs is printed next to its 50 ms
bar, never asserted (scripts/drill judges it).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from march_harness.drills import DRILLS, DrillEnv, DrillResult, env_float

GROUPS = 4
TTL = 2  # seconds of lease: the shortest march accepts
SLACK = env_float("MARCH_DRILL_SLACK", 2.0)

pytestmark = [pytest.mark.e2e, pytest.mark.fault, pytest.mark.timeout(300)]


def run(env: DrillEnv, drill: str) -> DrillResult:
    result = DRILLS[drill](env, 0)
    print(result.summary())
    assert len(result.figures.groups) == GROUPS, "the figures are not per group"
    result.assert_ok(SLACK)
    return result


def test_group_drills(cluster_env: Callable[..., DrillEnv]) -> None:
    env = cluster_env(groups=GROUPS, lease_ttl=TTL)
    killed = run(env, "kill")
    assert sum(g.affected for g in killed.figures.groups) == 2, "the killed node did not lead two groups"
    run(env, "pause")
    run(env, "rebalance")


def test_group_drill_etcd_member_loss(cluster_env: Callable[..., DrillEnv]) -> None:
    run(cluster_env(groups=GROUPS, lease_ttl=TTL, etcd_members=3), "etcd-leader")
