"""The reports of scripts/bench and scripts/drill: the tables they print and the PNGs they draw.

Each script runs once with its shortest settings in a subprocess (the same Python, so no venv
setup runs in a test); nothing here looks at a figure's value, only that the report is there.
The drill chart is also drawn from a hand-made history, to check the time series under it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from march_harness.bench import goals
from march_harness.bench.charts import drill_png
from march_harness.bench.measured import NOT_JUDGED
from march_harness.history import History
from march_harness.invoke import STOP_GRACE, run_script
from march_harness.load import time_series

pytestmark = pytest.mark.e2e

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE), path
    assert len(data) > 10_000, f"{path}: only {len(data)} bytes"


@pytest.mark.timeout(150 + STOP_GRACE + 20)  # the run (about 60 s on 2 cores), its stop, the fixtures
def test_bench_quick_prints_every_goal_row_and_draws_the_png(tmp_path: Path, redis_binary: str, etcd_bin: str) -> None:
    """The one method (a warm-up discarded, rounds, medians and spread, load average at both ends)
    and every row of issue 27's table, in one --quick run; no figure's value is looked at."""
    png = tmp_path / "bench.png"
    # The cluster target (six more nodes) runs on its own in tests/harness/test_bench_library.py;
    # the timestamp keys (INCR, INCRBY) are left out of --quick: the lead cap has tests of its own.
    out = run_script(["scripts/bench.py", "--quick", "--no-cluster", "--png", str(png)], timeout=150)
    for expected in (
        "after 1 warm-up run(s) discarded, the order alternating",
        "INCR -c 50 -P 1: median of 1 rounds, after 1 warm-up run(s) discarded",
        "rps min-max   p99 min-max   ratio min-max",
        "march/redis throughput ratio:",
        "march etcd/redis throughput ratio:",
        "march/python baseline throughput ratio:",
        "== tail latency, -c 1000 -P 1",
        "march/redis latency ratio at -c 1000: p50",
        "== sequence creation, -c 32 -P 1",
        "existing sequences -c 32 -P 1: median of 1 rounds",
        "march sqlite: new sequences/s / INCR/s on existing names: ",
        "== flood: 50 INCR on new names",
        "march sqlite: new-key INCR p99 under the flood ",
        "== metrics on vs off",
        "on vs off",
        "python client, prefetch",
        "bare function",
        "memory per sequence (10,000 sequences, march sqlite): created_bytes_per_seq",
        "1,000,000 sequences: not measured (--quick)",
        "== summary",
        "== goals (issue 27)",
        "at the start: 2 CPUs, load average" if os.cpu_count() == 2 else "at the start: ",
        f"chart: {png}",
    ):
        assert expected in out, f"{expected!r} missing from:\n{out}"
    summary = out.split("== summary", 1)[1]
    for server in ("redis-server", "march sqlite", "march etcd", "python baseline"):
        assert server in summary, summary
    goal_rows = out.split("== goals (issue 27)", 1)[1].split("\n\n", 1)[0]
    for g in goals.GOALS:  # every row of the table, judged (not: a quick run) or said to be not measured
        row = next((line for line in goal_rows.splitlines() if line.startswith(g.row)), None)
        assert row is not None, f"{g.row!r} missing from:\n{goal_rows}"
        wanted = "not measured" if g.key.startswith("million.") else NOT_JUDGED
        assert wanted in row, row
    assert "NOT met" not in goal_rows and " met" not in goal_rows.replace("not measured", "")
    assert_png(png)
    assert_png(png.with_name("bench-memory.png"))


@pytest.mark.timeout(100 + STOP_GRACE + 20)
def test_drill_writes_a_png_per_repetition(tmp_path: Path, etcd_bin: str) -> None:
    out_dir = tmp_path / "report"
    args = [
        "scripts/drill.py",
        "failover",
        "--reps",
        "1",
        "--ops",
        "100",
        "--quiet",
        "--bars-advisory",
        "--out-dir",
        str(out_dir),
    ]
    out = run_script(args, timeout=100)
    png = out_dir / "failover-0.png"
    assert f"chart: {png}" in out, out
    assert_png(png)


def test_drill_chart_from_a_made_up_history(tmp_path: Path) -> None:
    ms = 1_000_000
    h = History()
    t0 = History.now()
    # 2 s of load: one ID per ms, none from 0.8 s to 1.3 s (the "failover"), errors meanwhile.
    for i in range(2000):
        sent = t0 + i * ms
        if 800 <= i < 1300:
            if i % 50 == 0:
                h.record_error("c", sent, sent + 20 * ms, "ConnectionError: refused")
            continue
        h.record("c", sent, sent + (5 if i % 100 else 40) * ms // 10, i + 1)
    events = [(t0 + 800 * ms, "kill -9 n1"), (t0 + 1300 * ms, "first ID from another node")]
    assert time_series({"k": h}, events).width == 0.02  # 2 s: finer buckets, at least 50 of them
    series = time_series({"k": h}, events, width=0.1)
    assert len(series.buckets) == 20  # the last reply at 1.9995 s, in 100 ms buckets
    assert series.buckets[0].ok == 100 and series.buckets[10].ok == 0 and series.buckets[10].errors == 2
    assert [round(m.at, 3) for m in series.events] == [0.8, 1.3]
    assert series.buckets[0].max == pytest.approx(0.004)
    png = drill_png(series, tmp_path / "made-up.png", "made-up drill")
    assert_png(png)
