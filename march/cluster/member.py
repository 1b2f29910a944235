"""This node's membership in a cluster: one lease, one directory and one control loop for the node,
and per leadership group an election and a FAILOVER, wired together with the background loops.

Each part keeps its own logic (``lease``, ``election``, ``directory``, ``failover``, ``identity``); this
module only connects them to each other and to each group's serving state:

- lease renewed -> every group's ``ServingState.renewed(deadline)`` (and the elections, which may resume);
- lease gone in etcd -> every group's ``ServingState.lease_gone()`` and a new registration: losing the
  node's lease steps every group down (all leader keys sit on that one lease);
- serving-state changes -> that group's election (resign after a refused write) and the directory;
- the directory's watch -> the control loop.

**One lease, one watch, one loop per node, whatever the number of groups.** The registration and every
leader key this node holds sit on one etcd lease (one keep-alive stream); one range read and one watch
of ``[leader, nodes_end)`` cover every group's leader and hand-off keys and every node record; one
control loop (``ElectionLoop``) reads the topology once per pass and steps every group's election. A
group's view (``GroupMember``: its election, FAILOVER and directory view) is what ``Group.member`` is.

The lease runs on an etcd client of its own; the elections, the directory and FAILOVER share the
control client; the store has the data client (``march.node`` makes all three), so no data call can
cut a keep-alive short. Every loop runs under ``_supervised``: whatever ends it early is logged and
it restarts (after 2 x TTL if it failed), except an ``IdentityConflict`` (this node's id is held by
another live process, it belongs to another cluster, or etcd holds another layout): that is handed
to ``on_fatal`` once, and the node stops (``march.node``). ``stop`` steps every group down, gives every
leader key back at once and revokes the lease, so standbys take over without waiting for the TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from march import errors
from march.clock import Clock
from march.cluster import balance
from march.cluster.directory import Directory, GroupDirectory, NodeInfo, Topology
from march.cluster.election import Election, ElectionLoop, Spread
from march.cluster.failover import Failover
from march.cluster.identity import ClusterIdentity
from march.cluster.lease import LeaseKeeper
from march.errors import CommandError, IdentityConflict, StoreError
from march.etcd.api import KV, Compare, Etcd
from march.etcd.keypath import KeyPaths
from march.keyspace.keyspace import Keyspace
from march.keyspace.serving import Cause, ServingState

log = logging.getLogger("march.cluster")

# Seconds between looks while CLUSTER FAILOVER waits to serve the group it asked for (a group changes
# hands in milliseconds; the wait is bounded by the command's timeout).
_TAKEOVER_POLL = 0.02
# Rebalancing hands a group only to a node registered (under its current lease) for this many lease
# TTLs: a node back from a partition a moment ago is the likeliest to drop out again, and a group
# handed to a node that cannot take it over is served by nobody until the others' TTL of patience
# with the chosen node runs out (the flapping partition drill: gaps of 3 s at TTL 2 s, issue 25).
SETTLE_TTLS = 2


@dataclass(frozen=True)
class GroupSpec:
    """What the member needs of one group: its serving state, keyspace and etcd keys."""

    state: ServingState
    keyspace: Keyspace
    leader: bytes  # its leader key (``march.cluster.layout``)
    handoff: bytes  # its FAILOVER hand-off key


class GroupMember:
    """One group's side of the membership: its election and FAILOVER, and its view of the directory."""

    def __init__(
        self, node: ClusterMember, index: int, spec: GroupSpec, election: Election, failover: Failover
    ) -> None:
        self.node = node
        self.index = index
        self.state = spec.state
        self.keyspace = spec.keyspace
        self.election = election
        self.failover = failover
        self.directory = failover.directory

    @property
    def me(self) -> NodeInfo:
        return self.node.me

    @property
    def lease(self) -> LeaseKeeper:
        return self.node.lease

    @property
    def ttl(self) -> int:
        return self.node.ttl


def hand_over_plan(led: list[GroupMember], target: str | None) -> list[tuple[GroupMember, str | None]]:
    """Where each group goes: to ``target`` if given, else each to the live node leading fewest
    groups (counting the ones handed to it here), so a node that leaves spreads its groups."""
    if target is not None:
        return [(m, target) for m in led]
    directory = led[0].node.directory
    me = led[0].me.id
    load = {n: 0 for n in directory.topology.staying() if n != me}
    for view in directory.views:
        if view.leader in load:
            load[view.leader] += 1
    out: list[tuple[GroupMember, str | None]] = []
    for m in led:
        if not load:
            out.append((m, None))  # the failover answers that there is no standby
            continue
        node = min(load, key=lambda n: (load[n], n))
        load[node] += 1
        out.append((m, directory.topology.nodes[node].addr))
    return out


