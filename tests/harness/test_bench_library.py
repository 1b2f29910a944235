"""The pure parts of scripts/bench: redis-benchmark's output parsed, its command line, the ratios
and the figures the READMEs quote; fast, no server, no load. One test runs the cluster target for
real (a local etcd and two 3-node clusters, a second of load each way) and checks that its report
has every field; nothing here measures or asserts a speed (the whole bench runs in
tests/scripts/test_bench_and_drill_reports.py)."""

from __future__ import annotations

import json
import os
import resource
from pathlib import Path

import pytest
from march_harness import REPO_ROOT as ROOT
from march_harness.bench import clusterload, goals, readme, redisbench
from march_harness.bench.clusterload import SlotRange
from march_harness.bench.measured import (
    EXISTING_SEQUENCES,
    FLOOD,
    NEW_SEQUENCES,
    NOT_JUDGED,
    ClusterReport,
    ClusterRow,
    Measured,
    Setting,
    figures_with_spread,
    last_json,
    load_warning,
    million_figures,
    nofile_needed,
    raise_nofile,
    readme_figures,
    verdict,
)
from march_harness.bench.redisbench import INCR, Auth, BenchmarkFailed, Run
from march_harness.invoke import run_script

pytestmark = pytest.mark.e2e

# redis-benchmark 7.0.15's plain output for `-c 2 -n 200 --precision 3 -t incr` (progress line
# ending in \r first), with the cumulative block's 100% line changed so that reading p99.9 from it
# (the wrong block) would give 9.999 instead of 0.343.
OUTPUT = (
    " \rINCR: rps=0.0 (overall: inf) avg_msec=0.043 (overall: 0.043)\r     \r====== INCR ======\n"
    "  200 requests completed in 0.00 seconds\n  2 parallel clients\n  3 bytes payload\n  keep alive: 1\n"
    '  host configuration "save": \n  host configuration "appendonly": no\n  multi-thread: no\n\n'
    "Latency by percentile distribution:\n"
    "0.000% <= 0.023 milliseconds (cumulative count 42)\n"
    "50.000% <= 0.039 milliseconds (cumulative count 112)\n"
    "99.219% <= 0.327 milliseconds (cumulative count 199)\n"
    "99.609% <= 0.335 milliseconds (cumulative count 199)\n"
    "99.951% <= 0.343 milliseconds (cumulative count 200)\n"
    "100.000% <= 0.343 milliseconds (cumulative count 200)\n\n"
    "Cumulative distribution of latencies:\n"
    "99.000% <= 0.103 milliseconds (cumulative count 198)\n"
    "100.000% <= 9.999 milliseconds (cumulative count 200)\n\n"
    "Summary:\n  throughput summary: 40000.00 requests per second\n  latency summary (msec):\n"
    "          avg       min       p50       p95       p99       max\n"
    "        0.039     0.016     0.039     0.063     0.087     0.343\n"
)


def test_parse_reads_the_summary_and_p999_from_the_percentile_block() -> None:
    run = redisbench.parse(OUTPUT)
    assert run == Run(rps=40000.0, p50=0.039, p99=0.087, p999=0.343, max=0.343)


def test_parse_without_a_summary_fails_with_the_output() -> None:
    with pytest.raises(BenchmarkFailed, match="no summary"):
        redisbench.parse(OUTPUT.split("Summary:")[0])


def test_parse_p999_falls_back_to_max_without_a_percentile_block() -> None:
    head, cumulative = OUTPUT.split("Latency by percentile distribution:")[0], OUTPUT.split("Cumulative")[1]
    text = head + "Cumulative" + cumulative
    assert redisbench.parse(text).p999 == 0.343  # the summary's max, not the cumulative block's 9.999


def test_command_line_authenticates_and_draws_random_keys() -> None:
    cmd = redisbench.command_line(7000, 32, 1, 64, ("INCR", "seq:__rand_int__"), Auth("bench", "pw"), 10**9)
    assert cmd[:5] == ["redis-benchmark", "-h", "127.0.0.1", "-p", "7000"]
    assert cmd[-9:] == ["-n", "64", "--user", "bench", "-a", "pw", "-r", str(10**9), "INCR", "seq:__rand_int__"][-9:]
    assert "-t" not in cmd
    plain = redisbench.command_line(7000, 50, 16, 800, INCR)
    assert plain[-2:] == ["-t", "incr"] and "--user" not in plain and "-r" not in plain


