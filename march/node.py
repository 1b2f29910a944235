"""One March node's durable parts, built from the ``Config``: its store and its leadership group,
and in cluster mode its etcd clients and cluster membership. ``march.server`` starts and stops it;
nothing here knows a socket or a command.

- **Single node** (no ``etcd``): the embedded SQLite store in ``data_dir`` and a group whose
  serving state holds a lease that never ends (the data dir's lock is the leadership). It serves
  as soon as the store is open: nothing is loaded up front.
- **Cluster** (``etcd``): three etcd clients, one per purpose, so that no call of one kind can
  delay or cut another: the lease's keep-alives, the control plane (election, registry,
  FAILOVER) and the data (the store's reads and guarded writes). The group starts as a standby;
  ``join(port)`` registers this node and starts the election once the listener's port is known
  (the advertised address needs it). Before registering, the node confirms which cluster it
  belongs to (``march.cluster.identity``: the data dir's ``cluster.json`` against
  ``<prefix>/cluster``), and it registers only if no other live process holds its node id
  (``march.cluster.registry``). Either refusal is an ``IdentityConflict``: ``failed`` is set,
  ``failure`` says why, and the server stops and exits with status 1.

**Users** (``march.auth``) come from the store: the stored users, or (when the store has none)
those of ``aclfile``; then ``requirepass``, if set, is the ``default`` user's password. A single
node loads them when its store opens, before it listens. A cluster node may start before etcd
answers: it listens at once with every user unknown (``default`` off: no client is
authenticated, every AUTH fails) until it has read them, retrying, and then follows every change
made on any node through an etcd watch (``_follow_users``), so a user created on the primary can
authenticate on a standby within moments. ``take_users`` applies a change here (ACL
SETUSER/DELUSER, the watch); ``on_users_changed`` lets the server close the connections of a
deleted user and let password-less clients in once the users are known.

``stop`` is the orderly end: step down (a primary gives the leader key back at once), wait for
store writes in flight (bounded), close the store and the clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from .auth import User, Users, parse_acl_file
from .clock import SYSTEM, Clock
from .cluster.identity import ClusterIdentity
from .cluster.member import ClusterMember
from .cluster.registry import NodeInfo
from .commands.registry import REGISTRY
from .config import Config
from .errors import CommandError
from .etcd.api import Etcd
from .etcd.client import TLS, GrpcEtcd
from .etcd.keys import KeyPaths
from .group import Group
from .keyspace import Keyspace
from .serving import Cause, ServingState
from .store.base import SINGLE_NODE, IdentityConflict, Store, StoreError
from .store.etcd import EtcdStore
from .store.sqlite import SqliteStore

log = logging.getLogger("march")

_USERS_RETRY = 0.5  # seconds between attempts to read the users while etcd does not answer
EtcdFactory = Callable[[str], Etcd]  # purpose ("lease", "control", "data") -> a client of its own


class Node:
    def __init__(self, config: Config, *, clock: Clock = SYSTEM, etcd: EtcdFactory | None = None) -> None:
        self.config = config
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
            state = ServingState.forever(clock, SINGLE_NODE)
        self.store = store
        self.group = Group(state, Keyspace(config, store, state, clock.now))
        self.users = Users(REGISTRY, loaded=not config.cluster)
        if config.cluster:
            self.users.default.apply(["off"], REGISTRY)  # nobody gets in until the users are read
        self.on_users_changed: Callable[[list[User]], None] = lambda _: None
        self._users_task: asyncio.Task[None] | None = None
        self.failure: IdentityConflict | None = None  # why this node may not take part (then it stops)
        self.failed = asyncio.Event()

    def _grpc(self, purpose: str) -> Etcd:
        c = self.config
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

    async def open(self) -> None:
        """Open the store (a locked or unwritable data dir fails here, before listening); load the users."""
        await self.store.open()
        if self.config.cluster:
            self._users_task = asyncio.get_running_loop().create_task(self._follow_users())
            return
        try:
            await self._load_users()
        except BaseException:
            await self.store.close()
            raise

    async def _load_users(self) -> None:
        stored = await self.store.load_users()
        if not stored and self.config.aclfile:
            seed = self._read_aclfile()
            for name, rules in seed.items():
                await self.store.save_user(name, rules)
            stored = seed
        self.take_users(stored, replace=True)

    def _read_aclfile(self) -> dict[str, str]:
        path = self.config.aclfile
        try:
            described = parse_acl_file(Path(path).read_text())
            self.users.check(described)
        except (OSError, ValueError, CommandError) as exc:
            raise StoreError(f"aclfile {path}: {getattr(exc, 'message', None) or exc}") from None
        return described

    def take_users(self, changes: Mapping[str, str | None], replace: bool = False) -> None:
        """Apply user changes here (name -> rules, None: deleted); ``replace``: these are all the users."""
        if replace:
            removed = self.users.replace({n: r for n, r in changes.items() if r is not None})
            if self.config.requirepass:  # the default user's password, whatever the store says
                self.users.default.apply(["resetpass", ">" + self.config.requirepass], REGISTRY)
        else:
            removed = []
            for name, rules in changes.items():
                if rules is None:
                    gone = self.users.remove(name)
                    removed += [gone] if gone is not None else []
                else:
                    self.users.install(name, rules)
        self.on_users_changed(removed)

    async def _follow_users(self) -> None:
        """Cluster mode: read the users (retrying until etcd answers), then reload them after every
        change, for the node's life. A broken watch is followed by a full read and a new watch."""
        while True:
            watch = self.store.watch_users()
            try:
                await self._load_users()
                if watch is not None:
                    async for _ in watch:
                        self.take_users(await self.store.load_users(), replace=True)
            except StoreError as exc:
                log.debug("users: %s", exc)
            finally:
                if watch is not None:
                    await watch.aclose()  # type: ignore[attr-defined]
            await self.clock.sleep(_USERS_RETRY)

    def join(self, port: int, tls_port: int = 0) -> None:
        """Cluster mode: register as ``advertise`` (default bind:port; TLS clients are sent to the
        same host on ``tls_port``) and start the election."""
        if not self.config.cluster:
            return
        c = self.config
        addr = c.address(port)
        tls_addr = f"{addr.rpartition(':')[0]}:{tls_port}" if tls_port else ""
        identity = ClusterIdentity(
            self.etcd["control"], self.keys, c.data_dir, c.etcd, c.join_other_cluster, timeout=c.lease_ttl / 3
        )
        member = ClusterMember(
            lease_etcd=self.etcd["lease"],
            control_etcd=self.etcd["control"],
            keys=self.keys,
            state=self.group.state,
            keyspace=self.group.keyspace,
            me=NodeInfo(c.node_name(port), addr, tls_addr=tls_addr),
            identity=identity,
            ttl=c.lease_ttl,
            clock=self.clock,
            store_timeout=c.store_timeout,
            on_fatal=self._fail,
        )
        self.group.member = member
        member.start()
        log.info("joining cluster %s at %s", c.etcd_prefix, c.etcd)

    def _fail(self, failure: IdentityConflict) -> None:
        """This node may not take part in the cluster: whoever runs it stops it (``failed``)."""
        if self.failure is None:
            self.failure = failure
        self.failed.set()

    async def stop(self) -> None:
        """Step down (handing the primary role over at once), wait for writes in flight, close."""
        timeout = self.config.store_timeout
        if self._users_task is not None:
            self._users_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._users_task
        member = self.group.member
        if member is not None:
            await member.stop(min(2.0, timeout))
        self.group.state.step_down(Cause.SHUTDOWN)
        try:
            await asyncio.wait_for(self.group.keyspace.drain(timeout), timeout + 1)
        except TimeoutError:  # safe: nothing at or above an unconfirmed ceiling was handed out
            log.warning("store writes still in flight after %.1fs; stopping without them", timeout)
        await self.store.close()
        for client in self.etcd.values():
            with contextlib.suppress(Exception):
                await client.close()
