"""The node directory and the topology: who is in the cluster, who leads, where clients go.

- Each node writes ``<prefix>/nodes/<id>`` (JSON: id, advertised address and TLS address, the
  forwarding port's address that Sentinel replies name, the addresses other nodes link to, role,
  groups led, pid, lease TTL) under its lease, so a dead node disappears with its lease; it
  rewrites it when its role changes.
- **A node id has one holder.** The record is created only where absent and rewritten only while
  it is under this node's lease (compare in the same transaction), never overwritten blindly. A
  process that finds its id under another lease waits for that lease to end (a node restarted
  right after a crash finds its old self's lease still alive for up to a TTL); if the lease
  outlives its TTL (plus ``_HOLDER_SLACK``) it was renewed, so another live process holds the id,
  and ``register`` raises ``IdentityConflict``: the node says so and exits. Until then it is not
  registered, and an unregistered node neither reads the topology nor campaigns (the campaign
  also compares the record's lease, ``march.cluster.election``).
- **A lost record is restored.** ``read()`` sees each record's lease (``Topology.leases``); the
  election re-creates this node's record when it is gone (deleted by hand, or by an old version's
  duplicate whose lease ended) instead of trusting what it wrote last.
- ``read_all()`` is one linearizable range read of ``[groups, nodes_end)``: the layout record, every
  group's leader key (its value, create revision and lease) and FAILOVER hand-off key, and every node
  record, whatever the number of groups; one ``Topology`` per group (``read()``: the first group's).
  One watch of the same range wakes the node's control loop. ``GroupDirectory`` is one group's view. A newer read
  replaces ``topology``; listeners hear of every watched change (the election wakes on them).
- What clients are told comes from here: ``members()`` (the primary, the node the leader key
  names, and the standbys) for ``CLUSTER SLOTS/SHARDS/NODES/INFO`` and ``INFO replication``, and
  ``redirect(key)`` for a key command this node cannot serve: ``MOVED <slot> <primary>``,
  ``CLUSTERDOWN`` with no primary known, ``TRYAGAIN`` while the primary is not registered yet.
- A node that steps down forgets that it led (``forget_me_as_leader``): until etcd says who leads
  now, it knows no primary (``CLUSTERDOWN``, empty ``CLUSTER SLOTS``), so cluster clients ask the
  other nodes instead of being sent back to it.
- **A node cut off from etcd** (``out_of_touch``: its own lease must have ended there, a TTL and
  etcd's expiry period after etcd last answered) no longer passes on what it last read: its
  ``CLUSTER SLOTS`` name no primary, and a key request gets ``MOVED`` to another registered node
  (each in turn) for a group this node led last it knew (the others, in touch with etcd, know who
  leads it now, or answer ``CLUSTERDOWN`` until someone does), ``CLUSTERDOWN`` (``CUT_OFF``) for
  the others. Before that point its old lease may still name it in etcd, so the other nodes would
  send the client straight back: it answers ``CLUSTERDOWN`` for a group it led. So a client
  library that follows ``MOVED`` (``redis-cli -c``, redis-py ``RedisCluster``) gets an ID from a
  cut-off primary's address, and two nodes that both lost etcd never send a client back and forth.

The directory never decides who leads (the election does) and never hands out anything.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from march import errors
from march.clock import Clock
from march.cluster.slots import key_slot
from march.errors import CommandError, IdentityConflict, StoreError
from march.etcd.api import KV, Etcd, Get, Put, created_at, lease_is
from march.etcd.keypath import KeyPaths

log = logging.getLogger("march.cluster")

# Seconds a lease may outlive its TTL before its holder counts as alive: etcd checks expiry every
# 0.5 s, and a new etcd leader extends every lease by its election timeout (1 s by default).
_HOLDER_SLACK = 1.5

PRIMARY = "primary"
STANDBY = "standby"
PROMOTING = "promoting"
LEAVING = "leaving"  # an orderly stop is handing this node's groups over: give it none


@dataclass(frozen=True)
class NodeInfo:
    id: str
    addr: str  # host:port that clients are sent to
    role: str = STANDBY
    tls_addr: str = ""  # host:port that TLS clients are sent to ("": no TLS port)
    leads: tuple[int, ...] = ()  # the groups this node leads, as its record says (spreading, CLUSTER NODES)
    takeover: int = -1  # CLUSTER FAILOVER run here: the group it asks its primary for (-1: none)
    forward_addr: str = ""  # host:port of its forwarding port (forward_port), which Sentinel replies name ("": none)
    link_addr: str = ""  # host:port other nodes open forwarding links to ("": addr; link_address)
    link_tls_addr: str = ""  # ... and TLS links (tls_cluster; "": tls_addr)

    def seen_by(self, tls: bool) -> NodeInfo:
        """This node as a client connected with or without TLS should be told of it."""
        return dataclasses.replace(self, addr=self.tls_addr) if tls and self.tls_addr else self

    def for_sentinel(self, tls: bool) -> NodeInfo:
        """This node as Sentinel replies name it: its forwarding port, which serves every key, when
        it has one (not to a TLS client: that port is plain TCP), else as ``seen_by``."""
        if not tls and self.forward_addr:
            return dataclasses.replace(self, addr=self.forward_addr)
        return self.seen_by(tls)

    def link(self, tls: bool) -> str:
        """Where another node opens a forwarding link to this one (``tls``: a TLS link)."""
        if tls and (self.link_tls_addr or self.tls_addr):
            return self.link_tls_addr or self.tls_addr
        return self.link_addr or self.addr

    def record(self, role: str, leads: tuple[int, ...], takeover: int, lease_ttl: int) -> dict[str, Any]:
        """This node's record in etcd (``<prefix>/nodes/<id>``) with its ``role``, the groups it
        ``leads``, the group it asks for (``takeover``), its pid and its lease's TTL."""
        return {
            "id": self.id,
            "addr": self.addr,
            "tls_addr": self.tls_addr,
            "forward_addr": self.forward_addr,
            "link_addr": self.link_addr,
            "link_tls_addr": self.link_tls_addr,
            "role": role,
            "leads": list(leads),
            "takeover": takeover,
            "pid": os.getpid(),
            "lease_ttl": lease_ttl,
        }

    @staticmethod
    def from_record(data: dict[str, Any]) -> NodeInfo:
        """A node as its record says (``record``); KeyError, ValueError or TypeError if malformed."""
        return NodeInfo(
            data["id"],
            data["addr"],
            data.get("role", STANDBY),
            data.get("tls_addr", ""),
            tuple(int(g) for g in data.get("leads", ())),
            int(data.get("takeover", -1)),
            str(data.get("forward_addr", "")),
            str(data.get("link_addr", "")),
            str(data.get("link_tls_addr", "")),
        )

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
    leases: dict[str, int] = field(default_factory=dict)  # node id -> the lease its record is under
    handoff_lease: int = 0  # the lease of the primary that wrote the hand-off key
    handoff_revision: int = 0  # the hand-off key's mod revision: one per FAILOVER, even to the same node

    @property
    def primary(self) -> NodeInfo | None:
        return self.nodes.get(self.leader) if self.leader is not None else None

    def standbys(self) -> list[NodeInfo]:
        return sorted((n for n in self.staying().values() if n.id != self.leader), key=lambda n: n.id)

    def staying(self) -> dict[str, NodeInfo]:
        """The nodes that may take groups: every registered node but those leaving (``LEAVING``)."""
        return {i: n for i, n in self.nodes.items() if n.role != LEAVING}