def test_command_line_refuses_a_keyspace_redis_benchmark_would_wrap() -> None:
    with pytest.raises(ValueError, match="-r 1000000000000"):
        redisbench.command_line(7000, 32, 1, 64, ("INCR", "k:__rand_int__"), None, 10**12)


@pytest.mark.parametrize(
    ("rps", "seconds", "clients", "pipeline", "expected"),
    [
        (100_000, 2.0, 50, 1, 200_000),
        (10, 1.0, 1, 1, 5_000),  # at least 5,000
        (1e9, 1.0, 1, 1, 50_000_000),  # at most 50 million
        (100_000, 1.0, 1000, 16, 112_000),  # a whole number of pipelines per client: 7 x 16,000
    ],
)
def test_requests_at(rps: float, seconds: float, clients: int, pipeline: int, expected: int) -> None:
    n = redisbench.requests_at(rps, seconds, clients, pipeline)
    assert n == expected and n % (clients * pipeline) == 0


def run(rps: float, p50: float = 1.0, p99: float = 2.0, p999: float = 3.0) -> Run:
    return Run(rps=rps, p50=p50, p99=p99, p999=p999, max=p999)


def measured(title: str, clients: int, pipeline: int, runs: dict[str, list[Run]]) -> Measured:
    setting = Setting(title, clients, pipeline, dict.fromkeys(runs, INCR))
    return Measured(setting, dict.fromkeys(runs, 1000), runs)


def test_median_is_taken_figure_by_figure_and_ratios_divide_medians() -> None:
    m = measured(
        "INCR",
        50,
        16,
        {
            "redis": [run(100, p99=10), run(300, p99=30), run(200, p99=20)],
            "sqlite": [run(50, p99=60), run(150, p99=15), run(100, p99=45)],
        },
    )
    assert m.median("sqlite") == run(100, p99=45)
    assert m.ratio("sqlite") == 0.5
    assert m.ratio("redis") == 1.0
    assert m.ratio("sqlite", "baseline") is None  # not measured: no ratio, never a made-up one
    assert m.latency_ratio("sqlite", "redis", "p99") == 2.25
    assert m.latency_ratio("sqlite", "baseline") is None
    assert m.setting.label == "INCR -c 50 -P 16"


def test_readme_figures_picks_each_key_from_its_setting() -> None:
    results = [
        measured("INCR", 50, 1, {"redis": [run(100)], "sqlite": [run(95)]}),
        measured("INCR", 50, 16, {"redis": [run(1000)], "sqlite": [run(600)], "baseline": [run(800)]}),
        measured("INCR", 1000, 1, {"redis": [run(10, p99=12.0)], "sqlite": [run(9, p99=30.0)]}),
        measured("INCRBY ts 1000", 50, 1, {"redis": [run(100)], "sqlite": [run(6000)]}),
        measured("INCRBY ts 1000", 50, 16, {"redis": [run(100)], "sqlite": [run(7000)]}),
        measured(EXISTING_SEQUENCES, 32, 1, {"redis": [run(50_000)], "sqlite": [run(44_000)]}),
        measured(NEW_SEQUENCES, 32, 1, {"redis": [run(50_000)], "sqlite": [run(4_400)]}),
        measured(FLOOD, 1, 1, {"redis": [run(900, p99=3.0)], "sqlite": [run(300, p99=157.0)]}),
        measured("INCR", 200, 16, {"redis": [run(1)], "sqlite": [run(1)]}),
    ]
    memory = {"created_bytes_per_seq": 645.0, "touched_bytes_per_seq": 805.0, "sequences": 100_000.0}
    figures = readme_figures(results, {"next": 7e6, "ids": 14e6, "bare": 8e6}, memory, 1000)
    assert figures == {
        "prefetch.next": 7e6,
        "prefetch.ids": 14e6,
        "prefetch.bare": 8e6,
        "memory.created": 645.0,
        "memory.touched": 805.0,
        "incr.c50.p1.ratio": 0.95,
        "incr.c50.p16.ratio": 0.6,
        "incr.c50.p16.baseline_ratio": 0.75,
        "tail.c1000.p99.ratio": 2.5,
        "tail.c1000.p99.ms": 30.0,
        "incrby.ts.c50.p1.ids": 6_000_000,
        "create.c32.rate": 4_400,
        "create.ratio": 0.1,
        "flood.p99.ms": 157.0,
    }
    million = set(readme.MILLION_KEYS)  # measured by its own module (in KEYS once it is in the build)
    assert set(figures) == set(readme.KEYS) - million, "every key the READMEs may quote is measured"


