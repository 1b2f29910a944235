"""New-key INCR latency while 20 connections flood a server with cheap commands: issue 27's row
"new-key INCR p99 while 20 connections flood DBSIZE / SCAN / unread KEYS".

The server is given `SEQUENCES` names first (`prefill`). A flood (`Flood`, in a process of its own
so that its threads never hold the measuring process' GIL) then runs 20 connections: 7 send DBSIZE
in a loop, 7 send SCAN with cursors the server never handed out (random, huge, in range) in a loop,
each reading its replies, and 6 send `KEYS_UNREAD` KEYS listing every name and never read a byte.
Once every flooder has had replies, one client (`new_key_latency`, in this process) sends INCR on
names that do not exist yet, one round trip each, and times each from send to reply: on March each
is a sequence creation, durable before its reply. The flood stops when that ends.

The flood's process is started with multiprocessing's "spawn": a script that uses `Flood` runs its
work under `if __name__ == "__main__":` (scripts/bench.py does). `MIX` is the row's mix of
connections; another mix (e.g. only the unread KEYS) is how docs/performance.md found which part
sets the p99.

Everything goes to 127.0.0.1 on the port given (a server the caller started); every loop is bounded
in count and time (`FLOOD_LIMIT`); the flood's process is stopped, and killed if it does not stop,
whatever happened. Never asserts a speed: it measures and returns.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import random
import socket
import threading
import time
import uuid
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event

from march_harness.bench.redisbench import Auth, Run
from march_harness.resp import RespConn, encode

SEQUENCES = 20_000  # names the listings go over (the size the fairness test uses)
DBSIZE_CLIENTS, SCAN_CLIENTS, KEYS_CLIENTS = 7, 7, 6  # 20 flooding connections, as the row
MIX = (DBSIZE_CLIENTS, SCAN_CLIENTS, KEYS_CLIENTS)  # a flood's connections of each kind (another mix: a profile's)
KEYS_UNREAD = 12  # KEYS each never-reading client sends (each lists every name)
PREFIX = "flood:"
FLOOD_LIMIT = 300.0  # seconds: the flood stops by itself after this, whatever the caller does
READY_TIMEOUT = 60.0  # until every flooder has had replies
MEASURE_LIMIT = 120.0  # seconds: the new-key requests stop after this even if not all were sent
CHUNK = 1000  # INCRs per pipelined round trip of the prefill
JOIN_GRACE = 3.0  # seconds, all threads together, for the flooders to finish their last call on stop


def _auth(conn: RespConn, auth: Auth | None) -> None:
    if auth is not None:
        reply = conn.call("AUTH", auth.user, auth.password)
        if reply != "OK":
            raise RuntimeError(f"AUTH as {auth.user}: {reply!r}")


def prefill(port: int, auth: Auth | None, sequences: int = SEQUENCES) -> None:
    """INCR ``sequences`` names once each (pipelined): what the listings go over."""
    with RespConn(port, timeout=120) as conn:
        _auth(conn, auth)
        for at in range(0, sequences, CHUNK):
            names = [f"{PREFIX}{i:06d}" for i in range(at, min(sequences, at + CHUNK))]
            conn.send(b"".join(encode("INCR", n) for n in names))
            replies = [conn.read_reply() for _ in names]
            bad = [r for r in replies if not isinstance(r, int)]
            if bad:
                raise RuntimeError(f"prefill: INCR answered {bad[0]!r}")


def _loop(
    port: int, auth: Auth | None, kind: str, stop: threading.Event, done: list[int], i: int, sequences: int
) -> None:
    rng = random.Random(i)
    end = time.monotonic() + FLOOD_LIMIT
    with contextlib.suppress(OSError, RuntimeError), RespConn(port, timeout=60) as conn:
        _auth(conn, auth)
        while not stop.is_set() and time.monotonic() < end:
            if kind == "DBSIZE":
                conn.call("DBSIZE")
            else:
                cursor = rng.choice([rng.randrange(1, 1 << 64), rng.randrange(1, sequences + 500), (1 << 64) - 1])
                conn.call("SCAN", cursor, "COUNT", rng.choice([10, 100, 1000]))
            done[i] += 1


def _flood(
    host_port: int,
    user: str,
    password: str,
    sequences: int,
    mix: tuple[int, int, int],
    ready: Event,
    stop: Event,
    replies: Synchronized[int],
) -> None:
    """The flood's process: 14 reading loops in threads, 6 sockets that send KEYS and never read."""
    auth = Auth(user, password) if user else None
    halt = threading.Event()
    kinds = ["DBSIZE"] * mix[0] + ["SCAN"] * mix[1]
    done = [0] * len(kinds)
    threads = [threading.Thread(target=_loop, args=(host_port, auth, k, halt, done, i, sequences), daemon=True)
               for i, k in enumerate(kinds)]  # fmt: skip
    for t in threads:
        t.start()
    hogs = []
    try:
        for _ in range(mix[2]):
            sock = socket.create_connection(("127.0.0.1", host_port), timeout=30)
            hogs.append(sock)
            login = encode("AUTH", auth.user, auth.password) if auth else b""
            with contextlib.suppress(OSError):  # a server may drop a client that never reads
                sock.sendall(login + encode("KEYS", f"{PREFIX}*") * KEYS_UNREAD)
        end = time.monotonic() + READY_TIMEOUT
        while not all(done) and time.monotonic() < end:
            time.sleep(0.01)  # polling the flooders' own counters, bounded: no other signal to wait on
        ready.set()
        stop.wait(FLOOD_LIMIT)
    finally:
        replies.value = sum(done)
        halt.set()
        end = time.monotonic() + JOIN_GRACE  # then the process ends, daemon threads with it
        for t in threads:
            t.join(max(0.0, end - time.monotonic()))
        for sock in hogs:
            sock.close()


