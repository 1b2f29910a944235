"""The history checker must catch what the drills rely on it to catch (and nothing else):
hand-made histories, then random ones against a brute-force O(n^2) definition."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import History, Op, check_history


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
