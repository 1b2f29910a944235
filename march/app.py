"""Server-wide state shared by every connection: config, node (store, group, users), clients, counters.

``App`` is built once by the server and handed to every ``Client``; command handlers reach the
keyspace, the group, the config and the statistics through it.

``hot`` is the server's fast-path table: the hot commands while the group serves, empty otherwise
(then every request goes through the dispatcher, which waits or redirects). It is derived from the
group's serving state on every change, never set by hand.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from .auth import AclLog
from .config import Config
from .serving import Change, Phase

if TYPE_CHECKING:
    from .auth import User
    from .client import Client
    from .commands.registry import Hot
    from .node import Node

VERSION = "0.1.0"
REDIS_COMPAT_VERSION = "7.0.0"  # what HELLO and INFO report as redis_version: the command set we follow


class Stats:
    __slots__ = (
        "commands",
        "connections",
        "denied_auth",
        "denied_command",
        "denied_key",
        "errors",
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
        self.denied_auth = 0  # failed AUTHs (INFO: acl_access_denied_auth)
        self.denied_command = 0  # NOPERM for a command
        self.denied_key = 0  # NOPERM for a key


class App:
    def __init__(self, config: Config, node: Node, hot: Mapping[bytes, Hot]) -> None:
        self.config = config
        self.node = node
        self.store = node.store
        self.group = node.group
        self.keyspace = node.group.keyspace
        self.users = node.users
        self.acl_log = AclLog()
        self.clients: dict[int, Client] = {}
        self.stats = Stats()
        self.started = time.time()
        self.started_mono = time.monotonic()
        self.run_id = os.urandom(20).hex()
        self.port = config.port
        self.tls_port = 0  # the TLS port listened on (0: none)
        self.max_clients = config.max_clients  # lowered at start if the file-descriptor limit is lower
        self._ids = itertools.count(1)
        self.shutdown_requested: asyncio.Event | None = None
        self.closers: dict[int, Callable[[], None]] = {}
        self._hot = hot
        state = node.group.state
        self.hot: Mapping[bytes, Hot] = hot if state.serving else {}
        state.subscribe(self._follow)
        node.on_users_changed = self._users_changed

    def _users_changed(self, removed: list[User]) -> None:
        """Deleted users' connections are closed, as in Redis; connections that were waiting for the
        users to be known get in if ``default`` needs no password."""
        for client in list(self.clients.values()):
            if client.user in removed:
                close = self.closers.get(client.id)
                if close is not None:
                    close()
            elif not client.authenticated and client.user is self.users.default:
                client.logout()

    def _follow(self, change: Change) -> None:
        self.hot = self._hot if change.phase is Phase.SERVING else {}

    @property
    def cluster(self) -> bool:
        return self.config.cluster

    def next_client_id(self) -> int:
        return next(self._ids)

    def request_shutdown(self) -> None:
        if self.shutdown_requested is not None:
            self.shutdown_requested.set()