class Flood:
    """The flood, as a context manager: started and running (every flooder answered) on entry,
    stopped on exit; ``replies``: how many replies the reading flooders had, read after exit."""

    def __init__(
        self, port: int, auth: Auth | None, sequences: int = SEQUENCES, mix: tuple[int, int, int] = MIX
    ) -> None:
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no state of the caller's threads
        self.ready, self.stop = ctx.Event(), ctx.Event()
        self._replies: Synchronized[int] = ctx.Value("q", 0)
        user, password = (auth.user, auth.password) if auth else ("", "")
        self.proc = ctx.Process(
            target=_flood, args=(port, user, password, sequences, mix, self.ready, self.stop, self._replies)
        )
        self.replies = 0

    def __enter__(self) -> Flood:
        self.proc.start()
        deadline = time.monotonic() + READY_TIMEOUT + 30
        while not self.ready.wait(0.2):  # the event, or the process gone (it failed), or the deadline
            if not self.proc.is_alive() or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"the flood did not start (its process: exit code {self.proc.exitcode})")
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.replies = int(self._replies.value)


def new_key_latency(port: int, auth: Auth | None, requests: int) -> Run:
    """INCR on ``requests`` names that do not exist, one round trip each: throughput and latency
    (ms) as redis-benchmark reports them (p99.9 is the largest below 1,000 requests)."""
    run_id = uuid.uuid4().hex[:8]
    times: list[float] = []
    with RespConn(port, timeout=60) as conn:
        _auth(conn, auth)
        start = time.perf_counter()
        end = time.monotonic() + MEASURE_LIMIT
        for i in range(requests):
            if time.monotonic() > end:
                break
            sent = time.perf_counter()
            reply = conn.call("INCR", f"new:{run_id}:{i}")
            times.append((time.perf_counter() - sent) * 1000)
            if reply != 1:
                raise RuntimeError(f"INCR on a new name answered {reply!r}")
        elapsed = time.perf_counter() - start
    times.sort()

    def pct(p: float) -> float:
        return times[min(len(times) - 1, int(p * len(times)))]

    return Run(rps=len(times) / elapsed, p50=pct(0.5), p99=pct(0.99), p999=pct(0.999), max=times[-1])


def measure(
    port: int, auth: Auth | None, requests: int, sequences: int = SEQUENCES, mix: tuple[int, int, int] = MIX
) -> tuple[Run, int]:
    """One round: the flood on (over ``sequences`` names, made by ``prefill``), ``requests`` new-key
    INCRs timed; (their figures, the flood's replies)."""
    with Flood(port, auth, sequences, mix) as flood:
        run = new_key_latency(port, auth, requests)
    return run, flood.replies
