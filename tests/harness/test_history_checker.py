"""The history checker must catch what the drills rely on it to catch (and nothing else):
hand-made histories, then random ones against a brute-force O(n^2) definition."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from march_harness import History, Op, check_history
from march_harness.drills import DrillResult, _other_groups
from march_harness.history import analyze_groups, group_of_key, group_of_slot, group_slots
from march_harness.load import KEYS, TIMESTAMP_KEY, figures, group_keys

from march.cluster.slots import key_slot


def op(client: str, sent: int, replied: int, id_: int) -> Op:
    return Op(client, sent, replied, id_)


def test_sequential_history_passes() -> None:
    h = History()
    for i in range(1, 100):
        h.record(f"c{i % 3}", i * 10, i * 10 + 5, i)
    stats = check_history(h)
    assert stats == {"ops": 99, "clients": 3, "min_id": 1, "max_id": 99}


def test_empty_history_passes() -> None:
    assert check_history([])["ops"] == 0


def test_overlapping_requests_may_come_back_in_any_order() -> None:
    # b was sent before a's reply arrived: concurrent, so a > b is allowed.
    check_history([op("a", 0, 100, 7), op("b", 50, 60, 3)])


def test_reply_at_the_same_instant_as_a_send_is_concurrent() -> None:
    check_history([op("a", 0, 100, 7), op("b", 100, 150, 3)])


def test_duplicate_is_caught() -> None:
    with pytest.raises(AssertionError, match="1 duplicates"):
        check_history([op("a", 0, 10, 5), op("b", 0, 10, 5)])


def test_duplicate_across_time_is_caught() -> None:
    with pytest.raises(AssertionError, match="duplicate ID 5"):
        check_history([op("a", 0, 10, 5), op("b", 20, 30, 5)])


def test_per_client_decrease_is_caught() -> None:
    with pytest.raises(AssertionError, match="client a went back: 9 then 4"):
        check_history([op("a", 0, 10, 9), op("a", 20, 30, 4)])


def test_real_time_violation_across_clients_is_caught() -> None:
    # a's reply (ID 10) arrived at t=10, b was sent at t=20 and got 8: a restarted server went back.
    with pytest.raises(AssertionError, match=r"real-time order broken: ID 10 .* before ID 8"):
        check_history([op("a", 0, 10, 10), op("b", 20, 30, 8), op("c", 0, 5, 1)])


def test_violation_hidden_behind_a_larger_earlier_reply_is_caught() -> None:
    ops = [op("a", 0, 1, 100), op("b", 2, 3, 50), op("c", 4, 5, 101)]
    with pytest.raises(AssertionError, match="1 real-time order violations"):
        check_history(ops)


def brute_force_ok(ops: list[Op]) -> bool:
    ids = [o.id for o in ops]
    if len(set(ids)) != len(ids):
        return False
    return all(not (a.replied < b.sent and a.id >= b.id) for a in ops for b in ops)


@st.composite
def histories(draw: st.DrawFn) -> list[Op]:
    n = draw(st.integers(0, 25))
    ops = []
    for i in range(n):
        sent = draw(st.integers(0, 50))
        replied = sent + draw(st.integers(0, 20))
        ops.append(op(f"c{i}", sent, replied, draw(st.integers(0, 40))))
    return ops


@settings(max_examples=400, deadline=None)
@given(histories())
def test_checker_agrees_with_the_definition(ops: list[Op]) -> None:
    # One op per client here, so the per-client rule cannot fire on its own.
    expected_ok = brute_force_ok(ops)
    try:
        check_history(ops)
        ok = True
    except AssertionError:
        ok = False
    assert ok == expected_ok


# -- per group (issue 17) --------------------------------------------------------------------------


def test_group_ranges_match_the_shared_layout() -> None:
    for n in (1, 3, 4, 7, 256):
        starts = [group_slots(g, n)[0] for g in range(n)]
        assert starts == [g * 16384 // n for g in range(n)]
        assert group_slots(n - 1, n)[1] == 16383
        for g in range(n):
            first, last = group_slots(g, n)
            assert group_of_slot(first, n) == g and group_of_slot(last, n) == g


def test_load_keys_fall_in_their_groups() -> None:
    assert group_keys(1) == [list(KEYS)]
    sets = group_keys(4)
    assert [group_of_key(k, 4) for k in sets[0]] == [0] * len(sets[0])
    for g, ks in enumerate(sets):
        assert ks and {group_of_key(k, 4) for k in ks} == {g}
        assert key_slot(ks[0].encode()) in range(g * 4096, (g + 1) * 4096)
    assert sum(TIMESTAMP_KEY in ks for ks in sets) == 1


def test_violations_are_reported_in_the_group_of_their_key() -> None:
    a, b = group_keys(4)[1][0], group_keys(4)[3][0]
    h = {a: History(), b: History()}
    h[a].record("c", 0, 10, 5)
    h[a].record("d", 20, 30, 5)  # a duplicate in group 1
    h[b].record("c", 0, 10, 9)
    h[b].record("c", 20, 30, 4)  # a client going back in group 3
    by_group = analyze_groups(h, 4)
    assert [by_group[g].duplicates for g in range(4)] == [0, 1, 0, 0]
    assert [by_group[g].decreases for g in range(4)] == [0, 0, 0, 1]
    assert by_group[1].problems[0].startswith(f"{a}: duplicate ID 5")
    per_group = [(g.duplicates, g.order_violations) for g in figures(h, groups=4).groups]
    assert per_group == [(0, 0), (1, 1), (0, 0), (0, 2)]  # a repeat after its reply breaks order too


def test_other_groups_must_serve_while_the_faulted_ones_are_down() -> None:
    env = SimpleNamespace(groups=2, key_sets=group_keys(2))
    down, up = env.key_sets[0][0], env.key_sets[1][0]
    ms = 1_000_000
    r = DrillResult("t")
    r.histories = {down: History(), up: History()}
    r.histories[down].record("c", 0, 1 * ms, 1, "old")
    r.histories[down].record("c", 10 * ms, 2000 * ms, 2, "new")  # group 0 back 2 s after the fault at 5 ms
    r.histories[up].record("p", 0, 2 * ms, 1, "x")
    r.histories[up].record("p", 2100 * ms, 2101 * ms, 2, "x")  # group 1 silent for as long: a violation
    r.finish(5 * ms, "old", 2, [0])
    _other_groups(env, r, 5 * ms, [0])  # type: ignore[arg-type]
    assert any("group 1 (not led by the faulty node) got no ID" in v for v in r.violations), r.violations
    gap = next(b for b in r.bars if b.name.startswith("group 1"))
    assert not gap.met and not gap.asserted
    r.histories[up] = History()  # now it serves all along
    for i, t in enumerate(range(0, 2200, 20)):
        r.histories[up].record("p", t * ms, t * ms + 1, i + 1, "x")
    r.violations, r.bars = [], []
    r.finish(5 * ms, "old", 2, [0])
    _other_groups(env, r, 5 * ms, [0])  # type: ignore[arg-type]
    assert r.violations == [] and [b.met for b in r.bars] == [True]
