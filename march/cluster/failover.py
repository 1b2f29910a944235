"""Planned switchover: ``FAILOVER [TO host port] [TIMEOUT ms]`` and ``FAILOVER ABORT``.

On the primary, a hand-over:

1. puts the serving state on hold (``STEPPING_DOWN``): no more IDs; new key requests wait;
2. waits (at most ``store_timeout``) for the keyspace's store writes in flight;
3. unless aborted meanwhile (then it serves again, same term), deletes the leader key and names the
   chosen standby in ``<prefix>/leader-handoff`` in one guarded transaction (other standbys leave
   the chosen one a TTL to take over);
4. waits (at most TIMEOUT) until the chosen node holds the leader key, then steps down: the held
   requests get ``MOVED`` to the new primary, so cluster clients see no error, only a short delay.

The hand-over's own state is a small dataclass (``Handover``), not a dict. The election keeps out
of the serving state while it is ``STEPPING_DOWN``. The clock is injected (``march.clock``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .. import errors
from ..clock import Clock
from ..errors import CommandError
from ..etcd.api import Delete, Etcd, Put, created_at, value_is
from ..etcd.keys import KeyPaths
from ..keyspace import Keyspace
from ..serving import Cause, Phase, ServingState
from ..store.base import StoreError
from .election import Election
from .lease import Lease
from .registry import NodeInfo, Registry

log = logging.getLogger("march.cluster")

_POLL = 0.005  # seconds between topology reads while the chosen node takes over


@dataclass
class Handover:
    target: NodeInfo
    aborted: bool = False


class Failover:
    def __init__(
        self,
        etcd: Etcd,
        keys: KeyPaths,
        state: ServingState,
        keyspace: Keyspace,
        lease: Lease,
        registry: Registry,
        election: Election,
        clock: Clock,
        store_timeout: float,
    ) -> None:
        self.etcd = etcd
        self.keys = keys
        self.state = state
        self.keyspace = keyspace
        self.lease = lease
        self.registry = registry
        self.election = election
        self.clock = clock
        self.store_timeout = store_timeout
        self.active: Handover | None = None

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
        topology = await self.registry.read()
        standbys = [n for n in topology.standbys() if n.id != self.registry.me.id]
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
        handover = self.active = Handover(chosen)
        log.info("FAILOVER to %s (%s): holding requests", chosen.id, chosen.addr)
        try:
            await self._hand_over(handover, timeout)
        finally:
            self.active = None
            if self.state.in_transition:  # not handed over, not serving again: the term is over
                state.step_down(Cause.HANDED_OVER, "FAILOVER did not complete")
            self.election.wake()
            try:
                await self.etcd.delete(self.keys.handoff, self.lease.ttl / 3)
            except StoreError as exc:
                log.warning("could not delete the hand-off key (it goes with the lease): %s", exc)

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
        leader = self.keys.leader
        guard = term.guard
        reply = await self.etcd.txn(
            [value_is(leader, guard.owner), created_at(leader, guard.revision)],
            [Delete(leader), Put(self.keys.handoff, chosen.id.encode(), self.lease.id)],
            [],
            self.store_timeout,
        )
        if not reply.succeeded:
            state.step_down(Cause.SUPERSEDED, "FAILOVER found the leader key gone")
            raise CommandError(errors.FAILOVER_LOST_LEADERSHIP)
        self.election.handed_over()
        end = self.clock.now() + timeout
        while self.registry.topology.leader != chosen.id:
            if self.clock.now() >= end:
                raise CommandError(errors.FAILOVER_TIMEOUT.format(chosen.addr))
            await self.clock.sleep(_POLL)
            try:
                await self.registry.read()
            except StoreError as exc:
                log.debug("reading the topology during FAILOVER: %s", exc)
        state.step_down(Cause.HANDED_OVER, f"to {chosen.id}")
        log.info("FAILOVER done: %s is the primary", chosen.id)
