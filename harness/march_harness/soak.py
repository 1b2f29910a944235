"""The abuse soak: every unfriendly tenant at once against a three-node cluster on real etcd,
while well-behaved clients draw IDs and the primary is killed with ``kill -9`` half-way.

Shared by ``scripts/soak`` (minutes, a report and a PNG) and ``tests/cluster/test_abuse_soak.py`` (a short
run in the suite). What it runs:

- **Well-behaved clients** (this process, threads): ``march_harness.load.Load`` — redis-py
  ``RedisCluster`` clients and plain clients that follow ``MOVED`` — drawing IDs at a modest,
  fixed rate each, every request recorded in a ``History`` (send time, reply time, ID). A second
  kind creates a new key per request (new-key ``INCR``: the store write on the request's path).
- **Abusers** (a child process, so their Python work never delays the well-behaved clients'
  timing; each a thread with a loop bounded in count and time), one per measured abuse:
  a read-only user's ``KEYS``/``SCAN MATCH`` with a ~2 KB glob over ~1 KB names; a pipeline of
  9,000 ``INCR`` on a new key; clients hammering ``DBSIZE``, ``SCAN`` with unknown cursors and
  ``KEYS *`` without reading the replies; a crowd of idle connections and an admin running
  ``CLIENT LIST``; denied commands with long arguments filling ``ACL LOG``; scrapers and a silent
  client on the metrics port; ``ACL SETUSER`` churn over thousands of users; connections holding
  large unfinished requests; an application user (``+@read +@write``) trying ``SEQ.ALTER`` and
  ``CONFIG SET``; password guessing over fresh connections; ``WORKER.ACQUIRE`` in new
  namespaces; ``MGET`` of 5,000 keys.
- **Samplers**: the RSS of every node (``/proc/<pid>/status``) every 0.2 s.
- **The fault**: ``kill -9`` of the primary at half time; the killed node is started again once
  another node serves.

``SoakReport``: the well-behaved clients' latency (p50/p99/max) outside the failover window (from
the kill to one second after the first ID from another node), the failover time, each node's RSS
at the start, its peak and at the end, what every abuser did (requests, errors by kind, reconnects)
and where a grant reached further than it should (``breaches``), and the history checker's verdict
over every well-behaved request: duplicates and real-time order violations.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import random
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from march_harness.cluster import ClusterNode, MarchCluster, moved_target
from march_harness.etcd import EtcdCluster
from march_harness.history import History
from march_harness.load import Load, figures, time_series
from march_harness.ports import free_port
from march_harness.resp import RespConn, RespError, encode

ADMIN_PASSWORD = "soak-admin-password"
READER = ("reader", "reader-password")  # ~soak:* +@read: a read-only tenant
APP = ("app", "app-password")  # ~* +@read +@write +@app: an application that draws IDs
VICTIM = ("victim", "victim-password-nobody-guesses")  # another tenant, whose password the guesser tries
WELL_KEYS = ("soak:a", "soak:b", "{soak}:c")
GLOB_NAME_PREFIX = b"soak:long:"
ABUSER_TIMEOUT = 5.0  # socket timeout of an abuser's connection: a stalled reply ends its round
NEW_KEY_PREFIX = "soak:new:"
RSS_PERIOD = 0.2  # seconds between RSS samples


@dataclass(frozen=True)
class SoakConfig:
    """Sizes of one soak run. ``short()`` is the suite's version; the defaults are scripts/soak's."""

    seconds: float = 180.0
    lease_ttl: int = 2
    well_clients: int = 4  # RedisCluster + plain clients on WELL_KEYS
    well_rate: float = 100.0  # requests per second per well-behaved client
    new_key_rate: float = 20.0  # new-key INCRs per second (one client)
    glob_names: int = 1_000
    name_len: int = 1_000
    glob_len: int = 2_000
    pipeline: int = 9_000
    hammer_clients: int = 20
    idle_clients: int = 500
    users: int = 2_400
    partial_conns: int = 100
    partial_bytes: int = 2 << 20
    scrapers: int = 4
    mget_keys: int = 5_000
    kill: bool = True
    rss_settle: float = 5.0  # seconds of RSS samples once the abusers are gone (a figure, never a verdict)

    @classmethod
    def short(cls) -> SoakConfig:
        return cls(
            seconds=25.0, well_clients=2, well_rate=50.0, new_key_rate=10.0, glob_names=200, name_len=500,
            glob_len=1_000, pipeline=3_000, hammer_clients=4, idle_clients=100, users=300, partial_conns=10,
            partial_bytes=1 << 20, scrapers=2, mget_keys=5_000,
        )  # fmt: skip


# --- abusers (run in a child process) -----------------------------------------------------------


@dataclass
class Tally:
    """What one abuser did."""

    requests: int = 0
    reconnects: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    breaches: list[str] = field(default_factory=list)  # a grant that reached further than its table

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


class Abuser(threading.Thread):
    """One unfriendly tenant: ``round()`` again and again until stopped or the deadline. A lost
    connection is counted and made again after a short pause (no hot loop against a closed port)."""

    def __init__(self, soak: Targets, stop: threading.Event, deadline: float) -> None:
        super().__init__(name=type(self).__name__, daemon=True)
        self.soak = soak
        self.stop_event = stop
        self.deadline = deadline
        self.tally = Tally()
        self.crash = ""

    def run(self) -> None:
        try:
            self.setup()
            while not self.stop_event.is_set() and time.monotonic() < self.deadline:
                try:
                    self.round()
                except (OSError, ConnectionError) as e:
                    self.tally.reconnects += 1
                    self.tally.error(type(e).__name__)
                    self.reset()
                    self.stop_event.wait(0.05)
        except BaseException as e:  # reported, never lost in the thread
            self.crash = f"{type(e).__name__}: {e}"
        finally:
            self.reset()

    def setup(self) -> None:
        pass

    def round(self) -> None:
        raise NotImplementedError

    def reset(self) -> None:
        """Drop the connections this abuser holds (they are made again on the next round)."""

    def reply(self, value: Any) -> Any:
        self.tally.requests += 1
        if isinstance(value, RespError):
            self.tally.error(value.prefix)
        return value


class Targets:
    """The nodes' ports, and the one that answers a key command (follows MOVED)."""

    def __init__(self, ports: Sequence[int], metrics_ports: Sequence[int]) -> None:
        self.ports = list(ports)
        self.metrics_ports = list(metrics_ports)
        self._primary = self.ports[0]

    def connect(self, port: int | None = None, user: tuple[str, str] | None = None) -> RespConn:
        c = RespConn(port or self._primary, timeout=ABUSER_TIMEOUT)
        name, password = user or ("default", ADMIN_PASSWORD)
        reply = c.call("AUTH", name, password)
        if reply != "OK":
            c.close()
            raise ConnectionError(f"AUTH {name}: {reply!r}")
        return c

    def primary(self) -> int:
        return self._primary

    def moved(self, reply: object) -> bool:
        """Follow a MOVED reply: the next connection goes to the node it names."""
        target = moved_target(reply)
        if target is None:
            return False
        self._primary = int(target.rpartition(":")[2])
        return True

    def rotate(self) -> None:
        """No answer from the primary we knew: try the next node."""
        i = self.ports.index(self._primary) if self._primary in self.ports else -1
        self._primary = self.ports[(i + 1) % len(self.ports)]


