"""The fault drills' verdicts fail on planted violations, without a cluster: the suite runs the
drills short (two repetitions, an 18 s flap, a 16 s soak, 20 kills), so what a shorter run
still proves rests on these judges catching what they exist to catch. Hand-made histories and
results go through the same functions the drills call: `DrillResult.finish` / `assert_ok`
(duplicates, order, a missed timing bar, a recovery that timed out), the partition drills'
`_ids_after_deadline` and `_gap_bars`, and the soak's `figures`. (The crash drill's
`check_history` has its own: tests/harness/test_history_checker.py.)"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from march_harness import History, wait_until
from march_harness.drills import Bar, DrillResult, _gap_bars, _ids_after_deadline
from march_harness.load import figures

MS = 1_000_000  # ns
TTL = 2.0
SLACK = 2.0


def _node(address: str = "old:1", node_id: str = "n1") -> Any:
    return cast(Any, SimpleNamespace(address=address, node_id=node_id))


def _steady(h: History, client: str, start_ms: int, end_ms: int, first_id: int, node: str, step_ms: int = 20) -> int:
    """One ID every ``step_ms`` from ``start_ms`` to ``end_ms``; the next ID."""
    i = first_id
    for t in range(start_ms, end_ms, step_ms):
        h.record(client, t * MS, t * MS + 1, i, node)
        i += 1
    return i


def _clean() -> DrillResult:
    """A drill that went well: the old primary until 500 ms, the fault at 500 ms, the new primary
    from 1.5 s, one ID every 20 ms."""
    r = DrillResult("planted")
    h = r.histories["k"] = History()
    nxt = _steady(h, "c", 0, 500, 1, "old:1")
    _steady(h, "c", 1500, 3000, nxt + 1000, "new:2")
    return r


def test_a_clean_result_passes() -> None:
    r = _clean()
    r.finish(500 * MS, "old:1")
    r.bars.append(Bar("first INCR on the new primary after the kill", r.figures.failover, TTL + 1.0))
    _gap_bars(r, TTL, [0])
    _ids_after_deadline(r, _node(), 500 * MS, TTL, None)
    r.assert_ok(SLACK)


def test_a_duplicate_id_fails_the_drill() -> None:
    r = _clean()
    r.histories["k"].record("d", 3100 * MS, 3101 * MS, 5, "new:2")  # 5 was the old primary's
    r.finish(500 * MS, "old:1")
    with pytest.raises(AssertionError, match="1 duplicates"):
        r.assert_ok(SLACK)


def test_an_id_going_back_after_another_clients_reply_fails_the_drill() -> None:
    r = _clean()
    r.histories["k"].record("d", 3100 * MS, 3101 * MS, 20, "new:2")  # below IDs replied before it was sent
    r.finish(500 * MS, "old:1")
    with pytest.raises(AssertionError, match="order violations"):
        r.assert_ok(SLACK)


def test_a_timing_bar_missed_by_more_than_the_slack_fails_and_only_then() -> None:
    r = _clean()
    r.finish(500 * MS, "old:1")
    r.bars.append(Bar("within the slack", TTL + 1.0 + SLACK - 0.1, TTL + 1.0))
    r.bars.append(Bar("reported only", 100.0, TTL + 1.0, asserted=False))
    r.assert_ok(SLACK)
    r.bars.append(Bar("first INCR on the new primary after the kill", TTL + 1.0 + SLACK + 0.1, TTL + 1.0))
    with pytest.raises(AssertionError, match="timing bars missed"):
        r.assert_ok(SLACK)
    r.bars[-1] = Bar("never served", None, TTL + 1.0)
    with pytest.raises(AssertionError, match="never served"):
        r.assert_ok(SLACK)


def test_a_recovery_that_timed_out_is_a_violation_not_a_lost_history() -> None:
    r = _clean()
    with r.stage():
        wait_until(lambda: False, timeout=0.05, message="a new primary")
    r.finish(500 * MS, "old:1")
    assert not r.recovered and r.figures.ops > 0
    with pytest.raises(AssertionError, match="did not recover"):
        r.assert_ok(SLACK)


def test_an_id_from_a_node_cut_off_for_more_than_a_ttl_fails_the_partition_drills() -> None:
    cut_at = 500 * MS
    sent = cut_at + int((TTL + 0.1) * 1e9)

    def late() -> DrillResult:  # another key, so that only the cut-off node's answer is wrong
        r = _clean()
        r.histories["other"] = History()
        r.histories["other"].record("late", sent, sent + 1_000, 1, "old:1")
        r.finish(cut_at, "old:1")
        return r

    r = late()
    r.assert_ok(SLACK)  # the history itself is clean
    _ids_after_deadline(r, _node(), cut_at, TTL, None)
    with pytest.raises(AssertionError, match="handed out 1 IDs for requests sent more than a TTL after the cut"):
        r.assert_ok(SLACK)
    # The same ID for a request sent once the node may lead again (``until``) is no violation.
    r = late()
    _ids_after_deadline(r, _node(), cut_at, TTL, cut_at + int(TTL * 1e9))
    r.assert_ok(SLACK)


def test_a_group_silent_for_longer_than_its_bar_fails_the_flapping_drill() -> None:
    r = DrillResult("flap")
    h = r.histories["k"] = History()
    nxt = _steady(h, "c", 0, 1000, 1, "n1:1")
    _steady(h, "c", int(1000 + (TTL + 1.0 + SLACK + 0.5) * 1000), 9000, nxt, "n2:2")  # one gap past the bar
    r.finish(500 * MS, None)
    _gap_bars(r, TTL, [0])
    assert r.bars and r.bars[0].name.endswith("longest gap between IDs") and not r.bars[0].met
    with pytest.raises(AssertionError, match="longest gap between IDs"):
        r.assert_ok(SLACK)


def test_the_soaks_figures_count_what_its_assertions_read() -> None:
    """run_soak's duplicates and order violations are `figures` of its well-behaved histories."""
    h = History()
    h.record("a", 0, 10 * MS, 7, "n1:1")
    h.record("b", 20 * MS, 30 * MS, 7, "n2:2")  # a duplicate, sent after the first one's reply
    f = figures({"soak:a": h}, fault_at=15 * MS, old_primary="n1:1")
    assert (f.duplicates, f.order_violations) != (0, 0) and f.problems
