"""The abuse soak (harness/march_harness/soak.py) as a script: a fresh etcd and three march nodes on free
loopback ports, throwaway data; prints the report (well-behaved clients' latency outside the
failover window, RSS per node, what each abuser did, the history checker's verdict) and draws
``soak.png`` in ``--out-dir``. Exit status 0 only when the checker found nothing and no grant
reached further than its table; the latency goal (< 50 ms) is reported, not enforced (a loaded
2-core machine is no benchmark). Run it through scripts/soak.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

from march_harness.etcd import EtcdCluster
from march_harness.soak import SoakConfig, run_soak


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=SoakConfig.seconds, help="length of the soak (default 180)")
    ap.add_argument("--short", action="store_true", help="the suite's short sizes (fewer clients, users, names)")
    ap.add_argument("--no-kill", action="store_true", help="no kill -9 of the primary")
    ap.add_argument("--out-dir", type=Path, default=Path("drill-report"), help="where soak.png goes")
    ap.add_argument("--keep", action="store_true", help="keep the logs and data (kept anyway after a failure)")
    args = ap.parse_args()

    def on_signal(signum: int, _frame: object) -> NoReturn:
        raise SystemExit(128 + signum)  # unwinds through `finally`, which stops every process

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    cfg = SoakConfig.short() if args.short else SoakConfig()
    cfg = dataclasses.replace(cfg, seconds=args.seconds, kill=not args.no_kill)
    tmp = Path(tempfile.mkdtemp(prefix="march-soak-"))
    ok = False
    began = time.monotonic()
    try:
        with EtcdCluster(tmp / "etcd") as etcd:
            report = run_soak(tmp / "cluster", etcd, cfg, say=lambda line: print(line, flush=True))
        print()
        for line in report.lines():
            print(line)
        ok = not (report.duplicates or report.order_violations or report.breaches or report.ops == 0)
        try:
            from march_harness.bench.charts import soak_png

            path = soak_png(
                report.series, report.rss_series, report.started_mono, args.out_dir / "soak.png",
                f"soak {cfg.seconds:.0f} s: p99 {report.p99 * 1000:.1f} ms, worst {report.worst * 1000:.1f} ms "
                f"outside the failover window; {report.duplicates} duplicates, "
                f"{report.order_violations} order violations",
            )  # fmt: skip
            print(f"chart: {path}")
        except Exception as e:  # matplotlib missing or a plotting bug: the verdict stands
            print(f"chart not drawn ({type(e).__name__}: {e})")
        print(f"{'OK' if ok else 'FAILED'} in {time.monotonic() - began:.0f} s")
    finally:
        if ok and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"logs and data kept in {tmp}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