class _Primary(Abuser):
    """An abuser whose commands only the primary serves: one connection there, remade after MOVED."""

    user: tuple[str, str] | None = None

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.conn: RespConn | None = None

    def call(self, *args: bytes | str | int) -> Any:
        for _ in range(3):
            if self.conn is None:
                try:
                    self.conn = self.soak.connect(user=self.user)
                except OSError:
                    self.soak.rotate()
                    raise
            reply = self.conn.call(*args)
            if self.soak.moved(reply) or (isinstance(reply, RespError) and reply.prefix == "CLUSTERDOWN"):
                self.tally.requests += 1
                self.reset()
                continue
            return self.reply(reply)
        return None

    def reset(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class GlobAbuser(_Primary):
    """A read-only tenant listing long names with a long, backtracking-prone glob."""

    user = READER

    def __init__(self, *args: Any, glob_len: int) -> None:
        super().__init__(*args)
        unit = b"*a?[a-z]"  # stars and classes: the shape that cost len(pattern) x len(name) per name
        self.pattern = GLOB_NAME_PREFIX + (unit * (glob_len // len(unit)))[:glob_len] + b"b"

    def round(self) -> None:
        self.call("KEYS", self.pattern)
        cursor: bytes | str = "0"
        for _ in range(20):
            reply = self.call("SCAN", cursor, "MATCH", self.pattern, "COUNT", 1000)
            if not isinstance(reply, list) or reply[0] in (b"0", "0"):
                break
            cursor = reply[0]


class PipelineAbuser(_Primary):
    """One pipeline of thousands of INCRs on a key that does not exist yet, every round."""

    def __init__(self, *args: Any, size: int) -> None:
        super().__init__(*args)
        self.size = size
        self.keys = itertools.count()

    def round(self) -> None:
        if self.conn is None:
            self.conn = self.soak.connect()
        key = f"soak:pipe:{os.getpid()}:{next(self.keys)}"
        self.conn.send(encode("INCR", key) * self.size)
        replies = [self.conn.read_reply() for _ in range(self.size)]
        self.tally.requests += self.size
        errors = [r for r in replies if isinstance(r, RespError)]
        for e in errors:
            self.tally.error(e.prefix)
        if any(self.soak.moved(e) for e in errors[:1]):
            self.reset()
        elif not errors and replies != list(range(1, self.size + 1)):
            self.tally.breaches.append(f"pipeline on {key}: replies are not 1..{self.size}")


class HammerAbuser(_Primary):
    """DBSIZE, SCAN with unknown cursors, or KEYS * never read, as fast as the server answers."""

    def __init__(self, *args: Any, kind: str) -> None:
        super().__init__(*args)
        self.kind = kind
        self.name = f"Hammer-{kind}"

    def round(self) -> None:
        if self.kind == "dbsize":
            self.call("DBSIZE")
        elif self.kind == "scan":
            self.call("SCAN", random.randrange(1, 1 << 40), "COUNT", 1000)
        else:  # KEYS * without reading: the server must refuse or drop us before the replies pile up
            if self.conn is None:
                self.conn = self.soak.connect()
            self.conn.send(encode("KEYS", "*") * 50)
            self.tally.requests += 50
            self.stop_event.wait(0.01)


class CrowdAbuser(Abuser):
    """Many idle connections with long names, and an admin listing them with CLIENT LIST."""

    def __init__(self, *args: Any, crowd: int) -> None:
        super().__init__(*args)
        self.crowd = crowd
        self.idle: list[RespConn] = []
        self.admin: RespConn | None = None

    def setup(self) -> None:
        port = self.soak.ports[0]
        for i in range(self.crowd):
            if self.stop_event.is_set():
                return
            try:
                c = self.soak.connect(port)
                self.reply(c.call("CLIENT", "SETNAME", f"idle-{i}-" + "x" * 200))
                self.idle.append(c)
            except OSError as e:
                self.tally.error(type(e).__name__)

    def round(self) -> None:
        if self.admin is None:
            self.admin = self.soak.connect(self.soak.ports[0])
        self.reply(self.admin.call("CLIENT", "LIST"))

    def reset(self) -> None:
        if self.admin is not None:
            self.admin.close()
            self.admin = None
        if self.stop_event.is_set() or time.monotonic() >= self.deadline:
            for c in self.idle:
                c.close()
            self.idle.clear()


class AclLogAbuser(Abuser):
    """Denied commands with long arguments (ACL LOG entries), and an admin reading ACL LOG."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.denied: RespConn | None = None
        self.admin: RespConn | None = None

    def round(self) -> None:
        port = self.soak.ports[1 % len(self.soak.ports)]
        if self.denied is None:
            self.denied = self.soak.connect(port, READER)
        if self.admin is None:
            self.admin = self.soak.connect(port)
        key = "denied:" + str(random.random()) + "k" * 60_000  # outside the reader's ~soak:* pattern
        reply = self.reply(self.denied.call("GET", key))
        if not (isinstance(reply, RespError) and reply.prefix == "NOPERM"):
            self.tally.breaches.append(f"reader's GET outside its keys answered {reply!r:.80}")
        self.reply(self.denied.call("CONFIG", "SET", "maxclients", "1"))
        self.reply(self.admin.call("ACL", "LOG"))

    def reset(self) -> None:
        for c in (self.denied, self.admin):
            if c is not None:
                c.close()
        self.denied = self.admin = None


class MetricsAbuser(Abuser):
    """Scrapers hammering /metrics, and a client that connects and never finishes its request."""

    def __init__(self, *args: Any, scrapers: int) -> None:
        super().__init__(*args)
        self.scrapers = scrapers
        self.silent: list[socket.socket] = []

    def round(self) -> None:
        if not self.soak.metrics_ports:
            self.stop_event.wait(1)
            return
        port = random.choice(self.soak.metrics_ports)
        if len(self.silent) < 20:
            with contextlib.suppress(OSError):
                s = socket.create_connection(("127.0.0.1", port), timeout=1)
                s.sendall(b"GET /metr")  # and nothing more
                self.silent.append(s)
        for _ in range(self.scrapers):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=ABUSER_TIMEOUT) as r:
                    r.read()
                self.tally.requests += 1
            except OSError as e:
                self.tally.error(type(e).__name__)

    def reset(self) -> None:
        if self.stop_event.is_set() or time.monotonic() >= self.deadline:
            for s in self.silent:
                s.close()
            self.silent.clear()


class AclChurnAbuser(Abuser):
    """An admin changing users, one after another, among thousands."""

    def __init__(self, *args: Any, users: int) -> None:
        super().__init__(*args)
        self.users = users
        self.conn: RespConn | None = None

    def round(self) -> None:
        if self.conn is None:
            self.conn = self.soak.connect(random.choice(self.soak.ports))
        user = f"churn{random.randrange(self.users)}"
        self.reply(self.conn.call("ACL", "SETUSER", user, "on", f">pw{random.random()}", "~soak:*", "+@read"))

    def reset(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class PartialAbuser(Abuser):
    """Connections that each send most of a large request and never the rest."""

    def __init__(self, *args: Any, conns: int, size: int) -> None:
        super().__init__(*args)
        self.conns = conns
        self.size = size
        self.held: list[socket.socket] = []

    def round(self) -> None:
        self.held = [s for s in self.held if _open(s)]
        while len(self.held) < self.conns and not self.stop_event.is_set():
            s = socket.create_connection(("127.0.0.1", random.choice(self.soak.ports)), timeout=ABUSER_TIMEOUT)
            try:
                s.sendall(encode("AUTH", "default", ADMIN_PASSWORD))
                s.recv(64)
                s.sendall(b"*2\r\n$4\r\nECHO\r\n$%d\r\n" % self.size + b"x" * (self.size - 1))
            except OSError:
                s.close()
                self.tally.reconnects += 1
                continue
            self.tally.requests += 1
            self.held.append(s)
        self.stop_event.wait(0.2)

    def reset(self) -> None:
        if self.stop_event.is_set() or time.monotonic() >= self.deadline:
            for s in self.held:
                s.close()
            self.held.clear()


class GrantAbuser(_Primary):
    """An application user (+@read +@write) reaching for settings it must not change."""

    user = APP

    def round(self) -> None:
        for args in (
            ("SEQ.ALTER", WELL_KEYS[0], "MINBATCH", 1 << 62, "MAXBATCH", 1 << 62),
            ("SEQ.ALTER", WELL_KEYS[0], "MINBATCH", 1),
            ("CONFIG", "SET", "max-wait", "inf"),
            ("ACL", "SETUSER", APP[0], "+@all"),
        ):
            reply = self.call(*args)
            if reply is not None and not (isinstance(reply, RespError) and reply.prefix in ("NOPERM", "ERR")):
                self.tally.breaches.append(f"{' '.join(map(str, args[:2]))} by {APP[0]} answered {reply!r:.80}")
        self.stop_event.wait(0.05)


class AuthAbuser(Abuser):
    """Guessing another tenant's password, each guess on a fresh connection (no per-connection
    throttle applies), from the address the well-behaved clients use too (one NAT)."""

    def round(self) -> None:
        with RespConn(random.choice(self.soak.ports), timeout=ABUSER_TIMEOUT) as c:
            reply = self.reply(c.call("AUTH", VICTIM[0], f"guess{random.random()}"))
            if reply == "OK":
                self.tally.breaches.append("a guessed password was accepted")


class WorkerAbuser(_Primary):
    """WORKER.ACQUIRE in a new namespace every time."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.namespaces = itertools.count()

    def round(self) -> None:
        self.call("WORKER.ACQUIRE", f"soak:ns:{os.getpid()}:{next(self.namespaces)}")


class MgetAbuser(_Primary):
    """MGET of thousands of keys."""

    def __init__(self, *args: Any, keys: int) -> None:
        super().__init__(*args)
        self.args = ["MGET", *(f"soak:mget:{i}" for i in range(keys))]

    def round(self) -> None:
        self.call(*self.args)


def _open(s: socket.socket) -> bool:
    """The peer has not closed ``s`` (a non-blocking peek)."""
    try:
        s.setblocking(False)
        try:
            return s.recv(1, socket.MSG_PEEK) != b""
        except BlockingIOError:
            return True
        finally:
            s.setblocking(True)
    except OSError:
        return False


def make_abusers(cfg: SoakConfig, targets: Targets, stop: threading.Event, deadline: float) -> list[Abuser]:
    a = (targets, stop, deadline)
    out: list[Abuser] = [
        GlobAbuser(*a, glob_len=cfg.glob_len),
        PipelineAbuser(*a, size=cfg.pipeline),
        CrowdAbuser(*a, crowd=cfg.idle_clients),
        AclLogAbuser(*a),
        MetricsAbuser(*a, scrapers=cfg.scrapers),
        AclChurnAbuser(*a, users=cfg.users),
        PartialAbuser(*a, conns=cfg.partial_conns, size=cfg.partial_bytes),
        GrantAbuser(*a),
        AuthAbuser(*a),
        WorkerAbuser(*a),
        MgetAbuser(*a, keys=cfg.mget_keys),
    ]
    kinds = ("dbsize", "scan", "keys")
    out += [HammerAbuser(*a, kind=kinds[i % len(kinds)]) for i in range(cfg.hammer_clients)]
    return out


def run_abusers(cfg: SoakConfig, ports: list[int], metrics_ports: list[int], seconds: float, results: Any) -> None:
    """The child process: every abuser until ``seconds`` pass or the parent closes ``results``' other end."""
    stop = threading.Event()
    deadline = time.monotonic() + seconds
    targets = Targets(ports, metrics_ports)
    abusers = make_abusers(cfg, targets, stop, deadline)
    for a in abusers:
        a.start()

    def watch() -> None:
        results.poll(seconds + 5)
        stop.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    for a in abusers:
        a.join(seconds + 30)
    stop.set()
    results.send({a.name: (a.tally, a.crash, a.is_alive()) for a in abusers})


# --- setup, the well-behaved side and the report -------------------------------------------------


class NewKeyClient(threading.Thread):
    """A well-behaved client creating a new key with every request (the store write on its path):
    its latencies are reported beside the others'."""

    def __init__(self, targets: Targets, rate: float, stop: threading.Event, deadline: float) -> None:
        super().__init__(name="new-keys", daemon=True)
        self.targets = targets
        self.interval = 1.0 / rate
        self.stop_event = stop
        self.deadline = deadline
        self.latencies: list[tuple[int, int]] = []  # (sent, replied) of each success, monotonic ns
        self.errors = 0

    def run(self) -> None:
        conn: RespConn | None = None
        for i in itertools.count():
            if self.stop_event.is_set() or time.monotonic() >= self.deadline:
                break
            sent = History.now()
            try:
                if conn is None:
                    conn = self.targets.connect()  # a tenant that may create sequences (+@create)
                reply = conn.call("INCR", f"{NEW_KEY_PREFIX}{i}")
                if isinstance(reply, int):
                    self.latencies.append((sent, History.now()))
                else:
                    self.errors += 1
                    if self.targets.moved(reply):
                        conn.close()
                        conn = None
            except OSError:
                self.errors += 1
                self.targets.rotate()
                if conn is not None:
                    conn.close()
                conn = None
            self.stop_event.wait(self.interval)  # pacing to a rate, not synchronisation
        if conn is not None:
            conn.close()


class RssSampler(threading.Thread):
    """Every node's resident set size, every RSS_PERIOD seconds: start, peak and last, by node id."""

    def __init__(self, nodes: Sequence[ClusterNode], stop: threading.Event) -> None:
        super().__init__(name="rss", daemon=True)
        self.nodes = list(nodes)
        self.stop_event = stop
        self.samples: dict[str, list[tuple[float, int]]] = {n.node_id: [] for n in self.nodes}

    def run(self) -> None:
        while not self.stop_event.wait(RSS_PERIOD):
            self.sample()

    def sample(self) -> None:
        now = time.monotonic()
        for n in self.nodes:
            kb = rss_kb(n.pid) if n.running else None
            if kb is not None:
                self.samples[n.node_id].append((now, kb))


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


@dataclass
class SoakReport:
    seconds: float = 0.0
    ops: int = 0
    errors: int = 0
    duplicates: int = 0
    order_violations: int = 0
    problems: list[str] = field(default_factory=list)
    error_kinds: dict[str, int] = field(default_factory=dict)
    error_samples: list[str] = field(default_factory=list)
    failover: float | None = None
    window: tuple[float, float] | None = None  # seconds since start: kill -9 until the victim is back, +1 s
    p50: float = 0.0
    p99: float = 0.0
    worst: float = 0.0
    new_key_p50: float = 0.0
    new_key_p99: float = 0.0
    new_key_worst: float = 0.0
    new_key_ops: int = 0
    rss: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # node -> (start, peak, end) kB
    abusers: dict[str, tuple[Tally, str, bool]] = field(default_factory=dict)
    breaches: list[str] = field(default_factory=list)
    series: Any = None  # march_harness.load.TimeSeries, for the chart
    started_mono: float = 0.0  # monotonic seconds at the chart's time 0 (the first well-behaved request)
    rss_series: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    running: dict[str, bool] = field(default_factory=dict)  # node -> still running when the soak ended
    errors_outside: list[str] = field(default_factory=list)  # well-behaved failures outside the failover window

    def lines(self) -> list[str]:
        def ms(x: float) -> str:
            return f"{x * 1000:.1f} ms"

        out = [
            f"soak: {self.seconds:.0f} s, {self.ops} IDs to well-behaved clients, {self.errors} errors",
            f"well-behaved errors by kind: {self.error_kinds}; first: {self.error_samples[:3]}",
            f"well-behaved errors outside the failover window: {len(self.errors_outside)}"
            + (f"; first: {self.errors_outside[:3]}" if self.errors_outside else ""),
            f"history checker: {self.duplicates} duplicates, {self.order_violations} order violations",
            f"failover: {'-' if self.failover is None else ms(self.failover)}"
            + (f" (window excluded: {self.window[0]:.1f}-{self.window[1]:.1f} s)" if self.window else ""),
            f"well-behaved INCR outside the failover window: p50 {ms(self.p50)}, p99 {ms(self.p99)}, "
            f"worst {ms(self.worst)} (goal: p99 and worst < 50 ms)",
            f"new-key INCR ({self.new_key_ops}): p50 {ms(self.new_key_p50)}, p99 {ms(self.new_key_p99)}, "
            f"worst {ms(self.new_key_worst)}",
        ]
        for node, (start, peak, end) in sorted(self.rss.items()):
            out.append(f"RSS {node}: start {start / 1024:.0f} MB, peak {peak / 1024:.0f} MB, end {end / 1024:.0f} MB")
        for name, (tally, crash, hung) in sorted(self.abusers.items()):
            errs = ", ".join(f"{k} {v}" for k, v in sorted(tally.errors.items(), key=lambda kv: -kv[1])[:4])
            extra = (f" CRASHED: {crash}" if crash else "") + (" HUNG" if hung else "")
            out.append(f"  {name}: {tally.requests} requests, {tally.reconnects} reconnects; {errs}{extra}")
        counted: dict[str, int] = {}
        for b in self.breaches:
            counted[b] = counted.get(b, 0) + 1
        out += [f"BREACH ({n}x): {b}" for b, n in counted.items()]
        out += [f"PROBLEM: {p}" for p in self.problems[:10]]
        return out


def _quantiles(latencies: list[int]) -> tuple[float, float, float]:
    if not latencies:
        return 0.0, 0.0, 0.0
    latencies.sort()

    def pick(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] / 1e9

    return pick(0.5), pick(0.99), latencies[-1] / 1e9


def seed(cluster: MarchCluster, cfg: SoakConfig, say: Callable[[str], None]) -> None:
    """Users, the long names the glob abuser lists, the keys MGET reads (through the primary)."""
    primary = cluster.wait_settled(30)
    with RespConn(primary.port, timeout=60) as c:
        assert c.call("AUTH", "default", ADMIN_PASSWORD) == "OK"
        assert c.call("ACL", "SETUSER", READER[0], "on", ">" + READER[1], "~soak:*", "+@read") == "OK"
        assert c.call("ACL", "SETUSER", APP[0], "on", ">" + APP[1], "~*", "+@read", "+@write", "+@app") == "OK"
        assert c.call("ACL", "SETUSER", VICTIM[0], "on", ">" + VICTIM[1], "~victim:*", "+@read") == "OK"
        say(f"seeding {cfg.glob_names} names of {cfg.name_len} bytes, {cfg.users} users")
        pipeline = []
        for i in range(cfg.glob_names):
            name = GLOB_NAME_PREFIX + b"%06d:" % i + b"a" * max(0, cfg.name_len - len(GLOB_NAME_PREFIX) - 7)
            pipeline.append(encode("INCR", name))
        for i in range(0, cfg.mget_keys, 10):
            pipeline.append(encode("INCR", f"soak:mget:{i}"))
        for key in WELL_KEYS:
            pipeline.append(encode("INCR", key))
        for chunk in range(0, len(pipeline), 500):
            part = pipeline[chunk : chunk + 500]
            c.send(b"".join(part))
            replies = [c.read_reply() for _ in part]
            bad = [r for r in replies if not isinstance(r, int)]
            assert not bad, f"seeding failed: {bad[:3]}"
        for start in range(0, cfg.users, 200):
            batch = [
                encode("ACL", "SETUSER", f"churn{i}", "on", f">pw{i}", "~soak:*", "+@read")
                for i in range(start, min(cfg.users, start + 200))
            ]
            c.send(b"".join(batch))
            replies = [c.read_reply() for _ in batch]
            assert all(r == "OK" for r in replies), replies[:3]


def run_soak(base: Path, etcd: EtcdCluster, cfg: SoakConfig, say: Callable[[str], None] = print) -> SoakReport:
    """One soak on a fresh three-node cluster under ``base`` (stopped before returning)."""
    metrics = [free_port() for _ in range(3)]
    cluster = MarchCluster(
        base,
        etcd.endpoints,
        lease_ttl=cfg.lease_ttl,
        extra_args=["--requirepass", ADMIN_PASSWORD],
        password=ADMIN_PASSWORD,
    )
    for node, port in zip(cluster.nodes, metrics, strict=True):
        node.extra_args += ["--metrics-port", str(port)]
    report = SoakReport()
    stop = threading.Event()
    sampler: RssSampler | None = None
    child: multiprocessing.process.BaseProcess | None = None
    parent_end = None
    try:
        cluster.start()
        seed(cluster, cfg, say)
        ports = [n.port for n in cluster.nodes]
        seeds = [n.address for n in cluster.nodes]
        sampler = RssSampler(cluster.nodes, stop)
        sampler.sample()
        sampler.start()
        started = History.now()
        deadline = time.monotonic() + cfg.seconds
        half = cluster.wait_settled(30)
        load = Load(
            seeds,
            keys=WELL_KEYS,
            cluster_clients=cfg.well_clients // 2,
            plain_clients=cfg.well_clients - cfg.well_clients // 2,
            rate=cfg.well_rate,
            max_seconds=cfg.seconds + 60,
            username=APP[0],
            password=APP[1],
        )
        new_keys = NewKeyClient(Targets(ports, metrics), cfg.new_key_rate, stop, deadline)
        ctx = multiprocessing.get_context("spawn")
        parent_end, child_end = ctx.Pipe()
        child = ctx.Process(target=run_abusers, args=(cfg, ports, metrics, cfg.seconds, child_end), daemon=True)
        say(f"soak: {cfg.seconds:.0f} s; abusers in pid {os.getpid()}'s child; primary {half.node_id}")
        load.start()
        new_keys.start()
        child.start()
        fault_at: int | None = None
        fault_end = 0
        old_primary = ""
        while time.monotonic() < deadline:
            left = deadline - time.monotonic()
            if cfg.kill and fault_at is None and left <= cfg.seconds / 2:
                victim = cluster.wait_primary(10)
                old_primary = victim.address
                say(f"kill -9 of the primary {victim.node_id} ({victim.address})")
                fault_at = History.now()
                cluster.kill(victim)
                cluster.wait_primary(3 * cfg.lease_ttl + 20, exclude=[victim])
                cluster.restart(victim)
                # The fault lasts until the killed node is back and knows the primary: until then a
                # client that reaches it is told CLUSTERDOWN, as by any node that knows no primary.
                settled = cluster.wait_settled(3 * cfg.lease_ttl + 20)
                fault_end = History.now()
                say(f"{victim.node_id} started again; primary now {settled.node_id}")
            stop.wait(min(1.0, max(0.0, left)))
            say(f"  t={cfg.seconds - max(0.0, deadline - time.monotonic()):.0f}s: {load.ok} IDs, {load.errors} errors")
        load.stop(check=False)
        stop.set()
        new_keys.join(10)
        if parent_end.poll(cfg.seconds + 60):
            report.abusers = parent_end.recv()
        child.join(30)
        # Memory once the abusers are gone: every node, a moment after their connections closed.
        end_at = time.monotonic() + cfg.rss_settle
        while time.monotonic() < end_at:
            sampler.sample()
            time.sleep(RSS_PERIOD)  # sampling a figure over a fixed settle time, not synchronisation
        report.seconds = cfg.seconds
        report.running = {n.node_id: n.running for n in cluster.nodes}
        f = figures(load.histories, fault_at, old_primary or None)
        report.ops, report.errors = f.ops, f.errors
        report.duplicates, report.order_violations, report.problems = f.duplicates, f.order_violations, f.problems
        report.failover = f.failover
        report.error_kinds, report.error_samples = f.error_kinds, f.error_samples
        lo = hi = None
        if fault_at is not None:
            lo = fault_at
            hi = max(fault_at + int(((f.failover or 3 * cfg.lease_ttl + 20) + 1.0) * 1e9), fault_end + int(1e9))
            report.window = ((lo - started) / 1e9, (hi - started) / 1e9)
        outside = [
            o.replied - o.sent
            for h in load.histories.values()
            for o in h.ops
            if lo is None or hi is None or o.replied < lo or o.sent > hi
        ]
        report.p50, report.p99, report.worst = _quantiles(outside)
        report.errors_outside = [
            f"{x.error} (from {x.node or '?'}, sent at {(x.sent - started) / 1e9:.1f} s)"
            for h in load.histories.values()
            for x in h.failures
            if lo is None or hi is None or x.replied < lo or x.sent > hi
        ]
        nk = [r - s for s, r in new_keys.latencies if lo is None or hi is None or r < lo or s > hi]
        report.new_key_ops = len(new_keys.latencies)
        report.new_key_p50, report.new_key_p99, report.new_key_worst = _quantiles(nk)
        for name, samples in sampler.samples.items():
            if samples:
                kbs = [kb for _, kb in samples]
                report.rss[name] = (kbs[0], max(kbs), kbs[-1])
        report.rss_series = sampler.samples
        report.breaches = [b for tally, _, _ in report.abusers.values() for b in tally.breaches]
        events = [(fault_at, "kill -9 of the primary")] if fault_at is not None else []
        report.series = time_series(load.histories, events)
        sends = [o.sent for h in load.histories.values() for o in h.ops] + [started]
        report.started_mono = min(sends) / 1e9
        return report
    finally:
        stop.set()
        if parent_end is not None:
            with contextlib.suppress(OSError):
                parent_end.close()
        if child is not None and child.is_alive():
            child.terminate()
            child.join(10)
        if sampler is not None:
            sampler.join(5)
        cluster.stop()
