"""The cost of one request, not its speed: instructions per read under callgrind, and a server's CPU
per request under redis-benchmark. What chose the compiled per-read path's tool and measures it
(docs/compiled.md); both hold on a shared machine, where requests per second do not.

    python -m march_harness.bench.percpu reads [--what march,parse,hiredis,baseline] [--pipeline 1,16]
    python -m march_harness.bench.percpu cpu [--rounds 5] [--settings 50x16,50x1]

``reads``: for each case and pipeline depth, this module runs itself twice under ``valgrind
--tool=callgrind`` (``--reads`` reads, then a tenth of them; everything else, start-up included,
the same) and prints the difference divided by the difference in reads: the instructions one read
of ``--pipeline`` requests ``INCR k`` costs, interpreter, allocator and garbage collector included.
The cases: ``march`` (``Connection.data_received`` on a real node: SQLite in a temporary directory,
a batch large enough that no store write happens in the run, a transport whose ``write`` is a C
method), ``parse`` (``RequestParser.feed`` alone), ``hiredis`` (its ``Reader.feed`` + ``gets``: the
floor of a parse), ``baseline`` (the Python baseline's ``data_received``). Which build ran is what
``import march`` chose (``MARCH_PURE_PYTHON=1``: the interpreted one); each line says it.

``cpu``: redis-server, the Python baseline, March compiled and March as pure Python (single node,
SQLite, default settings), warmed, then ``redis-benchmark -t incr -c C -P P`` against each in turn,
the order reversed every other round; a server's CPU (``utime + stime`` from ``/proc/<pid>/stat``)
over its run divided by its requests, its requests per second and p99. Medians and spread per
setting, the load average, one JSON line at the end.

Never asserts anything about speed: it measures and prints. Every process it starts is stopped;
everything it sends goes to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from march_harness.bench.targets import BaselineServer
from march_harness.servers import REPO_ROOT, MarchServer, RedisServer, _Process

REQUEST = b"*2\r\n$4\r\nINCR\r\n$1\r\nk\r\n"
CASES = ("march", "parse", "hiredis", "baseline")
_TOTALS = re.compile(rb"^(?:summary|totals): (\d+)", re.M)
_TICK = os.sysconf("SC_CLK_TCK")
_MODULE = "march_harness.bench.percpu"  # run under valgrind with python -m


class Sink:
    """A transport that keeps only the last write (``write`` is a C method: it costs nothing of ours)."""

    def __init__(self) -> None:
        self.last: collections.deque[bytes] = collections.deque(maxlen=1)
        self.write = self.last.append
        self.get_write_buffer_size = int  # int() is 0: nothing is ever unsent

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 50000) if name in ("peername", "sockname") else default

    def is_reading(self) -> bool:
        return True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


async def _march(reads: int, pipeline: int) -> str:
    from march import build, config
    from march.app import App
    from march.commands import call
    from march.commands.table import COMMANDS, HOT
    from march.node import Node
    from march.resp import RequestParser
    from march.transport.connection import Connection, Connections

    with tempfile.TemporaryDirectory() as tmp:
        # One batch for the whole run: no store write, no wait (what this counts is the read's own work).
        cfg = config.load(None, {}, {"data_dir": tmp, "min_batch": 10**9, "max_batch": 10**9})
        node = Node(cfg, COMMANDS)
        await node.open()
        try:
            app = App(cfg, node, HOT, call)
            conn = Connection(app, Connections(app, RequestParser))
            sink = Sink()
            conn.connection_made(sink)  # type: ignore[arg-type]
            conn.data_received(REQUEST)  # creates k: it waits for the store
            for _ in range(1000):
                if not conn.busy:
                    break
                await asyncio.sleep(0.01)
            data = REQUEST * pipeline
            receive = conn.data_received
            for _ in range(reads):
                receive(data)
            assert sink.last[-1].endswith(b":%d\r\n" % (1 + reads * pipeline)), sink.last
            conn.connection_lost(None)
        finally:
            await node.stop()
    return build.summary()


def _parse(reads: int, pipeline: int) -> str:
    from march import build
    from march.resp import RequestParser

    feed = RequestParser(1024, 512 << 20, 64 << 10).feed
    data = REQUEST * pipeline
    for _ in range(reads):
        feed(data)
    return build.summary()


def _hiredis(reads: int, pipeline: int) -> str:
    import hiredis

    reader = hiredis.Reader()
    feed, gets = reader.feed, reader.gets
    data = REQUEST * pipeline
    for _ in range(reads):
        feed(data)
        while gets() is not False:
            pass
    return "hiredis " + hiredis.__version__


def _baseline(reads: int, pipeline: int) -> str:
    from march_harness.bench.baseline_server import Floor

    conn = Floor()
    conn.connection_made(Sink())  # type: ignore[arg-type]
    receive = conn.data_received
    data = REQUEST * pipeline
    for _ in range(reads):
        receive(data)
    return "baseline"


def _inner(what: str, reads: int, pipeline: int) -> str:
    """The case itself (under valgrind): which build ran."""
    if what == "march":
        import uvloop

        return uvloop.run(_march(reads, pipeline))
    return {"parse": _parse, "hiredis": _hiredis, "baseline": _baseline}[what](reads, pipeline)


def _instructions(what: str, reads: int, pipeline: int) -> tuple[int, str]:
    """Instructions the whole process ran (callgrind's total) and the build it reported."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-m", _MODULE]
        cmd += ["inner", what, str(reads), str(pipeline)]
        done = subprocess.run(cmd, env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True, check=True)
        totals = _TOTALS.search(out.read_bytes())
        assert totals is not None, "no totals in callgrind's output"
        return int(totals.group(1)), done.stdout.decode().strip().splitlines()[-1]


def per_read(what: str, reads: int, pipeline: int) -> dict[str, object]:
    """Instructions per read of ``pipeline`` INCRs for case ``what`` (see the module docstring)."""
    few = max(1, reads // 10)
    small, _ = _instructions(what, few, pipeline)
    large, build = _instructions(what, reads, pipeline)
    each = (large - small) / (reads - few)
    return {
        "what": what,
        "pipeline": pipeline,
        "build": build,
        "instructions_per_read": round(each),
        "instructions_per_request": round(each / pipeline),
    }


class _March(MarchServer):
    """A single node, compiled or (``pure``) as pure Python, whatever the caller's environment says."""

    def __init__(self, base: Path, pure: bool) -> None:
        super().__init__(base / "data", log_path=base / "march.log")
        self.pure = pure

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env.pop("MARCH_PURE_PYTHON", None)
        if self.pure:
            env["MARCH_PURE_PYTHON"] = "1"
        return env


def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid``, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # fields 14 and 15 of proc(5), after "pid (comm)"


def benchmark(port: int, clients: int, pipeline: int, requests: int) -> tuple[float, float]:
    """Run redis-benchmark -t incr against 127.0.0.1:``port``: its requests per second and p99 (ms)."""
    argv = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t", "incr", "-c", str(clients)]
    argv += ["-P", str(pipeline), "-n", str(requests), "--csv"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=True).stdout
    row = out.strip().splitlines()[-1].replace('"', "").split(",")  # INCR,rps,avg,min,p50,p95,p99,max
    return float(row[1]), float(row[6])


def cpu_per_request(rounds: int, settings: list[tuple[int, int, int]]) -> dict[str, object]:
    """``settings``: (clients, pipeline, requests). Prints a table per setting; returns everything."""
    results: dict[str, dict[str, list[tuple[float, float, float]]]] = {}
    with tempfile.TemporaryDirectory(prefix="percpu-") as tmp:
        base = Path(tmp)
        servers: dict[str, _Process] = {
            "redis-server": RedisServer(base / "redis"),
            "baseline": BaselineServer(base / "baseline"),
            "march compiled": _March(base / "compiled", pure=False),
            "march pure": _March(base / "pure", pure=True),
        }
        try:
            for s in servers.values():
                s.start()
            for name, s in servers.items():  # warm-up: the key exists, its batch has grown
                benchmark(s.port, 50, 16, 200_000)
                print(f"warmed {name} (pid {s.pid})", flush=True)
            for clients, pipeline, n in settings:
                key = f"-c {clients} -P {pipeline}"
                results[key] = {name: [] for name in servers}
                for r in range(rounds):
                    order = list(servers.items()) if r % 2 == 0 else list(reversed(servers.items()))
                    for name, s in order:
                        before = cpu_seconds(s.pid)
                        rps, p99 = benchmark(s.port, clients, pipeline, n)
                        results[key][name].append(((cpu_seconds(s.pid) - before) / n * 1e6, rps, p99))
                    print(f"{key} round {r + 1}: load {os.getloadavg()[0]:.1f}", flush=True)
                print(f"\nredis-benchmark -t incr {key} -n {n}, {rounds} rounds")
                print(
                    f"{'server':16} {'CPU µs/request (median, min-max)':34} {'requests/s (median)':>20} {'p99 ms':>8}"
                )
                for name, runs in results[key].items():
                    cpu = [c for c, _, _ in runs]
                    spread = f"{statistics.median(cpu):8.2f} ({min(cpu):.2f}-{max(cpu):.2f})"
                    rps = statistics.median(r for _, r, _ in runs)
                    print(f"{name:16} {spread:34} {rps:>20,.0f} {statistics.median(p for _, _, p in runs):>8.2f}")
                print(flush=True)
        finally:
            for s in servers.values():
                s.stop()
    return {"load": os.getloadavg(), "results": results}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "inner":
        print(_inner(args[1], int(args[2]), int(args[3])))
        return
    parser = argparse.ArgumentParser(prog="python -m march_harness.bench.percpu", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="kind", required=True)
    reads = sub.add_parser("reads", help="instructions per read (callgrind)")
    reads.add_argument("--what", default=",".join(CASES), help="cases, comma-separated: " + ", ".join(CASES))
    reads.add_argument("--pipeline", default="1,16", help="requests per read, comma-separated")
    reads.add_argument("--reads", type=int, default=4000)
    cpu = sub.add_parser("cpu", help="server CPU per request (redis-benchmark)")
    cpu.add_argument("--rounds", type=int, default=5)
    cpu.add_argument("--settings", default="50x16,50x1", help="CxP, comma-separated")
    cpu.add_argument("--requests", default="2000000,300000", help="-n per setting, comma-separated")
    a = parser.parse_args(args)
    os.chdir(REPO_ROOT)
    if a.kind == "reads":
        for what in a.what.split(","):
            for p in (int(x) for x in a.pipeline.split(",")):
                print(json.dumps(per_read(what, a.reads, p)), flush=True)
    else:
        shapes = [tuple(int(x) for x in s.split("x")) for s in a.settings.split(",")]
        counts = [int(n) for n in a.requests.split(",")]
        settings = [(c, p, n) for (c, p), n in zip(shapes, counts, strict=True)]
        print(json.dumps(cpu_per_request(a.rounds, settings)))


if __name__ == "__main__":
    main()
