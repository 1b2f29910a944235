"""This node's membership in a cluster: one group's lease, election, directory and failover, wired
together, and the background loops that run them.

Each part keeps its own logic (``lease``, ``election``, ``directory``, ``failover``, ``identity``); this
module only connects them to each other and to the group's serving state:

- lease renewed -> ``ServingState.renewed(deadline)`` (and the election, which may resume);
- lease gone in etcd -> ``ServingState.lease_gone()`` and a new registration;
- serving-state changes -> the election (resign after a refused write) and the directory;
- the directory's watch -> the election.

The lease runs on an etcd client of its own; the election, the directory and FAILOVER share the
control client; the store has the data client (``march.node`` makes all three), so no data call can
cut a keep-alive short. Every loop runs under ``_supervised``: whatever ends it early is logged and
it restarts (after 2 x TTL if it failed), except an ``IdentityConflict`` (this node's id is held by
another live process, or it belongs to another cluster): that is handed to ``on_fatal`` once, and
the node stops (``march.node``). ``stop`` steps down, gives the leader key back at once and revokes
the lease, so a standby takes over without waiting for the TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from ..clock import Clock
from ..etcd.api import Etcd
from ..etcd.keys import KeyPaths
from ..keyspace import Keyspace
from ..serving import Cause, ServingState
from ..store.base import IdentityConflict
from .directory import Directory, NodeInfo
from .election import Election
from .failover import Failover
from .identity import ClusterIdentity
from .lease import LeaseKeeper

log = logging.getLogger("march.cluster")


class ClusterMember:
    def __init__(
        self,
        *,
        lease_etcd: Etcd,
        control_etcd: Etcd,
        keys: KeyPaths,
        state: ServingState,
        keyspace: Keyspace,
        me: NodeInfo,
        identity: ClusterIdentity,
        ttl: int,
        clock: Clock,
        store_timeout: float,
        on_fatal: Callable[[IdentityConflict], None] = lambda _: None,
    ) -> None:
        self.state = state
        self.keyspace = keyspace
        self.clock = clock
        self.ttl = ttl
        self.identity = identity
        self.on_fatal = on_fatal
        self.lease = LeaseKeeper(lease_etcd, ttl, clock)
        self.directory = Directory(control_etcd, keys, me, clock, timeout=ttl / 3, lease_ttl=ttl)
        self.election = Election(control_etcd, keys, state, self.lease, self.directory, identity, clock)
        self.failover = Failover(
            control_etcd, keys, state, keyspace, self.lease, self.directory, self.election, clock, store_timeout
        )
        self.lease.on_renewed(state.renewed)
        self.lease.on_gone(self._lease_gone)
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False

    @property
    def me(self) -> NodeInfo:
        return self.directory.me

    def _lease_gone(self) -> None:
        self.state.lease_gone()
        self.directory.lease_gone()
        self.election.held_revision = 0  # the leader key, if ours, went with the lease

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._supervised("election", self.election.run), name="march-election"),
            loop.create_task(self._supervised("keep-alive", self.lease.run), name="march-keepalive"),
            loop.create_task(self._supervised("watch", self.directory.watch), name="march-watch"),
        ]
        log.info("node %s (%s) joining the cluster", self.me.id, self.me.addr)

    async def _supervised(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        """Run a background loop for the node's life: whatever ends it early is logged, and it restarts."""
        while not self._closing:
            try:
                await run()
            except IdentityConflict as exc:
                log.error("%s", exc)
                self.state.step_down(Cause.SHUTDOWN, "this node may not take part in the cluster")
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

    async def stop(self, timeout: float) -> None:
        """Leave: step down, give the leader key back at once, revoke the lease (drops the registration)."""
        self._closing = True
        self.election.closing = True
        self.state.step_down(Cause.SHUTDOWN)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            if self.election.held_revision:
                await self.keyspace.drain(timeout)
                await self.election.resign(timeout)
        with contextlib.suppress(Exception):
            await self.lease.revoke(timeout)
