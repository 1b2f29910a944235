"""Fault drills against a local March cluster: its own etcd and three march nodes on free loopback
ports, throwaway data. For each drill: a live timeline (one line per ~0.5 s: ops/s, errors, which
node says it is primary), then a summary (failover time, error window, longest request delay,
duplicates, order violations) next to the issue's bars, and a PNG of the run (`--out-dir`,
`<drill>-<rep>.png`): IDs/s, errors and latency per 100 ms with the fault and the recovery marked.
The chart is drawn afterwards from the histories the load records anyway, so it costs the load
nothing. Run it through scripts/drill.

The drills are the ones tests/cluster/test_cluster_drills.py runs (harness/march_harness/drills.py), and the
race drills (``race-node-id``, ``race-failover``: ``--rounds`` rounds each, 100 by default) whose
short versions tests/cluster/test_races.py runs, and ``race-acl`` (two nodes changing one user at once:
a revoked password or a deleted user must never come back; tests/access/test_acl_race.py, run here
with ``--rounds`` rounds through pytest); here the timing bars are checked strictly: the
exit status is 0 only if every repetition had no violation and met every bar (`--bars-advisory`:
no violation is enough; the suite runs the report so, since it never judges speed).

``sigterm`` (issue 25): ``--rounds`` rounds (50 by default) of a SIGTERM at a random moment around a
change of the layout (before it, while a node steps down, during its restart in the same process,
after it; every fourth round on a node SIGSTOPped across the change), under load: each must end
its node with the orderly stop and exit status 0 (tests/cluster/test_groups_change.py runs six).

The partition drills (issue 25) cut nodes off with real network rules: etcd and every node run
in a network namespace of their own, joined by veth pairs to a bridge (``march_harness.netns``; root and
``ip netns`` needed, else they are reported as not run). ``partition-primary``: the primary cut
from etcd; ``partition-standby``: a standby cut from etcd; ``partition-all``: the primary cut from
everything (etcd, the other nodes, the clients); ``partition-flap``: the primary cut from etcd for
2-4 s and healed for 0.3-1 s, again and again for 30 s. Each faulted group's longest gap between
IDs must stay within TTL + 1 s. Every namespace, link and rule is removed when the drill ends,
whatever happened (and what a killed run left behind is removed at the next start).

``--groups N`` (issue 17) runs the drills on a cluster of N leadership groups (``march serve
--groups N`` on every node): the faulted node is the one leading the most groups, and each
summary adds one line per group (IDs, errors, longest gap between IDs, when a faulted group
resumed, duplicates, order violations) and the bars "faulted groups resume within TTL + 1 s",
"every other group's longest gap within 50 ms". ``rebalance`` (a fourth node joins under load and
leaves again) runs with any N; ``takeover`` and the race drills only with one group.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

from march_harness import REPO_ROOT as ROOT
from march_harness.drills import (
    DRILLS,
    GROUP_DRILLS,
    LAYOUTS,
    PARTITION_DRILLS,
    TAKEOVER_NAME_LEN,
    TAKEOVER_SEQUENCES,
    DrillEnv,
    DrillResult,
)
from march_harness.netns import sweep, unavailable
from march_harness.races import RACE_ROUNDS
from march_harness.stops import SIGTERM_ROUNDS


def say(line: str) -> None:
    print(line, flush=True)


def first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [repr(e)])[0]


def brief(e: BaseException, lines: int = 40) -> str:
    """An error with the logs it carries cut to their last lines (the full logs stay on disk)."""
    text = str(e).splitlines()
    return "\n".join(text if len(text) <= lines else [*text[:5], "...", *text[-(lines - 6) :]])


def chart(result: DrillResult, name: str, out_dir: Path, ttl: int) -> str:
    """Draw one repetition's PNG; a drawing problem is reported, never fails the drill."""
    try:
        from march_harness.bench.charts import drill_png

        verdict = "FAILED" if result.violations else "OK"
        title = f"{result.drill} #{result.rep} ({verdict}, lease TTL {ttl}s): {result.figures.line()}"
        path = drill_png(result.series(), out_dir / f"{name}-{result.rep}.png", _wrap(title))
        return str(path)
    except Exception as e:  # matplotlib missing or a plotting bug: the drill's verdict stands
        return f"not drawn ({type(e).__name__}: {first_line(e)})"


