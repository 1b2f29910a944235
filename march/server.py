"""The node's assembly: ``serve(config, stop)`` builds the ``Node`` and the ``App``, opens the
ports and runs until it is told to stop. The top of the house: it imports the node and the
listeners; nothing below imports it (the listeners and connections are given what it built).

- The ports: the plain one, the TLS one and the forwarding one (``march.transport.listeners``), each
  accepted connection a ``march.transport.connection.Connection``; ``--metrics-port`` serves
  Prometheus (``march.metrics``).
- Observability: the store's transactions go to the metrics, LATENCY and the log (``StoreWatch``).
- Memory: large request buffers get their own mappings from glibc and go back to the system when
  freed (``_give_large_frees_back``), so the memory of clients that held large requests returns
  when they go; what startup made is left out of the garbage collector's full passes
  (``_freeze_startup_objects``).
- Threads: the store's writer (and etcd's gRPC) threads get the interpreter within ``SWITCH_INTERVAL``
  of asking for it, not CPython's 5 ms, so a store write is not held up by the request loop.

Shutdown: stop accepting (every port, the metrics port too; a connection accepted just before is
closed at once), let each connection finish the requests it has read, wait at most
``shutdown_timeout``, then close what is left; wait for store writes in flight, close the store.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import ssl
import sys
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from march import build
from march import log as march_log
from march.app import App
from march.cluster.links import link_tls
from march.commands import call
from march.commands.table import COMMANDS, HOT
from march.config import Config
from march.limits import clients_the_fd_limit_allows
from march.metrics.collector import node_id, registry_for
from march.metrics.endpoint import MetricsServer
from march.node import Node
from march.resp import RequestParser
from march.stats.diagnostics import StoreWatch
from march.store import batch
from march.transport.connection import Connections
from march.transport.listeners import (
    HANDSHAKE_TIMEOUT,
    ListenError,
    TlsListener,
    close_connections,
    close_idle,
    listen,
    listening_sockets,
    tls_context,
)
from march.version import VERSION

__all__ = ["ListenError", "serve", "tls_context"]

log = logging.getLogger("march")

# glibc's threshold above which an allocation gets its own mapping (given back to the system when
# freed). glibc raises it (up to 32 MiB) each time such a block is freed, after which large request
# buffers come from the heap and stay in the process when clients go: pinned at glibc's own start
# value, the memory of clients that held large requests returns to the system when they go.
_MMAP_THRESHOLD = 128 << 10
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


@dataclass
class Ports:
    """What ``serve`` opened, to close at the end."""

    servers: list[asyncio.Server] = field(default_factory=list)
    tls: list[TlsListener] = field(default_factory=list)
    metrics: MetricsServer | None = None

    async def close(self) -> None:
        """Stop accepting: every port, the metrics port too (no new scrapes)."""
        for s in self.servers:
            s.close()
        for listener in self.tls:
            if not listener.closed:
                listener.close()
        if self.metrics is not None:
            metrics, self.metrics = self.metrics, None
            await metrics.stop()


# Seconds the request loop keeps the GIL while a store thread waits for it (CPython's default: 5 ms).
# A store write takes the GIL several times (the thread's start, around each SQLite call, the reply to
# the loop); with the loop busy (a flood) each take waited up to 5 ms: measured, a new key's INCR
# under 20 flooding connections had p99 270-340 ms at 5 ms, 45-49 ms at 0.5 ms. Only a waiting
# thread makes the loop switch, so an idle store costs nothing.
SWITCH_INTERVAL = 0.0005


async def serve(config: Config, stop: Awaitable[Any], ready: asyncio.Future[int] | None = None) -> None:
    """Run a node until ``stop`` completes or SHUTDOWN is called.

    The store opens first (a locked or unwritable data dir fails before listening). A single node
    serves as soon as it listens; a cluster node listens (standbys answer too), then joins:
    election and the rest run in the background.
    """
    loop = asyncio.get_running_loop()
    _give_large_frees_back()
    sys.setswitchinterval(SWITCH_INTERVAL)
    node = Node(config, COMMANDS)
    await node.open()
    app = App(config, node, HOT, call)
    app.max_clients = clients_the_fd_limit_allows(config.max_clients)
    app.shutdown_requested = asyncio.Event()
    peers = Connections(app, RequestParser)
    ports = Ports()
    store_watch = StoreWatch(app.metrics, app.latency).chunk  # store transactions: metrics, LATENCY, logs
    batch.listeners.append(store_watch)
    try:
        await _open(app, node, peers, ports)
        _freeze_startup_objects()
        if ready is not None and not ready.done():
            ready.set_result(app.port)
        idle = loop.create_task(close_idle(app, peers.all))  # always: CONFIG SET timeout may turn it on
        stopper = asyncio.ensure_future(stop)
        requested = loop.create_task(app.shutdown_requested.wait())
        failed = loop.create_task(node.failed.wait())  # e.g. its node id is another live process's
        await asyncio.wait({stopper, requested, failed}, return_when=asyncio.FIRST_COMPLETED)
        log.info("shutting down")
        await node.hand_over()  # (cluster) planned hand-overs first, while connections still get their replies
        app.shutdown_requested.set()
        for t in (stopper, requested, idle, failed):
            if not t.done():
                t.cancel()
        await ports.close()
        await close_connections(peers.all, config.shutdown_timeout)
    finally:
        await ports.close()
        await app.links.close()  # forwarding links (redirect forward)
        await node.stop()  # steps down (a primary gives the leader key back at once), drains, closes
        batch.listeners.remove(store_watch)
    log.info("March stopped")
    if node.failure is not None:
        raise node.failure  # the caller says why and exits with status 1


async def _open(app: App, node: Node, peers: Connections, ports: Ports) -> None:
    """Open the ports (plain, TLS, forwarding, metrics) and join the node's group."""
    config = app.config
    server = await listen(app, peers, config.bind, config.port)
    ports.servers.append(server)
    app.port = server.sockets[0].getsockname()[1]
    log.info(
        "March %s ready to accept connections on %s:%d (store: %s, build: %s)",
        VERSION,
        config.bind,
        app.port,
        node.store.name,
        build.summary(),
    )
    if not build.compiled:  # once per start: the per-read path runs interpreted (docs/compiled.md)
        level = logging.INFO if build.chosen_pure() else logging.WARNING
        log.log(level, "the per-read path runs as pure Python: %s", build.reason)
    if config.tls_port:
        context = tls_context(config)
        handshake = min(HANDSHAKE_TIMEOUT, config.timeout or HANDSHAKE_TIMEOUT)
        for sock in listening_sockets(config.bind, config.tls_port):
            ports.tls.append(TlsListener(app, peers, sock, context, handshake))
            ports.tls[-1].start()
        app.tls_port = ports.tls[0].port
        log.info("TLS on %s:%d (client certificates: %s)", config.bind, app.tls_port, config.tls_auth_clients)
    if config.forward_port:  # every key served, by forwarding: for plain and Sentinel clients
        forwarding = await listen(app, peers, config.bind, config.forward_port, forwarding=True)
        ports.servers.append(forwarding)
        app.forward_port = forwarding.sockets[0].getsockname()[1]
        log.info("forwarding port on %s:%d (every key, for plain and Sentinel clients)", config.bind, app.forward_port)
    node.join(app.port, app.tls_port, app.forward_port)
    member = app.groups.member
    if member is not None:  # Sentinel clients that listen hear of a failover (march.cluster.announce)
        member.directory.on_primary_change(app.switch_master)
        try:
            app.links.tls = link_tls(config)
        except (OSError, ssl.SSLError) as exc:
            raise ListenError(f"TLS links (tls_cluster): {exc}") from exc
    march_log.set_node(node_id(app))
    app.links.name = node_id(app)  # what this node proves to be on forwarding links, both ways
    if config.metrics_port:
        ports.metrics = MetricsServer(
            registry_for(app),
            config.metrics_max_connections,
            config.metrics_timeout,
            ready=app.readiness,
            max_per_address=config.metrics_max_connections_per_address,
        )
        try:
            port = await ports.metrics.start(config.bind, config.metrics_port)
        except OSError as exc:
            raise ListenError(f"metrics: cannot listen on {config.bind}:{config.metrics_port}: {exc}") from exc
        log.info("Prometheus metrics on http://%s:%d/metrics", config.bind, port)


def _freeze_startup_objects() -> None:
    """Leave what startup made (modules, the command table, the store: some 35,000 objects that live
    as long as the process) out of the garbage collector's full passes. Each such pass walked them
    all: measured, 20-57 ms of a stalled loop, every few thousand pipelined requests."""
    gc.collect()
    gc.freeze()


def _give_large_frees_back() -> None:
    """Pin glibc's mmap threshold (``_MMAP_THRESHOLD``): measured, 300 clients each holding 2 MiB of
    an unfinished request left 134 MB in the process after they went, none with it pinned. Not glibc
    (no ``mallopt``): nothing to do."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
