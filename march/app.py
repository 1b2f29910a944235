"""Server-wide state shared by every connection: config, node (store, groups, users), clients, counters.

``App`` is built once by the node's assembly and handed to every ``Client``; command handlers reach
the keyspace, the group, the config and the statistics through it.

It sits below the commands and the per-connection state and imports nothing above it: what the
assembly built it receives at construction, seen through small Protocols (``Assembled``: the node;
``Connected``: a connection's client; ``march.cluster.groups.FastCommand``: a fast-path entry).

``hot`` is the server's fast-path table while this node serves a group, empty otherwise (then
every request goes through the dispatcher, which waits or redirects). It is derived from the groups'
serving states on every change, never set by hand. The groups make it (``Groups.fast_path``: with one
group the hot commands themselves; with several each checks its key's group first) and the keyspace
the commands see (``Groups.keyspace``); nothing here asks how many groups there are.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from march import log as march_log
from march.access.acl_log import AclLog
from march.access.rules import AclCommand, User
from march.access.stored import SharedUsers
from march.access.throttle import AuthThrottle
from march.access.users import Users
from march.cluster.announce import PubSub
from march.cluster.groups import FastCommand, Groups, Keyspaces, Slow
from march.cluster.links import Links
from march.cluster.readiness import readiness
from march.config import OPTIONS, Config
from march.keyspace.keyspace import Keyspace
from march.keyspace.serving import Change
from march.limits import clients_the_fd_limit_allows
from march.stats.counters import NodeMetrics
from march.stats.diagnostics import LatencyMonitor, Monitors, SlowLog
from march.store.contract import Store

if TYPE_CHECKING:
    from march.cluster.directory import NodeInfo

# Subscribers looked at per event-loop step after an ACL change (each: up to 16 names against the
# user's channel patterns, a few microseconds): 10,000 subscribers take a few steps, none long.
RECHECK_SLICE = 512


class Assembled(Protocol):
    """What ``App`` reads of the node the assembly built (``march.node.Node`` is one)."""

    config: Config  # (CONFIG SET replaces it)

    @property
    def store(self) -> Store: ...
    @property
    def groups(self) -> Groups: ...
    @property
    def users(self) -> Users: ...
    @property
    def shared_users(self) -> SharedUsers: ...
    @property
    def commands(self) -> Mapping[str, AclCommand]: ...  # the registered commands, by name


class Connected(Protocol):
    """What the server-wide state and its readers (CLIENT LIST, CLIENT KILL) see of a connection's
    client (``march.client.Client`` is one)."""

    @property
    def id(self) -> int: ...
    @property
    def addr(self) -> str: ...
    @property
    def laddr(self) -> str: ...
    @property
    def user(self) -> User: ...
    @property
    def authenticated(self) -> bool: ...
    def logout(self) -> None: ...
    def user_removed(self) -> bool: ...  # its user was deleted: True if it must close
    def info_line(self, current: str = "", running: list[bytes] | None = None) -> str: ...


class Stats:
    __slots__ = (
        "commands",
        "connections",
        "denied_auth",
        "denied_channel",
        "denied_command",
        "denied_key",
        "errors",
        "input_closed",
        "output_closed",
        "protocol_errors",
        "rejected",
        "timeouts_closed",
    )

    def __init__(self) -> None:
        self.commands = 0
        self.connections = 0
        self.rejected = 0
        self.errors = 0
        self.protocol_errors = 0
        self.timeouts_closed = 0
        self.output_closed = 0  # clients dropped for going over max_output_buffer
        self.input_closed = 0  # clients closed for the largest unfinished requests past query_buffer_budget
        self.denied_auth = 0  # failed AUTHs (INFO: acl_access_denied_auth)
        self.denied_command = 0  # NOPERM for a command
        self.denied_key = 0  # NOPERM for a key
        self.denied_channel = 0  # NOPERM for a channel (SUBSCRIBE, PSUBSCRIBE)

    def reset(self) -> None:
        """CONFIG RESETSTAT: every counter back to its starting value."""
        fresh = Stats()
        for name in Stats.__slots__:
            setattr(self, name, getattr(fresh, name))


class OpsRate:
    """INFO's ``instantaneous_ops_per_sec``, as Redis computes it: the mean of the last 16 samples of
    commands per second, one every 100 ms. Sampling starts at the first ``rate()`` (the first INFO),
    so a server nobody watches has no timer."""

    SAMPLES = 16
    PERIOD = 0.1

    def __init__(self, count: Callable[[], int]) -> None:
        self._count = count
        self._samples: deque[float] = deque(maxlen=self.SAMPLES)
        self._last: tuple[float, int] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def _tick(self) -> None:
        now, n = time.monotonic(), self._count()
        if self._last is not None and now > self._last[0]:
            # max(0, ...): CONFIG RESETSTAT sets the count back to 0
            self._samples.append(max(0, n - self._last[1]) / (now - self._last[0]))
        self._last = (now, n)
        self._timer = asyncio.get_running_loop().call_later(self.PERIOD, self._tick)

    def rate(self) -> int:
        if self._timer is None:
            self._tick()
        return round(sum(self._samples) / len(self._samples)) if self._samples else 0

    def reset(self) -> None:
        self._samples.clear()
        self._last = None if self._timer is None else (time.monotonic(), self._count())


class App:
    def __init__(
        self, config: Config, node: Assembled, hot: Mapping[bytes, FastCommand], slow: Slow | None = None
    ) -> None:
        self.config = config
        self.node = node
        self.store = node.store
        self.groups = node.groups
        self.keyspace: Keyspace | Keyspaces = node.groups.keyspace
        self.users = node.users
        self.acl_log = AclLog()
        self.auth_throttle = AuthThrottle()  # failed AUTHs per address and per user, across connections
        self.link_throttle = AuthThrottle()  # failed link proofs per address and per claimed node: apart from AUTH's
        self.clients: dict[int, Connected] = {}
        self.stats = Stats()
        self.ops_rate = OpsRate(lambda: self.stats.commands)
        self.config_changed: set[str] = set()  # options changed by CONFIG SET, for CONFIG REWRITE
        self.started = time.time()
        self.started_mono = time.monotonic()
        self.run_id = os.urandom(20).hex()
        self.port = config.port
        self.tls_port = 0  # the TLS port listened on (0: none)
        self.forward_port = 0  # the forwarding port listened on (0: none; ``forward_port``)
        self.max_clients = config.max_clients  # lowered at start if the file-descriptor limit is lower
        self._ids = itertools.count(1)
        self.shutdown_requested: asyncio.Event | None = None
        self.closers: dict[int, Callable[[], None]] = {}
        # observability: what the server counts and records, read by /metrics, SLOWLOG, LATENCY, MONITOR
        self.metrics = NodeMetrics(node.commands)
        self.slowlog = SlowLog()
        self.latency = LatencyMonitor()
        self.monitors = Monitors()
        self.pubsub = PubSub()
        self.links = Links(config.cluster_secret)  # forwarding links to other nodes (redirect forward)
        self._hot = node.groups.fast_path(hot, slow)
        self.hot: Mapping[bytes, FastCommand] = self._hot if self.groups.serving_any() else {}
        for group in node.groups:
            group.state.subscribe(self._follow)
        node.shared_users.changed = self._users_changed
        node.shared_users.updated = self._drop_forbidden_subscribers

    def _users_changed(self, removed: list[User]) -> None:
        """Deleted users' connections are closed, as in Redis (a forwarding link, which runs many
        clients' requests, only forgets the user: ``Client.user_removed``); connections that were
        waiting for the users to be known get in if ``default`` needs no password."""
        for client in list(self.clients.values()):
            if client.user in removed and client.user_removed():
                close = self.closers.get(client.id)
                if close is not None:
                    close()
            elif not client.authenticated and client.user is self.users.default:
                client.logout()

    async def _drop_forbidden_subscribers(self, users: list[User]) -> None:
        """Users changed (ACL SETUSER here, or on another node): a connection of theirs subscribed to
        a channel or pattern its user may no longer use is closed, as Redis 7 closes it. Looked at
        ``RECHECK_SLICE`` subscribers per event-loop step (10,000 subscribers never hold the loop)."""
        narrowed = {id(u) for u in users if not u.all_channels}
        if not narrowed or not self.pubsub.subscribers:
            return
        for i, (client_id, sub) in enumerate(list(self.pubsub.subscribers.items())):
            if i and i % RECHECK_SLICE == 0:
                await asyncio.sleep(0)
            client = self.clients.get(client_id)
            if client is None or id(client.user) not in narrowed:
                continue
            user = client.user
            allowed = all(user.may_listen(c, False) for c in sub.channels) and all(
                user.may_listen(p, True) for p in sub.patterns
            )
            close = self.closers.get(client_id)
            if not allowed and close is not None:
                close()

    def switch_master(self, old: NodeInfo | None, new: NodeInfo) -> None:
        """The primary changed (``Directory.on_primary_change``): ``+switch-master`` to subscribers."""
        self.pubsub.switch_master(self.config.sentinel_master_name.encode(), old, new)

    def _follow(self, change: Change) -> None:
        self.hot = self._hot if self.groups.serving_any() else {}

    def readiness(self, warm: bool = True) -> str | None:
        """None when this node can serve a plain client every key now, else why not
        (``march.cluster.readiness``; ``warm``: on the event loop, ask for missing links)."""
        stopping = self.shutdown_requested is not None and self.shutdown_requested.is_set()
        return readiness(self.groups, self.links, self.config, self.users.loaded, stopping, warm)

    @property
    def cluster(self) -> bool:
        return self.config.cluster

    def next_client_id(self) -> int:
        return next(self._ids)

    def request_shutdown(self) -> None:
        if self.shutdown_requested is not None:
            self.shutdown_requested.set()

    def reconfigure(self, new: Config) -> None:
        """CONFIG SET: serve with ``new`` from now on (already validated, every change at once).

        Most values are read from ``app.config`` at use time; this pushes them to what holds its own
        copy. Only options declared ``live`` in ``config.OPTIONS`` differ between ``new`` and the old
        config (the command refuses the rest), so the node's and the keyspace's other settings stay
        as they were started. Limits of the parser apply to connections opened after the change.
        """
        old, self.config = self.config, new
        changed = {o.name for o in OPTIONS if getattr(old, o.name) != getattr(new, o.name)}
        self.config_changed |= changed
        self.node.config = self.node.shared_users.config = new  # (requirepass itself: stored by CONFIG SET)
        self.keyspace.reconfigure(new)
        if "max_clients" in changed:
            self.max_clients = clients_the_fd_limit_allows(new.max_clients)
        if changed & {"log_level", "log_format", "requirepass"}:  # (a new password is redacted from logs)
            march_log.apply(new)
        if "slowlog_max_len" in changed:  # a shorter SLOWLOG drops its oldest entries now
            self.slowlog.resize(new.slowlog_max_len)  # (slowlog_log_slower_than: read per request)