def test_each_figure_has_the_spread_of_its_rounds() -> None:
    """A ratio's spread is the min-max of the rounds' own ratios (each pair ran back to back), not
    the ratio of the extremes; a rate's or a latency's the min-max of its rounds."""
    m = measured("INCR", 50, 16, {"redis": [run(100), run(300), run(200)], "sqlite": [run(50), run(240), run(90)]})
    assert m.spread("sqlite") == (50, 240) and m.spread("redis", "p99") == (2.0, 2.0)
    assert m.round_ratios("sqlite") == [0.5, 0.8, 0.45]
    assert m.round_ratios("sqlite", "baseline") == []
    tail = measured(
        "INCR", 1000, 1, {"redis": [run(9, p99=10), run(9, p99=20)], "sqlite": [run(9, p99=30), run(9, p99=30)]}
    )
    spread = figures_with_spread([m, tail], {}, {}, 1000)
    assert spread["incr.c50.p16.ratio"] == (0.9 / 2, (0.45, 0.8))  # median 90 / median 200
    assert spread["tail.c1000.p99.ratio"] == (30 / 15, (1.5, 3.0))
    assert spread["tail.c1000.p99.ms"] == (30, (30, 30))


def test_goals_judge_each_row_of_the_issue_and_never_a_quick_or_missing_figure() -> None:
    assert [g.key for g in goals.GOALS][:4] == [
        "tail.c1000.p99.ratio",
        "incr.c50.p16.baseline_ratio",
        "incr.c50.p16.ratio",
        "incr.c50.p1.ratio",
    ]
    known = readme.KEYS | readme.MILLION_KEYS
    assert all(g.key in known and g.beside in {"", *known} for g in goals.GOALS)  # markers the bench re-measures
    figures = {"tail.c1000.p99.ratio": 1.3, "tail.c1000.p99.ms": 40.0, "incr.c50.p1.ratio": 1.1}
    figures |= {"million.takeover.s": 3.9, "million.lease_ttl.s": 3.0, "flood.p99.ms": 50.0}
    verdicts = {g.key: g.verdict(figures, judged=True) for g in goals.GOALS}
    assert verdicts["tail.c1000.p99.ratio"] == "NOT met"  # 1.3 > 1.2
    assert verdicts["incr.c50.p1.ratio"] == "met"  # >= 1.1, the bound itself
    assert verdicts["flood.p99.ms"] == "NOT met"  # < 50: strictly
    assert verdicts["million.takeover.s"] == "met"  # 3.9 <= TTL 3 + 1
    assert verdicts["memory.created"] == "not measured"
    assert {g.verdict(figures, judged=False) for g in goals.GOALS if g.key in figures} == {NOT_JUDGED}
    takeover = next(g for g in goals.GOALS if g.key == "million.takeover.s")
    assert takeover.verdict({"million.takeover.s": 1.0}, judged=True) == "not measured"  # no TTL: no bound
    assert takeover.goal_text(figures) == "<= TTL + 1 s = 4 s"
    text = "\n".join(goals.lines(figures, {"tail.c1000.p99.ratio": (1.1, 1.9)}, judged=True))
    assert "1.300x  1.100-1.900" in text and "NOT met (p99 40.0 ms)" in text
    table = "\n".join(goals.markdown(figures, {}, judged=True))
    marked = {m["key"]: float(m["value"].replace("_", "")) for m in readme.MARKER.finditer(table)}
    assert marked == {k: v for k, v in figures.items() if k in {g.key for g in goals.GOALS}}
    assert table.count("not measured") == 2 * (len(goals.GOALS) - len(marked))  # the value and the verdict


def test_million_figures_take_the_measuring_functions_names() -> None:
    result = {"takeover_seconds": 3.4, "lease_ttl": 3, "rss_bytes": 212_000_000, "sequences": 1_000_000}
    assert million_figures(result) == {"million.takeover.s": 3.4, "million.lease_ttl.s": 3.0, "million.rss.mb": 212.0}
    assert million_figures({"rss_mb": 99, "takeover_s": True}) == {"million.rss.mb": 99.0}  # a bool is no figure


def test_load_warning_above_half_a_core_each() -> None:
    assert load_warning(cores=2, load=1.0) is None
    warning = load_warning(cores=2, load=1.5)
    assert warning is not None and "1.50 is above 1 on 2 cores" in warning


