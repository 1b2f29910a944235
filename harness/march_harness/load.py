"""Concurrent INCR load against a March cluster, recorded as histories, and a drill's figures.

`Load(seeds, histories)` runs client threads, each looping `INCR` over a few keys, bounded in
count and time, until `stop()`:

- `ClusterClient`: redis-py `RedisCluster` (follows MOVED, refreshes the topology after a
  connection error, retries a few times with a short backoff);
- `PlainClient`: one plain redis-py connection that follows `MOVED` by hand and, after a
  connection error or timeout, tries the next seed address;
- `ForwardClient`: plain redis-py connections to every seed, each request to the next one, for
  nodes that forward key requests to the key's primary (``--redirect forward``).

Every request is recorded in the key's `History`: an `Op` (send time, reply time, ID, node
that answered) or a `Failure` (error text). A request's send time is taken before its first
byte; for a plain client that was redirected it is the send time of the attempt that got the
ID (a MOVED reply hands out nothing).

`figures()` turns the histories of one drill into the numbers the drills report: failover
time (fault to the first successful INCR served by another node than the old primary), error
count and window, longest request delay, longest gap between successful replies, duplicates,
order violations. `time_series()` cuts the same histories into 100 ms buckets (IDs, errors,
latency) for scripts/drill's charts: computed afterwards, it adds nothing to the clients' loop
and keeps nothing the histories do not already hold.

With leadership groups (``group_keys``): ``Load(key_sets=...)`` gives every key set (one per
group) its own clients, so a paused or dead group never holds up another group's requests in a
shared client loop, and `figures(..., groups=N)` adds a `GroupFigures` per group: its IDs,
errors, longest gap between successful replies (the "other groups keep serving" measure), when it
resumed on another node after the fault, duplicates and order violations.

Nothing sleeps to synchronise: `wait_ops` / `wait_success` poll counters with a deadline.
A client paces itself only if given a rate.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis import Redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.cluster import ClusterNode as RedisClusterNode
from redis.cluster import RedisCluster
from redis.exceptions import ClusterDownError, MovedError, RedisClusterException, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from march_harness.history import Analysis, History, analyze, analyze_groups, group_of_key, group_slots

KEYS = ("drill:a", "drill:b", "{drill}:c", "drill:ts")
TIMESTAMP_KEY = "drill:ts"  # made a snowflake timestamp sequence before any load (DrillEnv.start)
SOCKET_TIMEOUT = 1.0  # a paused node must cost a client about this, not redis-py's 5 s default
MAX_HOPS = 5  # MOVED redirects a plain client follows for one request
ERROR_PAUSE = 0.01  # after a failed request, before the next (no hot loop against a dead node)
MAX_SECONDS = 120.0  # hard bound on any load, whatever the caller forgets
MAX_OPS_PER_CLIENT = 2_000_000
KEYS_PER_GROUP = 2  # besides the timestamp key: two plain counters per group, one per client kind

NS = 1_000_000_000


def _seconds(ns: int) -> float:
    return ns / NS


class Client(threading.Thread):
    """One load client: `INCR` over ``keys`` in turn until stopped, the deadline or ``max_ops``."""

    kind = "client"

    def __init__(
        self,
        name: str,
        seeds: Sequence[str],
        histories: dict[str, History],
        stop: threading.Event,
        *,
        keys: Sequence[str] = KEYS,
        rate: float | None = None,
        max_seconds: float = MAX_SECONDS,
        max_ops: int = MAX_OPS_PER_CLIENT,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.username = username  # AUTH as this user (None: the default user, no password)
        self.password = password
        self.seeds = list(seeds)
        self.histories = histories
        self.stop_event = stop
        self.keys = list(keys)
        self.interval = 1.0 / rate if rate else 0.0
        self.max_seconds = max_seconds
        self.max_ops = max_ops
        self.ok = 0
        self.errors = 0
        self.crash: BaseException | None = None

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as e:  # surfaced by Load.stop(), not lost in the thread
            self.crash = e
        finally:
            self.close()

    def _loop(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        next_at = time.monotonic()
        for key in itertools.islice(itertools.cycle(self.keys), self.max_ops):
            if self.stop_event.is_set() or time.monotonic() >= deadline:
                return
            if self.interval:
                next_at += self.interval
                delay = next_at - time.monotonic()
                if delay > 0:
                    self.stop_event.wait(delay)  # pacing to a rate, not synchronisation
                else:
                    next_at = time.monotonic()  # behind: do not burst to catch up
            history = self.histories[key]
            sent = History.now()
            try:
                value, node, sent = self.incr(key, sent)
            except (RedisError, RedisClusterException, OSError) as e:
                history.record_error(self.name, sent, History.now(), f"{type(e).__name__}: {e}", self.current_node())
                self.errors += 1
                self.failed(e)
                self.stop_event.wait(ERROR_PAUSE)
                continue
            history.record(self.name, sent, History.now(), value, node)
            self.ok += 1

    def incr(self, key: str, sent: int) -> tuple[int, str, int]:
        """INCR ``key``: (ID, host:port that answered, send time of the attempt that got it)."""
        raise NotImplementedError

    def current_node(self) -> str:
        return ""

    def failed(self, error: BaseException) -> None:
        """After a failed request (already recorded)."""

    def close(self) -> None:
        pass


class ClusterClient(Client):
    """redis-py `RedisCluster` seeded with every node; it finds the primary by `CLUSTER SLOTS`."""

    kind = "cluster"

    rc: RedisCluster | None = None  # made on first use: its constructor already talks to the cluster

    def _client(self) -> RedisCluster:
        if self.rc is None:
            # The constructor reads the topology: with no primary known it fails, like a request.
            self.rc = RedisCluster(
                startup_nodes=[RedisClusterNode(*_split(a)) for a in self.seeds],  # type: ignore[no-untyped-call]
                socket_timeout=SOCKET_TIMEOUT,
                socket_connect_timeout=SOCKET_TIMEOUT,
                retry=Retry(ExponentialBackoff(cap=0.1, base=0.01), retries=6),
                username=self.username,
                password=self.password,
            )
        return self.rc

    def incr(self, key: str, sent: int) -> tuple[int, str, int]:
        rc = self._client()
        value = rc.incr(key)
        node = rc.get_node_from_key(key)  # type: ignore[no-untyped-call]  # after a MOVED or a refresh: who answered
        return int(value), node.name if node else "", sent

    def current_node(self) -> str:
        if self.rc is None:
            return ""
        node = self.rc.get_node_from_key(self.keys[0])  # type: ignore[no-untyped-call]
        return node.name if node else ""

    def failed(self, error: BaseException) -> None:
        # Topology trouble ("cannot be connected", "slots not covered") leaves the client's view in
        # doubt: start again from the seeds, as an application would.
        if isinstance(error, RedisClusterException):
            self.close()

    def close(self) -> None:
        if self.rc is not None:
            rc, self.rc = self.rc, None
            rc.close()


class PlainClient(Client):
    """One plain redis-py connection (no retries of its own) that follows MOVED by hand; after a
    connection error or timeout it moves on to the next seed."""

    kind = "plain"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._seed = itertools.cycle(self.seeds)
        self.address = next(self._seed)
        self.r: Redis | None = None

    def _connect(self, address: str) -> Redis:
        if self.r is not None:
            self.r.close()
        host, port = _split(address)
        self.address = address
        self.r = Redis(
            host=host,
            port=port,
            socket_timeout=SOCKET_TIMEOUT,
            socket_connect_timeout=SOCKET_TIMEOUT,
            retry=Retry(NoBackoff(), 0),
            username=self.username,
            password=self.password,
        )
        return self.r

    def incr(self, key: str, sent: int) -> tuple[int, str, int]:
        r = self.r or self._connect(self.address)
        for _ in range(MAX_HOPS):
            try:
                return int(r.incr(key)), self.address, sent
            except MovedError as e:
                r = self._connect(f"{e.host}:{e.port}")
                sent = History.now()  # the redirected attempt is the one that may get an ID
            except (RedisConnectionError, RedisTimeoutError, OSError, ClusterDownError):
                # Dead, paused, or knows no primary: try the next seed next time.
                self._connect(next(self._seed))
                raise
            # TRYAGAIN (e.g. a primary taking over) propagates: the client stays on this node
        raise RedisError(f"more than {MAX_HOPS} MOVED redirects")

    def current_node(self) -> str:
        return self.address

    def close(self) -> None:
        if self.r is not None:
            self.r.close()


class ForwardClient(Client):
    """Plain redis-py connections, one per seed, used in turn: each request goes to the next node,
    whatever it leads. For nodes in forward mode (``--redirect forward``), which relay a key
    request to its group's primary: a MOVED here is an error (a plain client cannot follow it)."""

    kind = "forward"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._turn = itertools.cycle(self.seeds)
        self.address = self.seeds[0]
        self._conns: dict[str, Redis] = {}

    def _conn(self, address: str) -> Redis:
        if address not in self._conns:
            host, port = _split(address)
            self._conns[address] = Redis(
                host=host,
                port=port,
                socket_timeout=SOCKET_TIMEOUT,
                socket_connect_timeout=SOCKET_TIMEOUT,
                retry=Retry(NoBackoff(), 0),
                username=self.username,
                password=self.password,
            )
        return self._conns[address]

    def incr(self, key: str, sent: int) -> tuple[int, str, int]:
        self.address = next(self._turn)
        return int(self._conn(self.address).incr(key)), self.address, sent

    def current_node(self) -> str:
        return self.address

    def close(self) -> None:
        for r in self._conns.values():
            r.close()
        self._conns.clear()


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def group_keys(groups: int, per_group: int = KEYS_PER_GROUP) -> list[list[str]]:
    """The load's keys, one list per group: with one group `KEYS`; with N, ``per_group`` names
    ``drill:g<g>:<i>`` whose slots fall in each group's range, and `TIMESTAMP_KEY` in its own."""
    if groups == 1:
        return [list(KEYS)]
    sets: list[list[str]] = [[] for _ in range(groups)]
    for g in range(groups):
        for i in itertools.count():
            name = f"drill:g{g}:{i}"
            if group_of_key(name, groups) == g:
                sets[g].append(name)
                if len(sets[g]) == per_group:
                    break
    sets[group_of_key(TIMESTAMP_KEY, groups)].append(TIMESTAMP_KEY)
    return sets


