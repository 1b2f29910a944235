"""The election: who holds a group's leader key (``<prefix>/leader`` with one group, one key per
group with several: ``march.cluster.layout``), and the serving state that follows from it.

One control loop per node (``ElectionLoop``), woken by the directory's watch, by the lease and by
every group's serving state (and at least every TTL/2), makes one pass: steps 0-2 once for the
node, then steps 2-6 for each group's ``Election`` (``step_group``), then the node's record again
(the groups it leads) and the member's rebalancing. ``Election.step`` is one group alone (the
same steps):

0. Once: confirm which cluster this node belongs to (``march.cluster.identity``).
1. Make sure there is a lease and this node is registered under it. While another process holds
   this node's id nothing else happens (``march.cluster.directory``: it waits for that lease to end,
   or the node exits).
2. Read the topology (linearizable). If this node's record is gone, or not under its lease,
   write it again (below, in the same step). If this node serves a term whose leader key is gone
   or is another one (another value or create revision), step down: someone else leads.
3. **Adopt** a leader key this process won although the campaign's reply was lost (a timeout):
   it names this node and sits on this node's lease, so it is ours.
4. **Resign** after a refused guarded write: give the leader key back (a guarded delete), pause
   campaigning for 2 x TTL, then campaign again like anyone else.
5. **Campaign** when there is no leader: one transaction creates the leader key under this
   node's lease if it is absent, this node's record is under this node's lease (a process whose
   id another process holds can never win) and ``<prefix>/cluster`` is the cluster this node
   confirmed (an etcd wiped or restored under it elects nobody). Its create revision and the node
   id form the term's ``Guard``. Standbys leave a FAILOVER's chosen node one TTL to take over first.
6. **Resume**: this node stepped down when its lease deadline passed (keep-alives were late), but
   etcd kept the lease and the key: the same leader key serves again, in a new term (requests
   got no ID meanwhile; each key's ceiling is read and raised again before its next ID).

With several groups a campaign also follows the spreading rules (``march.cluster.balance``:
fair share, a delay per group held; ``Election._spread``), and every campaign carries the layout's
compares (``campaign_compares``: the layout this node acts on, no leader of the previous one). A
term's ``Guard`` names its group's leader key, so the store fences each group by its own key.

Promotion is O(1): no sequence is read or written; each key's ceiling is read and raised by its
first request in the new term (``march.keyspace.keyspace``). While a planned FAILOVER holds this node's
term (``STEPPING_DOWN``), the election leaves the state alone. After an unexpected error the
loop backs off 2 x TTL; while etcd is unreachable it retries every TTL/3. An ``IdentityConflict``
(this node's id is another live process's, or its cluster is not the one etcd holds) ends the
loop: the member stops the node.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from march.clock import Clock, wait_event
from march.cluster import balance
from march.cluster.directory import LEAVING, PRIMARY, PROMOTING, STANDBY, Directory, GroupDirectory, Topology
from march.cluster.identity import ClusterIdentity
from march.cluster.lease import LeaseKeeper
from march.errors import IdentityConflict, StoreError
from march.etcd.api import KV, Compare, Delete, Etcd, Get, Put, created_at, lease_is, value_is
from march.etcd.keypath import KeyPaths
from march.keyspace.serving import Cause, Change, Phase, ServingState
from march.store.contract import Guard

log = logging.getLogger("march.cluster")


@dataclass(frozen=True)
class Spread:
    """How a node's elections spread N groups over the live nodes (``Election._spread``; the rules
    are ``march.cluster.balance``'s)."""

    groups: int  # N
    held: Callable[[], int]  # how many groups this node leads now


