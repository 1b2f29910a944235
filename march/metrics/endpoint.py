"""``GET /metrics``: the HTTP endpoint that serves what the collector builds; ``GET /ready``: 200
when the node can serve every key now, else 503 and why (a load balancer's health check).

``MetricsServer`` answers on ``bind:metrics_port`` (prometheus-client's exposition, a registry of
our own, never the global one). A body is rendered at most once a second, on a thread of its own,
and shared by every scrape of that second; the port takes at most ``metrics_max_connections``
connections, at most ``metrics_max_connections_per_address`` of them from one address, each with
``HEAD_TIMEOUT`` (1 s) to send its request head and ``metrics_timeout`` seconds to take the reply;
a newcomer at the limit closes the connection that has waited longest for its head, from the
address that holds the most (see the class).

What this module must never do: block the loop for long, let a scraper hold the node's memory, or
let one address (or a few) take the port from the load balancer's probe and the scraper.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger("march.metrics")

_REQUEST_LIMIT = 8192  # bytes of an HTTP request head the metrics endpoint reads
_REQUEST_TIMEOUT = 5.0  # seconds a scraper has to take the reply (metrics_timeout)
# A probe or a scraper sends its whole request head in one write, right after it connects: a second
# covers any round trip, and a connection that sends it slowly (a slowloris) holds its slot no longer.
HEAD_TIMEOUT = 1.0
_PER_ADDRESS = 4  # connections one address may hold (metrics_max_connections_per_address): a scraper or two, a probe
# Seconds a rendered /metrics body is served again: Prometheus scrapes every 15 s by default, so one
# render a second keeps every scraper current while a flood of scrapes costs one render a second.
RENDER_INTERVAL = 1.0
_RENDER_ATTEMPTS = 3  # a render off the loop that met a dict changing size is tried again
_REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 37\r\n"
    b"Connection: close\r\n\r\ntoo many connections to metrics port\n"
)
_REFUSED_ADDRESS = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 55\r\n"
    b"Connection: close\r\n\r\ntoo many connections from this address to metrics port\n"
)


@dataclass(eq=False)
class _Connection:
    """One connection being served: where from, since when, and whether its request head came."""

    address: str
    writer: asyncio.StreamWriter
    since: float
    head: bool = False  # its request head has come: it is being answered, never evicted
    evicted: bool = False  # closed to make room for a newcomer (already uncounted)


class MetricsServer:
    """``GET /metrics`` on ``bind:port``. ``start`` / ``stop``.

    What a scraper may cost the node, whoever it is:

    - **Connections**: at most ``max_per_address`` from one address: one more from it gets ``503``
      at once (its request unread) and is closed, so one address (16 or 1,000 slow connections)
      never takes every slot. At most ``max_connections`` in all: a newcomer then closes the
      connection still waiting for its request head whose address holds the most (the oldest of
      those), so slow connections from many addresses cannot hold the port either: a probe's or a
      scraper's head comes with its connection, it waits for nothing. Only when every connection
      is being answered is the newcomer refused (``503``). Choosing costs a pass over the
      connections (at most ``max_connections``), only at the limit.
    - **Time**: a connection has ``head_timeout`` seconds (``HEAD_TIMEOUT``, at most ``timeout``)
      to send its request head, then ``timeout`` seconds to take the reply; past either it is cut
      (aborted, its unsent bytes dropped), so a silent, slow or non-reading client holds nothing
      for long.
    - **Renders**: a body is rendered at most once per ``interval`` (from the start of one render to
      the next) and shared: scrapes that arrive while one renders wait for it, later ones in the
      interval get it as it is. Prometheus scrapes every 15 s by default; 200 scrapes a second cost
      what one does.
    - **The loop**: a render reads the node's counters and state and formats text, work that grows
      with commands and active sequences; it runs on a thread of its own (one render at a time), so
      it is never a long step of the event loop: the loop only waits for the GIL's switch interval
      (5 ms) now and then while it runs. It reads plain ints and dicts the loop mutates; a dict that
      changed size under it is read again (``_RENDER_ATTEMPTS``).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        max_connections: int = 16,
        timeout: float = _REQUEST_TIMEOUT,
        interval: float = RENDER_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        ready: Callable[[], str | None] | None = None,
        max_per_address: int = _PER_ADDRESS,
    ) -> None:
        self.registry = registry
        self.ready = ready  # None when the node can serve, else why not (``GET /ready``)
        self.max_connections = max_connections
        self.max_per_address = max_per_address
        self.timeout = timeout
        self.head_timeout = min(HEAD_TIMEOUT, timeout)
        self.interval = interval
        self._clock = clock
        self.server: asyncio.Server | None = None
        self.port = 0
        self.open = 0  # connections being served now
        self.renders = 0
        self.refused = 0  # connections over max_connections, nothing to evict
        self.refused_address = 0  # connections over max_per_address
        self.evicted = 0  # connections still sending their head, closed to make room for a newcomer
        self.cut = 0  # connections closed for taking longer than ``head_timeout`` / ``timeout``
        self._connections: set[_Connection] = set()
        self._per_address: dict[str, int] = {}
        self._body = b""
        self._rendered_at = -math.inf
        self._rendering: asyncio.Future[bytes] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        registry.register(_ScrapeStats(self))

    async def start(self, bind: str, port: int) -> int:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="march-metrics")
        self.server = await asyncio.start_server(self._handle, bind, port, reuse_address=True, limit=_REQUEST_LIMIT)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for task in list(self._handlers):
                task.cancel()
            if self._handlers:
                await asyncio.wait(self._handlers, timeout=1.0)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 1.0)
            self.server = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)  # a render in progress takes milliseconds
            self._pool = None

    async def render(self) -> bytes:
        """The body: the one rendered in this interval, the one being rendered, or a new one."""
        if self._rendering is not None:
            return await asyncio.shield(self._rendering)
        if self._clock() - self._rendered_at < self.interval:
            return self._body
        loop = asyncio.get_running_loop()
        self._rendered_at = self._clock()
        self._rendering = loop.run_in_executor(self._pool, self._render)
        try:
            self._body = await asyncio.shield(self._rendering)
        except Exception:
            self._rendered_at = -math.inf  # nothing new to share: the next scrape renders again
            raise
        finally:
            self._rendering = None
        return self._body

    def _render(self) -> bytes:
        """On the render thread."""
        self.renders += 1
        for attempt in range(_RENDER_ATTEMPTS):
            try:
                return generate_latest(self.registry)
            except RuntimeError:  # a dict the loop changed while it was read ("changed size during iteration")
                if attempt == _RENDER_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if self._per_address.get(address, 0) >= self.max_per_address:
            self.refused_address += 1
            writer.write(_REFUSED_ADDRESS)
            writer.close()  # a few bytes: the socket buffer takes them, nothing waits
            return
        if self.open >= self.max_connections and not self._evict():
            self.refused += 1
            writer.write(_REFUSED)
            writer.close()
            return
        conn = _Connection(address, writer, self._clock())
        self._count(conn, 1)
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            await self._serve(reader, writer, conn)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # a scraper that went away or sent nonsense (or was evicted): nothing to answer
        except TimeoutError:  # too slow sending its request or taking the reply
            self.cut += 1
            writer.transport.abort()
        except asyncio.CancelledError:
            writer.transport.abort()
            raise
        except Exception:
            log.exception("metrics endpoint failed")
        finally:
            if not conn.evicted:
                self._count(conn, -1)
            if task is not None:
                self._handlers.discard(task)
            writer.close()

    def _count(self, conn: _Connection, step: int) -> None:
        """Count ``conn`` in (1) or out (-1): in all, and for its address."""
        self.open += step
        held = self._per_address.get(conn.address, 0) + step
        if held > 0:
            self._per_address[conn.address] = held
        else:
            self._per_address.pop(conn.address, None)
        if step > 0:
            self._connections.add(conn)
        else:
            self._connections.discard(conn)

    def _evict(self) -> bool:
        """Make room for a newcomer at ``max_connections``: close the connection still waiting for
        its request head whose address holds the most connections (the oldest of those). False
        if every connection is being answered (the newcomer is refused)."""
        waiting = [c for c in self._connections if not c.head]
        if not waiting:
            return False
        held = self._per_address
        victim = min(waiting, key=lambda c: (-held.get(c.address, 0), c.since))
        victim.evicted = True
        self._count(victim, -1)  # counted out now: its handler ends on its next step
        self.evicted += 1
        victim.writer.transport.abort()
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: _Connection) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.head_timeout)
        conn.head = True
        method, _, rest = head.partition(b" ")
        path = rest.partition(b" ")[0].partition(b"?")[0]
        if method not in (b"GET", b"HEAD"):
            status, body, kind = b"405 Method Not Allowed", b"GET /metrics\n", b"text/plain"
        elif path == b"/metrics":
            status, body, kind = b"200 OK", await self.render(), CONTENT_TYPE_LATEST.encode()
        elif path == b"/ready" and self.ready is not None:
            why = self.ready()
            status = b"200 OK" if why is None else b"503 Service Unavailable"
            body, kind = b"ready\n" if why is None else f"not ready: {why}\n".encode(), b"text/plain"
        elif path == b"/":
            status, body, kind = b"200 OK", b"March metrics: /metrics, /ready\n", b"text/plain"
        else:
            status, body, kind = b"404 Not Found", b"not found: try /metrics\n", b"text/plain"
        writer.write(
            b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            % (status, kind, len(body))
        )
        if method != b"HEAD":
            writer.write(body)
        writer.close()  # flushes what is left, then closes: the reply has ``timeout`` seconds to go
        await asyncio.wait_for(writer.wait_closed(), self.timeout)


class _ScrapeStats(Collector):
    """The metrics endpoint's own figures, in its body."""

    def __init__(self, server: MetricsServer) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        s = self.server
        yield CounterMetricFamily("march_metrics_renders", "/metrics bodies rendered (shared by scrapes).", s.renders)
        yield GaugeMetricFamily("march_metrics_connections", "Connections to the metrics port open now.", s.open)
        closed = CounterMetricFamily(
            "march_metrics_closed_connections",
            "Metrics-port connections refused (max connections; per address), evicted (still sending their "
            "request head when a newcomer needed the room) or cut (too slow).",
            labels=["reason"],
        )
        closed.add_metric(["refused"], s.refused)
        closed.add_metric(["refused_address"], s.refused_address)
        closed.add_metric(["evicted"], s.evicted)
        closed.add_metric(["cut"], s.cut)
        yield closed