class Load:
    """``cluster_clients`` RedisCluster clients and ``plain_clients`` plain ones on ``keys``,
    recording into ``histories`` (made if not given; pass the same dict to continue a history).
    With ``key_sets``, that many clients of each kind for every key set instead (``keys`` unused)."""

    def __init__(
        self,
        seeds: Sequence[str],
        histories: dict[str, History] | None = None,
        *,
        keys: Sequence[str] = KEYS,
        cluster_clients: int = 2,
        plain_clients: int = 2,
        rate: float | None = None,
        max_seconds: float = MAX_SECONDS,
        username: str | None = None,
        password: str | None = None,
        key_sets: Sequence[Sequence[str]] | None = None,
        forward_clients: int = 0,
    ) -> None:
        sets = [list(ks) for ks in key_sets] if key_sets is not None else [list(keys)]
        self.keys = [k for ks in sets for k in ks]
        self.histories = histories if histories is not None else {k: History() for k in self.keys}
        for k in self.keys:
            self.histories.setdefault(k, History())
        self._stop = threading.Event()
        self.clients: list[Client] = []
        for s, ks in enumerate(sets):
            tag = "" if key_sets is None else f"g{s}-"
            limits: dict[str, Any] = {
                "keys": ks, "rate": rate, "max_seconds": max_seconds, "username": username, "password": password,
            }  # fmt: skip
            self.clients += [
                ClusterClient(f"{tag}cluster{i}", seeds, self.histories, self._stop, **limits)
                for i in range(cluster_clients)
            ]
            # Plain clients start on different seeds: one of them talks to a standby from the start.
            for i in range(plain_clients):
                first = (i + s) % len(seeds)
                rotated = list(seeds[first:]) + list(seeds[:first])
                self.clients.append(PlainClient(f"{tag}plain{i}", rotated, self.histories, self._stop, **limits))
            for i in range(forward_clients):
                first = (i + s) % len(seeds)
                rotated = list(seeds[first:]) + list(seeds[:first])
                self.clients.append(ForwardClient(f"{tag}forward{i}", rotated, self.histories, self._stop, **limits))
        self.started_at = 0

    def __enter__(self) -> Load:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(check=exc[0] is None)

    def start(self) -> None:
        self.started_at = History.now()
        for c in self.clients:
            c.start()

    def stop(self, check: bool = True, timeout: float = 15.0) -> None:
        """Stop every client and wait for it (each ends within its socket timeout and retries).
        With ``check``, a client thread that crashed or hung fails here."""
        self._stop.set()
        for c in self.clients:
            c.join(timeout)
        if check:
            hung = [c.name for c in self.clients if c.is_alive()]
            crashed = [(c.name, repr(c.crash)) for c in self.clients if c.crash is not None]
            assert not hung and not crashed, f"load clients hung: {hung}, crashed: {crashed}"

    # -- counters and waits --------------------------------------------------------------------
    @property
    def ok(self) -> int:
        return sum(c.ok for c in self.clients)

    @property
    def errors(self) -> int:
        return sum(c.errors for c in self.clients)

    def wait_ops(self, n: int, timeout: float = 30.0) -> None:
        """Until ``n`` more successful INCRs than now."""
        target = self.ok + n
        _wait(lambda: self.ok >= target, timeout, f"{n} more successful INCRs ({self.errors} errors so far)")

    def wait_each(self, key_sets: Sequence[Sequence[str]], n: int, timeout: float = 30.0) -> None:
        """Until the keys of every set (a group's) have ``n`` more successful INCRs than now."""
        targets = [(ks, sum(len(self.histories[k]) for k in ks) + n) for ks in key_sets]
        _wait(
            lambda: all(sum(len(self.histories[k]) for k in ks) >= t for ks, t in targets),
            timeout,
            f"{n} more successful INCRs on the keys of each group",
        )

    def wait_success(
        self,
        since: int,
        not_from: Iterable[str] = (),
        timeout: float = 30.0,
        sent_after: int | None = None,
        keys: Iterable[str] | None = None,
    ) -> tuple[int, str]:
        """Until a request sent at or after ``sent_after`` (default: ``since``) for one of ``keys``
        (default: any) succeeds on a node not in ``not_from``; return (reply time, node) of the
        first such reply."""
        excluded = set(not_from)
        floor = since if sent_after is None else sent_after
        watched = {k: self.histories[k] for k in (self.histories if keys is None else keys)}
        seen = {k: 0 for k in watched}  # ops already looked at, per key
        hits: list[tuple[int, str]] = []

        def found() -> bool:
            for key, h in watched.items():
                new = h.ops_from(seen[key])
                seen[key] += len(new)
                hits.extend((o.replied, o.node) for o in new if o.sent >= floor and o.node and o.node not in excluded)
            return bool(hits)

        _wait(found, timeout, f"a successful INCR on a node other than {sorted(excluded)}")
        return min(hits)


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