def _wrap(title: str, width: int = 110) -> str:
    words, lines = title.split(" "), [""]
    for w in words:
        if lines[-1] and len(lines[-1]) + len(w) + 1 > width:
            lines.append("")
        lines[-1] = f"{lines[-1]} {w}".strip()
    return "\n".join(lines)


# Races whose rounds live in a test module (they need that module's fixtures): run here with
# ``--rounds`` rounds each through pytest, which prints what a failed round saw.
SUITE_RACES = {"race-acl": "tests/access/test_acl_race.py"}


def run_suite_race(name: str, rounds: int) -> bool:
    env = {**os.environ, "MARCH_ACL_RACE_ROUNDS": str(rounds)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", SUITE_RACES[name]]
    return subprocess.run(cmd, cwd=ROOT, env=env, check=False).returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("drills", nargs="*", metavar="DRILL", help=f"which drills (default all): {', '.join(DRILLS)}")
    ap.add_argument("--reps", type=int, default=2, help="repetitions of each drill (default 2)")
    ap.add_argument("--ttl", type=int, default=3, help="lease TTL in whole seconds (default 3, march's default)")
    ap.add_argument(
        "--rate", type=float, default=None, help="INCRs per second per client (default: as fast as it goes)"
    )
    ap.add_argument("--ops", type=int, default=2000, help="successful INCRs before each fault and after recovery")
    ap.add_argument(
        "--sequences", type=int, default=TAKEOVER_SEQUENCES, help="sequences the takeover drill seeds (default 15000)"
    )
    ap.add_argument("--name-len", type=int, default=TAKEOVER_NAME_LEN, help="bytes per seeded name (default 200)")
    ap.add_argument(
        "--rounds",
        type=int,
        default=None,
        help=f"rounds of each race drill (default {RACE_ROUNDS}) and of the sigterm drill (default {SIGTERM_ROUNDS})",
    )
    ap.add_argument(
        "--groups",
        type=int,
        default=1,
        help=f"leadership groups of the drill cluster (default 1; with more: the drills {', '.join(GROUP_DRILLS)})",
    )
    ap.add_argument("--keep", action="store_true", help="keep the logs and data (kept anyway after a failure)")
    ap.add_argument("--quiet", action="store_true", help="no live timeline, summaries only")
    ap.add_argument(
        "--out-dir", type=Path, default=Path("drill-report"), help="where the PNGs go (default ./drill-report)"
    )
    ap.add_argument("--no-png", action="store_true", help="no charts")
    ap.add_argument(
        "--bars-advisory",
        action="store_true",
        help="exit 0 when only a timing bar is missed (duplicates and order violations still fail): "
        "for the suite's run of the report, which never judges speed on a shared machine",
    )
    args = ap.parse_args()
    unknown = [d for d in args.drills if d not in DRILLS and d not in SUITE_RACES]
    if unknown:
        ap.error(f"unknown drill(s) {unknown}; choose from {[*DRILLS, *SUITE_RACES]}")
    if args.groups > 1:
        single = [d for d in args.drills if d not in GROUP_DRILLS]
        if single:
            ap.error(f"{single} run with one group only; with --groups choose from {list(GROUP_DRILLS)}")
    wanted = args.drills or ([*DRILLS, *SUITE_RACES] if args.groups == 1 else list(GROUP_DRILLS))
    chosen = [d for d in wanted if d in DRILLS]
    if any(d in PARTITION_DRILLS for d in chosen) and not unavailable():
        left = sweep()  # namespaces and links of runs that died without cleaning up
        if left:
            say(f"removed what earlier drill runs left behind: {', '.join(left)}")
    suite_races = [d for d in wanted if d in SUITE_RACES]

    def on_signal(signum: int, _frame: object) -> NoReturn:
        raise SystemExit(128 + signum)  # unwinds through `finally`, which stops every process

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    results: list[DrillResult] = []
    failed: list[str] = []
    started = time.monotonic()

    # One environment per layout, each started once and stopped before the next.
    def layout(d: str) -> tuple[int, bool, bool]:
        return (*LAYOUTS[d], d in PARTITION_DRILLS)

    layouts = list(dict.fromkeys(layout(d) for d in chosen))
    tmp = tempfile.mkdtemp(prefix="march-drill-")
    try:
        for members, proxies, netns in layouts:
            names = [d for d in chosen if layout(d) == (members, proxies, netns)]
            if netns and unavailable():
                failed.append(f"{', '.join(names)}: no real partitions here ({unavailable()})")
                say(f"cannot run {names}: {unavailable()}")
                continue
            base = Path(tmp) / f"etcd{members}{'-proxied' if proxies else ''}{'-netns' if netns else ''}"
            env = DrillEnv(
                base, etcd_members=members, proxies=proxies, lease_ttl=args.ttl, rate=args.rate,
                warmup_ops=args.ops, hold_ops=args.ops, out=None if args.quiet else say,
                sequences=args.sequences, name_len=args.name_len, rounds=args.rounds, groups=args.groups,
                netns=netns,
            )  # fmt: skip
            try:
                try:
                    env.start()
                except (AssertionError, OSError) as e:
                    failed.append(f"starting etcd + march ({members} etcd members): {first_line(e)}")
                    say(f"could not start the cluster: {brief(e)}")
                    continue
                say(
                    f"== etcd: {members} member(s) at {env.etcd.endpoints}"
                    f"{' (each node through its own TCP proxy)' if proxies else ''}"
                    + (f" (each process in a network namespace: {env.lab.describe()})" if env.lab else "")
                    + "; march nodes "
                    + ", ".join(f"{n.node_id} {n.address}" for n in env.cluster.nodes)
                    + f"; {args.groups} leadership group(s); lease TTL {args.ttl}s; logs under {base}"
                )
                for name in names:
                    for rep in range(args.reps):
                        say(f"-- {name} #{rep}")
                        try:
                            result = DRILLS[name](env, rep)
                        except AssertionError as e:  # the cluster did not recover in time: say what was seen
                            failed.append(f"{name} #{rep}: {first_line(e)}")
                            say(f"{name} #{rep}: DID NOT RECOVER: {brief(e)}")
                            break
                        results.append(result)
                        say(result.summary())
                        if not args.no_png:
                            say(f"  chart: {chart(result, name, args.out_dir, args.ttl)}")
            finally:
                env.stop()
        for name in suite_races:
            rounds = args.rounds or RACE_ROUNDS
            say(f"-- {name}: {rounds} rounds ({SUITE_RACES[name]}, its own three-node cluster)")
            if not run_suite_race(name, rounds):
                failed.append(f"{name}: a round broke an invariant (output above)")
    finally:
        bad = failed or any(
            r.violations or (not args.bars_advisory and not all(b.met for b in r.bars)) for r in results
        )
        if bad or args.keep:
            say(f"logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    say(f"\n== summary ({time.monotonic() - started:.0f}s, lease TTL {args.ttl}s, {args.groups} group(s))")
    for r in results:
        misses = [b.name for b in r.bars if not b.met]
        verdict = "FAILED" if r.violations else ("bar missed: " + ", ".join(misses) if misses else "ok")
        say(f"{r.drill + ' #' + str(r.rep):<40} {r.figures.line()}  [{verdict}]")
        if args.groups > 1:
            for g in r.figures.groups:
                say(f"    {g.line()}")
    for f in failed:
        say(f"{f}  [FAILED]")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
