"""Two nodes racing for one identity, in a loop, on a real etcd (issue 20, "Beyond these five"):
the short versions of scripts/drill's ``race-node-id`` and ``race-failover`` (100 rounds each
there; ``MARCH_RACE_ROUNDS`` here, default 10 and 5). The races and their invariants are in
``march_harness.races``; the FAILOVER race runs under INCR load and the history checker.

- ``race-node-id``: two contenders with one node id bootstrap a fresh prefix at the same moment:
  one cluster id everywhere, exactly one holds the id, the leader key is under its lease.
- ``race-failover``: two FAILOVERs sent to the primary at once (one to each standby), and the
  winner handed straight back: one OK and one refusal, the hand-back OK, no hand-off key left, no
  duplicate or order violation in the load's history.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from march_harness.drills import DRILLS, DrillEnv
from march_harness.etcd import EtcdCluster
from march_harness.races import race_node_id

pytestmark = pytest.mark.e2e

ROUNDS = int(os.environ.get("MARCH_RACE_ROUNDS", "0"))


def test_two_nodes_with_one_node_id_race_to_bootstrap_register_and_campaign(etcd: EtcdCluster) -> None:
    result = race_node_id(etcd.endpoints, ROUNDS or 10)
    assert result.violations == [], result.violations[:10]
    assert result.rounds == (ROUNDS or 10)


@pytest.mark.timeout(240)
def test_two_failovers_at_once_and_a_hand_back(cluster_env: Callable[..., DrillEnv]) -> None:
    env = cluster_env(rounds=ROUNDS or 5, lease_ttl=2)
    result = DRILLS["race-failover"](env, 0)
    print(result.summary())
    assert result.violations == [], result.summary()