@dataclass
class GroupFigures:
    """One group's share of a drill (its keys only). Times in seconds."""

    group: int
    slots: tuple[int, int]
    affected: bool = False  # its primary was on the faulty node
    ops: int = 0
    errors: int = 0
    longest_gap: float = 0.0  # longest time without a successful reply for this group's keys
    gap_at: float | None = None  # when that gap began, from the fault (negative: before it)
    resumed: float | None = None  # fault -> its first successful INCR on another node than the old primary
    duplicates: int = 0
    order_violations: int = 0

    def line(self) -> str:
        resumed = "" if self.resumed is None else f", resumed on another node after {self.resumed * 1000:.0f} ms"
        at = "" if self.gap_at is None else f" (from {self.gap_at * 1000:+.0f} ms)"
        faulted = ", its primary faulted" if self.affected else ""
        return (
            f"group {self.group} (slots {self.slots[0]}-{self.slots[1]}{faulted}): "
            f"{self.ops} IDs, {self.errors} errors, longest gap {self.longest_gap * 1000:.0f} ms{at}{resumed}, "
            f"{self.duplicates} duplicates, {self.order_violations} order violations"
        )


@dataclass
class Figures:
    """What one drill repetition measured. Times in seconds; None where it does not apply."""

    ops: int = 0
    errors: int = 0
    failover: float | None = None  # fault -> first successful INCR on another node than the old primary
    error_window: float = 0.0  # first failed request sent -> last failure seen
    longest_delay: float = 0.0  # longest request, successful or not
    longest_gap: float = 0.0  # longest time without any successful reply, after load started
    old_primary_last: float | None = None  # fault -> last successful reply from the old primary
    duplicates: int = 0
    order_violations: int = 0  # real-time order, including per-client decreases
    problems: list[str] = field(default_factory=list)
    error_kinds: dict[str, int] = field(default_factory=dict)
    error_samples: list[str] = field(default_factory=list)  # the first few distinct error texts, with their node
    groups: list[GroupFigures] = field(default_factory=list)  # one per group (also with one group)

    def line(self) -> str:
        def s(x: float | None) -> str:
            return "-" if x is None else f"{x * 1000:.0f} ms"

        return (
            f"failover {s(self.failover)}, error window {s(self.error_window)}, {self.errors} errors, "
            f"longest delay {s(self.longest_delay)}, longest gap {s(self.longest_gap)}, {self.ops} IDs, "
            f"{self.duplicates} duplicates, {self.order_violations} order violations"
        )


