"""Benchmark report: redis-server, March on SQLite and March on etcd side by side, same machine,
same run, printed as tables and drawn as a PNG. Run it through scripts/bench.

Every server runs on free loopback ports with throwaway data (March on etcd: a one-member etcd
started here plus one `march serve --etcd` node, used once it is primary). redis-benchmark
drives each setting: a command, `-c` clients, `-P` pipeline depth. Rounds alternate between the
servers (reversing the order every other round) so that drift on the machine hits all alike;
each run is calibrated to about `--seconds`. Per setting: median throughput, the ratio to
redis-server, and p50/p99/p99.9 latency (p99.9 from redis-benchmark's latency-by-percentile
output, see benchlib/redisbench.py).

Sections (each can be skipped):
- `INCR` on one hot key (redis-benchmark's `-t incr`), with the issue's bars for March on SQLite
  at `-c 50` (ratio to Redis >= 0.8 at -P 1, >= 0.5 at -P 16);
- timestamp `INCR` on a snowflake sequence (on redis-server a plain `INCR ts`), then
  `INCRBY ts 1000` at one client count, also as snowflake IDs per second (the issue's bar: more
  than 4,096,000, the most a snowflake library makes on one node);
- metrics on vs off: March on SQLite without and with `--metrics-port`, INCR at -P 1 and -P 16,
  alternated with redis-server, `/metrics` scraped once during the run (bar: on within 5% of off);
- the Python client's prefetching IDs/s in one process (`march_client.bench.prefetch_rate`),
  in a subprocess of its own; skipped if march_client is not installed.

`--check-readme`: the figures the READMEs quote carry a marker `<!-- bench: key value -->`
(`benchlib/readme.py`); this mode measures them all in one run (redis and SQLite, -c 50, -P 1 and
16, the client's two prefetch paths) and prints each one's value today and its ratio to the quote.

Never asserts anything about speed: it measures and reports. Every process it starts is stopped
at the end, also after a failure, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))

from benchlib import readme, redisbench  # noqa: E402
from benchlib.redisbench import INCR, Run  # noqa: E402
from benchlib.targets import Target, Targets, scrape  # noqa: E402

BARS = {1: 0.8, 16: 0.5}  # the acceptance bar for the march/redis throughput ratio (INCR, -c 50)
BAR_CLIENTS = 50  # the client count the bars were set at
SNOWFLAKE_BAR = 4_096_000  # IDs/s: 4096 per millisecond, a snowflake library's ceiling on one node
INCRBY_BATCH = 1000
METRICS_BAR = 0.05  # metrics on may cost at most 5% of the throughput with metrics off
METRICS_ROUNDS = 7  # at least: single rounds vary by about ±5% here, as much as the bar
TS_KEY = "ts"
SERVERS = ("redis", "sqlite", "etcd")
CLIENT_SCRIPT = """
import sys
try:
    from march_client.bench import prefetch_rate
except ImportError:
    sys.exit(3)
