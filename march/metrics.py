"""Prometheus metrics: plain counters the server bumps, turned into metric families only when scraped.

**Cost on the hot path.** The INCR fast path must not get slower: the server reads the clock
twice per read of the socket (not per request), and counts the requests answered in that read by
command (``Connection.account``): a dict lookup by the name as sent and one slot of a preallocated
list, ``duration.bit_length()``, bumped (a power-of-two histogram in nanoseconds, as Redis' LATENCY
HISTOGRAM; cheaper than a bisect). A read of one request, the common case, is timed exactly; the
requests of a pipelined read each get an equal share of its time; a request that waits (a store
write, a promotion) is timed alone when it is done. Counts, errors and waits are plain ints;
nothing here allocates per request. Everything Prometheus-shaped (families, labels, cumulative
buckets) is built by ``MarchCollector.collect`` at scrape time, from those counters and from the
state that already exists (serving state, keyspace, store, ``App.stats``).

**Serving.** ``MetricsServer`` answers ``GET /metrics`` on ``bind:metrics_port``
(prometheus-client's exposition, a registry of our own, never the global one). A body is rendered
at most once a second, on a thread of its own, and shared by every scrape of that second; the
port takes at most ``metrics_max_connections`` connections, each for at most ``metrics_timeout``
seconds to send its request and as long to take the reply (see the class).

**Label cardinality.** Commands are labelled by their registered name (unknown names share
``unknown``), errors by their Redis kind (``err``, ``tryagain``, ``moved``...). Per-sequence
series would be one per key (tens of thousands): only the ``TOP_SEQUENCES`` sequences that
handed out the most IDs in the current term get one (``march_sequence_ids_issued``); the node's
total is ``march_ids_issued_total``.

What this module must never do: change what a client gets, block the loop for long, or expose a
secret (no label or value comes from a password or a command's arguments).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import math
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from .generators.sequence import MAX_ID, SequenceGenerator
from .generators.timestamp import TimestampGenerator

if TYPE_CHECKING:
    from .app import App

log = logging.getLogger("march.metrics")

# Request latency: slot k of ``CommandStats.hist`` counts durations of k bits (2**(k-1) <= ns <
# 2**k). Exposed from 2**12 ns (4.1 µs: a fast-path INCR takes a few) to 2**34 ns (17 s: past
# max_wait, 2 s by default, and store_timeout); the slots below are folded into the first bucket.
LATENCY_SLOTS = 64  # an int from perf_counter_ns differences has fewer bits
LATENCY_FIRST_BIT = 12
LATENCY_LAST_BIT = 34
# Store transaction buckets (seconds): a local SQLite commit is ~1 ms, an etcd one a few ms.
STORE_BOUNDS_S: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
RECORD_BOUNDS: tuple[int, ...] = (1, 2, 5, 10, 25, 50, 100)  # records per store transaction (etcd: at most 100)
BATCH_BOUNDS: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000, 10_000_000)  # IDs a sequence persists at once
TOP_SEQUENCES = 10  # per-sequence series: only the busiest, to keep the label cardinality bounded
_MAX_ERROR_KINDS = 32  # error kinds come from errors.py's prefixes; past this they count as "other"
_REQUEST_LIMIT = 8192  # bytes of an HTTP request head the metrics endpoint reads
_REQUEST_TIMEOUT = 5.0  # seconds a scraper has to send its request, and then to take the reply (metrics_timeout)
# Seconds a rendered /metrics body is served again: Prometheus scrapes every 15 s by default, so one
# render a second keeps every scraper current while a flood of scrapes costs one render a second.
RENDER_INTERVAL = 1.0
_RENDER_ATTEMPTS = 3  # a render off the loop that met a dict changing size is tried again
_REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 37\r\n"
    b"Connection: close\r\n\r\ntoo many connections to metrics port\n"
)


@dataclass(frozen=True, slots=True)
class CommandCounts:
    """One command's counts since the last CONFIG RESETSTAT (INFO commandstats and errorstats, LATENCY
    HISTOGRAM), kept apart as Redis keeps them: a request refused before it ran (wrong arity, NOAUTH,
    NOPERM, MOVED, not allowed in a transaction...) is ``rejected``, not a call; one queued by MULTI is
    no call either until EXEC runs it; a call answered with an error is ``failed``."""

    calls: int
    usec: int
    rejected: int
    failed: int
    errors: dict[str, int]  # error kind -> replies, rejected and failed alike
    hist: list[int]  # as ``CommandStats.hist``


class CommandStats:
    """One command's counters, never reset (Prometheus wants them monotonic). ``hist[k]``: requests
    whose duration in ns has k bits (the server bumps it inline), every answered request, refused
    and queued ones too; ``rejected``: the refused ones (``commands.dispatch.reject``), each of
    which was also answered with an error (``error``); ``queued``: the ones MULTI queued (answered
    QUEUED; EXEC counts them again when it runs them). CONFIG RESETSTAT takes a snapshot
    (``reset_view``) that ``since_reset`` subtracts."""

    __slots__ = ("_base", "errors", "hist", "name", "queued", "rejected", "total_ns", "waits")

    def __init__(self, name: str) -> None:
        self.name = name
        self.hist = [0] * LATENCY_SLOTS
        self.total_ns = 0
        self.errors: dict[str, int] = {}  # error kind ("ERR", "TRYAGAIN", ...) -> replies
        self.waits = 0  # requests that had to wait (a store write or read, a promotion)
        self.rejected = 0  # requests refused before they ran (also counted in ``hist`` and ``errors``)
        self.queued = 0  # requests queued by MULTI (also counted in ``hist``)
        self._base: _Snapshot | None = None  # the counters at the last CONFIG RESETSTAT

    def observe(self, ns: int, count: int = 1) -> None:
        """``count`` requests that took ``ns`` each (the server inlines this on its fast path)."""
        self.hist[ns.bit_length()] += count
        self.total_ns += ns * count

    def error(self, kind: str) -> None:
        errors = self.errors
        if kind not in errors and len(errors) >= _MAX_ERROR_KINDS:
            kind = "OTHER"
        errors[kind] = errors.get(kind, 0) + 1

    @property
    def calls(self) -> int:
        return sum(self.hist)

    def _snapshot(self) -> _Snapshot:
        return _Snapshot(list(self.hist), self.total_ns, self.rejected, self.queued, dict(self.errors))

    def reset_view(self) -> None:
        """CONFIG RESETSTAT: ``since_reset`` counts from now."""
        self._base = self._snapshot()

    def since_reset(self) -> CommandCounts:
        now, base = self._snapshot(), self._base or _ZERO
        hist = [n - b for n, b in zip(now.hist, base.hist, strict=True)]
        errors = {k: d for k, n in now.errors.items() if (d := n - base.errors.get(k, 0))}
        rejected, queued = now.rejected - base.rejected, now.queued - base.queued
        return CommandCounts(
            calls=max(0, sum(hist) - rejected - queued),
            usec=(now.total_ns - base.total_ns) // 1000,
            rejected=rejected,
            failed=max(0, sum(errors.values()) - rejected),
            errors=errors,
            hist=hist,
        )


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """A ``CommandStats``' counters at one moment (CONFIG RESETSTAT)."""

    hist: list[int]
    total_ns: int
    rejected: int
    queued: int
    errors: dict[str, int]