class Registration:
    """This node's record under its lease (``<prefix>/nodes/<id>``): created only where absent and
    rewritten only under its own lease, so a node id has one live holder (the module docstring)."""

    def __init__(self, etcd: Etcd, keys: KeyPaths, me: NodeInfo, clock: Clock, timeout: float, ttl: int) -> None:
        self.etcd = etcd
        self.keys = keys
        self.me = me
        self.clock = clock
        self.timeout = timeout
        self.ttl = ttl  # this node's lease TTL, written in its record (how long a rival waits for it)
        self._registered: tuple[int, str, tuple[int, ...], int] | None = None  # (lease, role, leads, takeover) written
        self._rival: _Rival | None = None  # another lease holding this node's id, since when

    async def register(self, lease: int, role: str, leads: tuple[int, ...] = (), takeover: int = -1) -> bool:
        """(Re)write this node's record under ``lease`` if the lease, the role or the groups it leads
        changed: created if absent, rewritten only while under ``lease``. False while another lease holds this node id
        (its holder may be this node's crashed predecessor: wait for its lease to end);
        IdentityConflict once that lease outlived its TTL (another live process holds the id)."""
        if not lease:
            return False
        if self._registered == (lease, role, leads, takeover):
            return True
        key = self.keys.node(self.me.id)
        value = json.dumps(self.me.record(role, leads, takeover, self.ttl)).encode()
        ours = self._registered is not None and self._registered[0] == lease
        for _ in range(3):  # the record may come and go between attempts; the control loop retries anyway
            compare = lease_is(key, lease) if ours else created_at(key, 0)
            reply = await self.etcd.txn([compare], [Put(key, value, lease)], [Get(key)], self.timeout)
            if reply.succeeded:
                if self._rival is not None:
                    log.info("node id %s is this node's now (the other lease ended)", self.me.id)
                    self._rival = None
                self._registered = (lease, role, leads, takeover)
                return True
            found = reply.ranges[0]
            held = found.kvs[0] if found is not None and found.kvs else None
            if held is not None and held.lease != lease:
                self._registered = None
                self._held_by(held)
                return False
            ours = held is not None  # under our lease (an earlier put whose reply was lost): rewrite it
        return False

    def _held_by(self, kv: KV) -> None:
        """This node's id is under another lease: note since when; IdentityConflict once that lease
        has outlived its TTL (it was renewed, so its holder is alive)."""
        try:
            data = json.loads(kv.value)
            holder = f"{data.get('addr', '?')}, pid {data.get('pid', '?')}"
            ttl = float(data.get("lease_ttl") or self.ttl)
        except (ValueError, TypeError, AttributeError):
            holder, ttl = "?", float(self.ttl)
        now = self.clock.now()
        rival = self._rival
        if rival is None or rival.lease != kv.lease:
            rival = self._rival = _Rival(kv.lease, now, now + ttl + _HOLDER_SLACK)
            log.warning(
                "node id %s is registered by another process (%s, lease %x): waiting up to %.1fs for that lease "
                "to end; if it does not, another live node uses this id",
                self.me.id,
                holder,
                kv.lease,
                rival.give_up - now,
            )
        if now >= rival.give_up:
            raise IdentityConflict(
                f"node id {self.me.id!r} is held by another live process ({holder}, lease {kv.lease:x}) in "
                f"etcd prefix {self.keys.prefix.decode()}: its lease outlived its TTL, so that process keeps it "
                "alive. Give each node its own node_id (default: its advertised address), or stop the other one"
            )

    def record_lost(self) -> None:
        """This node's record is gone, or not under its lease: write it again at the next step."""
        if self._registered is not None:
            log.warning("this node's registration (%s) is gone from etcd: restoring it", self.me.id)
        self._registered = None

    @property
    def registered(self) -> bool:
        return self._registered is not None

    def lease_gone(self) -> None:
        self._registered = None  # the record went with the lease


