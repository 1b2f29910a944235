"""A cluster-aware INCR load generator: random keys over the whole slot space, each INCR sent
straight to the primary of its key's slot, from several processes; aggregate INCR/s and latency.

    python -m march_harness.bench.clusterload --seed 127.0.0.1:7381 [--user U --password P]
        [--processes 2] [--clients 50] [--pipeline 1] [--seconds 2] [--keyspace 1000000]

prints one JSON object (`LoadResult`). scripts/bench's cluster target calls `run_load`.

Why not `redis-benchmark --cluster`: redis-benchmark 7.0 refuses a cluster with one master
(`Invalid cluster: 1 node(s).`: its check is `cluster_node_count <= 1`), and one master is exactly
the groups = 1 side of the comparison; both sides must be driven by the same generator. (Checked
against a 3-node March cluster with one group: exit status 1, that message.)

Method. The slot map is read once with `CLUSTER SLOTS` from a seed node (a map that changes
during the run shows up as MOVED errors, counted, never followed: a benchmark of a stable
cluster). `processes` worker processes (default: one per core) each run an asyncio loop (uvloop)
with their share of `clients`; a client holds one connection to every primary, draws `pipeline`
keys `bench:cluster:<n>` (n uniform below `keyspace`) per batch, writes each key's INCR to the
primary of its slot and waits for every reply before the next batch: a closed loop, as
redis-benchmark's `-c`/`-P`. So a batch is split by primary, as a cluster client's pipeline is:
with N primaries a batch of 16 is N writes of about 16/N. `--per-primary` measures the other
way, redis-benchmark `--cluster`'s: each client on one primary (round robin), drawing only keys
of that primary's slots, its batches never split. The keys carry no hash tag, so a key's slot is CRC16(key) mod 16384
(`binascii.crc_hqx` is Redis' CRC16). Every process starts at one instant and stops at another
(CLOCK_MONOTONIC is one clock for every process of the machine): each says `ready` once connected
and authenticated, and the window opens shortly after the last one did, after a warm-up; a batch
counts if its last reply arrives inside the window. Latency is per batch (as redis-benchmark's
with `-P`), from a bounded random sample per process. Errors are counted by their first word.

On a small machine the generator shares the cores with the nodes it loads: its Python per
request is of the same order as a node's, so on 2 cores the aggregate is bounded by the
generator, whatever the number of groups. Never asserts a speed; only loopback addresses
given by the caller are loaded; every worker process ends by itself at the window's end and is
killed if it does not.
"""

from __future__ import annotations

import argparse
import asyncio
import binascii
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import cast

import hiredis
import uvloop

SLOTS = 16384
WARMUP = 0.3  # seconds of load before the window opens: connections warm, batches grown
POOL = 65_536  # keys pre-encoded per process (drawn from the keyspace): the draw costs one index
SAMPLES = 20_000  # batch latencies kept per process (reservoir): enough for a p99.9
GO_MARGIN = 0.05  # seconds for the start line to reach every ready worker
CONNECT_TIMEOUT = 30.0  # a worker's connects and AUTHs, on a loaded machine
KEY_PREFIX = "bench:cluster:"
KEYSPACE = 10_000  # keys `bench:cluster:0..9999`, ~0.6 per slot: every group gets its share; prefilled
CHUNK = 1000  # commands per write when prefilling (pipelined)
CALL_TIMEOUT = 30.0  # one synchronous call (prefill: a chunk of creations on a loaded machine)


@dataclass(frozen=True)
class SlotRange:
    """One line of CLUSTER SLOTS: slots first..last served by the primary host:port."""

    first: int
    last: int
    host: str
    port: int


@dataclass
class WorkerResult:
    ok: int = 0  # INCR replies (integers) received inside the window
    batches: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # first word of an error reply -> count
    latencies_ms: list[float] = field(default_factory=list)  # a sample of batch latencies