_ZERO = _Snapshot([0] * LATENCY_SLOTS, 0, 0, 0, {})


class CommandTable:
    """``CommandStats`` per registered command, found by the name as sent (``spellings``, read on
    the fast path: the lower- and upper-case spellings the registry knows); other spellings are
    looked up case-insensitively each time, so no client can grow this table."""

    def __init__(self) -> None:
        self.spellings: dict[bytes, CommandStats] = {}
        self.by_name: dict[str, CommandStats] = {}
        self.unknown = CommandStats("unknown")

    def of(self, spelled: bytes) -> CommandStats:
        found = self.spellings.get(spelled)
        if found is not None:
            return found
        from .commands.registry import TABLE, lookup  # (the commands import the app, which imports this)

        spec = lookup(spelled)
        if spec is None:
            return self.unknown
        stats = self.by_name.get(spec.name)
        if stats is None:
            stats = self.by_name[spec.name] = CommandStats(spec.name)
        if spelled in TABLE:
            self.spellings[spelled] = stats
        return stats

    def all(self) -> list[CommandStats]:
        return [*self.by_name.values(), self.unknown]

    def reset_view(self) -> None:
        """CONFIG RESETSTAT: INFO commandstats, errorstats and LATENCY HISTOGRAM count from now."""
        for stats in self.all():
            stats.reset_view()


