"""Benchmark report: redis-server, March on SQLite, March on etcd and the Python baseline side by
side, same machine, same run, printed as tables and drawn as a PNG. Run it through scripts/bench.

Every server runs on free loopback ports with throwaway data (March on etcd: a one-member etcd
started here plus one `march serve --etcd` node, used once it is primary; the baseline:
`march_harness.bench.baseline_server`, a bare uvloop + hiredis INCR server). March runs as users run it: ACL
on (the load authenticates as a non-default user), a TLS listener, the metrics endpoint, the
default limits (`march_harness.bench.targets`); every load authenticates as that user on every server.
redis-benchmark drives each setting: a command, `-c` clients, `-P` pipeline depth.

One method for every figure (docs/performance.md, "How scripts/bench measures"): per setting,
each server is calibrated (a short probe sizes `-n` for about `--seconds`), warmed (`--warmup`
runs at the measured length, discarded: a fresh node's first batches, the allocator and the
store's first writes are not what is measured), then measured in `--rounds` rounds (at least 5 by
default; 1 with --quick) that alternate between the servers, the order reversed every other round,
so that drift on the machine hits all alike. Per figure: the median over the rounds and its spread
(min-max over the rounds; for a ratio, min-max of the rounds' own ratios, each round's pair having
run back to back). The machine's cores and load average are printed at the start and at the end,
with a warning when the 1-minute load is above half a core each (1.0 on 2 cores). The run ends with
issue 27's goals (`march_harness.bench.goals`): each row's median, spread, goal and met / NOT met.

Sections (each can be skipped):
- `INCR` on one hot key (redis-benchmark's `-t incr`), with the issue's bars for March on SQLite
  at `-c 50` (ratio to Redis >= 0.8 at -P 1, >= 0.5 at -P 16) and March / the baseline at -P 16;
- timestamp `INCR` on a snowflake sequence (on redis-server a plain `INCR ts`), then
  `INCRBY ts 1000` at one client count, also as snowflake IDs per second (the issue's bar: more
  than 4,096,000, the most a snowflake library makes on one node);
- tail latency: INCR at `-c 1000 -P 1` (redis, March on SQLite, the baseline): p50/p99/p99.9 and
  March's / redis-server's (the soft open-file limit is raised for it if it is too low);
- sequence creation: INCR on a fresh random name from 32 connections (`-r`), new sequences/s,
  against INCR on existing names (1,000 names, all created by the calibration and warm-up) at the
  same -c 32: their ratio is the issue's row; `march_harness.bench.creation`'s own figure too (its
  own server; not with --quick);
- flood: new-key INCR latency, one round trip each, while 20 connections flood DBSIZE / SCAN /
  unread KEYS over 20,000 names (`march_harness.bench.flood`), March on SQLite and redis-server,
  rounds alternating;
- a node holding 1,000,000 sequences: takeover after kill -9 and RSS
  (`march_harness.bench.million.measure(workdir) -> dict`; "not measured" while that module is absent);
- metrics on vs off: March on SQLite without and with `--metrics-port`, INCR at -P 1 and -P 16,
  alternated with redis-server, `/metrics` scraped once during the run (bar: on within 5% of off);
- the Python client's prefetching IDs/s, `seq.next(key)`, `next(it)` on `seq.ids(key)` and a
  bare function doing the same look-up (the baseline), each in a subprocess of its own, rounds
  alternating; skipped if march_client is not installed;
- memory per sequence, created and touched after a restart (`march_harness.bench.memory`, which prints
  one JSON line);
- the cluster target (`march_harness.bench.clusterbench`): two local 3-node clusters on one etcd, groups = 1
  and groups = N (`--cluster-groups`, default 3), loaded by a cluster-aware generator
  (`march_harness.bench.clusterload`: redis-benchmark 7.0's `--cluster` refuses a cluster with one master);
  aggregate INCR/s of each, their ratio, the machine's cores and load. `--only cluster` runs it
  alone; its report has a README block of its own and a chart beside the main one
  (`<stem>-cluster.png`), and its last JSON line (`{"cluster": ...}`) is the report as data.

`--check-readme`: the figures the READMEs quote carry a marker `<!-- bench: key value -->`
(`march_harness.bench.readme`); this mode measures them all in one run and prints each one's value today
and its ratio to the quote.

Never asserts anything about speed: it measures and reports. Every process it starts is stopped
at the end, also after a failure, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import NoReturn

from march_harness import REPO_ROOT as ROOT
from march_harness.bench import clusterbench, flood, goals, readme, redisbench
from march_harness.bench.measured import (
    EXISTING_SEQUENCES,
    FLOOD,
    NEW_SEQUENCES,
    NOT_JUDGED,
    ClusterReport,
    Measured,
    Setting,
    Spread,
    figures_with_spread,
    last_json,
    load_warning,
    machine_line,
    million_figures,
    raise_nofile,
    verdict,
)
from march_harness.bench.redisbench import INCR, Auth
from march_harness.bench.targets import PASSWORD, USER, Target, Targets, scrape

BARS = {p: goals.bound(f"incr.c50.p{p}.ratio") for p in (1, 16)}  # issue 27's march/redis goals (INCR, -c 50)
BAR_CLIENTS = 50  # the client count the goals were set at
SNOWFLAKE_BAR = 4_096_000  # IDs/s: 4096 per millisecond, a snowflake library's ceiling on one node
INCRBY_BATCH = 1000
METRICS_BAR = 0.05  # metrics on may cost at most 5% of the throughput with metrics off
METRICS_ROUNDS = 7  # at least: single rounds vary by about ±5% here, as much as the bar
TS_KEY = "ts"
GOAL_KEYS = {g.key for g in goals.GOALS}  # in the goals table; the figures beside them in the other table
LABEL = {"redis": "redis", "baseline": "python baseline"}  # the reference in a ratio's name
SERVERS = ("redis", "sqlite", "etcd", "baseline")
CLUSTER = "cluster"  # --only's name for the cluster target (two clusters: groups = 1 and groups = N)
AUTH = Auth(USER, PASSWORD)  # every load runs as the application user (the baseline answers AUTH with OK)
MEMORY_GOAL = goals.bound("memory.created")  # bytes per sequence, created or touched: issue 27's goal
SUMMARY_WIDTH = 36  # characters per server column of the summary table
TAIL_CLIENTS = 1000  # the tail-latency setting: -c 1000 -P 1
BASELINE_SETTING = (50, 16)  # the baseline ratio: march / python baseline at -c 50 -P 16
CREATE_CLIENTS = 32  # the creation rate: 32 connections, each INCR on a fresh name
CREATE = ("INCR", "seq:__rand_int__")  # with -r: a random name, a new sequence
EXISTING = ("INCR", "old:__rand_int__")  # with -r EXISTING_KEYSPACE: names the calibration and warm-up made
EXISTING_KEYSPACE = 1000  # few enough that a calibration probe (>= 2,000 requests) and a warm-up create them all
FLOOD_REQUESTS, FLOOD_QUICK_REQUESTS = 500, 50  # new keys timed per round (p99 of 500: the 5th slowest)
FLOOD_QUICK_SEQUENCES = 2000  # names the flood lists in a --quick run (the row's own: 20,000)
MILLION_MODULE = "march_harness.bench.million"  # measure(base=workdir) -> dict: takeover and RSS of a 1 M node
MILLION_TIMEOUT = 1800  # seconds: a 1,000,000-sequence node's creation, restart and takeover on a busy box
MILLION_SCRIPT = """
import json, sys
from pathlib import Path
from march_harness.bench.million import measure
print(json.dumps(measure(base=Path(sys.argv[1]))))
"""
CREATE_REQUESTS, CREATE_QUICK_REQUESTS = 100_000, 10_000  # for march_harness.bench.creation
CREATE_KEYSPACE = 10**9  # -r is read as a 32-bit int: 10**12 wraps (one key); 1e9: ~0.05% repeats per 500 K
CLIENT_SCRIPT = """
import sys
try:
    from march_client.bench import prefetch_rate
