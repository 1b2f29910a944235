"""Planned switchover of one leadership group: ``FAILOVER [GROUP g] [TO host port] [TIMEOUT ms]``
and ``FAILOVER ABORT``. Each group has its own ``Failover`` on its own leader and hand-off keys
(``Election.leader``, ``Election.handoff``); several run at once when a node hands every group over.

On the primary, a hand-over:

1. puts the serving state on hold (``STEPPING_DOWN``): no more IDs; new key requests wait;
2. waits (at most ``store_timeout``) for the keyspace's store writes in flight;
3. unless aborted meanwhile (then it serves again, same term), deletes the leader key and names the
   chosen standby in ``<prefix>/leader-handoff`` in one guarded transaction (other standbys leave
   the chosen one a TTL to take over);
4. waits until the chosen node holds the leader key, then steps down: the held requests get
   ``MOVED`` to the new primary, so cluster clients see no error, only a short delay.

The wait (woken by the directory's watch, and a topology read at least every ``_POLL``) ends as
soon as its outcome is known, never later than TIMEOUT (at most ``MAX_TIMEOUT``):

- the chosen node holds the leader key: ``OK``;
- another node holds it (the others campaign once the chosen one had a TTL and did not take
  over): step down at once, the held requests get ``MOVED`` to that node, and FAILOVER answers
  ``FAILOVER_OTHER_PRIMARY``;
- the chosen node stopped answering: its registration is gone or under another lease (its lease
  ended: a paused, dead or cut-off node keeps it at most a TTL). Step down at once, so this node
  campaigns like any other (the held requests get ``CLUSTERDOWN`` until someone leads), and
  FAILOVER answers ``FAILOVER_TARGET_GONE``;
- this node's own term ended meanwhile (its lease deadline passed): ``FAILOVER_LOST_LEADERSHIP``;
- TIMEOUT: step down (the key is handed away already), ``FAILOVER_TIMEOUT``.

At the end the hand-off key is deleted only if it is still this hand-over's (a guarded delete:
value and lease), never a later FAILOVER's written by the new primary.

The hand-over's own state is a small dataclass (``Handover``), not a dict. The election keeps out
of the serving state while it is ``STEPPING_DOWN``. The clock is injected (``march.clock``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from march import errors
from march.clock import Clock, wait_event
from march.cluster.directory import Directory, GroupDirectory, NodeInfo, Topology
from march.cluster.election import Election
from march.cluster.lease import LeaseKeeper
from march.errors import CommandError, StoreError
from march.etcd.api import Delete, Etcd, Put, created_at, lease_is, value_is
from march.etcd.keypath import KeyPaths
from march.keyspace.keyspace import Keyspace
from march.keyspace.serving import Cause, Phase, ServingState, Term

log = logging.getLogger("march.cluster")

# Seconds between topology reads while the chosen node takes over; the directory's watch wakes the
# wait at once on every change, so this only matters while the watch is down.
_POLL = 0.05
# The longest FAILOVER TIMEOUT (ms): a live target takes over within milliseconds, and a dead one
# loses its registration within its lease TTL (at most 60 s): waiting longer could only hold the
# requests of a cluster that elects its primary by itself anyway.
MAX_TIMEOUT_MS = 60_000


@dataclass
class Handover:
    target: NodeInfo
    target_lease: int  # the lease the target's registration was under when it was chosen
    aborted: bool = False


class Failover:
    def __init__(
        self,
        etcd: Etcd,
        keys: KeyPaths,
        state: ServingState,
        keyspace: Keyspace,
        lease: LeaseKeeper,
        directory: Directory | GroupDirectory,
        election: Election,
        clock: Clock,
        store_timeout: float,
    ) -> None:
        self.etcd = etcd
        self.keys = keys
        self.state = state
        self.keyspace = keyspace
        self.lease = lease
        self.directory = directory
        self.election = election
        self.clock = clock
        self.store_timeout = store_timeout
        self.active: Handover | None = None
        self._changed = asyncio.Event()  # the directory saw a change of the topology keys
        directory.on_change(self._changed.set)

    def abort(self) -> None:
        if self.active is None:
            raise CommandError(errors.FAILOVER_NONE)
        self.active.aborted = True

    async def run(self, target: str | None, timeout: float) -> None:
        """Hand leadership to ``target`` (host:port) or the first standby; CommandError if not possible."""
        state = self.state
        if state.term is None:
            raise CommandError(errors.FAILOVER_NOT_PRIMARY)
        if self.active is not None or state.phase is not Phase.SERVING:  # one change at a time
            raise CommandError(errors.FAILOVER_IN_PROGRESS)
        topology = await self.directory.read()
        standbys = [n for n in topology.standbys() if n.id != self.directory.me.id]
        if target is not None:
            chosen = next((n for n in standbys if n.addr == target), None)
            if chosen is None:
                raise CommandError(errors.FAILOVER_TARGET_UNKNOWN)
        elif standbys:
            chosen = standbys[0]
        else:
            raise CommandError(errors.FAILOVER_NO_STANDBY)
        if self.active is not None or state.phase is not Phase.SERVING:  # changed while reading
            raise CommandError(errors.FAILOVER_IN_PROGRESS)
        handover = self.active = Handover(chosen, topology.leases.get(chosen.id, 0))
        log.info("FAILOVER to %s (%s): holding requests", chosen.id, chosen.addr)
        try:
            await self._hand_over(handover, timeout)
        finally:
            self.active = None
            if self.state.in_transition:  # not handed over, not serving again: the term is over
                state.step_down(Cause.HANDED_OVER, "FAILOVER did not complete")
            self.election.wake()
            try:
                await self._clear_handoff(chosen)
            except StoreError as exc:
                log.warning("could not delete the hand-off key (it goes with the lease): %s", exc)

    async def _clear_handoff(self, chosen: NodeInfo) -> None:
        """Delete the hand-off key if it is still this hand-over's (it names ``chosen``, under this
        node's lease): a FAILOVER the new primary started meanwhile keeps its own."""
        handoff = self.election.handoff
        await self.etcd.txn(
            [value_is(handoff, chosen.id.encode()), lease_is(handoff, self.lease.id)],
            [Delete(handoff)],
            [],
            self.lease.ttl / 3,
        )

    async def _hand_over(self, handover: Handover, timeout: float) -> None:
        state = self.state
        term = state.term
        assert term is not None
        chosen = handover.target
        state.hold(Cause.HANDING_OVER)
        await self.keyspace.drain(self.store_timeout)
        if handover.aborted:
            if state.term is term and state.phase is Phase.STEPPING_DOWN:
                state.serve(Cause.ABORTED)  # still ours: serve again
            raise CommandError(errors.FAILOVER_ABORTED)
        leader = self.election.leader
        guard = term.guard
        reply = await self.etcd.txn(
            [value_is(leader, guard.owner), created_at(leader, guard.revision)],
            [Delete(leader), Put(self.election.handoff, chosen.id.encode(), self.lease.id)],
            [],
            self.store_timeout,
        )
        if not reply.succeeded:
            state.step_down(Cause.SUPERSEDED, "FAILOVER found the leader key gone")
            raise CommandError(errors.FAILOVER_LOST_LEADERSHIP)
        self.election.handed_over()
        handed_at = self.clock.now()
        end = handed_at + timeout
        while True:
            topology = await self._read()  # None: etcd did not answer, nothing new to judge by
            if topology is not None and self._taken_over(topology, handover, term, handed_at):
                break
            remaining = end - self.clock.now()
            if remaining <= 0:
                raise CommandError(errors.FAILOVER_TIMEOUT.format(chosen.addr))
            await wait_event(self.clock, self._changed, min(_POLL, remaining))
        state.step_down(Cause.HANDED_OVER, f"to {chosen.id}")
        log.info("FAILOVER done: %s is the primary", chosen.id)

    def _taken_over(self, topology: Topology, handover: Handover, term: Term, handed_at: float) -> bool:
        """True once the chosen node took over; False while it still may; else the hand-over is over
        without it: step down (a stepped-down node campaigns like any other) and raise the reply."""
        state, chosen = self.state, handover.target
        if topology.leader == chosen.id:
            return True
        if state.term is not term or self.clock.now() >= state.deadline:  # ended meanwhile, or its deadline passed
            raise CommandError(errors.FAILOVER_LOST_LEADERSHIP)
        if self._handed_on(topology, handover, handed_at):
            log.info("FAILOVER: %s took over and has handed over again since", chosen.id)
            return True
        if topology.leader is not None and topology.leader != self.directory.me.id:
            other = topology.primary.addr if topology.primary is not None else topology.leader
            state.step_down(Cause.SUPERSEDED, f"FAILOVER: {topology.leader} took over instead of {chosen.id}")
            log.warning("FAILOVER to %s (%s): %s took over instead", chosen.id, chosen.addr, topology.leader)
            raise CommandError(errors.FAILOVER_OTHER_PRIMARY.format(chosen.addr, other))
        if topology.leases.get(chosen.id) != handover.target_lease:
            state.step_down(Cause.HANDED_OVER, f"FAILOVER: {chosen.id} stopped answering")
            log.warning("FAILOVER to %s (%s): its lease ended before it took over", chosen.id, chosen.addr)
            raise CommandError(errors.FAILOVER_TARGET_GONE.format(chosen.addr))
        return False

    def _handed_on(self, topology: Topology, handover: Handover, handed_at: float) -> bool:
        """The chosen node led, and has started a hand-over of its own since (so quickly that no read
        here saw it lead): the hand-off key this node wrote (under its lease, which lives) is gone or
        rewritten, which only a primary after this one can do, and within a TTL only the chosen node
        may have become primary (the others leave it that long)."""
        ours = topology.handoff == handover.target.id and topology.handoff_lease == self.lease.id
        return not ours and self.clock.now() < handed_at + self.lease.ttl

    async def _read(self) -> Topology | None:
        """The topology as etcd has it now (None if etcd does not answer)."""
        self._changed.clear()
        try:
            return await self.directory.read()
        except StoreError as exc:
            log.debug("reading the topology during FAILOVER: %s", exc)
            return None