class StoreStats:
    """Store transactions by operation (``save``, ``create``, ``load``...), from the batcher's reports."""

    __slots__ = ("calls", "failures", "hist", "records", "records_hist", "total_s")

    def __init__(self) -> None:
        self.calls = 0
        self.failures = 0
        self.hist = [0] * (len(STORE_BOUNDS_S) + 1)
        self.total_s = 0.0
        self.records = 0
        self.records_hist = [0] * (len(RECORD_BOUNDS) + 1)

    def observe(self, items: int, seconds: float, failed: bool) -> None:
        self.calls += 1
        self.failures += failed
        self.hist[bisect_left(STORE_BOUNDS_S, seconds)] += 1
        self.total_s += seconds
        self.records += items
        self.records_hist[bisect_left(RECORD_BOUNDS, items)] += 1


class NodeMetrics:
    """Everything the server counts for metrics, beside ``App.stats`` (which INFO shows too)."""

    def __init__(self) -> None:
        self.commands = CommandTable()
        self.store: dict[str, StoreStats] = {}

    def store_chunk(self, operation: str, items: int, seconds: float, failure: BaseException | None) -> None:
        stats = self.store.get(operation)
        if stats is None:
            stats = self.store[operation] = StoreStats()
        stats.observe(items, seconds, failure is not None)


def error_kind(message: str) -> str:
    """The Redis error kind of a reply text: its first word (``ERR``, ``TRYAGAIN``, ``MOVED``...)."""
    return message.split(" ", 1)[0] or "ERR"


# --- scrape time ----------------------------------------------------------------------------------


def _cumulative(counts: list[int], bounds: Iterable[float]) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip(bounds, counts, strict=False):
        running += count
        out.append((_le(bound), running))
    out.append(("+Inf", running + counts[-1]))
    return out


def _le(bound: float) -> str:
    return repr(float(bound))


def _latency_buckets(hist: list[int]) -> list[tuple[str, float]]:
    """Cumulative Prometheus buckets (seconds) from a bit-length histogram: le = 2**k ns."""
    running = sum(hist[: LATENCY_FIRST_BIT + 1])
    out = [(_le(2**LATENCY_FIRST_BIT / 1e9), float(running))]
    for k in range(LATENCY_FIRST_BIT + 1, LATENCY_LAST_BIT + 1):
        running += hist[k]
        out.append((_le(2**k / 1e9), float(running)))
    out.append(("+Inf", float(sum(hist))))
    return out


