"""How primaries spread over nodes: pure rules the election of each group follows.

With N groups and M live nodes (every node a member of every group):

- **Campaigning.** A node campaigns for a leaderless group only while it holds fewer than its fair
  share, ``ceil(N/M)`` (``may_campaign``), and after a delay that grows with what it holds
  (``campaign_delay``): when a node dies, the nodes with the fewest primaries take its groups
  first, each campaign evaluated again with what the node holds then. A group left without a
  leader for a whole TTL is campaigned for by anyone (``may_campaign(..., leaderless_for, ttl)``):
  no group stays down because a node's count of live nodes is stale (a dead node's record lives
  until its lease ends) or because the others are all at their share.
- **Handing over.** Once every group has a live leader, the node with the most primaries hands one
  group (a planned FAILOVER: no client error) to the node with the fewest, if it holds at least two
  more (``next_handover``). Every node computes the same answer from the same topology, so at most
  one hand-over is planned at a time. Each one lowers the sum of the squares of the counts by at
  least 2, so it ends, and it ends with every node at ``floor(N/M)`` or ``ceil(N/M)``: a node that
  joins takes its share one hand-over at a time, and once balanced nothing moves (no flapping).
  "Only a node above ceil gives" would be too weak: N = 4 on (2, 2) plus a third node stays (2, 2, 0).

The caller (the election) waits for each hand-over to end (the target leads, or the FAILOVER
failed) and leaves at least a TTL between two attempts, so a target that cannot take over is not
asked again at once. Nothing here reads etcd, the clock or any state: same inputs, same answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# A node waits this fraction of the lease TTL per primary it holds before campaigning for a
# leaderless group: 0.1 s per primary at the default TTL of 3 s, far more than an etcd round trip,
# so the least loaded node wins the race.
DELAY_PER_HELD = 1 / 30
# ...and at most this fraction of the TTL: a dead node's groups must resume within TTL + 1 s.
MAX_DELAY = 1 / 6


def fair_share(n_groups: int, live_nodes: int) -> int:
    """The most primaries a node should hold: ``ceil(N/M)`` (all N with no live node counted)."""
    return -(-n_groups // live_nodes) if live_nodes > 0 else n_groups


def may_campaign(
    held: int, n_groups: int, live_nodes: int, leaderless_for: float = 0.0, ttl: float | None = None
) -> bool:
    """Whether a node holding ``held`` primaries campaigns for a group that has had no leader for
    ``leaderless_for`` seconds: below its fair share, or by anyone once that lasted a TTL."""
    return held < fair_share(n_groups, live_nodes) or (ttl is not None and leaderless_for >= ttl)


def campaign_delay(held: int, ttl: float) -> float:
    """Seconds a node holding ``held`` primaries waits before campaigning for a leaderless group."""
    return min(max(held, 0) * DELAY_PER_HELD, MAX_DELAY) * ttl


def next_handover(leaders: Mapping[int, str | None], live: Sequence[str], me: str) -> tuple[int, str] | None:
    """The group ``me`` should hand over now, and to whom; None when ``me`` has nothing to give.

    ``leaders``: group -> the node holding its leader key (None: no leader); ``live``: the nodes
    registered now. Nothing moves while a group has no leader or a leader that is not live (the
    campaign settles those first). The giver is the live node with the most primaries (ties: the
    first in ``live`` order, sorted), the receiver the one with the fewest (ties: likewise); only the
    giver gets an answer, and only if it holds two more than the receiver. It gives its highest group."""
    nodes = sorted(set(live))
    if me not in nodes:
        return None
    held = dict.fromkeys(nodes, 0)
    for leader in leaders.values():
        if leader is None or leader not in held:
            return None
        held[leader] += 1
    giver = min(nodes, key=lambda n: -held[n])  # min and max keep the first of equals: sorted order
    receiver = min(nodes, key=lambda n: held[n])
    if giver != me or held[giver] - held[receiver] < 2:
        return None
    return max(g for g, leader in leaders.items() if leader == me), receiver