@dataclass
class LoadResult:
    """The aggregate of one run: INCR/s over every process, batch latency percentiles (ms)."""

    rps: float
    p50: float
    p99: float
    p999: float
    max: float
    ok: int
    errors: dict[str, int]
    seconds: float
    processes: int
    clients: int
    pipeline: int
    primaries: list[str]  # host:port of each primary loaded


def key_slot(key: bytes) -> int:
    """Redis Cluster's slot of a key without a hash tag."""
    return binascii.crc_hqx(key, 0) % SLOTS


def owner_table(ranges: list[SlotRange]) -> tuple[list[str], bytes]:
    """(the primaries' host:port, one byte per slot: the index of its primary); a slot no range
    covers is an error (the cluster is not ready)."""
    primaries = sorted({f"{r.host}:{r.port}" for r in ranges})
    if len(primaries) > 255:
        raise ValueError("more than 255 primaries")
    table = bytearray([255]) * SLOTS
    for r in ranges:
        table[r.first : r.last + 1] = bytes([primaries.index(f"{r.host}:{r.port}")]) * (r.last - r.first + 1)
    if 255 in table:
        raise ValueError(f"slot {table.index(255)} has no primary in CLUSTER SLOTS")
    return primaries, bytes(table)


def parse_slots(reply: object) -> list[SlotRange]:
    """CLUSTER SLOTS' reply -> ranges (only each range's primary: the load goes to primaries)."""
    if not isinstance(reply, list):
        raise ValueError(f"CLUSTER SLOTS: {reply!r}")
    out = []
    for entry in reply:
        first, last, primary = entry[0], entry[1], entry[2]
        host = primary[0].decode() if isinstance(primary[0], bytes) else str(primary[0])
        out.append(SlotRange(int(first), int(last), host, int(primary[1])))
    return sorted(out, key=lambda r: r.first)


def encode(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


# -- one worker process ------------------------------------------------------------------------
class _Client:
    """One simulated client: a connection per primary, one batch in flight. Driven by callbacks:
    the last reply of a batch sends the next one from ``data_received`` (no task switch and no
    future per batch, so that the generator's Python per request stays small)."""

    def __init__(
        self, pool: list[tuple[int, bytes]], spec: argparse.Namespace, rng: random.Random, out: WorkerResult
    ) -> None:
        self.conns: list[_Conn] = []
        self.pool, self.pipeline, self.rng, self.out = pool, spec.pipeline, rng, out
        self.start = self.end = 0.0  # the window, set by _run
        self.pending = 0
        self.sent = 0.0
        self.ok = 0
        self.errors: Counter[str] = Counter()
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()  # a phase ended
        self.running = False  # batches (after AUTH) rather than set-up commands

    def send(self, sends: list[tuple[_Conn, bytes, int]]) -> None:
        """Write each (connection, payload, commands in it); ``done`` resolves once every reply is in."""
        self.pending = sum(n for _, _, n in sends)
        for conn, payload, _ in sends:
            conn.write(payload)

    def next_batch(self) -> None:
        batch: list[list[bytes]] = [[] for _ in self.conns]
        for owner, cmd in self.rng.choices(self.pool, k=self.pipeline):
            batch[owner].append(cmd)
        self.ok, self.errors = 0, Counter()
        self.sent = time.monotonic()
        self.send([(self.conns[i], b"".join(cmds), len(cmds)) for i, cmds in enumerate(batch) if cmds])

    def replied(self) -> None:
        """The last reply of what was sent is in: count the batch if it ended in the window, go on."""
        if not self.running:
            self.done.set_result(None)
            return
        now = time.monotonic()
        if now >= self.end:
            self.running = False
            self.done.set_result(None)
            return
        if now >= self.start:
            out = self.out
            out.ok += self.ok
            out.batches += 1
            for word, n in self.errors.items():
                out.errors[word] = out.errors.get(word, 0) + n
            lat = (now - self.sent) * 1000
            if len(out.latencies_ms) < SAMPLES:
                out.latencies_ms.append(lat)
            elif (j := self.rng.randrange(out.batches)) < SAMPLES:
                out.latencies_ms[j] = lat
        self.next_batch()

    def lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError(f"connection lost: {exc}"))