except ImportError:
    sys.exit(3)
if sys.argv[4] == "bare":  # the baseline: one Python call, a dict look-up and a C-level next()
    import itertools
    from march_client.bench import _rate_next
    chains = {sys.argv[2]: itertools.count(1)}
    def bare(key, chains=chains):
        return next(chains[key])
    print(_rate_next(bare, sys.argv[2], float(sys.argv[3])))
else:
    print(prefetch_rate(sys.argv[1], sys.argv[2], float(sys.argv[3]), method=sys.argv[4]))
"""
CLIENT_MISSING = 3  # CLIENT_SCRIPT's exit status when march_client is not importable
CLIENT_METHODS = {  # CLIENT_SCRIPT's methods, as the report names them
    "next": "seq.next(key)",
    "ids": "next(it) on seq.ids(key)",
    "bare": "bare function: next(chains[key])",
}


class Bench:
    def __init__(self, args: argparse.Namespace, targets: Targets) -> None:
        self.args = args
        self.targets = targets
        self.results: list[Measured] = []
        self.client_rates: dict[str, float] = {}  # prefetch method -> IDs/s
        self.memory: dict[str, float] = {}  # the memory script's figures
        self.extra: list[str] = []  # lines for the end of the summary
        self.cluster: ClusterReport | None = None  # the cluster target's report, once it ran
        self.cluster_results: list[Measured] = []  # its settings (own table, block and chart)
        self.other: dict[str, tuple[float, Spread]] = {}  # figures measured outside redis-benchmark

    def measure(
        self,
        setting: Setting,
        group: list[Target],
        during: dict[str, Callable[[], None]] | None = None,
        rounds: int | None = None,
        seconds: float | None = None,
    ) -> Measured:
        """Calibrate each target, then ``rounds`` rounds alternating between them; print the block."""
        a = self.args
        cmd = setting.commands
        requests = {
            t.name: redisbench.requests_for(
                t.port, setting.clients, setting.pipeline, seconds or a.seconds, cmd[t.name], AUTH, setting.keyspace
            )
            for t in group
        }
        m = Measured(setting, requests, {t.name: [] for t in group})
        for _ in range(a.warmup):  # discarded: a warm node is what the rounds measure
            for t in group:
                redisbench.run(t.port, setting.clients, setting.pipeline, requests[t.name], cmd[t.name], None, AUTH,
                               setting.keyspace)  # fmt: skip
        hooks = dict(during or {})
        for r in range(rounds or a.rounds):
            for t in group if r % 2 == 0 else list(reversed(group)):
                hook = hooks.pop(t.name, None)
                run = redisbench.run(
                    t.port,
                    setting.clients,
                    setting.pipeline,
                    requests[t.name],
                    cmd[t.name],
                    hook,
                    AUTH,
                    setting.keyspace,
                )
                m.runs[t.name].append(run)
        self.print_block(m, group)
        self.results.append(m)
        return m

    def print_block(self, m: Measured, group: list[Target]) -> None:
        s = m.setting
        warm = f", after {self.args.warmup} warm-up run(s) discarded" if self.args.warmup else ""
        print(f"\n{s.label}: median of {len(next(iter(m.runs.values())))} rounds{warm}", flush=False)
        head = f"  {'server':<26}{'requests':>12}{'rps':>12}{'ratio':>7}{'p50 ms':>9}{'p99 ms':>9}{'p99.9 ms':>9}"
        print(head + "   rps min-max   p99 min-max   ratio min-max   rounds (rps)")
        for t in group:
            med, ratio = m.median(t.name), m.ratio(t.name)
            each = " ".join(f"{x.rps:.0f}" for x in m.runs[t.name])
            r = "" if ratio is None else f"{ratio:.3f}"
            (lo, hi), (p_lo, p_hi) = m.spread(t.name), m.spread(t.name, "p99")
            rr = m.round_ratios(t.name) if t.name != "redis" else []
            rs = f"{min(rr):.2f}-{max(rr):.2f}" if rr else "-"
            print(
                f"  {t.label:<26}{m.requests[t.name]:>12,}{med.rps:>12,.0f}{r:>7}"
                f"{med.p50:>9.3f}{med.p99:>9.3f}{med.p999:>9.3f}   {lo:.0f}-{hi:.0f}   {p_lo:.2f}-{p_hi:.2f}   {rs}"
                f"   {each}"
            )
        for t in group:
            ratio = m.ratio(t.name)
            if not t.is_march or ratio is None:
                continue
            bar = BARS.get(s.pipeline) if (s.commands[t.name] == INCR and s.clients == BAR_CLIENTS) else None
            quick = self.args.quick
            met = "" if bar is None else verdict(ratio >= bar, not quick)
            judged = "" if bar is None or t.name != "sqlite" else f" (goal >= {bar:g}: {met})"
            name = "march" if t.name == "sqlite" else t.label  # "march/redis": the line the README quotes
            print(f"  {name}/redis throughput ratio: {ratio:.3f}{judged}", flush=True)
            baseline = m.ratio(t.name, "baseline")
            if baseline is not None and (s.clients, s.pipeline) == BASELINE_SETTING and s.title == "INCR":
                goal = goals.bound("incr.c50.p16.baseline_ratio")
                print(f"  {name}/python baseline throughput ratio: {baseline:.3f} (goal >= {goal:g})", flush=True)

    # -- sections ------------------------------------------------------------------------------
    def main_sections(self, group: list[Target]) -> None:
        a = self.args
        for c in a.clients:
            for p in a.pipelines:
                self.measure(Setting("INCR", c, p, {t.name: INCR for t in group}), group)
        if a.no_timestamp:
            return
        for t in group:
            if t.is_march:
                reply = t.call("SEQ.CREATE", TS_KEY, "TIMESTAMP", "PRESET", "snowflake")
                if reply != "OK":
                    raise SystemExit(f"SEQ.CREATE {TS_KEY} TIMESTAMP on {t.label}: {reply!r}")
        ts = ("INCR", TS_KEY)
        for c in a.clients:
            for p in a.pipelines:
                self.measure(Setting("timestamp INCR", c, p, {t.name: ts for t in group}), group)
        batch = ("INCRBY", TS_KEY, str(INCRBY_BATCH))
        for p in a.pipelines:
            m = self.measure(
                Setting(f"INCRBY ts {INCRBY_BATCH}", a.incrby_clients, p, {t.name: batch for t in group}), group
            )
            for t in group:
                if t.is_march:
                    ids = m.median(t.name).rps * INCRBY_BATCH
                    judged = verdict(ids > SNOWFLAKE_BAR, not a.quick)
                    who = "march" if t.name == "sqlite" else t.label
                    print(f"  {who} snowflake IDs/s through INCRBY: {ids:,.0f} (bar > {SNOWFLAKE_BAR:,}: {judged})")

    def metrics_section(self) -> None:
        """March on SQLite without and with its metrics endpoint, alternated with redis-server."""
        a = self.args
        on = self.targets.started.get("sqlite") or self.targets.start("sqlite")
        off = self.targets.start("sqlite-nometrics")
        redis = self.targets.started.get("redis")
        group = [t for t in (redis, off, on) if t is not None]
        print(f"\n== metrics on vs off: {on.label} (on) on :{on.port}, /metrics on :{on.metrics_port}; {off.label}")
        print(
            "   (both count requests into their latency histograms: that is the server's own INFO and SLOWLOG\n"
            "   bookkeeping; 'on' adds the endpoint and a scrape during the run. More rounds: the bar is 5%)"
        )
        scraped: list[str] = []

        def scrape_once() -> None:
            try:
                text = scrape(on.metrics_port)
                samples = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
                scraped.append(f"/metrics answered during the run: {len(samples)} samples")
            except OSError as e:
                scraped.append(f"WARNING: /metrics on :{on.metrics_port} did not answer ({e}); not built yet?")

        lines = []
        for i, p in enumerate(a.pipelines):
            hooks = {on.name: scrape_once} if i == 0 else None
            setting = Setting("metrics INCR", a.metrics_clients, p, {t.name: INCR for t in group})
            m = self.measure(setting, group, hooks, rounds=a.rounds if a.quick else max(a.rounds, METRICS_ROUNDS))
            # Paired: each round runs off and on back to back, so the median of the per-round ratios
            # cancels the machine's drift between rounds (rounds alone vary by about ±10% here).
            pairs = [b.rps / a_.rps for a_, b in zip(m.runs[off.name], m.runs[on.name], strict=True)]
            rel = statistics.median(pairs) - 1
            judged = verdict(rel >= -METRICS_BAR, not a.quick)
            r_off, r_on = m.ratio(off.name), m.ratio(on.name)
            to_redis = "" if r_off is None or r_on is None else f"ratio to redis off {r_off:.3f}, on {r_on:.3f}; "
            lines.append(
                f"  -P {p}: {to_redis}on vs off {rel:+.1%}, median of the rounds' on/off ratios "
                f"(bar: on at most {METRICS_BAR:.0%} below off: {judged})"
            )
        print("\n".join(scraped + lines))
        self.extra += ["metrics on vs off (the bar: on at most 5% below off):", *lines]

    def tail_section(self, group: list[Target]) -> None:
        """INCR at -c 1000 -P 1: p50/p99/p99.9 of each server, and March's p99 / redis-server's."""
        a = self.args
        if a.quick:  # the smoke run's budget: the row's two servers only (1,000 connects a run each)
            group = [t for t in group if t.name in ("redis", "sqlite")]
        soft, hard = raise_nofile(TAIL_CLIENTS)
        print(f"\n== tail latency, -c {TAIL_CLIENTS} -P 1 (open-file limit {soft}, hard {hard})")
        setting = Setting("INCR", TAIL_CLIENTS, 1, {t.name: INCR for t in group})
        m = self.measure(setting, group, seconds=a.tail_seconds)
        for t in group:
            for ref in ("redis", "baseline"):
                if t.name == ref or not t.is_march:
                    continue
                ratios = [m.latency_ratio(t.name, ref, f) for f in ("p50", "p99", "p999")]
                if None in ratios:
                    continue
                who = "march" if t.name == "sqlite" else t.label
                p50, p99, p999 = (f"{r:.2f}" for r in ratios if r is not None)
                goal = f" (goal p99 <= {goals.bound('tail.c1000.p99.ratio'):g})" if ref == "redis" else ""
                print(
                    f"  {who}/{LABEL[ref]} latency ratio at -c {TAIL_CLIENTS}: p50 {p50}, p99 {p99}{goal}, p99.9 {p999}"
                )

    def create_section(self, group: list[Target]) -> None:
        """New sequences per second: INCR on a fresh random name from 32 connections (on redis-server
        and the baseline a new key), against INCR on existing names at the same -c (the issue's row is
        their ratio). Then the fuller measuring script's own figure (not with --quick)."""
        a = self.args
        if a.quick:  # the smoke run's budget: the row's two servers only
            group = [t for t in group if t.name in ("redis", "sqlite")]
        print(
            f"\n== sequence creation, -c {CREATE_CLIENTS} -P 1: INCR on existing names (-r {EXISTING_KEYSPACE:,}, "
            f"all made by the calibration and warm-up), then on a random new name (-r {CREATE_KEYSPACE:,})"
        )
        commands = {t.name: EXISTING for t in group}
        old = self.measure(Setting(EXISTING_SEQUENCES, CREATE_CLIENTS, 1, commands, EXISTING_KEYSPACE), group,
                           seconds=a.create_seconds)  # fmt: skip
        before = {t.name: t.call("DBSIZE") for t in group if t.name != "baseline"}
        setting = Setting(NEW_SEQUENCES, CREATE_CLIENTS, 1, {t.name: CREATE for t in group}, CREATE_KEYSPACE)
        m = self.measure(setting, group, seconds=a.create_seconds)
        for t in group:  # the check that each INCR made a new name (-r wraps silently when too large)
            if t.name in before and isinstance(n := t.call("DBSIZE"), int) and isinstance(n0 := before[t.name], int):
                sent = sum(m.requests[t.name] for _ in m.runs[t.name]) * (1 + a.warmup / max(1, len(m.runs[t.name])))
                print(
                    f"  {t.label}: {n - n0:,} new keys from {sent:,.0f} INCRs on random names (calibration not counted)"
                )
        for t in group:
            rr = [x.rps / y.rps for x, y in zip(m.runs[t.name], old.runs[t.name], strict=True) if y.rps]
            new, existing = m.median(t.name).rps, old.median(t.name).rps
            goal = " (goal >= 0.25; redis-server's about 0.94)" if t.name == "sqlite" else ""
            print(f"  {t.label}: new sequences/s / INCR/s on existing names: {new / existing:.3f}{goal}, "
                  f"rounds {min(rr):.3f}-{max(rr):.3f}")  # fmt: skip
        if a.quick:
            return
        script = "march_harness.bench.creation"
        requests = CREATE_QUICK_REQUESTS if a.quick else CREATE_REQUESTS
        result = self.json_script(script, ["--requests", str(requests), "--clients", str(CREATE_CLIENTS)])
        self.extra.append(f"creation, {script} (its own server, defaults): {result}")
        print(self.extra[-1], flush=True)

    def flood_section(self, group: list[Target]) -> None:
        """New-key INCR latency while 20 connections flood DBSIZE / SCAN / unread KEYS
        (march_harness.bench.flood): March on SQLite and redis-server, each on names of its own,
        a warm-up round discarded, then ``--rounds`` rounds alternating."""
        a = self.args
        group = [t for t in group if t.name in ("redis", "sqlite")]
        if not group:
            return
        n = FLOOD_QUICK_REQUESTS if a.quick else FLOOD_REQUESTS
        names = FLOOD_QUICK_SEQUENCES if a.quick else flood.SEQUENCES
        print(
            f"\n== flood: {n} INCR on new names, one round trip each, while 20 connections flood "
            f"DBSIZE / SCAN / unread KEYS over {names:,} names (march_harness.bench.flood)",
            flush=True,
        )
        for t in group:
            flood.prefill(t.port, AUTH, names)
        m = Measured(Setting(FLOOD, 1, 1, {t.name: ("INCR", "new:<name>") for t in group}), {}, {})
        m.runs = {t.name: [] for t in group}
        replies: dict[str, list[int]] = {t.name: [] for t in group}
        for r in range(a.warmup + a.rounds):
            for t in group if r % 2 == 0 else group[::-1]:
                run, flooded = flood.measure(t.port, AUTH, n, names)
                if r >= a.warmup:
                    m.runs[t.name].append(run)
                    replies[t.name].append(flooded)
        m.requests = dict.fromkeys(m.runs, n)
        self.print_block(m, group)
        for t in group:
            (lo, hi), med = m.spread(t.name, "p99"), m.median(t.name).p99
            goal = " (goal < 50 ms)" if t.name == "sqlite" else ""
            print(
                f"  {t.label}: new-key INCR p99 under the flood {med:.2f} ms{goal}, rounds {lo:.2f}-{hi:.2f}; "
                f"the flood's reading clients had {statistics.median(replies[t.name]):,.0f} replies a round"
            )
        self.results.append(m)

    def million_section(self) -> None:
        """A node holding 1,000,000 sequences: takeover after kill -9 and RSS
        (``march_harness.bench.million.measure(workdir) -> dict``, in a process of its own);
        "not measured" while that module is absent."""
        print("\n== a node holding 1,000,000 sequences: takeover after kill -9, RSS", flush=True)
        if self.args.quick:
            self.extra.append("1,000,000 sequences: not measured (--quick)")
            print(self.extra[-1])
            return
        if importlib.util.find_spec(MILLION_MODULE) is None:
            self.extra.append(f"1,000,000 sequences: not measured ({MILLION_MODULE} is not there yet)")
            print(self.extra[-1])
            return
        with tempfile.TemporaryDirectory(prefix="march-million-") as tmp:
            try:
                out = subprocess.run(
                    [sys.executable, "-c", MILLION_SCRIPT, tmp],
                    capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=MILLION_TIMEOUT, cwd=ROOT,
                )  # fmt: skip
                result: dict[str, object] | str = last_json(out.stdout)
            except subprocess.TimeoutExpired:
                result = "FAILED (timed out)"
            except ValueError:
                tail = (out.stdout + out.stderr).strip().splitlines()[-3:]
                result = f"FAILED (exit {out.returncode}): {' | '.join(tail)}"
        if isinstance(result, dict):
            self.other.update((k, (v, None)) for k, v in million_figures(result).items())
        self.extra.append(f"1,000,000 sequences ({MILLION_MODULE}): {result}")
        print(self.extra[-1], flush=True)

    def memory_section(self) -> None:
        """RSS per sequence created, and touched after a restart (march_harness.bench.memory); the figures
        are kept in ``self.memory``."""
        script = "march_harness.bench.memory"
        n = self.args.memory_sequences
        print(f"\n== memory per sequence, {n:,} sequences ({script})", flush=True)
        result = self.json_script(script, ["--sequences", str(n)])
        if isinstance(result, dict):
            self.memory = {k: float(v) for k, v in result.items() if isinstance(v, int | float)}
            line = ", ".join(f"{k} {v:,.0f}" for k, v in self.memory.items())
            self.extra.append(f"memory per sequence ({n:,} sequences, march sqlite): {line}")
        else:
            self.extra.append(f"memory per sequence: {result}")
        print(self.extra[-1], flush=True)

    def json_script(self, module: str, args: list[str]) -> dict[str, object] | str:
        """Run a measuring module (``python -m``, this Python) and return the JSON object it printed, or why not."""
        try:
            out = subprocess.run(
                [sys.executable, "-m", module, *args],
                capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=900, cwd=ROOT,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return "FAILED (timed out)"
        try:
            return last_json(out.stdout)
        except ValueError:
            tail = (out.stdout + out.stderr).strip().splitlines()[-3:]
            return f"FAILED (exit {out.returncode}): {' | '.join(tail)}"

    def client_section(self) -> list[str]:
        """IDs/s of the Python client's prefetch, each in one process of its own (not this
        interpreter): ``next`` (seq.next(key)), ``ids`` (next(it) on seq.ids(key)) and ``bare`` (a
        bare function doing the same dict look-up and C-level next(): the most a Python call can
        give), ``--rounds`` rounds alternating between them; medians kept in ``self.client_rates``."""
        target = self.targets.started.get("sqlite") or self.targets.start("sqlite")
        seconds, rounds = self.args.client_seconds, self.args.rounds
        rates: dict[str, list[float]] = {m: [] for m in CLIENT_METHODS}
        methods = list(CLIENT_METHODS)
        for r in range(rounds):
            for method in methods if r % 2 == 0 else methods[::-1]:
                rate = self.client_rate(target, method)
                if isinstance(rate, str):
                    return [f"python client, prefetch: {rate}"]
                rates[method].append(rate)
        self.client_rates = {m: statistics.median(v) for m, v in rates.items()}
        bare = self.client_rates["bare"]
        lines = [
            f"python client, prefetch (one Python process each, {seconds:g}s, median of {rounds}, {target.label}):"
        ]
        for method, what in CLIENT_METHODS.items():
            rate, each = self.client_rates[method], " ".join(f"{x / 1e6:.2f}" for x in rates[method])
            lines.append(f"  {what:<44}{rate:>14,.0f} IDs/s  {rate / bare:5.2f} of bare   rounds (M): {each}")
        return lines

    def client_rate(self, target: Target, method: str) -> float | str:
        """One run of CLIENT_SCRIPT: IDs/s, or why there is none."""
        url = f"redis://{USER}:{PASSWORD}@127.0.0.1:{target.port}"
        seconds = self.args.client_seconds
        try:
            out = subprocess.run(
                [sys.executable, "-c", CLIENT_SCRIPT, url, f"bench:prefetch:{method}", str(seconds), method],
                capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=seconds * 5 + 60, cwd=ROOT,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return "FAILED (timed out)"
        if out.returncode == CLIENT_MISSING:
            return "skipped: march_client not installed"
        try:
            return float(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            tail = (out.stdout + out.stderr).strip().splitlines()[-3:]
            return f"FAILED (exit {out.returncode}): {' | '.join(tail)}"

    def figures(self) -> dict[str, tuple[float, Spread]]:
        """Every ``readme.KEYS`` figure this run measured, with its spread over the rounds."""
        return figures_with_spread(self.results, self.client_rates, self.memory, INCRBY_BATCH) | self.other

    def readme_figures(self) -> dict[str, float]:
        """Today's value of every ``readme.KEYS`` (and ``CLUSTER_KEYS``) figure this run measured."""
        figures = {k: v for k, (v, _) in self.figures().items()}
        return figures | (self.cluster.figures() if self.cluster is not None else {})

    def goal_lines(self) -> list[str]:
        """Issue 27's goals, each row's median, spread, goal and verdict (none on a --quick run)."""
        spreads = {k: s for k, (_, s) in self.figures().items()}
        head = f"== goals (issue 27), {self.args.rounds} rounds, medians; {machine_line()}"
        return [head, *goals.lines(self.readme_figures(), spreads, not self.args.quick)]

    # -- report --------------------------------------------------------------------------------
    def summary(self, extra: list[str]) -> list[str]:
        """The summary table (one row per setting, one column per server) and the other sections'
        lines."""
        if not self.results:
            return [*self.extra, *extra]
        labels = [t for t in SERVERS if any(t in m.runs for m in self.results)]
        names = {n: self.targets.label(n) for n in labels}
        w = SUMMARY_WIDTH
        lines = [
            f"== summary: median rps (ratio to redis-server), p50/p99/p99.9 ms; {self.args.rounds} rounds after "
            f"{self.args.warmup} warm-up run(s); "
            f"{machine_line()}",
            f"{'setting':<36}" + "".join(f"{names[n]:>{w}}" for n in labels),
        ]
        for m in self.results:
            if m.setting.title.startswith("metrics"):
                continue
            cells = []
            for n in labels:
                if n not in m.runs:
                    cells.append(f"{'-':>{w}}")
                    continue
                med, ratio = m.median(n), m.ratio(n)
                r = f" ({ratio:.2f})" if ratio is not None and n != "redis" else ""
                cells.append(f"{f'{med.rps:,.0f}{r} {med.p50:.2f}/{med.p99:.2f}/{med.p999:.2f}':>{w}}")
            lines.append(f"{m.setting.label:<36}" + "".join(cells))
        return lines + self.extra + extra

    def readme_block(self, summary: list[str], started: str) -> list[str]:
        """README.md's generated block: the command, date and load, the summary, the figures, the charts."""
        command = " ".join(["scripts/bench", *sys.argv[1:]])
        when = time.strftime("%Y-%m-%d", time.gmtime())
        out = [
            "",
            f"`{command}`, {when}; at the start {started}, at the end {machine_line()}:",
            "",
            "```",
            *summary,
            "```",
            "",
            *goals.markdown(self.readme_figures(), {k: s for k, (_, s) in self.figures().items()}, not self.args.quick),
            "",
            "Other figures of the run:",
            "",
            *readme.figures_table(self.readme_figures(), {k: v for k, v in readme.KEYS.items() if k not in GOAL_KEYS}),
            "",
        ]
        png = self.args.png
        if png.resolve().is_relative_to(ROOT):
            rel = png.resolve().relative_to(ROOT)
            out.append(f"![scripts/bench: throughput and latency per setting]({rel})")
            memory = png.with_name(f"{png.stem}-memory.png")
            if self.memory:
                out += ["", f"![scripts/bench: RSS per sequence]({memory.resolve().relative_to(ROOT)})"]
        return [*out, ""]

    def png(self, path: Path, results: list[Measured] | None = None, what: str = "redis-benchmark") -> Path:
        from march_harness.bench.charts import BenchRow, bench_png

        results = self.results if results is None else results
        rows = [
            BenchRow(m.setting.label, self.targets.label(n), med.rps, med.p50, med.p99, med.p999)
            for m in results
            for n in m.runs
            for med in [m.median(n)]
        ]
        seconds = self.args.cluster_seconds if results is self.cluster_results else self.args.seconds
        title = f"{what}, {os.cpu_count()} CPUs, medians of {self.args.rounds} rounds of ~{seconds:g}s"
        return bench_png(rows, path, title)

    def memory_png(self, path: Path) -> Path | None:
        """The memory figures as bars, next to the main chart (``<stem>-memory.png``); None if none."""
        from march_harness.bench.charts import memory_png

        if not self.memory:
            return None
        n = self.memory.get("sequences", self.args.memory_sequences)
        title = f"RSS per sequence, {n:,.0f} sequences, {os.cpu_count()} CPUs"
        return memory_png(self.memory, path.with_name(f"{path.stem}-memory.png"), title, MEMORY_GOAL)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="measured rounds per server and setting (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up runs per server and setting, discarded (default 1)")
    ap.add_argument("--seconds", type=float, default=1.0, help="target length of one run (default 1)")
    ap.add_argument("--clients", default="1,50,200", help="comma-separated -c values (default 1,50,200)")
    ap.add_argument("--pipelines", default="1,16", help="comma-separated -P values (default 1,16)")
    ap.add_argument("--incrby-clients", type=int, default=50, help="-c of the INCRBY runs (default 50)")
    ap.add_argument("--metrics-clients", type=int, default=50, help="-c of the metrics on/off runs (default 50)")
    ap.add_argument("--client-seconds", type=float, default=3.0, help="length of the client prefetch run (default 3)")
    ap.add_argument("--tail-seconds", type=float, default=3.0, help="length of one -c 1000 run (default 3)")
    ap.add_argument("--create-seconds", type=float, default=2.0, help="length of one creation run (default 2)")
    ap.add_argument("--memory-sequences", type=int, default=100_000, help="sequences of the memory run (100000)")
    ap.add_argument(
        "--only",
        default=",".join([*SERVERS, CLUSTER]),
        help="servers to compare, and 'cluster' for the cluster target (default redis,sqlite,etcd,baseline,cluster)",
    )
    clusterbench.add_options(ap)
    ap.add_argument("--no-etcd", action="store_true", help="leave March on etcd out (the etcd and cluster targets)")
    ap.add_argument("--no-timestamp", action="store_true", help="skip the timestamp-key runs")
    ap.add_argument("--no-metrics", action="store_true", help="skip metrics on vs off")
    ap.add_argument("--no-client", action="store_true", help="skip the Python client's prefetch rate")
    ap.add_argument("--no-tail", action="store_true", help="skip the tail latency at -c 1000")
    ap.add_argument("--no-create", action="store_true", help="skip the sequence creation rate")
    ap.add_argument("--no-memory", action="store_true", help="skip the memory per sequence")
    ap.add_argument("--no-flood", action="store_true", help="skip new-key INCR latency under a flood")
    ap.add_argument("--no-million", action="store_true", help="skip the 1,000,000-sequence node")
    ap.add_argument("--png", type=Path, default=Path("bench.png"), help="the chart (default bench.png)")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: 1 round of 0.25 s after a warm-up (metrics too), -c 50, no timestamp keys, client, "
        "tail and creation 0.5 s, 10,000 sequences, 50 new keys under the flood, no 1,000,000-sequence node",
    )
    ap.add_argument(
        "--check-readme",
        action="store_true",
        help="re-measure every figure the READMEs quote (their <!-- bench: key value --> markers) in one run "
        "and print today's value and its ratio to the quote: redis, sqlite and the baseline, -c 50, -P 1,16, "
        "the tail, creation, memory and client sections, no metrics",
    )
    ap.add_argument(
        "--write-readme",
        action="store_true",
        help="rewrite README.md's generated block (command, date, load, summary, figures table, charts) "
        "from this run (its command line goes in the block; a key this run did not measure shows as such)",
    )
    args = ap.parse_args()
    if args.check_readme:
        # The settings the quoted figures were measured at (2 s rounds: INCRBY's IDs/s depend on the length).
        args.only, args.clients, args.pipelines, args.no_metrics = "redis,sqlite,baseline", "50", "1,16", True
        args.no_cluster = True
        args.seconds = 2.0
        args.no_tail = args.no_create = args.no_memory = args.no_client = args.no_flood = False
        args.no_million = True
    if args.quick:
        args.rounds, args.seconds, args.clients, args.client_seconds = 1, 0.25, "50", 0.5
        args.tail_seconds, args.create_seconds, args.memory_sequences = 0.5, 0.5, 10_000
        args.no_timestamp = True  # the smoke run's budget (tests/scripts): timestamp keys have a test of their own
    args.clients = [int(c) for c in str(args.clients).split(",")]
    args.pipelines = [int(p) for p in args.pipelines.split(",")]
    clusterbench.finish_options(args)
    choose_targets(ap, args)
    return args


def cluster_section(bench: Bench) -> None:
    """The cluster target (march_harness.bench.clusterbench); its report also printed as one JSON line."""
    try:
        bench.cluster_results, bench.cluster = clusterbench.run(bench.args, bench.targets)
    except (AssertionError, OSError) as e:  # say why, not a traceback (the logs are kept)
        lines = str(e).splitlines() or [repr(e)]
        raise SystemExit("cluster target: " + "\n".join(lines[:3] + lines[-12:])) from e
    print(json.dumps({"cluster": asdict(bench.cluster)}), flush=True)


def choose_targets(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``args.servers`` and ``args.cluster`` from --only and the --no-* switches."""
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in SERVERS and s != CLUSTER]
    if unknown:
        ap.error(f"--only: unknown server(s) {unknown}; choose from {[*SERVERS, CLUSTER]}")
    args.servers = [s for s in SERVERS if s in only and not (s == "etcd" and args.no_etcd)]
    args.cluster = CLUSTER in only and not args.no_cluster and not args.no_etcd  # its clusters run on etcd
    if args.cluster and args.cluster_groups < 2:
        ap.error("--cluster-groups: at least 2 (the comparison is groups = 1 vs groups = N)")
    if not args.servers and not args.cluster:
        ap.error("no server left to benchmark")
    if not args.servers:  # the cluster alone: none of the single-server sections
        args.no_tail = args.no_metrics = args.no_client = args.no_create = args.no_memory = True
        args.no_flood = args.no_million = True


def start(targets: Targets, name: str) -> Target:
    try:
        return targets.start(name)
    except (AssertionError, OSError) as e:  # say which one and how to leave it out, not a traceback
        hint = " (leave it out with --no-etcd)" if name == "etcd" else ""
        lines = str(e).splitlines() or [repr(e)]
        shown = lines if len(lines) <= 20 else [*lines[:3], "...", *lines[-16:]]  # the log's tail says why
        raise SystemExit(f"could not start {name}{hint}: " + "\n".join(shown)) from e


def main() -> None:
    args = parse_args()
    quoted = readme.quoted_figures(ROOT) if args.check_readme else []  # a bad marker fails before any run
    if args.write_readme:  # no block: fail before any run
        text = (ROOT / "README.md").read_text()
        if args.servers:
            readme.replace_block(text, [])
        if args.cluster:
            readme.replace_block(text, [], readme.CLUSTER_BEGIN, readme.CLUSTER_END)

    def on_signal(signum: int, _frame: object) -> NoReturn:
        raise SystemExit(128 + signum)  # unwinds through `finally`, which stops every server

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    started, at_start = time.monotonic(), machine_line()
    busy_at_start = load_warning()

    with tempfile.TemporaryDirectory(prefix="march-bench-") as tmp:
        targets = Targets(Path(tmp))
        try:
            group = [start(targets, name) for name in args.servers]
            print(
                f"{targets.describe() or 'the cluster target alone'}; data under {tmp}; {machine_line()}; "
                f"{args.rounds} rounds of ~{args.seconds:g}s per server and setting, after {args.warmup} warm-up "
                f"run(s) discarded, the order alternating\n{targets.march_config()}",
                flush=True,
            )
            if busy_at_start:
                print(busy_at_start, flush=True)
            bench = Bench(args, targets)
            if args.quick:
                print(f"--quick: one round of {args.seconds:g}s per setting, a smoke test: figures are {NOT_JUDGED}")
            extra: list[str] = []
            sections: list[tuple[str, bool, Callable[[], object]]] = [
                ("INCR, timestamp INCR, INCRBY", bool(group), lambda: bench.main_sections(group)),
                # the tail: redis, march on SQLite, the baseline
                ("tail", not args.no_tail, lambda: bench.tail_section([t for t in group if t.name != "etcd"])),
                ("metrics", not args.no_metrics and "sqlite" in args.servers, bench.metrics_section),
                ("client", not args.no_client, lambda: extra.extend(bench.client_section())),
                # after the others: it leaves the servers holding many keys
                ("creation", not args.no_create, lambda: bench.create_section(group)),
                ("flood", not args.no_flood, lambda: bench.flood_section(group)),
                ("memory", not args.no_memory, bench.memory_section),
                ("1,000,000 sequences", not args.no_million, bench.million_section),
                # last: its six nodes start when the single servers are idle
                ("cluster", args.cluster, lambda: cluster_section(bench)),
            ]
            for name, wanted, section in sections:
                if wanted:
                    began = time.monotonic()
                    section()
                    print(f"({name}: {time.monotonic() - began:.0f}s; {machine_line()})", flush=True)
        except BaseException:
            targets.stop()
            kept = Path(tempfile.mkdtemp(prefix="march-bench-failed-"))
            shutil.copytree(tmp, kept, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.sqlite3*", "member"))
            print(f"bench failed: the servers' logs are kept under {kept}", file=sys.stderr, flush=True)
            raise
        finally:
            targets.stop()
    summary = bench.summary(extra)
    print("\n" + "\n".join(summary + ([] if bench.cluster is None else ["", *bench.cluster.lines()])))
    if args.servers:
        print("\n" + "\n".join(bench.goal_lines()))
    busy_at_end = load_warning()
    print(f"\nat the start: {at_start}; at the end: {machine_line()}")
    for when, warning in (("at the start", busy_at_start), ("at the end", busy_at_end)):
        if warning:
            print(f"{when}: {warning}")
    if args.write_readme:
        write_readme(bench, summary, at_start)
    if args.check_readme:
        print(f"\n== figures the READMEs quote (<!-- bench: ... --> markers), today vs quoted; {machine_line()}")
        print("\n".join(readme.report(quoted, bench.readme_figures())))
    print(f"\nchart: {', '.join(draw_charts(bench))} ({time.monotonic() - started:.0f}s in all)")


def write_readme(bench: Bench, summary: list[str], at_start: str) -> None:
    """README.md's generated blocks of what this run measured: the main one, the cluster one."""
    path = ROOT / "README.md"
    if bench.results:
        path.write_text(readme.replace_block(path.read_text(), bench.readme_block(summary, at_start)))
        print(f"\nREADME.md: the generated block between {readme.BEGIN!r} and {readme.END!r} rewritten")
    if bench.cluster is not None:
        block = clusterbench.readme_block(bench.cluster, at_start, clusterbench.png_path(bench.args.png), ROOT)
        path.write_text(readme.replace_block(path.read_text(), block, readme.CLUSTER_BEGIN, readme.CLUSTER_END))
        print(f"README.md: the cluster block between {readme.CLUSTER_BEGIN!r} and {readme.CLUSTER_END!r} rewritten")


def draw_charts(bench: Bench) -> list[str]:
    """The PNGs of what this run measured; their paths (labelled but the first)."""
    png: Path = bench.args.png
    charts = [str(bench.png(png))] if bench.results else []
    memory = bench.memory_png(png)
    charts += [] if memory is None else [f"memory: {memory}"]
    if bench.cluster_results:
        what = "cluster INCR (march_harness.bench.clusterload)"
        charts.append(f"cluster: {bench.png(clusterbench.png_path(png), bench.cluster_results, what)}")
    return charts


if __name__ == "__main__":
    main()