def test_last_json_takes_the_scripts_last_object_line() -> None:
    text = 'starting\n{"not": "this"}\nlog line\n' + json.dumps({"created_bytes_per_seq": 645.5}) + "\n\n"
    assert last_json(text) == {"created_bytes_per_seq": 645.5}
    with pytest.raises(ValueError, match="no JSON object"):
        last_json("Traceback ...\n[1, 2]\n{broken\n")


def test_raise_nofile_keeps_a_limit_that_suffices() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    clients = max(0, min(soft, hard) - nofile_needed(0) - 1)  # needs less than the soft limit: no change
    assert raise_nofile(clients) == (soft, hard)
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (soft, hard)


def test_figures_table_carries_a_marker_per_measured_key_that_reads_back() -> None:
    lines = readme.figures_table({"tail.c1000.p99.ratio": 2.134, "create.c32.rate": 4400.4})
    assert len(lines) == 2 + len(readme.KEYS)
    block = "\n".join(lines)
    assert "| 2.134 <!-- bench: tail.c1000.p99.ratio 2.134 --> | <= 1.2x |" in block  # issue 27's goal
    assert "4,400 <!-- bench: create.c32.rate 4_400 --> |  |" in block
    assert block.count("not measured") == len(readme.KEYS) - 2


def test_replace_block_rewrites_only_between_the_markers(tmp_path: Path) -> None:
    text = f"# Title\nbefore\n{readme.BEGIN}\nold table\n{readme.END}\nafter\n"
    new = readme.replace_block(text, ["", "new table", ""])
    assert new == f"# Title\nbefore\n{readme.BEGIN}\n\nnew table\n\n{readme.END}\nafter\n"
    assert readme.replace_block(new, ["", "new table", ""]) == new  # a second run changes nothing
    (tmp_path / "README.md").write_text(new.replace("new table", "| x | 1.5 <!-- bench: prefetch.next 1.5 --> |"))
    assert [(q.key, q.value) for q in readme.quoted_figures(tmp_path, ("README.md",))] == [("prefetch.next", 1.5)]
    with pytest.raises(ValueError, match="no generated block"):
        readme.replace_block("no markers here\n", [])


def test_slot_map_routes_every_slot_to_its_primary() -> None:
    reply = [
        [5461, 16383, [b"127.0.0.1", 7002, b"id2"], [b"127.0.0.1", 7001, b"id1"]],
        [0, 5460, [b"127.0.0.1", 7001, b"id1"]],
    ]
    ranges = clusterload.parse_slots(reply)
    assert ranges == [SlotRange(0, 5460, "127.0.0.1", 7001), SlotRange(5461, 16383, "127.0.0.1", 7002)]
    primaries, table = clusterload.owner_table(ranges)
    assert primaries == ["127.0.0.1:7001", "127.0.0.1:7002"]
    assert (table[0], table[5460], table[5461], table[16383]) == (0, 0, 1, 1)
    assert clusterload.key_slot(b"foo") == 12182  # CLUSTER KEYSLOT foo on Redis
    with pytest.raises(ValueError, match="slot 5461 has no primary"):
        clusterload.owner_table(ranges[:1])


def test_cluster_report_says_what_bounds_the_gain_and_gives_the_ratios() -> None:
    report = ClusterReport(cores=2, load=(1.0, 2.0, 3.0), nodes=3, groups=3, processes=2, clients=50,
                           keyspace=10_000, rounds=3, seconds=1.0,
                           rows=[ClusterRow(1, 40_000, 50_000, False, 0.8, 1.0, 30_000, 0.5),
                                 ClusterRow(16, 200_000, 300_000),
                                 ClusterRow(16, 200_000, 500_000, per_primary=True)])  # fmt: skip
    text = "\n".join(report.lines())
    # INCR/s per core used beside the ratio: 40,000 / 0.8, 50,000 / 1.0, redis-server 30,000 / 0.5
    assert "50,000 (0.80), 50,000 (1.00), 60,000 (0.50)" in text
    assert report.rows[0].projected == 4 * 50_000 / 60_000
    assert "projected at -P 1 on 4 cores for the nodes" in text and "= 3.33x one redis-server (goal >= 1.5x" in text
    assert "cluster INCR -c 50 -P 16 " in text and "1.50" in text and "1.25" in text
    assert "cluster INCR -c 50 -P 16, client per primary" in text and "2.50" in text
    assert "2-core machine the load generator (2 processes) and the 3 nodes share the cores" in text
    assert report.figures() == {
        "cluster.p1.groups_ratio": 1.25,
        "cluster.p16.groups_ratio": 1.5,
        "cluster.p16.per_primary.groups_ratio": 2.5,
        "cluster.p1.projected4": 4 * 50_000 / 60_000,
    }
    assert set(report.figures()) == set(readme.CLUSTER_KEYS) - {"cluster.p16.projected4"}  # no CPU figures at -P 16
    big = ClusterReport(cores=64, load=(0, 0, 0), nodes=3, groups=3, processes=8, clients=50, keyspace=1, rounds=1,
                        seconds=1.0)  # fmt: skip
    assert "can have one of its own" in big.shared_cores()