class MarchCollector(Collector):
    """Builds every ``march_*`` family from the node's counters and state when Prometheus scrapes."""

    def __init__(self, app: App) -> None:
        self.app = app
        self._ids_total = 0  # IDs handed out by generators seen at earlier scrapes
        self._seen: dict[int, tuple[Any, int]] = {}  # id(generator) -> (generator, issued when last seen)

    def collect(self) -> Iterator[Metric]:
        app = self.app
        yield from self._node(app)
        yield from self._commands(app)
        yield from self._sequences(app)
        yield from self._store(app)
        yield from self._clients(app)

    def _node(self, app: App) -> Iterator[Metric]:
        from .app import VERSION

        state = app.group.state
        member = app.group.member
        info = GaugeMetricFamily(
            "march_node_info",
            "This node: its id, version, mode and store.",
            labels=["node_id", "version", "mode", "store"],
        )
        info.add_metric([node_id(app), VERSION, "cluster" if app.cluster else "single", app.store.name], 1)
        yield info
        yield GaugeMetricFamily(
            "march_serving", "1 while this node hands out IDs (the primary, serving).", value=int(state.serving)
        )
        yield GaugeMetricFamily(
            "march_primary",
            "1 while this node holds a term (primary: promoting, serving or handing over).",
            value=int(state.leading),
        )
        phase = GaugeMetricFamily("march_phase", "The serving state's phase (1 for the current one).", labels=["phase"])
        for p in type(state.phase):
            phase.add_metric([p.value], int(p is state.phase))
        yield phase
        term = (
            member.registry.topology.leader_revision if member is not None else (state.term.number if state.term else 0)
        )
        yield GaugeMetricFamily(
            "march_term",
            "The current term: the leader key's create revision in etcd (single node: 1); 0 when no primary is known.",
            value=term,
        )
        yield CounterMetricFamily(
            "march_promotions", "Times this node started serving (became primary).", value=state.promotions
        )
        yield CounterMetricFamily(
            "march_demotions",
            "Times this node stopped serving (stepped down, lease lost, handed over).",
            value=state.demotions,
        )
        yield CounterMetricFamily(
            "march_leader_changes",
            "Times the primary this node knows of changed (cluster).",
            value=member.registry.leader_changes if member is not None else 0,
        )
        if member is not None:
            yield CounterMetricFamily(
                "march_lease_renewal_failures",
                "Lease keep-alives to etcd that failed (a primary that cannot renew stops serving at its deadline).",
                value=member.lease.failures_total,
            )
            yield GaugeMetricFamily(
                "march_lease_renewal_failures_in_a_row",
                "Lease keep-alives failed since the last one that worked (0: renewing).",
                value=member.lease.failures,
            )
            yield GaugeMetricFamily(
                "march_lease_remaining_seconds",
                "Seconds until this node's lease deadline (0: passed); a primary stops serving at 0.",
                value=state.remaining(),
            )
        yield GaugeMetricFamily(
            "march_uptime_seconds", "Seconds since this node started.", value=time.monotonic() - app.started_mono
        )

    def _commands(self, app: App) -> Iterator[Metric]:
        table = app.metrics.commands.all()
        calls = CounterMetricFamily(
            "march_commands",
            "Requests by command and outcome (ok, or the Redis error kind: err, tryagain, moved...).",
            labels=["command", "outcome"],
        )
        latency = HistogramMetricFamily(
            "march_command_duration_seconds",
            "Time to answer a request, by command (waits for the store included).",
            labels=["command"],
        )
        waits = CounterMetricFamily(
            "march_command_waits",
            "Requests that had to wait (a store write or read, a promotion), by command.",
            labels=["command"],
        )
        tryagain = 0
        for stats in table:
            n = stats.calls
            if not n:
                continue
            failed = sum(stats.errors.values())
            calls.add_metric([stats.name, "ok"], n - failed)
            for kind, count in stats.errors.items():
                calls.add_metric([stats.name, kind.lower()], count)
            tryagain += stats.errors.get("TRYAGAIN", 0)
            latency.add_metric([stats.name], _latency_buckets(stats.hist), stats.total_ns / 1e9)
            if stats.waits:
                waits.add_metric([stats.name], stats.waits)
        yield calls
        yield latency
        yield waits
        yield CounterMetricFamily(
            "march_tryagain", "TRYAGAIN replies (the client got no ID and should retry).", value=tryagain
        )

    def _sequences(self, app: App) -> Iterator[Metric]:
        gens = app.keyspace.generators
        current = list(gens.values())
        seen, self._seen = self._seen, {}
        for gen in current:
            issued = gen.issued
            _, before = seen.pop(id(gen), (gen, 0))
            self._ids_total += issued - before
            self._seen[id(gen)] = (gen, issued)
        for gen, before in seen.values():  # dropped since the last scrape (a term ended): their last IDs
            self._ids_total += gen.issued - before
        # (A generator loaded and dropped between two scrapes, a term shorter than the scrape
        # interval, is never seen: its IDs are missing here. Nothing is counted on the hot path.)
        yield CounterMetricFamily("march_ids_issued", "IDs handed out by this node.", value=self._ids_total)
        yield GaugeMetricFamily(
            "march_sequences_active",
            "Sequences active in the current term (loaded since it began).",
            value=len(current),
        )
        top = GaugeMetricFamily(
            "march_sequence_ids_issued",
            f"IDs handed out in the current term by the {TOP_SEQUENCES} busiest sequences.",
            labels=["sequence"],
        )
        for key, gen in heapq.nlargest(TOP_SEQUENCES, gens.items(), key=lambda kv: kv[1].issued):
            top.add_metric([key.decode("utf-8", "replace")], gen.issued)
        yield top
        counts = [0] * (len(BATCH_BOUNDS) + 1)
        total = 0
        for gen in current:
            batch = getattr(gen, "_batch", None)  # sequences adapt it; timestamp sequences have none
            if isinstance(batch, int):
                counts[bisect_left(BATCH_BOUNDS, batch)] += 1
                total += batch
        batches = GaugeHistogramMetricFamily(
            "march_sequence_batch_ids",
            "IDs each active sequence persists per store write (its adaptive batch), as a distribution over sequences.",
        )
        batches.add_metric([], _cumulative(counts, BATCH_BOUNDS), total)
        yield batches
        yield from self._headroom(app, current)

    def _headroom(self, app: App, current: list[Any]) -> Iterator[Metric]:
        """How close this node is to a hard limit: the ID maximum, the timestamp lead cap, the worker ids."""
        ceiling = max((g.durable_ceiling for g in current if isinstance(g, SequenceGenerator)), default=0)
        yield GaugeMetricFamily(
            "march_sequence_ceiling_ratio_max",
            "The highest durable ceiling of an active counter sequence, as a fraction of the ID maximum (2**63-1).",
            value=ceiling / MAX_ID,
        )
        lead = [(g.lead_ms(), g.max_lead_ms) for g in current if isinstance(g, TimestampGenerator)]
        yield GaugeMetricFamily(
            "march_timestamp_lead_seconds_max",
            "How far the most advanced active timestamp sequence runs ahead of the wall clock.",
            value=max((ms for ms, _ in lead), default=0) / 1000,
        )
        yield GaugeMetricFamily(
            "march_timestamp_lead_ratio_max",
            "The highest lead of an active timestamp sequence with a cap, as a fraction of its cap (max_lead).",
            value=max((ms / cap for ms, cap in lead if cap), default=0.0),
        )
        workers = app.keyspace.workers
        yield GaugeMetricFamily(
            "march_worker_ids_busy_max",
            "Worker ids held in the fullest namespace, as its last WORKER acquire found them (this term).",
            value=max(workers.busy.values(), default=0),
        )
        yield GaugeMetricFamily(
            "march_worker_ids_limit",
            "Worker ids one namespace may hold at once (worker_max_holders).",
            value=app.config.worker_max_holders,
        )

    def _store(self, app: App) -> Iterator[Metric]:
        ops = CounterMetricFamily(
            "march_store_transactions",
            "Store transactions by operation (save: ceilings, create, load) and outcome.",
            labels=["operation", "outcome"],
        )
        latency = HistogramMetricFamily(
            "march_store_duration_seconds", "Time of one store transaction, by operation.", labels=["operation"]
        )
        records = HistogramMetricFamily(
            "march_store_transaction_records",
            "Records per store transaction (requests of one loop turn share one), by operation.",
            labels=["operation"],
        )
        for name, stats in sorted(app.metrics.store.items()):
            ops.add_metric([name, "ok"], stats.calls - stats.failures)
            ops.add_metric([name, "error"], stats.failures)
            latency.add_metric([name], _cumulative(stats.hist, STORE_BOUNDS_S), stats.total_s)
            records.add_metric([name], _cumulative(stats.records_hist, RECORD_BOUNDS), stats.records)
        yield ops
        yield latency
        yield records
        store = app.store
        yield GaugeMetricFamily(
            "march_store_healthy",
            "0 while the store's last write failed, 1 once one lands.",
            value=int(not store.last_error),
        )
        yield GaugeMetricFamily(
            "march_store_out_of_space",
            "1 while the store says it is full (etcd NOSPACE, a full disk).",
            value=int(store.out_of_space),
        )

    def _clients(self, app: App) -> Iterator[Metric]:
        s = app.stats
        yield GaugeMetricFamily("march_connected_clients", "Client connections open now.", value=len(app.clients))
        yield GaugeMetricFamily(
            "march_max_clients",
            "Most client connections accepted (max_clients, lowered to the fd limit).",
            value=app.max_clients,
        )
        yield GaugeMetricFamily("march_monitors", "Connections in MONITOR mode.", value=len(app.monitors.feeds))
        yield CounterMetricFamily("march_connections", "Client connections accepted or refused.", value=s.connections)
        yield CounterMetricFamily(
            "march_rejected_connections", "Connections refused (max_clients, protected mode).", value=s.rejected
        )
        closed = CounterMetricFamily(
            "march_client_limit_disconnections",
            "Clients closed for a limit: output_buffer (max_output_buffer), query_buffer (query_buffer_budget), "
            "timeout (idle).",
            labels=["limit"],
        )
        closed.add_metric(["output_buffer"], s.output_closed)
        closed.add_metric(["query_buffer"], s.input_closed)
        closed.add_metric(["timeout"], s.timeouts_closed)
        yield closed
        yield CounterMetricFamily("march_auth_failures", "Failed AUTH and HELLO AUTH attempts.", value=s.denied_auth)
        denied = CounterMetricFamily(
            "march_acl_denied", "Requests refused with NOPERM, by what was denied.", labels=["reason"]
        )
        denied.add_metric(["command"], s.denied_command)
        denied.add_metric(["key"], s.denied_key)
        yield denied
        yield CounterMetricFamily(
            "march_protocol_errors", "Connections closed for a protocol error.", value=s.protocol_errors
        )