class ClusterMember:
    def __init__(
        self,
        *,
        lease_etcd: Etcd,
        control_etcd: Etcd,
        keys: KeyPaths,
        groups: Sequence[GroupSpec],
        me: NodeInfo,
        identity: ClusterIdentity,
        ttl: int,
        clock: Clock,
        store_timeout: float,
        on_fatal: Callable[[IdentityConflict], None] = lambda _: None,
        confirm_layout: Callable[[], Awaitable[None]] | None = None,
        campaign_compares: Callable[[], list[Compare]] = list,
        check_layout: Callable[[KV | None], None] | None = None,
    ) -> None:
        self.clock = clock
        self.ttl = ttl
        self.identity = identity
        self.on_fatal = on_fatal
        self.lease = LeaseKeeper(lease_etcd, ttl, clock)
        self.directory = Directory(
            control_etcd,
            keys,
            me,
            clock,
            timeout=ttl / 3,
            lease_ttl=ttl,
            leader_keys=[(g.leader, g.handoff) for g in groups],
            out_of_touch=self.lease.out_of_touch,
        )
        self.control = control_etcd
        self.keys = keys
        wake = asyncio.Event()
        # (one group is N = 1: its fair share is the group, and a node that leads none campaigns at once)
        spread = Spread(len(groups), self.leading)
        self.groups = [
            self._group(index, spec, wake, spread, campaign_compares, store_timeout)
            for index, spec in enumerate(groups)
        ]
        self.loop = ElectionLoop(
            [g.election for g in self.groups],
            self.lease,
            self.directory,
            identity,
            clock,
            wake,
            confirm_layout,
            self._rebalance,
            check_layout,
        )
        self._rebalancing: asyncio.Task[None] | None = None
        self._rebalanced_at = -math.inf
        self.lease.on_gone(self._lease_gone)
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False

    def _group(
        self,
        index: int,
        spec: GroupSpec,
        wake: asyncio.Event,
        spread: Spread,
        compares: Callable[[], list[Compare]],
        store_timeout: float,
    ) -> GroupMember:
        """Group ``index``'s election and FAILOVER, on the node's lease, directory and control loop."""
        view = GroupDirectory(self.directory, index)
        election = Election(
            self.control,
            self.keys,
            spec.state,
            self.lease,
            view,
            self.identity,
            self.clock,
            leader=spec.leader,
            handoff=spec.handoff,
            spread=spread,
            wake=wake,
            compares=compares,
        )
        failover = Failover(
            self.control, self.keys, spec.state, spec.keyspace, self.lease, view, election, self.clock, store_timeout
        )
        self.lease.on_renewed(spec.state.renewed)
        return GroupMember(self, index, spec, election, failover)

    @property
    def me(self) -> NodeInfo:
        return self.directory.me

    def leading(self) -> int:
        """How many groups this node leads now (a term, serving or about to)."""
        return sum(1 for g in self.groups if g.state.leading)

    def _rebalance(self, views: list[Topology]) -> None:
        """After a pass: if this node is the most loaded and leads two more groups than the least
        loaded (``balance.next_handover``), hand one group (its highest) to that node through FAILOVER
        (held requests, no client error); one at a time, at most one per TTL, never while one runs."""
        now = self.clock.now()
        if self._closing or self.loop.leaving or self._rebalancing is not None:
            return
        if any(g.failover.active for g in self.groups):
            return
        nodes = views[0].staying()
        me = self.me.id
        asked = next(
            (n for n in nodes.values() if 0 <= n.takeover < len(views) and views[n.takeover].leader == me), None
        )
        if asked is not None and asked.id != me:  # CLUSTER FAILOVER run on that node asks for this group
            move: tuple[int, str] | None = (asked.takeover, asked.id)
        elif now < self._rebalanced_at + self.ttl:
            return
        else:
            # Only nodes back for a while take part (while one still settling leads a group, nothing
            # moves until it has settled).
            settled = [n for n in nodes if n == me or self.directory.registered_for(n) >= SETTLE_TTLS * self.ttl]
            move = balance.next_handover({g: v.leader for g, v in enumerate(views)}, settled, self.me.id)
        if move is None:
            return
        g, target = move
        group = self.groups[g]
        if not group.state.serving or target not in nodes:
            return
        self._rebalanced_at = now
        log.info("rebalancing: handing group %d over to %s", g, target)
        self._rebalancing = asyncio.get_running_loop().create_task(self._hand(group, nodes[target].addr))

    async def take_over(self, timeout: float) -> None:
        """CLUSTER FAILOVER on a node that leads no group: ask the most loaded primary (its node
        record names the group) for its highest group and wait (at most ``timeout``) until this node
        serves it; the primary hands it over through FAILOVER (held requests, no client error)."""
        if any(g.state.leading for g in self.groups):
            raise CommandError(errors.CLUSTER_FAILOVER_ON_PRIMARY)
        views = self.directory.views
        load: dict[str, list[int]] = {}
        for g, view in enumerate(views):
            if view.leader is not None and view.leader != self.me.id:
                load.setdefault(view.leader, []).append(g)
        if not load:
            raise CommandError(errors.CLUSTER_FAILOVER_NO_PRIMARY)
        giver = min(load, key=lambda n: (-len(load[n]), n))
        g = max(load[giver])
        log.info("CLUSTER FAILOVER: asking %s for group %d", giver, g)
        self.loop.takeover = g
        self.loop.wake()
        end = self.clock.now() + timeout
        try:
            while not self.groups[g].state.serving:
                if self.clock.now() >= end:
                    raise CommandError(errors.CLUSTER_FAILOVER_TIMEOUT.format(g))
                await self.clock.sleep(_TAKEOVER_POLL)
        finally:
            self.loop.takeover = -1
            self.loop.wake()

    async def _hand(self, group: GroupMember, target: str) -> None:
        try:
            await group.failover.run(target, 2 * self.ttl)
        except CommandError as exc:
            log.warning("rebalancing group %d to %s: %s", group.index, target, exc.message)
        except StoreError as exc:
            log.warning("rebalancing group %d to %s: %s", group.index, target, exc)
        finally:
            self._rebalancing = None
            self._rebalanced_at = self.clock.now()
            self.loop.wake()

    def _lease_gone(self) -> None:
        for group in self.groups:
            group.state.lease_gone()
            group.election.held_revision = 0  # the leader key, if ours, went with the lease
        self.directory.lease_gone()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._supervised("election", self.loop.run), name="march-election"),
            loop.create_task(self._supervised("keep-alive", self.lease.run), name="march-keepalive"),
            loop.create_task(self._supervised("watch", self.directory.watch), name="march-watch"),
        ]
        log.info("node %s (%s) joining the cluster (%d group(s))", self.me.id, self.me.addr, len(self.groups))

    async def _supervised(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        """Run a background loop for the node's life: whatever ends it early is logged, and it restarts."""
        while not self._closing:
            try:
                await run()
            except IdentityConflict as exc:
                log.error("%s", exc)
                for group in self.groups:
                    group.state.step_down(Cause.SHUTDOWN, "this node may not take part in the cluster")
                self.on_fatal(exc)
                return
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if self._closing or (task is not None and task.cancelling()):
                    raise
                log.error("the %s loop was cancelled from below; restarting it", name)
            except Exception:
                log.exception("the %s loop failed; restarting it in %ds", name, 2 * self.ttl)
                await self.clock.sleep(2 * self.ttl)

    async def hand_over(self, timeout: float) -> None:
        """Before an orderly stop (SIGTERM, SHUTDOWN): hand every group this node serves to the
        other nodes through the planned FAILOVER path, all at once, so that requests held meanwhile
        get MOVED to the new primaries and clients see no error. A group not handed over within
        ``timeout`` (no other node, or its node did not take over) is given back by ``stop``."""
        led = [g for g in self.groups if g.state.serving]
        if not led or len(self.directory.topology.staying()) < 2:
            return
        # First say so in this node's record: no other node rebalances a group to it, no campaign
        # counts it, and it campaigns for nothing (the groups it hands over must not come back).
        self.loop.leaving = True
        for group in self.groups:
            group.election.closing = True
        with contextlib.suppress(StoreError):
            await self.directory.register(self.lease.id, *self.loop.describe())
        plan = [(m, t) for m, t in hand_over_plan(led, None) if t is not None]
        results = await asyncio.gather(*(m.failover.run(t, timeout) for m, t in plan), return_exceptions=True)
        for (m, t), result in zip(plan, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("shutting down: group %d not handed over to %s (%s)", m.index, t, result)

    async def stop(self, timeout: float) -> None:
        """Leave: step every group down, give every leader key back at once (all together), revoke
        the lease (drops the registration)."""
        self._closing = True
        self.loop.closing = True
        for group in self.groups:
            group.election.closing = True
            group.state.step_down(Cause.SHUTDOWN)
        tasks = [*self._tasks, *([self._rebalancing] if self._rebalancing is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(self._resign(g, timeout) for g in self.groups), return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.lease.revoke(timeout)

    async def _resign(self, group: GroupMember, timeout: float) -> None:
        with contextlib.suppress(Exception):
            if group.election.held_revision:
                await group.keyspace.drain(timeout)
                await group.election.resign(timeout)