def run_bench(args: list[str], timeout: float) -> str:
    """scripts/bench.py with ``args``, to its end (`run_script`)."""
    return run_script(["scripts/bench.py", *args], timeout)


@pytest.mark.timeout(240)
def test_cluster_target_runs_alone_and_reports_every_field(tmp_path: Path, etcd_bin: str) -> None:
    png = tmp_path / "bench.png"
    args = ["--only", "cluster", "--rounds", "1", "--cluster-seconds", "0.5", "--cluster-pipelines", "1"]
    args += ["--cluster-per-primary", "16"]
    out = run_bench([*args, "--cluster-keyspace", "1000", "--cluster-clients", "8", "--png", str(png)], 200)
    report = last_json(out)["cluster"]
    assert isinstance(report, dict), out
    assert report["cores"] == os.cpu_count() and len(report["load"]) == 3
    assert (report["nodes"], report["groups"], report["clients"], report["keyspace"]) == (3, 3, 8, 1000)
    assert [(r["pipeline"], r["per_primary"]) for r in report["rows"]] == [(1, False), (16, True)]
    assert all(r["rps_one"] > 0 and r["rps_n"] > 0 and r["rps_redis"] > 0 for r in report["rows"]), report
    assert all(r["cores_one"] > 0 and r["cores_n"] > 0 and r["cores_redis"] > 0 for r in report["rows"]), report
    assert report["errors"] == {}, report  # every INCR went to its slot's primary
    assert set(report["layouts"]) == {"groups = 1", "groups = 3"}
    assert "groups = 3 / groups = 1 aggregate INCR/s at -P 1: " in out
    assert "groups = 3 / groups = 1 aggregate INCR/s at -P 16, client per primary: " in out
    assert "== cluster: aggregate INCR/s, 3 nodes on one etcd, groups = 1 vs groups = 3; " in out
    assert ("share the cores" if (os.cpu_count() or 1) < 5 else "one of its own") in out
    assert "INCR/s per core used: groups = 1 " in out and "projected at -P 1 on 4 cores" in out
    assert "== summary" not in out and "== goals" not in out  # the cluster alone: no single-server section ran
    assert png.with_name("bench-cluster.png").read_bytes().startswith(b"\x89PNG")
    assert not png.exists()  # no single-server chart without single-server runs


def test_readme_has_both_generated_blocks_apart() -> None:
    text = (ROOT / "README.md").read_text()
    cluster = readme.replace_block(text, ["", "cluster figures", ""], readme.CLUSTER_BEGIN, readme.CLUSTER_END)
    both = readme.replace_block(cluster, ["", "main figures", ""])
    assert "cluster figures" in both and "main figures" in both  # --write-readme after a whole run
    assert both.index(readme.END) < both.index(readme.CLUSTER_BEGIN)  # one block never inside the other


def test_a_quick_run_judges_no_goal(tmp_path: Path) -> None:
    """--quick is one round of 0.25 s per setting: its ratios swing by tens of percent (metrics on vs
    off once read -61.6%, "NOT met"), so no figure of it is held to a goal, and it says so."""
    assert verdict(True, judged=True) == "met" and verdict(False, judged=True) == "NOT met"
    assert verdict(False, judged=False) == NOT_JUDGED
    args = ["--quick", "--only", "redis,sqlite", "--no-timestamp", "--no-client", "--no-tail", "--no-create"]
    out = run_bench([*args, "--no-memory", "--no-cluster", "--png", str(tmp_path / "bench.png")], 120)
    assert f"figures are {NOT_JUDGED}" in out, out
    assert "(goal >= 1.1: not judged" in out and "below off: not judged" in out, out
    assert "NOT met" not in out and ": met)" not in out, out