@dataclass(frozen=True)
class _Rival:
    """Another lease found holding this node's id: since when, and when to stop waiting for it."""

    lease: int
    seen: float
    give_up: float


class Directory:
    """What this node knows of the cluster: its record (``Registration``), every group's view from the
    last read (``read_all``), and what clients are told (``members``, ``redirect``)."""

    def __init__(
        self,
        etcd: Etcd,
        keys: KeyPaths,
        me: NodeInfo,
        clock: Clock,
        timeout: float,
        lease_ttl: int = 0,
        leader_keys: Sequence[tuple[bytes, bytes]] = (),
        out_of_touch: Callable[[], float] = lambda: -math.inf,
    ) -> None:
        self.etcd = etcd
        self.out_of_touch = out_of_touch  # ``LeaseKeeper.out_of_touch``: >= 0 once cut off from etcd for good
        self.keys = keys
        self.me = me
        self.clock = clock
        self.timeout = timeout  # per call: short, the control loop retries
        # (leader key, hand-off key) of each group, in group order (default: the one group's)
        self.leader_keys = list(leader_keys) or [(keys.leader, keys.handoff)]
        self._leader_index = {leader: g for g, (leader, _) in enumerate(self.leader_keys)}
        self._handoff_index = {handoff: g for g, (_, handoff) in enumerate(self.leader_keys)}
        self.views = [Topology() for _ in self.leader_keys]  # each group's view, from the last read
        self.layout_record: KV | None = None  # ``<prefix>/groups`` as the last read found it (None: absent)
        self.registration = Registration(etcd, keys, me, clock, timeout, lease_ttl)
        self._listeners: list[Callable[[], None]] = []
        self.leader_changes = 0  # times a leader key named another node (metrics)
        self._last_leaders: list[str | None] = [None] * len(self.leader_keys)
        self._primary_listeners: list[Callable[[NodeInfo | None, NodeInfo], None]] = []
        self._last_primary: NodeInfo | None = None  # the record of the last primary seen
        self._switch_pending = False  # the primary changed and the listeners have not been told
        # node id -> (the lease its record is under, clock time this node first read it so): how long
        # each node has been back (``registered_for``); a node that rejoins comes back under a new lease
        self._seen: dict[str, tuple[int, float]] = {}
        self._led: set[int] = set()  # groups this node led, last it knew (it stepped down since)
        self._turn = 0  # which other node a cut-off node sends the next client to

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def on_primary_change(self, listener: Callable[[NodeInfo | None, NodeInfo], None]) -> None:
        """Call ``listener(old, new)`` each time this node sees another node become the primary
        (``old``: the last primary it knew, None if its record was never seen). Pub/sub announces
        ``+switch-master`` from it; a listener must not block, and its failure is logged, never raised."""
        self._primary_listeners.append(listener)

    def _announce(self, old: NodeInfo | None, new: NodeInfo) -> None:
        for listener in list(self._primary_listeners):
            try:
                listener(old, new)
            except Exception:
                log.exception("a listener of primary changes failed")

    def _changed(self) -> None:
        for listener in list(self._listeners):
            listener()

    @property
    def topology(self) -> Topology:
        """The first group's view (the only one with one group)."""
        return self.views[0]

    # --- this node's record ----------------------------------------------------------------------

    async def register(self, lease: int, role: str, leads: tuple[int, ...] = (), takeover: int = -1) -> bool:
        """This node's record under ``lease`` (``Registration.register``)."""
        return await self.registration.register(lease, role, leads, takeover)

    def record_lost(self) -> None:
        self.registration.record_lost()

    @property
    def registered(self) -> bool:
        return self.registration.registered

    def lease_gone(self) -> None:
        self.registration.lease_gone()

    # --- the topology ----------------------------------------------------------------------------

    async def read(self) -> Topology:
        """One linearizable read of the topology keys; the first group's view (``read_all``)."""
        return (await self.read_all())[0]

    async def read_all(self) -> list[Topology]:
        """One linearizable read of every group's leader and hand-off keys and every node record:
        one ``Topology`` per group (sharing the node records)."""
        found = await self.etcd.range(Get(self.keys.topology_start, self.keys.topology_end), self.timeout)
        count = len(self.leader_keys)
        layout: KV | None = None
        leaders: list[tuple[str | None, int, int]] = [(None, 0, 0)] * count
        handoffs: list[tuple[str | None, int, int]] = [(None, 0, 0)] * count
        nodes: dict[str, NodeInfo] = {}
        leases: dict[str, int] = {}
        for kv in found.kvs:
            if kv.key == self.keys.groups:
                layout = kv
            elif kv.key in self._leader_index:
                leaders[self._leader_index[kv.key]] = (kv.value.decode(), kv.create_revision, kv.lease)
            elif kv.key in self._handoff_index:
                handoffs[self._handoff_index[kv.key]] = (kv.value.decode(), kv.lease, kv.mod_revision)
            elif kv.key.startswith(self.keys.nodes):
                try:
                    node = NodeInfo.from_record(json.loads(kv.value))
                    nodes[node.id] = node
                    leases[node.id] = kv.lease
                except (ValueError, KeyError, TypeError):
                    log.warning("ignoring a malformed node record %r", kv.key)
        views = [
            Topology(
                *leaders[g],
                handoffs[g][0],
                nodes,
                found.revision,
                leases=leases,
                handoff_lease=handoffs[g][1],
                handoff_revision=handoffs[g][2],
            )
            for g in range(count)
        ]
        if found.revision >= self.views[0].revision:
            self.views = views
            self.layout_record = layout
            now, seen = self.clock.now(), self._seen
            self._seen = {n: seen[n] if seen.get(n, (0,))[0] == lease else (lease, now) for n, lease in leases.items()}
            self._led.clear()  # etcd just said who leads each group
            for g, topology in enumerate(views):
                self._follow(g, topology)
        return views

    def _follow(self, g: int, topology: Topology) -> None:
        """Count leader changes of group ``g``; announce the first group's new primary (Sentinel)."""
        leader = topology.leader
        if leader is not None and leader != self._last_leaders[g]:
            if self._last_leaders[g] is not None:
                self.leader_changes += 1
                log.info("group %d: the primary is now %s (was %s)", g, leader, self._last_leaders[g])
                if g == 0:
                    self._switch_pending = True  # announced once the new primary's record is known
            self._last_leaders[g] = leader
        primary = topology.primary
        if g == 0 and primary is not None:
            if self._switch_pending:
                self._switch_pending = False
                self._announce(self._last_primary, primary)
            self._last_primary = primary

    async def watch(self) -> None:
        """Tell listeners of every change to the topology keys, for the life of the node."""
        while True:
            try:
                async for _ in self.etcd.watch(self.keys.topology_start, self.keys.topology_end):
                    self._changed()
            except StoreError as exc:
                log.debug("watch broke: %s", exc)
            self._changed()  # something may have changed while the watch was down
            await self.clock.sleep(self.timeout)

    def registered_for(self, node_id: str) -> float:
        """Seconds since this node's reads first found ``node_id`` registered under the lease it is
        under now (0 if it is not registered): a node back from a partition or a restart is back
        under a new lease, so this says how long it has been back."""
        seen = self._seen.get(node_id)
        return 0.0 if seen is None else self.clock.now() - seen[1]

    def forget_me_as_leader(self, g: int = 0) -> None:
        """This node stepped down in group ``g``: until etcd says who leads it, no primary is known."""
        if self.views[g].leader == self.me.id:
            self.views[g] = dataclasses.replace(self.views[g], leader=None, leader_revision=0)
            self._led.add(g)

    # --- what clients are told -------------------------------------------------------------------

    @property
    def cut_off(self) -> bool:
        """Cut off from etcd for longer than this node's own lease can have lived there: what it last
        read of who leads is no longer passed on (module docstring)."""
        return self.out_of_touch() >= 0

    def _another(self, tls: bool) -> str | None:
        """The address of another registered node, each in turn (None if there is none)."""
        others = sorted((n for n in self.views[0].staying().values() if n.id != self.me.id), key=lambda n: n.id)
        if not others:
            return None
        self._turn = (self._turn + 1) % len(others)
        return others[self._turn].seen_by(tls).addr

    def members(self, tls: bool = False, g: int = 0) -> tuple[NodeInfo | None, list[NodeInfo]]:
        """(primary, standbys) of group ``g`` from the last topology read, as a client with or without
        TLS sees them; this node is always among them."""
        topology = self.views[g]
        nodes = dict(topology.nodes)
        nodes.setdefault(self.me.id, self.me)
        primary = nodes.get(topology.leader) if topology.leader is not None and not self.cut_off else None
        standbys = sorted((n for n in nodes.values() if primary is None or n.id != primary.id), key=lambda n: n.id)
        return (primary.seen_by(tls) if primary else None), [n.seen_by(tls) for n in standbys]

    def redirect(self, key: bytes, tls: bool = False, g: int = 0) -> CommandError:
        """The error for a key request of group ``g`` this node cannot serve: MOVED to the group's
        primary, or retry later."""
        topology = self.views[g]
        if self.cut_off:
            other = self._another(tls) if g in self._led or topology.leader == self.me.id else None
            if other is not None:  # the nodes in touch with etcd know who leads it now
                return CommandError(errors.MOVED.format(key_slot(key), other))
            return CommandError(errors.CLUSTERDOWN_CUT_OFF)
        primary = topology.primary
        if primary is None:
            return CommandError(errors.CLUSTERDOWN if topology.leader is None else errors.TRYAGAIN_NO_PRIMARY)
        if primary.id == self.me.id:
            return CommandError(errors.TRYAGAIN_TAKING_OVER)
        return CommandError(errors.MOVED.format(key_slot(key), primary.seen_by(tls).addr))


