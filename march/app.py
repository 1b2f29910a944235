"""Server-wide state shared by every connection: config, store, keyspace, clients, counters.

``App`` is built once by the server from the ``Config`` and handed to every ``Client``; command
handlers reach the keyspace, the config and the statistics through it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .config import Config
from .generators.base import Lease
from .keyspace import Keyspace
from .store.base import Store

if TYPE_CHECKING:
    from .client import Client
    from .cluster.node import ClusterNode

VERSION = "0.1.0"
REDIS_COMPAT_VERSION = "7.0.0"  # what HELLO and INFO report as redis_version: the command set we follow


class Stats:
    __slots__ = ("commands", "connections", "errors", "protocol_errors", "rejected", "timeouts_closed")

    def __init__(self) -> None:
        self.commands = 0
        self.connections = 0
        self.rejected = 0
        self.errors = 0
        self.protocol_errors = 0
        self.timeouts_closed = 0


class App:
    def __init__(
        self,
        config: Config,
        store: Store,
        lease: Lease,
        hot: Mapping[bytes, Any],
        node: ClusterNode | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.lease = lease
        self.keyspace = Keyspace(config, store, lease)
        self.clients: dict[int, Client] = {}
        self.stats = Stats()
        self.started = time.time()
        self.started_mono = time.monotonic()
        self.run_id = os.urandom(20).hex()
        self.port = config.port
        self._ids = itertools.count(1)
        self.shutdown_requested: asyncio.Event | None = None
        self.closers: dict[int, Callable[[], None]] = {}
        # Cluster mode: the node (role, topology, redirects). The server's fast path for hot
        # commands (``hot``) is on only while this node serves; otherwise every request goes
        # through the dispatcher, which redirects key commands.
        self.node = node
        self._hot = hot
        self.hot: Mapping[bytes, Any] = hot if node is None else {}

    def set_serving(self, serving: bool) -> None:
        if self.node is not None:
            self.hot = self._hot if serving else {}

    def next_client_id(self) -> int:
        return next(self._ids)

    def request_shutdown(self) -> None:
        if self.shutdown_requested is not None:
            self.shutdown_requested.set()