class _Conn(asyncio.Protocol):
    def __init__(self, client: _Client) -> None:
        self.client = client
        self.reader = hiredis.Reader()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no asyncio.Transport subclass

    def write(self, payload: bytes) -> None:
        assert self.transport is not None
        self.transport.write(payload)

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        c = self.client
        while (reply := self.reader.gets()) is not False:
            if isinstance(reply, int):
                c.ok += 1
            elif isinstance(reply, hiredis.ReplyError):
                c.errors[str(reply).split(" ", 1)[0] or "?"] += 1
            elif reply != b"OK":  # AUTH's reply; anything else is not an INCR's
                c.errors["unexpected"] += 1
            c.pending -= 1
            if c.pending == 0:
                c.replied()

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.lost(exc)


async def _connect(
    primaries: list[str], pool: list[tuple[int, bytes]], spec: argparse.Namespace, rng: random.Random, out: WorkerResult
) -> _Client:
    """One client connected (and authenticated) to every primary; ``pool``: (index of the key's
    primary, its encoded INCR)."""
    loop = asyncio.get_running_loop()
    client = _Client(pool, spec, rng, out)
    for address in primaries:
        host, port = address.rsplit(":", 1)
        _, conn = await loop.create_connection(lambda: _Conn(client), host, int(port))
        client.conns.append(conn)
    if spec.user:
        auth = encode(b"AUTH", spec.user.encode(), spec.password.encode())
        client.send([(c, auth, 1) for c in client.conns])
        await client.done
        if client.errors:
            raise SystemExit(f"AUTH as {spec.user!r} failed: {dict(client.errors)}")
    return client


async def _run(client: _Client, start_at: float, seconds: float) -> None:
    """Batches from ``WARMUP`` before ``start_at``; those that end in the window are counted."""
    loop = asyncio.get_running_loop()
    client.start, client.end = start_at, start_at + seconds
    await asyncio.sleep(max(0.0, start_at - WARMUP - time.monotonic()))
    client.done = loop.create_future()
    client.running = True
    client.next_batch()
    await client.done


async def _worker(spec: argparse.Namespace) -> WorkerResult:
    """Connect every client, say ``ready`` on stdout, read the window's start (CLOCK_MONOTONIC) from
    stdin, run: every process starts at the same instant however long its own start took."""
    ranges = [SlotRange(*r) for r in json.loads(spec.slots)]
    primaries, table = owner_table(ranges)
    out = WorkerResult()
    rng = random.Random(spec.rng_seed)
    pool = []  # shared by the process' clients: built once, before any client starts
    for n in rng.sample(range(spec.keyspace), min(POOL, spec.keyspace)):
        key = f"{KEY_PREFIX}{n}".encode()
        pool.append((table[key_slot(key)], encode(b"INCR", key)))
    connecting = [_connect(primaries, pool, spec, random.Random(rng.random()), out) for _ in range(spec.clients)]
    if spec.per_primary:  # client k: the primary (first + k) mod P alone, keys of its slots only
        mine = [[(0, cmd) for owner, cmd in pool if owner == i] for i in range(len(primaries))]
        picks = [(spec.first_client + k) % len(primaries) for k in range(spec.clients)]
        if any(not mine[i] for i in picks):
            raise SystemExit("--per-primary: a primary owns no key of the keyspace (a larger --keyspace)")
        connecting = [_connect([primaries[i]], mine[i], spec, random.Random(rng.random()), out) for i in picks]
    clients = await asyncio.wait_for(asyncio.gather(*connecting), CONNECT_TIMEOUT)
    print("ready", flush=True)
    start_at = float(sys.stdin.readline())  # blocking: nothing else runs until the go
    await asyncio.gather(*(_run(c, start_at, spec.seconds) for c in clients))
    for c in clients:
        for conn in c.conns:
            if conn.transport is not None:
                conn.transport.close()
    return out


