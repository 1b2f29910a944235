"""One node of a March cluster: lease, election, node registry, topology and planned failover.

``ClusterNode`` is the ``Lease`` the generators see (``guard``, ``valid()``, ``lost()``) and the
source of the topology that standbys redirect with.

- **Lease.** One etcd lease per node, kept alive every TTL/3. The local deadline is the moment the
  keep-alive (or grant) request was *sent* plus the TTL minus a safety margin; ``valid()`` is true
  only while this node holds the leader key and that deadline is in the future, and the fast path
  of every generator checks it before handing out an ID. A timer steps down at the deadline.
- **Election.** A control loop (woken by a watch on the leader and node keys, and at least every
  TTL/2) reads the topology linearizably and campaigns when no leader exists: one transaction
  creates ``<prefix>/leader`` with this node's id under its lease if the key is absent. The create
  revision of that key plus the id form the ``Guard`` every ceiling write carries.
- **Promotion.** Requests for keys wait (bounded) while the keyspace loads every ceiling
  linearizably; each generator persists a new ceiling before its first ID. Then this node serves.
- **Demotion** (lease deadline, lease gone, a refused guarded write, another leader seen): the
  keyspace stops at once (every generator is killed, requests in flight get a retry or a redirect,
  never an ID); a refused guarded write also resigns the leader key and pauses campaigning.
- **Registry.** ``<prefix>/nodes/<id>`` holds each node's id, advertised address and role, under
  its lease, so a dead node disappears with its lease. The primary is the node the leader key
  names; ``CLUSTER SLOTS`` and ``MOVED`` use its registered address.
- **FAILOVER.** The primary holds new key requests, stops its generators and waits for their
  writes, then in one guarded transaction deletes the leader key and names the chosen standby in
  ``<prefix>/leader-handoff`` (other standbys leave it a TTL to take over). Once the new primary
  holds the leader key, the held requests are answered with ``MOVED`` to it.
- After an unexpected error the control loop backs off 2 x TTL; while etcd is unreachable it
  retries every TTL/3.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import errors
from ..config import Config
from ..errors import CommandError
from ..store.base import Guard, StoreError
from ..store.etcd import EtcdClient, created_at, delete_op, guard_compares, put_op
from .slots import key_slot

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("march.cluster")
_monotonic = time.monotonic

PRIMARY = "primary"
STANDBY = "standby"
PROMOTING = "promoting"


@dataclass(frozen=True)
class NodeInfo:
    id: str
    addr: str  # host:port that clients are sent to
    role: str = STANDBY

    @property
    def host(self) -> str:
        return self.addr.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.addr.rpartition(":")[2])

    @property
    def cluster_id(self) -> str:
        """The 40-hex-digit id Redis Cluster clients expect (sha1 of the node id)."""
        return hashlib.sha1(self.id.encode()).hexdigest()


@dataclass(frozen=True)
class Topology:
    leader: str | None = None  # id of the node holding the leader key
    leader_revision: int = 0  # create revision of the leader key
    leader_lease: int = 0  # the lease the leader key is attached to
    handoff: str | None = None  # FAILOVER target named by the old primary
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    revision: int = 0

    @property
    def primary(self) -> NodeInfo | None:
        return self.nodes.get(self.leader) if self.leader is not None else None

    def standbys(self) -> list[NodeInfo]:
        return sorted((n for n in self.nodes.values() if n.id != self.leader), key=lambda n: n.id)


class ClusterNode:
    def __init__(self, config: Config, client: EtcdClient) -> None:
        self.config = config
        self.client = client
        self.node_id = ""  # set by start() once the listening port is known
        self.addr = ""
        self.ttl = config.lease_ttl
        self.margin = max(0.2, self.ttl / 6)  # the local deadline ends this much before etcd's
        prefix = config.etcd_prefix.encode()
        self.leader_key = prefix + b"/leader"
        self.handoff_key = prefix + b"/leader-handoff"
        self.nodes_prefix = prefix + b"/nodes/"
        self._watch_end = prefix + b"/nodes0"  # [leader, nodes0) covers leader, handoff and nodes/*
        self.topology = Topology()
        self.role = STANDBY
        self.transition: asyncio.Future[None] | None = None  # key requests wait while it is pending
        self.app: App | None = None
        self.promotions = 0
        self.demotions = 0
        self.last_change = ""
        self._lease = 0
        self._deadline = 0.0
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._leading = False
        self._guard = Guard(b"\0", -1)  # matches no leader key
        self._held_revision = 0  # create revision of the leader key this node made last
        self._registered = False
        self._announced = ""  # the role last written to the registry
        self._resign = False  # a guarded write was refused: give the leader key back
        self._quiet_until = 0.0  # no campaign before this (after a refused write or an error)
        self._handoff_seen: tuple[str, float] | None = None
        self._failover: dict[str, Any] | None = None
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False

    def attach(self, app: App) -> None:
        self.app = app

    @property
    def _app(self) -> App:
        assert self.app is not None
        return self.app

    # --- the Lease protocol (read by generators on every hand-out) ----------------------------

    @property
    def guard(self) -> Guard:
        return self._guard

    def valid(self) -> bool:
        return self._leading and _monotonic() < self._deadline

    def lost(self, reason: str) -> None:
        """A guarded write was refused: step down now, give the leader key back, pause campaigning."""
        log.error("a guarded write was refused (%s): stepping down", reason)
        self._step_down(f"guarded write refused: {reason}")
        self._resign = True
        self._quiet_until = _monotonic() + 2 * self.ttl
        self._changed.set()

    @property
    def leading(self) -> bool:
        return self._leading

    @property
    def lease_remaining(self) -> float:
        return max(0.0, self._deadline - _monotonic())

    # --- life ----------------------------------------------------------------------------------

    async def start(self, port: int) -> None:
        """Begin: lease, registration and election run in the background from now on."""
        cfg = self.config
        host = cfg.bind if cfg.bind not in ("0.0.0.0", "::", "") else "127.0.0.1"
        self.addr = cfg.advertise or f"{host}:{port}"
        self.node_id = cfg.node_id or self.addr
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._supervised("election", self._control_loop), name="march-election"),
            loop.create_task(self._supervised("keep-alive", self._keepalive_loop), name="march-keepalive"),
            loop.create_task(self._supervised("watch", self._watch_loop), name="march-watch"),
        ]
        log.info("node %s (%s) joining cluster %s at %s", self.node_id, self.addr, cfg.etcd_prefix, cfg.etcd)

    async def _supervised(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        """Run a background loop for the node's life: whatever ends it early is logged, and it restarts."""
        while not self._closing:
            try:
                await run()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if self._closing or (task is not None and task.cancelling()):
                    raise
                log.error("the %s loop was cancelled from below; restarting it", name)
            except Exception:
                log.exception("the %s loop failed; restarting it in %ds", name, 2 * self.ttl)
                self._quiet_until = _monotonic() + 2 * self.ttl
                await asyncio.sleep(2 * self.ttl)

    async def stop(self) -> None:
        """Leave: step down, give the leader key back at once, revoke the lease (drops the registration)."""
        self._closing = True
        leading = self._leading
        self._step_down("shutting down")
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        timeout = min(2.0, self.config.store_timeout)
        with contextlib.suppress(Exception):
            if leading or self._held_revision:
                await self._app.keyspace.drain()
                await self._give_back_leader_key(timeout)
        with contextlib.suppress(Exception):
            if self._lease:
                await self.client.revoke(self._lease, timeout)
        await self.client.close()

    # --- the lease -----------------------------------------------------------------------------

    def _set_deadline(self, sent: float, granted: int) -> None:
        deadline = sent + min(self.ttl, granted) - self.margin
        if deadline <= self._deadline:
            return
        self._deadline = deadline
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        self._deadline_timer = asyncio.get_running_loop().call_later(
            max(0.0, deadline - _monotonic()), self._check_deadline
        )

    def _check_deadline(self) -> None:
        if not self._leading:
            return
        early = self._deadline - _monotonic()
        if early > 0:  # the loop's timers may fire a little early: look again at the deadline
            self._deadline_timer = asyncio.get_running_loop().call_later(early + 0.001, self._check_deadline)
            return
        log.warning("lease deadline passed without a keep-alive reply: stepping down")
        self._step_down("lease deadline passed")
        self._changed.set()

    async def _new_lease(self) -> None:
        sent = _monotonic()
        lease, granted = await self.client.grant(self.ttl, self.ttl)
        self._lease = lease
        self._deadline = 0.0
        self._set_deadline(sent, granted)
        self._registered = False
        log.info("lease %x granted (ttl %ds)", lease, granted)

    def _lease_gone(self) -> None:
        log.warning("lease %x is gone in etcd: stepping down, a new lease follows", self._lease)
        self._step_down("lease expired in etcd")
        self._lease = 0
        self._registered = False
        self._changed.set()

    async def _keepalive_loop(self) -> None:
        period = self.ttl / 3
        failures = 0
        while not self._closing:
            lease = self._lease
            sent = _monotonic()
            if lease:
                try:
                    remaining = await self.client.keep_alive(lease, timeout=period)
                except StoreError as exc:
                    failures += 1
                    if failures == 1 or failures % 10 == 0:
                        log.warning("keep-alive failed (%d in a row): %s", failures, exc)
                else:
                    failures = 0
                    if lease == self._lease:
                        if remaining <= 0:
                            self._lease_gone()
                        else:
                            self._set_deadline(sent, remaining)
            await asyncio.sleep(max(0.0, sent + period - _monotonic()))

    # --- watching ------------------------------------------------------------------------------

    async def _watch_loop(self) -> None:
        while not self._closing:
            try:
                async for _ in self.client.watch(self.leader_key, self._watch_end):
                    self._changed.set()
            except StoreError as exc:
                log.debug("watch broke: %s", exc)
            except Exception:
                log.exception("watch failed")
            self._changed.set()  # something may have changed while the watch was down
            await asyncio.sleep(self.ttl / 3)

    async def read_topology(self) -> Topology:
        kvs, revision = await self.client.get_range(self.leader_key, self._watch_end, self.ttl / 3)
        leader: str | None = None
        leader_revision = leader_lease = 0
        handoff: str | None = None
        nodes: dict[str, NodeInfo] = {}
        for kv in kvs:
            if kv.key == self.leader_key:
                leader, leader_revision, leader_lease = kv.value.decode(), kv.create_revision, kv.lease
            elif kv.key == self.handoff_key:
                handoff = kv.value.decode()
            elif kv.key.startswith(self.nodes_prefix):
                try:
                    data = json.loads(kv.value)
                    nodes[data["id"]] = NodeInfo(data["id"], data["addr"], data.get("role", STANDBY))
                except (ValueError, KeyError, TypeError):
                    log.warning("ignoring a malformed node record %r", kv.key)
        topology = Topology(leader, leader_revision, leader_lease, handoff, nodes, revision)
        if topology.revision >= self.topology.revision:
            self.topology = topology
        return topology

    # --- the control loop ----------------------------------------------------------------------

    async def _control_loop(self) -> None:
        while not self._closing:
            self._changed.clear()
            try:
                await self._step()
                pause = self.ttl / 2
            except StoreError as exc:
                log.warning("etcd: %s", exc)
                pause = self.ttl / 3
            except Exception:
                log.exception("election loop error; backing off for %ds", 2 * self.ttl)
                self._quiet_until = _monotonic() + 2 * self.ttl
                pause = 2 * self.ttl
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), pause)

    async def _step(self) -> None:
        if not self._lease:
            await self._new_lease()
        if not self._registered:
            await self._register()
        topology = await self.read_topology()
        me = self.node_id
        if self._leading and (topology.leader != me or topology.leader_revision != self._guard.revision):
            self._step_down("another node holds the leader key")
        if topology.leader == me and topology.leader_lease == self._lease and not self._held_revision:
            # A campaign of this process won although its reply was lost (a timeout): the key is ours.
            self._held_revision = topology.leader_revision
        if self._resign:
            await self._give_back_leader_key(self.ttl / 3)
            self._resign = False  # only once it is done: a failed attempt is tried again
            return
        if topology.leader is None and self._may_campaign(topology):
            await self._campaign()
        elif (
            topology.leader == me
            and topology.leader_revision == self._held_revision
            and not self._leading
            and self._failover is None
            and _monotonic() < self._deadline
        ):
            # This node stepped down when its lease deadline passed (keep-alives were late, e.g.
            # while etcd elected a new leader), but etcd kept the lease and the leader key: the
            # same term goes on. Serving again reloads every ceiling and extends it first.
            log.info("the lease held in etcd: serving again (leader key revision %d)", self._held_revision)
            await self._promote(self._held_revision)
        await self._announce()

    def _may_campaign(self, topology: Topology) -> bool:
        now = _monotonic()
        if self._closing or self._failover is not None or not self._registered or now < self._quiet_until:
            return False
        if now >= self._deadline:
            return False  # the lease may be gone: a new one comes first
        if topology.handoff and topology.handoff != self.node_id:
            if self._handoff_seen is None or self._handoff_seen[0] != topology.handoff:
                self._handoff_seen = (topology.handoff, now)
            if now < self._handoff_seen[1] + self.ttl:  # leave the chosen node time to take over
                asyncio.get_running_loop().call_later(self.ttl / 2, self._changed.set)
                return False
        return True

    async def _register(self) -> None:
        """(Re)write this node's record under the current lease (one id per process: configuration)."""
        await self.client.put(
            self.nodes_prefix + self.node_id.encode(), self._record(self.role), self._lease, self.ttl / 3
        )
        self._registered = True
        self._announced = self.role

    def _record(self, role: str) -> bytes:
        return json.dumps({"id": self.node_id, "addr": self.addr, "role": role, "pid": os.getpid()}).encode()

    async def _announce(self) -> None:
        if self._announced != self.role and self._lease:
            role = self.role
            await self.client.put(self.nodes_prefix + self.node_id.encode(), self._record(role), self._lease)
            self._announced = role

    async def _campaign(self) -> None:
        reply = await self.client.txn(
            [created_at(self.leader_key, 0)],
            [put_op(self.leader_key, self.node_id.encode(), self._lease)],
            [],
            self.ttl / 3,
        )
        if not reply.succeeded:
            return  # someone else was faster; the watch tells us who
        revision = int(reply.header.revision)
        self._held_revision = revision
        log.info("won the election (leader key revision %d)", revision)
        await self._promote(revision)

    async def _promote(self, revision: int) -> None:
        app = self._app
        self._guard = Guard(self.node_id.encode(), revision)
        self.role = PROMOTING
        self._begin_transition()
        try:
            self._leading = True
            if not self.valid():
                raise StoreError("lease deadline passed during the election")
            await app.keyspace.start_serving()  # linearizable load of every ceiling
            if not self.valid():
                raise StoreError("lease deadline passed while loading")
            for gen in app.keyspace.generators.values():
                gen.prime()  # persist new ceilings at once; each key serves once its write lands
            app.set_serving(True)
            self.role = PRIMARY
            self.promotions += 1
            self.last_change = f"promoted at {time.strftime('%Y-%m-%dT%H:%M:%S')}"
            log.info("primary now: serving %d sequences", len(app.keyspace.generators))
        except BaseException:
            self._step_down("promotion failed")
            self._resign = True
            self._changed.set()
            raise
        finally:
            self._end_transition()
        with contextlib.suppress(StoreError):
            await self._announce()

    def _step_down(self, reason: str) -> None:
        """Stop serving at once; safe to call in any state."""
        was = self._leading or self.role != STANDBY
        self._leading = False
        self._guard = Guard(b"\0", -1)
        self.role = STANDBY
        if self.topology.leader == self.node_id:
            # Whoever leads next, it is not this node: until etcd says who, the primary is unknown
            # (CLUSTERDOWN, empty CLUSTER SLOTS), so cluster clients ask the other nodes.
            self.topology = dataclasses.replace(self.topology, leader=None, leader_revision=0)
        app = self.app
        if app is not None:
            app.set_serving(False)
            if app.keyspace.serving:
                app.keyspace.stop_serving(reason)
        if was:
            self.demotions += 1
            self.last_change = f"stepped down at {time.strftime('%Y-%m-%dT%H:%M:%S')}: {reason}"
            log.warning("stepped down: %s", reason)

    async def _give_back_leader_key(self, timeout: float) -> None:
        """Delete the leader key if it is still the one this node created."""
        revision = self._held_revision
        if not revision:
            return
        guard = Guard(self.node_id.encode(), revision)
        await self.client.txn(guard_compares(self.leader_key, guard), [delete_op(self.leader_key)], [], timeout)
        if self._held_revision == revision:
            self._held_revision = 0

    # --- transitions: key requests wait instead of failing -----------------------------------

    def _begin_transition(self) -> None:
        if self.transition is None:
            self.transition = asyncio.get_running_loop().create_future()

    def _end_transition(self) -> None:
        fut, self.transition = self.transition, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    async def settle(self, timeout: float) -> None:
        """Wait (bounded) for a promotion or a failover in progress to finish."""
        fut = self.transition
        if fut is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(fut), timeout)

    def redirect(self, key: bytes) -> CommandError:
        """The error for a key request this node cannot serve: MOVED to the primary, or retry later."""
        primary = self.topology.primary
        if primary is None:
            return CommandError(errors.CLUSTERDOWN if self.topology.leader is None else errors.TRYAGAIN_NO_PRIMARY)
        if primary.id == self.node_id:
            return CommandError(errors.TRYAGAIN_TAKING_OVER)
        return CommandError(f"MOVED {key_slot(key)} {primary.addr}")

    # --- planned failover ----------------------------------------------------------------------

    async def failover(self, target: str | None, timeout: float) -> None:
        """Hand leadership to ``target`` (host:port) or the first standby; raise CommandError if not possible."""
        if not self._leading:
            raise CommandError(errors.FAILOVER_NOT_PRIMARY)
        if self._failover is not None or self.role != PRIMARY:  # one change at a time
            raise CommandError(errors.FAILOVER_IN_PROGRESS)
        topology = await self.read_topology()
        standbys = [n for n in topology.standbys() if n.id != self.node_id]
        if target is not None:
            chosen = next((n for n in standbys if n.addr == target), None)
            if chosen is None:
                raise CommandError(errors.FAILOVER_TARGET_UNKNOWN)
        elif standbys:
            chosen = standbys[0]
        else:
            raise CommandError(errors.FAILOVER_NO_STANDBY)
        state: dict[str, Any] = {"target": chosen, "aborted": False}
        self._failover = state
        self._begin_transition()
        guard = self._guard
        app = self._app
        log.info("FAILOVER to %s (%s): holding requests", chosen.id, chosen.addr)
        try:
            self._step_down(f"FAILOVER to {chosen.id}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(app.keyspace.drain(), self.config.store_timeout)
            if state["aborted"]:
                await self._promote(guard.revision)  # still ours: serve again
                raise CommandError(errors.FAILOVER_ABORTED)
            reply = await self.client.txn(
                guard_compares(self.leader_key, guard),
                [delete_op(self.leader_key), put_op(self.handoff_key, chosen.id.encode(), self._lease)],
                [],
                self.config.store_timeout,
            )
            self._held_revision = 0
            if not reply.succeeded:
                raise CommandError(errors.FAILOVER_LOST_LEADERSHIP)
            deadline = _monotonic() + timeout
            while self.topology.leader != chosen.id:
                remaining = deadline - _monotonic()
                if remaining <= 0:
                    raise CommandError(errors.FAILOVER_TIMEOUT.format(chosen.addr))
                await asyncio.sleep(min(0.005, remaining))  # polling the topology with a deadline
                with contextlib.suppress(StoreError):
                    await self.read_topology()
            log.info("FAILOVER done: %s is the primary", chosen.id)
        finally:
            self._failover = None
            self._end_transition()
            self._changed.set()
            with contextlib.suppress(Exception):
                await self.client.delete(self.handoff_key, self.ttl / 3)

    def abort_failover(self) -> None:
        if self._failover is None:
            raise CommandError(errors.FAILOVER_NONE)
        self._failover["aborted"] = True
