"""One March node's durable parts, built from the ``Config``: its store and its leadership groups,
and in cluster mode its etcd clients and cluster membership. The server's assembly starts and
stops it; nothing here knows a socket, and it imports no command: the command table (which the
users' ACL rules read) is handed to it.

- **Single node** (no ``etcd``): the embedded SQLite store in ``data_dir`` and a group whose
  serving state holds a lease that never ends (the data dir's lock is the leadership). It serves
  as soon as the store is open: nothing is loaded up front.
- **Cluster** (``etcd``): three etcd clients, one per purpose, so that no call of one kind can
  delay or cut another: the lease's keep-alives, the control plane (election, directory,
  FAILOVER) and the data (the store's reads and guarded writes). **Groups**: one ``Group`` per
  slot range of the cluster's layout (``march.cluster.layout``), each with its own serving state
  and keyspace over the one store. ``open`` reads the layout from etcd if etcd answers then (else
  the ``groups`` option's is assumed); before the first campaign the layout is confirmed
  (``create_layout``: a fresh prefix takes this node's ``groups``), and a node built for another
  layout, or one that sees the layout change later (``march groups N``), stops with
  ``LayoutChanged`` and ``march serve`` starts again (same process id), reading the cluster's layout. Every group starts
  as a standby;
  ``join(port)`` registers this node and starts the election once the listener's port is known
  (the advertised address needs it). Before registering, the node confirms which cluster it
  belongs to (``march.cluster.identity``: the data dir's ``cluster.json`` against
  ``<prefix>/cluster``), and it registers only if no other live process holds its node id
  (``march.cluster.directory``). Either refusal is an ``IdentityConflict``: ``failed`` is set,
  ``failure`` says why, and the server stops and exits with status 1.

**Users** (``march.access.users``) are the store's (``march.access.stored.SharedUsers``: seeding from ``aclfile``
and ``requirepass``, compare-and-set changes, following other nodes' changes one user at a time).
A single node reads them when its store opens, before it listens. A cluster node may start
before etcd answers: it listens at once with every user unknown (``default`` off: no client is
authenticated, every AUTH answers CLUSTERDOWN) until it has read them, retrying, and then
follows every change made on any node through an etcd watch, so a user created on the primary
can authenticate on a standby within moments.

``stop`` is the orderly end: step every group down (each leader key this node holds is given back
at once, all together), wait for store writes in flight (bounded), close the store and the clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping

from march.access.rules import AclCommand
from march.access.stored import SharedUsers
from march.access.users import Users
from march.clock import SYSTEM, Clock
from march.cluster.directory import NodeInfo
from march.cluster.groups import Group, Groups
from march.cluster.identity import ClusterIdentity
from march.cluster.layout import Layout, campaign_compares, create_layout, layout_of
from march.cluster.member import ClusterMember, GroupSpec
from march.config import Config
from march.errors import IdentityConflict, LayoutChanged, StoreError
from march.etcd.api import KV, Etcd, Get
from march.etcd.grpc_etcd import TLS, GrpcEtcd
from march.etcd.keypath import KeyPaths
from march.keyspace.keyspace import Keyspace
from march.keyspace.serving import Cause, ServingState
from march.store.contract import SINGLE_NODE, Store
from march.store.etcd_store import EtcdStore
from march.store.sqlite_store import SqliteStore

log = logging.getLogger("march")

EtcdFactory = Callable[[str], Etcd]  # purpose ("lease", "control", "data") -> a client of its own


def etcd_client(c: Config, purpose: str) -> Etcd:
    """A gRPC etcd client as ``c`` configures it (endpoints, TLS, user); also what ``march backup`` uses."""
    tls = None
    if c.etcd_ca_cert_file or c.etcd_cert_file:
        tls = TLS(c.etcd_ca_cert_file, c.etcd_cert_file, c.etcd_key_file)
    return GrpcEtcd(
        c.etcd_endpoints,
        user=c.etcd_user,
        password=c.etcd_password,
        tls=tls,
        timeout=c.store_timeout,
        name=f"etcd ({purpose})",
    )


class Node:
    def __init__(
        self,
        config: Config,
        commands: Mapping[str, AclCommand],
        *,
        clock: Clock = SYSTEM,
        etcd: EtcdFactory | None = None,
    ) -> None:
        self.config = config
        self.commands = commands  # the command table (name -> spec) the users' rules and the counters read
        self.clock = clock
        self.etcd: dict[str, Etcd] = {}
        self.keys = KeyPaths.of(config.etcd_prefix)
        store: Store
        if config.cluster:
            make = etcd or self._grpc
            self.etcd = {purpose: make(purpose) for purpose in ("lease", "control", "data")}
            # A write caught by an etcd leader change would hang until store_timeout although etcd
            # elects a new leader in about a second: writes get TTL/3, and generators retry higher.
            write_timeout = max(0.5, config.lease_ttl / 3)
            store = EtcdStore(self.etcd["data"], self.keys, config.store_timeout, write_timeout)
            state = ServingState(clock)
        else:
            store = SqliteStore(config.data_dir, join_other=config.join_other_cluster)
            state = ServingState(clock)  # serves once the data dir is locked (``open``)
        self.store = store
        self.layout = Layout(1 if not config.cluster else config.groups)  # confirmed against etcd (``open``, ``join``)
        self.groups = self._build(self.layout, state)
        self.users = Users(commands, loaded=not config.cluster)
        if config.cluster:
            self.users.default.apply(["off"], commands)  # nobody gets in until the users are read
        self.shared_users = SharedUsers(store, self.users, config, clock, follow=config.cluster)
        self.member: ClusterMember | None = None  # cluster mode, once joined
        self.failure: IdentityConflict | None = None  # why this node may not take part (then it stops)
        self.failed = asyncio.Event()

    def _build(self, layout: Layout, state: ServingState | None = None) -> Groups:
        """One group per slot range of ``layout``, each with its own serving state and keyspace."""
        groups = []
        for g in range(layout.groups):
            own = state if state is not None and g == 0 else ServingState(self.clock, layout.label(g))
            groups.append(Group(own, Keyspace(self.config, self.store, own, self.clock.now), g, layout.slots(g)))
        return Groups(groups)

    async def _read_layout(self) -> None:
        """Cluster mode, before listening: the layout etcd holds, if it answers now (else the
        ``groups`` option's, confirmed before any campaign: ``_confirm_layout``)."""
        try:
            reply = await self.etcd["control"].txn(
                [], [Get(self.keys.groups), Get(self.keys.cluster)], [], self.config.lease_ttl / 3
            )
            record, cluster = (r.kvs[0] if r is not None and r.kvs else None for r in reply.ranges)
            found = layout_of(record) if record is not None or cluster is not None else None  # None: a fresh prefix
        except StoreError as exc:
            log.warning("etcd did not answer (%s): assuming %d group(s) until it does", exc, self.layout.groups)
            return
        layout = found if found is not None else self.layout
        if layout.groups != self.layout.groups:
            log.info(
                "the cluster has %d leadership group(s) (etcd), not %d (option)", layout.groups, self.layout.groups
            )
            self.groups = self._build(layout)
        self.layout = layout

    async def _confirm_layout(self) -> None:
        """Before the first campaign: the layout etcd holds (written from this node's if the prefix is
        fresh) is the one this node's groups were built for, else this node stops (restarted, it reads it)."""
        layout = await create_layout(self.etcd["control"], self.keys, self.layout.groups, self.config.lease_ttl / 3)
        if layout.groups != self.layout.groups:
            raise LayoutChanged(
                f"etcd prefix {self.config.etcd_prefix} has {layout.groups} leadership group(s); this node "
                f"started with {self.layout.groups} (etcd did not answer then): starting again in the cluster's layout"
            )
        self.layout = layout

    def _check_layout(self, record: KV | None) -> None:
        """After every topology read: the layout record is still the one this node's groups were
        built for. Once it changed (``march groups N``), this node steps down from every group, gives
        their leader keys back and stops (``LayoutChanged``), and ``march serve`` starts again in the
        same process, reading the new layout (docs/groups.md, rule 3)."""
        layout = layout_of(record)
        if layout.revision != self.layout.revision:
            raise LayoutChanged(
                f"the cluster's layout changed ({self.layout.describe()} -> {layout.describe()}): this node "
                "stepped down from every group and gives their leader keys back; it stops now, and takes "
                "part in the new layout as it starts again"
            )

    def _grpc(self, purpose: str) -> Etcd:
        return etcd_client(self.config, purpose)

    async def open(self) -> None:
        """Open the store (a locked or unwritable data dir fails here, before listening); load the users."""
        await self.store.open()
        if not self.config.cluster:
            for group in self.groups:  # (one: a single node's layout is one group)
                group.state.serve_forever(SINGLE_NODE)  # after the lock: a refused node never says it served
        else:
            await self._read_layout()
        try:
            await self.shared_users.open()
        except BaseException:
            await self.store.close()
            raise

    def join(self, port: int, tls_port: int = 0, forward_port: int = 0) -> None:
        """Cluster mode: register as ``advertise`` (default bind:port; TLS clients are sent to the
        same host on ``tls_port``, Sentinel replies name it on ``forward_port``; other nodes link to
        ``link_address``, default the advertised address) and start the election."""
        if not self.config.cluster:
            return
        c = self.config
        addr = c.address(port)
        host = addr.rpartition(":")[0]
        tls_addr = f"{host}:{tls_port}" if tls_port else ""
        forward_addr = f"{host}:{forward_port}" if forward_port else ""
        link_host = c.link_address.rpartition(":")[0]
        link_tls_addr = f"{link_host}:{tls_port}" if c.link_address and tls_port else ""
        identity = ClusterIdentity(
            self.etcd["control"], self.keys, c.data_dir, c.etcd, c.join_other_cluster, timeout=c.lease_ttl / 3
        )
        layout = self.layout
        specs = [
            GroupSpec(
                g.state, g.keyspace, layout.leader_key(self.keys, g.index), layout.handoff_key(self.keys, g.index)
            )
            for g in self.groups
        ]
        member = ClusterMember(
            lease_etcd=self.etcd["lease"],
            control_etcd=self.etcd["control"],
            keys=self.keys,
            groups=specs,
            me=NodeInfo(
                c.node_name(port),
                addr,
                tls_addr=tls_addr,
                forward_addr=forward_addr,
                link_addr=c.link_address,
                link_tls_addr=link_tls_addr,
            ),
            identity=identity,
            ttl=c.lease_ttl,
            clock=self.clock,
            store_timeout=c.store_timeout,
            on_fatal=self._fail,
            confirm_layout=self._confirm_layout,
            campaign_compares=lambda: campaign_compares(self.layout, self.keys),
            check_layout=self._check_layout,
        )
        self.member = member
        self.groups.join(member)
        member.start()
        log.info("joining cluster %s at %s", c.etcd_prefix, c.etcd)

    def _fail(self, failure: IdentityConflict) -> None:
        """This node may not take part in the cluster: whoever runs it stops it (``failed``)."""
        if self.failure is None:
            self.failure = failure
        self.failed.set()

    async def hand_over(self) -> None:
        """An orderly stop begins (the ports still open): hand every group this node leads to the
        other nodes (planned, so held requests get MOVED: no client error); not when this node may
        not take part (its layout changed: its old groups must go, not move)."""
        if self.member is not None and self.failure is None:
            await self.member.hand_over(min(2.0, self.config.shutdown_timeout))

    async def stop(self) -> None:
        """Step down (handing the primary role over at once), wait for writes in flight, close."""
        timeout = self.config.store_timeout
        await self.shared_users.close()
        if self.member is not None:
            await self.member.stop(min(2.0, timeout))
        for group in self.groups:
            group.state.step_down(Cause.SHUTDOWN)
        try:
            await asyncio.wait_for(asyncio.gather(*(g.keyspace.drain(timeout) for g in self.groups)), timeout + 1)
        except TimeoutError:  # safe: nothing at or above an unconfirmed ceiling was handed out
            log.warning("store writes still in flight after %.1fs; stopping without them", timeout)
        await self.store.close()
        for client in self.etcd.values():
            with contextlib.suppress(Exception):
                await client.close()