def worker_main(spec: argparse.Namespace) -> None:
    """Run the clients, write the result as JSON to ``spec.out`` (a file, not a pipe: the result is
    larger than a pipe's buffer, and the parent reads the workers one after the other)."""
    result = uvloop.run(_worker(spec))
    result.latencies_ms = [round(x, 4) for x in result.latencies_ms]
    Path(spec.out).write_text(json.dumps(asdict(result)))


# -- the driver --------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadSpec:
    """What one run sends: ``clients`` in all (spread over ``processes``), ``pipeline`` INCRs per
    batch, for ``seconds``, keys drawn from ``keyspace`` names; AUTH as ``user`` when set. By
    default a client's batch is split by primary, as a cluster client's pipeline is; with
    ``per_primary`` each client talks to one primary and draws keys of that primary's slots only
    (redis-benchmark --cluster's way: a batch is never split)."""

    processes: int
    clients: int
    pipeline: int
    seconds: float
    keyspace: int = KEYSPACE
    user: str = ""
    password: str = ""
    per_primary: bool = False  # each client on one primary (round robin), keys of its slots only


def run_load(ranges: list[SlotRange], spec: LoadSpec) -> LoadResult:
    """One run against the primaries of ``ranges``: every worker process started, waited for (or
    killed), its figures summed."""
    primaries, _ = owner_table(ranges)  # fails here, not in the workers, on a partial map
    if any(not a.startswith("127.") for a in primaries):
        raise ValueError(f"loopback primaries only: {primaries}")
    processes = max(1, min(spec.processes, spec.clients))
    slots = json.dumps([[r.first, r.last, r.host, r.port] for r in ranges])
    procs = []
    outs = [Path(tempfile.mkstemp(prefix="march-clusterload-", suffix=".json")[1]) for _ in range(processes)]
    first = 0  # global index of a worker's first client (per_primary: the round robin over primaries)
    for i, out_path in enumerate(outs):
        share = spec.clients // processes + (1 if i < spec.clients % processes else 0)
        argv = [sys.executable, "-m", "march_harness.bench.clusterload", "--worker", "--slots", slots,
                "--clients", str(share), "--pipeline", str(spec.pipeline), "--seconds", str(spec.seconds),
                "--keyspace", str(spec.keyspace), "--rng-seed", str(random.random()),
                "--user", spec.user, "--password", spec.password, "--out", str(out_path),
                "--first-client", str(first)] + (["--per-primary"] if spec.per_primary else [])  # fmt: skip
        first += share
        pipe = subprocess.PIPE
        procs.append(subprocess.Popen(argv, stdin=pipe, stdout=pipe, stderr=pipe, text=True))
    results = []
    try:
        for p in procs:  # each says "ready" once connected, or ends (EOF) having failed
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                _, err = p.communicate(timeout=30)
                raise RuntimeError(f"load worker exited {p.returncode} before the start: {err[-1500:]}")
        start_at = time.monotonic() + GO_MARGIN + WARMUP
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(f"{start_at!r}\n")
            p.stdin.flush()  # communicate() closes it
        for p, out_path in zip(procs, outs, strict=True):
            _, err = p.communicate(timeout=max(10.0, start_at + spec.seconds + 30 - time.monotonic()))
            if p.returncode != 0:
                raise RuntimeError(f"load worker exited {p.returncode}: {err[-1500:]}")
            results.append(WorkerResult(**json.loads(out_path.read_text())))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for out_path in outs:
            out_path.unlink(missing_ok=True)
    return _aggregate(results, spec, processes, primaries)


def _aggregate(results: list[WorkerResult], spec: LoadSpec, processes: int, primaries: list[str]) -> LoadResult:
    errors: Counter[str] = Counter()
    for r in results:
        errors.update(r.errors)
    lat = sorted(x for r in results for x in r.latencies_ms) or [0.0]

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))]

    ok = sum(r.ok for r in results)
    return LoadResult(
        rps=ok / spec.seconds, p50=statistics.median(lat), p99=pct(0.99), p999=pct(0.999), max=lat[-1],
        ok=ok, errors=dict(errors), seconds=spec.seconds, processes=processes, clients=spec.clients,
        pipeline=spec.pipeline, primaries=primaries,
    )  # fmt: skip


