"""``march.cluster.balance``: the spreading rules, checked exhaustively over small N and M.

For every assignment of N <= 6 groups to M <= 4 live nodes (and every partial one with a leaderless
or dead leader), every node asks ``next_handover``: at most one gets an answer, it is a hand-over
from the most to the least loaded node, applying answers until none comes ends (no flapping)
within a bound, and ends with every node at floor(N/M) or ceil(N/M).
"""

from __future__ import annotations

import itertools
import math

import pytest

from march.cluster.balance import MAX_DELAY, campaign_delay, fair_share, may_campaign, next_handover


def test_fair_share() -> None:
    assert [fair_share(4, m) for m in (1, 2, 3, 4, 5)] == [4, 2, 2, 1, 1]
    assert fair_share(16, 3) == 6 and fair_share(1, 3) == 1 and fair_share(4, 0) == 4


def test_may_campaign() -> None:
    assert may_campaign(0, 4, 3) and may_campaign(1, 4, 3) and not may_campaign(2, 4, 3)
    assert not may_campaign(2, 4, 3, leaderless_for=2.9, ttl=3.0)
    assert may_campaign(2, 4, 3, leaderless_for=3.0, ttl=3.0)  # no group stays without a leader
    for n, m in itertools.product(range(1, 17), range(1, 6)):  # together the nodes can take every group
        assert m * fair_share(n, m) >= n


def test_campaign_delay() -> None:
    delays = [campaign_delay(h, 3.0) for h in range(10)]
    assert delays[0] == 0 and delays == sorted(delays) and delays[1] > 0
    assert max(delays) == pytest.approx(MAX_DELAY * 3.0) and MAX_DELAY * 3.0 < 1.0


def _answers(leaders: dict[int, str | None], live: list[str]) -> list[tuple[str, tuple[int, str]]]:
    return [(me, a) for me in live if (a := next_handover(leaders, live, me)) is not None]


def _held(leaders: dict[int, str | None], live: list[str]) -> dict[str, int]:
    return {n: sum(1 for v in leaders.values() if v == n) for n in live}


@pytest.mark.parametrize("m", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_every_assignment_balances_without_flapping(n: int, m: int) -> None:
    live = [f"n{i}" for i in range(m)]
    for owners in itertools.product(live, repeat=n):
        leaders: dict[int, str | None] = dict(enumerate(owners))
        steps = 0
        while answers := _answers(leaders, live):
            assert len(answers) == 1  # one planned hand-over at a time
            (giver, (group, target)), held = answers[0], _held(leaders, live)
            assert leaders[group] == giver and target != giver
            assert held[giver] == max(held.values()) and held[target] == min(held.values())
            assert held[giver] - held[target] >= 2
            leaders[group] = target
            steps += 1
            assert steps <= n * n  # the sum of squares falls by >= 2 each time
        held = _held(leaders, live)
        assert set(held.values()) <= {n // m, math.ceil(n / m)}, (owners, held)
        assert max(held.values()) <= fair_share(n, m)


def test_a_joining_node_takes_its_share_one_at_a_time() -> None:
    leaders: dict[int, str | None] = {0: "a", 1: "a", 2: "b", 3: "b"}
    assert _answers(leaders, ["a", "b"]) == []
    assert _answers(leaders, ["a", "b", "c"]) == [("a", (1, "c"))]  # (2, 2, 0) is not balanced
    leaders[1] = "c"
    assert _answers(leaders, ["a", "b", "c"]) == []  # (1, 2, 1)
    sixteen: dict[int, str | None] = {g: ("a" if g < 8 else "b") for g in range(16)}
    moves = 0
    while answers := _answers(sixteen, ["a", "b", "c"]):
        ((_, (group, target)),) = answers
        sixteen[group] = target
        moves += 1
    assert moves == 5 and sorted(_held(sixteen, ["a", "b", "c"]).values()) == [5, 5, 6]


def test_nothing_moves_until_every_group_has_a_live_leader() -> None:
    live = ["a", "b", "c"]
    for n in range(1, 6):
        for owners in itertools.product([*live, None, "gone"], repeat=n):
            if all(o in live for o in owners):
                continue
            assert _answers(dict(enumerate(owners)), live) == []
    assert next_handover({0: "a", 1: "a"}, ["b"], "a") is None  # a node not live gives nothing


def test_live_order_does_not_matter() -> None:
    leaders: dict[int, str | None] = {0: "b", 1: "b", 2: "b", 3: "a"}
    for live in itertools.permutations(["a", "b", "c"]):
        assert _answers(leaders, list(live)) == [("b", (2, "c"))]