def figures(
    histories: dict[str, History],
    fault_at: int | None = None,
    old_primary: str | None = None,
    groups: int = 1,
    affected: Iterable[int] | None = None,
    old_until: int | None = None,
) -> Figures:
    """The figures of one drill: ``fault_at`` is when the fault was made (monotonic ns),
    ``old_primary`` the host:port that was primary then. With ``groups`` > 1 and ``affected`` (the
    groups the old primary led), the failover time is the last of those groups to resume: the
    other groups were served by other nodes all along. ``old_until``: only requests sent before it
    count for the old primary's last ID (with groups a healed node soon leads again, rightly)."""
    f = Figures()
    analyses: list[Analysis] = []
    for key, h in histories.items():
        a = analyze(h)
        analyses.append(a)
        f.problems += [f"{key}: {p}" for p in a.problems]
    f.ops = sum(a.ops for a in analyses)
    f.duplicates = sum(a.duplicates for a in analyses)
    f.order_violations = sum(a.order_violations + a.decreases for a in analyses)
    ops = [op for h in histories.values() for op in h.ops]
    failures = [x for h in histories.values() for x in h.failures]
    f.errors = len(failures)
    for x in failures:
        kind = x.error.split(" ", 1)[0].rstrip(":")
        f.error_kinds[kind] = f.error_kinds.get(kind, 0) + 1
        sample = f"{x.error} (from {x.node or '?'})"
        if len(f.error_samples) < 5 and sample not in f.error_samples:
            f.error_samples.append(sample)
    if failures:
        f.error_window = _seconds(max(x.replied for x in failures) - min(x.sent for x in failures))
    f.longest_delay = _seconds(max([o.replied - o.sent for o in ops] + [x.replied - x.sent for x in failures] + [0]))
    replies = sorted(o.replied for o in ops)
    if replies:
        f.longest_gap = _seconds(max([b - a for a, b in itertools.pairwise(replies)] + [0]))
    if fault_at is not None and old_primary is not None:
        after = [o.replied for o in ops if o.replied >= fault_at and o.node and o.node != old_primary]
        if after:
            f.failover = _seconds(min(after) - fault_at)
        cutoff = old_until if old_until is not None else max([o.sent for o in ops] + [0]) + 1
        old_late = [o.replied for o in ops if o.replied >= fault_at and o.node == old_primary and o.sent < cutoff]
        if old_late:
            f.old_primary_last = _seconds(max(old_late) - fault_at)
    if groups > 1 and affected is None:  # no node's groups were faulted: other nodes served all along
        f.failover = f.old_primary_last = None
    hit = set(range(groups) if affected is None and groups == 1 else affected or ())
    f.groups = group_figures(histories, groups, hit, fault_at, old_primary)
    if groups > 1 and fault_at is not None and old_primary is not None and hit:
        resumed = [g.resumed for g in f.groups if g.affected]
        f.failover = None if None in resumed else max(r for r in resumed if r is not None)
    return f