def _call_many(host: str, port: int, cmds: list[bytes], user: str = "", password: str = "") -> list[object]:
    """Send encoded commands pipelined on one connection (AUTH first when ``user`` is set) and
    return their replies (errors as ``hiredis.ReplyError`` values); an AUTH refused is an error."""
    if user:
        cmds = [encode(b"AUTH", user.encode(), password.encode()), *cmds]
    replies: list[object] = []
    with socket.create_connection((host, port), timeout=CALL_TIMEOUT) as s:
        reader = hiredis.Reader()
        for i in range(0, len(cmds), CHUNK):
            chunk = cmds[i : i + CHUNK]
            s.sendall(b"".join(chunk))
            want = len(replies) + len(chunk)
            while len(replies) < want:
                data = s.recv(65536)
                if not data:
                    raise ConnectionError(f"{host}:{port} closed the connection")
                reader.feed(data)
                while (r := reader.gets()) is not False:
                    replies.append(r)
    if user:
        if replies[0] != b"OK":
            raise ValueError(f"AUTH as {user!r} on {host}:{port}: {replies[0]!r}")
        replies = replies[1:]
    return replies


def read_slots(host: str, port: int, user: str = "", password: str = "") -> list[SlotRange]:
    """CLUSTER SLOTS from one node (authenticated when ``user`` is set)."""
    reply = _call_many(host, port, [encode(b"CLUSTER", b"SLOTS")], user, password)[0]
    if isinstance(reply, hiredis.ReplyError):
        raise ValueError(f"CLUSTER SLOTS on {host}:{port}: {reply}")
    return parse_slots(reply)


def prefill(ranges: list[SlotRange], spec: LoadSpec) -> dict[str, int]:
    """One INCR on every key of the keyspace, each at its primary, before the measured runs: an
    INCR on a new name creates a sequence (a durable write before its first ID), and the runs
    measure INCR, not creation. Returns the error replies by first word (none on a stable cluster)."""
    primaries, table = owner_table(ranges)
    per: dict[int, list[bytes]] = {}
    for n in range(spec.keyspace):
        key = f"{KEY_PREFIX}{n}".encode()
        per.setdefault(table[key_slot(key)], []).append(encode(b"INCR", key))
    errors: Counter[str] = Counter()
    for i, cmds in per.items():
        host, port = primaries[i].rsplit(":", 1)
        for r in _call_many(host, int(port), cmds, spec.user, spec.password):
            if not isinstance(r, int):
                errors[str(r).split(" ", 1)[0]] += 1
    return dict(errors)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", default="127.0.0.1:7381", help="a node to read CLUSTER SLOTS from (loopback)")
    ap.add_argument("--user", default="")
    ap.add_argument("--password", default="")
    ap.add_argument("--processes", type=int, default=os.cpu_count() or 1, help="worker processes (default: cores)")
    ap.add_argument("--clients", type=int, default=50, help="clients in all (default 50)")
    ap.add_argument("--pipeline", type=int, default=1, help="INCRs per batch (default 1)")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--keyspace", type=int, default=KEYSPACE, help=f"key names drawn from (default {KEYSPACE:,})")
    ap.add_argument("--per-primary", action="store_true", help="each client on one primary, batches never split")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--first-client", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--slots", help=argparse.SUPPRESS)
    ap.add_argument("--rng-seed", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker_main(args)
        return 0
    host, port = args.seed.rsplit(":", 1)
    ranges = read_slots(host, int(port), args.user, args.password)
    spec = LoadSpec(args.processes, args.clients, args.pipeline, args.seconds, args.keyspace, args.user, args.password,
                    args.per_primary)  # fmt: skip
    errors = prefill(ranges, spec)
    if errors:
        raise SystemExit(f"prefill: error replies {errors}")
    print(json.dumps(asdict(run_load(ranges, spec))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