class Election:
    def __init__(
        self,
        etcd: Etcd,
        keys: KeyPaths,
        state: ServingState,
        lease: LeaseKeeper,
        directory: Directory | GroupDirectory,
        identity: ClusterIdentity,
        clock: Clock,
        *,
        leader: bytes = b"",
        handoff: bytes = b"",
        spread: Spread | None = None,
        wake: asyncio.Event | None = None,
        compares: Callable[[], list[Compare]] = list,
    ) -> None:
        self.etcd = etcd
        self.keys = keys
        self.state = state
        self.lease = lease
        self.directory = directory
        self.identity = identity
        self.clock = clock
        self.node_id = directory.me.id
        self.ttl = lease.ttl
        self.leader = leader or keys.leader  # this group's leader key (``march.cluster.layout``)
        self.handoff = handoff or keys.handoff  # and its FAILOVER hand-off key
        self.compares = compares  # the layout's campaign compares (``march.cluster.layout.campaign_compares``)
        self.spread = spread  # several groups: how many this node may lead, and how long it waits
        self._leaderless_since: float | None = None  # when this group was first seen without a leader
        self._wake_due = -math.inf  # a wake-up this election has asked for (``_wake_at``)
        self.held_revision = 0  # create revision of the leader key this node created (0: none)
        # The leader key this node last gave back (resign, FAILOVER): a topology read issued before
        # that still shows it as ours, and must not be adopted again (a key, once deleted, never
        # comes back with the same create revision, so this never hides a key won later).
        self._given_back = 0
        self.closing = False
        self._resign = False  # a guarded write was refused: give the leader key back
        self._quiet_until = -1.0  # no campaign before this (after a refused write or an error)
        self._handoff_seen: tuple[int, float] | None = None  # (hand-off key revision, first seen)
        self._wake = wake or asyncio.Event()  # several groups share the node's one control loop
        state.subscribe(self._on_state)
        lease.on_renewed(self._on_renewed)
        lease.on_gone(self.wake)
        directory.on_change(self.wake)

    def wake(self) -> None:
        self._wake.set()

    # --- reactions -------------------------------------------------------------------------------

    def _on_state(self, change: Change) -> None:
        if change.phase is not Phase.STANDBY:
            return
        self.directory.forget_me_as_leader()
        if change.cause is Cause.REFUSED:
            self._resign = True
            self._quiet_until = self.clock.now() + 2 * self.ttl
        self.wake()

    def _on_renewed(self, deadline: float) -> None:
        # A keep-alive landed: a node that holds the leader key but stepped down (late keep-alives)
        # serves again now, not at its next tick.
        if self.held_revision and self.state.phase is Phase.STANDBY:
            self.wake()

    # --- one group alone (``ElectionLoop`` runs every group of a node in one loop) ----------------

    async def step(self) -> None:
        """One group alone (``ElectionLoop`` steps several): steps 0-2, then ``step_group``."""
        assert isinstance(self.directory, Directory)
        if not self.identity.id:
            await self.identity.confirm()
        await self.lease.ensure()
        if not await self.directory.register(self.lease.id, self.role):
            self.clock.call_later(self.ttl / 4, self.wake)  # another lease holds this id: look again soon
            return
        topology = await self.directory.read()
        if topology.leases.get(self.node_id) != self.lease.id:
            self.directory.record_lost()  # re-created by the register call at the end of this step
        await self.step_group(topology)
        await self.directory.register(self.lease.id, self.role)

    async def step_group(self, topology: Topology) -> None:
        """Steps 2-6 for this group, from a topology just read."""
        me = self.node_id
        term = self.state.term
        handing_over = self.state.phase is Phase.STEPPING_DOWN  # a FAILOVER owns the state now
        superseded = term is not None and (topology.leader != me or topology.leader_revision != term.guard.revision)
        if superseded and not handing_over:
            self.state.step_down(Cause.SUPERSEDED, f"leader key: {topology.leader} @ {topology.leader_revision}")
        if (
            topology.leader == me
            and topology.leader_lease == self.lease.id
            and not self.held_revision
            and topology.leader_revision != self._given_back  # (a read from before it was given back)
        ):
            self.held_revision = topology.leader_revision  # won although the campaign's reply was lost
        if self._resign:
            await self.resign(self.ttl / 3)
            self._resign = False  # only once it is done: a failed attempt is tried again
            return
        if topology.leader is not None:
            self._leaderless_since = None
        if topology.leader is None and self._may_campaign(topology):
            await self._campaign()
        elif (
            topology.leader == me
            and topology.leader_revision == self.held_revision
            and self.state.phase is Phase.STANDBY
            and self.clock.now() < self.lease.deadline
            and not self.closing
        ):
            log.info("the lease held in etcd: serving again (leader key revision %d)", self.held_revision)
            self._promote(self.held_revision, Cause.RESUMED)

    @property
    def role(self) -> str:
        phase = self.state.phase
        if phase is Phase.SERVING:
            return PRIMARY
        return PROMOTING if phase is Phase.PROMOTING else STANDBY

    def _may_campaign(self, topology: Topology) -> bool:
        now = self.clock.now()
        if self.closing or self.state.phase is not Phase.STANDBY or not self.directory.registered:
            return False
        if topology.leases.get(self.node_id) != self.lease.id:  # not (or no longer) registered under our lease
            return False
        if now < self._quiet_until or now >= self.lease.deadline:  # paused, or the lease may be gone
            return False
        chosen = topology.handoff == self.node_id  # a FAILOVER (an operator, or the rebalancing) chose this node
        if self.spread is not None and not chosen and not self._spread(topology, now):
            return False
        if topology.handoff and topology.handoff != self.node_id:
            # Each hand-over is known by its key's revision: a second FAILOVER to the same node gets a TTL too.
            if self._handoff_seen is None or self._handoff_seen[0] != topology.handoff_revision:
                self._handoff_seen = (topology.handoff_revision, now)
            if now < self._handoff_seen[1] + self.ttl:  # leave the chosen node time to take over
                self.clock.call_later(self.ttl / 2, self.wake)
                return False
        return True

    def _spread(self, topology: Topology, now: float) -> bool:
        """Several groups (``march.cluster.balance``): campaign only while this node leads fewer than
        its fair share, ceil(N/M) of N groups over M live nodes (anyone, once the group has had no
        leader for a TTL), and leave the nodes that lead fewer a head start (``campaign_delay``), so
        the fewest-holding node wins a leaderless group."""
        spread = self.spread
        assert spread is not None
        held = spread.held()
        if self._leaderless_since is None:
            self._leaderless_since = now
        since = self._leaderless_since
        if not balance.may_campaign(held, spread.groups, len(topology.staying()), now - since, self.ttl):
            self._wake_at(since + self.ttl)  # anyone may, after a TTL
            return False
        ready = since + balance.campaign_delay(held, self.ttl)
        if now < ready:
            self._wake_at(ready)
            return False
        return True

    def _wake_at(self, when: float) -> None:
        """Wake the loop at ``when`` (clock time), unless a wake-up at or before it is already due:
        every pass asks again, and one timer per pass would multiply the passes."""
        now = self.clock.now()
        if now < self._wake_due <= when:
            return
        self._wake_due = when
        self.clock.call_later(when - now, self.wake)

    async def _campaign(self) -> None:
        leader, record, cluster = self.leader, self.keys.node(self.node_id), self.keys.cluster
        lease = self.lease.id
        reply = await self.etcd.txn(
            [
                created_at(leader, 0),
                lease_is(record, lease),
                value_is(cluster, self.identity.id.encode()),
                *self.compares(),
            ],
            [Put(leader, self.node_id.encode(), lease)],
            [Get(record), Get(cluster)],
            self.ttl / 3,
        )
        if not reply.succeeded:
            mine, ours = (r.kvs[0] if r is not None and r.kvs else None for r in reply.ranges)
            if ours is None or ours.value != self.identity.id.encode():
                raise IdentityConflict(
                    f"etcd prefix {self.identity.prefix} no longer holds cluster {self.identity.id} "
                    f"({'none' if ours is None else ours.value.decode(errors='replace')} now): etcd lost its data "
                    "or was restored or rewritten under this cluster; electing a primary now could hand out IDs "
                    "again. Restore etcd, or start the nodes with --join-other-cluster yes to begin anew"
                )
            if mine is None or mine.lease != lease:
                self.directory.record_lost()
                self.wake()
            return  # someone else was faster; the watch tells us who
        self.held_revision = reply.revision
        log.info("won the election (leader key revision %d)", reply.revision)
        self._promote(reply.revision, Cause.ELECTED)

    def _promote(self, revision: int, cause: Cause) -> None:
        """A new term under the leader key created at ``revision``: serve at once (nothing to load)."""
        self.state.promote(Guard(self.node_id.encode(), revision, self.leader), cause)
        if not self.clock.now() < self.lease.deadline:
            self.state.step_down(Cause.FAILED, "the lease deadline passed during the election")
            self._resign = True
            self.wake()
            return
        self.state.serve(Cause.READY)

    async def resign(self, timeout: float) -> None:
        """Delete the leader key if it is still the one this node created."""
        revision = self.held_revision
        if not revision:
            return
        leader = self.leader
        await self.etcd.txn(
            [value_is(leader, self.node_id.encode()), created_at(leader, revision)], [Delete(leader)], [], timeout
        )
        if self.held_revision == revision:
            self._given_back = revision
            self.held_revision = 0

    def handed_over(self) -> None:
        """A FAILOVER deleted the leader key in its hand-over transaction."""
        self._given_back = self.held_revision
        self.held_revision = 0


