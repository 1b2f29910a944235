"""A flood of cheap pipelined commands from many connections, and connections that never read their
replies, for the fairness tests (one client's flood must cost the others nothing beyond its share:
issue 27). It runs in processes of its own, never in the test's.

``Flood`` (a context manager) starts, on 127.0.0.1:
- two ``redis-benchmark`` processes (C clients: a flood the server, not the client, is the limit of),
  ``pipelined`` connections between them, each pipelining ``depth`` requests at a time: DBSIZE in
  one, ``SCAN 0 COUNT 10`` in the other, reading every reply;
- ``python -m march_harness.flood --port P --unread N``: N connections sending ``KEYS *`` over and
  over and never reading a reply (their output piles up to the server's output limit; a connection
  the server closes for it is opened again).

Bounded in count (``-n``) and time (``seconds``, then SIGTERM); everything is stopped on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from types import TracebackType
from typing import Any

from march_harness.resp import encode

UNREAD = encode("KEYS", "*")
_MODULE = "march_harness.flood"  # python -m
_REQUESTS = 1_000_000_000  # redis-benchmark's -n: the bound is the time (``seconds``), not this


async def _unread(port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        try:
            while time.monotonic() < deadline:
                writer.write(UNREAD * 16)
                try:
                    await asyncio.wait_for(writer.drain(), 0.5)
                except TimeoutError:  # the server stopped reading it: what this connection is for
                    await asyncio.sleep(0.05)
                else:
                    await asyncio.sleep(0.01)
        except ConnectionError:
            pass  # closed by the server past its output limit: also what this connection may get
        finally:
            writer.transport.abort()


async def unread(port: int, connections: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    tasks = [asyncio.ensure_future(_unread(port, deadline)) for _ in range(connections)]
    print("flooding", flush=True)
    told: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    together: asyncio.Future[Any] = asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.wait([together, told], return_when=asyncio.FIRST_COMPLETED)
    told.cancel()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, told, return_exceptions=True)


class Flood:
    """The flood of the module docstring: started on entry (once every part runs), stopped on exit."""

    def __init__(self, port: int, pipelined: int = 20, unread: int = 2, depth: int = 1000, seconds: float = 60) -> None:
        common = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-P", str(depth), "-n", str(_REQUESTS)]
        half = max(1, pipelined // 2)
        self.argvs = [
            [*common, "-c", str(half), "-q", "DBSIZE"],
            [*common, "-c", str(max(1, pipelined - half)), "-q", "SCAN", "0", "COUNT", "10"],
        ]
        self.unread = [sys.executable, "-m", _MODULE, "--port", str(port), "--unread", str(unread)]
        self.unread += ["--seconds", str(seconds)]
        self.seconds = seconds
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Flood:
        try:
            for argv in self.argvs:
                self.procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            proc = subprocess.Popen(self.unread, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
            self.procs.append(proc)
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == b"flooding"
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def running(self) -> bool:
        """Every part of the flood still runs (none ended early: refused, or out of time)."""
        return all(p.poll() is None for p in self.procs)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="connections that send KEYS * and never read a reply")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--unread", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10)
    a = parser.parse_args()
    asyncio.run(unread(a.port, a.unread, a.seconds))


if __name__ == "__main__":
    main()