def _longest_gap(replies: list[int]) -> tuple[float, int | None]:
    """The longest time between two successive replies (seconds) and when it began (ns)."""
    gaps = [(b - a, a) for a, b in itertools.pairwise(sorted(replies))]
    if not gaps:
        return 0.0, None
    gap, start = max(gaps)
    return _seconds(gap), start


def group_figures(
    histories: dict[str, History], groups: int, affected: set[int], fault_at: int | None, old_primary: str | None
) -> list[GroupFigures]:
    """One `GroupFigures` per group, from the histories of its keys."""
    analyses = analyze_groups(histories, groups)
    out = [GroupFigures(g, group_slots(g, groups), g in affected) for g in range(groups)]
    mine: dict[int, list[History]] = {g: [] for g in range(groups)}
    for key, h in histories.items():
        mine[group_of_key(key, groups)].append(h)
    for gf in out:
        a = analyses[gf.group]
        gf.ops, gf.duplicates, gf.order_violations = a.ops, a.duplicates, a.order_violations + a.decreases
        ops = [o for h in mine[gf.group] for o in h.ops]
        gf.errors = sum(len(h.failures) for h in mine[gf.group])
        gf.longest_gap, start = _longest_gap([o.replied for o in ops])
        if start is not None and fault_at is not None:
            gf.gap_at = _seconds(start - fault_at)
        if gf.affected and fault_at is not None and old_primary is not None:
            after = [o.replied for o in ops if o.replied >= fault_at and o.node and o.node != old_primary]
            gf.resumed = _seconds(min(after) - fault_at) if after else None
    return out