class ElectionLoop:
    """The node's control loop: one pass wakes every group's election after steps 0-2 done once for
    the node (the cluster id, the layout, the lease, the registration, one read of the topology).

    The pass then runs each group's ``step_group`` in turn and rewrites the node record if the
    groups it leads changed. One loop per node, whatever the number of groups: one read per pass,
    not one per group."""

    def __init__(
        self,
        elections: Sequence[Election],
        lease: LeaseKeeper,
        directory: Directory,
        identity: ClusterIdentity,
        clock: Clock,
        wake: asyncio.Event,
        confirm_layout: Callable[[], Awaitable[None]] | None = None,
        after_pass: Callable[[list[Topology]], None] | None = None,
        check_layout: Callable[[KV | None], None] | None = None,
    ) -> None:
        self._check_layout = check_layout  # raises IdentityConflict once the layout record changed
        self.elections = list(elections)
        self._after_pass = after_pass  # the member's rebalancing, from each pass's views
        self.lease = lease
        self.directory = directory
        self.identity = identity
        self.clock = clock
        self.ttl = lease.ttl
        self._wake = wake
        self._confirm_layout = confirm_layout  # until the layout in etcd is confirmed (then None)
        self.closing = False
        self.takeover = -1  # CLUSTER FAILOVER: the group this node asks for in its record (-1: none)
        self.leaving = False  # an orderly stop hands this node's groups over (``ClusterMember.hand_over``)

    def wake(self) -> None:
        self._wake.set()

    def describe(self) -> tuple[str, tuple[int, ...], int]:
        """This node's role (primary if it leads any group), the groups it leads and the group it asks
        for (CLUSTER FAILOVER), for its record."""
        roles = {e.role for e in self.elections}
        role = PRIMARY if PRIMARY in roles else PROMOTING if PROMOTING in roles else STANDBY
        if self.leaving:
            role = LEAVING
        return role, tuple(g for g, e in enumerate(self.elections) if e.state.leading), self.takeover

    async def run(self) -> None:
        while not self.closing:
            self._wake.clear()
            try:
                await self.step()
                pause = self.ttl / 2
            except IdentityConflict:
                raise  # this node must not take part: the member stops it
            except StoreError as exc:
                log.warning("etcd: %s", exc)
                pause = self.ttl / 3
            except Exception:
                log.exception("election loop error; backing off for %ds", 2 * self.ttl)
                for election in self.elections:
                    election._quiet_until = self.clock.now() + 2 * self.ttl
                pause = 2 * self.ttl
            await wait_event(self.clock, self._wake, pause)

    async def step(self) -> None:
        if self._confirm_layout is not None:  # first: a fresh prefix gets its layout before its cluster id
            await self._confirm_layout()
            self._confirm_layout = None
        if not self.identity.id:
            await self.identity.confirm()
        await self.lease.ensure()
        if not await self.directory.register(self.lease.id, *self.describe()):
            self.clock.call_later(self.ttl / 4, self.wake)  # another lease holds this id: look again soon
            return
        views = await self.directory.read_all()
        if self._check_layout is not None:
            self._check_layout(self.directory.layout_record)
        if views[0].leases.get(self.directory.me.id) != self.lease.id:
            self.directory.record_lost()  # re-created by the register call at the end of this pass
        for election, topology in zip(self.elections, views, strict=True):
            if self.closing:
                return
            await election.step_group(topology)
        await self.directory.register(self.lease.id, *self.describe())
        if self._after_pass is not None:
            self._after_pass(views)