def node_id(app: App) -> str:
    """This node's id: the cluster id, else ``node_id``, else its address."""
    member = app.group.member
    return member.me.id if member is not None else app.config.node_name(app.port)


def registry_for(app: App) -> CollectorRegistry:
    """A registry of our own (never prometheus-client's global one): the node's families and the process'."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MarchCollector(app))
    ProcessCollector(namespace="march", registry=registry)
    return registry


class MetricsServer:
    """``GET /metrics`` on ``bind:port``. ``start`` / ``stop``.

    What a scraper may cost the node, whoever it is:

    - **Connections**: at most ``max_connections`` at a time; one more gets ``503`` at once (its
      request unread) and is closed.
    - **Time**: a connection has ``timeout`` seconds to send its request head, then ``timeout``
      seconds to take the reply; past either it is cut (aborted, its unsent bytes dropped), so a
      silent, slow or non-reading client holds nothing for long.
    - **Renders**: a body is rendered at most once per ``interval`` (from the start of one render to
      the next) and shared: scrapes that arrive while one renders wait for it, later ones in the
      interval get it as it is. Prometheus scrapes every 15 s by default; 200 scrapes a second cost
      what one does.
    - **The loop**: a render reads the node's counters and state and formats text, work that grows
      with commands and active sequences; it runs on a thread of its own (one render at a time), so
      it is never a long step of the event loop: the loop only waits for the GIL's switch interval
      (5 ms) now and then while it runs. It reads plain ints and dicts the loop mutates; a dict that
      changed size under it is read again (``_RENDER_ATTEMPTS``).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        max_connections: int = 16,
        timeout: float = _REQUEST_TIMEOUT,
        interval: float = RENDER_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.max_connections = max_connections
        self.timeout = timeout
        self.interval = interval
        self._clock = clock
        self.server: asyncio.Server | None = None
        self.port = 0
        self.open = 0  # connections being served now
        self.renders = 0
        self.refused = 0  # connections over max_connections
        self.cut = 0  # connections closed for taking longer than ``timeout``
        self._body = b""
        self._rendered_at = -math.inf
        self._rendering: asyncio.Future[bytes] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        registry.register(_ScrapeStats(self))

    async def start(self, bind: str, port: int) -> int:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="march-metrics")
        self.server = await asyncio.start_server(self._handle, bind, port, reuse_address=True, limit=_REQUEST_LIMIT)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for task in list(self._handlers):
                task.cancel()
            if self._handlers:
                await asyncio.wait(self._handlers, timeout=1.0)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 1.0)
            self.server = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)  # a render in progress takes milliseconds
            self._pool = None

    async def render(self) -> bytes:
        """The body: the one rendered in this interval, the one being rendered, or a new one."""
        if self._rendering is not None:
            return await asyncio.shield(self._rendering)
        if self._clock() - self._rendered_at < self.interval:
            return self._body
        loop = asyncio.get_running_loop()
        self._rendered_at = self._clock()
        self._rendering = loop.run_in_executor(self._pool, self._render)
        try:
            self._body = await asyncio.shield(self._rendering)
        except Exception:
            self._rendered_at = -math.inf  # nothing new to share: the next scrape renders again
            raise
        finally:
            self._rendering = None
        return self._body

    def _render(self) -> bytes:
        """On the render thread."""
        self.renders += 1
        for attempt in range(_RENDER_ATTEMPTS):
            try:
                return generate_latest(self.registry)
            except RuntimeError:  # a dict the loop changed while it was read ("changed size during iteration")
                if attempt == _RENDER_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open >= self.max_connections:
            self.refused += 1
            writer.write(_REFUSED)
            writer.close()  # a few bytes: the socket buffer takes them, nothing waits
            return
        self.open += 1
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # a scraper that went away or sent nonsense: nothing to answer
        except TimeoutError:  # too slow sending its request or taking the reply
            self.cut += 1
            writer.transport.abort()
        except asyncio.CancelledError:
            writer.transport.abort()
            raise
        except Exception:
            log.exception("metrics endpoint failed")
        finally:
            self.open -= 1
            if task is not None:
                self._handlers.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.timeout)
        method, _, rest = head.partition(b" ")
        path = rest.partition(b" ")[0].partition(b"?")[0]
        if method not in (b"GET", b"HEAD"):
            status, body, kind = b"405 Method Not Allowed", b"GET /metrics\n", b"text/plain"
        elif path == b"/metrics":
            status, body, kind = b"200 OK", await self.render(), CONTENT_TYPE_LATEST.encode()
        elif path == b"/":
            status, body, kind = b"200 OK", b"March metrics: /metrics\n", b"text/plain"
        else:
            status, body, kind = b"404 Not Found", b"not found: try /metrics\n", b"text/plain"
        writer.write(
            b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            % (status, kind, len(body))
        )
        if method != b"HEAD":
            writer.write(body)
        writer.close()  # flushes what is left, then closes: the reply has ``timeout`` seconds to go
        await asyncio.wait_for(writer.wait_closed(), self.timeout)


class _ScrapeStats(Collector):
    """The metrics endpoint's own figures, in its body."""

    def __init__(self, server: MetricsServer) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        s = self.server
        yield CounterMetricFamily("march_metrics_renders", "/metrics bodies rendered (shared by scrapes).", s.renders)
        yield GaugeMetricFamily("march_metrics_connections", "Connections to the metrics port open now.", s.open)
        closed = CounterMetricFamily(
            "march_metrics_closed_connections",
            "Metrics-port connections refused (max connections) or cut (too slow).",
            labels=["reason"],
        )
        closed.add_metric(["refused"], s.refused)
        closed.add_metric(["cut"], s.cut)
        yield closed
