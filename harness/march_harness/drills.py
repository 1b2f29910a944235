"""The cluster fault drills of issue 3, shared by tests/cluster/test_cluster_drills.py and
scripts/drill: each drill makes one fault under concurrent INCR load, waits (with deadlines)
for the cluster to recover, and returns a `DrillResult`:

- `violations`: a guarantee or a drill invariant broken (a duplicate, a real-time order
  violation, an ID from a paused or partitioned old primary, a client error during a planned
  FAILOVER, an ID not above everything issued before a restart). Always a failure.
- `bars`: timing figures next to the issue's bar (failover within TTL + 1 s, ...). Tests
  assert them with a slack (a loaded CI machine is no benchmark); scripts/drill prints them.
- `figures`: failover time, error count and window, longest delay and gap, duplicates, order
  violations (see `march_harness.load.figures`).
- `events`: what the drill did and saw when (the fault, a new primary, the first ID from
  another node, ...); `series()` puts them on the load's time series for scripts/drill's chart.

A `DrillEnv` owns the processes of one drill layout: an etcd (1 or 3 members), optional TCP
proxies (one per march node, all to etcd member 0), and a three-node March cluster. With
``netns=True`` etcd and every node run in network namespaces of their own (``march_harness.netns``) for
the partition drills (``PARTITION_DRILLS``: real cuts, packets dropped both ways), all removed by
``stop`` whatever happened. ``sigterm`` (issue 25) sends SIGTERMs around layout changes
(``march_harness.stops``). Every
drill leaves the cluster as it found it (all nodes running, one primary, standbys agreeing)
so repetitions run on the same processes.

With leadership groups (``DrillEnv(groups=N)``, issue 17) the same drills run on N groups: "the
primary" a drill faults is the node leading the most groups (with 4 groups on 3 nodes, the one
holding two primaries); the load gives each group its own keys and clients; the figures,
duplicates and order violations are reported per group. After a fault of a node, the groups it
did not lead must keep serving: a violation if one of them got no ID while the faulty node's
groups were still down (an ordering check), and their longest gap between replies is reported
next to the 50 ms bar (never asserted in the suite). The faulty node's groups must resume within
TTL + 1 s. ``rebalance`` (a fourth node joins under load, takes its share of the groups through
planned hand-overs, then leaves with SIGTERM) needs no client error while it joins. The drills
that seed or race one primary (``takeover``, ``race-*``) run with one group only
(`GROUP_DRILLS` lists the others).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import statistics
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from march.etcd.grpc_etcd import GrpcEtcd
from march.etcd.keypath import KeyPaths
from march_harness.cluster import DEFAULT_TTL, ClusterNode, MarchCluster, moved_target
from march_harness.etcd import EtcdCluster
from march_harness.history import History, group_of_key, group_slots
from march_harness.load import MAX_SECONDS, TIMESTAMP_KEY, Figures, Load, TimeSeries, figures, group_keys, time_series
from march_harness.netns import NetLab
from march_harness.proxy import TcpProxy
from march_harness.races import RACE_ROUNDS, Member, failover_round, race_node_id
from march_harness.resp import RespConn, RespError, encode, wait_until
from march_harness.stops import SETTLE_TIMEOUT, SIGTERM_ROUNDS, StopRound, change, settle_layout, sigterm_round

WARMUP_OPS = 200  # successes before the fault: the load is really running
HOLD_OPS = 200  # successes after recovery: the new primary really serves
SETTLE = 20.0  # seconds for a cluster to settle between repetitions
LATE_REQUESTS = 3  # INCRs queued on a paused primary's socket
TAKEOVER_SEQUENCES = 15_000  # the takeover drill's sequences: the size that used to keep a cluster down
TAKEOVER_NAME_LEN = 200  # bytes per name (15,000 of them made one etcd read pass gRPC's 4 MB)
TAKEOVER_PROBES = 2_000  # distinct old sequences asked at once on the new primary
ETCD_DOWN = 2.0  # seconds etcd stays down in the etcd-restart drill
GROUP_WARMUP_OPS = 25  # with groups: IDs each group's keys get before a drill's own warm-up counts
OTHER_GROUPS_GAP = 0.05  # the bar: the groups a fault did not touch never pause longer than this
SIGTERM_ROUND_SECONDS = 30  # the load of the sigterm drill lasts this long per round, at most (a round: ~3 s)


def recovery_timeout(ttl: float) -> float:
    """Generous: a failed drill should say what it saw, not hang; the bars say what is fast enough."""
    return 3 * ttl + 15


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


@dataclass
class Bar:
    name: str
    value: float | None  # None: never happened (always a miss)
    limit: float
    asserted: bool = True  # False: reported only (tests never assert it)

    @property
    def met(self) -> bool:
        return self.value is not None and self.value <= self.limit

    def line(self) -> str:
        v = "never" if self.value is None else f"{self.value * 1000:.0f} ms"
        return f"{self.name}: {v} (bar {self.limit * 1000:.0f} ms: {'met' if self.met else 'MISSED'})"


@dataclass
class DrillResult:
    drill: str
    rep: int = 0
    figures: Figures = field(default_factory=Figures)
    violations: list[str] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    histories: dict[str, History] = field(default_factory=dict)
    probes: dict[str, int] = field(default_factory=dict)  # replies to the drill's own probes of the old primary

    recovered: bool = True
    detail: str = ""  # what a failed wait saw (cluster state, logs): shown by assert_ok
    events: list[tuple[int, str]] = field(default_factory=list)  # (monotonic ns, what): for the charts

    def mark(self, label: str, at: int | None = None) -> int:
        """Note an event (the fault, a new primary, ...) for the timeline chart; returns its time."""
        at = History.now() if at is None else at
        self.events.append((at, label))
        return at

    def series(self, width: float | None = None) -> TimeSeries:
        """IDs, errors and latency per ``width`` seconds, with the events: what scripts/drill draws."""
        return time_series(self.histories, self.events, width)

    def settle(self, cluster: MarchCluster) -> None:
        """Back to a settled cluster for the next repetition (not after a failed recovery: the
        violation says it all, and waiting would only hide the state it failed in)."""
        if self.recovered:
            with self.stage():
                cluster.wait_settled(SETTLE)

    @contextlib.contextmanager
    def stage(self) -> Iterator[None]:
        """The fault and the wait for recovery: a deadline that passes becomes a violation (the
        figures are still computed from what was recorded) instead of losing the history."""
        try:
            yield
        except AssertionError as e:
            self.recovered = False
            self.violations.append("did not recover: " + (str(e).splitlines() or ["?"])[0])
            self.detail = str(e)

    def finish(
        self,
        fault_at: int | None,
        old_primary: str | None,
        groups: int = 1,
        affected: list[int] | None = None,
        old_until: int | None = None,
    ) -> None:
        """Compute the figures (per group too; ``affected``: the groups ``old_primary`` led at the
        fault; ``old_until``: see `figures`); duplicates and order violations become violations."""
        self.figures = f = figures(self.histories, fault_at, old_primary, groups, affected, old_until)
        if fault_at is not None and f.failover is not None:
            self.mark("first ID from another node", fault_at + int(f.failover * 1e9))
        if f.duplicates or f.order_violations:
            self.violations.append(f"{f.duplicates} duplicates, {f.order_violations} order violations")
            self.violations += f.problems[:10]
        if f.ops == 0:
            self.violations.append("no ID at all was handed out")

    def summary(self) -> str:
        lines = [f"{self.drill} #{self.rep}: {'OK' if not self.violations else 'FAILED'}", "  " + self.figures.line()]
        if len(self.figures.groups) > 1:
            lines += [f"  {g.line()}" for g in self.figures.groups]
        if self.figures.error_kinds:
            lines.append(f"  errors by kind: {self.figures.error_kinds}; first: {self.figures.error_samples}")
        lines += [f"  {b.line()}" for b in self.bars]
        lines += [f"  note: {n}" for n in self.notes]
        if self.probes:
            lines.append(f"  probes of the old primary answered: {self.probes}")
        lines += [f"  VIOLATION: {v}" for v in self.violations]
        return "\n".join(lines)

    def assert_ok(self, slack: float) -> None:
        """No violation; every asserted timing bar met within ``slack`` seconds."""
        late = [b for b in self.bars if b.asserted and (b.value is None or b.value > b.limit + slack)]
        assert not self.violations and not late, (
            self.summary() + f"\n  timing bars missed by more than {slack}s: {[b.name for b in late]}\n{self.detail}"
        )


class DrillEnv:
    """etcd (``etcd_members``), optional proxies, and a ``nodes``-node cluster, under ``base``.

    ``out``: where a live timeline goes (one line per ~0.5 s while a drill's load runs), if anywhere.
    """

    def __init__(
        self,
        base: Path,
        *,
        etcd_members: int = 1,
        proxies: bool = False,
        nodes: int = 3,
        lease_ttl: int = DEFAULT_TTL,
        etcd_binary: str | None = None,
        rate: float | None = None,
        warmup_ops: int = WARMUP_OPS,
        hold_ops: int = HOLD_OPS,
        out: Callable[[str], None] | None = None,
        sequences: int = TAKEOVER_SEQUENCES,
        name_len: int = TAKEOVER_NAME_LEN,
        rounds: int | None = None,
        groups: int = 1,
        netns: bool = False,
        flap_seconds: float | None = None,
    ) -> None:
        self.base = base
        # Real partitions (``march_harness.netns``): etcd and each node in a network namespace of its own.
        self.lab = NetLab([f"n{i + 1}" for i in range(nodes)]) if netns else None
        self.groups = groups
        self.key_sets = group_keys(groups)  # the load's keys, one list per group
        self.etcd = EtcdCluster(base / "etcd", size=etcd_members, binary=etcd_binary)
        self.use_proxies = proxies
        self.nodes = nodes
        self.lease_ttl = lease_ttl
        self.rate = rate
        self.warmup_ops, self.hold_ops = warmup_ops, hold_ops
        self.out = out
        self.sequences, self.name_len = sequences, name_len  # for the takeover drill
        self.seeded: list[str] = []  # its sequences, seeded once for every repetition
        self.rounds = rounds  # for the race drills (None: RACE_ROUNDS) and ``sigterm`` (None: SIGTERM_ROUNDS)
        self.flap_seconds = FLAP_SECONDS if flap_seconds is None else flap_seconds  # for ``partition-flap``
        self.proxies: dict[str, TcpProxy] = {}
        self._cluster: MarchCluster | None = None

    @property
    def cluster(self) -> MarchCluster:
        assert self._cluster is not None, "DrillEnv not started"
        return self._cluster

    def start(self) -> None:
        if self.lab is not None:
            self.lab.start()
            for m in self.etcd.members:
                m.host, m.wrapper = self.lab.etcd_host, self.lab.wrapper("etcd")
        self.etcd.start()
        endpoints = [m.endpoint for m in self.etcd.members]
        per_node: list[str] = []
        for i in range(self.nodes):
            if self.use_proxies:
                proxy = TcpProxy(self.etcd.members[0].port)
                self.proxies[f"n{i + 1}"] = proxy
                per_node.append(proxy.endpoint)
            else:
                # Each node lists the members from a different one: losing one member must not
                # take every node's first endpoint away.
                k = i % len(endpoints)
                per_node.append(",".join(endpoints[k:] + endpoints[:k]))
        self._cluster = MarchCluster(
            self.base / "march",
            per_node,
            size=self.nodes,
            lease_ttl=self.lease_ttl,
            groups=self.groups,
            # clients come from the bridge's address, not the loopback: no protected mode
            extra_args=["--protected-mode", "no"] if self.lab is not None else [],
        )
        if self.lab is not None:
            for n in self._cluster.nodes:
                n.host, n.wrapper = self.lab.node_host(n.node_id), self.lab.wrapper(n.node_id)
        self._cluster.start()
        # One key of every load is a timestamp sequence: the drills check it as they check the rest.
        primary = self._cluster.wait_settled(SETTLE)
        if self.groups > 1:
            primary = self._cluster.wait_leaders(SETTLE)[group_of_key(TIMESTAMP_KEY, self.groups)]
        reply = primary.call("SEQ.CREATE", TIMESTAMP_KEY, "TIMESTAMP", "PRESET", "snowflake", "NODE", 1)
        assert reply == "OK", f"SEQ.CREATE {TIMESTAMP_KEY} TIMESTAMP: {reply!r}"

    def stop(self) -> None:
        try:
            if self._cluster is not None:
                self._cluster.stop()
            for p in self.proxies.values():
                p.close()
            self.etcd.stop()
        finally:
            if self.lab is not None:
                self.lab.close()  # every namespace, veth pair and rule it made, whatever happened

    # -- partitions: the netns lab's real ones, else the TCP proxy between a node and etcd ----------
    def cut(self, node: ClusterNode, scope: str = "etcd") -> None:
        """Cut ``node`` off etcd (``"etcd"``) or off everything (``"all"``: needs ``netns``)."""
        if self.lab is not None:
            self.lab.cut(node.node_id, scope)
        else:
            assert scope == "etcd" and node.node_id in self.proxies, "this cut needs DrillEnv(netns=True)"
            self.proxies[node.node_id].cut()

    def heal(self, node: ClusterNode) -> None:
        if self.lab is not None:
            self.lab.heal(node.node_id)
        else:
            self.proxies[node.node_id].restore()

    def __enter__(self) -> DrillEnv:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def describe(self) -> str:
        return self.etcd.describe() + "\n" + (self._cluster.describe() if self._cluster else "")

    @property
    def seeds(self) -> list[str]:
        return [n.address for n in self.cluster.nodes]

    # -- leadership groups (with one group: the one primary, group 0, every key) ---------------
    def settled(self) -> tuple[ClusterNode, list[int]]:
        """Wait for a settled cluster: the node a drill faults (the primary; with groups, the one
        leading the most) and the groups it leads."""
        if self.groups == 1:
            return self.cluster.wait_settled(SETTLE), [0]
        leaders = self.cluster.wait_leaders(SETTLE, spread=True)
        node = self.cluster.most_leading(leaders)
        return node, self.cluster.led_by(node, leaders)

    def new_leader(self, old: ClusterNode, group: int, timeout: float) -> ClusterNode:
        """Until ``group`` (and every other) has a primary other than ``old``; that primary."""
        if self.groups == 1:
            return self.cluster.wait_primary(timeout, exclude=[old])
        return self.cluster.wait_leaders(timeout, exclude=[old])[group]

    def keys_of(self, groups: list[int]) -> list[str]:
        return [k for g in groups for k in self.key_sets[g]]

    def wait_resumed(self, load: Load, since: int, old: ClusterNode, groups: list[int], timeout: float) -> None:
        """Until each of ``groups`` served a request sent after ``since`` on a node other than ``old``."""
        for g in groups:
            load.wait_success(since, not_from=[old.address], timeout=timeout, keys=self.key_sets[g])

    @contextlib.contextmanager
    def load(self, result: DrillResult, max_seconds: float = MAX_SECONDS) -> Iterator[Load]:
        """Concurrent clients recording into ``result.histories`` (continued if not empty), with the
        live timeline if ``out`` is set; stopped (and checked) at the end of the block (the clients
        stop by themselves after ``max_seconds``). With groups: one RedisCluster and one plain client
        per group, each on its group's keys."""
        if self.groups == 1:
            load = Load(self.seeds, result.histories, rate=self.rate, max_seconds=max_seconds)
        else:
            load = Load(
                self.seeds,
                result.histories,
                rate=self.rate,
                key_sets=self.key_sets,
                cluster_clients=1,
                plain_clients=1,
                max_seconds=max_seconds,
            )
        timeline = Timeline(load, self.cluster, self.out, result.drill) if self.out else None
        load.start()
        if timeline:
            timeline.start()
        try:
            if self.groups > 1:  # every group really under load before the drill goes on
                load.wait_each(self.key_sets, GROUP_WARMUP_OPS)
            yield load
        finally:
            if timeline:
                timeline.stop()
            load.stop(check=True)


class Timeline(threading.Thread):
    """One line per ``interval``: ops/s, errors in that interval, which node says it is primary (with
    groups: each group's primary, from one live node's CLUSTER SLOTS)."""

    def __init__(
        self, load: Load, cluster: MarchCluster, out: Callable[[str], None], label: str, interval: float = 0.5
    ) -> None:
        super().__init__(name="timeline", daemon=True)
        self.load, self.cluster, self.out, self.label, self.interval = load, cluster, out, label, interval
        self._done = threading.Event()

    def run(self) -> None:
        start = last_t = time.monotonic()
        last_ok, last_err = self.load.ok, self.load.errors
        while not self._done.wait(self.interval):  # a reporting period, not synchronisation
            now = time.monotonic()
            ok, err = self.load.ok, self.load.errors
            who = self._leaders() if self.cluster.groups > 1 else self._primary()
            self.out(
                f"  {self.label:<22} {now - start:5.1f}s {(ok - last_ok) / (now - last_t):7.0f} ops/s "
                f"{err - last_err:5d} errors  {who}"
            )
            last_t, last_ok, last_err = now, ok, err

    def _primary(self) -> str:
        masters = [n.node_id for n in self.cluster.masters(timeout=0.2)]
        return "primary " + (",".join(masters) if masters else "none")

    def _leaders(self) -> str:
        """Each group's primary as the first live node's CLUSTER SLOTS names it ("-": none)."""
        node = next((n for n in self.cluster.nodes if n.alive), None)
        entries = node.slots(timeout=0.2) if node is not None else None
        names = {n.address: n.node_id for n in self.cluster.nodes}
        leaders = []
        for g in range(self.cluster.groups):
            first, _ = group_slots(g, self.cluster.groups)
            owner = next((e.primary for e in entries or [] if e.first <= first <= e.last), None)
            leaders.append(names.get(owner, "?") if owner else "-")
        return "groups " + " ".join(leaders)

    def stop(self) -> None:
        self._done.set()
        self.join(5)


# -- the drills --------------------------------------------------------------------------------


def drill_kill_primary(env: DrillEnv, rep: int = 0) -> DrillResult:
    """`kill -9` of the primary under load: a standby serves within TTL + 1 s."""
    c, ttl = env.cluster, env.lease_ttl
    r = DrillResult("kill -9 primary" if env.groups == 1 else f"kill -9 node leading groups (of {env.groups})", rep)
    old, affected = env.settled()
    fault_at = History.now()
    with r.stage(), env.load(r) as load:
        load.wait_ops(env.warmup_ops)
        fault_at = r.mark(f"kill -9 {old.node_id}")
        r.notes.append(f"{old.node_id} led group(s) {affected}")
        c.kill(old)
        new = env.new_leader(old, affected[0], recovery_timeout(ttl))
        r.mark(f"{new.node_id} says primary")
        r.notes.append(f"primary {old.node_id} -> {new.node_id}")
        env.wait_resumed(load, fault_at, old, affected, recovery_timeout(ttl))
        load.wait_ops(env.hold_ops)
    r.finish(fault_at, old.address, env.groups, affected)
    r.bars.append(Bar("first INCR on the new primary after the kill", r.figures.failover, ttl + 1.0))
    _other_groups(env, r, fault_at, affected)
    c.restart(old)
    r.settle(c)
    return r


def drill_pause_primary(env: DrillEnv, rep: int = 0) -> DrillResult:
    """SIGSTOP of the primary for longer than the TTL, then SIGCONT: the old primary must not hand
    out a single ID afterwards (not even for requests queued while it was stopped), and clients
    that still talk to it get redirected to the new primary."""
    c, ttl = env.cluster, env.lease_ttl
    r = DrillResult("SIGSTOP primary" if env.groups == 1 else f"SIGSTOP node leading groups (of {env.groups})", rep)
    old, affected = env.settled()
    key = env.key_sets[affected[0]][0]
    fault_at = stopped_at = demoted_at = resumed_at = History.now()
    with r.stage(), env.load(r) as load:
        load.wait_ops(env.warmup_ops)
        fault_at = r.mark(f"SIGSTOP {old.node_id}")
        old.pause()
        stopped_at = History.now()  # from here on no request can reach the old primary's code
        try:
            # Requests that reach the paused primary's socket: it reads them only after SIGCONT,
            # when its lease is long gone.
            with RespConn(old.port, timeout=recovery_timeout(ttl)) as late:
                late_sent = History.now()
                late.send(encode("INCR", key) * LATE_REQUESTS)
                new = env.new_leader(old, affected[0], recovery_timeout(ttl))
                r.mark(f"{new.node_id} says primary")
                r.notes.append(f"primary {old.node_id} -> {new.node_id}; {old.node_id} stopped for {ttl * 1.5:.1f}s")
                env.wait_resumed(load, fault_at, old, affected, recovery_timeout(ttl))
                stopped_for = ttl * 1.5  # the fault itself: paused for longer than the TTL
                wait_until(lambda: History.now() - fault_at >= stopped_for * 1e9, timeout=stopped_for + 1)
                old.resume()
                resumed_at = r.mark(f"SIGCONT {old.node_id}")
                _late_replies(r, late, key, late_sent, old)
        finally:
            if old.paused:
                old.resume()
        _expect_redirect(r, old, new, key, recovery_timeout(ttl), env)
        demoted_at = History.now()
        load.wait_ops(env.hold_ops)
    r.finish(fault_at, old.address, env.groups, affected)
    # With groups the resumed node may lead again soon (it rejoins and takes its share back): only
    # requests sent while it was stopped must get no ID from it.
    until = demoted_at if env.groups == 1 else resumed_at
    served = [o for h in r.histories.values() for o in h.ops if o.node == old.address and stopped_at <= o.sent <= until]
    if served:
        ms = [
            f"{o.id} (sent +{(o.sent - fault_at) / 1e6:.0f} ms, replied +{(o.replied - fault_at) / 1e6:.0f} ms)"
            for o in served
        ]
        r.violations.append(
            f"the paused old primary handed out {len(served)} IDs for requests sent after SIGSTOP "
            f"(SIGCONT at +{(resumed_at - fault_at) / 1e6:.0f} ms): {', '.join(ms[:5])}"
        )
    # The issue sets this bar for kill -9; here clients also sit out their timeouts on the paused node.
    r.bars.append(Bar("first INCR on the new primary after SIGSTOP", r.figures.failover, ttl + 1.0, asserted=False))
    _other_groups(env, r, fault_at, affected)
    r.settle(c)
    return r


def drill_cut_primary_etcd(env: DrillEnv, rep: int = 0) -> DrillResult:
    """The primary's link to etcd cut (its proxy blackholes): it stops serving within the TTL, a
    standby takes over; once healed, the old primary becomes a standby of the new one."""
    c, ttl = env.cluster, env.lease_ttl
    assert env.proxies, "this drill needs DrillEnv(proxies=True)"
    r = DrillResult("etcd link of primary cut", rep)
    old, affected = env.settled()
    proxy = env.proxies[old.node_id]
    key = env.key_sets[affected[0]][0]
    fault_at = History.now()
    healed_at: int | None = None
    with r.stage(), env.load(r) as load:
        load.wait_ops(env.warmup_ops)
        fault_at = r.mark(f"etcd link of {old.node_id} cut")
        proxy.cut()
        try:
            new = env.new_leader(old, affected[0], recovery_timeout(ttl))
            r.mark(f"{new.node_id} says primary")
            r.notes.append(f"primary {old.node_id} -> {new.node_id}")
            env.wait_resumed(load, fault_at, old, affected, recovery_timeout(ttl))
            # Still cut off: the old primary must refuse, whatever it answers.
            sent = History.now()
            reply = old.call("INCR", key, timeout=5)
            _record(r, "isolated", key, sent, reply, old.address)
            if isinstance(reply, int):
                r.violations.append(f"the partitioned old primary answered INCR with an ID: {reply}")
        finally:
            proxy.restore()
            healed_at = r.mark("link restored")
        _expect_redirect(r, old, new, key, recovery_timeout(ttl), env)
        load.wait_ops(env.hold_ops)
    # With groups the healed node soon leads its share again: only requests sent while cut off count.
    r.finish(fault_at, old.address, env.groups, affected, healed_at if env.groups > 1 else None)
    r.bars.append(Bar("old primary's last ID after the cut", r.figures.old_primary_last or 0.0, ttl))
    _note_last_of(r, old, fault_at, healed_at, env.groups)
    r.bars.append(Bar("first INCR on the new primary after the cut", r.figures.failover, ttl + 1.0))
    _other_groups(env, r, fault_at, affected)
    r.settle(c)
    return r


def _note_last_of(r: DrillResult, old: ClusterNode, fault_at: int, healed_at: int | None, groups: int) -> None:
    """Which request got the cut-off node's last ID (its key's group, sent and replied, from the cut)."""
    until = healed_at if healed_at is not None else History.now()
    late = [(o, k) for k, h in r.histories.items() for o in h.ops if o.node == old.address and fault_at <= o.replied]
    late = [(o, k) for o, k in late if o.sent < until]
    if late:
        o, k = max(late, key=lambda x: x[0].replied)
        r.notes.append(
            f"{old.node_id}'s last ID after the cut: {k} (group {group_of_key(k, groups)}), sent "
            f"{(o.sent - fault_at) / 1e6:+.0f} ms, replied {(o.replied - fault_at) / 1e6:+.0f} ms; link restored "
            f"{(until - fault_at) / 1e6:+.0f} ms"
        )


# -- real partitions (network namespaces, ``DrillEnv(netns=True)``) ------------------------------

FLAP_SECONDS = 30.0  # how long the flapping drill flaps
FLAP_CUT = (2.0, 4.0)  # seconds each cut of the flapping drill lasts (random in this range)
FLAP_HEAL = (0.3, 1.0)  # seconds each heal lasts: short, so a keep-alive may get through and no more


def partition_hold(ttl: float) -> float:
    """How long a partition drill keeps its cut: past the old lease's end and a new election, so
    the cut-off node's answers once another node serves are seen too."""
    return 2 * ttl + 1


def _gap_bars(r: DrillResult, ttl: float, faulted: list[int], asserted: bool = True) -> None:
    """The issue's bar for real partitions: each faulted group's longest gap between IDs within TTL + 1 s."""
    for gf in r.figures.groups:
        if gf.group in faulted:
            name = f"group {gf.group} (faulted): longest gap between IDs"
            r.bars.append(Bar(name, gf.longest_gap, ttl + 1.0, asserted=asserted))


def _ids_after_deadline(r: DrillResult, old: ClusterNode, fault_at: int, ttl: float, until: int | None) -> None:
    """Guarantee 4 seen from outside: a node cut from etcd at ``fault_at`` hands out no ID for a
    request sent a TTL later (its deadline counts from a keep-alive sent before the cut), up to
    ``until`` (when it may lead again)."""
    limit = fault_at + int(ttl * 1e9)
    late = [
        o
        for h in r.histories.values()
        for o in h.ops
        if o.node == old.address and o.sent >= limit and (until is None or o.sent < until)
    ]
    if late:
        r.violations.append(
            f"{old.node_id}, cut off, handed out {len(late)} IDs for requests sent more than a TTL after the cut: "
            + ", ".join(f"{o.id} (sent +{(o.sent - fault_at) / 1e6:.0f} ms)" for o in late[:5])
        )


def _cut_off_answers(r: DrillResult, env: DrillEnv, old: ClusterNode, key: str, until: float) -> None:
    """While ``old`` is cut from etcd and another node serves ``key``'s group: what ``old`` answers
    (tallied in ``r.probes``; never an ID), and that a client pinned to it gets an ID anyway:
    it answers MOVED to a node in touch with etcd once its old lease must have ended (README
    "Partitions"), so ``redis-cli -c`` connected to it follows and gets an ID."""
    moved: list[str] = []

    def sends_on() -> bool:
        sent = History.now()
        try:
            reply = old.call("INCR", key, timeout=2)
        except OSError as e:
            reply = e
        _record(r, "cut-off", key, sent, reply, old.address)
        if isinstance(reply, int):
            r.violations.append(f"the cut-off primary answered INCR with ID {reply}")
            return True
        target = moved_target(reply)
        if target is not None and target != old.address:
            moved.append(target)
            return True
        return False

    try:
        wait_until(sends_on, timeout=max(0.5, until - time.monotonic()), interval=0.05, message="MOVED from it")
    except AssertionError:
        r.violations.append(f"the cut-off primary {old.node_id} never sent a client on (MOVED) while cut off")
        return
    done = subprocess.run(
        ["redis-cli", "-c", "-h", old.host, "-p", str(old.port), "INCR", key],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    out = done.stdout.strip()
    r.notes.append(f"cut off, {old.node_id} answers MOVED to {moved[-1]}; redis-cli -c connected to it: {out!r}")
    if not out.removeprefix("(integer) ").isdigit():
        r.violations.append(f"redis-cli -c connected to the cut-off primary got no ID: {out!r} {done.stderr.strip()!r}")


def drill_partition_primary(env: DrillEnv, rep: int = 0, scope: str = "etcd") -> DrillResult:
    """The primary (with groups: the node leading the most) partitioned for real (``march_harness.netns``:
    packets dropped both ways) from etcd (``scope="etcd"``) or from everything (``"all"``: etcd, the
    other nodes and the clients), under load, for ``partition_hold`` seconds, then healed. It must
    hand out no ID for a request sent a TTL after the cut; a standby serves within TTL + 1 s; each
    faulted group's longest gap between IDs stays within TTL + 1 s; cut from etcd only, it sends
    clients on with MOVED (``_cut_off_answers``); once healed it redirects to the new primary."""
    c, ttl = env.cluster, env.lease_ttl
    assert env.lab is not None, "this drill needs DrillEnv(netns=True)"
    what = "etcd" if scope == "etcd" else "everything"
    r = DrillResult(f"partition: primary cut from {what}" + (f" ({env.groups} groups)" if env.groups > 1 else ""), rep)
    old, affected = env.settled()
    key = env.key_sets[affected[0]][0]
    fault_at = History.now()
    healed_at: int | None = None
    with r.stage(), env.load(r) as load:
        load.wait_ops(env.warmup_ops)
        fault_at = r.mark(f"{old.node_id} cut from {what}")
        started = time.monotonic()
        env.cut(old, scope)
        try:
            new = env.new_leader(old, affected[0], recovery_timeout(ttl))
            says = r.mark(f"{new.node_id} says primary")
            r.notes.append(f"primary {old.node_id} -> {new.node_id}")
            env.wait_resumed(load, fault_at, old, affected, recovery_timeout(ttl))
            if scope == "etcd":
                _cut_off_answers(r, env, old, key, started + partition_hold(ttl) + ttl)
            wait_until(lambda: time.monotonic() - started >= partition_hold(ttl), timeout=partition_hold(ttl) + 1)
        finally:
            env.heal(old)
            healed_at = r.mark(f"{old.node_id} healed")
        _expect_redirect(r, old, new, key, recovery_timeout(ttl), env)
        load.wait_ops(env.hold_ops)
    # With groups the healed node soon leads its share again: only requests sent while cut off count.
    until = healed_at if env.groups > 1 else None
    r.finish(fault_at, old.address, env.groups, affected, until)
    _ids_after_deadline(r, old, fault_at, ttl, until)
    # What the nodes did, next to what the clients saw: cut off from everything, the old primary
    # costs each client request sent to it its 1 s timeout, so the clients see the new primary up to
    # a second after it serves (as with SIGSTOP); their bars are then reported, not asserted.
    r.bars.append(Bar("another node says it serves the faulted group", (says - fault_at) / 1e9, ttl + 1.0))
    seen = scope == "etcd"
    r.bars.append(Bar("first INCR on the new primary after the cut", r.figures.failover, ttl + 1.0, asserted=seen))
    _gap_bars(r, ttl, affected, asserted=seen)
    _note_last_of(r, old, fault_at, healed_at, env.groups)
    _other_groups(env, r, fault_at, affected)
    r.settle(c)
    return r


def drill_partition_all(env: DrillEnv, rep: int = 0) -> DrillResult:
    return drill_partition_primary(env, rep, scope="all")


def drill_partition_standby(env: DrillEnv, rep: int = 0) -> DrillResult:
    """A standby (with groups: a node leading the fewest groups, whose groups are then the faulted
    ones) cut from etcd for ``partition_hold`` seconds under load, then healed: the primary serves
    on; each faulted group's longest gap within TTL + 1 s (with one group: the only group's, which
    the cut must not touch); once healed the standby redirects to the primary again."""
    c, ttl = env.cluster, env.lease_ttl
    assert env.lab is not None, "this drill needs DrillEnv(netns=True)"
    r = DrillResult("partition: standby cut from etcd" + (f" ({env.groups} groups)" if env.groups > 1 else ""), rep)
    primary, _ = env.settled()
    if env.groups == 1:
        victim, affected = next(n for n in c.nodes if n is not primary), []
    else:
        leaders = c.wait_leaders(SETTLE, spread=True)
        victim = min(c.nodes, key=lambda n: (len(c.led_by(n, leaders)), n.node_id))
        affected = c.led_by(victim, leaders)
    key = env.key_sets[0][0]
    fault_at = History.now()
    healed_at: int | None = None
    with r.stage(), env.load(r) as load:
        load.wait_ops(env.warmup_ops)
        fault_at = r.mark(f"{victim.node_id} cut from etcd")
        started = time.monotonic()
        env.cut(victim)
        try:
            if affected:
                env.new_leader(victim, affected[0], recovery_timeout(ttl))
                env.wait_resumed(load, fault_at, victim, affected, recovery_timeout(ttl))
            wait_until(lambda: time.monotonic() - started >= partition_hold(ttl), timeout=partition_hold(ttl) + 1)
            load.wait_success(History.now(), timeout=recovery_timeout(ttl))  # the cluster serves while it is cut
        finally:
            env.heal(victim)
            healed_at = r.mark(f"{victim.node_id} healed")
        serving = c.wait_primary(recovery_timeout(ttl)) if env.groups == 1 else None
        if serving is not None and serving is not victim:
            _expect_redirect(r, victim, serving, key, recovery_timeout(ttl), env)
        load.wait_ops(env.hold_ops)
    until = healed_at if env.groups > 1 else None
    r.finish(fault_at, victim.address if affected else None, env.groups, affected or None, until)
    if affected:
        _ids_after_deadline(r, victim, fault_at, ttl, until)
    _gap_bars(r, ttl, affected or list(range(env.groups)))
    r.settle(c)
    return r


def _leading(env: DrillEnv, fallback: ClusterNode) -> ClusterNode:
    """The node leading the most groups now (the primary), as the live nodes agree; ``fallback`` if they do not."""
    c = env.cluster
    if env.groups == 1:
        return c.primary() or fallback
    leaders = c.leaders()
    return c.most_leading(leaders) if leaders else fallback


def drill_partition_flap(env: DrillEnv, rep: int = 0) -> DrillResult:
    """Flapping: for ``env.flap_seconds`` (default ``FLAP_SECONDS``) the primary (the node leading
    the most groups, found again before each cut) is cut from etcd for 2-4 s, then healed for
    0.3-1 s, again and again, under load; then healed for good. Every group is faulted at some
    point: each group's longest gap between IDs must stay within TTL + 1 s, with no duplicate and
    no order violation."""
    c, ttl = env.cluster, env.lease_ttl
    assert env.lab is not None, "this drill needs DrillEnv(netns=True)"
    r = DrillResult(
        "partition: primary cut from etcd, flapping" + (f" ({env.groups} groups)" if env.groups > 1 else ""), rep
    )
    rng = random.Random(1000 + rep)
    victim, _ = env.settled()
    fault_at = History.now()
    cuts: list[str] = []
    with r.stage(), env.load(r) as load:
        load.wait_ops(env.warmup_ops)
        fault_at = r.mark(f"flapping for {env.flap_seconds:.0f}s")
        end = time.monotonic() + env.flap_seconds
        try:
            while time.monotonic() < end:
                victim = _leading(env, victim)
                cut_for, heal_for = rng.uniform(*FLAP_CUT), rng.uniform(*FLAP_HEAL)
                r.mark(f"cut {victim.node_id}")
                env.cut(victim)
                time.sleep(cut_for)  # the fault's own rhythm, not a synchronisation
                env.heal(victim)
                r.mark(f"heal {victim.node_id}")
                cuts.append(f"{victim.node_id} {cut_for:.1f}s/{heal_for:.1f}s")
                time.sleep(heal_for)
        finally:
            env.lab.heal()
        r.mark("healed for good")
        load.wait_success(History.now(), timeout=recovery_timeout(ttl))
        load.wait_ops(env.hold_ops)
    r.finish(fault_at, None, env.groups)
    r.notes.append(f"{len(cuts)} cuts (node, cut/heal): {', '.join(cuts)}")
    _gap_bars(r, ttl, list(range(env.groups)))
    r.settle(c)
    return r


def drill_kill_etcd_leader(env: DrillEnv, rep: int = 0) -> DrillResult:
    """`kill -9` of the etcd raft leader (three members): service goes on, IDs stay correct."""
    c, ttl, etcd = env.cluster, env.lease_ttl, env.etcd
    assert len(etcd.members) >= 3, "this drill needs a three-member etcd"
    r = DrillResult("kill -9 etcd leader", rep)
    old, _ = env.settled()
    leader = etcd.wait_leader()
    fault_at = History.now()
    with r.stage(), env.load(r) as load:
        load.wait_ops(env.warmup_ops)
        fault_at = r.mark(f"kill -9 etcd leader {leader.member_name}")
        etcd.kill(leader)
        etcd.wait_leader(exclude=leader)
        elected = r.mark("new etcd leader")
        r.notes.append(
            f"etcd leader {leader.member_name} killed, a new one elected in {(elected - fault_at) / 1e6:.0f} ms"
        )
        load.wait_success(elected, timeout=recovery_timeout(ttl))
        primary = c.wait_primary(recovery_timeout(ttl))
        r.notes.append(f"march primary {old.node_id} -> {primary.node_id}")
        load.wait_ops(env.hold_ops)
    r.finish(fault_at, old.address, env.groups)
    etcd.restart(leader)
    etcd.wait_leader()
    r.settle(c)
    return r


def drill_planned_failover(env: DrillEnv, rep: int = 0) -> DrillResult:
    """`FAILOVER` on the primary under load: zero client errors; the longest delay is reported
    next to the 100 ms bar, never asserted."""
    c, ttl = env.cluster, env.lease_ttl
    r = DrillResult("planned FAILOVER", rep)
    old, affected = env.settled()
    command = ["FAILOVER"] if env.groups == 1 else ["FAILOVER", "GROUP", str(affected[0])]
    moved = affected[:1]  # FAILOVER GROUP moves that one group; the node's others stay
    fault_at = History.now()
    with r.stage(), env.load(r) as load:
        load.wait_ops(env.warmup_ops)
        fault_at = r.mark(f"{' '.join(command)} on {old.node_id}")
        reply = old.call(*command, timeout=recovery_timeout(ttl))
        r.mark(f"FAILOVER replied {reply!r}")
        r.notes.append(f"{' '.join(command)} answered {reply!r} in {(History.now() - fault_at) / 1e6:.0f} ms")
        if reply != "OK":
            r.violations.append(f"FAILOVER answered {reply!r}")
        new = _moved_away(env, old, moved[0], recovery_timeout(ttl))
        r.mark(f"{new.node_id} says primary")
        r.notes.append(f"primary {old.node_id} -> {new.node_id}")
        env.wait_resumed(load, fault_at, old, moved, recovery_timeout(ttl))
        load.wait_ops(env.hold_ops)
    r.finish(fault_at, old.address, env.groups, moved)
    if r.figures.errors:
        r.violations.append(f"{r.figures.errors} client errors during a planned FAILOVER: {r.figures.error_kinds}")
    r.bars.append(Bar("longest request delay", r.figures.longest_delay, 0.1, asserted=False))
    r.settle(c)
    return r


def drill_full_restart(env: DrillEnv, rep: int = 0) -> DrillResult:
    """Every node stopped (even repetitions: SIGTERM; odd: `kill -9`, etcd killed and restarted
    too), then started again: the first IDs are above everything issued before."""
    c, ttl = env.cluster, env.lease_ttl
    hard = rep % 2 == 1
    r = DrillResult("full restart" + (" (kill -9, etcd too)" if hard else " (SIGTERM)"), rep)
    env.settled()
    fault_at = restarted_at = History.now()
    before: dict[str, int] = {}
    with r.stage():
        with env.load(r) as load:
            load.wait_ops(env.warmup_ops)
        before = {k: max((o.id for o in h.ops), default=0) for k, h in r.histories.items()}
        r.notes.append(f"highest IDs before: {before}")
        fault_at = r.mark("every node " + ("killed" if hard else "stopped"))
        for n in c.nodes:
            if hard:
                c.kill(n)
            else:
                code = n.stop()
                if code != 0:
                    r.violations.append(f"{n.node_id} exited with {code} on SIGTERM")
        if hard:
            for m in env.etcd.members:
                env.etcd.kill(m)
            env.etcd.restart_all()
        restarted_at = r.mark("starting nodes again")
        c.start(timeout=recovery_timeout(ttl))
        r.mark("nodes up")
        with env.load(r) as load:
            load.wait_ops(env.hold_ops)
    r.finish(fault_at, None, env.groups)
    for k, h in r.histories.items():
        after = [o.id for o in h.ops if o.sent >= restarted_at]
        if after and before and min(after) <= before[k]:
            r.violations.append(f"{k}: ID {min(after)} after the restart is not above {before[k]} issued before")
    r.settle(c)
    return r


def _record(r: DrillResult, client: str, key: str, sent: int, reply: object, node: str) -> None:
    """A probe's reply: an ID joins the key's history (so the checker sees it too); anything else
    is tallied in ``r.probes``, not counted as a client error (a redirect is the expected answer)."""
    if isinstance(reply, int):
        r.histories.setdefault(key, History()).record(client, sent, History.now(), reply, node)
        return
    text = reply.message if isinstance(reply, RespError) else f"{type(reply).__name__}: {reply}"
    kind = f"{client} {text.split(' ', 1)[0]}"
    r.probes[kind] = r.probes.get(kind, 0) + 1


def _late_replies(r: DrillResult, conn: RespConn, key: str, sent: int, old: ClusterNode) -> None:
    """Replies to the requests queued on the paused primary: none may carry an ID."""
    for _ in range(LATE_REQUESTS):
        try:
            reply: object = conn.read_reply()
        except OSError as e:  # it may close the connection: no ID either
            reply = e
        _record(r, "late", key, sent, reply, old.address)
        if isinstance(reply, int):
            r.violations.append(f"the resumed old primary answered a queued INCR with ID {reply}")
        if isinstance(reply, OSError):
            break


def incr_each(node: ClusterNode, names: list[str], connections: int = 32, batch: int = 200) -> list[object]:
    """One INCR for each of ``names`` on ``node``, from ``connections`` clients at once (each
    pipelining ``batch`` at a time): the replies, in the order of ``names``."""
    replies: list[object] = [None] * len(names)

    def client(start: int) -> None:
        mine = range(start, len(names), connections)
        with RespConn(node.port, timeout=60) as c:
            for i in range(0, len(mine), batch):
                chunk = mine[i : i + batch]
                c.send(b"".join(encode("INCR", names[j]) for j in chunk))
                for j in chunk:
                    replies[j] = c.read_reply()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(min(connections, len(names)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return replies


def seed_sequences(node: ClusterNode, count: int, name_len: int) -> list[str]:
    """``count`` sequences of ``name_len``-byte names, created through ``node`` by concurrent
    clients (so the server's shared creation transactions make them); their names."""
    names = [f"seq:{i:07d}:".ljust(name_len, "x") for i in range(count)]
    bad = [r for r in incr_each(node, names) if r != 1]
    assert not bad, f"seeding: {len(bad)} failed, e.g. {bad[:3]}"
    return names


def drill_takeover(env: DrillEnv, rep: int = 0) -> DrillResult:
    """`kill -9` of a primary that serves ``env.sequences`` sequences with ``env.name_len``-byte
    names: a standby serves within TTL + 1 s whatever their number, the first requests for
    thousands of old sequences at once all succeed, and the new primary keeps serving (no flap)."""
    c, ttl = env.cluster, env.lease_ttl
    r = DrillResult(f"kill -9 primary, {env.sequences:,} sequences", rep)
    old = c.wait_settled(SETTLE)
    started = time.monotonic()
    if not env.seeded:
        env.seeded = seed_sequences(old, env.sequences, env.name_len)
    names = env.seeded
    r.notes.append(f"{len(names):,} sequences of {env.name_len} bytes seeded in {time.monotonic() - started:.1f}s")
    fault_at = History.now()
    with r.stage(), env.load(r) as load:
        load.wait_ops(env.warmup_ops)
        fault_at = r.mark(f"kill -9 {old.node_id}")
        c.kill(old)
        new = c.wait_primary(recovery_timeout(ttl), exclude=[old])
        r.mark(f"{new.node_id} says primary")
        load.wait_success(fault_at, not_from=[old.address], timeout=recovery_timeout(ttl))
        probes = names[rep * TAKEOVER_PROBES % len(names) :][:TAKEOVER_PROBES]
        sent = time.monotonic()
        replies = incr_each(new, probes)
        bad = [x for x in replies if not isinstance(x, int) or x <= 1]
        r.notes.append(
            f"primary {old.node_id} -> {new.node_id}; {len(probes)} first INCRs of old sequences at once: "
            f"{len(probes) - len(bad)} IDs in {time.monotonic() - sent:.2f}s"
        )
        if bad:
            r.violations.append(f"{len(bad)} of {len(probes)} first INCRs of old sequences failed: {bad[:3]}")
        load.wait_ops(env.hold_ops)
        wait_until(lambda: History.now() - fault_at >= (3 * ttl) * 1e9, timeout=3 * ttl + 1)  # a span, no sync
        if c.primary() is not new:
            r.violations.append(f"the primary changed again after the takeover (flapping): {c.roles()}")
    r.finish(fault_at, old.address)
    r.bars.append(Bar("first INCR on the new primary after the kill", r.figures.failover, ttl + 1.0))
    c.restart(old)
    r.settle(c)
    return r


def drill_restart_etcd(env: DrillEnv, rep: int = 0) -> DrillResult:
    """etcd (one member) killed under load and restarted after ``ETCD_DOWN`` seconds: the cluster
    serves again within about a second of etcd answering (the primary's lease survives etcd's
    restart, so it resumes; nobody waits out a reconnect back-off)."""
    c, ttl, etcd = env.cluster, env.lease_ttl, env.etcd
    r = DrillResult("etcd killed and restarted", rep)
    old, _ = env.settled()
    fault_at = History.now()
    with r.stage(), env.load(r) as load:
        load.wait_ops(env.warmup_ops)
        fault_at = r.mark("kill -9 etcd")
        for m in etcd.members:
            etcd.kill(m)
        wait_until(lambda: History.now() - fault_at >= ETCD_DOWN * 1e9, timeout=ETCD_DOWN + 1)  # the outage
        etcd.restart_all()
        answering = r.mark("etcd answers")  # /health says true
        served, _ = load.wait_success(answering, timeout=recovery_timeout(ttl))
        r.mark("first ID after etcd answered", served)
        back = (served - answering) / 1e9
        r.notes.append(
            f"etcd down {(answering - fault_at) / 1e9:.1f}s; first INCR {back * 1000:.0f} ms after it answered"
        )
        r.bars.append(Bar("first INCR after etcd answered again", back, 1.0))
        primary = c.wait_primary(recovery_timeout(ttl))
        r.notes.append(f"march primary {old.node_id} -> {primary.node_id}")
        load.wait_ops(env.hold_ops)
    r.finish(fault_at, old.address, env.groups)
    r.settle(c)
    return r


def _expect_redirect(
    r: DrillResult, old: ClusterNode, new: ClusterNode, key: str, timeout: float, env: DrillEnv
) -> None:
    """The old primary, back in touch, sends INCR to the new primary with MOVED (a TRYAGAIN or
    CLUSTERDOWN meanwhile is fine, an ID never is). With groups the rejoined node may soon take
    its share back by a planned hand-over: MOVED to any other node will do, and an ID is not a
    violation once every live node agrees that it leads the key's group again (the ID joins the
    history, which the checker judges with the rest)."""
    group = group_of_key(key, env.groups)

    def redirected() -> bool:
        sent = History.now()
        reply = old.call("INCR", key, timeout=2)
        _record(r, "old-primary", key, sent, reply, old.address)
        if isinstance(reply, int):
            if not (env.groups > 1 and _leads_again(env, old, group)):
                r.violations.append(f"the old primary answered INCR with ID {reply} after the fault")
            return True
        target = moved_target(reply)
        return target == new.address or (env.groups > 1 and target not in (None, old.address))

    try:
        wait_until(redirected, timeout=timeout, interval=0.05, message=f"MOVED to {new.address} from {old.node_id}")
    except AssertionError as e:
        r.violations.append(str(e).splitlines()[0])


def _leads_again(env: DrillEnv, old: ClusterNode, group: int, within: float = 2.0) -> bool:
    """Whether every live node agrees, within ``within`` seconds (their views follow etcd's watch),
    that ``old`` leads ``group`` again (taken back by a planned hand-over after it rejoined)."""
    try:
        wait_until(lambda: (env.cluster.leaders() or {}).get(group) is old, timeout=within, interval=0.05)
    except AssertionError:
        return False
    return True


def _moved_away(env: DrillEnv, old: ClusterNode, group: int, timeout: float) -> ClusterNode:
    """Until every live node agrees that ``group`` is led by a node other than ``old`` (with one
    group: another node says primary); that node."""
    if env.groups == 1:
        return env.cluster.wait_primary(timeout, exclude=[old])
    found: list[ClusterNode] = []

    def moved() -> bool:
        leaders = env.cluster.leaders()
        if leaders is not None and leaders[group] is not old:
            found.append(leaders[group])
        return bool(found)

    wait_until(moved, timeout=timeout, message=f"group {group} led by another node than {old.node_id}")
    return found[0]


def _other_groups(env: DrillEnv, r: DrillResult, fault_at: int, affected: list[int]) -> None:
    """With groups: the groups the faulty node did not lead kept serving. Each one must have
    served a request sent after the fault and answered before the faulty node's groups resumed
    (an ordering, asserted); its longest gap between IDs is reported next to the 50 ms bar."""
    if env.groups == 1:
        return
    others = [g for g in range(env.groups) if g not in affected]
    for gf in r.figures.groups:
        if gf.group in others:
            r.bars.append(
                Bar(f"group {gf.group} (not faulted): longest gap", gf.longest_gap, OTHER_GROUPS_GAP, asserted=False)
            )
    if r.figures.failover is None:
        return  # the faulty groups never resumed: already a violation or a missed bar
    down_until = fault_at + int(r.figures.failover * 1e9)
    for g in others:
        ops = [o for k in env.key_sets[g] for o in r.histories.get(k, History()).ops]
        if not any(o.sent >= fault_at and o.replied <= down_until for o in ops):
            r.violations.append(
                f"group {g} (not led by the faulty node) got no ID in the {r.figures.failover * 1000:.0f} ms "
                f"its neighbours' groups {affected} were down"
            )


def drill_rebalance(env: DrillEnv, rep: int = 0) -> DrillResult:
    """A fourth node joins under load and takes its share of the groups through planned
    hand-overs (no client error while it joins); then it leaves with SIGTERM, handing its groups
    back at once (errors then are reported: a plain client whose connection the leaving node
    closes sees one). With one group nothing moves: the join must simply disturb nothing."""
    c, ttl = env.cluster, env.lease_ttl
    r = DrillResult(f"rebalance: a 4th node joins and leaves ({env.groups} groups)", rep)
    env.settled()
    fault_at = History.now()
    joined: ClusterNode | None = None
    with r.stage(), env.load(r) as load:
        try:
            load.wait_ops(env.warmup_ops)
            errors_before = load.errors
            fault_at = r.mark("4th node starting")
            joined = c.join(c.nodes[0].etcd, timeout=recovery_timeout(ttl))
            r.mark(f"{joined.node_id} up")
            leaders = c.wait_leaders(recovery_timeout(ttl), spread=True) if env.groups > 1 else {}
            taken = c.led_by(joined, leaders)
            share = env.groups // len(c.nodes)
            r.mark(f"{joined.node_id} leads {taken}")
            r.notes.append(f"{joined.node_id} joined and leads group(s) {taken} (its share: at least {share})")
            if len(taken) < share:
                r.violations.append(f"{joined.node_id} leads {taken}, fewer than its share of {share}")
            others = [n.address for n in c.nodes if n is not joined]
            for g in taken:  # the new node really serves what it took
                load.wait_success(fault_at, not_from=others, timeout=recovery_timeout(ttl), keys=env.key_sets[g])
            load.wait_ops(env.hold_ops)
            joined_errors = load.errors - errors_before
            if joined_errors:
                r.violations.append(f"{joined_errors} client errors while a node joined (planned hand-overs)")
            left_at = r.mark(f"SIGTERM {joined.node_id}")
            code, joined = c.leave(joined), None
            if code != 0:
                r.violations.append(f"the leaving node exited with {code} on SIGTERM")
            c.wait_settled(recovery_timeout(ttl))
            r.mark("settled on 3 nodes")
            r.notes.append(f"left and settled in {(History.now() - left_at) / 1e6:.0f} ms")
            load.wait_ops(env.hold_ops)
        finally:
            if joined is not None:
                c.leave(joined)
    r.finish(fault_at, None, env.groups)
    r.bars.append(Bar("longest request delay", r.figures.longest_delay, 0.1, asserted=False))
    r.settle(c)
    return r


def drill_race_node_id(env: DrillEnv, rep: int = 0) -> DrillResult:
    """``env.rounds`` rounds of two contenders with one node id bootstrapping a fresh prefix at once
    (``march_harness.races.race_node_id``): one cluster id, one holder of the id, the leader key its own."""
    r = DrillResult("race: two nodes, one node id", rep)
    race = race_node_id(env.etcd.endpoints, env.rounds or RACE_ROUNDS, env.out)
    r.violations += race.violations[:20]
    if len(race.violations) > 20:
        r.violations.append(f"... {len(race.violations)} violations in all")
    r.notes += race.notes
    return r


def drill_sigterm(env: DrillEnv, rep: int = 0) -> DrillResult:
    """``env.rounds`` rounds (50 by default: the issue's bar) of a SIGTERM at a random moment around
    a change of the layout (``march_harness.stops.sigterm_round``: from 0.3 s before the change to 1.5 s
    after, so before it, while the node steps down, during its restart in the same process and
    after; every fourth round the node is SIGSTOPped across the change, then gets SIGCONT and,
    0-0.5 s later, SIGTERM), under load. Every SIGTERM must end its node with the orderly stop and
    exit status 0; the load's history must hold no duplicate and no order violation. The layout is
    changed back to the drill cluster's at the end."""
    c = env.cluster
    rounds = env.rounds or SIGTERM_ROUNDS
    r = DrillResult(f"SIGTERM around layout changes ({rounds} rounds)", rep)
    rng = random.Random(rep)
    env.settled()
    fault_at = History.now()
    done: list[StopRound] = []
    started = time.monotonic()
    with r.stage(), env.load(r, max_seconds=SIGTERM_ROUND_SECONDS * rounds + 120) as load:
        load.wait_ops(env.warmup_ops)
        fault_at = r.mark(f"{rounds} rounds of SIGTERM around a layout change")
        try:
            for i in range(rounds):
                one = sigterm_round(c, env.etcd.endpoints, rng, paused=i % 4 == 3)
                done.append(one)
                if one.problems and len(r.violations) < 20:
                    r.violations.append(f"round {i}: {one.line()}")
                if env.out is not None:
                    env.out(f"  sigterm round {i + 1}/{rounds}: {one.line().splitlines()[0]}")
        finally:
            if c.groups != env.groups:  # the drill cluster's own layout for the drills after this one
                change(c, env.etcd.endpoints, env.groups)
                settle_layout(c, SETTLE_TIMEOUT)
        r.mark("rounds done")
        load.wait_ops(env.hold_ops)
    r.finish(fault_at, None, env.groups)
    if done:
        codes = Counter(one.code for one in done)
        took = sorted(one.took for one in done)
        orderly = sum(1 for one in done if not one.problems)
        offsets = [one.offset for one in done]
        r.notes.append(
            f"{len(done)} SIGTERMs, {orderly} orderly exits (status 0, 'received SIGTERM' logged); exit statuses "
            f"{dict(codes)}; SIGTERM to exit: median {statistics.median(took):.2f}s, max {took[-1]:.2f}s; offsets "
            f"from the change {min(offsets) * 1000:+.0f}..{max(offsets) * 1000:+.0f} ms; "
            f"{time.monotonic() - started:.0f}s in all"
        )
    r.settle(c)
    return r


def drill_race_failover(env: DrillEnv, rep: int = 0) -> DrillResult:
    """``env.rounds`` rounds, under load, of two FAILOVERs sent to the primary at once (one to each
    standby) and a hand-back from the new primary (``march_harness.races.failover_round``): linearizable
    replies, the cluster led by the node they name, no hand-off key left; no duplicate and no order
    violation in the load's history."""
    c = env.cluster
    r = DrillResult("race: two FAILOVERs and a hand-back", rep)
    c.wait_settled(SETTLE)
    handoff = KeyPaths.of(c.prefix).handoff
    endpoints = env.etcd.endpoints.split(",")

    def handoff_present() -> bool:
        async def get() -> bool:
            client = GrpcEtcd(endpoints, name="race check")
            try:
                return await client.get(handoff) is not None
            finally:
                await client.close()

        return asyncio.run(get())

    fault_at = History.now()
    bad = 0
    started = time.monotonic()
    with r.stage(), env.load(r) as load:
        load.wait_ops(env.warmup_ops)
        rounds = env.rounds or RACE_ROUNDS
        fault_at = r.mark(f"{rounds} rounds of racing FAILOVERs")
        for i in range(rounds):
            primary = c.wait_settled(SETTLE)
            standbys = sorted((n for n in c.nodes if n is not primary), key=lambda n: n.node_id)
            problems, expected = failover_round(
                Member(primary.node_id, primary.address),
                [Member(n.node_id, n.address) for n in standbys],
                handoff_present,
            )
            settled = c.wait_settled(SETTLE)
            if expected is not None and settled.node_id != expected:
                problems.append(f"the replies say {expected} leads, {settled.node_id} does")
            bad += bool(problems)
            r.violations += [f"round {i}: {p}" for p in problems][: max(0, 20 - len(r.violations))]
            if env.out is not None and (problems or (i + 1) % 25 == 0):
                env.out(f"  race-failover round {i + 1}/{rounds}: {problems if problems else 'ok'}")
        r.mark("rounds done")
        load.wait_ops(env.hold_ops)
    r.finish(fault_at, None)
    r.notes.append(f"{env.rounds or RACE_ROUNDS} rounds ({bad} with a violation) in {time.monotonic() - started:.1f}s")
    r.settle(c)
    return r


DRILLS: dict[str, Callable[[DrillEnv, int], DrillResult]] = {
    "kill": drill_kill_primary,
    "pause": drill_pause_primary,
    "cut": drill_cut_primary_etcd,
    "etcd-leader": drill_kill_etcd_leader,
    "failover": drill_planned_failover,
    "restart": drill_full_restart,
    "takeover": drill_takeover,
    "etcd-restart": drill_restart_etcd,
    "race-node-id": drill_race_node_id,
    "race-failover": drill_race_failover,
    "rebalance": drill_rebalance,
    "sigterm": drill_sigterm,
    "partition-primary": drill_partition_primary,
    "partition-standby": drill_partition_standby,
    "partition-all": drill_partition_all,
    "partition-flap": drill_partition_flap,
}

# Which layout each drill needs: (etcd members, proxies); the partition drills also need network
# namespaces (``PARTITION_DRILLS``).
LAYOUTS: dict[str, tuple[int, bool]] = {
    "kill": (1, False),
    "pause": (1, False),
    "cut": (1, True),
    "etcd-leader": (3, False),
    "failover": (1, False),
    "restart": (1, False),
    "takeover": (1, False),
    "etcd-restart": (1, False),
    "race-node-id": (1, False),
    "race-failover": (1, False),
    "rebalance": (1, False),
    "sigterm": (1, False),
    "partition-primary": (1, False),
    "partition-standby": (1, False),
    "partition-all": (1, False),
    "partition-flap": (1, False),
}

# The drills that need real partitions (``DrillEnv(netns=True)``: root, ``ip netns``).
PARTITION_DRILLS = ("partition-primary", "partition-standby", "partition-all", "partition-flap")

# The drills that run with leadership groups (the others seed or race one primary).
GROUP_DRILLS = (
    "kill",
    "pause",
    "cut",
    "etcd-leader",
    "failover",
    "restart",
    "etcd-restart",
    "rebalance",
    "sigterm",
    *PARTITION_DRILLS,
)