# -- time series for the drill charts ------------------------------------------------------------

SERIES_WIDTH = 0.1  # seconds per bucket: fine enough to see a failover of a few hundred ms
SERIES_MIN_BUCKETS = 50  # a shorter load gets finer buckets (down to 1 ms), or its chart is a few bars
SERIES_WIDTHS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, SERIES_WIDTH)  # round numbers read better on an axis


@dataclass(frozen=True)
class Bucket:
    """One slice of a load, by reply time: successes, errors and the latency of the successes (s)."""

    start: float  # seconds since the load started
    ok: int = 0
    errors: int = 0
    p50: float = 0.0
    p99: float = 0.0
    max: float = 0.0


@dataclass(frozen=True)
class Marker:
    at: float  # seconds since the load started
    label: str


@dataclass
class TimeSeries:
    width: float
    buckets: list[Bucket]
    events: list[Marker]


def time_series(
    histories: dict[str, History], events: Iterable[tuple[int, str]] = (), width: float | None = None
) -> TimeSeries:
    """The histories of one drill cut into ``width``-second buckets, plus ``events`` ((monotonic
    ns, label)) on the same clock. Computed afterwards from what the load recorded anyway, so
    drawing a chart costs the load nothing. ``width`` None: `SERIES_WIDTH`, or finer for a load
    shorter than `SERIES_MIN_BUCKETS` of those."""
    ops = [op for h in histories.values() for op in h.ops]
    failures = [x for h in histories.values() for x in h.failures]
    events = list(events)
    starts = [o.sent for o in ops] + [x.sent for x in failures]
    if not starts:
        return TimeSeries(width or SERIES_WIDTH, [], [])
    t0 = min(starts)
    end = max([o.replied for o in ops] + [x.replied for x in failures] + [t for t, _ in events])
    if width is None:
        fits = [w for w in SERIES_WIDTHS if w * SERIES_MIN_BUCKETS <= _seconds(end - t0)]
        width = fits[-1] if fits else SERIES_WIDTHS[0]
    step = int(width * NS)
    n = (end - t0) // step + 1
    latencies: list[list[int]] = [[] for _ in range(n)]
    errors = [0] * n
    for o in ops:
        latencies[(o.replied - t0) // step].append(o.replied - o.sent)
    for x in failures:
        errors[(x.replied - t0) // step] += 1
    buckets = []
    for i, lat in enumerate(latencies):
        lat.sort()
        buckets.append(
            Bucket(i * width, len(lat), errors[i], _quantile(lat, 0.5), _quantile(lat, 0.99), _quantile(lat, 1))
        )
    markers = [Marker(_seconds(t - t0), label) for t, label in sorted(events) if t >= t0]
    return TimeSeries(width, buckets, markers)


def _quantile(ordered: list[int], q: float) -> float:
    """The ``q`` quantile (nearest rank) of sorted nanoseconds, in seconds; 0 for none."""
    return _seconds(ordered[min(len(ordered) - 1, int(q * len(ordered)))]) if ordered else 0.0
