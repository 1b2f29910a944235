"""A connection's MONITOR feed (march/transport/feed.py), with a real node (SQLite store in the test's
directory), its ``App`` and a ``Client``: which requests the monitors see and how, when a
connection is "watched" (never the fast path), and how lines for a monitor are written and bounded.

The connection is stood for by ``Sink`` below (closing, its back-pressure over a real transport
on a socket pair, and ``drop``).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from march import config as config_module
from march.app import App
from march.client import Client
from march.cluster.announce import Subscriber
from march.commands.table import COMMANDS, HOT
from march.node import Node
from march.transport.feed import MonitorFeed
from march.transport.flow import Backpressure

OUTPUT_LIMIT = 1 << 16  # max_output_buffer here (its least)


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[App]:
    config = config_module.load(
        None, {}, {"data_dir": str(tmp_path / "data"), "max_output_buffer": OUTPUT_LIMIT, "requirepass": "pw"}
    )
    node = Node(config, COMMANDS)
    await node.open()
    try:
        yield App(config, node, HOT)
    finally:
        await node.stop()


@dataclass
class Sink:
    """The connection: closing or not, its back-pressure on ``transport``, what it was told to drop."""

    transport: asyncio.Transport
    app: App
    closing: bool = False
    busy: bool = False
    drops: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.flow = Backpressure(self.transport, self.app, self)

    def run(self, requests: list[list[bytes]], start: int, same_until: int) -> None:
        raise AssertionError("a feed never runs requests")

    def drop(self, why: str) -> None:
        self.drops.append(why)
        self.closing = True


def client_of(app: App, cid: int) -> Client:
    client = Client(app, cid, f"127.0.0.1:{5000 + cid}", "127.0.0.1:7379")
    client.login(app.users.default)
    return client


@pytest.fixture
async def pair() -> AsyncIterator[tuple[asyncio.Transport, socket.socket]]:
    ours, theirs = socket.socketpair()
    transport, _ = await asyncio.get_running_loop().connect_accepted_socket(asyncio.Protocol, ours)
    theirs.setblocking(False)
    try:
        yield transport, theirs
    finally:
        transport.abort()
        theirs.close()


def watching(app: App) -> list[bytes]:
    """A monitor (client id 99) that records its lines."""
    lines: list[bytes] = []
    app.monitors.add(99, lines.append)
    return lines


async def test_monitors_see_requests_as_redis_shows_them(
    app: App, pair: tuple[asyncio.Transport, socket.socket]
) -> None:
    lines = watching(app)
    client = client_of(app, 1)
    feed = MonitorFeed(client, Sink(pair[0], app), app.monitors.feeds, app.pubsub.subscribers)
    feed.show([b"INCR", b"orders"])
    assert len(lines) == 1 and lines[0].endswith(b' [0 127.0.0.1:5001] "INCR" "orders"\r\n')
    feed.show([b"AUTH", b"secret"])  # passwords redacted
    assert lines[1].endswith(b'"AUTH" "(redacted)"\r\n')
    feed.show([b"INCR", b"orders"], 3)  # a run of identical requests answered together: each shown
    assert len(lines) == 5
    feed.show([b"CONFIG", b"SET", b"timeout", b"0"])  # admin: not shown, as in Redis
    feed.show([b"INCR"])  # wrong arity: refused, not shown
    feed.show([b"NOSUCH"])
    client.multi = []
    feed.show([b"INCR", b"orders"])  # queued by MULTI: shown when EXEC runs it
    assert len(lines) == 5


async def test_a_monitor_or_subscriber_is_watched(app: App, pair: tuple[asyncio.Transport, socket.socket]) -> None:
    client = client_of(app, 1)
    feed = MonitorFeed(client, Sink(pair[0], app), app.monitors.feeds, app.pubsub.subscribers)
    assert not feed.watched()
    watching(app)  # someone else monitors: this connection is not watched
    assert not feed.watched()
    feed.start()
    assert feed.watched() and app.monitors.feeds[1] == feed.line
    app.monitors.remove(1)
    assert not feed.watched()
    app.pubsub.get(1, lambda: Subscriber(client.push, lambda: 2, False))
    assert feed.watched()


async def test_lines_for_a_monitor_are_written_and_bounded_by_max_output_buffer(
    app: App, pair: tuple[asyncio.Transport, socket.socket]
) -> None:
    transport, peer = pair
    sink = Sink(transport, app)
    feed = MonitorFeed(client_of(app, 1), sink, app.monitors.feeds, app.pubsub.subscribers)
    feed.line(b"+line\r\n")
    await asyncio.sleep(0)
    assert peer.recv(100) == b"+line\r\n"
    big = b"+" + b"x" * (OUTPUT_LIMIT * 64) + b"\r\n"  # more than the socket takes: the rest stays buffered
    feed.line(big)
    assert sink.flow.over_limit() and sink.drops == []  # (not paused yet: the transport's own mark decides)
    sink.flow.paused = True  # as pause_writing leaves it
    feed.line(b"+more\r\n")
    assert sink.drops == ["unread replies over max_output_buffer"]
    buffered = transport.get_write_buffer_size()
    feed.line(b"+after\r\n")  # closing: nothing more is written
    assert transport.get_write_buffer_size() == buffered