print(prefetch_rate(sys.argv[1], sys.argv[2], float(sys.argv[3]), method=sys.argv[4]))
"""
CLIENT_MISSING = 3  # CLIENT_SCRIPT's exit status when march_client is not importable


@dataclass
class Setting:
    title: str  # e.g. "INCR", "timestamp INCR"
    clients: int
    pipeline: int
    commands: dict[str, tuple[str, ...]]  # target name -> the command it runs

    @property
    def label(self) -> str:
        return f"{self.title} -c {self.clients} -P {self.pipeline}"


@dataclass
class Measured:
    setting: Setting
    requests: dict[str, int]
    runs: dict[str, list[Run]] = field(default_factory=dict)

    def median(self, name: str) -> Run:
        rs = self.runs[name]
        return Run(*(statistics.median(getattr(r, f) for r in rs) for f in Run.FIELDS))

    def ratio(self, name: str, to: str = "redis") -> float | None:
        if to not in self.runs or name not in self.runs:
            return None
        return self.median(name).rps / self.median(to).rps


class Bench:
    def __init__(self, args: argparse.Namespace, targets: Targets) -> None:
        self.args = args
        self.targets = targets
        self.results: list[Measured] = []
        self.client_rates: dict[str, float] = {}  # prefetch method -> IDs/s

    def measure(
        self,
        setting: Setting,
        group: list[Target],
        during: dict[str, Callable[[], None]] | None = None,
        rounds: int | None = None,
    ) -> Measured:
        """Calibrate each target, then ``rounds`` rounds alternating between them; print the block."""
        a = self.args
        cmd = setting.commands
        requests = {
            t.name: redisbench.requests_for(t.port, setting.clients, setting.pipeline, a.seconds, cmd[t.name])
            for t in group
        }
        m = Measured(setting, requests, {t.name: [] for t in group})
        hooks = dict(during or {})
        for r in range(rounds or a.rounds):
            for t in group if r % 2 == 0 else list(reversed(group)):
                hook = hooks.pop(t.name, None)
                run = redisbench.run(t.port, setting.clients, setting.pipeline, requests[t.name], cmd[t.name], hook)
                m.runs[t.name].append(run)
        self.print_block(m, group)
        self.results.append(m)
        return m

    def print_block(self, m: Measured, group: list[Target]) -> None:
        s = m.setting
        print(f"\n{s.label}: median of {len(next(iter(m.runs.values())))} rounds", flush=False)
        head = f"  {'server':<26}{'requests':>12}{'rps':>12}{'ratio':>7}{'p50 ms':>9}{'p99 ms':>9}{'p99.9 ms':>9}"
        print(head + "   rounds (rps)")
        for t in group:
            med, ratio = m.median(t.name), m.ratio(t.name)
            each = " ".join(f"{x.rps:.0f}" for x in m.runs[t.name])
            r = "" if ratio is None else f"{ratio:.3f}"
            print(
                f"  {t.label:<26}{m.requests[t.name]:>12,}{med.rps:>12,.0f}{r:>7}"
                f"{med.p50:>9.3f}{med.p99:>9.3f}{med.p999:>9.3f}   {each}"
            )
        for t in group:
            ratio = m.ratio(t.name)
            if not t.is_march or ratio is None:
                continue
            bar = BARS.get(s.pipeline) if (s.commands[t.name] == INCR and s.clients == BAR_CLIENTS) else None
            verdict = (
                "" if bar is None or t.name != "sqlite" else f" (bar >= {bar}: {'met' if ratio >= bar else 'NOT met'})"
            )
            name = "march" if t.name == "sqlite" else t.label  # "march/redis": the line the README quotes
            print(f"  {name}/redis throughput ratio: {ratio:.3f}{verdict}", flush=True)

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
                    verdict = "met" if ids > SNOWFLAKE_BAR else "NOT met"
                    who = "march" if t.name == "sqlite" else t.label
                    print(f"  {who} snowflake IDs/s through INCRBY: {ids:,.0f} (bar > {SNOWFLAKE_BAR:,}: {verdict})")

    def metrics_section(self) -> None:
        """March on SQLite without and with its metrics endpoint, alternated with redis-server."""
        a = self.args
        off = self.targets.started.get("sqlite") or self.targets.start("sqlite")
        on = self.targets.start("sqlite-metrics")
        redis = self.targets.started.get("redis")
        group = [t for t in (redis, off, on) if t is not None]
        print(f"\n== metrics on vs off: {on.label} on :{on.port}, /metrics on :{on.metrics_port}")
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
            m = self.measure(setting, group, hooks, rounds=max(a.rounds, METRICS_ROUNDS))
            # Paired: each round runs off and on back to back, so the median of the per-round ratios
            # cancels the machine's drift between rounds (rounds alone vary by about ±10% here).
            pairs = [b.rps / a_.rps for a_, b in zip(m.runs[off.name], m.runs[on.name], strict=True)]
            rel = statistics.median(pairs) - 1
            verdict = "met" if rel >= -METRICS_BAR else "NOT met"
            r_off, r_on = m.ratio(off.name), m.ratio(on.name)
            to_redis = "" if r_off is None or r_on is None else f"ratio to redis off {r_off:.3f}, on {r_on:.3f}; "
            lines.append(
                f"  -P {p}: {to_redis}on vs off {rel:+.1%}, median of the rounds' on/off ratios "
                f"(bar: on at most {METRICS_BAR:.0%} below off: {verdict})"
            )
        print("\n".join(scraped + lines))

    def client_section(self, method: str = "next") -> str:
        """IDs/s of the Python client's prefetch in one process of its own (not this interpreter);
        ``method``: ``next`` (seq.next(key)) or ``ids`` (next(it) on seq.ids(key)). The rate is kept
        in ``self.client_rates``."""
        target = self.targets.started.get("sqlite") or self.targets.start("sqlite")
        url = f"redis://127.0.0.1:{target.port}"
        seconds = self.args.client_seconds
        try:
            out = subprocess.run(
                [sys.executable, "-c", CLIENT_SCRIPT, url, f"bench:prefetch:{method}", str(seconds), method],
                capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=seconds * 5 + 60, cwd=ROOT,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return "python client, prefetch: FAILED (timed out)"
        if out.returncode == CLIENT_MISSING:
            return "python client, prefetch: skipped: march_client not installed"
        try:
            rate = float(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            tail = (out.stdout + out.stderr).strip().splitlines()[-3:]
            return f"python client, prefetch: FAILED (exit {out.returncode}): {' | '.join(tail)}"
        self.client_rates[method] = rate
        how = "" if method == "next" else ", next(it) on seq.ids(key)"  # seq.next(key): the line the README shows
        return f"python client, prefetch{how}: {rate:,.0f} IDs/s (one Python process, {seconds:g}s, {target.label})"

    def readme_figures(self) -> dict[str, float]:
        """Today's value of every ``benchlib.readme.KEYS`` figure this run measured."""
        out = {f"prefetch.{m}": r for m, r in self.client_rates.items()}
        for m in self.results:
            s = m.setting
            if s.clients != 50 or s.pipeline not in (1, 16):
                continue
            if s.title == "INCR" and (ratio := m.ratio("sqlite")) is not None:
                out[f"incr.c50.p{s.pipeline}.ratio"] = ratio
            if s.title == f"INCRBY ts {INCRBY_BATCH}" and s.pipeline == 1 and "sqlite" in m.runs:
                out["incrby.ts.c50.p1.ids"] = m.median("sqlite").rps * INCRBY_BATCH
        return out

    # -- report --------------------------------------------------------------------------------
    def summary(self, extra: list[str]) -> None:
        labels = [t for t in SERVERS if any(t in m.runs for m in self.results)]
        names = {n: self.targets.started[n].label for n in labels}
        print(f"\n== summary: median rps (ratio to redis-server), p50/p99/p99.9 ms; {self.args.rounds} rounds")
        print(f"{'setting':<28}" + "".join(f"{names[n]:>40}" for n in labels))
        for m in self.results:
            if m.setting.title.startswith("metrics"):
                continue
            cells = []
            for n in labels:
                if n not in m.runs:
                    cells.append(f"{'-':>40}")
                    continue
                med, ratio = m.median(n), m.ratio(n)
                r = f" ({ratio:.2f})" if ratio is not None and n != "redis" else ""
                cells.append(f"{f'{med.rps:,.0f}{r} {med.p50:.2f}/{med.p99:.2f}/{med.p999:.2f}':>40}")
            print(f"{m.setting.label:<28}" + "".join(cells))
        for line in extra:
            print(line)

    def png(self, path: Path) -> Path:
        from benchlib.charts import BenchRow, bench_png

        rows = [
            BenchRow(m.setting.label, self.targets.started[n].label, med.rps, med.p50, med.p99, med.p999)
            for m in self.results
            for n in m.runs
            for med in [m.median(n)]
        ]
        title = (
            f"redis-benchmark, {os.cpu_count()} CPUs, medians of {self.args.rounds} rounds of ~{self.args.seconds:g}s"
        )
        return bench_png(rows, path, title)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds per server and setting (default 3)")
    ap.add_argument("--seconds", type=float, default=1.0, help="target length of one run (default 1)")
    ap.add_argument("--clients", default="1,50,200", help="comma-separated -c values (default 1,50,200)")
    ap.add_argument("--pipelines", default="1,16", help="comma-separated -P values (default 1,16)")
    ap.add_argument("--incrby-clients", type=int, default=50, help="-c of the INCRBY runs (default 50)")
    ap.add_argument("--metrics-clients", type=int, default=50, help="-c of the metrics on/off runs (default 50)")
    ap.add_argument("--client-seconds", type=float, default=3.0, help="length of the client prefetch run (default 3)")
    ap.add_argument("--only", default=",".join(SERVERS), help="servers to compare (default redis,sqlite,etcd)")
    ap.add_argument("--no-etcd", action="store_true", help="leave March on etcd out")
    ap.add_argument("--no-timestamp", action="store_true", help="skip the timestamp-key runs")
    ap.add_argument("--no-metrics", action="store_true", help="skip metrics on vs off")
    ap.add_argument("--no-client", action="store_true", help="skip the Python client's prefetch rate")
    ap.add_argument("--png", type=Path, default=Path("bench.png"), help="the chart (default bench.png)")
    ap.add_argument(
        "--quick", action="store_true", help="a smoke run (~25 s): 1 round of 0.25 s, -c 50, client for 0.5 s"
    )
    ap.add_argument(
        "--check-readme",
        action="store_true",
        help="re-measure every figure the READMEs quote (their <!-- bench: key value --> markers) in one run "
        "and print today's value and its ratio to the quote: redis and sqlite, -c 50, -P 1,16, no metrics",
    )
    args = ap.parse_args()
    if args.check_readme:
        # The settings the quoted figures were measured at (2 s rounds: INCRBY's IDs/s depend on the length).
        args.only, args.clients, args.pipelines, args.no_metrics = "redis,sqlite", "50", "1,16", True
        args.seconds = 2.0
    if args.quick:
        args.rounds, args.seconds, args.clients, args.client_seconds = 1, 0.25, "50", 0.5
    args.clients = [int(c) for c in str(args.clients).split(",")]
    args.pipelines = [int(p) for p in args.pipelines.split(",")]
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in SERVERS]
    if unknown:
        ap.error(f"--only: unknown server(s) {unknown}; choose from {list(SERVERS)}")
    args.servers = [s for s in SERVERS if s in only and not (s == "etcd" and args.no_etcd)]
    if not args.servers:
        ap.error("no server left to benchmark")
    return args


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

    def on_signal(signum: int, _frame: object) -> NoReturn:
        raise SystemExit(128 + signum)  # unwinds through `finally`, which stops every server

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    started = time.monotonic()

    with tempfile.TemporaryDirectory(prefix="march-bench-") as tmp:
        targets = Targets(Path(tmp))
        try:
            group = [start(targets, name) for name in args.servers]
            print(
                f"{targets.describe()}; data under {tmp}; {os.cpu_count()} CPUs; "
                f"{args.rounds} rounds of ~{args.seconds:g}s per server and setting",
                flush=True,
            )
            bench = Bench(args, targets)
            bench.main_sections(group)
            if not args.no_metrics and "sqlite" in args.servers:
                bench.metrics_section()
            extra = [] if args.no_client else [bench.client_section()]
            if args.check_readme and not args.no_client:
                extra.append(bench.client_section("ids"))
        except BaseException:
            targets.stop()
            kept = Path(tempfile.mkdtemp(prefix="march-bench-failed-"))
            shutil.copytree(tmp, kept, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.sqlite3*", "member"))
            print(f"bench failed: the servers' logs are kept under {kept}", file=sys.stderr, flush=True)
            raise
        finally:
            targets.stop()
    bench.summary(extra)
    if args.check_readme:
        load = "/".join(f"{x:.2f}" for x in os.getloadavg())  # a busy shared machine explains a low ratio
        print(
            f"\n== figures the READMEs quote (<!-- bench: ... --> markers), today vs quoted; "
            f"{os.cpu_count()} CPUs, load average {load} (1/5/15 min)"
        )
        print("\n".join(readme.report(quoted, bench.readme_figures())))
    path = bench.png(args.png)
    print(f"\nchart: {path} ({time.monotonic() - started:.0f}s in all)")


if __name__ == "__main__":
    main()