class GroupDirectory:
    """One group's side of the node's directory: what its election and FAILOVER read and write.
    The record, the read and the watch are the node's (``Directory``); only the leader is the group's."""

    def __init__(self, directory: Directory, g: int) -> None:
        self.node = directory
        self.g = g
        self.keys = directory.keys

    @property
    def me(self) -> NodeInfo:
        return self.node.me

    @property
    def topology(self) -> Topology:
        return self.node.views[self.g]

    @property
    def registered(self) -> bool:
        return self.node.registered

    @property
    def leader_changes(self) -> int:
        return self.node.leader_changes

    def on_change(self, listener: Callable[[], None]) -> None:
        self.node.on_change(listener)

    def on_primary_change(self, listener: Callable[[NodeInfo | None, NodeInfo], None]) -> None:
        self.node.on_primary_change(listener)

    async def read(self) -> Topology:
        return (await self.node.read_all())[self.g]

    def record_lost(self) -> None:
        self.node.record_lost()

    def forget_me_as_leader(self) -> None:
        self.node.forget_me_as_leader(self.g)

    def members(self, tls: bool = False) -> tuple[NodeInfo | None, list[NodeInfo]]:
        return self.node.members(tls, self.g)

    def redirect(self, key: bytes, tls: bool = False) -> CommandError:
        return self.node.redirect(key, tls, self.g)
