"""The Prometheus collector: every ``march_*`` family, built at scrape time from the node's counters
(``march.stats.counters``) and from the state that already exists (serving state, keyspace,
store, ``App.stats``, clients).

It reads the server-wide state and the command table, so it sits above the commands; only the
node's assembly imports it (``registry_for``), and the endpoint (``march.metrics.endpoint``) serves
what it builds.

**Label cardinality.** Per-sequence series would be one per key (tens of thousands): only the
``TOP_SEQUENCES`` sequences that handed out the most IDs in the current term get one
(``march_sequence_ids_issued``); the node's total is ``march_ids_issued_total``.

What this module must never do: change what a client gets, or expose a secret (no label or value
comes from a password or a command's arguments).
"""

from __future__ import annotations

import heapq
import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from march.app import App
from march.config import MAX_ID
from march.generators.sequence import SequenceGenerator
from march.generators.timestamp import TimestampGenerator
from march.stats.counters import LATENCY_FIRST_BIT, LATENCY_LAST_BIT, RECORD_BOUNDS, STORE_BOUNDS_S
from march.version import VERSION

BATCH_BOUNDS: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000, 10_000_000)  # IDs a sequence persists at once
TOP_SEQUENCES = 10  # per-sequence series: only the busiest, to keep the label cardinality bounded


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
        yield from _node(app)
        yield from _commands(app)
        yield from self._sequences(app)
        yield from _store(app)
        yield from _clients(app)
        yield from _forwarding(app)

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
        # Sequences without a generator (``march.keyspace.sequence_table``): the rows' IDs, and those of the
        # generators that became rows (such a generator counts 0 from then on: seen above, its
        # ``before`` is taken back here, where its whole count went).
        from_rows = sum(g.keyspace.table.issued for g in app.groups)
        yield CounterMetricFamily("march_ids_issued", "IDs handed out by this node.", value=self._ids_total + from_rows)
        yield GaugeMetricFamily(
            "march_sequences_active",
            "Sequences active in the current term (loaded since it began).",
            value=len(current) + sum(len(g.keyspace.table) for g in app.groups),  # (with a generator, or a row)
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
        yield from _headroom(app, current)


def _node(app: App) -> Iterator[Metric]:
    state = app.groups[0].state  # (the unlabelled series are the first group's: dashboards keep working)
    member = app.groups.member
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
    term = member.directory.topology.leader_revision if member is not None else (state.term.number if state.term else 0)
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
        value=member.directory.leader_changes if member is not None else 0,
    )
    if member is not None:
        yield from _lease(member.lease.failures_total, member.lease.failures, state.remaining())
    yield from _groups(app)
    yield GaugeMetricFamily(
        "march_uptime_seconds", "Seconds since this node started.", value=time.monotonic() - app.started_mono
    )


def _groups(app: App) -> Iterator[Metric]:
    """Several leadership groups: each one's serving state, with a ``group`` label (the unlabelled
    ``march_serving``, ``march_primary``, ``march_phase`` and ``march_term`` are the first group's);
    nothing with one group (``Groups.listed``)."""
    listed = app.groups.listed
    if not listed:
        return
    serving = GaugeMetricFamily("march_group_serving", "1 while this node serves the group.", labels=["group"])
    primary = GaugeMetricFamily("march_group_primary", "1 while this node holds the group's term.", labels=["group"])
    term = GaugeMetricFamily(
        "march_group_term", "The group's leader key's create revision (0: no primary known).", labels=["group"]
    )
    for group in listed:
        label = [str(group.index)]
        serving.add_metric(label, int(group.state.serving))
        primary.add_metric(label, int(group.state.leading))
        term.add_metric(label, group.member.directory.topology.leader_revision if group.member is not None else 0)
    yield from (serving, primary, term)


def _lease(failures_total: int, failures: int, remaining: float) -> Iterator[Metric]:
    """A cluster node's lease: keep-alives that failed, and the time left to its deadline."""
    yield CounterMetricFamily(
        "march_lease_renewal_failures",
        "Lease keep-alives to etcd that failed (a primary that cannot renew stops serving at its deadline).",
        value=failures_total,
    )
    yield GaugeMetricFamily(
        "march_lease_renewal_failures_in_a_row",
        "Lease keep-alives failed since the last one that worked (0: renewing).",
        value=failures,
    )
    yield GaugeMetricFamily(
        "march_lease_remaining_seconds",
        "Seconds until this node's lease deadline (0: passed); a primary stops serving at 0.",
        value=remaining,
    )


def _commands(app: App) -> Iterator[Metric]:
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


def _headroom(app: App, current: list[Any]) -> Iterator[Metric]:
    """How close this node is to a hard limit: the ID maximum, the timestamp lead cap, the worker ids."""
    ceiling = max((g.durable_ceiling for g in current if isinstance(g, SequenceGenerator)), default=0)
    ceiling = max(ceiling, *(g.keyspace.table.top for g in app.groups))  # (and the rows': ``sequence_table``)
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
    yield GaugeMetricFamily(
        "march_worker_ids_busy_max",
        "Worker ids held in the fullest namespace, as its last WORKER acquire found them (this term).",
        value=max((n for g in app.groups for n in g.keyspace.workers.busy.values()), default=0),
    )
    yield GaugeMetricFamily(
        "march_worker_ids_limit",
        "Worker ids one namespace may hold at once (worker_max_holders).",
        value=app.config.worker_max_holders,
    )


def _store(app: App) -> Iterator[Metric]:
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


def _clients(app: App) -> Iterator[Metric]:
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
    denied.add_metric(["channel"], s.denied_channel)
    yield denied
    yield CounterMetricFamily(
        "march_protocol_errors", "Connections closed for a protocol error.", value=s.protocol_errors
    )


def _forwarding(app: App) -> Iterator[Metric]:
    """Requests this node relayed to other primaries (redirect forward, ``march.cluster.links``)."""
    f = app.links.stats
    yield CounterMetricFamily(
        "march_forwarded_requests", "Requests (or whole transactions) forwarded to a primary.", value=f.forwarded
    )
    errors = CounterMetricFamily(
        "march_forward_errors",
        "Forwarding failures: lost (the link broke or timed out before the reply), link (a link could not be opened).",
        labels=["kind"],
    )
    errors.add_metric(["lost"], f.lost)
    errors.add_metric(["link"], f.failed)
    yield errors
    proofs = CounterMetricFamily(
        "march_link_proof_failures",
        "Forwarding link handshakes that failed the cluster secret: incoming (a link to this node did not "
        "prove it, or was refused unchecked by the throttle), outgoing (a listener this node linked to did not).",
        labels=["side"],
    )
    proofs.add_metric(["incoming"], f.proofs_failed)
    proofs.add_metric(["outgoing"], f.unproven)
    yield proofs
    ready = app.readiness(warm=False) is None
    yield GaugeMetricFamily("march_ready", "1 if this node can serve every key now (GET /ready).", value=int(ready))


def node_id(app: App) -> str:
    """This node's id: the cluster id, else ``node_id``, else its address."""
    member = app.groups.member
    return member.me.id if member is not None else app.config.node_name(app.port)


def registry_for(app: App) -> CollectorRegistry:
    """A registry of our own (never prometheus-client's global one): the node's families and the process'."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MarchCollector(app))
    ProcessCollector(namespace="march", registry=registry)
    return registry
